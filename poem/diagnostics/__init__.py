"""Propensity sanity checks and diagnostic plots."""
