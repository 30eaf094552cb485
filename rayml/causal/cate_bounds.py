"""CATE bounds from learned discrete representations of (complex) instruments.

Jonas Schweisthal, Dennis Frauen, Maresa Schröder, Konstantin Hess, Niki Kilbertus, Stefan Feuerriegel,
"Learning Representations of Instruments for Partial Identification of Treatment Effects", ICML 2025
(authors' code: JSchweisthal/ComplexPartialIdentif).

Two steps:

1. **First-stage nuisances** (``fit_nuisances``): MLPs for ``P(A = a | X, Z)``, ``P(A = a | Z)`` and
   ``mu(X, A, Z) = E[Y | X, A, Z]`` (cross-entropy / squared error, Adam, early stopping on a
   validation split).
2. **Representation** ``phi: Z -> {1..K}`` (``RepNet``): an MLP on ``Z`` whose logits go through a
   hard Gumbel-softmax (straight-through gradients). For every ``x`` and partition level ``k`` the
   nuisances are aggregated over a population of instruments ``z_j`` (``level_nuisances``):
   ``pi_k(x, a) = mean_j P(a | x, z_j) 1[phi_j = k] / P(phi = k)`` and
   ``mu_k(x, a) = mean_j mu(x, a, z_j) 1[phi_j = k] P(a | z_j) / (P(a | phi = k) P(phi = k))``.
   Because ``phi(Z)`` is a valid discrete instrument, every level gives Manski bounds on
   ``E[Y(a) | x]``: ``pi mu + (1 - pi) y_min <= E[Y(a) | x] <= pi mu + (1 - pi) y_max``; the CATE bound of a
   level pair ``(k, l)`` is ``[pi_l(1) mu_l(1) + (1 - pi_l(1)) y_min - pi_k(0) mu_k(0) - (1 - pi_k(0)) y_max,
   pi_l(1) mu_l(1) + (1 - pi_l(1)) y_max - pi_k(0) mu_k(0) - (1 - pi_k(0)) y_min]`` and the bounds are
   ``LB = max`` and ``UB = min`` over all pairs (``manski_bounds``).
3. **Loss** (``repnet_loss``): mean width / ``(y_max - y_min)`` + ``gamma`` cross-entropy of an
   auxiliary classification head against the sampled partition + ``alpha`` balance term
   ``-mean_k log(mean_j phi_jk)`` (``gamma = alpha = 1``, Adam lr 0.03, batches of 128 ``x``).

Baselines: a k-means partition of ``Z`` with separately trained nuisances on the level
(``kmeans_bounds``), and the naive bounds without an instrument (one level, ``K = 1``).

Details from the authors' code: layer sizes (10 hidden units; ``X`` 2, ``Z`` 3, shared 2 layers),
Adam lr 0.001 for the nuisances with patience 10, lr 0.03 for the representation with patience 50,
100 epochs at most, a 40/20/40 train/validation/test split, ``pi`` clamped to ``[1e-4, 1 - 1e-4]``
and ``mu`` to the outcome's range, the bound support ``(min Y, max Y)``.
Differences (assumed or corrected): ``mu_k`` divides by ``P(A = a | phi = k)`` for each ``a`` (the
authors' code uses ``P(A = 1 | phi = k)`` for both treatments); the nuisances on every pair are computed
once per batch and shared by the levels (the same numbers, fewer evaluations); the epochs and
patience are parameters (smaller at the quick size). The instrument population of a training step
is the whole training split, not the batch itself as in the authors' code: with the batch (128) as
population, each of the ``K`` levels holds a few dozen instruments, and the max / min over the
``K^2`` noisy level pairs narrows the bounds more for a *random* partition than an informative
partition does, so in our runs the logits stayed flat and the learned partition collapsed to one
level (the no-instrument bounds); with the training split as population (800) it learns
instrument-dependent levels.

Examples:
    >>> import torch
    >>> mu = torch.tensor([[[0.2, 0.8]]]); pi = torch.tensor([[[0.5, 0.5]]])   # one x, one level
    >>> manski_bounds(mu, pi, (0.0, 1.0))
    tensor([[-0.2000,  0.8000]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rayml.training import EarlyStopping

__all__ = [
    "DATASETS",
    "generate",
    "true_cate",
    "MLP",
    "Nuisances",
    "fit_nuisances",
    "pair_nuisances",
    "level_nuisances",
    "manski_bounds",
    "level_mask",
    "partition_bounds",
    "oracle_partition",
    "propensity_partition",
    "RepNet",
    "OneLevelPartition",
    "repnet_loss",
    "repnet_levels",
    "fit_repnet",
    "kmeans_levels",
    "kmeans_bounds",
    "repnet_bounds",
    "TrainConfig",
]

DATASETS = ("mixture", "binary")


# --- the paper's generators (src/data/data1.py and data3.py) ------------------------------------

def _cate_mixture(x):
    m = x.mean(1)
    return -((2.5 * m) ** 4 + 12 * np.sin(6 * m) + 0.5 * np.cos(m)) / 80 + 0.5


def _cate_binary(x):
    m = x.mean(1)
    return -(-(1.6 * m + 0.5) ** 4 + 12 * np.sin(4 * m + 1.5) + np.cos(m)) / 80 + 0.5


def true_cate(dataset: str, X: np.ndarray) -> np.ndarray:
    """The generator's CATE at ``X``."""
    if dataset == "mixture":
        return _cate_mixture(X)
    if dataset == "binary":
        return _cate_binary(X)
    raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")


def generate(dataset: str, n: int, seed: int, *, confounding: float = 0.5, noise: float = 0.1) -> dict:
    """``{"X", "Z", "A", "Y", "U", "cate", "strength"}`` from the paper's generator ``dataset``
    (``strength``: the propensity at ``X = 0``, ``U = -1`` as a function of ``Z``, for the oracle
    partition).

    ``mixture``: 1-D instrument from a mixture (half ``U(-1, 1)``, a quarter ``Beta(2, 2)``, a quarter
    ``-Beta(2, 2)``); ``binary``: 20 Bernoulli(1/2) instruments of which the first 5 move the
    treatment through ``(S - 10) / 5``, ``S`` their sum, as the authors' ``data3.py`` computes it
    (assumed: the other 15 stay in ``Z`` as irrelevant dimensions; the authors' code zeroes them as a
    side effect).
    """
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    if not isinstance(n, int) or n < 10:
        raise ValueError(f"n must be an integer >= 10, got {n!r}")
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 1))
    U = rng.normal(-1, 1, size=(n, 1))
    if dataset == "mixture":
        comp = rng.choice(3, p=[0.5, 0.25, 0.25], size=n)
        beta = rng.beta(2, 2, size=n)
        Z = np.where(comp == 0, rng.uniform(-1, 1, size=n), np.where(comp == 1, beta, -beta))[:, None]
        coeff = 3 * (2 * np.abs(Z.mean(1)) - Z.max())
        ps = 1 / (1 + np.exp(-(coeff + X.mean(1) + confounding * U.mean(1))))
        ps = (ps - 0.5) * 0.9 + 0.5
        cate = _cate_mixture(X)
    else:
        Z = rng.binomial(1, 0.5, size=(n, 20)).astype(float)
        active = Z[:, :5]
        # the authors' data3.py zeroes Z[:, 5:] in place, then centres and scales the sum over all 20
        # columns: (S - 20 * 0.5) / (20 * 0.25) with S the sum of the 5 active ones
        coeff = (active.sum(1) - 20 * 0.5) / (20 * 0.25)
        ps = np.sin(10 * coeff + X.mean(1) + U.mean(1)) * 0.48 + 0.48 + 0.04 / (1 + np.exp(-3 * np.abs(5 * coeff)))
        cate = _cate_binary(X)
    A = rng.binomial(1, ps)
    Y = 0.25 * (X.mean(1) + confounding * U.mean(1) + noise * rng.laplace(0, 1, size=n)) + cate * A
    return {"X": X, "Z": Z, "A": A.astype(np.int64), "Y": Y, "U": U, "cate": cate,
            "strength": _strength(dataset, coeff)}


def _strength(dataset: str, coeff: np.ndarray) -> np.ndarray:
    """The instrument's effect on the treatment: the generator's propensity at ``X = 0`` and ``U`` at
    its mean (-1), a function of ``Z`` only; ``oracle_partition`` bins it."""
    if dataset == "mixture":
        ps = 1 / (1 + np.exp(-(coeff - 0.5)))
        return (ps - 0.5) * 0.9 + 0.5
    return np.sin(10 * coeff - 1.0) * 0.48 + 0.48 + 0.04 / (1 + np.exp(-3 * np.abs(5 * coeff)))


# --- nuisances ------------------------------------------------------------------------------------

class MLP(nn.Module):
    """Linear layers with ReLUs between them (``sizes`` = widths including input and output)."""

    def __init__(self, sizes):
        super().__init__()
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class _XZ(nn.Module):
    """The authors' two-tower shape: X and Z towers, concatenated, then shared layers."""

    def __init__(self, dx, dz, out, hidden=10):
        super().__init__()
        self.x = MLP([dx, hidden, hidden])
        self.z = MLP([dz, hidden, hidden, hidden])
        self.shared = MLP([2 * hidden, hidden, hidden, out])

    def forward(self, x, z):
        return self.shared(torch.cat([self.x(x), self.z(z)], 1))


@dataclass
class Nuisances:
    """``a_xz(x, z)``: logits of ``A``; ``a_z(z)``: logits of ``A``; ``mu(x, z)``: both potential
    outcome heads ``E[Y | x, A = a, z]`` as two columns."""

    a_xz: nn.Module
    a_z: nn.Module
    mu: nn.Module


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults: the authors' code)."""

    nuisance_lr: float = 1e-3
    nuisance_epochs: int = 100
    nuisance_patience: int = 10
    rep_lr: float = 0.03
    rep_epochs: int = 100
    rep_patience: int = 50
    batch: int = 128
    gamma: float = 1.0
    alpha: float = 1.0
    min_level_share: float = 0.05

    def __post_init__(self):
        for name in ("nuisance_epochs", "nuisance_patience", "rep_epochs", "rep_patience", "batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("nuisance_lr", "rep_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if self.gamma < 0 or self.alpha < 0:
            raise ValueError("gamma and alpha must be >= 0")
        if not 0 <= self.min_level_share < 1:
            raise ValueError(f"min_level_share must be in [0, 1), got {self.min_level_share!r}")


def _tensors(d: dict, idx) -> tuple:
    f = lambda k: torch.as_tensor(d[k][idx], dtype=torch.float32)  # noqa: E731
    return f("X"), f("Z"), torch.as_tensor(d["A"][idx], dtype=torch.long), f("Y")


def _train(model, loss_fn, train_idx, val_idx, data, cfg_lr, epochs, patience, batch, gen):
    opt = torch.optim.Adam(model.parameters(), lr=cfg_lr)
    stopper = EarlyStopping(model, patience)
    val = _tensors(data, val_idx)
    for _ in range(epochs):
        perm = train_idx[torch.randperm(len(train_idx), generator=gen).numpy()]
        for s in range(0, len(perm), batch):
            b = _tensors(data, perm[s:s + batch])
            opt.zero_grad()
            loss = loss_fn(model, *b)
            loss.backward()
            opt.step()
        with torch.no_grad():
            v = float(loss_fn(model, *val))
        if stopper.step(v, model):
            break
    return stopper.restore(model)


def fit_nuisances(data: dict, train_idx, val_idx, cfg: TrainConfig = TrainConfig(), *, seed: int = 0) -> Nuisances:
    """Train the three first-stage nuisance models (early stopping on ``val_idx``)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    dx, dz = data["X"].shape[1], data["Z"].shape[1]
    a_xz, a_z, mu = _XZ(dx, dz, 2), MLP([dz, 10, 10, 10, 2]), _XZ(dx, dz, 2)

    def ce_xz(m, x, z, a, y):
        return F.cross_entropy(m(x, z), a)

    def ce_z(m, x, z, a, y):
        return F.cross_entropy(m(z), a)

    def mse(m, x, z, a, y):
        return F.mse_loss(m(x, z).gather(1, a[:, None])[:, 0], y)

    args = (train_idx, val_idx, data, cfg.nuisance_lr, cfg.nuisance_epochs, cfg.nuisance_patience, cfg.batch, gen)
    return Nuisances(_train(a_xz, ce_xz, *args).eval(), _train(a_z, ce_z, *args).eval(), _train(mu, mse, *args).eval())


@torch.no_grad()
def pair_nuisances(nu: Nuisances, X: torch.Tensor, Z: torch.Tensor) -> dict:
    """Nuisances on every pair ``(x_i, z_j)``: ``p_xz[i, j, a]``, ``mu[i, j, a]`` and ``p_z[j, a]``."""
    n, m = X.shape[0], Z.shape[0]
    xi = X.repeat_interleave(m, 0)
    zj = Z.repeat(n, 1)
    p_xz = F.softmax(nu.a_xz(xi, zj), 1).reshape(n, m, 2)
    mu = nu.mu(xi, zj).reshape(n, m, 2)
    p_z = F.softmax(nu.a_z(Z), 1)
    return {"p_xz": p_xz, "mu": mu, "p_z": p_z}


def level_nuisances(pairs: dict, phi: torch.Tensor, A_pop: torch.Tensor, eps: float = 1e-4) -> tuple:
    """``(mu, pi)`` of shape ``(n, K, 2)``: the nuisances aggregated over the population's levels.

    ``phi``: ``(m, K)`` one-hot levels of the population ``z_j`` (gradients flow through it);
    ``A_pop``: the population's treatments (for ``P(A = a | phi = k)``).
    """
    m = phi.shape[0]
    p_k = (phi.mean(0)).clamp(eps, 1 - eps)  # P(phi = k)
    a1 = A_pop.float()
    p_a1_k = ((phi * a1[:, None]).sum(0) / phi.sum(0).clamp(min=1)).clamp(eps, 1 - eps)
    p_a_k = torch.stack([1 - p_a1_k, p_a1_k], 1)  # (K, 2)
    pi = torch.einsum("ija,jk->ika", pairs["p_xz"], phi) / m / p_k[None, :, None]
    mu = torch.einsum("ija,jk,ja->ika", pairs["mu"], phi, pairs["p_z"]) / m / (p_a_k * p_k[:, None])[None]
    return mu, pi


def manski_bounds(mu: torch.Tensor, pi: torch.Tensor, support: tuple[float, float], eps: float = 1e-4,
                  valid: torch.Tensor | None = None) -> torch.Tensor:
    """``(n, 2)`` CATE bounds: Manski bounds per level pair (``Y(0)`` from level ``k``, ``Y(1)`` from
    level ``l``), the largest lower and the smallest upper bound over all ``K^2`` pairs.

    ``valid``: ``(K,)`` booleans, the levels allowed into the max / min (``level_mask``: a level with
    too few instruments gives noisy nuisances whose extreme pair cuts through the CATE); a pair
    with an invalid level gives the no-instrument bounds ``[lo - hi, hi - lo]``, which never bind.
    """
    lo, hi = float(support[0]), float(support[1])
    if not hi > lo:
        raise ValueError(f"support must be (low, high) with high > low, got {support!r}")
    mu = mu.clamp(lo, hi)
    pi = pi.clamp(eps, 1 - eps)
    m1, p1 = mu[:, :, 1], pi[:, :, 1]  # level l
    m0, p0 = mu[:, :, 0], pi[:, :, 0]  # level k
    y1_lo, y1_hi = p1 * m1 + (1 - p1) * lo, p1 * m1 + (1 - p1) * hi
    y0_lo, y0_hi = p0 * m0 + (1 - p0) * lo, p0 * m0 + (1 - p0) * hi
    lower = y1_lo[:, None, :] - y0_hi[:, :, None]  # (n, k, l)
    upper = y1_hi[:, None, :] - y0_lo[:, :, None]
    if valid is not None:
        valid = torch.as_tensor(valid, dtype=torch.bool)
        if valid.shape != (mu.shape[1],):
            raise ValueError(f"valid must have one entry per level ({mu.shape[1]}), got shape {tuple(valid.shape)}")
        pair = valid[:, None] & valid[None, :]
        lower = torch.where(pair[None], lower, torch.full_like(lower, lo - hi))
        upper = torch.where(pair[None], upper, torch.full_like(upper, hi - lo))
    return torch.stack([lower.flatten(1).max(1).values, upper.flatten(1).min(1).values], 1)


def level_mask(phi: torch.Tensor, min_share: float) -> torch.Tensor:
    """``(K,)`` booleans: the levels holding at least ``min_share`` of the population ``phi``
    (``(m, K)`` one-hot rows); an empty level is never valid."""
    if not 0 <= min_share < 1:
        raise ValueError(f"min_share must be in [0, 1), got {min_share!r}")
    counts = phi.detach().sum(0)
    return (counts > 0) & (counts >= min_share * phi.shape[0])


def partition_bounds(nu: "Nuisances", data: dict, idx, levels: np.ndarray, K: int, support, *,
                     min_share: float = 0.05) -> np.ndarray:
    """Bounds at the points ``idx`` for a given partition ``levels`` (integers in ``[0, K)``, one per
    point of ``idx``; ``idx`` is the instrument population), through the same aggregation as the
    learned representation (``level_nuisances``, ``level_mask``, ``manski_bounds``): the k-means,
    oracle and random partitions are compared with ours through this one estimator."""
    levels = np.asarray(levels)
    if levels.shape != (len(idx),) or levels.min() < 0 or levels.max() >= K:
        raise ValueError(f"levels must hold one integer in [0, {K}) per point of idx, got shape {levels.shape}")
    X, Z, A, _ = _tensors(data, idx)
    phi = F.one_hot(torch.as_tensor(levels, dtype=torch.long), K).float()
    with torch.no_grad():
        mu, pi = level_nuisances(pair_nuisances(nu, X, Z), phi, A)
        return manski_bounds(mu, pi, support, valid=level_mask(phi, min_share)).numpy()


def oracle_partition(strength: np.ndarray, K: int) -> np.ndarray:
    """``K`` levels of equal size by rank of the instrument's true ``strength`` (a generator's
    propensity as a function of ``Z``): the partition a representation could at best learn."""
    order = np.argsort(np.asarray(strength), kind="stable")
    levels = np.empty(len(order), dtype=np.int64)
    levels[order] = np.arange(len(order)) * K // len(order)
    return levels


@torch.no_grad()
def propensity_partition(nu: "Nuisances", data: dict, idx, K: int) -> np.ndarray:
    """``K`` levels of equal size by rank of the first stage's own estimate of ``P(A = 1 | Z)`` at
    the instruments ``Z[idx]``: the plug-in partition (no representation is learned; it sorts the
    instruments by estimated strength, as ``oracle_partition`` sorts them by the true one). A
    control of the learned partition (session-6 review), not a method of the paper."""
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K must be a positive integer, got {K!r}")
    Z = _tensors(data, np.asarray(idx))[1]
    return oracle_partition(F.softmax(nu.a_z(Z), 1)[:, 1].numpy(), K)


# --- the representation ---------------------------------------------------------------------------

class RepNet(nn.Module):
    """``Z -> MLP -> K`` logits -> hard Gumbel-softmax levels; an auxiliary classification head.

    The trunk ends in a linear layer and uses LeakyReLU (slope 0.1) between its layers (differs from
    the authors' ReLUs): with ReLUs and a trailing ReLU (as we had it) Adam at the authors' lr 0.03
    drove every unit negative within a few epochs, the trunk output was exactly 0 for every ``Z``
    and the argmax partition one level (the no-instrument bounds) in 4 of 4 runs.
    """

    def __init__(self, dz: int, K: int, hidden: int = 10, layers: int = 3):
        super().__init__()
        if not isinstance(K, int) or K < 1:
            raise ValueError(f"K must be a positive integer, got {K!r}")
        sizes = [dz] + [hidden] * layers
        trunk = []
        for i in range(layers):
            trunk.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < layers - 1:
                trunk.append(nn.LeakyReLU(0.1))
        self.trunk = nn.Sequential(*trunk)
        self.logits = nn.Linear(hidden, K)
        self.cls = nn.Linear(hidden, K)
        self.K = K

    def forward(self, Z: torch.Tensor, hard: bool = True, sample: bool = True):
        h = self.trunk(Z)
        logits = self.logits(h)
        if sample:
            phi = F.gumbel_softmax(logits, tau=1.0, hard=hard)
        else:
            phi = F.one_hot(logits.argmax(1), self.K).float()
        return phi, self.cls(h)


def repnet_loss(bounds: torch.Tensor, phi: torch.Tensor, cls_logits: torch.Tensor, support, *,
                gamma: float = 1.0, alpha: float = 1.0, eps: float = 1e-4) -> torch.Tensor:
    """Mean width / range + ``gamma`` CE(aux head, partition) + ``alpha`` balance ``-mean log P(phi = k)``."""
    width = (bounds[:, 1] - bounds[:, 0]).mean() / (support[1] - support[0])
    ce = F.cross_entropy(cls_logits, phi)  # soft targets: the gradient reaches the levels (straight-through)
    balance = -torch.log(phi.mean(0) + eps).mean()
    return width + gamma * ce + alpha * balance


def _bounds_for(rep: RepNet, pairs: dict, Z_pop, A_pop, support, sample: bool, min_share: float):
    phi, cls = rep(Z_pop, sample=sample)
    mu, pi = level_nuisances(pairs, phi, A_pop)
    return manski_bounds(mu, pi, support, valid=level_mask(phi, min_share)), phi, cls


class OneLevelPartition(RuntimeError):
    """The learned partition puts every instrument into one level: its bounds are the no-instrument
    bounds, whatever the loss said (a dead trunk, or a representation that learned nothing)."""


def fit_repnet(data: dict, nu: Nuisances, K: int, train_idx, val_idx, support, cfg: TrainConfig = TrainConfig(),
               *, seed: int = 0, allow_one_level: bool = False) -> RepNet:
    """Train the representation: each step a batch of ``x`` against the whole training split as the
    instrument population (assumed; see the module docstring). Early stopping on the mean
    validation width of the *argmax* partition (the one evaluated), not on the sampled loss, which
    does not see a partition that collapsed to one level.

    Raises:
        OneLevelPartition: when the argmax partition of the training instruments uses one level
            (``allow_one_level=False``, the default); the experiment passes ``True`` and records the
            number of levels instead.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rep = RepNet(data["Z"].shape[1], K)
    opt = torch.optim.Adam(rep.parameters(), lr=cfg.rep_lr)
    X, Z, A, _ = _tensors(data, np.asarray(train_idx))
    pairs = pair_nuisances(nu, X, Z)
    Xv, Zv, Av, _ = _tensors(data, np.asarray(val_idx))
    val_pairs = pair_nuisances(nu, Xv, Zv)
    stopper = EarlyStopping(rep, cfg.rep_patience)
    for _ in range(cfg.rep_epochs):
        perm = torch.randperm(len(train_idx), generator=gen)
        for s in range(0, len(perm), cfg.batch):
            rows = perm[s:s + cfg.batch]
            sub = {"p_xz": pairs["p_xz"][rows], "mu": pairs["mu"][rows], "p_z": pairs["p_z"]}
            bounds, phi, cls = _bounds_for(rep, sub, Z, A, support, True, cfg.min_level_share)
            loss = repnet_loss(bounds, phi, cls, support, gamma=cfg.gamma, alpha=cfg.alpha)
            if torch.isfinite(loss):
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            bounds = _bounds_for(rep, val_pairs, Zv, Av, support, False, cfg.min_level_share)[0]
            v = float((bounds[:, 1] - bounds[:, 0]).mean())
        if stopper.step(v, rep):
            break
    stopper.restore(rep)
    rep.eval()
    if not allow_one_level:
        with torch.no_grad():
            used = int((rep(Z, sample=False)[0].sum(0) > 0).sum())
        if used < 2:
            raise OneLevelPartition(f"the learned partition puts all {len(train_idx)} training instruments into one "
                                    f"of K={K} levels: its bounds are the no-instrument bounds (lower rep_lr or "
                                    "check that the instrument moves the treatment)")
    return rep


@torch.no_grad()
def repnet_levels(rep: RepNet, data: dict, idx) -> np.ndarray:
    """The argmax level of every instrument ``Z[idx]`` (integers in ``[0, K)``)."""
    return rep(_tensors(data, idx)[1], sample=False)[0].argmax(1).numpy()


@torch.no_grad()
def repnet_bounds(rep: RepNet, nu: Nuisances, data: dict, idx, support, *, min_share: float = 0.05) -> np.ndarray:
    """Bounds at the points ``idx`` with ``idx`` as the instrument population, on the argmax
    partition (assumed: the authors sample Gumbel levels at test time too)."""
    return partition_bounds(nu, data, idx, repnet_levels(rep, data, idx), rep.K, support, min_share=min_share)


def kmeans_levels(Z: np.ndarray, K: int, *, seed: int = 0) -> np.ndarray:
    """k-means (scikit-learn, 10 restarts) labels of the instruments ``Z`` in ``K`` clusters."""
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=K, n_init=10, random_state=seed).fit(np.asarray(Z)).labels_.astype(np.int64)


def kmeans_bounds(data: dict, K: int, train_idx, val_idx, test_idx, support, cfg: TrainConfig = TrainConfig(),
                  *, seed: int = 0) -> np.ndarray:
    """The k-means baseline: cluster ``Z`` into ``K`` levels, train ``P(A | X, level)`` and
    ``E[Y | X, A, level]`` on the level (scaled to ``[-0.5, 0.5]``), Manski bounds per level pair.
    ``K = 1`` gives the naive bounds without an instrument."""
    if K == 1:
        level = np.zeros(len(data["Y"]))
    else:
        lab = kmeans_levels(data["Z"], K, seed=seed)
        level = (lab - lab.min()) / max(lab.max() - lab.min(), 1) - 0.5
    d2 = {**data, "Z": level[:, None]}
    nu = fit_nuisances(d2, train_idx, val_idx, cfg, seed=seed)
    X, _, _, _ = _tensors(d2, test_idx)
    levels = np.unique(level)
    mu, pi = [], []
    with torch.no_grad():
        for v in levels:
            z = torch.full((X.shape[0], 1), float(v))
            pi.append(F.softmax(nu.a_xz(X, z), 1))
            mu.append(nu.mu(X, z))
    mu, pi = torch.stack(mu, 1), torch.stack(pi, 1)  # (n, K, 2)
    return manski_bounds(mu, pi, support).numpy()
