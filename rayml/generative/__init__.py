"""Generative models on manifolds and in ambient space (ICML 2025 methods).

- ``manifold_diffusion``: Efficient Diffusion Models for Symmetric Manifolds (Mangoubi, He &
  Vishnoi): the projected Euclidean process on the torus, sphere, SO(n) and U(n)
  (``manifolds``), trained by the Ito's-lemma regression, with the heat-kernel RSGM and
  Euclidean-then-project baselines.
- ``diffadvmap``: DiffAdvMAP, unrestricted adversarial examples as MAP estimation under the
  digits diffusion prior of ``rayml.purify.diffusion``, with PGD, guided-diffusion and semantic
  baselines.
- ``inrflow``: INRFlow (flow matching transformers in ambient space): the conditionally
  independent point-wise objective over (coordinate, value) sets for images and point clouds,
  resolution-free sampling (``inrflow_baselines``: equal-size grid MLP and point transformer;
  ``inrflow_data``: digits / shape clouds, FID-like and Chamfer metrics).
"""

__all__ = ["manifolds", "manifold_diffusion", "diffadvmap", "inrflow", "inrflow_baselines", "inrflow_data"]
