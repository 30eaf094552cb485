"""Model-merging operators on torch state dicts (any architecture with matching keys and shapes).

The operators MERGE^3 ("MERGE^3: Efficient Evolutionary Merging on Consumer-grade GPUs",
Mencattini et al., ICML 2025) evolves over, with the definitions of their papers and the
conventions of mergekit (which the authors' library ``mergenetic`` drives):

* ``linear``: ``sum_i w_i theta_i / sum_i w_i`` (model soups; ``normalize=False`` drops the
  division).
* ``task_arithmetic``: ``theta_0 + lam * sum_i w_i tau_i`` with task vectors
  ``tau_i = theta_i - theta_0`` (Ilharco et al., "Editing models with task arithmetic", 2023).
* ``ties``: TIES-merging (Yadav et al., NeurIPS 2023), its three steps: trim each ``tau_i`` to its
  ``density`` fraction of largest magnitudes (``magnitude_sparsify``), elect a sign per entry
  (the sign of ``sum_i w_i tau_i``, mergekit's "sum" consensus), disjoint merge (the weighted
  entries that agree with the elected sign, divided by the sum of their weights when
  ``normalize``).
* ``dare``: DARE (Yu et al., "Language models are Super Mario", ICML 2024): each ``tau_i`` keeps
  each entry with probability ``density`` and is rescaled by ``1 / density``
  (``dare_sparsify``); then task arithmetic (``ties=False``, mergekit's ``dare_linear``) or the
  TIES sign election and disjoint merge (``ties=True``, ``dare_ties``).
* ``slerp``: spherical linear interpolation of two models per tensor (Shoemake 1985; mergekit's
  ``slerp``): the angle is measured between the unit-normalised flattened tensors, the
  interpolation ``sin((1-t) W)/sin W * v0 + sin(t W)/sin W * v1`` applied to the tensors
  themselves, and nearly colinear pairs (|cos| > 0.9995) fall back to ``(1-t) v0 + t v1``.

Per-tensor parameters (``t`` of SLERP, weights and densities) may be a number, a sequence per
model, or a callable ``name -> value``; ``layer_gradient`` and ``slerp_t_schedule`` build the
per-layer-group schedules of MERGE^3's SLERP genome (mergekit's ``t: [v0, ..., vk]`` gradients
over layers with ``self_attn`` / ``mlp`` filters).

Assumed (mergekit defaults, not stated in the papers): ``ties`` normalises by the agreeing
weights and ``dare`` does not; DARE's random masks come from a ``torch.Generator`` seeded per
tensor from ``seed`` and the tensor's name, so a merge is reproducible on any worker; integer
tensors (none in ``TransformerLM``) are copied from the base.

Examples:
    >>> import torch
    >>> a, b = {"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1.0])}
    >>> linear([a, b], [1.0, 1.0])["w"]
    tensor([0.5000, 0.5000])
    >>> torch.round(slerp(a, b, 0.5)["w"], decimals=4)
    tensor([0.7071, 0.7071])
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Callable, Mapping, Sequence

import torch

__all__ = [
    "linear",
    "task_arithmetic",
    "ties",
    "dare",
    "slerp",
    "slerp_tensor",
    "magnitude_sparsify",
    "dare_sparsify",
    "elect_sign_mask",
    "layer_gradient",
    "slerp_t_schedule",
    "param_group",
    "DOT_THRESHOLD",
]

DOT_THRESHOLD = 0.9995
State = Mapping[str, torch.Tensor]
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


# --- checks and per-tensor parameters -------------------------------------------------------------

def _check_states(states: Sequence[State], what: str = "states") -> list[str]:
    if not isinstance(states, Sequence) or len(states) < 1:
        raise ValueError(f"{what} must be a non-empty sequence of state dicts")
    keys = list(states[0].keys())
    for i, s in enumerate(states[1:], 1):
        if set(s.keys()) != set(keys):
            raise ValueError(f"{what}[{i}] has other keys than {what}[0]")
        for k in keys:
            if tuple(s[k].shape) != tuple(states[0][k].shape):
                raise ValueError(f"{what}[{i}][{k!r}] has shape {tuple(s[k].shape)}, "
                                 f"expected {tuple(states[0][k].shape)}")
    return keys


def _per_model(value, n: int, name: str, key: str) -> list[float]:
    v = value(key) if callable(value) else value
    if isinstance(v, (int, float)):
        out = [float(v)] * n
    else:
        out = [float(x) for x in v]
        if len(out) != n:
            raise ValueError(f"{name} must have one value per model ({n}), got {len(out)}")
    if any(math.isnan(x) for x in out):
        raise ValueError(f"{name} must not be NaN")
    return out


def _check_density(ds: Sequence[float], name: str = "density") -> None:
    for d in ds:
        if not 0.0 < d <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {d!r}")


def _is_float(t: torch.Tensor) -> bool:
    return torch.is_floating_point(t)


# --- sparsification and sign election (TIES, DARE) ------------------------------------------------

def magnitude_sparsify(tensor: torch.Tensor, density: float) -> torch.Tensor:
    """TIES "trim": keep the ``round(density * numel)`` entries of largest magnitude, zero the rest.

    Ties at the threshold are broken by position (``torch.topk``)."""
    _check_density([density])
    if density >= 1.0:
        return tensor.clone()
    k = int(round(density * tensor.numel()))
    out = torch.zeros_like(tensor)
    if k == 0:
        return out
    flat = tensor.reshape(-1)
    idx = torch.topk(flat.abs(), k, sorted=False).indices
    out.view(-1)[idx] = flat[idx]
    return out


def dare_sparsify(tensor: torch.Tensor, density: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """DARE "drop and rescale": keep each entry with probability ``density``, divide by ``density``."""
    _check_density([density])
    if density >= 1.0:
        return tensor.clone()
    # drawn on the CPU generator, then moved: the same mask on any device
    keep = (torch.rand(tensor.shape, generator=generator, dtype=torch.float64) < density).to(tensor.device)
    return torch.where(keep, tensor / density, torch.zeros_like(tensor))


def elect_sign_mask(deltas: torch.Tensor) -> torch.Tensor:
    """TIES "elect": the mask of entries of ``deltas`` (models x ...) whose sign equals the sign of
    their sum over models (a zero sum elects +); zero entries never agree."""
    majority = torch.where(deltas.sum(dim=0) >= 0, 1.0, -1.0).to(deltas.dtype)
    return deltas.sign() == majority


def _tensor_seed(seed: int, key: str) -> int:
    h = hashlib.sha256(f"{int(seed)}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


# --- operators -------------------------------------------------------------------------------------

def linear(states: Sequence[State], weights: Sequence[float] | Callable | float = 1.0, *,
           normalize: bool = True) -> dict[str, torch.Tensor]:
    """Weighted average ``sum_i w_i theta_i / sum_i w_i`` (``normalize=False``: the plain sum)."""
    keys = _check_states(states)
    out = {}
    for k in keys:
        w = _per_model(weights, len(states), "weights", k)
        if not _is_float(states[0][k]):
            out[k] = states[0][k].clone()
            continue
        acc = sum(wi * s[k].double() for wi, s in zip(w, states))
        if normalize:
            tot = sum(w)
            if abs(tot) < 1e-12:
                raise ValueError("weights must not sum to 0 when normalize=True")
            acc = acc / tot
        out[k] = acc.to(states[0][k].dtype)
    return out


def _merge_deltas(base: State, states: Sequence[State], weights, densities, *, sparsify: str | None,
                  consensus: bool, normalize: bool, scale: float, seed: int) -> dict[str, torch.Tensor]:
    keys = _check_states([base, *states], "models")
    out = {}
    for k in keys:
        b = base[k]
        if not _is_float(b):
            out[k] = b.clone()
            continue
        w = _per_model(weights, len(states), "weights", k)
        ds = _per_model(densities, len(states), "density", k) if sparsify else [1.0] * len(states)
        _check_density(ds)
        gen = torch.Generator().manual_seed(_tensor_seed(seed, k)) if sparsify == "dare" else None
        taus = []
        for s, d in zip(states, ds):
            tau = s[k].double() - b.double()
            if sparsify == "magnitude":
                tau = magnitude_sparsify(tau, d)
            elif sparsify == "dare":
                tau = dare_sparsify(tau, d, gen)
            taus.append(tau)
        wt = torch.tensor(w, dtype=torch.float64).view(-1, *([1] * b.dim()))
        weighted = torch.stack(taus) * wt
        if consensus:
            mask = elect_sign_mask(weighted).to(torch.float64)
            mixed = (weighted * mask).sum(0)
            if normalize:
                div = (wt * mask).sum(0)
                div = torch.where(div.abs() < 1e-8, torch.ones_like(div), div)
                mixed = mixed / div
        else:
            mixed = weighted.sum(0)
            if normalize:
                tot = float(sum(w))
                mixed = mixed / (tot if abs(tot) > 1e-8 else 1.0)
        out[k] = (b.double() + scale * mixed).to(b.dtype)
    return out


def task_arithmetic(base: State, states: Sequence[State], weights: Sequence[float] | Callable | float = 1.0, *,
                    scale: float = 1.0, normalize: bool = False) -> dict[str, torch.Tensor]:
    """``theta_0 + scale * sum_i w_i (theta_i - theta_0)`` (``normalize``: divide by ``sum_i w_i``)."""
    return _merge_deltas(base, states, weights, None, sparsify=None, consensus=False, normalize=normalize,
                         scale=scale, seed=0)


def ties(base: State, states: Sequence[State], weights: Sequence[float] | Callable | float = 1.0,
         density: Sequence[float] | Callable | float = 1.0, *, scale: float = 1.0,
         normalize: bool = True) -> dict[str, torch.Tensor]:
    """TIES-merging: trim (magnitude, ``density``), elect sign, disjoint (weighted) mean; see module doc."""
    return _merge_deltas(base, states, weights, density, sparsify="magnitude", consensus=True, normalize=normalize,
                         scale=scale, seed=0)


def dare(base: State, states: Sequence[State], weights: Sequence[float] | Callable | float = 1.0,
         density: Sequence[float] | Callable | float = 1.0, *, ties: bool = True, scale: float = 1.0,
         normalize: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """DARE (drop with probability ``1 - density``, rescale by ``1 / density``), then TIES' sign
    election (``ties=True``: DARE-TIES) or plain task arithmetic (``ties=False``)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return _merge_deltas(base, states, weights, density, sparsify="dare", consensus=ties, normalize=normalize,
                         scale=scale, seed=seed)


def slerp_tensor(t: float, v0: torch.Tensor, v1: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """SLERP of two tensors at ``t`` (0: ``v0``, 1: ``v1``); linear when nearly colinear."""
    a, b = v0.double(), v1.double()
    na, nb = a.norm(), b.norm()
    if na < eps or nb < eps:
        return ((1 - t) * a + t * b).to(v0.dtype)
    dot = float((a / na * (b / nb)).sum().clamp(-1.0, 1.0))
    if abs(dot) > DOT_THRESHOLD:
        return ((1 - t) * a + t * b).to(v0.dtype)
    omega = math.acos(dot)
    so = math.sin(omega)
    return (math.sin((1 - t) * omega) / so * a + math.sin(t * omega) / so * b).to(v0.dtype)


def slerp(a: State, b: State, t: float | Callable[[str], float]) -> dict[str, torch.Tensor]:
    """SLERP of two models tensor by tensor; ``t`` a number or ``name -> t`` (e.g. ``slerp_t_schedule``)."""
    keys = _check_states([a, b], "models")
    out = {}
    for k in keys:
        tk = float(t(k) if callable(t) else t)
        if not 0.0 <= tk <= 1.0:
            raise ValueError(f"t must be in [0, 1], got {tk!r} for {k!r}")
        out[k] = slerp_tensor(tk, a[k], b[k]) if _is_float(a[k]) else a[k].clone()
    return out


# --- per-layer-group schedules ---------------------------------------------------------------------

def layer_gradient(values: Sequence[float], n_layers: int) -> list[float]:
    """Spread ``values`` (anchors at evenly spaced depths) over ``n_layers`` layers by linear
    interpolation: layer ``i`` sits at ``i / (n_layers - 1) * (len(values) - 1)`` on the anchor axis
    (mergekit's list-valued parameter gradients)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("values must be non-empty")
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers must be a positive integer, got {n_layers!r}")
    if len(vals) == 1 or n_layers == 1:
        return [vals[0]] * n_layers
    out = []
    for i in range(n_layers):
        pos = i / (n_layers - 1) * (len(vals) - 1)
        lo = min(int(math.floor(pos)), len(vals) - 2)
        frac = pos - lo
        out.append((1 - frac) * vals[lo] + frac * vals[lo + 1])
    return out


def param_group(name: str) -> tuple[str, int | None]:
    """``("self_attn" | "mlp" | "other", layer index or None)`` of a parameter name."""
    m = _LAYER.search(name)
    layer = int(m.group(1)) if m else None
    if layer is not None and ".self_attn." in name:
        return "self_attn", layer
    if layer is not None and ".mlp." in name:
        return "mlp", layer
    return "other", layer


def slerp_t_schedule(attn: Sequence[float], mlp: Sequence[float], other: float,
                     n_layers: int) -> Callable[[str], float]:
    """MERGE^3's SLERP genome as a per-tensor ``t``: ``attn`` and ``mlp`` anchors spread over the
    layers (``layer_gradient``) for attention / MLP tensors, ``other`` for everything else."""
    ta, tm = layer_gradient(attn, n_layers), layer_gradient(mlp, n_layers)
    other = float(other)

    def t_of(name: str) -> float:
        group, layer = param_group(name)
        if group == "self_attn":
            return ta[layer]
        if group == "mlp":
            return tm[layer]
        return other

    return t_of
