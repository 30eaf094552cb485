"""Federated methods: FedAG (cross-silo federated adapter generalization of a CLIP-style encoder)."""

from rayml.federated import fedag, fedag_data

__all__ = ["fedag", "fedag_data"]
