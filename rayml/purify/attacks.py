"""Attacks to evaluate purification with: PGD, PGD+EOT through the purification, BPDA+EOT.

- ``pgd``: projected gradient descent (Madry et al., 2018) on any gradient oracle, ``l_inf``
  (signed steps) or ``l_2`` (normalised steps), projected to the ball and to ``[0, 1]``.
- ``classifier_grad``: the cross-entropy gradient of the bare classifier (PGD on the classifier;
  its examples are also the transfer attack on every defence).
- ``eot_grad``: the adaptive white-box attack SSNI is evaluated with (PGD+EOT): the gradient of
  the defended classifier's loss, differentiated through the purification (a surrogate reverse
  process with a larger stride, after Lee & Kim, ICCV 2023), averaged over ``eot`` draws of its
  randomness.
- ``bpda_eot_grad``: BPDA+EOT (Athalye et al., 2018): purification treated as the identity in
  the backward pass, the classifier's gradient at the purified images averaged over ``eot`` draws.

Every attack takes a seed; the same seed gives the same adversarial examples.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from rayml.purify import diffusion

__all__ = ["GradFn", "pgd", "classifier_grad", "eot_grad", "bpda_eot_grad", "NORMS"]

NORMS = ("linf", "l2")
# grad_fn(x_adv, y, generator) -> (gradient of the loss to ascend w.r.t. x_adv)
GradFn = Callable[[torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor]


def _project(x_adv: torch.Tensor, x: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    d = x_adv - x
    if norm == "linf":
        d = d.clamp(-eps, eps)
    else:
        n = d.flatten(1).norm(dim=1).clamp(min=1e-12)
        d = d * torch.clamp(eps / n, max=1.0)[:, None, None, None]
    return (x + d).clamp(0.0, 1.0)


def pgd(grad_fn: GradFn, x: torch.Tensor, y: torch.Tensor, *, eps: float, iterations: int, step: float | None = None,
        norm: str = "linf", random_start: bool = True, seed=0) -> torch.Tensor:
    """PGD maximising the loss whose gradient ``grad_fn`` returns; images in ``[0, 1]``.

    ``step`` defaults to ``2.5 * eps / iterations`` (Madry et al.). Returns the adversarial images.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
    step = 2.5 * eps / iterations if step is None else step
    g = diffusion._generator(seed, x.device)
    x = x.detach()
    if random_start:
        if norm == "linf":
            start = (diffusion._noise(x.shape, g, x, "rand") * 2 - 1) * eps
        else:
            u = diffusion._noise(x.shape, g, x)
            start = u / u.flatten(1).norm(dim=1)[:, None, None, None] * eps * diffusion._noise((x.shape[0],), g, x, "rand")[:, None, None, None]
        x_adv = _project(x + start, x, eps, norm)
    else:
        x_adv = x.clone()
    for _ in range(iterations):
        grad = grad_fn(x_adv, y, g)
        if not torch.isfinite(grad).all():
            raise RuntimeError("pgd: the attack gradient is not finite")
        if norm == "linf":
            x_adv = x_adv + step * grad.sign()
        else:
            x_adv = x_adv + step * grad / grad.flatten(1).norm(dim=1).clamp(min=1e-12)[:, None, None, None]
        x_adv = _project(x_adv.detach(), x, eps, norm)
    return x_adv


def classifier_grad(classifier: torch.nn.Module) -> GradFn:
    """Cross-entropy gradient of the bare classifier."""

    def grad(x, y, g):
        x = x.detach().requires_grad_(True)
        loss = F.cross_entropy(classifier(x), y, reduction="sum")
        return torch.autograd.grad(loss, x)[0]

    return grad


def eot_grad(classifier: torch.nn.Module, purify_fn: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
             eot: int, penalty: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None) -> GradFn:
    """Full gradient through ``purify_fn(images, generator)``, averaged over ``eot`` draws (one batched pass).

    ``penalty(images, generator)``: per-image values subtracted from the loss (differentiable), e.g.
    ``lambda * score norm``: the adaptive attack on a detector-driven defence that keeps its input's
    score norm low while fooling the classifier (cross-entropy minus lambda times the norm)."""
    if not isinstance(eot, int) or eot < 1:
        raise ValueError(f"eot must be a positive integer, got {eot!r}")

    def grad(x, y, g):
        x = x.detach().requires_grad_(True)
        xs = x.repeat(eot, 1, 1, 1)
        loss = F.cross_entropy(classifier(purify_fn(xs, g)), y.repeat(eot), reduction="sum") / eot
        if penalty is not None:
            loss = loss - penalty(x, g).sum()
        return torch.autograd.grad(loss, x)[0]

    return grad


def bpda_eot_grad(classifier: torch.nn.Module, purify_fn: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
                  eot: int) -> GradFn:
    """BPDA+EOT: the classifier's gradient at purified copies, passed straight to the input."""
    if not isinstance(eot, int) or eot < 1:
        raise ValueError(f"eot must be a positive integer, got {eot!r}")

    def grad(x, y, g):
        n = x.shape[0]
        with torch.no_grad():
            xp = purify_fn(x.detach().repeat(eot, 1, 1, 1), g)
        xp.requires_grad_(True)
        loss = F.cross_entropy(classifier(xp), y.repeat(eot), reduction="sum") / eot
        gp = torch.autograd.grad(loss, xp)[0]
        return gp.reshape(eot, n, *x.shape[1:]).sum(0)

    return grad
