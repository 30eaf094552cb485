"""A tracker for the implicit bias of gradient descent on (non-)homogeneous networks.

Yuhang Cai, Kangjie Zhou, Jingfeng Wu, Song Mei, Michael Lindsey, Peter L. Bartlett, "Implicit Bias
of Gradient Descent for Non-Homogeneous Deep Networks", ICML 2025 (arXiv 2502.16075).

The paper's objects, measured along a gradient-descent run on the exponential (or logistic) loss:

- **Near-homogeneity.** ``f(theta; x)`` is ``M``-nearly-homogeneous when ``<grad f, theta> - M f`` and
  the growth of ``f`` are controlled by a polynomial of degree below ``M`` in ``||theta||``; its
  **homogenisation** is ``f_H(theta; x) = lim_{r -> inf} f(r theta; x) / r^M``. Networks here: a
  two-layer ReLU net (homogeneous, ``M = 2``, ``f_H = f``), a two-layer SiLU net (``M = 2``,
  ``f_H`` = the ReLU net with the same weights, since ``SiLU(r z) / r -> ReLU(z)``), a residual
  block ``v . (x + W2 SiLU(W1 x))`` (``M = 3``: the skip term is of degree 1; ``f_H = v . W2 ReLU(W1
  x)``), and, outside the paper's conditions, a two-layer tanh net (bounded activation: ``f(r theta)``
  grows only like ``r``, so with ``M = 2`` its homogenisation is ``0`` and no such polynomial exists).
- **Normalised margin** ``gamma(theta) = min_i y_i f(theta; x_i) / ||theta||^M`` (``normalized_margin``;
  the classical one for homogeneous nets) and the smoothed margin
  ``gamma_s(theta) = log(1 / (n L(theta))) / ||theta||^M`` (Lyu & Li's, the quantity the
  monotonicity argument follows; ``L`` the mean exponential loss), and the homogenised margin
  ``gamma_H(theta) = min_i y_i f_H(theta; x_i) / ||theta||^M`` their common limit.
- **Norm growth** ``||theta_t||`` and **directional convergence**: the cosine between successive
  normalised iterates ``theta_t / ||theta_t||`` (log-spaced checkpoints) tends to 1.
- **KKT residual** of the homogenised max-margin problem ``min ||theta||^2 / 2`` s.t.
  ``y_i f_H(theta; x_i) >= 1`` at ``theta_hat = theta / min_i(q_i)^{1/M}`` (the rescaled iterate, tight
  constraints): stationarity ``eps = min_{lambda >= 0} ||theta_hat - sum_i lambda_i grad q_i|| /
  ``||theta_hat||`` and complementary slackness ``delta = sum_i lambda_i (q_i - 1) / ||theta_hat||^2`` (Lyu & Li's
  ``(eps, delta)``-KKT point), with ``lambda`` from a non-negative least-squares fit that charges
  slack constraints (``kkt_residual``).

- **The non-homogeneity-dependent threshold and the induced margin** (``euler_defect``,
  ``induced_correction``, ``induced_margin``). With ``p(rho) = sum_k c_k rho^k`` (degree below
  ``M``) bounding the Euler defect ``|<grad f(theta; x), theta> - M f(theta; x)| <= p(||theta||)``
  on the data, and ``Q(rho) = sum_k c_k rho^k / (M - k)`` (so that ``M Q - rho Q' = p``), the
  induced margin is ``gamma_a(theta) = (log(1 / (n L(theta))) - Q(||theta||)) / ||theta||^M`` and
  the threshold is ``L(theta) < exp(-Q(||theta||)) / n`` (``gamma_a > 0``). Under gradient flow
  ``d log(log(1/(nL)) - Q) / dt >= M d log ||theta|| / dt`` once ``gamma_a > 0`` (from ``<theta, -grad L>
  >= L (M log(1/(nL)) - p)`` and Cauchy-Schwarz), so ``gamma_a`` never decreases after the
  threshold; for a homogeneous net ``p = Q = 0`` and it is the smoothed margin with Lyu & Li's
  ``1/n`` threshold. Derived here in the abstract's terms (the paper's own constants were not
  reachable): assumed, declared on the page.

Assumed (the full text was not reachable): the form of ``p``, ``Q`` and ``gamma_a`` above (derived,
not read); the homogeneous threshold ``L < 1/n`` is kept as the contrast; steps are loss-scaled, ``eta_t = eta / L(theta_t)``
(Lyu & Li's experimental schedule, so the asymptotic regime is reached in thousands of steps),
taken as ``eta grad log L`` so the step does not underflow, with each step's length capped at
``max_step_norm ||theta||`` (the residual net's ``M = 3`` makes uncapped loss-scaled steps blow up in
finite time); plain fixed-step GD is ``loss_scaled=False``; the form of the KKT residual above.

Examples:
    >>> import torch
    >>> net = TwoLayer(3, 8, "relu", seed=0)
    >>> X, y = torch.randn(10, 3, dtype=torch.float64), torch.ones(10, dtype=torch.float64)
    >>> bool(torch.isclose(normalized_margin(net, X, y), homogenized_margin(net, X, y)))
    True
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "NETWORKS",
    "TwoLayer",
    "ResidualBlock",
    "make_network",
    "params_vector",
    "exp_risk",
    "log_risk",
    "normalized_margin",
    "smoothed_margin",
    "homogenized_margin",
    "euler_defect",
    "induced_correction",
    "induced_margin",
    "kkt_residual",
    "TrackerConfig",
    "track_gd",
    "near_monotonicity",
]

NETWORKS = ("relu", "silu", "residual-silu", "tanh")


def _silu_kappa() -> float:
    """``sup_z z^2 s(z) (1 - s(z))`` (s: the logistic function): SiLU's Euler defect ``silu'(z) z - silu(z)``."""
    z = np.linspace(0.0, 10.0, 200001)
    s = 1.0 / (1.0 + np.exp(-z))
    return float(np.max(z * z * s * (1.0 - s))) * (1 + 1e-9)


_SILU_KAPPA = _silu_kappa()


class TwoLayer(torch.nn.Module):
    """``f(x) = sum_j a_j act(w_j . x)`` (no biases), ``act`` in relu / silu / tanh; order ``M = 2``."""

    order = 2

    def __init__(self, d: int, width: int, act: str, *, seed: int = 0, scale: float = 0.1):
        super().__init__()
        if act not in ("relu", "silu", "tanh"):
            raise ValueError(f"act must be 'relu', 'silu' or 'tanh', got {act!r}")
        g = torch.Generator().manual_seed(int(seed))
        self.act = act
        self.W = torch.nn.Parameter(scale * torch.randn(width, d, generator=g, dtype=torch.float64))
        self.a = torch.nn.Parameter(scale * torch.randn(width, generator=g, dtype=torch.float64))

    def forward(self, X: torch.Tensor, homogenized: bool = False) -> torch.Tensor:
        z = X @ self.W.T
        if self.act == "relu" or (homogenized and self.act == "silu"):
            h = torch.relu(z)
        elif self.act == "silu":
            h = torch.nn.functional.silu(z)
        elif homogenized:  # tanh(r z) / r^... -> 0: the homogenisation of a bounded activation vanishes
            h = torch.zeros_like(z)
        else:
            h = torch.tanh(z)
        return h @ self.a

    def euler_defect(self, X: torch.Tensor) -> tuple[float, ...]:
        """``(c_0, c_1)``: ``|<grad f, theta> - 2 f| = |sum_j a_j (act'(z_j) z_j - act(z_j))| <= kappa
        sum_j |a_j| <= kappa sqrt(width) ||theta||`` with ``kappa = sup_z |act'(z) z - act(z)|`` (0 for ReLU,
        ``max z^2 s(z)(1 - s(z))`` for SiLU, 1 for tanh); ``X`` does not enter."""
        kappa = {"relu": 0.0, "silu": _SILU_KAPPA, "tanh": 1.0}[self.act]
        return (0.0, kappa * math.sqrt(self.a.numel()))


class ResidualBlock(torch.nn.Module):
    """``f(x) = v . (x + W2 SiLU(W1 x))``: a residual block with a SiLU activation, ``M = 3``."""

    order = 3

    def __init__(self, d: int, width: int, *, seed: int = 0, scale: float = 0.1):
        super().__init__()
        g = torch.Generator().manual_seed(int(seed))
        self.W1 = torch.nn.Parameter(scale * torch.randn(width, d, generator=g, dtype=torch.float64))
        self.W2 = torch.nn.Parameter(scale * torch.randn(d, width, generator=g, dtype=torch.float64))
        self.v = torch.nn.Parameter(scale * torch.randn(d, generator=g, dtype=torch.float64))

    def forward(self, X: torch.Tensor, homogenized: bool = False) -> torch.Tensor:
        z = X @ self.W1.T
        if homogenized:  # the degree-3 path only; SiLU(r z) / r -> ReLU(z)
            return (torch.relu(z) @ self.W2.T) @ self.v
        return (X + torch.nn.functional.silu(z) @ self.W2.T) @ self.v

    def euler_defect(self, X: torch.Tensor) -> tuple[float, ...]:
        """``(c_0, c_1, c_2)``: ``<grad f, theta> - 3 f = -2 v . x + v . W2 g(z)`` with ``g(z) = z^2 s(z)(1 - s(z))``
        elementwise, so ``|.| <= 2 max_i ||x_i|| ||theta|| + (kappa sqrt(width) / 2) ||theta||^2``
        (``||v|| ||W2|| <= ||theta||^2 / 2``)."""
        xmax = float(torch.linalg.vector_norm(X, dim=1).max())
        return (0.0, 2.0 * xmax, 0.5 * _SILU_KAPPA * math.sqrt(self.W1.shape[0]))


def make_network(name: str, d: int, width: int, *, seed: int = 0, scale: float = 0.1) -> torch.nn.Module:
    """One of ``NETWORKS``."""
    if name not in NETWORKS:
        raise ValueError(f"network must be one of {NETWORKS}, got {name!r}")
    if not isinstance(d, int) or d < 1 or not isinstance(width, int) or width < 1:
        raise ValueError(f"d and width must be positive integers, got {d!r}, {width!r}")
    if name == "residual-silu":
        return ResidualBlock(d, width, seed=seed, scale=scale)
    return TwoLayer(d, width, name, seed=seed, scale=scale)


def params_vector(net: torch.nn.Module) -> torch.Tensor:
    """All parameters as one flat vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).clone()


def _check_data(X, y):
    if not isinstance(X, torch.Tensor) or X.ndim != 2:
        raise ValueError("X must be a 2-D torch tensor")
    if not isinstance(y, torch.Tensor) or y.shape != (X.shape[0],) or not torch.all((y == 1) | (y == -1)):
        raise ValueError("y must be a tensor of +1/-1 labels, one per row of X")


def exp_risk(net, X, y, loss: str = "exp") -> torch.Tensor:
    """Mean exponential (or logistic) loss of ``y f(x)``."""
    q = y * net(X)
    if loss == "exp":
        return torch.exp(-q).mean()
    if loss == "logistic":
        return torch.nn.functional.softplus(-q).mean()
    raise ValueError(f"loss must be 'exp' or 'logistic', got {loss!r}")


def log_risk(net, X, y, loss: str = "exp") -> torch.Tensor:
    """``log L(theta)``, computed without underflow (``logsumexp(-q) - log n`` for the exp loss)."""
    q = y * net(X)
    if loss == "exp":
        return torch.logsumexp(-q, 0) - math.log(q.numel())
    if loss == "logistic":
        return torch.log(torch.nn.functional.softplus(-q).mean())
    raise ValueError(f"loss must be 'exp' or 'logistic', got {loss!r}")


def _norm(net) -> torch.Tensor:
    return torch.sqrt(sum((p.detach() ** 2).sum() for p in net.parameters()))


@torch.no_grad()
def normalized_margin(net, X, y) -> torch.Tensor:
    """``min_i y_i f(theta; x_i) / ||theta||^M``."""
    _check_data(X, y)
    return (y * net(X)).min() / _norm(net) ** net.order


@torch.no_grad()
def smoothed_margin(net, X, y) -> torch.Tensor:
    """``log(1 / (n L_exp(theta))) / ||theta||^M`` (a lower bound on the normalised margin)."""
    _check_data(X, y)
    q = y * net(X)
    return -torch.logsumexp(-q, 0) / _norm(net) ** net.order


@torch.no_grad()
def homogenized_margin(net, X, y) -> torch.Tensor:
    """``min_i y_i f_H(theta; x_i) / ||theta||^M`` of the homogenised network."""
    _check_data(X, y)
    return (y * net(X, homogenized=True)).min() / _norm(net) ** net.order


def euler_defect(net, X: torch.Tensor) -> tuple[float, ...]:
    """The coefficients ``(c_0, ..., c_{M-1})`` of ``p(rho) = sum_k c_k rho^k`` bounding the Euler defect
    ``|<grad f(theta; x), theta> - M f(theta; x)|`` for every ``theta`` and every row ``x`` of ``X``
    (the paper's near-homogeneity); the library's networks know theirs (``net.euler_defect``)."""
    if not hasattr(net, "euler_defect"):
        raise ValueError(f"net ({type(net).__name__}) has no euler_defect(X): pass the coefficients of its "
                         "Euler-defect polynomial (defect=(c_0, ..., c_{M-1})) to track_gd")
    return tuple(float(c) for c in net.euler_defect(X))


def _check_defect(defect, order: int) -> tuple[float, ...]:
    c = tuple(float(x) for x in defect)
    if not c or len(c) > order or any(not (math.isfinite(x) and x >= 0) for x in c):
        raise ValueError(f"defect must hold 1 to M={order} finite coefficients >= 0 (degree below M), got {defect!r}")
    return c


def induced_correction(defect, order: int, rho: float) -> float:
    """``Q(rho) = sum_k c_k rho^k / (M - k)``: the smallest polynomial of this form with ``M Q - rho Q' = p``."""
    c = _check_defect(defect, order)
    return float(sum(ck * rho ** k / (order - k) for k, ck in enumerate(c)))


@torch.no_grad()
def induced_margin(net, X, y, defect) -> torch.Tensor:
    """``(log(1 / (n L_exp(theta))) - Q(||theta||)) / ||theta||^M``: positive past the paper's threshold, and
    non-decreasing after it under gradient flow (module docstring)."""
    _check_data(X, y)
    rho = float(_norm(net))
    q = y * net(X)
    return (-torch.logsumexp(-q, 0) - induced_correction(defect, net.order, rho)) / rho ** net.order


def kkt_residual(net, X, y, *, slack_weight: float = 1.0) -> dict:
    """The ``(eps, delta)`` KKT residual of the homogenised max-margin problem at the rescaled iterate.

    Returns ``{"eps", "delta", "residual": eps + delta, "support": #lambda_i > 0}``; ``nan`` entries
    when the homogenised network does not classify every point correctly (no feasible rescaling).
    """
    from scipy.optimize import nnls

    _check_data(X, y)
    params = list(net.parameters())
    with torch.no_grad():
        q = y * net(X, homogenized=True)
    qmin = float(q.min())
    if not qmin > 0:
        return {"eps": math.nan, "delta": math.nan, "residual": math.nan, "support": 0}
    scale = qmin ** (-1.0 / net.order)
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p in params:
                p.mul_(scale)
        theta = params_vector(net).numpy()
        rows = []
        for i in range(X.shape[0]):
            out = y[i] * net(X[i:i + 1], homogenized=True)[0]
            grads = torch.autograd.grad(out, params, allow_unused=True)
            rows.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                                   for g, p in zip(grads, params)]).numpy())
        with torch.no_grad():
            qs = (y * net(X, homogenized=True)).numpy()
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
    G = np.stack(rows, axis=1)  # (P, n)
    slack = np.sqrt(np.clip(slack_weight * (qs - 1.0), 0.0, None)) * np.linalg.norm(theta)
    A = np.vstack([G, np.diag(slack)])
    b = np.concatenate([theta, np.zeros(len(qs))])
    lam, _ = nnls(A, b, maxiter=50 * len(qs))
    eps = float(np.linalg.norm(theta - G @ lam) / np.linalg.norm(theta))
    delta = float(np.sum(lam * (qs - 1.0)) / (theta @ theta))
    return {"eps": eps, "delta": delta, "residual": eps + delta, "support": int(np.sum(lam > 1e-10))}


@dataclass(frozen=True)
class TrackerConfig:
    """Gradient descent and what is recorded.

    Attributes:
        steps: GD steps.
        lr: step size ``eta`` (``eta / L`` when ``loss_scaled``).
        loss: ``"exp"`` or ``"logistic"``.
        loss_scaled: use ``eta_t = eta / L(theta_t)``.
        checkpoints: log-spaced steps at which margins, norm and direction are recorded.
        kkt_every: compute the KKT residual at every ``kkt_every``-th checkpoint (and the last).
        max_step_norm: cap on ``||theta_{t+1} - theta_t|| / ||theta_t||`` (keeps loss-scaled steps
            stable once the risk is tiny).
    """

    steps: int = 4000
    lr: float = 0.05
    loss: str = "exp"
    loss_scaled: bool = True
    checkpoints: int = 40
    kkt_every: int = 4
    max_step_norm: float = 0.01

    def __post_init__(self):
        if not isinstance(self.steps, int) or self.steps < 2:
            raise ValueError(f"steps must be an integer >= 2, got {self.steps!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.loss not in ("exp", "logistic"):
            raise ValueError(f"loss must be 'exp' or 'logistic', got {self.loss!r}")
        if not isinstance(self.checkpoints, int) or self.checkpoints < 3:
            raise ValueError(f"checkpoints must be an integer >= 3, got {self.checkpoints!r}")
        if not isinstance(self.kkt_every, int) or self.kkt_every < 1:
            raise ValueError(f"kkt_every must be a positive integer, got {self.kkt_every!r}")
        if not self.max_step_norm > 0:
            raise ValueError(f"max_step_norm must be > 0, got {self.max_step_norm!r}")


class _Ordered(torch.nn.Module):
    """Any module ``X -> (n,)`` or ``(n, 1)`` scores, with its homogeneity ``order`` attached; it has
    no homogenised form, so its homogenised margin is its margin."""

    def __init__(self, net: torch.nn.Module, order: int):
        super().__init__()
        self.net, self.order = net, order

    def forward(self, X: torch.Tensor, homogenized: bool = False) -> torch.Tensor:
        return self.net(X).reshape(len(X), -1)[:, 0]


def _tracked(net: torch.nn.Module, X: torch.Tensor, order: int | None) -> torch.nn.Module:
    """``net`` ready for the margins: the library's networks as they are, any other module wrapped
    with the ``order`` the caller gives (a clear error naming what is missing otherwise)."""
    if not isinstance(net, torch.nn.Module):
        raise TypeError(f"net must be a torch.nn.Module, got {type(net).__name__}")
    own = getattr(net, "order", None)
    if order is None:
        if own is None:
            raise ValueError(f"net ({type(net).__name__}) has no homogeneity order: pass order=M (the degree L "
                             "of a homogeneous net, or the order M of the paper's near-homogeneity) to track_gd")
        order = own
    if own is not None and order == own and "homogenized" in inspect.signature(net.forward).parameters:
        return net
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order must be a positive integer, got {order!r}")
    with torch.no_grad():
        out = net(X[:2])
    if out.numel() != 2:
        raise ValueError(f"net must map n inputs to n scores ((n,) or (n, 1)), got output shape {tuple(out.shape)}")
    return _Ordered(net, order)


def track_gd(net: torch.nn.Module, X: torch.Tensor, y: torch.Tensor, config: TrackerConfig = TrackerConfig(), *,
             order: int | None = None, defect=None) -> list[dict]:
    """Run GD on ``net`` and record, at log-spaced checkpoints: step, risk, ``||theta||``, the
    normalised / smoothed / homogenised margins, the unit direction, the cosine with the previous
    checkpoint's direction and (every ``kkt_every``-th checkpoint) the KKT residual. ``net`` is trained in place.

    ``net``: a network of ``make_network`` or any module mapping ``n`` inputs to ``n`` scores (an
    ``nn.Sequential``, say), then with ``order`` (its homogeneity order ``M``) given; a module
    without a homogenised form reports its margin as its homogenised margin. ``defect``: the
    coefficients of its Euler-defect polynomial (``euler_defect``; the library's networks know
    theirs); without them the induced margin (``induced_margin``) is ``nan``."""
    _check_data(X, y)
    if defect is None and hasattr(net, "euler_defect"):
        defect = euler_defect(net, X)
    net = _tracked(net, X, order)
    defect = _check_defect(defect, net.order) if defect is not None else None
    marks = sorted(set(np.unique(np.geomspace(1, config.steps, config.checkpoints).astype(int)).tolist()) | {0})
    params = list(net.parameters())
    out: list[dict] = []
    prev_dir = None
    for t in range(config.steps + 1):
        if t in marks:
            theta = params_vector(net)
            direction = theta / theta.norm()
            with torch.no_grad():
                lr_ = float(log_risk(net, X, y, config.loss))
            row = {"step": t, "log_risk": lr_, "norm": float(theta.norm()),
                   "margin": float(normalized_margin(net, X, y)), "smoothed_margin": float(smoothed_margin(net, X, y)),
                   "homogenized_margin": float(homogenized_margin(net, X, y)),
                   "induced_margin": float(induced_margin(net, X, y, defect)) if defect is not None else math.nan,
                   "cos_prev": float(direction @ prev_dir) if prev_dir is not None else math.nan,
                   "direction": direction.tolist()}
            k = marks.index(t)
            if k % config.kkt_every == 0 or t == config.steps:
                row.update({f"kkt_{key}": v for key, v in kkt_residual(net, X, y).items()})
            out.append(row)
            prev_dir = direction
        if t == config.steps:
            break
        net.zero_grad()
        objective = log_risk(net, X, y, "exp") if (config.loss_scaled and config.loss == "exp") \
            else exp_risk(net, X, y, config.loss)
        objective.backward()
        with torch.no_grad():
            lr = config.lr
            if config.loss_scaled and config.loss == "logistic":
                lr = lr / float(objective)
            gnorm = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
            pnorm = torch.sqrt(sum((p ** 2).sum() for p in params))
            step, cap = lr * gnorm, config.max_step_norm * pnorm
            if step > cap:
                lr = lr * float(cap / step)
            for p in params:
                p.sub_(lr * p.grad)
    return out


def near_monotonicity(values, start: int = 0) -> dict:
    """How monotone a sequence is from index ``start``: its gain ``v[-1] - v[0]``, its largest drop
    below its running maximum, that drop relative to the sequence's range (``rel_drop`` 0:
    non-decreasing; 1: it ends at its minimum after its maximum, e.g. decreasing) and the largest
    drop relative to the value it fell from, ``max_t (max_{s<=t} v_s - v_t) / |max_{s<=t} v_s|``
    (``value_drop``: 0.05 means the sequence fell 5% below its running maximum)."""
    v = np.asarray(values, dtype=float)[start:]
    if v.size < 2 or not np.all(np.isfinite(v)):
        return {"gain": math.nan, "max_drop": math.nan, "rel_drop": math.nan, "value_drop": math.nan}
    running = np.maximum.accumulate(v)
    drop = float(np.max(running - v))
    span = float(v.max() - v.min())
    scale = np.abs(running)
    value_drop = float(np.max(np.where(scale > 0, (running - v) / np.where(scale > 0, scale, 1.0), 0.0)))
    return {"gain": float(v[-1] - v[0]), "max_drop": drop, "rel_drop": drop / span if span > 0 else 0.0,
            "value_drop": value_drop}
