"""Serving: the MLflow pyfunc of a policy (request parsing, served propensities) and its server."""
