"""Small training helpers shared by the methods' cores (no Ray import)."""

from rayml.training.early_stopping import EarlyStopping

__all__ = ["EarlyStopping"]
