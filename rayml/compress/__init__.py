"""Compression of 3D Gaussian splatting data.

- ``splatting``: a small differentiable 3DGS renderer (torch, CPU) and image metrics;
- ``scenes``: procedural objects, ray-cast views and SfM-like points;
- ``hybridgs``: HybridGS's compact explicit generation and rate control (ICML 2025);
- ``codec``: its point-cloud coding with Google Draco, and raw-attribute baselines;
- ``ply``: standard 3DGS ``.ply`` files (a user's trained scene in, ``Gaussians`` out);
- ``entropy``: a learned-entropy ("implicit") codec for comparison.

``codec`` needs ``DracoPy`` and ``entropy`` needs ``constriction`` (the ``compress`` extra); both are
imported only when coding.
"""

from rayml.compress import hybridgs, scenes, splatting

__all__ = ["hybridgs", "scenes", "splatting"]
