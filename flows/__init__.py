"""Prefect flows and tasks, MLflow tracking and registry, configuration and the CLI."""
