"""A learned-entropy ("implicit") 3DGS codec: the family HybridGS compares against.

HybridGS (ICML 2025) contrasts its standard point-cloud coding with compression "via implicit data
embedding" -- HAC, CompGS and the like, whose bitstreams are arithmetic-coded under entropy models
trained per scene, with context predicted from the positions (HAC: a hash grid at the anchor
position feeding MLPs that give each attribute's Gaussian mean and scale). This module is a
small member of that family, for the equal-rate and coding-time comparisons:

- positions on a ``position_bits`` grid, coded under a learned factorised model (per axis a
  mixture of discretised logistics, Balle et al.'s factorised prior in its simplest form);
- attributes normalised per column and scalar-quantised with step ``s`` (the rate knob), coded
  under a Gaussian whose mean and scale an MLP predicts from Fourier features of the decoded
  position (``context=True``, HAC-like) or one Gaussian per column (``context=False``,
  factorised);
- range coding with ``constriction`` (a compiled ANS/range coder); the model weights (float32) and
  the normalisation travel in the stream and count in its size.

``fit`` trains both models on the scene's own data (maximum likelihood; the continuous Gaussian
likelihood for the attributes, so one model serves every step ``s``); ``encode`` / ``decode``
are the timed coding steps; ``step_for_bytes`` picks ``s`` for a byte budget (equal rate).
Assumed (a stand-in, not HAC itself): no hash grid, no adaptive quantisation, and no
rate-distortion fine-tuning of the Gaussians -- the codec is applied after training.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = ["LearnedCodecConfig", "LearnedEntropyCodec", "decode_learned"]

_MAGIC = b"LEC1"


@dataclass(frozen=True)
class LearnedCodecConfig:
    """Args: position_bits (grid of the positions), mixtures (logistics per axis), fourier (bands
    of the context features), hidden (MLP width), fit_steps / lr (Adam, full batch), context
    (position-conditioned attributes or factorised), normalize (standardise the columns; ``False``
    codes integer-valued attributes losslessly at ``s = 1``)."""

    position_bits: int = 16
    mixtures: int = 6
    fourier: int = 2
    hidden: int = 16
    fit_steps: int = 200
    lr: float = 1e-2
    context: bool = True
    normalize: bool = True

    def __post_init__(self):
        for name, lo in (("position_bits", 2), ("mixtures", 1), ("fourier", 0), ("hidden", 1), ("fit_steps", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.position_bits > 20:
            raise ValueError(f"position_bits must be <= 20, got {self.position_bits}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _features(p_int: np.ndarray, bits: int, bands: int) -> torch.Tensor:
    x = torch.as_tensor(p_int, dtype=torch.float32) / float(2 ** bits - 1) * 2 - 1
    feats = [x]
    for k in range(bands):
        feats += [torch.sin(math.pi * 2 ** k * x), torch.cos(math.pi * 2 ** k * x)]
    return torch.cat(feats, 1)


def _mlp(i, h, o):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


def _mixture_probs(params: np.ndarray, bits: int) -> np.ndarray:
    """Probabilities of every grid value under a discretised logistic mixture (float64)."""
    from scipy.special import expit

    w, mu, logs = params
    w = np.exp(w - w.max())
    w /= w.sum()
    edges = np.arange(2 ** bits + 1, dtype=np.float64)[:, None] - 0.5
    cdf = expit((edges - mu[None]) / np.exp(logs)[None]) @ w
    p = np.maximum(np.diff(cdf), 1e-9)
    return p / p.sum()


class LearnedEntropyCodec:
    """Fit once per scene, then ``encode(step)``; ``decode_learned`` inverts a stream alone."""

    def __init__(self, config: LearnedCodecConfig = LearnedCodecConfig()):
        if not isinstance(config, LearnedCodecConfig):
            raise TypeError(f"config must be a LearnedCodecConfig, got {type(config).__name__}")
        self.config = config
        self.positions_ = None

    # -- training ---------------------------------------------------------------------------
    def fit(self, positions: np.ndarray, attributes: np.ndarray, *, seed: int) -> "LearnedEntropyCodec":
        """Train the position and attribute models on ``positions`` (``(N, 3)`` integers on the
        grid) and ``attributes`` (``(N, C)`` floats)."""
        cfg = self.config
        positions, attributes = np.asarray(positions), np.asarray(attributes, dtype=np.float64)
        if positions.ndim != 2 or positions.shape[1] != 3 or not np.issubdtype(positions.dtype, np.integer):
            raise ValueError(f"positions must be an (N, 3) integer array, got {positions.dtype} {positions.shape}")
        if len(positions) and (positions.min() < 0 or positions.max() > 2 ** cfg.position_bits - 1):
            raise ValueError(f"positions must lie in [0, 2^{cfg.position_bits} - 1]")
        if attributes.ndim != 2 or attributes.shape[0] != positions.shape[0] or not np.isfinite(attributes).all():
            raise ValueError(f"attributes must be a finite (N, C) array with N = {positions.shape[0]}, "
                             f"got {attributes.shape}")
        torch.manual_seed(seed)
        order = np.lexsort(positions.T[::-1])
        self.positions_, self.attributes_ = positions[order].astype(np.int64), attributes[order]
        n, C = attributes.shape
        if cfg.normalize:
            self.mean_ = self.attributes_.mean(0)
            self.std_ = np.maximum(self.attributes_.std(0), 1e-6)
        else:
            self.mean_, self.std_ = np.zeros(C), np.ones(C)
        z = torch.as_tensor((self.attributes_ - self.mean_) / self.std_, dtype=torch.float32)
        # positions: a discretised logistic mixture per axis
        K = cfg.mixtures
        span = float(2 ** cfg.position_bits - 1)
        p = torch.as_tensor(self.positions_, dtype=torch.float64)
        init_mu = np.quantile(self.positions_, (np.arange(K) + 0.5) / K, axis=0).T  # (3, K)
        w = nn.Parameter(torch.zeros(3, K, dtype=torch.float64))
        mu = nn.Parameter(torch.as_tensor(init_mu, dtype=torch.float64))
        logs = nn.Parameter(torch.full((3, K), math.log(span / (4 * K) + 1.0), dtype=torch.float64))
        opt = torch.optim.Adam([w, mu, logs], lr=cfg.lr * 5)
        for _ in range(cfg.fit_steps):
            s = torch.exp(logs)[None]
            lo = torch.sigmoid((p[..., None] - 0.5 - mu[None]) / s)
            hi = torch.sigmoid((p[..., None] + 0.5 - mu[None]) / s)
            prob = ((hi - lo) * torch.softmax(w, 1)[None]).sum(-1).clamp_min(1e-12)
            loss = -torch.log2(prob).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.pos_params_ = np.stack([w.detach().numpy(), mu.detach().numpy(), logs.detach().numpy()], 1)  # (3,3,K)
        self.pos_params_ = self.pos_params_.astype(np.float32)
        self.position_bits_ = -sum(np.log2(_mixture_probs(self.pos_params_[a].astype(np.float64), cfg.position_bits)
                                           [self.positions_[:, a]]).sum() for a in range(3))
        # attributes: Gaussian, position context or factorised
        if cfg.context:
            self.net_ = _mlp(3 + 6 * cfg.fourier, cfg.hidden, 2 * C)
            params = list(self.net_.parameters())
            ctx = _features(self.positions_, cfg.position_bits, cfg.fourier)
        else:
            self.net_ = None
            self.fact_ = nn.Parameter(torch.zeros(2 * C))
            params = [self.fact_]
        opt = torch.optim.Adam(params, lr=cfg.lr)
        for _ in range(cfg.fit_steps):
            out = self.net_(ctx) if cfg.context else self.fact_[None].expand(n, -1)
            m, logsd = out[:, :C], out[:, C:].clamp(-7, 7)
            loss = (logsd + 0.5 * ((z - m) / torch.exp(logsd)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.weights_ = [t.detach().numpy().astype(np.float32).copy() for t in params]
        return self

    def _check_fitted(self):
        if self.positions_ is None:
            raise ValueError("the codec is not fitted: call fit first")

    # -- coding -----------------------------------------------------------------------------
    def _symbols(self, step):
        z = (self.attributes_ - self.mean_) / self.std_
        return np.rint(z / step).astype(np.int32)

    def estimate_bytes(self, step: float) -> float:
        """Model bits of the attribute symbols at ``step`` plus the positions and side information
        (bytes); ``encode`` lands within a few bytes of it."""
        self._check_fitted()
        q = self._symbols(step)
        mu, sd = _gauss_params(self.config, self.weights_, self.positions_, q.shape[1])
        from scipy.special import ndtr

        lo = ndtr(((q - 0.5) * step - mu) / sd)
        hi = ndtr(((q + 0.5) * step - mu) / sd)
        bits = -np.log2(np.maximum(hi - lo, 2.0 ** -24)).sum()
        pos_bits = self.position_bits_
        R = int(np.abs(q).max()) + 1 if q.size else 1
        return 4 * math.ceil((bits + pos_bits) / 32 + 1) + len(self._side(step, R, q.shape))

    def _side(self, step, R, shape):
        """The stream's header and side information (exact bytes)."""
        cfg = self.config
        header = {"n": shape[0], "C": shape[1], "R": R, "step": float(step), "pb": cfg.position_bits,
                  "K": cfg.mixtures, "F": cfg.fourier, "H": cfg.hidden, "ctx": cfg.context,
                  "shapes": [list(w.shape) for w in self.weights_]}
        floats = np.concatenate([self.mean_, self.std_, self.pos_params_.reshape(-1),
                                 *(w.reshape(-1) for w in self.weights_)]).astype("<f4")
        h = json.dumps(header, separators=(",", ":")).encode()
        return _MAGIC + struct.pack("<II", len(h), floats.nbytes) + h + floats.tobytes()

    def step_for_bytes(self, target_bytes: float, *, lo: float = 1e-4, hi: float = 64.0, iters: int = 40) -> float:
        """The step whose estimated size is closest to ``target_bytes`` from below (bisection in
        ``log s``; the size falls as ``s`` grows)."""
        self._check_fitted()
        if not target_bytes > 0:
            raise ValueError(f"target_bytes must be > 0, got {target_bytes!r}")
        a, b = math.log(lo), math.log(hi)
        for _ in range(iters):
            mid = (a + b) / 2
            if self.estimate_bytes(math.exp(mid)) > target_bytes:
                a = mid
            else:
                b = mid
        return math.exp(b)

    def encode(self, step: float) -> bytes:
        """The stream at quantisation step ``step`` (in units of each column's standard deviation)."""
        self._check_fitted()
        if not (isinstance(step, (int, float)) and step > 0 and math.isfinite(step)):
            raise ValueError(f"step must be a finite number > 0, got {step!r}")
        import constriction

        cfg = self.config
        q = self._symbols(step)
        n, C = q.shape
        R = int(np.abs(q).max()) + 1 if q.size else 1
        enc = constriction.stream.queue.RangeEncoder()
        for a in range(3):
            probs = _mixture_probs(self.pos_params_[a].astype(np.float64), cfg.position_bits)
            enc.encode(self.positions_[:, a].astype(np.int32), constriction.stream.model.Categorical(probs, perfect=False))
        mu, sd = _gauss_params(cfg, self.weights_, self.positions_, C)
        model = constriction.stream.model.QuantizedGaussian(-R, R)
        enc.encode(q.reshape(-1), model, (mu / step).reshape(-1), np.maximum(sd / step, 1e-3).reshape(-1))
        return self._side(step, R, q.shape) + enc.get_compressed().tobytes()


def _gauss_params(cfg_or_header, weights, positions, C):
    """Per-symbol means and standard deviations ``(N, C)`` from the stored (float32) weights."""
    if isinstance(cfg_or_header, LearnedCodecConfig):
        ctx_on, bits, bands, hidden = cfg_or_header.context, cfg_or_header.position_bits, cfg_or_header.fourier, \
            cfg_or_header.hidden
    else:
        ctx_on, bits, bands, hidden = (cfg_or_header[k] for k in ("ctx", "pb", "F", "H"))
    with torch.no_grad():
        if ctx_on:
            net = _mlp(3 + 6 * bands, hidden, 2 * C)
            for p, w in zip(net.parameters(), weights):
                p.copy_(torch.as_tensor(w))
            out = net(_features(positions, bits, bands)).numpy().astype(np.float64)
        else:
            out = np.broadcast_to(np.asarray(weights[0], dtype=np.float64)[None], (len(positions), 2 * C))
    return out[:, :C], np.exp(np.clip(out[:, C:], -7, 7))


def decode_learned(buf: bytes):
    """Decode a ``LearnedEntropyCodec`` stream: ``(positions (N, 3) int64, attributes (N, C))``,
    rows in the stream's (x, y, z) lexicographic order."""
    if not isinstance(buf, (bytes, bytearray)):
        raise TypeError(f"buf must be bytes, got {type(buf).__name__}")
    if bytes(buf[:4]) != _MAGIC or len(buf) < 12:
        raise ValueError("buf is not a learned-entropy codec stream")
    import constriction

    lh, lf = struct.unpack("<II", buf[4:12])
    header = json.loads(bytes(buf[12:12 + lh]))
    floats = np.frombuffer(bytes(buf[12 + lh:12 + lh + lf]), dtype="<f4")
    words = np.frombuffer(bytes(buf[12 + lh + lf:]), dtype=np.uint32)
    n, C, R, step, bits, K = (header[k] for k in ("n", "C", "R", "step", "pb", "K"))
    pos = 0

    def take(k):
        nonlocal pos
        out = floats[pos:pos + k]
        pos += k
        return out

    mean, std = take(C).astype(np.float64), take(C).astype(np.float64)
    pos_params = take(9 * K).reshape(3, 3, K)
    weights = [take(int(np.prod(s))).reshape(s).copy() for s in header["shapes"]]
    dec = constriction.stream.queue.RangeDecoder(words)
    P = np.stack([dec.decode(constriction.stream.model.Categorical(
        _mixture_probs(pos_params[a].astype(np.float64), bits), perfect=False), n) for a in range(3)], 1).astype(np.int64)
    mu, sd = _gauss_params(header, weights, P, C)
    q = dec.decode(constriction.stream.model.QuantizedGaussian(-R, R), (mu / step).reshape(-1),
                   np.maximum(sd / step, 1e-3).reshape(-1)).reshape(n, C)
    return P, mean + q * step * std
