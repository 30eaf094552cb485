"""Baselines of INRFlow at an equal parameter count, with the same forward signature.

- ``GridMLPFlow``: a flow-matching velocity field on the fixed pixel grid (the image flattened to one
  vector, residual MLP blocks with adaLN time conditioning, and a time-dependent per-pixel skip of the
  noisy value, the grid counterpart of INRFlow's final layer reading the query's own value: without
  it the MLP's narrow hidden layer cannot pass the noise through). It only knows the grid it was built for:
  asking it for another resolution is a ``ValueError`` (no coordinates enter it).
- ``GridUNetFlow``: a small time-conditioned U-Net velocity field on the fixed pixel grid (the standard
  pixel-space flow / diffusion architecture: residual conv blocks with GroupNorm and a scale-shift of
  the time embedding, two stride-2 downsamplings, nearest-neighbour upsampling with skip
  concatenations, a zero-initialised output conv). Like the MLP it only knows its own grid (its
  kernels are in pixels of that grid): another resolution is a ``ValueError``.
- ``PointTransformerFlow``: a point-cloud flow model *without* the point-wise decoder: every point
  is a token and the velocity of each point comes from self-attention over all points (a DiT over
  point tokens, Fourier position features as INRFlow's), so points are not conditionally
  independent given a latent summary.

The trivial baselines (no training, no network; the floor a generator must beat before any comparison
between generators means anything):

- ``gaussian_images``: a full-covariance Gaussian fitted to the training images' pixels, sampled and
  clipped to ``[-1, 1]``;
- ``gaussian_blob``: every cloud ``n_points`` draws from one full-covariance Gaussian fitted to all
  training points pooled;
- ``mean_radius_spheres``: every cloud ``n_points`` uniform points on the sphere of the training
  points' mean radius about their mean.

``match_width`` picks the width whose parameter count is closest to a target (the INRFlow model's).
All train with ``rayml.generative.inrflow.train`` (``query_fraction = 1``) and sample with its ODE
sampler.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as Fn
from torch import nn

from rayml.generative import inrflow as F

__all__ = ["GridMLPFlow", "GridUNetFlow", "PointTransformerFlow", "match_width", "gaussian_images", "gaussian_blob",
           "mean_radius_spheres"]


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


def _groupnorm(channels):
    return nn.GroupNorm(math.gcd(4, channels), channels)  # 4 groups where the width allows


class _ConvBlock(nn.Module):
    """GroupNorm-SiLU-conv, scale-shift by the time embedding, GroupNorm-SiLU-conv, residual (DDPM-style)."""

    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1, self.c1 = _groupnorm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, 2 * cout)
        self.n2, self.c2 = _groupnorm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        nn.init.zeros_(self.c2.weight)
        nn.init.zeros_(self.c2.bias)
        self.skip = nn.Identity() if cin == cout else nn.Conv2d(cin, cout, 1)

    def forward(self, h, c):
        scale, shift = self.t(c)[:, :, None, None].chunk(2, dim=1)
        x = self.c1(Fn.silu(self.n1(h)))
        x = self.n2(x) * (1 + scale) + shift
        return self.skip(h) + self.c2(Fn.silu(x))


class GridUNetFlow(nn.Module):
    """Velocity ``v(y_t, t)`` of a ``resolution x resolution`` image from a two-level U-Net of base
    width ``width`` (channels ``width`` at full resolution, ``2 width`` at 1/2 and 1/4)."""

    def __init__(self, resolution: int, width: int):
        super().__init__()
        F.image_grid(resolution)
        if resolution % 4:
            raise ValueError(f"resolution must be divisible by 4 (two 2x downsamplings), got {resolution}")
        if isinstance(width, bool) or not isinstance(width, int) or width < 2:
            raise ValueError(f"width must be an integer >= 2, got {width!r}")
        self.resolution = resolution
        c, c2, td = width, 2 * width, 2 * width
        self.time = nn.Sequential(F._TimeEmbed(td), nn.SiLU())
        self.inp = nn.Conv2d(1, c, 3, padding=1)
        self.d1 = _ConvBlock(c, c, td)
        self.down1 = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.d2 = _ConvBlock(c, c2, td)
        self.down2 = nn.Conv2d(c2, c2, 3, stride=2, padding=1)
        self.mid = _ConvBlock(c2, c2, td)
        self.u2 = _ConvBlock(c2 + c2, c2, td)
        self.u1 = _ConvBlock(c2 + c, c, td)
        self.out_norm = _groupnorm(c)
        self.out = nn.Conv2d(c, 1, 3, padding=1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, context_x, context_y, t, query_x, query_y):
        r = self.resolution
        if query_y.shape[1] != r * r or context_y.shape[1] != r * r:
            raise ValueError(f"GridUNetFlow works on its {r}x{r} grid only ({r * r} pixels), got "
                             f"{query_y.shape[1]} queries")
        c = self.time(t)
        h0 = self.d1(self.inp(query_y[..., 0].view(-1, 1, r, r)), c)  # the row-major image_grid order
        h1 = self.d2(self.down1(h0), c)
        h = self.mid(self.down2(h1), c)
        h = self.u2(torch.cat([Fn.interpolate(h, scale_factor=2.0, mode="nearest"), h1], dim=1), c)
        h = self.u1(torch.cat([Fn.interpolate(h, scale_factor=2.0, mode="nearest"), h0], dim=1), c)
        return self.out(Fn.silu(self.out_norm(h))).view(-1, r * r, 1)


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


def _gaussian(x: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """``n`` draws from the full-covariance Gaussian fitted (maximum likelihood, float64) to the rows of ``x``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    x = x.double()
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"the training data must hold at least 2 samples, got shape {tuple(x.shape)}")
    mu = x.mean(0)
    cov = torch.cov(x.T, correction=0) if x.shape[1] > 1 else x.var(0, correction=0).reshape(1, 1)
    w, v = torch.linalg.eigh(cov)
    root = v * w.clamp_min(0).sqrt()  # cov = root root^T (PSD even where cov is singular)
    z = torch.randn((n, x.shape[1]), generator=torch.Generator().manual_seed(int(seed)), dtype=torch.float64)
    return (mu + z @ root.T).float()


def gaussian_images(train: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """``n`` images ``(n, R, R)`` from a full-covariance Gaussian on the pixels of ``train`` ``(S, R, R)``."""
    if not isinstance(train, torch.Tensor) or train.ndim != 3:
        raise ValueError(f"train must be images (S, R, R), got {getattr(train, 'shape', type(train).__name__)}")
    return _gaussian(train.reshape(train.shape[0], -1), n, seed).reshape(n, *train.shape[1:]).clamp(-1, 1)


def _check_clouds(train):
    if not isinstance(train, torch.Tensor) or train.ndim != 3 or train.shape[-1] != 3:
        raise ValueError(f"train must be point clouds (S, N, 3), got {getattr(train, 'shape', type(train).__name__)}")


def gaussian_blob(train: torch.Tensor, n: int, n_points: int, seed: int) -> torch.Tensor:
    """``n`` clouds ``(n, n_points, 3)``, every point a draw from the Gaussian fitted to all points of
    ``train`` ``(S, N, 3)`` pooled."""
    _check_clouds(train)
    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 1:
        raise ValueError(f"n_points must be an integer >= 1, got {n_points!r}")
    return _gaussian(train.reshape(-1, 3), n * n_points, seed).reshape(n, n_points, 3)


def mean_radius_spheres(train: torch.Tensor, n: int, n_points: int, seed: int) -> torch.Tensor:
    """``n`` clouds ``(n, n_points, 3)`` uniform on the sphere of the mean distance of ``train``'s points
    from their mean, centred there."""
    _check_clouds(train)
    for key, v in (("n", n), ("n_points", n_points)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    pts = train.reshape(-1, 3).double()
    centre = pts.mean(0)
    radius = (pts - centre).norm(dim=1).mean()
    z = torch.randn((n, n_points, 3), generator=torch.Generator().manual_seed(int(seed)), dtype=torch.float64)
    return (centre + radius * z / z.norm(dim=-1, keepdim=True)).float()
