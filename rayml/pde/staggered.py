"""Neural PDE surrogates on staggered grids with symmetry (p1 / p4 / p4m) and physical
(mass / momentum) constraints.

Yunfei Huang, David S. Greenberg, "Geometric and Physical Constraints Synergistically Enhance
Neural PDE Surrogates", ICML 2025 (arXiv 2506.05513).

The surrogate advances a staggered shallow-water state ``x_t = (eta, U, V)`` by one coarse time
step, ``x_{t+1} = x_t + C(N(x_t))``, where

- ``N`` is a small U-Net (the paper's backbone is a modern U-Net) whose convolutions are group
  convolutions over ``group`` (``rayml.pde.staggered_layers``), entered through the staggered
  input layer and left through the staggered output layer, so ``N`` commutes with the rotations
  (p4) and reflections (p4m) of the grid, the face velocities' permutations and signs included;
- ``C`` is the hard physical constraint (the paper's output-layer constraints): ``"mass"``
  subtracts the domain mean of the ``eta`` increment (the total mass is then unchanged to
  float precision), ``"momentum"`` subtracts the mean of each transport component's increment
  (total momentum unchanged; periodic domains, where momentum is conserved), ``"both"`` does
  both, ``"none"`` nothing. Means are invariant, so ``C`` keeps the equivariance. For the
  incompressible task, ``"divfree"`` replaces the output layer by the stream-function layer
  (``StreamFunctionOutput``): face velocities are differences of a corner stream function, so
  their divergence and their domain mean (momentum) are zero to round-off.

Widths are parameter-matched across groups (``matched_width``): a group convolution with ``f``
regular fields has ``|G|`` times the weights per field pair of a plain one, so p4 / p4m models
get about ``1/sqrt(|G|)`` as many fields as p1 has channels.

Training (``train_surrogate``): Adam on the one-step MSE of the normalised increment; options
for the paper's alternatives: ``augment`` (a random D4 transform of every training pair, data
augmentation) and ``pushforward`` (Brandstetter et al. 2022: half of every batch is unrolled one
step without gradient and trained on the second step). Evaluation: autoregressive rollouts
(``rollout``) in float64, scored by NRMSE / correlation of ``eta`` over time and the drift of
mass and momentum (``rollout_scores``).

Assumed: the U-Net's depth (one pooling level), GELU activations, no normalisation layers,
kernel 3, Adam with a constant learning rate, the pushforward mixture of one half; input /
target scales are one number per kind (``eta`` and transport, shared by ``U`` and ``V`` so the
scaling commutes with rotations).

Examples:
    >>> import torch
    >>> from rayml.pde.staggered import SurrogateSpec, build_model
    >>> m = build_model(SurrogateSpec(group="p4m", constraint="mass", boundary="closed", width=2, n=8))
    >>> x = torch.randn(1, 3, 8, 8, dtype=torch.float64); x[:, 1, :, -1] = 0; x[:, 2, -1] = 0
    >>> m = m.double(); bool(abs(m(x)[:, 0].sum()) < 1e-10)
    True
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from rayml.pde.staggered_layers import (
    GROUPS,
    GroupConv2d,
    StaggeredInput,
    StaggeredOutput,
    StreamFunctionOutput,
    field_pool,
    field_upsample,
    group_elements,
    transform_state,
)

__all__ = [
    "GROUPS",
    "CONSTRAINTS",
    "ALL_CONSTRAINTS",
    "SurrogateSpec",
    "apply_constraint",
    "StaggeredUNet",
    "build_model",
    "count_parameters",
    "matched_width",
    "train_surrogate",
    "rollout",
    "rollout_scores",
    "equivariance_error",
    "load_model",
]

CONSTRAINTS = ("none", "mass", "momentum", "both")
# "divfree": the incompressible task's constraint, a stream-function output layer (exactly
# divergence-free face velocities with zero mean, i.e. mass and momentum for constant density)
ALL_CONSTRAINTS = CONSTRAINTS + ("divfree",)
BOUNDARIES = ("periodic", "closed")


@dataclass(frozen=True)
class SurrogateSpec:
    """One surrogate of the ablation grid and how it is trained.

    Attributes:
        group: ``"p1"``, ``"p4"`` or ``"p4m"``.
        constraint: ``"none"``, ``"mass"``, ``"momentum"`` or ``"both"``.
        boundary: ``"periodic"`` or ``"closed"`` (momentum needs periodic).
        width: fields (p4 / p4m) or channels (p1) of the first level; ``matched_width`` picks it.
        n: grid cells per side (even; the U-Net pools once).
        lr, steps, batch: Adam's learning rate, training steps and batch size.
        augment: train on randomly rotated / reflected pairs (data augmentation).
        pushforward: train half of each batch on the second step of a no-gradient unroll.
        kernel: odd convolution kernel size.
    """

    group: str = "p4m"
    constraint: str = "both"
    boundary: str = "periodic"
    width: int = 4
    n: int = 16
    lr: float = 1e-3
    steps: int = 300
    batch: int = 16
    augment: bool = False
    pushforward: bool = False
    kernel: int = 3

    def __post_init__(self):
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {GROUPS}, got {self.group!r}")
        if self.constraint not in ALL_CONSTRAINTS:
            raise ValueError(f"constraint must be one of {ALL_CONSTRAINTS}, got {self.constraint!r}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, got {self.boundary!r}")
        if self.boundary == "closed" and self.constraint in ("momentum", "both", "divfree"):
            raise ValueError("constraint: momentum is not conserved in a closed basin; use boundary='periodic'")
        for name in ("width", "n", "steps", "batch", "kernel"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.n % 2 or self.n < 4:
            raise ValueError(f"n must be even and >= 4, got {self.n}")
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel must be odd, got {self.kernel}")
        if not isinstance(self.lr, (int, float)) or not (0 < self.lr < 1):
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")


def apply_constraint(dx: torch.Tensor, constraint: str) -> torch.Tensor:
    """The hard constraint on increments ``(B, 3, n, n)``: remove the domain mean of the ``eta``
    increment (mass) and / or of each transport increment (momentum)."""
    if constraint not in ALL_CONSTRAINTS:
        raise ValueError(f"constraint must be one of {ALL_CONSTRAINTS}, got {constraint!r}")
    if constraint in ("none", "divfree"):   # divfree is built into the stream-function output layer
        return dx
    mean = dx.mean(dim=(-1, -2), keepdim=True)
    keep = torch.zeros(3, dtype=dx.dtype, device=dx.device)
    if constraint in ("mass", "both"):
        keep[0] = 1.0
    if constraint in ("momentum", "both"):
        keep[1:] = 1.0
    return dx - mean * keep.view(3, 1, 1)


class StaggeredUNet(nn.Module):
    """Input layer -> two-level group-conv U-Net -> output layer -> constraint (see the module doc).

    The forward pass maps a physical state ``(B, 3, n, n)`` to its physical increment; the
    buffers ``scale_in`` / ``scale_out`` (``eta`` and transport scales) are set from the data.
    """

    def __init__(self, spec: SurrogateSpec):
        super().__init__()
        self.spec = spec
        g, b, k, w = spec.group, spec.boundary, spec.kernel, spec.width
        self.inp = StaggeredInput(g, b)
        self.out = StreamFunctionOutput(g, b) if spec.constraint == "divfree" else StaggeredOutput(g, b)

        def conv(i, o):
            return GroupConv2d(i, o, g, kernel=k, boundary=b)

        self.enc = nn.ModuleList([conv(self.inp.fields, w), conv(w, w)])
        self.mid = nn.ModuleList([conv(w, 2 * w), conv(2 * w, 2 * w)])
        self.dec = nn.ModuleList([conv(3 * w, w), conv(w, self.out.fields)])
        self.register_buffer("scale_in", torch.ones(2))
        self.register_buffer("scale_out", torch.ones(2))

    @staticmethod
    def _per_kind(s: torch.Tensor) -> torch.Tensor:
        return torch.stack([s[0], s[1], s[1]]).view(1, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x / self._per_kind(self.scale_in))
        for c in self.enc:
            h = F.gelu(c(h))
        skip = h
        h = field_pool(h)
        for c in self.mid:
            h = F.gelu(c(h))
        h = torch.cat([field_upsample(h), skip], dim=1)
        h = F.gelu(self.dec[0](h))
        dx = self.out(self.dec[1](h)) * self._per_kind(self.scale_out)
        return apply_constraint(dx, self.spec.constraint)


def build_model(spec: SurrogateSpec) -> StaggeredUNet:
    """The surrogate of ``spec`` (float32, untrained)."""
    return StaggeredUNet(spec)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def matched_width(group: str, base_width: int, *, boundary: str = "periodic", n: int = 8, kernel: int = 3) -> int:
    """The ``width`` for ``group`` whose parameter count is closest to p1's at ``base_width``."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
    if isinstance(base_width, bool) or not isinstance(base_width, int) or base_width < 1:
        raise ValueError(f"base_width must be a positive integer, got {base_width!r}")

    def params(g, w):
        return count_parameters(build_model(SurrogateSpec(group=g, constraint="none", boundary=boundary,
                                                          width=w, n=n, kernel=kernel)))

    target = params("p1", base_width)
    return min(range(1, base_width + 1), key=lambda w: (abs(params(group, w) - target), w))


def _random_elements(batch: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    elems = group_elements("p4m")
    return [elems[i] for i in rng.integers(0, len(elems), size=batch)]


def _augment(x: torch.Tensor, y: torch.Tensor, boundary: str, rng: np.random.Generator):
    gs = _random_elements(x.shape[0], rng)
    xs = torch.stack([transform_state(x[i], g, boundary) for i, g in enumerate(gs)])
    ys = torch.stack([transform_state(y[i], g, boundary) for i, g in enumerate(gs)])
    return xs, ys


def train_surrogate(trajectories: np.ndarray, spec: SurrogateSpec, seed: int) -> dict:
    """Train ``spec``'s surrogate on trajectories ``(M, T+1, 3, n, n)``.

    Returns:
        ``{"state_dict", "spec", "losses", "parameters"}`` (the state dict as CPU tensors).
    """
    data = torch.tensor(np.array(trajectories, dtype=np.float32))
    if data.ndim != 5 or data.shape[2] != 3 or data.shape[3] != spec.n or data.shape[4] != spec.n:
        raise ValueError(f"trajectories must have shape (M, T+1, 3, {spec.n}, {spec.n}), got {tuple(data.shape)}")
    if data.shape[1] < 3:
        raise ValueError("trajectories need at least 3 frames (pushforward uses two steps)")
    torch.manual_seed(int(seed) % (2**63))
    rng = np.random.default_rng(seed)
    model = build_model(spec)
    inc = data[:, 1:] - data[:, :-1]
    with torch.no_grad():
        model.scale_in.copy_(torch.stack([data[:, :, 0].std(), data[:, :, 1:].std()]).clamp_min(1e-8))
        model.scale_out.copy_(torch.stack([inc[:, :, 0].std(), inc[:, :, 1:].std()]).clamp_min(1e-8))
    norm = model._per_kind(model.scale_out)
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    M, T1 = data.shape[0], data.shape[1]
    losses = []
    for _ in range(spec.steps):
        traj = torch.as_tensor(rng.integers(0, M, size=spec.batch))
        if spec.pushforward:
            half = spec.batch // 2
            t = torch.as_tensor(rng.integers(0, T1 - 2, size=spec.batch))
            x, x1, x2 = data[traj, t], data[traj, t + 1], data[traj, t + 2]
            with torch.no_grad():
                x1_hat = x[:half] + model(x[:half])
            inp = torch.cat([x1_hat, x[half:]])
            tgt = torch.cat([x2[:half], x1[half:]])
        else:
            t = torch.as_tensor(rng.integers(0, T1 - 1, size=spec.batch))
            inp, tgt = data[traj, t], data[traj, t + 1]
        if spec.augment:
            inp, tgt = _augment(inp, tgt, spec.boundary, rng)
        loss = (((model(inp) - (tgt - inp)) / norm) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "spec": asdict(spec), "losses": losses, "parameters": count_parameters(model)}


def load_model(trained: dict, dtype=torch.float64) -> StaggeredUNet:
    """Rebuild a trained surrogate from ``train_surrogate``'s output."""
    model = build_model(SurrogateSpec(**trained["spec"]))
    model.load_state_dict(trained["state_dict"])
    return model.to(dtype).eval()


@torch.no_grad()
def rollout(model: nn.Module, x0: np.ndarray, steps: int) -> np.ndarray:
    """Autoregressive rollout from states ``x0`` (``(B, 3, n, n)``) for ``steps`` steps, in the
    model's dtype. Returns ``(B, steps + 1, 3, n, n)``."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    dtype = next(model.parameters()).dtype
    x = torch.as_tensor(np.asarray(x0), dtype=dtype)
    out = [x]
    for _ in range(steps):
        x = x + model(x)
        out.append(x)
    return torch.stack(out, dim=1).numpy()


def rollout_scores(pred: np.ndarray, ref: np.ndarray) -> dict:
    """Per-step scores of rollouts against the reference, both ``(B, T+1, 3, n, n)``.

    Returns arrays ``(B, T+1)``: ``nrmse_eta`` (``|eta_hat - eta| / |eta|``), ``corr_eta`` (Pearson
    correlation of the ``eta`` fields), ``nrmse_vel`` (the same for the transports), and the drift
    of mass ``|sum eta_t - sum eta_0| / sum |eta_0|`` and momentum (``|sum U_t - sum U_0| +
    |sum V_t - sum V_0|`` over ``sum |U_0| + |V_0|``).
    """
    pred, ref = np.asarray(pred, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if pred.shape != ref.shape or pred.ndim != 5:
        raise ValueError(f"pred and ref must have the same shape (B, T+1, 3, n, n), got {pred.shape} and {ref.shape}")
    ax = (-1, -2)
    e_hat, e = pred[:, :, 0], ref[:, :, 0]
    nrmse_eta = np.sqrt(((e_hat - e) ** 2).sum(ax) / np.maximum((e**2).sum(ax), 1e-300))
    vh, v = pred[:, :, 1:], ref[:, :, 1:]
    nrmse_vel = np.sqrt(((vh - v) ** 2).sum((-1, -2, -3)) / np.maximum((v**2).sum((-1, -2, -3)), 1e-300))
    a = e_hat - e_hat.mean(ax, keepdims=True)
    b = e - e.mean(ax, keepdims=True)
    corr = (a * b).sum(ax) / np.maximum(np.sqrt((a**2).sum(ax) * (b**2).sum(ax)), 1e-300)
    m = e_hat.sum(ax)
    mass_drift = np.abs(m - m[:, :1]) / np.maximum(np.abs(e_hat[:, :1]).sum(ax), 1e-300)
    p = vh.sum(ax)                                        # (B, T+1, 2)
    mom_drift = np.abs(p - p[:, :1]).sum(-1) / np.maximum(np.abs(vh[:, :1]).sum((-1, -2, -3)), 1e-300)
    return {"nrmse_eta": nrmse_eta, "corr_eta": corr, "nrmse_vel": nrmse_vel,
            "mass_drift": mass_drift, "momentum_drift": mom_drift}


@torch.no_grad()
def equivariance_error(model: nn.Module, x: np.ndarray, group: str = "p4m") -> float:
    """``max_g |f(g x) - g f(x)| / max |f(x)|`` over the elements of ``group`` (float64 states)."""
    boundary = model.spec.boundary
    dtype = next(model.parameters()).dtype
    x = torch.as_tensor(np.asarray(x), dtype=dtype)
    fx = model(x)
    scale = float(fx.abs().max()) or 1.0
    worst = 0.0
    for g in group_elements(group):
        lhs = model(transform_state(x, g, boundary))
        rhs = transform_state(fx, g, boundary)
        worst = max(worst, float((lhs - rhs).abs().max()) / scale)
    return worst
