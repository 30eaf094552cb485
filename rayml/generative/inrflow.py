"""INRFlow: flow matching transformers in ambient space (coordinate in, value out).

"INRFlow: Flow Matching INRs in Ambient Space" (Apple ML research; ICML 2025; an earlier version is
"Coordinate In and Value Out: Training Flow Transformers in Ambient Space", ASFT). A sample is a
set of (coordinate ``x``, value ``y``) pairs: an image is its pixels ``(row, col) -> intensity``, a
point cloud is its points (the coordinate of a point is its own position). Flow matching runs on
the values directly (no compressor):

- path (the linear / rectified-flow interpolant, the authors' ``LinearPath``):
  ``y_t = t y_1 + (1 - t) eps``, ``eps ~ N(0, I)`` per point, target velocity
  ``u_t = y_1 - eps`` (``interpolant``);
- time ``t`` drawn logit-normal(0, 1) (``logit_normal``), squeezed into ``[t_eps, 1 - t_eps]``;
- the conditionally independent point-wise objective (the paper's CICFM):
  ``E_{t, eps} E_{x_q ~ Q} || v_theta(x_q, y_t(x_q) | z(f_t), t) - u_t(x_q) ||^2``: the noisy
  *context* ``f_t = {(x, y_t(x))}`` (every point) is cross-attended into latents ``z(f_t)``, and
  each *query* point, a random subset ``Q`` of the points, is decoded on its own from the latents
  (``cicfm_loss``). The decoder's queries never attend to each other, so given the latents each
  point's velocity is conditionally independent of the others: the field can be queried at any
  coordinate (``velocity``), which is what sampling at an unseen resolution uses;
- architecture (``INRFlow``): for images the spatial-aware latents of the authors'
  ``PatchCAEncoder`` (one latent per patch cell, at the cell's centre, cross-attending to the
  context pairs inside its cell, with the within-cell position embedded), a DiT trunk over the
  latents with adaLN-Zero time conditioning, and a ``PerceiverDecoderBlock`` (cross-attention from
  each query, embedded value + sin-cos coordinate, to the latents, adaLN-Zero) followed by the
  adaLN final layer on ``[decoded, embedded query value]``. For point clouds (the authors'
  ``PointDiT``): learned latents cross-attend to all context points (Fourier-embedded position
  concatenated with the embedded value) in Perceiver blocks (cross-attention + self-attention,
  adaLN-Zero) that re-read the inputs at every trunk level, and the same point-wise decoder;
- sampling (``ode_sample``): Euler steps of the learned ODE from ``t_eps`` to 1 with the EMA
  weights; the context at each step is the current state of the *context points*. At a new
  resolution (``sample_images`` with ``resolution`` not the training one) the query set is the
  training grid followed by the new grid, the context is the training grid, and every point is
  integrated jointly (the authors' ``resfree_image`` notebook); for point clouds the context is the
  first ``context_points`` points of a larger set (``sample_points``).

Checked against the authors' code (``apple-aiml-research/ml-inrflow``: ``model/path.py``,
``model/inrflow.py``, ``model/sampler.py``, ``model/nets/{architectures,encoders,blocks,trunks,
decoders}.py``, ``model/pos_embed.py``, ``processor/*``, ``configs/model/linear_flow.yaml``) and the
abstract; the paper's full text was not read (a review digest of the ASFT version was).

Assumed (small CPU models): widths, depths, latent counts and patch sizes far below the authors'
(hidden 1152, depth 28); the coordinate embedding's frequencies scaled to the training resolution
(``pi`` to ``pi R / 2`` for ``R``-pixel images, as the authors' ``pi`` to ``112 pi`` is for 224-256
pixels: unscaled, a 16-pixel grid aliases them and off-grid queries read arbitrary embeddings); plain multi-head attention with LayerNorm q/k normalisation; an EMA whose
decay warms up as ``min(decay, (1 + k) / (10 + k))`` (runs here are ~10^3 steps, not 10^5); the Euler
ODE sampler for point clouds too (the authors use an SDE sampler with 500 steps there); no class
conditioning (unconditional generation).

Examples:
    >>> import torch
    >>> from rayml.generative import inrflow as F
    >>> model = F.INRFlow(F.ModelConfig(modality="image", hidden=32, depth=1, grid=2))
    >>> x = F.image_grid(8).expand(3, -1, -1)
    >>> v = model(x, torch.zeros(3, 64, 1), torch.full((3,), 0.5), x, torch.zeros(3, 64, 1))
    >>> tuple(v.shape)
    (3, 64, 1)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as Fn
from torch import nn

__all__ = [
    "ModelConfig",
    "TrainConfig",
    "logit_normal",
    "interpolant",
    "image_grid",
    "INRFlow",
    "param_count",
    "cicfm_loss",
    "train",
    "ode_sample",
    "sample_multires",
    "sample_images",
    "sample_points",
    "conditional_resample",
]

MODALITIES = ("image", "points")


# ----------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class ModelConfig:
    """The INRFlow network.

    Attributes:
        modality: ``"image"`` (2-D coordinates, 1 intensity channel) or ``"points"`` (3-D points).
        hidden: token width.
        depth: trunk blocks.
        heads: attention heads.
        grid: images: latents on a ``grid x grid`` patch lattice of ``[0, 1]^2``.
        latents: point clouds: number of learned latents.
        mlp_ratio: MLP width / token width.
        fourier_freqs: point clouds: Fourier frequencies per axis of the position embedding.
        coord_res: images: the training resolution the coordinate embedding is scaled to: its
            frequencies run from ``pi`` to ``pi coord_res / 2`` (the authors': ``pi`` to ``112 pi`` for
            256-pixel images; scaled down here, see the module docstring).
    """

    modality: str = "image"
    hidden: int = 64
    depth: int = 2
    heads: int = 4
    grid: int = 4
    latents: int = 32
    mlp_ratio: float = 2.0
    fourier_freqs: int = 6
    coord_res: int = 16

    def __post_init__(self):
        if self.modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, got {self.modality!r}")
        for key in ("hidden", "depth", "heads", "grid", "latents", "fourier_freqs"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
        if self.hidden % (2 * self.heads) or self.hidden % 4:
            raise ValueError(f"hidden must be divisible by 4 and by 2 * heads, got hidden={self.hidden}, heads={self.heads}")
        if not self.mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be > 0, got {self.mlp_ratio!r}")
        if isinstance(self.coord_res, bool) or not isinstance(self.coord_res, int) or self.coord_res < 2:
            raise ValueError(f"coord_res must be an integer >= 2, got {self.coord_res!r}")

    @property
    def coord_dim(self) -> int:
        return 2 if self.modality == "image" else 3

    @property
    def value_dim(self) -> int:
        return 1 if self.modality == "image" else 3


@dataclass(frozen=True)
class TrainConfig:
    """Training of the point-wise objective (the authors: AdamW 1e-4, EMA 0.999, clip 2.0).

    Attributes:
        steps: optimiser steps.
        batch: samples per step.
        lr: AdamW learning rate.
        query_fraction: share of the points decoded as queries per sample (the authors' images:
            16384 of 65536 pixels, a quarter); ``1.0`` decodes every point.
        ema: EMA decay (warmed up, see the module docstring).
        clip: gradient-norm clip.
        t_eps: time is squeezed into ``[t_eps, 1 - t_eps]``.
        weight_decay: AdamW weight decay.
    """

    steps: int = 500
    batch: int = 32
    lr: float = 1e-3
    query_fraction: float = 0.25
    ema: float = 0.999
    clip: float = 2.0
    t_eps: float = 1e-4
    weight_decay: float = 0.0

    def __post_init__(self):
        for key in ("steps", "batch"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0 < self.query_fraction <= 1:
            raise ValueError(f"query_fraction must be in (0, 1], got {self.query_fraction!r}")
        if not 0 <= self.ema < 1:
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        if not 0 <= self.t_eps < 0.5:
            raise ValueError(f"t_eps must be in [0, 0.5), got {self.t_eps!r}")
        if not self.clip > 0:
            raise ValueError(f"clip must be > 0, got {self.clip!r}")


# ----------------------------------------------------------------------------- the flow-matching path


def logit_normal(n: int, generator: torch.Generator | None = None, m: float = 0.0, s: float = 1.0) -> torch.Tensor:
    """``t = sigmoid(m + s u)``, ``u ~ N(0, 1)``: the logit-normal time sampling (Esser et al. 2024) of
    the authors' ``logit_normal_sample``."""
    return torch.sigmoid(torch.randn(n, generator=generator) * s + m)


def interpolant(t: torch.Tensor, noise: torch.Tensor, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear path: ``y_t = t y_1 + (1 - t) eps`` and its velocity ``u_t = y_1 - eps``.

    ``t`` is one time per sample (shape ``(B,)``); ``noise`` (``eps``, the ``t = 0`` end) and
    ``data`` (``y_1``) are ``(B, N, C)``.
    """
    if noise.shape != data.shape:
        raise ValueError(f"noise and data must have the same shape, got {tuple(noise.shape)} and {tuple(data.shape)}")
    if t.dim() != 1 or t.shape[0] != data.shape[0]:
        raise ValueError(f"t must hold one time per sample ({data.shape[0]}), got shape {tuple(t.shape)}")
    tt = t.view(-1, *([1] * (data.dim() - 1)))
    return tt * data + (1 - tt) * noise, data - noise


def image_grid(resolution: int) -> torch.Tensor:
    """The pixel coordinates of a ``resolution x resolution`` image, ``(1, R*R, 2)`` (row, col) in
    ``[0, 1]`` (``linspace``, row-major), as the authors' ``AbsoluteEmbedding`` grid."""
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 2:
        raise ValueError(f"resolution must be an integer >= 2, got {resolution!r}")
    ax = torch.linspace(0.0, 1.0, resolution)
    rr, cc = torch.meshgrid(ax, ax, indexing="ij")
    return torch.stack([rr.reshape(-1), cc.reshape(-1)], dim=-1)[None]


# ----------------------------------------------------------------------------- building blocks


def _sincos(coord: torch.Tensor, dim: int, res: int = 224) -> torch.Tensor:
    """Sin-cos embedding of coordinates in ``[0, 1]``, ``dim / coord_dim`` channels per axis, frequencies
    ``pi 2^linspace(0, log2(res) - 1)`` (the authors' ``get_1d_sincos_pos_embed_from_coord`` has
    ``res = 224``)."""
    d = coord.shape[-1]
    per = dim // (2 * d)
    omega = math.pi * 2 ** torch.linspace(0, math.log2(res) - 1, per)
    out = coord.unsqueeze(-1) * omega  # (..., d, per)
    emb = torch.cat([torch.sin(out), torch.cos(out)], dim=-1).flatten(-2)
    if emb.shape[-1] < dim:
        emb = Fn.pad(emb, (0, dim - emb.shape[-1]))
    return emb


def _fourier(pos: torch.Tensor, freqs: int) -> torch.Tensor:
    """Log-spaced Fourier features of 3-D positions (the authors' ``FastFourierEmbed``, no input)."""
    bands = 2.0 ** torch.linspace(0.0, freqs - 1, freqs)
    x = pos.unsqueeze(-1) * bands
    return torch.cat([torch.sin(x).flatten(-2), torch.cos(x).flatten(-2)], dim=-1)


def _modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class _Attention(nn.Module):
    """Multi-head (cross-)attention with LayerNorm q/k normalisation and an optional key mask."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.q_norm, self.k_norm = nn.LayerNorm(self.hd), nn.LayerNorm(self.hd)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, ctx, mask=None):
        b, n, _ = x.shape
        m = ctx.shape[1]
        q = self.q_norm(self.q(x).view(b, n, self.heads, self.hd).transpose(1, 2))
        k, v = self.kv(ctx).view(b, m, 2, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        k = self.k_norm(k)
        out = Fn.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None])
        return self.proj(out.transpose(1, 2).reshape(b, n, -1))


def _mlp(dim: int, ratio: float) -> nn.Sequential:
    h = max(1, int(dim * ratio))
    return nn.Sequential(nn.Linear(dim, h), nn.GELU(approximate="tanh"), nn.Linear(h, dim))


def _adaln(dim: int, k: int) -> nn.Sequential:
    lin = nn.Linear(dim, k * dim)
    nn.init.zeros_(lin.weight)
    nn.init.zeros_(lin.bias)
    return nn.Sequential(nn.SiLU(), lin)


class _DiTBlock(nn.Module):
    """Self-attention + MLP on the latents with adaLN-Zero time conditioning (DiT)."""

    def __init__(self, dim, heads, ratio):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim, elementwise_affine=False), nn.LayerNorm(dim, elementwise_affine=False)
        self.attn, self.mlp, self.ada = _Attention(dim, heads), _mlp(dim, ratio), _adaln(dim, 6)

    def forward(self, z, c):
        s1, g1, a1, s2, g2, a2 = self.ada(c).chunk(6, dim=1)
        h = _modulate(self.n1(z), s1, g1)
        z = z + a1.unsqueeze(1) * self.attn(h, h)
        return z + a2.unsqueeze(1) * self.mlp(_modulate(self.n2(z), s2, g2))


class _CrossBlock(nn.Module):
    """Cross-attention of ``x`` to ``ctx`` + MLP with adaLN-Zero (the Perceiver encoder's first half,
    and the ``PerceiverDecoderBlock``)."""

    def __init__(self, dim, heads, ratio):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim, elementwise_affine=False), nn.LayerNorm(dim, elementwise_affine=False)
        self.attn, self.mlp, self.ada = _Attention(dim, heads), _mlp(dim, ratio), _adaln(dim, 6)

    def forward(self, x, ctx, c, mask=None):
        s1, g1, a1, s2, g2, a2 = self.ada(c).chunk(6, dim=1)
        x = x + a1.unsqueeze(1) * self.attn(_modulate(self.n1(x), s1, g1), ctx, mask)
        return x + a2.unsqueeze(1) * self.mlp(_modulate(self.n2(x), s2, g2))


class _PerceiverBlock(nn.Module):
    """``PerceiverEncoderBlock``: latents cross-attend to the inputs, then one self-attention block."""

    def __init__(self, dim, heads, ratio):
        super().__init__()
        self.cross, self.self_ = _CrossBlock(dim, heads, ratio), _DiTBlock(dim, heads, ratio)

    def forward(self, z, inputs, c):
        return self.self_(self.cross(z, inputs, c), c)


class _FinalLayer(nn.Module):
    """adaLN-modulated LayerNorm and a zero-initialised linear read-out (DiT's final layer)."""

    def __init__(self, dim_in, dim_c, out):
        super().__init__()
        self.norm = nn.LayerNorm(dim_in, elementwise_affine=False)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim_c, 2 * dim_in))
        self.linear = nn.Linear(dim_in, out)
        for lin in (self.ada[-1], self.linear):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x, c):
        shift, scale = self.ada(c).chunk(2, dim=1)
        return self.linear(_modulate(self.norm(x), shift, scale))


class _TimeEmbed(nn.Module):
    """Sinusoidal time features through an MLP (DiT's ``TimestepEmbedder``; t in [0, 1] scaled by 1000)."""

    def __init__(self, dim, freq=64):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(nn.Linear(freq, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t):
        half = self.freq // 2
        f = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        a = (1000.0 * t)[:, None].float() * f[None]
        return self.mlp(torch.cat([torch.cos(a), torch.sin(a)], dim=-1))


def _proj(i, o):
    return nn.Sequential(nn.Linear(i, o), nn.LayerNorm(o), nn.SiLU())


# ----------------------------------------------------------------------------- the model


class INRFlow(nn.Module):
    """The INRFlow velocity field ``v_theta(x_q, y_t(x_q) | z(f_t), t)`` (see the module docstring).

    ``forward(context_x, context_y, t, query_x, query_y)`` takes the noisy context pairs
    ``(B, N, coord_dim)`` / ``(B, N, value_dim)``, one time per sample ``(B,)`` and the query pairs
    ``(B, M, ...)``, and returns the velocity at every query, ``(B, M, value_dim)``. For point clouds
    the coordinates are the (noisy) positions themselves and ``*_x`` are ignored.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        d, h, r = cfg.hidden, cfg.heads, cfg.mlp_ratio
        self.time = _TimeEmbed(d)
        if cfg.modality == "image":
            g = cfg.grid
            self.latent = nn.Parameter(torch.zeros(g * g, d))
            centres = (torch.stack(torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij"), -1).reshape(-1, 2)
                       .float() + 0.5) / g
            self.register_buffer("centres", centres)
            self.ctx_y = _proj(cfg.value_dim, d)
            self.enc_q, self.enc_kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
            self.enc_norm = nn.LayerNorm(d, elementwise_affine=False)
            self.enc_mlp = nn.Sequential(nn.Linear(d, d), nn.GELU(approximate="tanh"), nn.Linear(d, d))
            self.trunk = nn.ModuleList(_DiTBlock(d, h, r) for _ in range(cfg.depth))
        else:
            fdim = 2 * 3 * cfg.fourier_freqs
            self.latent = nn.Parameter(torch.randn(cfg.latents, d) * 0.02)
            self.ctx_x, self.ctx_y, self.ctx_cat = _proj(fdim, d), _proj(3, d), _proj(2 * d, d)
            self.encoder = _PerceiverBlock(d, h, r)
            self.trunk = nn.ModuleList(_PerceiverBlock(d, h, r) for _ in range(cfg.depth))
            self.q_x, self.q_cat = _proj(fdim, d), _proj(2 * d, d)
        self.q_y = _proj(cfg.value_dim, d)
        self.decoder = _CrossBlock(d, h, r)
        self.final = _FinalLayer(2 * d, d, cfg.value_dim)

    # -- the encoder: the noisy context into latents
    def _encode_image(self, context_x, context_y):
        cfg, g = self.cfg, self.cfg.grid
        b = context_y.shape[0]
        cell = (context_x * g).floor().clamp(0, g - 1)
        owner = (cell[..., 0] * g + cell[..., 1]).long()  # (B, N): the latent whose patch holds the point
        rel = context_x * g - cell  # within-patch position in [0, 1]
        # the within-patch position: a patch spans coord_res / grid pixels
        tokens = self.ctx_y(context_y) + _sincos(rel, cfg.hidden, max(2, cfg.coord_res // g))
        lat = self.latent + _sincos(self.centres, cfg.hidden, cfg.coord_res)  # spatial-aware latents at the patch centres
        heads, hd = cfg.heads, cfg.hidden // cfg.heads
        patches = self._equal_patches(owner)
        if patches is not None:
            # fast path (every sample on one grid, every patch holding P points): attend within each
            # patch only, B L P scores instead of the B L N of the masked attention below (same values)
            order, p = patches
            k, v = self.enc_kv(tokens[:, order]).view(b, g * g, p, 2, heads, hd).unbind(3)  # (B, L, P, h, hd)
            q = self.enc_q(lat).view(g * g, heads, hd)
            w = torch.softmax(torch.einsum("lhe,blphe->blhp", q, k) / math.sqrt(hd), dim=-1)
            z = torch.einsum("blhp,blphe->blhe", w, v).reshape(b, g * g, -1)
        else:
            mask = owner[:, None, :] == torch.arange(g * g)[None, :, None]  # (B, L, N)
            empty = ~mask.any(-1, keepdim=True)
            mask = mask | empty  # a latent with no point in its patch reads every point (never NaN)
            q = self.enc_q(lat).view(1, g * g, heads, hd).transpose(1, 2).expand(b, -1, -1, -1)
            k, v = self.enc_kv(tokens).view(b, -1, 2, heads, hd).permute(2, 0, 3, 1, 4)
            z = Fn.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None]).transpose(1, 2).reshape(b, g * g, -1)
        z = self.enc_mlp(self.enc_norm(z))
        return z + _sincos(self.centres, cfg.hidden, cfg.coord_res)  # the trunk's absolute position embedding

    def _equal_patches(self, owner):
        """``(order, P)`` when every sample has the same patch assignment and every patch holds ``P``
        points (``order`` sorts the points by patch), else ``None``."""
        first = owner[0]
        if owner.shape[0] > 1 and not bool((owner == first).all()):
            return None
        counts = torch.bincount(first, minlength=self.cfg.grid ** 2)
        if not bool((counts == counts[0]).all()) or int(counts[0]) == 0:
            return None
        return torch.argsort(first, stable=True), int(counts[0])

    def _embed_points(self, pos, px, py, cat):
        return cat(torch.cat([px(_fourier(pos, self.cfg.fourier_freqs)), py(pos)], dim=-1))

    def latents(self, context_x, context_y, t):
        """The trunk's latents ``z(f_t)`` and the time embedding ``c`` of a noisy context."""
        c = self.time(t)
        if self.cfg.modality == "image":
            z = self._encode_image(context_x, context_y)
            for blk in self.trunk:
                z = blk(z, c)
        else:
            inputs = self._embed_points(context_y, self.ctx_x, self.ctx_y, self.ctx_cat)
            z = self.encoder(self.latent.expand(context_y.shape[0], -1, -1), inputs, c)
            for blk in self.trunk:
                z = blk(z, inputs, c)
        return z, c

    def decode(self, z, c, query_x, query_y):
        """The point-wise decoder: each query reads the latents alone (no query-query attention)."""
        qy = self.q_y(query_y)
        if self.cfg.modality == "image":
            q = qy + _sincos(query_x, self.cfg.hidden, self.cfg.coord_res)
        else:
            q = self.q_cat(torch.cat([self.q_x(_fourier(query_y, self.cfg.fourier_freqs)), qy], dim=-1))
        out = self.decoder(q, z, c)
        return self.final(torch.cat([out, qy], dim=-1), c)

    def forward(self, context_x, context_y, t, query_x, query_y):
        z, c = self.latents(context_x, context_y, t)
        return self.decode(z, c, query_x, query_y)


def param_count(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


# ----------------------------------------------------------------------------- training


def _check_sets(coords: torch.Tensor, values: torch.Tensor) -> None:
    if not isinstance(values, torch.Tensor) or values.dim() != 3:
        raise ValueError(f"values must be a tensor (B, N, C), got {getattr(values, 'shape', type(values))}")
    if not isinstance(coords, torch.Tensor) or coords.dim() != 3 or coords.shape[:2] != values.shape[:2]:
        raise ValueError(f"coords must be a tensor (B, N, D) matching values {tuple(values.shape)}, "
                         f"got {getattr(coords, 'shape', type(coords))}")
    if not (torch.isfinite(values).all() and torch.isfinite(coords).all()):
        raise ValueError("coords and values must be finite")


def cicfm_loss(model: nn.Module, coords: torch.Tensor, values: torch.Tensor, t: torch.Tensor, noise: torch.Tensor,
               query_idx: torch.Tensor | None = None) -> torch.Tensor:
    """The conditionally independent point-wise flow-matching loss of one batch.

    Every point is noised with the same path (``interpolant``); the whole noisy set is the context,
    the points ``query_idx`` (``None``: all) are the queries, and the loss is the mean squared error
    of the predicted velocity against ``y_1 - eps`` at the queries (the authors'
    ``training_losses``: the queries' noise is the context noise at the same points).
    """
    y_t, u_t = interpolant(t, noise, values)
    if query_idx is None:
        qx, qy, qu = coords, y_t, u_t
    else:
        qx, qy, qu = coords[:, query_idx], y_t[:, query_idx], u_t[:, query_idx]
    return ((model(coords, y_t, t, qx, qy) - qu) ** 2).mean()


def train(model: nn.Module, coords: torch.Tensor, values: torch.Tensor, cfg: TrainConfig, seed: int,
          snapshots=()) -> dict:
    """Train ``model`` on the sets ``(coords, values)`` (``(S, N, D)``, ``(S, N, C)``) with the point-wise
    objective; returns ``{"model", "ema", "losses", "snapshots"}``. Deterministic in ``seed`` (one thread).

    ``snapshots``: step counts ``k`` (``1 <= k <= cfg.steps``) at which a copy of the EMA weights is kept
    (``{k: ema}``). There is no learning-rate schedule and the EMA warm-up depends on the step only, so the
    snapshot at ``k`` equals the EMA of a ``k``-step run with the same seed (tested): one run measures the
    whole training curve."""
    _check_sets(coords, values)
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    if isinstance(snapshots, (str, int)) or not all(isinstance(k, int) and not isinstance(k, bool)
                                                    and 1 <= k <= cfg.steps for k in snapshots):
        raise ValueError(f"snapshots must be step counts in [1, {cfg.steps}], got {snapshots!r}")
    keep, kept = set(snapshots), {}
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(int(seed))
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    # one list of tensors each, updated with the multi-tensor (foreach) kernels: a few calls per step
    # instead of a few per parameter (the models here are small, so per-call overhead dominates)
    params = [p for p in model.parameters() if p.requires_grad]
    ema_params = [pe for pe, p in zip(ema.parameters(), model.parameters()) if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
    n_sets, n_pts = values.shape[:2]
    n_query = max(1, int(round(cfg.query_fraction * n_pts)))
    losses = []
    model.train()
    for k in range(cfg.steps):
        idx = torch.randint(0, n_sets, (cfg.batch,), generator=g)
        x, y = coords[idx], values[idx]
        t = logit_normal(cfg.batch, g) * (1 - 2 * cfg.t_eps) + cfg.t_eps
        noise = torch.randn(y.shape, generator=g)
        q = None if n_query >= n_pts else torch.randperm(n_pts, generator=g)[:n_query]
        loss = cicfm_loss(model, x, y, t, noise, q)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, cfg.clip, foreach=True)
        opt.step()
        decay = min(cfg.ema, (1 + k) / (10 + k))
        with torch.no_grad():  # ema <- decay ema + (1 - decay) model
            torch._foreach_lerp_(ema_params, [p.detach() for p in params], 1 - decay)
        losses.append(float(loss.detach()))
        if k + 1 in keep:
            kept[k + 1] = copy.deepcopy(ema)
    model.eval()
    return {"model": model, "ema": ema, "losses": losses, "snapshots": kept}


# ----------------------------------------------------------------------------- sampling


@torch.no_grad()
def ode_sample(model: nn.Module, query_x: torch.Tensor, y0: torch.Tensor, steps: int, *,
               context_mask: torch.Tensor | None = None, t_eps: float = 1e-4) -> torch.Tensor:
    """Integrate ``dy/dt = v(y, t)`` from ``t_eps`` to 1 with ``steps`` Euler steps (the authors'
    ``ODESampler``). At each step the context is the current state of the points in
    ``context_mask`` (``None``: all points), and every query point moves with its own velocity."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    _check_sets(query_x, y0)
    if context_mask is not None and (context_mask.dtype != torch.bool or context_mask.shape != (y0.shape[1],)
                                     or not bool(context_mask.any())):
        raise ValueError(f"context_mask must be a non-empty boolean mask over the {y0.shape[1]} points")
    ts = torch.linspace(t_eps, 1.0, steps + 1)
    y = y0.clone()
    b = y.shape[0]
    for i in range(steps):
        cx = query_x if context_mask is None else query_x[:, context_mask]
        cy = y if context_mask is None else y[:, context_mask]
        v = model(cx, cy, ts[i].expand(b), query_x, y)
        y = y + (ts[i + 1] - ts[i]) * v
    return y


def _check_count(name, v, low=1):
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")


@torch.no_grad()
def sample_multires(model: nn.Module, n: int, resolutions, *, train_resolution: int, steps: int, seed: int,
                    batch: int = 256) -> dict:
    """``n`` images at the training resolution and at every resolution in ``resolutions``, jointly:
    ``{R: (n, R, R)}``.

    The training grid is the context; the query set is the training grid followed by each new grid,
    and all points are integrated together (the authors' resolution-free sampling). Queries are
    conditionally independent given the context, so the training-grid trajectory is the same whatever
    new grids ride along: every resolution shows *the same* samples. The training grid's noise is drawn
    first (one ``R_train^2`` draw per sample from the seed), then each new grid's in the order given, so
    the training-resolution images equal those of ``sample_images(..., resolution=train_resolution)``
    with the same seed, and the first ``k`` samples' training-grid noise does not depend on ``n``.
    """
    _check_count("n", n)
    _check_count("batch", batch)
    image_grid(train_resolution)
    if isinstance(resolutions, (int, str)) or not hasattr(resolutions, "__iter__"):
        raise ValueError(f"resolutions must be a list of integers, got {resolutions!r}")
    resolutions = list(resolutions)
    for r in resolutions:
        image_grid(r)
    new = [r for r in dict.fromkeys(resolutions) if r != train_resolution]
    g = torch.Generator().manual_seed(int(seed))
    lo = image_grid(train_resolution)
    grids = [lo] + [image_grid(r) for r in new]
    # one draw per (grid, sample): CPU randn's values depend on the tensor's size, so a single (n, N) draw
    # would change the first samples' noise with n
    noise = [torch.stack([torch.randn((x.shape[1], 1), generator=g) for _ in range(n)]) for x in grids]
    x = torch.cat(grids, dim=1)
    y0 = torch.cat(noise, dim=1)
    mask = None
    if new:
        mask = torch.zeros(x.shape[1], dtype=torch.bool)
        mask[: lo.shape[1]] = True
    outs = []
    for s in range(0, n, batch):
        part = y0[s: s + batch]
        outs.append(ode_sample(model, x.expand(part.shape[0], -1, -1), part, steps, context_mask=mask))
    y = torch.cat(outs)[..., 0]
    result, start = {}, 0
    for r, grid in zip([train_resolution] + new, grids):
        result[r] = y[:, start: start + grid.shape[1]].reshape(n, r, r)
        start += grid.shape[1]
    return result


@torch.no_grad()
def sample_images(model: nn.Module, n: int, resolution: int, *, train_resolution: int, steps: int, seed: int,
                  batch: int = 256) -> torch.Tensor:
    """``n`` images ``(n, R, R)`` at ``resolution`` from a model trained at ``train_resolution``.

    At the training resolution the pixels are both context and queries. At another resolution the
    query set is the training grid followed by the new grid, the training grid is the context, and
    the new grid's values are returned (the authors' resolution-free sampling; ``sample_multires``).
    """
    image_grid(resolution)
    return sample_multires(model, n, [resolution], train_resolution=train_resolution, steps=steps, seed=seed,
                           batch=batch)[resolution]


@torch.no_grad()
def sample_points(model: nn.Module, n: int, n_points: int, *, context_points: int, steps: int, seed: int,
                  batch: int = 64) -> torch.Tensor:
    """``n`` point clouds ``(n, n_points, 3)``; when ``n_points`` exceeds the ``context_points`` the
    model was trained with, the first ``context_points`` points are the context and the rest are
    extra queries (point-wise decoding of a denser cloud)."""
    _check_count("n", n)
    _check_count("n_points", n_points)
    _check_count("context_points", context_points)
    _check_count("batch", batch)
    g = torch.Generator().manual_seed(int(seed))
    mask = None
    if n_points > context_points:
        mask = torch.zeros(n_points, dtype=torch.bool)
        mask[:context_points] = True
    noise = torch.randn((n, n_points, 3), generator=g)
    out = []
    for s in range(0, n, batch):
        y0 = noise[s: s + batch]
        out.append(ode_sample(model, y0, y0, steps, context_mask=mask))
    return torch.cat(out)


@torch.no_grad()
def conditional_resample(model: nn.Module, context: torch.Tensor, resolutions, *, steps: int, seed: int,
                         t_eps: float = 1e-4, batch: int = 256) -> dict:
    """Decode images ``context`` ``(n, R, R)`` (at the training resolution ``R``) at other resolutions
    through the flow, conditioned on the true noisy context: ``{R': (n, R', R')}`` for ``R`` and every
    ``R'`` in ``resolutions``.

    At every Euler step ``t_i`` the context is the true path of the given images,
    ``y_t = t y_1 + (1 - t) eps`` (``interpolant``, one fixed ``eps`` per image), not the model's own
    state; the query set is the training grid (starting from the same ``eps``) followed by each new grid
    (fresh noise), and every query moves with its own decoded velocity (the paper's point-wise decoder,
    the authors' resolution-free sampling with a known context). The training-grid output is the
    model's own reconstruction of the images; the new grids are what decoding the coordinates gives at a
    resolution never trained on. Assumed (the project's pixel-space test of the resolution claim, not a
    procedure of the paper): a known noisy context, so the output can be scored against the truth.
    """
    if not (isinstance(context, torch.Tensor) and context.ndim == 3 and context.shape[1] == context.shape[2]):
        raise ValueError(f"context must be a tensor of square images (n, R, R), got "
                         f"{getattr(context, 'shape', type(context).__name__)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    _check_count("batch", batch)
    if isinstance(resolutions, (int, str)) or not hasattr(resolutions, "__iter__"):
        raise ValueError(f"resolutions must be a list of integers, got {resolutions!r}")
    n, res = context.shape[0], context.shape[1]
    new = [r for r in dict.fromkeys(resolutions) if r != res]
    grids = [image_grid(res)] + [image_grid(r) for r in new]
    g = torch.Generator().manual_seed(int(seed))
    eps = torch.randn((n, res * res, 1), generator=g)
    extra = [torch.randn((n, x.shape[1], 1), generator=g) for x in grids[1:]]
    y1 = context.reshape(n, -1, 1).float()
    x = torch.cat(grids, dim=1)
    ts = torch.linspace(t_eps, 1.0, steps + 1)
    outs = []
    for s in range(0, n, batch):
        e, target = eps[s: s + batch], y1[s: s + batch]
        b = e.shape[0]
        y = torch.cat([e] + [z[s: s + batch] for z in extra], dim=1)
        cx = grids[0].expand(b, -1, -1)
        qx = x.expand(b, -1, -1)
        for i in range(steps):
            cy, _ = interpolant(ts[i].expand(b), e, target)
            y = y + (ts[i + 1] - ts[i]) * model(cx, cy, ts[i].expand(b), qx, y)
        outs.append(y[..., 0])
    y = torch.cat(outs)
    result, start = {}, 0
    for r, grid in zip([res] + new, grids):
        result[r] = y[:, start: start + grid.shape[1]].reshape(n, r, r)
        start += grid.shape[1]
    return result
