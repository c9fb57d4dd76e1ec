"""Horizon-free learning checked numerically: small instances, float64, exact planners (docs/theory.md)."""
