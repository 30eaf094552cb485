"""Adapters that let pretrained diffusion models from other libraries drive rayml's purification.

rayml's purification (``diffusion.diffpure``, ``diffusion.gdmp``, ``ssni.purify``,
``ssni.score_norms``) needs one thing from a model: ``eps(x, t)``, the noise prediction at
model-scale images ``x`` (``[-1, 1]``) and continuous VP-SDE times ``t`` in ``[0, 1000]``; the
score is ``s(x, t) = -eps(x, t) / sqrt(1 - alpha_bar(t))`` (``diffusion.score``, Song et al. 2021,
Eq. 5 with the DDPM parameterisation of Ho et al. 2020).

``DiffusersEps`` wraps a ``diffusers`` ``UNet2DModel`` (DDPM / guided-diffusion style, trained on
``T`` discrete steps with any beta schedule) in that interface:

- time: diffusers' timestep ``k`` (``0 .. T-1``) carries the noise level ``alphas_cumprod[k]``
  of the model's own discrete schedule. rayml's process at time ``t`` has noise level
  ``alpha_bar(t)`` (``diffusion.VPSchedule``); the adapter passes the real-valued ``k`` whose
  level is that one (linear interpolation of ``-log alphas_cumprod`` in ``k``, clamped to
  ``[0, T - 1]``), so the network is always asked at the noise level it was trained for, whatever
  its beta schedule (linear, cosine, ...). The UNet's sinusoidal time embedding takes real ``k``.
- output: ``prediction_type`` ``"epsilon"`` is used as is; ``"sample"`` (``x0``) and
  ``"v_prediction"`` are converted to ``eps`` with the closed forms
  ``eps = (x - sqrt(ab) x0) / sqrt(1 - ab)`` and ``eps = sqrt(ab) v + sqrt(1 - ab) x``; a model
  that also predicts its variance (guided-diffusion's ``learn_sigma``: twice the input channels
  out) keeps the first half (the ``eps`` channels).
- input: the image size must be one the UNet supports (its ``sample_size`` by default, or any size
  divisible by ``2 ** (levels - 1)`` with ``any_size=True``); channels must match.

``from_diffusers`` wraps a UNet with its scheduler (default: diffusers' ``DDPMScheduler``, linear
betas ``1e-4 .. 0.02`` over 1000 steps). Nothing is downloaded: ``load_local`` reads a model folder
on disk (``local_files_only=True``).

Requires the optional dependency ``diffusers`` (imported lazily, only by the functions that need
it). Assumed: levels outside the model's range (``alpha_bar(t)`` above ``alphas_cumprod[0]``, i.e.
``t`` below about 1 for DDPM's schedule) are asked at timestep 0.

Examples:
    >>> from rayml.purify import adapters, ssni                                   # doctest: +SKIP
    >>> eps_model = adapters.load_local("path/to/ddpm-folder")                    # doctest: +SKIP
    >>> out, t = ssni.purify(eps_model, images, ssni.PurifyConfig(t_star=100))    # doctest: +SKIP
"""

from __future__ import annotations

import torch
from torch import nn

from rayml.purify.diffusion import T_MAX, VPSchedule

__all__ = ["DiffusersEps", "from_diffusers", "load_local", "ddpm_alphas_cumprod", "PREDICTION_TYPES"]

PREDICTION_TYPES = ("epsilon", "sample", "v_prediction")


def _require_diffusers():
    try:
        import diffusers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the diffusers adapter needs the optional dependency 'diffusers' "
                          "(pip install 'diffusers>=0.30')") from exc
    return diffusers


class DiffusersEps(nn.Module):
    """A diffusers ``UNet2DModel`` as rayml's ``eps(x, t)`` (``t`` in ``[0, 1000]``, ``x`` in ``[-1, 1]``).

    Args:
        unet: a ``diffusers.UNet2DModel`` (or any module called as ``unet(x, timestep)`` returning
            an object with ``.sample`` or a tensor, with a diffusers-style ``config``).
        alphas_cumprod: the model's discrete noise levels (its scheduler's ``alphas_cumprod``,
            ``T`` decreasing numbers in ``(0, 1)``).
        prediction_type: ``"epsilon"``, ``"sample"`` or ``"v_prediction"``.
        schedule: rayml's VP schedule the purification runs (the default unless you pass another).
        any_size: accept any height/width divisible by the UNet's total downsampling, not only
            its ``sample_size``.
    """

    def __init__(self, unet: nn.Module, alphas_cumprod, *, prediction_type: str = "epsilon",
                 schedule: VPSchedule = VPSchedule(), any_size: bool = False):
        super().__init__()
        if prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction_type must be one of {PREDICTION_TYPES}, got {prediction_type!r}")
        acp = torch.as_tensor(alphas_cumprod, dtype=torch.float64, device="cpu").reshape(-1)
        if acp.numel() < 2 or not torch.all((acp > 0) & (acp < 1)) or not torch.all(acp[1:] < acp[:-1]):
            raise ValueError("alphas_cumprod must hold >= 2 strictly decreasing numbers in (0, 1)")
        cfg = getattr(unet, "config", None)
        if cfg is None or not hasattr(cfg, "in_channels"):
            raise TypeError("unet must carry a diffusers-style config (in_channels, out_channels, sample_size)")
        self.unet = unet
        self.channels = int(cfg.in_channels)
        out = int(getattr(cfg, "out_channels", self.channels) or self.channels)
        if out not in (self.channels, 2 * self.channels):
            raise ValueError(f"the UNet predicts {out} channels for {self.channels} in: expected {self.channels} "
                             f"(eps) or {2 * self.channels} (eps and variance)")
        self.learned_sigma = out == 2 * self.channels
        size = getattr(cfg, "sample_size", None)
        self.sample_size = tuple(size) if isinstance(size, (list, tuple)) else (size, size) if size else None
        levels = len(getattr(cfg, "block_out_channels", (0,)))
        self.multiple = 2 ** max(levels - 1, 0)
        self.any_size = bool(any_size)
        # -log alphas_cumprod, increasing in k: the noise level of each discrete timestep
        self.register_buffer("levels", -torch.log(acp).to(torch.float32), persistent=False)
        self.num_train_timesteps = int(acp.numel())
        self.prediction_type = prediction_type
        self.schedule = schedule

    def accepts(self, height: int, width: int) -> bool:
        """Whether the wrapped UNet takes images of ``height x width``."""
        if self.any_size or self.sample_size is None:
            return height % self.multiple == 0 and width % self.multiple == 0 and height > 0 and width > 0
        return (height, width) == self.sample_size

    def timesteps(self, t: torch.Tensor) -> torch.Tensor:
        """The real-valued diffusers timestep ``k`` whose noise level is rayml's ``alpha_bar(t)``, in ``[0, T-1]``."""
        u = -torch.log(self.schedule.alpha_bar(t))
        lv = self.levels.to(device=u.device, dtype=u.dtype)
        j = torch.searchsorted(lv, u.detach().contiguous()).clamp(1, lv.numel() - 1)
        lo, hi = lv[j - 1], lv[j]
        k = (j - 1).to(u.dtype) + (u - lo) / (hi - lo)
        return k.clamp(0.0, lv.numel() - 1.0)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(f"x must be (N, {self.channels}, H, W), got {tuple(x.shape)}")
        if not self.accepts(x.shape[2], x.shape[3]):
            raise ValueError(f"the UNet does not take {x.shape[2]}x{x.shape[3]} images "
                             f"(sample_size {self.sample_size}, any_size={self.any_size})")
        t = t.to(dtype=x.dtype, device=x.device).reshape(-1).expand(x.shape[0])
        out = self.unet(x, self.timesteps(t))
        out = out.sample if hasattr(out, "sample") else out[0] if isinstance(out, tuple) else out
        if self.learned_sigma:
            out = out[:, : self.channels]
        if self.prediction_type == "epsilon":
            return out
        ab = self.schedule.alpha_bar(t)[:, None, None, None]
        if self.prediction_type == "sample":
            return (x - torch.sqrt(ab) * out) / torch.sqrt((1.0 - ab).clamp(min=1e-12))
        return torch.sqrt(ab) * out + torch.sqrt(1.0 - ab) * x


def ddpm_alphas_cumprod(beta_start: float = 1e-4, beta_end: float = 0.02, steps: int = 1000) -> torch.Tensor:
    """``alphas_cumprod`` of DDPM's linear betas (float64), diffusers' ``DDPMScheduler`` default."""
    betas = torch.linspace(beta_start, beta_end, steps, dtype=torch.float64, device="cpu")
    return torch.cumprod(1.0 - betas, dim=0)


def from_diffusers(unet: nn.Module, scheduler=None, *, any_size: bool = False,
                   schedule: VPSchedule = VPSchedule()) -> DiffusersEps:
    """Wrap ``unet`` with its scheduler (default: ``DDPMScheduler()``) for rayml's purification.

    The model is put in eval mode with its weights frozen (the attacks still differentiate through
    it with respect to the images).
    """
    diffusers = _require_diffusers()
    scheduler = diffusers.DDPMScheduler() if scheduler is None else scheduler
    acp = getattr(scheduler, "alphas_cumprod", None)
    if acp is None:
        raise TypeError("scheduler must have alphas_cumprod (a diffusers scheduler)")
    pred = getattr(getattr(scheduler, "config", None), "prediction_type", None) or "epsilon"
    model = DiffusersEps(unet, acp, prediction_type=pred, schedule=schedule, any_size=any_size)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def load_local(path: str, *, subfolder: str | None = None, any_size: bool = False) -> DiffusersEps:
    """Load a ``UNet2DModel`` (and the folder's ``scheduler`` config if it has one) from a local folder; no downloads."""
    diffusers = _require_diffusers()
    unet = diffusers.UNet2DModel.from_pretrained(path, subfolder=subfolder, local_files_only=True)
    try:
        scheduler = diffusers.DDPMScheduler.from_pretrained(path, subfolder="scheduler", local_files_only=True)
    except (OSError, ValueError):
        scheduler = None
    return from_diffusers(unet, scheduler, any_size=any_size)
