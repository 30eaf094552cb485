"""A small VP-SDE / DDPM diffusion model on scikit-learn's digits, and diffusion-based purification.

Shared by the purification methods of rayml (SSNI, DiffAdvMAP). Everything here works on any
image batch ``(N, C, H, W)`` with values in ``[0, 1]`` (``H``, ``W`` even) and any per-sample
noise level ``t`` in ``[0, 1000]`` (real valued):

- ``VPSchedule``: the VP-SDE of Song et al. (2021) as DiffPure uses it (``beta_min = 0.1``,
  ``beta_max = 20``, time ``t / 1000``); ``alpha_bar(t) = exp(-beta_min s - (beta_max -
  beta_min) s^2 / 2)`` with ``s = t / 1000``, the continuous limit of DDPM's linear betas
  ``1e-4 .. 0.02`` over 1000 steps.
- ``ScoreNet``: an epsilon-prediction network (a two-level U-Net with time embedding); the score
  is ``s(x, t) = -eps(x, t) / sqrt(1 - alpha_bar(t))`` (``score``).
- ``diffuse``: the forward process to level ``t``: ``sqrt(ab) x + sqrt(1 - ab) z``.
- ``reverse``: ancestral DDPM sampling from each sample's own ``t`` down to 0 on a grid of
  stride ``stride`` (stride 1: the 1000-step DDPM; larger strides: the respaced DDPM whose step
  ``a -> b`` uses ``beta = 1 - ab(a)/ab(b)``, the surrogate process the adaptive attacks
  differentiate through). An optional guidance term (GDMP) shifts each step's mean.
- ``diffpure`` (Nie et al., ICML 2022) and ``gdmp`` (Wang et al., 2022, guided by the input):
  purification = diffuse to ``t*`` then reverse; ``t`` may be one number or one per sample,
  which is what SSNI plugs in. ``t = 0`` returns the input unchanged.
- ``train_score_model`` / ``load_score_model``: denoising score matching on the digits training
  split, cached under ``~/.cache/rayml/purify`` keyed by a hash of the config; the default config
  ships inside the package (``rayml/purify/weights/score_digits.pt``).

Assumed: the predicted clean image is clipped to ``[-1, 1]`` in each reverse step (as the
guided-diffusion code DiffPure and GDMP build on does); the last step (to ``t = 0``) is
noiseless; the model keeps an EMA of its weights (decay 0.995) that is what is saved.

Examples:
    >>> import torch
    >>> from rayml.purify import diffusion
    >>> model = diffusion.load_score_model()                      # doctest: +SKIP
    >>> x = torch.rand(4, 1, 8, 8)
    >>> y = diffusion.diffpure(model, x, t=100, seed=0)           # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "T_MAX",
    "VPSchedule",
    "ScoreNet",
    "DiffusionConfig",
    "digits_split",
    "check_images",
    "to_model",
    "to_image",
    "score",
    "diffuse",
    "reverse",
    "diffpure",
    "gdmp",
    "gdmp_scale",
    "as_levels",
    "train_score_model",
    "load_score_model",
    "config_hash",
    "cache_dir",
    "WEIGHTS_DIR",
]

T_MAX = 1000.0
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


@dataclass(frozen=True)
class VPSchedule:
    """The VP-SDE noise schedule on times ``t`` in ``[0, T_MAX]``."""

    beta_min: float = 0.1
    beta_max: float = 20.0

    def __post_init__(self):
        if not (0 < self.beta_min < self.beta_max):
            raise ValueError(f"beta_min, beta_max must satisfy 0 < beta_min < beta_max, got {self.beta_min}, {self.beta_max}")

    def alpha_bar(self, t: torch.Tensor) -> torch.Tensor:
        """``alpha_bar(t) = exp(-int_0^s beta)``, ``s = t / T_MAX``; ``alpha_bar(0) = 1``."""
        s = t / T_MAX
        return torch.exp(-(self.beta_min * s + 0.5 * (self.beta_max - self.beta_min) * s * s))


def to_model(x: torch.Tensor) -> torch.Tensor:
    """Images in ``[0, 1]`` to the model's ``[-1, 1]``."""
    return 2.0 * x - 1.0


def to_image(x: torch.Tensor) -> torch.Tensor:
    """The model's ``[-1, 1]`` back to ``[0, 1]`` (clipped)."""
    return ((x + 1.0) / 2.0).clamp(0.0, 1.0)


# ----------------------------------------------------------------------------- the network
def _time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None, :]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class _ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, t_dim: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(min(8, c_in), c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.temb = nn.Linear(t_dim, c_out)
        self.norm2 = nn.GroupNorm(min(8, c_out), c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(emb)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class ScoreNet(nn.Module):
    """Epsilon prediction ``eps(x, t)`` for images ``(N, channels, H, W)`` in ``[-1, 1]``, H and W even.

    Two resolutions (H x W and H/2 x W/2) with one skip connection; ``t`` in ``[0, T_MAX]``.
    """

    def __init__(self, channels: int = 1, width: int = 16):
        super().__init__()
        if channels < 1 or width < 8 or width % 8:
            raise ValueError(f"channels must be >= 1 and width a multiple of 8, got {channels}, {width}")
        self.channels, self.width = channels, width
        t_dim = 4 * width
        self.t_dim = t_dim
        self.t_mlp = nn.Sequential(nn.Linear(t_dim, t_dim), nn.SiLU(), nn.Linear(t_dim, t_dim))
        self.inp = nn.Conv2d(channels, width, 3, padding=1)
        self.down1 = _ResBlock(width, width, t_dim)
        self.pool = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.mid1 = _ResBlock(2 * width, 2 * width, t_dim)
        self.mid2 = _ResBlock(2 * width, 2 * width, t_dim)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.up1 = _ResBlock(2 * width, width, t_dim)
        self.out_norm = nn.GroupNorm(8, width)
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.channels or x.shape[2] % 2 or x.shape[3] % 2:
            raise ValueError(f"x must be (N, {self.channels}, H, W) with H, W even, got {tuple(x.shape)}")
        emb = self.t_mlp(_time_embedding(t, self.t_dim))
        h0 = self.down1(self.inp(x), emb)
        h = self.mid2(self.mid1(self.pool(h0), emb), emb)
        h = self.up1(torch.cat([self.up(h), h0], dim=1), emb)
        return self.out(F.silu(self.out_norm(h)))


def as_levels(t, n: int, device=None) -> torch.Tensor:
    """``t`` (a number or ``n`` numbers) as a float tensor of ``n`` levels in ``[0, T_MAX]`` on ``device``.

    ``device`` defaults to ``t``'s own device when ``t`` is a tensor, else the CPU.
    """
    if device is None:
        device = t.device if isinstance(t, torch.Tensor) else "cpu"
    tt = torch.as_tensor(t, dtype=torch.float32, device=device)
    if tt.dim() == 0:
        tt = tt.expand(n).clone()
    if tt.shape != (n,):
        raise ValueError(f"t must be a number or {n} numbers, got shape {tuple(tt.shape)}")
    if not torch.isfinite(tt).all() or (tt < 0).any() or (tt > T_MAX).any():
        raise ValueError(f"t must lie in [0, {T_MAX:g}], got {tt.min().item():g} .. {tt.max().item():g}")
    return tt


def score(model: ScoreNet, x: torch.Tensor, t, schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """The score ``grad log p_t(x) = -eps(x, t) / sqrt(1 - alpha_bar(t))`` at model-scale ``x`` (t > 0)."""
    tt = as_levels(t, x.shape[0], device=x.device)
    if (tt <= 0).any():
        raise ValueError("t must be > 0 for the score")
    sig = torch.sqrt(1.0 - schedule.alpha_bar(tt))[:, None, None, None]
    return -model(x, tt) / sig


def _sqrt0(v: torch.Tensor) -> torch.Tensor:
    """``sqrt(v)`` for ``v >= 0`` that is exactly 0 at 0 and has a finite (zero) gradient there."""
    pos = v > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, v, torch.ones_like(v))), torch.zeros_like(v))


def _generator(seed, device=None) -> torch.Generator:
    """A generator seeded from ``seed`` (or ``seed`` itself if it is one), on ``device`` for accelerators.

    CPU and ``meta`` tensors draw from a CPU generator; a CUDA (or other accelerator) input gets a
    generator on its own device, so noise is created where the model runs.
    """
    if isinstance(seed, torch.Generator):
        return seed
    dev = torch.device("cpu" if device is None else device)
    g = torch.Generator(device=dev) if dev.type not in ("cpu", "meta") else torch.Generator()
    g.manual_seed(int(np.random.SeedSequence(int(seed)).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
    return g


def _noise(shape, g: torch.Generator, like: torch.Tensor, kind: str = "randn") -> torch.Tensor:
    """Standard normal (or uniform, ``kind="rand"``) noise of ``shape`` with ``like``'s device and dtype.

    Drawn on ``like``'s device when the generator lives there (or ``like`` is a CPU/meta tensor);
    a generator on another device draws where it lives and the result is moved.
    """
    fn = torch.randn if kind == "randn" else torch.rand
    dev = like.device
    if g.device.type == dev.type or dev.type == "meta":
        return fn(shape, generator=g, device=dev, dtype=like.dtype)
    return fn(shape, generator=g, device=g.device, dtype=like.dtype).to(dev)


def diffuse(x: torch.Tensor, t, seed=0, schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """Forward process: model-scale ``x`` to level ``t`` (per sample), ``sqrt(ab) x + sqrt(1 - ab) z``."""
    tt = as_levels(t, x.shape[0], device=x.device)
    ab = schedule.alpha_bar(tt)[:, None, None, None]
    z = _noise(x.shape, _generator(seed, x.device), x)
    return torch.sqrt(ab) * x + _sqrt0(1.0 - ab) * z


Guide = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def reverse(model: ScoreNet, x: torch.Tensor, t, *, stride: float = 1.0, seed=0,
            guide: Guide | None = None, schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """Ancestral DDPM sampling of model-scale ``x`` from each sample's level ``t`` down to 0.

    Each step goes from the current level ``a`` to the largest multiple of ``stride`` below it,
    ``b``, drawing from the posterior ``q(x_b | x_a, x0_hat)`` of the (respaced) forward process
    with ``x0_hat = (x_a - sqrt(1 - ab_a) eps(x_a, a)) / sqrt(ab_a)`` clipped to ``[-1, 1]``.
    ``guide(x_a, a)``, if given, returns a gradient ``g`` and the step's mean becomes
    ``mean - var * g`` (GDMP, Wang et al. 2022, Eq. 8). Differentiable in ``x`` (and in ``t``).
    """
    if stride <= 0:
        raise ValueError(f"stride must be > 0, got {stride!r}")
    g = _generator(seed, x.device)
    cur = as_levels(t, x.shape[0], device=x.device)
    while bool((cur > 0).any()):
        active = (cur > 0)
        nxt = torch.clamp(torch.ceil(cur.detach() / stride - 1.0) * stride, min=0.0)
        a = torch.where(active, cur, torch.ones_like(cur))
        ab_a = schedule.alpha_bar(a)[:, None, None, None]
        ab_b = schedule.alpha_bar(nxt)[:, None, None, None]
        eps = model(x, a)
        x0 = ((x - torch.sqrt(1.0 - ab_a) * eps) / torch.sqrt(ab_a)).clamp(-1.0, 1.0)
        beta = 1.0 - ab_a / ab_b
        mean = (torch.sqrt(ab_b) * beta / (1.0 - ab_a)) * x0 + (torch.sqrt(1.0 - beta) * (1.0 - ab_b) / (1.0 - ab_a)) * x
        var = beta * (1.0 - ab_b) / (1.0 - ab_a)
        if guide is not None:
            mean = mean - var * guide(x, a)
        z = _noise(x.shape, g, x)
        x_new = mean + _sqrt0(var.clamp(min=0.0)) * z
        x = torch.where(active[:, None, None, None], x_new, x)
        cur = torch.where(active, nxt, cur.detach())
    return x


def diffpure(model: ScoreNet, images: torch.Tensor, t, *, stride: float = 1.0, seed=0,
             schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """DiffPure (Nie et al., ICML 2022) with the DDPM sampler: diffuse images in ``[0, 1]`` to ``t``, reverse.

    ``t``: one level or one per sample (SSNI). Returns purified images in ``[0, 1]``; ``t = 0``
    returns the input.
    """
    g = _generator(seed, images.device)
    x = to_model(images)
    xt = diffuse(x, t, seed=g, schedule=schedule)
    out = reverse(model, xt, t, stride=stride, seed=g, schedule=schedule)
    return to_image(out)


def gdmp_scale(t: torch.Tensor, guide_radius: float, guide_scale: float, schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """GDMP's time-dependent guidance scale ``sqrt(1 - ab_t) / (m sqrt(ab_t))``, ``m = 2 r / 3 / guide_scale``.

    ``r`` is the attack radius in ``[0, 1]`` image units (``2 r`` in model units); Assumed: the
    form of the scale follows the GDMP release (scale ``1/m`` times the noise-to-signal ratio).
    """
    m = 2.0 * guide_radius / 3.0 / guide_scale
    ab = schedule.alpha_bar(t)
    return torch.sqrt(1.0 - ab) / (m * torch.sqrt(ab))


def gdmp(model: ScoreNet, images: torch.Tensor, t, *, stride: float = 1.0, seed=0, guide_radius: float = 0.1,
         guide_scale: float = 1.0, schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """GDMP (Wang et al., "Guided Diffusion Model for Adversarial Purification", 2022), MSE guidance.

    Like ``diffpure`` but each reverse step's mean is pulled toward the input diffused to the
    same level, ``y_a = sqrt(ab_a) x_in + sqrt(1 - ab_a) z``: the guidance gradient is
    ``s_a * grad_x ||x_a - y_a||^2 = 2 s_a (x_a - y_a)`` with ``s_a = gdmp_scale(a)``.
    Assumed: the shift ``var * 2 s_a (x_a - y_a)`` is capped at ``x_a - y_a`` (``var * 2 s_a <= 1``).
    The release's one-step DDPM sampler never comes near the cap; a coarse stride (a large step
    variance) with a small radius (a large ``s_a``) would otherwise overshoot and diverge.
    """
    if guide_radius <= 0 or guide_scale <= 0:
        raise ValueError(f"guide_radius and guide_scale must be > 0, got {guide_radius}, {guide_scale}")
    g = _generator(seed, images.device)
    x_in = to_model(images)
    xt = diffuse(x_in, t, seed=g, schedule=schedule)

    def guide(x, a):
        ab = schedule.alpha_bar(a)[:, None, None, None]
        y = torch.sqrt(ab) * x_in + torch.sqrt(1.0 - ab) * _noise(x.shape, g, x)
        s = gdmp_scale(a, guide_radius, guide_scale, schedule)[:, None, None, None]
        # the step's posterior variance (as ``reverse`` computes it): the shift var * coef * (x - y) is
        # capped at (x - y), so a coarse stride never overshoots the diffused input
        b = torch.clamp(torch.ceil(a.detach() / stride - 1.0) * stride, min=0.0)
        ab_b = schedule.alpha_bar(b)[:, None, None, None]
        var = (1.0 - ab / ab_b) * (1.0 - ab_b) / (1.0 - ab)
        coef = torch.minimum(2.0 * s, 1.0 / var.clamp(min=1e-12))
        return coef * (x - y)

    out = reverse(model, xt, t, stride=stride, seed=g, guide=guide, schedule=schedule)
    return to_image(out)


# ----------------------------------------------------------------------------- data, training, cache
def digits_split(test_fraction: float = 0.3, seed: int = 0):
    """scikit-learn's 8x8 digits in ``[0, 1]`` as ``(x_train, y_train, x_test, y_test)`` float32 ``(N, 1, 8, 8)``.

    A stratified split with a fixed seed; the models are trained on the training part only.
    """
    return tuple(torch.from_numpy(a.copy()) for a in _digits_arrays(float(test_fraction), int(seed)))


@functools.lru_cache(maxsize=4)
def _digits_arrays(test_fraction: float, seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=test_fraction, random_state=seed, stratify=d.target)
    return xtr, ytr.astype(np.int64), xte, yte.astype(np.int64)


@dataclass(frozen=True)
class DiffusionConfig:
    """Training config of the score network (its hash names the cache file)."""

    width: int = 16
    iterations: int = 4000
    batch: int = 128
    lr: float = 2e-3
    ema: float = 0.995
    seed: int = 0
    beta_min: float = 0.1
    beta_max: float = 20.0
    data: str = "digits"

    def __post_init__(self):
        for name in ("width", "iterations", "batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")
        if not 0 <= self.ema < 1:
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        if self.data != "digits":
            raise ValueError(f"data must be 'digits', got {self.data!r}")
        VPSchedule(self.beta_min, self.beta_max)

    @property
    def schedule(self) -> VPSchedule:
        return VPSchedule(self.beta_min, self.beta_max)


def config_hash(kind: str, config) -> str:
    """A short stable hash of ``kind`` and a dataclass config."""
    blob = json.dumps({"kind": kind, **asdict(config)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_dir() -> Path:
    """``$RAYML_CACHE`` or ``~/.cache/rayml``, subfolder ``purify``."""
    from rayml.runtime import cache_root

    return cache_root() / "purify"


def train_score_model(config: DiffusionConfig = DiffusionConfig(), *, log: Callable | None = None,
                      images: torch.Tensor | None = None) -> tuple[ScoreNet, dict]:
    """Denoising score matching (epsilon prediction, ``t ~ U(0, T_MAX]``) on the digits training split,
    or on ``images`` (a float ``(N, C, H, W)`` tensor in ``[0, 1]``, even H and W) when given.

    Returns the EMA model (eval mode) and a card (config, seconds, final loss; for ``images`` their
    shape and sha256).
    """
    if images is not None:
        images = check_images(images)
    torch.manual_seed(config.seed)
    x = to_model(digits_split()[0] if images is None else images)
    sched = config.schedule
    model = ScoreNet(x.shape[1], config.width)
    ema = ScoreNet(x.shape[1], config.width)
    ema.load_state_dict(model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    lr_at = lambda k: config.lr * 0.5 * (1 + math.cos(math.pi * k / config.iterations))  # noqa: E731
    g = torch.Generator().manual_seed(config.seed)
    t0, losses = time.perf_counter(), []
    for k in range(config.iterations):
        idx = torch.randint(0, x.shape[0], (config.batch,), generator=g)
        x0 = x[idx]
        t = torch.rand(config.batch, generator=g) * (T_MAX - 1.0) + 1.0
        z = torch.randn(x0.shape, generator=g)
        ab = sched.alpha_bar(t)[:, None, None, None]
        loss = F.mse_loss(model(torch.sqrt(ab) * x0 + torch.sqrt(1 - ab) * z, t), z)
        for group in opt.param_groups:
            group["lr"] = lr_at(k)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(config.ema).add_(pm, alpha=1 - config.ema)
        losses.append(float(loss.detach()))
        if log is not None and (k + 1) % 500 == 0:
            log(f"score model: iteration {k + 1}/{config.iterations}, loss {np.mean(losses[-500:]):.4f}")
    ema.eval()
    card = {"kind": "score", "config": asdict(config), "hash": config_hash("score", config),
            "train_seconds": time.perf_counter() - t0, "final_loss": float(np.mean(losses[-200:]))}
    if images is not None:
        card["data"] = {"images": list(images.shape),
                        "sha256": hashlib.sha256(images.detach().cpu().numpy().tobytes()).hexdigest()}
    return ema, card


def check_images(images) -> torch.Tensor:
    """``images`` as a float32 ``(N, C, H, W)`` tensor in ``[0, 1]`` with even H and W (what ``ScoreNet``
    takes), or a ``ValueError`` / ``TypeError`` naming ``images``."""
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(np.ascontiguousarray(images))
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor or numpy array, got {type(images).__name__}")
    if images.ndim != 4 or images.shape[0] < 1 or images.shape[1] < 1:
        raise ValueError(f"images must have shape (N, C, H, W) with N, C >= 1, got {tuple(images.shape)}")
    h, w = images.shape[-2:]
    if h % 2 or w % 2 or h < 2 or w < 2:
        raise ValueError(f"images must have even height and width, got {h}x{w}")
    images = images.detach().to(torch.float32)
    if not torch.isfinite(images).all() or images.min() < 0 or images.max() > 1:
        raise ValueError("images must be finite and in [0, 1]")
    return images


def save_model(model: nn.Module, card: dict, path: Path) -> None:
    """Save a state dict and its card (``<path>.json``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(card, indent=2, sort_keys=True))


def find_weights(kind: str, config, name: str) -> Path | None:
    """The shipped weights ``WEIGHTS_DIR/<name>.pt`` if their card's hash matches, else the cache file if present."""
    h = config_hash(kind, config)
    shipped = WEIGHTS_DIR / f"{name}.pt"
    card = shipped.with_suffix(".json")
    if shipped.exists() and card.exists() and json.loads(card.read_text()).get("hash") == h:
        return shipped
    cached = cache_dir() / f"{kind}-{h}.pt"
    return cached if cached.exists() else None


_LOADED: dict = {}


def load_score_model(config: DiffusionConfig = DiffusionConfig(), *, train: bool = True) -> ScoreNet:
    """The score network of ``config``: shipped weights, else the cache, else trained now and cached."""
    key = ("score", config)
    if key in _LOADED:
        return _LOADED[key]
    path = find_weights("score", config, "score_digits")
    model = ScoreNet(1, config.width)
    if path is not None:
        model.load_state_dict(torch.load(path, weights_only=True))
    elif train:
        model, card = train_score_model(config)
        save_model(model, card, cache_dir() / f"score-{config_hash('score', config)}.pt")
    else:
        raise FileNotFoundError(f"no weights for score config {config_hash('score', config)}")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    _LOADED[key] = model
    return model
