"""Causal inference: partial identification of treatment effects."""
