"""A user's own diffusion model as DiffAdvMAP's prior.

``rayml.generative.diffadvmap.attack`` needs a noise predictor ``eps(x, t)`` on the continuous
levels ``t`` in ``[0, T_MAX]`` of ``rayml.purify.diffusion`` and a schedule with ``alpha_bar(t)``.
Most released diffusion models are discrete DDPMs instead: a module called as ``module(x, step)``
(a ``diffusers`` ``UNet2DModel`` returns an object with ``.sample``; a plain module returns the
tensor) trained on ``K`` steps with the cumulative products ``alphas_cumprod``. ``user_prior``
wraps such a model: level ``t`` is the fractional step ``u = t / T_MAX * K``; ``alpha_bar`` is
linear in ``u`` between the table's entries (``alpha_bar(0) = 1``, ``alpha_bar(T_MAX) =
alphas_cumprod[-1]``) and the module is called at step ``round(u) - 1`` (clipped to ``[0, K-1]``).

Assumed: images in ``[-1, 1]`` at the model's input (``attack`` maps ``[0, 1]`` images there), as
for ``diffusers`` pixel-space models; latent-diffusion models need their autoencoder around it.

Example:
    >>> import torch
    >>> from rayml.generative.diffusion_adapter import user_prior
    >>> unet = torch.nn.Conv2d(1, 1, 3, padding=1)          # any eps(x, step) module
    >>> eps, schedule = user_prior(lambda x, step: unet(x), torch.linspace(0.999, 0.01, 100))
    >>> float(schedule.alpha_bar(torch.tensor(0.0)))
    1.0
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from rayml.purify.diffusion import T_MAX

__all__ = ["TabulatedSchedule", "NoisePredictor", "user_prior"]


class TabulatedSchedule:
    """A discrete schedule's ``alphas_cumprod`` (``K`` decreasing values in ``(0, 1]``) on the
    continuous levels ``t`` in ``[0, T_MAX]`` (``alpha_bar``, as ``VPSchedule`` provides)."""

    def __init__(self, alphas_cumprod):
        ac = torch.as_tensor(alphas_cumprod, dtype=torch.float32).flatten()
        if ac.numel() < 2 or not bool(((ac > 0) & (ac <= 1)).all()) or bool((ac[1:] > ac[:-1]).any()):
            raise ValueError("alphas_cumprod must hold >= 2 non-increasing values in (0, 1]")
        self.table = torch.cat([torch.ones(1), ac])        # position u = 0 .. K
        self.steps = int(ac.numel())

    def position(self, t: torch.Tensor) -> torch.Tensor:
        """The fractional step ``u = t / T_MAX * K`` of levels ``t``."""
        return (torch.as_tensor(t, dtype=torch.float32) / T_MAX * self.steps).clamp(0.0, float(self.steps))

    def alpha_bar(self, t: torch.Tensor) -> torch.Tensor:
        """``alpha_bar`` at levels ``t``, linear between the table's entries."""
        u = self.position(t)
        lo = u.floor().long().clamp(max=self.steps - 1)
        w = u - lo.float()
        table = self.table.to(u.device)
        return table[lo] * (1 - w) + table[lo + 1] * w


class NoisePredictor(nn.Module):
    """``eps(x, t)`` on continuous levels from a discrete ``module(x, step)`` (see the module doc)."""

    def __init__(self, module: Callable, schedule: TabulatedSchedule):
        super().__init__()
        if not callable(module):
            raise TypeError(f"module must be callable as module(x, step), got {type(module).__name__}")
        self.module = module
        self.schedule = schedule

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        step = (self.schedule.position(t).round().long() - 1).clamp(0, self.schedule.steps - 1)
        out = self.module(x, step.to(x.device))
        out = getattr(out, "sample", out)
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            raise ValueError(f"module(x, step) must return a noise tensor of x's shape {tuple(x.shape)}")
        return out


def user_prior(module: Callable, alphas_cumprod) -> tuple[NoisePredictor, TabulatedSchedule]:
    """``(eps, schedule)`` for ``attack(eps, classifier, x, y, cfg, schedule=schedule)`` from a user's
    discrete noise-prediction model and its ``alphas_cumprod`` (``diffusers``: ``scheduler.alphas_cumprod``)."""
    schedule = TabulatedSchedule(alphas_cumprod)
    return NoisePredictor(module, schedule), schedule
