"""Serving (MLflow pyfunc), Prefect deployments and the closed loop."""
