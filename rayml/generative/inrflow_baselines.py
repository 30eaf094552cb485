"""Baselines of INRFlow at an equal parameter count, with the same forward signature.

- ``GridMLPFlow``: a flow-matching velocity field on the fixed pixel grid (the image flattened to one
  vector, residual MLP blocks with adaLN time conditioning, and a time-dependent per-pixel skip of the
  noisy value, the grid counterpart of INRFlow's final layer reading the query's own value: without
  it the MLP's narrow hidden layer cannot pass the noise through). It only knows the grid it was built for:
  asking it for another resolution is a ``ValueError`` (no coordinates enter it).
- ``PointTransformerFlow``: a point-cloud flow model *without* the point-wise decoder: every point
  is a token and the velocity of each point comes from self-attention over all points (a DiT over
  point tokens, Fourier position features as INRFlow's), so points are not conditionally
  independent given a latent summary.

``match_width`` picks the width whose parameter count is closest to a target (the INRFlow model's).
Both train with ``rayml.generative.inrflow.train`` (``query_fraction = 1``) and sample with its ODE
sampler.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from rayml.generative import inrflow as F

__all__ = ["GridMLPFlow", "PointTransformerFlow", "match_width"]


class _ResBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.ada = F._adaln(dim, 3)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, h, c):
        shift, scale, gate = self.ada(c).chunk(3, dim=1)
        return h + gate * self.mlp(self.norm(h) * (1 + scale) + shift)


class GridMLPFlow(nn.Module):
    """Velocity ``v(y_t, t)`` of a whole ``resolution x resolution`` image as one vector."""

    def __init__(self, resolution: int, width: int, depth: int = 3):
        super().__init__()
        F.image_grid(resolution)
        for key, v in (("width", width), ("depth", depth)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
        self.resolution = resolution
        n = resolution * resolution
        self.time = F._TimeEmbed(width)
        self.inp = nn.Linear(n, width)
        self.blocks = nn.ModuleList(_ResBlock(width) for _ in range(depth))
        self.out = F._FinalLayer(width, width, n)
        self.skip = nn.Linear(width, n)
        nn.init.zeros_(self.skip.weight)
        nn.init.zeros_(self.skip.bias)

    def forward(self, context_x, context_y, t, query_x, query_y):
        n = self.resolution * self.resolution
        if query_y.shape[1] != n or context_y.shape[1] != n:
            raise ValueError(f"GridMLPFlow works on its {self.resolution}x{self.resolution} grid only "
                             f"({n} pixels), got {query_y.shape[1]} queries")
        c = self.time(t)
        h = self.inp(query_y[..., 0])
        for blk in self.blocks:
            h = blk(h, c)
        return (self.out(h[:, None], c)[:, 0] + self.skip(c) * query_y[..., 0])[..., None]


class PointTransformerFlow(nn.Module):
    """Velocity of every point from self-attention over all points (no latents, no point-wise decoder)."""

    def __init__(self, width: int, depth: int = 2, heads: int = 4, mlp_ratio: float = 2.0, fourier_freqs: int = 6):
        super().__init__()
        if isinstance(width, bool) or not isinstance(width, int) or width < 2 * heads or width % (2 * heads):
            raise ValueError(f"width must be a positive multiple of 2 * heads ({2 * heads}), got {width!r}")
        self.freqs = fourier_freqs
        fdim = 2 * 3 * fourier_freqs
        self.time = F._TimeEmbed(width)
        self.px, self.py, self.cat = F._proj(fdim, width), F._proj(3, width), F._proj(2 * width, width)
        self.blocks = nn.ModuleList(F._DiTBlock(width, heads, mlp_ratio) for _ in range(depth))
        self.final = F._FinalLayer(2 * width, width, 3)

    def forward(self, context_x, context_y, t, query_x, query_y):
        c = self.time(t)
        qy = self.py(query_y)
        h = self.cat(torch.cat([self.px(F._fourier(query_y, self.freqs)), qy], dim=-1))
        for blk in self.blocks:
            h = blk(h, c)
        return self.final(torch.cat([h, qy], dim=-1), c)


def match_width(build: Callable[[int], nn.Module], target: int, widths) -> int:
    """The width in ``widths`` whose ``build(width)`` has the parameter count closest to ``target``
    (a bisection: the count grows with the width)."""
    widths = sorted(set(widths))
    if not widths:
        raise ValueError("widths must not be empty")
    lo, hi = 0, len(widths) - 1
    while lo < hi:  # the first width whose count reaches the target
        mid = (lo + hi) // 2
        if F.param_count(build(widths[mid])) < target:
            lo = mid + 1
        else:
            hi = mid
    near = widths[max(0, lo - 1): lo + 1]
    return min(near, key=lambda w: (abs(F.param_count(build(w)) - target), w))
