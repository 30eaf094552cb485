"""SSNI: Sample-specific Score-aware Noise Injection for diffusion-based purification.

Yuhao Sun, Jiacheng Zhang, Zesheng Ye, Chaowei Xiao, Feng Liu, "Sample-specific Noise Injection
for Diffusion-based Adversarial Purification", ICML 2025 (arXiv 2506.06027; authors' code
tmlr-group/SSNI). Diffusion-based purification (DiffPure, GDMP) injects noise to one level
``t*`` for every input; SSNI picks a level per input from how far it lies from the clean data:

1. Score norm (the paper's EPS statistic, after Zhang et al., ICML 2023): with the pre-trained
   score network ``s``, ``EPS(x) = 1/K sum_{k=1..K} s(sqrt(ab_k) x + sqrt(1 - ab_k) z_k, k)``
   at the ``K`` smallest levels ``k = 1..K`` (``K = 20`` in the paper, time ``k / 1000``), and
   the statistic is ``||EPS(x)||_2`` (``score_norms``).
2. Reference statistics of that norm over clean training images (``reference_stats``).
3. A reweighting function turns the norm into the sample's level ``t(x)`` (``sample_levels``):
   SSNI-N (sigmoid): ``t(x) = round(sigmoid((||EPS(x)|| - mu_ref) / tau) * (t* + b))``;
   SSNI-L (linear): ``t(x) = (||EPS(x)|| - min) * t* / (max - min) + b`` with ``min``/``max``
   over the reference norms and the batch being purified (the paper, per the research notes;
   ``SSNIConfig.linear_range="reference"`` keeps the reference set's only, batch-independent).
   Both increase with the norm: inputs farther from the data (adversarial) get more noise, clean
   inputs less.
4. Purify each input at its own level (``purify`` with ``ssni=...``): DiffPure or GDMP with the
   per-sample ``t`` (the reverse process follows each sample's own schedule).

Everything is created on the input's device and dtype (no CPU tensors for a CUDA model).

Assumed: ``tau`` is given in units of the reference norms' standard deviation (the paper sets it
on CIFAR-10's norm scale, which does not transfer to another network); SSNI-L is also rounded to
a whole step and both are clipped to ``[0, 1000]``; the perturbation noise of the score norm is
drawn afresh per call from the caller's seed.

Examples:
    >>> from rayml.purify import diffusion, ssni
    >>> model = diffusion.load_score_model()                        # doctest: +SKIP
    >>> ref = ssni.reference_stats(model, x_train[:500])            # doctest: +SKIP
    >>> out, t = ssni.purify(model, x, ref=ref, ssni=ssni.SSNIConfig("N"), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayml.purify import diffusion
from rayml.purify.diffusion import T_MAX, VPSchedule

__all__ = ["SSNIConfig", "ReferenceStats", "score_norms", "reference_stats", "sample_levels",
           "PurifyConfig", "purify", "fit_score_model", "METHODS", "VARIANTS"]

METHODS = ("diffpure", "gdmp")
VARIANTS = ("N", "L")
LINEAR_RANGES = ("reference+batch", "reference")


@dataclass(frozen=True)
class SSNIConfig:
    """SSNI's settings.

    Args:
        variant: ``"N"`` (sigmoid reweighting, SSNI-N) or ``"L"`` (linear, SSNI-L).
        t_star: the base level ``t*`` the reweighting scales (paper: 100 on CIFAR-10).
        bias: the bias ``b`` (paper: 5).
        tau: the sigmoid temperature, in reference standard deviations (SSNI-N only).
        eps_steps: ``K``, the levels ``1..K`` averaged in the score norm (paper: 20).
        linear_range: SSNI-L's ``min`` / ``max``: ``"reference+batch"`` (the paper, per the research
            notes: over the reference norms and the batch being purified, so the batch's largest norm
            gets at most ``t* + b``) or ``"reference"`` (the reference set only: a sample's level does
            not depend on its batch, but norms above the reference max extrapolate past ``t* + b``).
    """

    variant: str = "N"
    t_star: float = 100.0
    bias: float = 5.0
    tau: float = 1.0
    eps_steps: int = 20
    linear_range: str = "reference+batch"

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if not 0 < self.t_star <= T_MAX:
            raise ValueError(f"t_star must be in (0, {T_MAX:g}], got {self.t_star!r}")
        if not 0 <= self.bias < T_MAX:
            raise ValueError(f"bias must be in [0, {T_MAX:g}), got {self.bias!r}")
        if not self.tau > 0:
            raise ValueError(f"tau must be > 0, got {self.tau!r}")
        if not isinstance(self.eps_steps, int) or isinstance(self.eps_steps, bool) or not 1 <= self.eps_steps <= 200:
            raise ValueError(f"eps_steps must be an integer in [1, 200], got {self.eps_steps!r}")
        if self.linear_range not in LINEAR_RANGES:
            raise ValueError(f"linear_range must be one of {LINEAR_RANGES}, got {self.linear_range!r}")


@dataclass(frozen=True)
class ReferenceStats:
    """Mean, standard deviation, min and max of the score norms of clean reference images."""

    mean: float
    std: float
    min: float
    max: float
    n: int


def score_norms(model: diffusion.ScoreNet, images: torch.Tensor, *, eps_steps: int = 20, seed=0,
                schedule: VPSchedule = VPSchedule()) -> torch.Tensor:
    """``||EPS(x)||_2`` per image (images in ``[0, 1]``); differentiable in ``images``.

    ``EPS(x)`` is the mean over ``k = 1..eps_steps`` of the score at ``x`` perturbed to level ``k``.
    """
    if not isinstance(eps_steps, int) or eps_steps < 1:
        raise ValueError(f"eps_steps must be a positive integer, got {eps_steps!r}")
    g = diffusion._generator(seed, images.device)
    x = diffusion.to_model(images)
    n = x.shape[0]
    ks = torch.arange(1, eps_steps + 1, dtype=torch.float32, device=x.device).repeat_interleave(n)
    xs = x.repeat(eps_steps, 1, 1, 1)
    ab = schedule.alpha_bar(ks)[:, None, None, None]
    xk = torch.sqrt(ab) * xs + torch.sqrt(1.0 - ab) * diffusion._noise(xs.shape, g, xs)
    s = diffusion.score(model, xk, ks, schedule)
    eps = s.reshape(eps_steps, n, *x.shape[1:]).mean(0)
    return eps.flatten(1).norm(dim=1)


def reference_stats(model: diffusion.ScoreNet, images: torch.Tensor, *, eps_steps: int = 20, seed=0,
                    batch: int = 256) -> ReferenceStats:
    """Score-norm statistics over clean reference images (the paper uses 5000 CIFAR-10 training images)."""
    if images.shape[0] < 2:
        raise ValueError(f"images must hold at least 2 reference images, got {images.shape[0]}")
    g = diffusion._generator(seed, images.device)
    with torch.no_grad():
        norms = torch.cat([score_norms(model, images[i:i + batch], eps_steps=eps_steps, seed=g)
                           for i in range(0, images.shape[0], batch)])
    return ReferenceStats(float(norms.mean()), float(norms.std()), float(norms.min()), float(norms.max()),
                          int(norms.numel()))


def sample_levels(norms: torch.Tensor, ref: ReferenceStats, cfg: SSNIConfig, *,
                  straight_through: bool = False) -> torch.Tensor:
    """The reweighting function: per-sample levels ``t(x)`` from score norms (SSNI-N or SSNI-L).

    Rounded to whole steps and clipped to ``[0, 1000]``. SSNI-N's level depends only on its own norm
    and the reference statistics ``ref``; SSNI-L's ``min`` / ``max`` are taken over the reference norms
    and the batch (``cfg.linear_range="reference+batch"``, the paper) or the reference set only
    (``"reference"``: batch-independent levels). With ``straight_through`` the rounding passes
    gradients unchanged (an adaptive attack that differentiates through ``t(x)``, the batch's
    extremes included).
    """
    if cfg.variant == "N":
        w = torch.sigmoid((norms - ref.mean) / (cfg.tau * max(ref.std, 1e-12)))
        t = w * (cfg.t_star + cfg.bias)
    else:
        lo = torch.as_tensor(ref.min, dtype=norms.dtype, device=norms.device)
        hi = torch.as_tensor(ref.max, dtype=norms.dtype, device=norms.device)
        if cfg.linear_range == "reference+batch":
            lo, hi = torch.minimum(lo, norms.min()), torch.maximum(hi, norms.max())
        t = (norms - lo) * cfg.t_star / (hi - lo).clamp_min(1e-12) + cfg.bias
    t = t.clamp(0.0, T_MAX)
    rounded = torch.round(t)
    return t + (rounded - t).detach() if straight_through else rounded.detach()


@dataclass(frozen=True)
class PurifyConfig:
    """How to purify: the base method, its level, sampler stride and GDMP guidance.

    Args:
        method: ``"diffpure"`` or ``"gdmp"``.
        t_star: the constant level of the base method (and SSNI's ``t*``).
        stride: the reverse sampler's stride (1: full DDPM).
        guide_radius, guide_scale: GDMP's guidance (radius in ``[0, 1]`` image units).
    """

    method: str = "diffpure"
    t_star: float = 100.0
    stride: float = 1.0
    guide_radius: float = 0.1
    guide_scale: float = 1.0

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not 0 <= self.t_star <= T_MAX:
            raise ValueError(f"t_star must be in [0, {T_MAX:g}], got {self.t_star!r}")
        if not self.stride > 0:
            raise ValueError(f"stride must be > 0, got {self.stride!r}")
        if not (self.guide_radius > 0 and self.guide_scale > 0):
            raise ValueError(f"guide_radius and guide_scale must be > 0, got {self.guide_radius}, {self.guide_scale}")


def purify(model: diffusion.ScoreNet, images: torch.Tensor, cfg: PurifyConfig = PurifyConfig(), *,
           ssni: SSNIConfig | None = None, ref: ReferenceStats | None = None, seed=0,
           straight_through: bool = False, stride: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Purify images in ``[0, 1]``: the base method at ``t*``, or with SSNI's per-sample ``t(x)``.

    Returns ``(purified images, levels used)``. ``stride`` overrides ``cfg.stride`` (the attacks'
    surrogate process). Gradients flow to ``images``; through ``t(x)`` only if ``straight_through``.
    """
    if images.dim() != 4:
        raise ValueError(f"images must be (N, C, H, W), got {tuple(images.shape)}")
    g = diffusion._generator(seed, images.device)
    n = images.shape[0]
    if ssni is None:
        t = torch.full((n,), float(cfg.t_star), device=images.device)
    else:
        if ref is None:
            raise ValueError("ref (ReferenceStats) is required with ssni")
        if straight_through:
            norms = score_norms(model, images, eps_steps=ssni.eps_steps, seed=g)
        else:
            with torch.no_grad():
                norms = score_norms(model, images.detach(), eps_steps=ssni.eps_steps, seed=g)
        t = sample_levels(norms, ref, ssni, straight_through=straight_through)
    step = cfg.stride if stride is None else stride
    if cfg.method == "diffpure":
        out = diffusion.diffpure(model, images, t, stride=step, seed=g)
    else:
        out = diffusion.gdmp(model, images, t, stride=step, seed=g, guide_radius=cfg.guide_radius,
                             guide_scale=cfg.guide_scale)
    return out, t.detach()


def fit_score_model(images, *, iterations: int = 4000, width: int = 16, batch: int = 128, lr: float = 2e-3,
                    seed: int = 0) -> tuple[diffusion.ScoreNet, dict]:
    """Train the score network SSNI needs on the user's own clean images (issue 40).

    SSNI takes a pre-trained score network (the paper: a CIFAR-10 / ImageNet diffusion model); this
    fits rayml's small VP-SDE ``ScoreNet`` by denoising score matching (``diffusion.train_score_model``)
    to ``images``, a float ``(N, C, H, W)`` tensor or array in ``[0, 1]`` with even H and W. Use the
    result with ``reference_stats`` (on clean images held apart from the training ones, or the same)
    and ``purify``; wrap a pretrained ``diffusers`` UNet instead with ``rayml.purify.adapters``.

    Returns ``(model, card)``: the EMA model with frozen parameters, and its training card (config,
    seconds, final loss, the images' shape and sha256).

    Examples:
        >>> import torch
        >>> from rayml.purify import ssni
        >>> x = torch.rand(32, 1, 4, 4)
        >>> model, card = ssni.fit_score_model(x, iterations=5, batch=8)
        >>> card["data"]["images"]
        [32, 1, 4, 4]
    """
    config = diffusion.DiffusionConfig(width=width, iterations=iterations, batch=batch, lr=lr, seed=seed)
    model, card = diffusion.train_score_model(config, images=diffusion.check_images(images))
    for p in model.parameters():
        p.requires_grad_(False)
    return model, card
