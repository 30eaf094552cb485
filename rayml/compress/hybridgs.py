"""HybridGS: compact explicit 3DGS generation with a dual-channel sparse representation (Sec. 3.1)
and its rate control (Sec. 3.2.2).

Yang, Yang, Van Der Auwera & Li, "HybridGS: High-Efficiency Gaussian Splatting Data Compression
using Dual-Channel Sparse Representation and Point Cloud Encoder", ICML 2025 (arXiv 2505.01938;
code github.com/Qi-Yangsjtu/HybridGS). The point-cloud coding of the result is ``codec.py``.

The dual-channel sparse representation, as the paper and the authors' ``train.py`` build it:

- **feature channel** -- colour (48 SH coefficients) is replaced by a latent of ``k_c`` channels
  and rotation (4) by a latent of ``k_r`` channels, each decoded by a one-hidden-layer ReLU MLP
  (50 hidden units); opacity and (log-)scale stay explicit. Every feature column is quantised
  in the loop by the *robust quantiser* (``robust_quantize``): per channel min-max scaling to
  ``2^BD - 1`` levels, rounding with a straight-through estimator, and reconstruction by the
  least-squares affine map ``r = a q + b``, ``a = Cov(q, x) / (Var(q) + lambda)``,
  ``b = E x - a E q`` (``a, b`` are the stored metadata);
- **position channel** -- after a vanilla warm-up (``t_1``) the scene is translated and scaled so
  positions are ``BD_p``-bit integers, each written by the learnable quantiser-based method (LQM)
  as ``<[2^(BD_p-2), ..., 2, 1], c>`` with a coding vector ``c in {-1, 0, 1}`` (latents rounded
  with a straight-through estimator, clamped to +-1.49);
- **sparsity** -- *uniqueness* keeps, of primitives sharing an integer position, the one of
  largest volume ``Sx Sy Sz``, and *pruning* removes the lowest LightGaussian scores
  ``(V / V_90)^0.1 * sum_pixels alpha T`` (Fan et al., 2024) every ``I_p`` iterations.

Bits per primitive (Eq. 7): ``P_bit = 3 (BD_p + BD_s) + k_c BD_c + BD_o + k_r BD_r``; predicted
stream (Eq. 8): ``R = n P_bit / L`` with ``L`` the codec's lossless ratio (paper: 1.3 for G-PCC).
Rate control (``rate_control``), decided one iteration before pruning starts (``T_p - 1``):

- ``1`` (Method 1, primitive number): prune towards ``n = B L / P_bit`` primitives, each of the
  ``F_p`` prunings removing the fraction ``1 - (n / N)^(1 / F_p)`` (the authors' code; the paper's
  text spreads ``N_p / F_p`` evenly);
- ``2`` (Method 2, feature bit depth): no pruning; ``Delta = ceil((R - B) L / (N (k_c + 1 + 3 + k_r)))``
  bits are taken from every non-position channel, spread over the BD steps from ``T_p`` to ``T_u``;
- ``0``: the fixed schedule (prune 10 % every ``I_p``), with the paper's high-rate (HR, iteration
  50k of 70k) and low-rate (LR, the end) snapshots.

The schedule keeps the paper's proportions (of 70 000 iterations: ``t_1`` 7 500, uniqueness every
500 until 65 000, pruning every 2 500 from 36 000 to 66 000, HR at 50 000).

Assumed (tiny CPU scenes): no densification (the paper's ends at 15k, before any rate decision;
our scenes start from enough surface points); the scene is not rescaled -- positions are
dequantised ``center + q / scale`` for rendering, which renders identically; learning rates are
raised for schedules of a few hundred iterations (``HybridGSConfig``); latents start at small
random values (the code starts at zero, which a per-channel min-max quantiser cannot represent).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn

from rayml.compress import splatting as sp

__all__ = [
    "ATTRIBUTES",
    "HybridGSConfig",
    "CompactGaussians",
    "round_ste",
    "robust_quantize",
    "ternary_code",
    "bits_per_primitive",
    "predicted_bytes",
    "rate_control_plan",
    "init_from_points",
    "fit_vanilla",
    "fit_hybridgs",
    "evaluate",
]

ATTRIBUTES = ("color", "opacity", "scaling", "rotation")
PAPER_ITERS = 70_000
_SCHEDULE = dict(scale_point=7_500, unique_from=500, unique_interval=500, unique_until=65_000, prune_from=36_000,
                 prune_until=66_000, prune_interval=2_500, bd_until=66_000, bd_interval=2_500, hr=50_000)


@dataclass(frozen=True)
class HybridGSConfig:
    """HybridGS settings (defaults: the paper's, except the learning rates and ``steps``).

    Attributes:
        steps: training iterations (the paper's 70 000 schedule is scaled to this).
        position_bits: ``BD_p`` (paper 16).
        color_latent_dim, rotation_latent_dim: ``k_c`` (paper 3 or 6), ``k_r`` (paper 2).
        color_bits, opacity_bits, scaling_bits, rotation_bits: feature ``BD`` (paper 16).
        hidden_dim: the latent decoders' hidden units (paper 50).
        sh_degree: colour SH degree the colour decoder outputs (3DGS: 3).
        rate_control: 0 (fixed schedule), 1 (Method 1) or 2 (Method 2).
        target_bytes: ``B`` for rate control (bytes).
        compression_ratio: ``L`` (paper 1.3).
        prune_percent: fraction pruned per pruning step without rate control (code: 0.1).
        v_pow: LightGaussian's volume power (0.1).
        lambda_dssim: the D-SSIM weight of the loss (0.2).
        rq_lambda: the robust quantiser's ridge ``lambda`` (1e-2).
        position_latent_lr: LQM latent learning rate (code: 1e-6).
        scale_point: the iteration at which positions become ``BD_p``-bit integers (``t_1``); ``None``
            takes the paper's proportion (7 500 of 70 000). A short schedule scaled in proportion
            quantises (and so freezes) positions after a few dozen iterations, before they settle;
            the experiment sets it in steps (see ``rayml.experiments.hybridgs``).
    """

    steps: int = 300
    position_bits: int = 16
    color_latent_dim: int = 3
    rotation_latent_dim: int = 2
    color_bits: int = 16
    opacity_bits: int = 16
    scaling_bits: int = 16
    rotation_bits: int = 16
    hidden_dim: int = 50
    sh_degree: int = 3
    rate_control: int = 0
    target_bytes: float | None = None
    compression_ratio: float = 1.3
    prune_percent: float = 0.1
    v_pow: float = 0.1
    lambda_dssim: float = 0.2
    rq_lambda: float = 1e-2
    position_latent_lr: float = 1e-6
    lr_position: float = 1e-3
    lr_scaling: float = 0.01
    lr_opacity: float = 0.05
    lr_color_latent: float = 0.05
    lr_rotation_latent: float = 0.025
    lr_color_decoder: float = 0.025
    lr_rotation_decoder: float = 0.015
    warm_start_steps: int = 200
    scale_point: int | None = None

    def __post_init__(self):
        ints = {"steps": (self.steps, 20), "position_bits": (self.position_bits, 2),
                "color_latent_dim": (self.color_latent_dim, 1), "rotation_latent_dim": (self.rotation_latent_dim, 1),
                "hidden_dim": (self.hidden_dim, 1)}
        for name in ("color_bits", "opacity_bits", "scaling_bits", "rotation_bits"):
            ints[name] = (getattr(self, name), 1)
        for name, (v, lo) in ints.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.position_bits > 20:
            raise ValueError(f"position_bits must be <= 20 (exact in float32 and in Draco), got {self.position_bits}")
        for name in ("color_bits", "opacity_bits", "scaling_bits", "rotation_bits"):
            if getattr(self, name) > 16:
                raise ValueError(f"{name} must be <= 16, got {getattr(self, name)}")
        if self.sh_degree not in (0, 1, 2, 3):
            raise ValueError(f"sh_degree must be 0..3, got {self.sh_degree!r}")
        if self.rate_control not in (0, 1, 2):
            raise ValueError(f"rate_control must be 0, 1 or 2, got {self.rate_control!r}")
        if self.rate_control and (self.target_bytes is None or not self.target_bytes > 0):
            raise ValueError(f"target_bytes must be > 0 with rate_control={self.rate_control}, got {self.target_bytes!r}")
        if not self.compression_ratio > 0:
            raise ValueError(f"compression_ratio must be > 0, got {self.compression_ratio!r}")
        if not 0.0 <= self.prune_percent < 1.0:
            raise ValueError(f"prune_percent must be in [0, 1), got {self.prune_percent!r}")
        if self.scale_point is not None:
            sp_, first = self.scale_point, int(round(_SCHEDULE["prune_from"] * self.steps / PAPER_ITERS)) - 1
            if isinstance(sp_, bool) or not isinstance(sp_, int) or not 2 <= sp_ < first:
                raise ValueError(f"scale_point must be an integer in [2, {first}) (before the rate-control decision "
                                 f"at T_p - 1 of {self.steps} steps), got {sp_!r}")

    @property
    def feature_bits(self) -> dict:
        return {"color": self.color_bits, "opacity": self.opacity_bits, "scaling": self.scaling_bits,
                "rotation": self.rotation_bits}

    def schedule(self) -> dict:
        """The paper's iteration marks scaled from 70 000 to ``steps`` (intervals at least 1); the
        scale point ``scale_point`` when it is set."""
        s = {k: int(round(v * self.steps / PAPER_ITERS)) for k, v in _SCHEDULE.items()}
        for k in ("unique_interval", "prune_interval", "bd_interval"):
            s[k] = max(1, s[k])
        s["scale_point"] = max(2, s["scale_point"]) if self.scale_point is None else int(self.scale_point)
        return s


# ----------------------------------------------------------------------------------------------
# Quantisers
# ----------------------------------------------------------------------------------------------

class _RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


def round_ste(x: torch.Tensor) -> torch.Tensor:
    """Rounding with a straight-through gradient."""
    return _RoundSTE.apply(x)


def robust_quantize(x: torch.Tensor, bits: int, lam: float = 1e-2, eps: float = 1e-8):
    """The robust quantiser of HybridGS (Sec. 3.1.1, Fig. 3) over the rows of ``x`` ``(N, C)``.

    Returns ``(q, r, a, b)``: integer levels ``q in [0, 2^bits - 1]`` (float tensor, STE),
    the reconstruction ``r = a q + b`` and the per-channel metadata ``a, b`` ``(C,)``.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be (N, C), got shape {tuple(x.shape)}")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 16:
        raise ValueError(f"bits must be an integer in [1, 16], got {bits!r}")
    lo, hi = x.min(0, keepdim=True).values, x.max(0, keepdim=True).values
    q = round_ste((x - lo) / (hi - lo + eps) * (2 ** bits - 1))
    eq, ex = q.mean(0, keepdim=True), x.mean(0, keepdim=True)
    var_q = (q * q).mean(0, keepdim=True) - eq ** 2
    cov = (q * x).mean(0, keepdim=True) - eq * ex
    a = cov / (var_q + lam)
    b = ex - a * eq
    return q, a * q + b, a[0], b[0]


def ternary_code(values: np.ndarray, depth: int) -> np.ndarray:
    """Signed integers ``|v| < 2^depth`` as coding vectors ``c in {-1, 0, 1}^depth`` with
    ``v = sum_k c_k 2^(depth-1-k)`` (sign-magnitude binary: the LQM's initial code)."""
    v = np.asarray(values)
    if not np.issubdtype(v.dtype, np.integer):
        raise TypeError(f"values must be integers, got dtype {v.dtype}")
    if np.any(np.abs(v) >= 2 ** depth):
        raise ValueError(f"values must satisfy |v| < 2^depth = {2 ** depth}")
    mag = np.abs(v)[..., None] >> np.arange(depth - 1, -1, -1)
    return (mag & 1) * np.sign(v)[..., None]


def bits_per_primitive(position_bits: int, bits: dict, k_c: int, k_r: int) -> int:
    """Eq. 7: ``P_bit = 3 (BD_p + BD_s) + k_c BD_c + BD_o + k_r BD_r``."""
    return 3 * (position_bits + bits["scaling"]) + k_c * bits["color"] + bits["opacity"] + k_r * bits["rotation"]


def predicted_bytes(n: int, p_bit: int, compression_ratio: float) -> float:
    """Eq. 8: ``R(GS) = n P_bit / L`` in bytes."""
    return n * p_bit / 8.0 / compression_ratio


def rate_control_plan(method: int, n: int, p_bit: int, target_bytes: float, compression_ratio: float,
                      steps_left: int, channels: int) -> dict:
    """The rate-control decision at ``T_p - 1`` (Sec. 3.2.2, as the authors' ``train.py`` computes it).

    Args:
        method: 1 (prune to a primitive number) or 2 (lower the feature bit depth).
        n: primitives now; p_bit: Eq. 7; target_bytes: ``B``; compression_ratio: ``L``.
        steps_left: how many pruning (method 1) or BD-reduction (method 2) steps remain.
        channels: ``k_c + 1 + 3 + k_r`` (method 2).

    Returns ``{"prune_percent": ..., "bd_steps": [...], "active": bool}``.
    """
    if method not in (1, 2):
        raise ValueError(f"method must be 1 or 2, got {method!r}")
    if steps_left < 1:
        raise ValueError(f"steps_left must be >= 1, got {steps_left!r}")
    excess = predicted_bytes(n, p_bit, compression_ratio) - target_bytes
    if excess <= 0:
        return {"prune_percent": 0.0, "bd_steps": [], "active": False}
    if method == 1:
        target_n = math.floor(target_bytes / (p_bit / 8.0 / compression_ratio))
        ratio = 1.0 - (max(target_n, 0) / n) ** (1.0 / steps_left)
        return {"prune_percent": float(ratio), "bd_steps": [], "active": True, "target_n": int(target_n)}
    delta = int(math.ceil(excess * compression_ratio / n / channels * 8))
    base, extra = divmod(delta, steps_left)
    return {"prune_percent": 0.0, "bd_steps": [base + 1 if i < extra else base for i in range(steps_left)],
            "active": True, "delta_bd": delta}


# ----------------------------------------------------------------------------------------------
# Compact explicit data
# ----------------------------------------------------------------------------------------------

@dataclass
class CompactGaussians:
    """The explicit compact 3DGS data HybridGS hands to the point-cloud codec.

    Attributes:
        positions: ``(N, 3)`` int64 in ``[0, 2^position_bits - 1]`` (unique rows).
        features: ``{"color": (N, k_c), "opacity": (N, 1), "scaling": (N, 3), "rotation": (N, k_r)}``
            int64 levels, ``[0, 2^bits[name] - 1]``.
        bits: feature bit depths; position_bits: ``BD_p``.
        a, b: robust-quantiser metadata per feature (float32 ``(C,)``).
        center, scale: position dequantisation ``x = center + (p - offset) / scale``.
        decoders: ``{"color": [W1, b1, W2, b2], "rotation": [...]}`` float32 arrays.
        sh_degree: the colour decoder's SH degree.
    """

    positions: np.ndarray
    features: dict
    bits: dict
    position_bits: int
    a: dict
    b: dict
    center: np.ndarray
    scale: float
    decoders: dict
    sh_degree: int = 3

    @property
    def n(self) -> int:
        return int(self.positions.shape[0])

    @property
    def offset(self) -> int:
        return 2 ** (self.position_bits - 1) - 1

    def p_bit(self) -> int:
        """Eq. 7 for this data."""
        return bits_per_primitive(self.position_bits, self.bits, self.features["color"].shape[1],
                                  self.features["rotation"].shape[1])

    def raw_bytes(self) -> float:
        """The quantised data's size before the codec, ``N P_bit / 8``."""
        return self.n * self.p_bit() / 8.0

    def sorted(self) -> "CompactGaussians":
        """The same data with rows in lexicographic (x, y, z) order (the codec's canonical order)."""
        order = np.lexsort(self.positions.T[::-1])
        return replace(self, positions=self.positions[order],
                       features={k: v[order] for k, v in self.features.items()})

    def to_gaussians(self, dtype=torch.float32) -> sp.Gaussians:
        """Dequantise and decode: rendering parameters (Fig. 3's decoder side)."""
        def deq(name):
            return torch.as_tensor(self.features[name] * self.a[name][None] + self.b[name][None], dtype=dtype)

        def mlp(ws, x):
            W1, b1, W2, b2 = (torch.as_tensor(w, dtype=dtype) for w in ws)
            return torch.relu(x @ W1.T + b1) @ W2.T + b2

        K = (self.sh_degree + 1) ** 2
        sh = mlp(self.decoders["color"], deq("color")).reshape(self.n, 3, K).permute(0, 2, 1)
        quats = mlp(self.decoders["rotation"], deq("rotation"))
        means = torch.as_tensor(self.center[None] + (self.positions - self.offset) / self.scale, dtype=dtype)
        return sp.Gaussians(means, deq("scaling"), quats, deq("opacity")[:, 0], sh.contiguous())


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def init_from_points(points: np.ndarray, colors: np.ndarray, sh_degree: int = 3) -> dict:
    """3DGS initialisation from an SfM-like point cloud: log-scales from the mean distance to the
    three nearest neighbours, identity rotations, opacity 0.1, SH DC from the point colours."""
    points, colors = np.asarray(points, dtype=np.float64), np.asarray(colors, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3 or len(points) < 4:
        raise ValueError(f"points must be (N >= 4, 3), got shape {points.shape}")
    if colors.shape != points.shape:
        raise ValueError(f"colors must have the shape of points {points.shape}, got {colors.shape}")
    d2 = ((points[:, None] - points[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    knn = np.sqrt(np.sort(d2, 1)[:, :3]).mean(1)
    K = (sh_degree + 1) ** 2
    sh = np.zeros((len(points), K, 3))
    sh[:, 0] = (colors - 0.5) / sp.SH_C0
    return {"means": points, "log_scales": np.log(np.maximum(knn, 1e-4))[:, None].repeat(3, 1),
            "quats": np.tile([1.0, 0.0, 0.0, 0.0], (len(points), 1)),
            "opacity_logits": np.full(len(points), math.log(0.1 / 0.9)), "sh": sh}


def _check_views(views, cams):
    if not isinstance(views, np.ndarray) or views.ndim != 4 or views.shape[-1] != 3:
        raise ValueError(f"views must be a (V, H, W, 3) array, got {getattr(views, 'shape', type(views))}")
    if len(cams) != len(views):
        raise ValueError(f"cams must have one camera per view: {len(cams)} cameras, {len(views)} views")
    for c, v in zip(cams, views):
        if not isinstance(c, sp.Camera):
            raise TypeError(f"cams must hold Camera objects, got {type(c).__name__}")
        if (c.height, c.width) != v.shape[:2]:
            raise ValueError(f"a camera of {c.height}x{c.width} for a view of {v.shape[:2]}")


def _loss(img, gt, lam):
    return (1 - lam) * (img - gt).abs().mean() + lam * (1 - sp.ssim(img, gt))


def _mask_adam(opt: torch.optim.Optimizer, keep: torch.Tensor) -> None:
    """Keep the rows ``keep`` of every parameter of ``opt`` and of its Adam moments."""
    for group in opt.param_groups:
        old = group["params"][0]
        new = nn.Parameter(old.detach()[keep].clone())
        state = opt.state.pop(old, None)
        if state:
            state = {k: (v[keep].clone() if torch.is_tensor(v) and v.ndim > 0 and v.shape[0] == old.shape[0] else v)
                     for k, v in state.items()}
            opt.state[new] = state
        group["params"][0] = new


class _ViewStack:
    """3DGS's camera stack: a random permutation of the views, refilled when empty."""

    def __init__(self, rng, n):
        self.rng, self.n, self.stack = rng, n, []

    def next(self) -> int:
        if not self.stack:
            self.stack = list(self.rng.permutation(self.n))
        return int(self.stack.pop())


def fit_vanilla(views: np.ndarray, cams, init: dict, *, steps: int, seed: int, lr_scale: float = 1.0):
    """Vanilla 3DGS (float attributes, no pruning, no densification) fitted for ``steps``
    iterations with the same loss; the raw data the baselines code. Returns ``Gaussians``."""
    _check_views(views, cams)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    P = {k: nn.Parameter(torch.as_tensor(v, dtype=torch.float32).clone()) for k, v in init.items()}
    sh_dc = nn.Parameter(P["sh"].detach()[:, :1].clone())
    sh_rest = nn.Parameter(P["sh"].detach()[:, 1:].clone())
    opt = torch.optim.Adam([
        {"params": [P["means"]], "lr": 1e-3 * lr_scale}, {"params": [P["log_scales"]], "lr": 0.01 * lr_scale},
        {"params": [P["quats"]], "lr": 0.005 * lr_scale}, {"params": [P["opacity_logits"]], "lr": 0.05 * lr_scale},
        {"params": [sh_dc], "lr": 0.01 * lr_scale}, {"params": [sh_rest], "lr": 0.0005 * lr_scale}], eps=1e-15)
    gts = torch.as_tensor(views)
    order = _ViewStack(rng, len(views))
    for it in range(steps):
        frac = it / max(steps - 1, 1)
        opt.param_groups[0]["lr"] = 1e-3 * lr_scale * (0.01 ** frac)  # 3DGS's exponential position decay
        v = order.next()
        g = sp.Gaussians(P["means"], P["log_scales"], P["quats"], P["opacity_logits"], torch.cat([sh_dc, sh_rest], 1))
        loss = _loss(sp.render(g, cams[v]), gts[v], 0.2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        return sp.Gaussians(P["means"].detach().clone(), P["log_scales"].detach().clone(), P["quats"].detach().clone(),
                            P["opacity_logits"].detach().clone(), torch.cat([sh_dc, sh_rest], 1).detach().clone())


class _Trainer:
    """HybridGS training state; ``run(a, b)`` runs iterations ``a..b-1`` (the authors' loop order:
    forward with in-loop quantisation, loss, backward, then pruning / uniqueness, optimiser step,
    then the scale point and the rate-control decision)."""

    def __init__(self, views, cams, init, cfg: HybridGSConfig, seed: int):
        self.cfg, self.cams = cfg, cams
        self.gts = torch.as_tensor(views)
        self.sched = cfg.schedule()
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.order = _ViewStack(self.rng, len(views))
        n = len(init["means"])
        g = torch.Generator().manual_seed(int(seed) % (2 ** 31))
        f32 = torch.float32
        self.p = {
            "means": nn.Parameter(torch.as_tensor(init["means"], dtype=f32).clone()),
            "scaling": nn.Parameter(torch.as_tensor(init["log_scales"], dtype=f32).clone()),
            "opacity": nn.Parameter(torch.as_tensor(init["opacity_logits"], dtype=f32)[:, None].clone()),
            "color": nn.Parameter(0.1 * torch.randn(n, cfg.color_latent_dim, generator=g)),
            "rotation": nn.Parameter(0.1 * torch.randn(n, cfg.rotation_latent_dim, generator=g)),
        }
        K = (cfg.sh_degree + 1) ** 2
        self.dec = {"color": nn.Sequential(nn.Linear(cfg.color_latent_dim, cfg.hidden_dim), nn.ReLU(),
                                           nn.Linear(cfg.hidden_dim, 3 * K)),
                    "rotation": nn.Sequential(nn.Linear(cfg.rotation_latent_dim, cfg.hidden_dim), nn.ReLU(),
                                              nn.Linear(cfg.hidden_dim, 4))}
        if cfg.warm_start_steps:
            self._warm_start(init, cfg.warm_start_steps)
        names = ("means", "scaling", "opacity", "color", "rotation")
        lrs = (cfg.lr_position, cfg.lr_scaling, cfg.lr_opacity, cfg.lr_color_latent, cfg.lr_rotation_latent)
        self.opt = torch.optim.Adam([{"params": [self.p[k]], "lr": lr, "name": k} for k, lr in zip(names, lrs)],
                                    eps=1e-15)
        self.opt_dec = torch.optim.Adam([{"params": self.dec["color"].parameters(), "lr": cfg.lr_color_decoder},
                                         {"params": self.dec["rotation"].parameters(), "lr": cfg.lr_rotation_decoder}])
        self.bits = dict(cfg.feature_bits)
        self.latent = None  # LQM latents (N, 3, depth) after the scale point
        self.opt_lat = None
        self.center, self.scale = None, None
        self.prune_percent = cfg.prune_percent
        self.bd_plan: list[int] = []
        self.rc: dict = {}
        self.snapshots: list[dict] = []

    def _warm_start(self, init, steps):
        """Fit the colour latents and decoder to the initial SH coefficients (and the rotation
        decoder to the initial quaternions) by least squares, so training starts from the point
        colours as vanilla 3DGS does (assumed; the authors start from zero latents)."""
        K = (self.cfg.sh_degree + 1) ** 2
        targets = {"color": torch.as_tensor(init["sh"], dtype=torch.float32).permute(0, 2, 1).reshape(-1, 3 * K),
                   "rotation": torch.as_tensor(init["quats"], dtype=torch.float32)}
        for name, target in targets.items():
            opt = torch.optim.Adam([self.p[name], *self.dec[name].parameters()], lr=0.01)
            for _ in range(steps):
                loss = ((self.dec[name](self.p[name]) - target) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()

    # -- the two channels ------------------------------------------------------------------
    def _params(self):
        return {k: self.opt.param_groups[i]["params"][0] for i, k in enumerate(("means", "scaling", "opacity",
                                                                                 "color", "rotation"))}

    def _lqm(self):
        c = round_ste(torch.clamp(self.latent, -1.49, 1.49))
        return c @ self.base  # (N, 3) signed integers

    def _forward(self):
        P = self._params()
        out = {}
        for name in ATTRIBUTES:
            q, r, a, b = robust_quantize(P[name], self.bits[name], self.cfg.rq_lambda)
            out[name] = (q, r, a, b)
        K = (self.cfg.sh_degree + 1) ** 2
        n = P["color"].shape[0]
        sh = self.dec["color"](out["color"][1]).reshape(n, 3, K).permute(0, 2, 1)
        quats = self.dec["rotation"](out["rotation"][1])
        if self.latent is None:
            means = P["means"]
        else:
            means = torch.as_tensor(self.center, dtype=torch.float32) + self._lqm() / self.scale
        g = sp.Gaussians(means, out["scaling"][1], quats, out["opacity"][1][:, 0], sh.contiguous())
        return g, out

    # -- sparsity --------------------------------------------------------------------------
    def _remove(self, keep: np.ndarray):
        keep_t = torch.as_tensor(keep)
        _mask_adam(self.opt, keep_t)
        if self.latent is not None:
            _mask_adam(self.opt_lat, keep_t)
            self.latent = self.opt_lat.param_groups[0]["params"][0]

    def _uniqueness(self):
        with torch.no_grad():
            q = self._lqm().numpy().astype(np.int64)
            vol = torch.exp(self._params()["scaling"]).prod(1).numpy()
        order = np.lexsort((-vol, q[:, 2], q[:, 1], q[:, 0]))
        qs = q[order]
        first = np.ones(len(qs), bool)
        first[1:] = np.any(qs[1:] != qs[:-1], axis=1)
        keep = np.zeros(len(q), bool)
        keep[order[first]] = True
        if not keep.all():
            self._remove(keep)

    def _prune(self, percent: float):
        if percent <= 0:
            return
        with torch.no_grad():
            g, _ = self._forward()
            imp = torch.zeros(g.n)
            for cam in self.cams:
                imp += sp.render(g, cam, return_weights=True)[1]
            vol = torch.exp(self._params()["scaling"]).prod(1)
            kth = torch.sort(vol, descending=True).values[int(len(vol) * 0.9)]
            score = (vol / kth) ** self.cfg.v_pow * imp
            cut = torch.sort(score).values[int(percent * (len(score) - 1))]
            keep = (score > cut).numpy()
        if keep.sum() >= 4:
            self._remove(keep)

    # -- the scale point: positions become BD_p-bit integers coded by LQM --------------------
    def _to_integer_positions(self):
        with torch.no_grad():
            x = self._params()["means"].numpy().astype(np.float64)
        lo, hi = x.min(0), x.max(0)
        self.center = (lo + hi) / 2
        max_int = 2 ** (self.cfg.position_bits - 1) - 1
        self.scale = float(max_int / max(np.abs(x - self.center).max(), 1e-9))
        q = np.round((x - self.center) * self.scale).astype(np.int64)
        depth = self.cfg.position_bits - 1
        code = ternary_code(q, depth).astype(np.float32)
        gen = np.random.default_rng(self.rng.integers(2 ** 63))
        noise0 = gen.uniform(-0.5, 0.5, code.shape)
        noise1 = gen.uniform(0.55, 1.49, code.shape)
        lat = np.where(code == 0, noise0, np.where(code > 0, noise1, -noise1)).astype(np.float32)
        self.base = torch.as_tensor(2.0 ** np.arange(depth - 1, -1, -1), dtype=torch.float32)
        self.latent = nn.Parameter(torch.as_tensor(lat))
        self.opt_lat = torch.optim.Adam([self.latent], lr=self.cfg.position_latent_lr)

    def _decide_rate(self):
        cfg, s = self.cfg, self.sched
        n = self._params()["color"].shape[0]
        p_bit = bits_per_primitive(cfg.position_bits, self.bits, cfg.color_latent_dim, cfg.rotation_latent_dim)
        self.rc = {"n_at_decision": n, "p_bit": p_bit, "compression_ratio": float(cfg.compression_ratio),
                   "predicted_bytes_at_decision": predicted_bytes(n, p_bit, cfg.compression_ratio)}
        if cfg.rate_control == 1:
            steps = (s["prune_until"] - s["prune_from"]) // s["prune_interval"] + 1
        else:
            steps = (s["bd_until"] - s["prune_from"]) // s["bd_interval"] + 1
        plan = rate_control_plan(cfg.rate_control, n, p_bit, float(cfg.target_bytes), cfg.compression_ratio,
                                 max(steps, 1), cfg.color_latent_dim + 1 + 3 + cfg.rotation_latent_dim)
        self.rc.update(plan)
        self.prune_percent = plan["prune_percent"] if cfg.rate_control == 1 else 0.0
        self.bd_plan = list(plan["bd_steps"])

    def snapshot(self, label: str, step: int) -> dict:
        with torch.no_grad():
            _, out = self._forward()
            q = (self._lqm().numpy().astype(np.int64) + 2 ** (self.cfg.position_bits - 1) - 1)
        dec = {k: [w.detach().numpy().astype(np.float32).copy() for w in (m[0].weight, m[0].bias, m[2].weight,
                                                                               m[2].bias)]
               for k, m in self.dec.items()}
        data = CompactGaussians(
            positions=q, features={k: out[k][0].detach().numpy().astype(np.int64) for k in ATTRIBUTES},
            bits=dict(self.bits), position_bits=self.cfg.position_bits,
            a={k: out[k][2].detach().numpy().astype(np.float32) for k in ATTRIBUTES},
            b={k: out[k][3].detach().numpy().astype(np.float32) for k in ATTRIBUTES},
            center=np.asarray(self.center, dtype=np.float64), scale=float(self.scale), decoders=dec,
            sh_degree=self.cfg.sh_degree)
        snap = {"label": label, "step": step, "data": data, "rate_control": dict(self.rc)}
        self.snapshots.append(snap)
        return snap

    def run(self, start: int, stop: int) -> None:
        cfg, s = self.cfg, self.sched
        for it in range(start, stop):
            v = self.order.next()
            if self.bd_plan and it >= s["prune_from"] and (it - s["prune_from"]) % s["bd_interval"] == 0 \
                    and it <= s["bd_until"]:
                dec = self.bd_plan.pop(0)
                for k in ATTRIBUTES:
                    if self.bits[k] - dec < 1:
                        self.rc["target_reachable"] = False
                    self.bits[k] = max(1, self.bits[k] - dec)
            if self.latent is not None and it == s["unique_until"] + 1:
                self._uniqueness()
                self.latent.requires_grad_(False)
            g, _ = self._forward()
            loss = _loss(sp.render(g, self.cams[v]), self.gts[v], cfg.lambda_dssim)
            for o in (self.opt, self.opt_dec, self.opt_lat):
                if o is not None:
                    o.zero_grad(set_to_none=True)
            loss.backward()
            if s["prune_from"] <= it <= s["prune_until"] and (it - s["prune_from"]) % s["prune_interval"] == 0:
                self._prune(self.prune_percent)
            if self.latent is not None and s["unique_from"] < it < s["unique_until"] \
                    and it % s["unique_interval"] == 0:
                self._uniqueness()
            if it < cfg.steps - 1:
                self.opt.step()
                self.opt_dec.step()
                if self.latent is not None and self.latent.requires_grad and self.latent.grad is not None:
                    self.opt_lat.step()
            if it == s["scale_point"]:
                self._to_integer_positions()
                # positions now live in the LQM latents; the float means stop training
                self.opt.param_groups[0]["lr"] = 0.0
            if it == s["prune_from"] - 1 and cfg.rate_control:
                self._decide_rate()
            if cfg.rate_control == 0 and it == s["hr"]:
                self._uniqueness()
                self.snapshot("HR", it)


def fit_hybridgs(views: np.ndarray, cams, init: dict, configs, *, seed: int, top_snapshot: bool = False,
                 estimate_ratio=None) -> list[dict]:
    """Train HybridGS once up to the rate-control decision (``T_p - 1``) and from there once per
    config of ``configs`` (which may differ only in ``rate_control`` / ``target_bytes``); the
    shared prefix is the same training each config would do alone.

    ``estimate_ratio``: ``None`` (the configs' ``compression_ratio``, the paper's constant ``L``) or
    a function of the uncontrolled ``T_top`` sample (``CompactGaussians``) returning the codec's
    lossless ratio ``L`` on it (``codec.lossless_ratio``), which then replaces ``L`` in Eq. 8 for
    every rate-controlled config -- the per-scene estimate the paper names for a codec other than
    G-PCC (the decision is taken on that very sample, so this costs one encode).

    Returns the snapshots, each ``{"config": i, "label", "step", "data": CompactGaussians,
    "rate_control": {...}}`` -- ``HR`` and ``LR`` for ``rate_control=0``, ``RC`` otherwise, and with
    ``top_snapshot`` the uncontrolled ``Ttop`` sample at the branch point (config 0).
    """
    _check_views(views, cams)
    configs = list(configs)
    if not configs or not all(isinstance(c, HybridGSConfig) for c in configs):
        raise TypeError("configs must be a non-empty sequence of HybridGSConfig")
    base = replace(configs[0], rate_control=0, target_bytes=None)
    for c in configs:
        if replace(c, rate_control=0, target_bytes=None) != base:
            raise ValueError("configs may differ only in rate_control and target_bytes")
    trainer = _Trainer(views, cams, init, base, seed)
    branch = trainer.sched["prune_from"] - 1
    trainer.run(0, branch)
    out = []
    if top_snapshot or estimate_ratio is not None:
        top = copy.deepcopy(trainer)
        top._uniqueness()
        snap = top.snapshot("Ttop", branch)
        if top_snapshot:
            out.append({"config": 0, **snap})
        if estimate_ratio is not None:
            ratio = float(estimate_ratio(snap["data"]))
            if not ratio > 0 or not math.isfinite(ratio):
                raise ValueError(f"estimate_ratio must return a finite L > 0, got {ratio!r}")
            configs = [replace(c, compression_ratio=ratio) if c.rate_control else c for c in configs]
    for i, cfg in enumerate(configs):
        t = copy.deepcopy(trainer)
        t.cfg = cfg
        t.prune_percent = cfg.prune_percent
        t.run(branch, cfg.steps)
        t._uniqueness()
        t.snapshot("LR" if cfg.rate_control == 0 else "RC", cfg.steps)
        for snap in t.snapshots:
            out.append({"config": i, **snap})
    return out


def evaluate(g: sp.Gaussians, views: np.ndarray, cams) -> dict:
    """Mean PSNR (dB) and SSIM of ``g`` rendered from ``cams`` against ``views``."""
    _check_views(views, cams)
    ps, ss = [], []
    with torch.no_grad():
        for v, cam in zip(views, cams):
            img = sp.render(g, cam).clamp(0, 1)
            gt = torch.as_tensor(v, dtype=img.dtype)
            ps.append(sp.psnr(img, gt))
            ss.append(float(sp.ssim(img, gt)))
    return {"psnr": float(np.mean(ps)), "ssim": float(np.mean(ss))}
