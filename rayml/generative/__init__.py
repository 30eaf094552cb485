"""Generative models on manifolds and in ambient space (ICML 2025 methods).

- ``manifold_diffusion``: Efficient Diffusion Models for Symmetric Manifolds (Mangoubi, He &
  Vishnoi): the projected Euclidean process on the torus, sphere, SO(n) and U(n)
  (``manifolds``), trained by the Ito's-lemma regression, with the heat-kernel RSGM and
  Euclidean-then-project baselines.
"""

__all__ = ["manifolds", "manifold_diffusion"]
