"""Diffusion-based adversarial purification: a small digits diffusion model, DiffPure, GDMP, SSNI.

Modules: ``diffusion`` (score network, forward/reverse process, DiffPure, GDMP), ``classifier``
(the CNN it protects), ``ssni`` (sample-specific score-aware noise injection), ``attacks`` (PGD,
PGD+EOT through the purification, BPDA+EOT), ``pool`` (purification on Ray actors) and
``adapters`` (pretrained diffusers UNets as the noise predictor; needs the optional ``diffusers``).
"""

__all__ = ["diffusion", "classifier", "ssni", "attacks", "pool", "adapters"]
