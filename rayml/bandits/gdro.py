"""Group DRO with (lambda, beta)-sparsity: SB-GDRO and its variants, and the SMD-GDRO baseline.

Nguyen, Mehta & Guzman, "Beyond Minimax Rates in Group Distributionally Robust Optimization via a
Novel Notion of Sparsity", ICML 2025 (PMLR 267:46073-46115; arXiv 2410.00690).

GDRO: ``K`` groups with distributions ``P_k``, a loss ``l(theta; z)`` in [0, 1], convex and
``G``-Lipschitz in ``theta`` on a set ``Theta`` of diameter ``D``; find ``theta_bar`` with
``max_k R_k(theta_bar) - min_theta max_k R_k(theta) <= eps``. The problem is (lambda, beta)-sparse
when at every ``theta`` at most ``beta`` groups have risks all at least ``lambda`` above every other
group's (the lambda-dominant set).

The algorithm is a two-player zero-sum game (``play``), one fresh sample per round:

- min player: projected stochastic gradient descent on ``theta`` with step ``D / (G sqrt(T))``,
  fed ``grad l(theta_t; z_t)``; output the average iterate;
- max player: SB-EXP3 (``rayml.bandits.sleeping``) over the groups awake this round, fed the
  bandit loss ``1 - l(theta_t; z_t)`` of the group it drew ``z_t`` from;
- awake groups: ``dominant_set`` (the paper's DominantSet: sort the estimated risks at
  ``theta_t`` in decreasing order and cut at the first gap larger than ``0.7 lambda``) applied to
  empirical risks built once from ``m(lambda)`` samples per group (SB-GDRO, lambda known).

Variants, selected by ``GDROConfig.method``:

- ``"sb-gdro"``: lambda given.
- ``"sb-gdro-sa"`` (semi-adaptive): start at ``lambda_start``; whenever the estimated dominant set
  has more than ``ln K`` groups and ``lambda / 2 >= lambda_min``, halve lambda and redraw
  ``m(lambda)`` samples per group.
- ``"sb-gdro-df"`` (dimension-free): every ``sigma`` rounds, estimate the risks at the current
  ``theta`` only, from fresh samples, and keep that dominant set for the segment.
- ``"sb-gdro-a"`` (adaptive): choose lambda on the grid ``1, 1/5, 1/25, ...`` by estimating
  ``beta_lambda`` (``estimate_beta``) and minimising the sample bound, then run SB-GDRO.
- ``"smd-gdro"``: the baseline (Zhang et al., 2023, two-player version): every group awake every
  round, i.e. EXP3-IX over all ``K`` groups.

Assumed (the full text was not reachable; the research notes give the structure, from a digest of
the PDF): the fallback of DominantSet when no gap exceeds ``0.7 lambda`` is "all groups";
``m(lambda) = ceil((n + ln(2K/delta)) / (2 (0.15 lambda)^2))`` (Hoeffding for accuracy
``0.15 lambda`` plus ``n`` for uniformity over ``Theta``), and the DF variant uses the same without
``n``; the max player's rate is ``eta_t = sqrt(ln K / sum_{s<=t} |S_s|)``, ``gamma_t = eta_t / 2``
(the same rule for the baseline, where ``|S_s| = K``); SA keeps the game state when it halves
lambda and starts at ``lambda_start = 1``; DF uses ``sigma = ceil(c_sigma lambda / (eta_theta
G^2))`` rounds per segment (risks move at most ``sigma eta_theta G^2`` in a segment); SB-GDRO-A
replaces the paper's SolveOpt/EstG interval search by a plain grid search whose ``beta_lambda``
estimate is the largest dominant set over random points of ``Theta``, and its objective is
``K m(lambda) + beta_lambda ln K / eps^2``.

Every group's distribution is a finite set of atoms with probabilities (``AtomProblem``), which
makes exact risks, exact ``L* = min max R_k`` and empirical risks from ``m`` samples (multinomial
counts over atoms) cheap; all state carries a leading axis of ``runs`` independent games.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rayml.bandits import sleeping

__all__ = [
    "METHODS",
    "AtomProblem",
    "SparseQuadraticGroups",
    "HingeGroups",
    "breast_cancer_groups",
    "GDROConfig",
    "GameResult",
    "samples_per_group",
    "dominant_set",
    "EmpiricalRisks",
    "estimate_beta",
    "choose_lambda",
    "play",
]

METHODS = ("sb-gdro", "sb-gdro-sa", "sb-gdro-df", "sb-gdro-a", "smd-gdro")


class AtomProblem:
    """A GDRO problem whose group ``k`` draws ``z`` from atoms ``Z[k, j]`` with probability ``P[k, j]``.

    Subclasses define ``atom_losses``, ``loss_grad``, ``project``, ``optimal_value`` and set
    ``n_groups``, ``dim``, ``probs`` ``(K, J)``, ``diameter`` ``D`` and ``lipschitz`` ``G``.
    """

    n_groups: int
    dim: int
    probs: np.ndarray
    diameter: float
    lipschitz: float

    def atom_losses(self, theta: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """Losses of every atom at ``theta`` ``(R, n)``: ``(R, K, J)``."""
        raise NotImplementedError

    def loss_grad(self, theta: np.ndarray, groups: np.ndarray, atoms: np.ndarray):  # pragma: no cover
        """``(l(theta_r; z_r), grad l(theta_r; z_r))`` for atom ``atoms[r]`` of group ``groups[r]``."""
        raise NotImplementedError

    def project(self, theta: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """Euclidean projection onto ``Theta``, row-wise."""
        raise NotImplementedError

    def optimal_value(self) -> float:  # pragma: no cover - abstract
        """``L* = min_theta max_k R_k(theta)``."""
        raise NotImplementedError

    def start(self) -> np.ndarray:
        """The first iterate ``theta_1`` (the origin)."""
        return np.zeros(self.dim)

    def summarise(self, weights: np.ndarray):
        """What ``weighted_risks`` needs of atom weights ``(R, K, J)`` (by default the weights)."""
        return weights

    def weighted_risks(self, theta: np.ndarray, summary) -> np.ndarray:
        """``sum_j W[r, k, j] l(theta_r; Z[k, j])``: ``(R, K)`` risks under per-run atom weights."""
        return np.einsum("rkj,rkj->rk", self.atom_losses(theta), summary)

    def risks(self, theta: np.ndarray) -> np.ndarray:
        """Exact risks ``R_k(theta)`` for each row of ``theta`` ``(R, n)``: ``(R, K)``."""
        return np.einsum("rkj,kj->rk", self.atom_losses(np.atleast_2d(theta)), self.probs)

    def gap(self, theta: np.ndarray) -> np.ndarray:
        """Optimality gap ``max_k R_k(theta) - L*`` per row."""
        return self.risks(theta).max(axis=1) - self.optimal_value()

    def sample_atoms(self, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One atom index per run from the chosen group's distribution."""
        cdf = np.cumsum(self.probs[groups], axis=1)
        u = rng.random(groups.shape[0]) * cdf[:, -1]
        atoms = (cdf < u[:, None]).sum(axis=1)
        return np.minimum(atoms, self.probs.shape[1] - 1)


class SparseQuadraticGroups(AtomProblem):
    """A synthetic (0.2, beta)-sparse instance with a closed-form optimum.

    ``Theta`` is the Euclidean ball of radius ``radius`` in ``R^n``. Group ``k`` draws
    ``z = mu_k + s xi`` with ``xi`` uniform over ``atoms`` fixed points of mean zero (half of them
    the negatives of the other half), and ``l(theta; z) = c_k + w_k ||theta - z||^2 / M`` with
    ``M`` the largest possible ``||theta - z||^2``, so ``l`` lies in ``[c_k, c_k + w_k]``.
    The ``beta`` hard groups have ``(c, w) = hard`` (default ``(0.3, 0.6)``) and ``mu_j = a e_j``; the ``K - beta`` easy
    groups have ``(c, w) = easy`` (default ``(0, 0.1)``) and random ``mu`` in the ball of radius ``a``. Every hard
    risk is at least ``c_hard`` and every easy risk at most ``c_easy + w_easy``, so the hard groups form a
    ``(c_hard - c_easy - w_easy)``-dominant set at every ``theta`` (``lam_star``); with ``easy`` just below
    (issue 37: ``hard = (0.5, 0.4)``, ``easy = (0.2, 0.1)``, ``lam_star = 0.2``) the easy groups' risks sit
    ``lam_star`` under the hard ones', so a bandit over all ``K`` groups cannot tell them apart quickly.
    Which hard group is on top (and whether the other is within ``0.7 lambda`` of it, i.e. awake) moves
    with ``theta``. ``L*`` is attained at the centroid of the hard ``mu_j`` (the centre of the
    smallest ball around the vertices of a regular simplex); ``s`` is the noise of the samples.

    Assumed: this is our own construction in the spirit of the paper's synthetic experiment
    (K = 10, lambda* = 0.2, beta = 2), whose exact definition we could not read.
    """

    def __init__(self, n_groups: int = 10, beta: int = 2, dim: int = 5, *, a: float = 0.6, s: float = 0.3,
                 radius: float = 1.0, atoms: int = 32, instance_seed: int = 0, hard: tuple = (0.3, 0.6),
                 easy: tuple = (0.0, 0.1)):
        if n_groups < 2:
            raise ValueError(f"n_groups (K) must be >= 2, got {n_groups}")
        if not 1 <= beta < n_groups:
            raise ValueError(f"beta must be in [1, K), got {beta}")
        if dim < beta:
            raise ValueError(f"dim must be >= beta (one axis per hard group), got dim={dim}, beta={beta}")
        if atoms < 2 or atoms % 2:
            raise ValueError(f"atoms must be an even number >= 2, got {atoms}")
        if radius < a:
            raise ValueError(f"radius must be >= a so the optimum lies in Theta, got {radius} < {a}")
        c_hard, w_hard = (float(v) for v in hard)
        c_easy, w_easy = (float(v) for v in easy)
        if not (c_easy >= 0 and w_easy > 0):
            raise ValueError(f"easy = (c, w) needs c >= 0 and w > 0, got {easy}")
        if not (c_easy + w_easy < c_hard and w_hard > 0 and c_hard + w_hard <= 1):
            raise ValueError(f"hard = (c, w) needs c above every easy risk (> {c_easy + w_easy:g}), w > 0, c + w <= 1, "
                             f"got {hard}")
        rng = np.random.default_rng(instance_seed)
        self.n_groups, self.dim, self.beta, self.radius = int(n_groups), int(dim), int(beta), float(radius)
        mu = np.zeros((n_groups, dim))
        mu[np.arange(beta), np.arange(beta)] = a
        easy = rng.standard_normal((n_groups - beta, dim))
        easy *= a * rng.random((n_groups - beta, 1)) ** (1 / dim) / np.linalg.norm(easy, axis=1, keepdims=True)
        mu[beta:] = easy
        half = rng.uniform(-1, 1, (atoms // 2, dim))
        xi = np.concatenate([half, -half])
        self.mu, self.s = mu, float(s)
        self.Z = mu[:, None, :] + s * xi[None]                      # (K, J, n)
        self.probs = np.full((n_groups, atoms), 1.0 / atoms)
        self.c = np.where(np.arange(n_groups) < beta, c_hard, c_easy)
        self.w = np.where(np.arange(n_groups) < beta, w_hard, w_easy)
        self.lam_star = c_hard - c_easy - w_easy   # hard risks >= c_hard, easy risks <= c_easy + w_easy
        self.M = float((radius + a + s * np.sqrt(dim)) ** 2)
        self.m2 = float(np.mean(np.sum(xi**2, axis=1)))
        self.diameter = 2 * self.radius
        self.lipschitz = float(2 * self.w.max() / np.sqrt(self.M))
        self.a = float(a)

    def atom_losses(self, theta):
        d = theta[:, None, None, :] - self.Z[None]
        return self.c[None, :, None] + self.w[None, :, None] * np.einsum("rkjn,rkjn->rkj", d, d) / self.M

    def loss_grad(self, theta, groups, atoms):
        d = theta - self.Z[groups, atoms]
        c, w = self.c[groups], self.w[groups]
        return c + w * np.sum(d * d, axis=1) / self.M, (2 * w / self.M)[:, None] * d

    def summarise(self, weights):
        # ||theta - z||^2 = ||theta||^2 - 2 theta.z + ||z||^2, so the weighted mean needs two moments
        return np.einsum("rkj,kjn->rkn", weights, self.Z), np.einsum("rkj,kj->rk", weights, np.sum(self.Z**2, axis=2))

    def weighted_risks(self, theta, summary):
        zbar, z2 = summary
        sq = np.sum(theta**2, axis=1)[:, None] - 2 * np.einsum("rn,rkn->rk", theta, zbar) + z2
        return self.c[None] + self.w[None] * sq / self.M

    def project(self, theta):
        norm = np.linalg.norm(theta, axis=-1, keepdims=True)
        return theta * np.minimum(1.0, self.radius / np.maximum(norm, 1e-300))

    def minimiser(self) -> np.ndarray:
        """The exact GDRO solution: the centroid of the hard groups' means."""
        return self.mu[: self.beta].mean(axis=0)

    def optimal_value(self):
        c, w = float(self.c[0]), float(self.w[0])
        return float(c + w * (self.a**2 * (1 - 1 / self.beta) + self.s**2 * self.m2) / self.M)


class HingeGroups(AtomProblem):
    """Linear classification with the hinge loss rescaled into [0, 1], one group per row subset.

    ``Theta = [-B, B]^d`` (a box, so ``L*`` is a linear program), ``l(theta; (x, y)) =
    max(0, 1 - y <x, theta>) / S`` with ``S = 1 + B max_i ||x_i||_1``; group ``k`` is the empirical
    distribution of its rows. ``L*`` is solved exactly with HiGHS (``scipy.optimize.linprog``).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray, *, bound: float = 1.0):
        X, y, groups = np.asarray(X, float), np.asarray(y, float), np.asarray(groups)
        if X.ndim != 2 or y.shape != (X.shape[0],) or groups.shape != (X.shape[0],):
            raise ValueError(f"X (N, d), y (N,) and groups (N,) must match, got {X.shape}, {y.shape}, {groups.shape}")
        if not np.all(np.isin(y, (-1.0, 1.0))):
            raise ValueError("y must be in {-1, +1}")
        if bound <= 0:
            raise ValueError(f"bound must be > 0, got {bound}")
        labels = np.unique(groups)
        if labels.size < 2:
            raise ValueError(f"need at least 2 groups (K >= 2), got {labels.size}")
        self.n_groups, self.dim, self.bound = labels.size, X.shape[1], float(bound)
        self.scale = float(1 + bound * np.abs(X).sum(axis=1).max())
        sizes = np.array([(groups == g).sum() for g in labels])
        J = int(sizes.max())
        self.Xa = np.zeros((self.n_groups, J, self.dim))
        self.ya = np.zeros((self.n_groups, J))
        self.probs = np.zeros((self.n_groups, J))
        for k, g in enumerate(labels):
            rows = np.flatnonzero(groups == g)
            self.Xa[k, : rows.size], self.ya[k, : rows.size] = X[rows], y[rows]
            self.probs[k, : rows.size] = 1.0 / rows.size
        self.sizes, self.X, self.y, self.groups = sizes, X, y, np.searchsorted(labels, groups)
        self.diameter = float(2 * bound * np.sqrt(self.dim))
        self.lipschitz = float(np.linalg.norm(X, axis=1).max() / self.scale)
        self._opt: float | None = None

    def atom_losses(self, theta):
        margin = self.ya[None] * np.einsum("kjd,rd->rkj", self.Xa, theta)
        return np.maximum(0.0, 1.0 - margin) / self.scale

    def loss_grad(self, theta, groups, atoms):
        x, y = self.Xa[groups, atoms], self.ya[groups, atoms]
        hinge = 1.0 - y * np.sum(x * theta, axis=1)
        active = (hinge > 0).astype(float)
        return np.maximum(hinge, 0.0) / self.scale, (-(active * y) / self.scale)[:, None] * x

    def project(self, theta):
        return np.clip(theta, -self.bound, self.bound)

    def optimal_value(self):
        if self._opt is None:
            from scipy.optimize import linprog

            N, d, K = self.X.shape[0], self.dim, self.n_groups
            # variables: theta (d), t, u (N);  minimise t
            cost = np.zeros(d + 1 + N)
            cost[d] = 1.0
            a_hinge = np.hstack([-(self.y[:, None] * self.X), np.zeros((N, 1)), -np.eye(N)])  # 1 - y x.theta <= u
            a_group = np.zeros((K, d + 1 + N))
            for k in range(K):
                rows = np.flatnonzero(self.groups == k)
                a_group[k, d] = -1.0
                a_group[k, d + 1 + rows] = 1.0 / (rows.size * self.scale)
            res = linprog(cost, A_ub=np.vstack([a_hinge, a_group]), b_ub=np.concatenate([-np.ones(N), np.zeros(K)]),
                          bounds=[(-self.bound, self.bound)] * d + [(None, None)] + [(0, None)] * N, method="highs")
            if res.status != 0:
                raise RuntimeError(f"linprog failed: {res.message}")
            self._opt = float(res.fun)
            self.theta_star = res.x[:d]
        return self._opt


def breast_cancer_groups(features: tuple[str, ...] = ("mean smoothness", "mean compactness", "mean symmetry",
                                                      "worst concavity", "mean fractal dimension"),
                         bound: float = 1.0) -> HingeGroups:
    """scikit-learn's breast-cancer data as a GDRO problem with 6 imbalanced groups.

    Groups: ``mean radius`` cut at its 40% and 90% quantiles (3 bins) x ``mean texture`` above or
    below its median (group sizes range from about 5% to 25% of the rows). Features: the named
    columns standardised and clipped to [-3, 3], plus a constant 1; label: malignant = +1.
    Assumed: the paper used UCI Adult (10 race x sex groups), which would need a download; this
    ships with scikit-learn.
    """
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    names = list(data.feature_names)
    cols = [names.index(f) for f in features]
    X = data.data[:, cols]
    X = np.clip((X - X.mean(0)) / X.std(0), -3, 3)
    X = np.hstack([X, np.ones((X.shape[0], 1))])
    y = np.where(data.target == 0, 1.0, -1.0)
    radius, texture = data.data[:, names.index("mean radius")], data.data[:, names.index("mean texture")]
    rbin = np.digitize(radius, np.quantile(radius, [0.4, 0.9]))
    tbin = (texture > np.median(texture)).astype(int)
    return HingeGroups(X, y, rbin * 2 + tbin, bound=bound)


@dataclass(frozen=True)
class GDROConfig:
    """Settings of one GDRO game.

    Attributes:
        method: one of ``METHODS``.
        rounds: ``T``, game rounds (one sample each).
        lam: lambda for ``sb-gdro`` and ``sb-gdro-df``.
        delta: failure probability in ``m(lambda)``.
        lambda_start, lambda_min: the semi-adaptive schedule's first and smallest lambda.
        c_sigma: DF segment constant (``sigma = ceil(c_sigma lambda / (eta_theta G^2))``).
        eps: target accuracy, used by ``sb-gdro-a``'s objective.
        cover: random points of ``Theta`` that ``sb-gdro-a`` uses to estimate ``beta_lambda``.
        lambda_grid: how many grid values ``1, 1/5, ...`` ``sb-gdro-a`` tries.
        checkpoints: how many log-spaced rounds the gap is recorded at.
        eta_scale: multiplier of the max player's rate (1: the stated rate; tuned on a grid).
        max_rate: ``"anytime"`` (``eta_t = sqrt(ln K / sum_{s<=t} |S_s|)``) or ``"fixed"``, only for
            ``smd-gdro``: the fixed rate ``sqrt(ln K / (T K))`` of the baseline the paper improves on
            (Zhang et al., 2023: horizon known in advance).
    """

    method: str = "sb-gdro"
    rounds: int = 10_000
    lam: float = 0.2
    delta: float = 0.01
    lambda_start: float = 1.0
    lambda_min: float = 0.05
    c_sigma: float = 0.1
    eps: float = 0.01
    cover: int = 64
    lambda_grid: int = 3
    checkpoints: int = 20
    eta_scale: float = 1.0
    max_rate: str = "anytime"

    def __post_init__(self):
        if self.max_rate not in ("anytime", "fixed"):
            raise ValueError(f"max_rate must be 'anytime' or 'fixed', got {self.max_rate!r}")
        if self.max_rate == "fixed" and self.method != "smd-gdro":
            raise ValueError(f"max_rate='fixed' is the smd-gdro baseline's rate, got method={self.method!r}")
        if not np.isfinite(self.eta_scale) or self.eta_scale <= 0:
            raise ValueError(f"eta_scale must be a finite number > 0, got {self.eta_scale!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not isinstance(self.rounds, (int, np.integer)) or self.rounds < 1:
            raise ValueError(f"rounds (horizon T) must be an integer >= 1, got {self.rounds!r}")
        for name in ("lam", "lambda_start", "lambda_min", "c_sigma", "eps"):
            v = getattr(self, name)
            if not np.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if self.lam > 1 or self.lambda_start > 1:
            raise ValueError("lam and lambda_start must be <= 1 (losses lie in [0, 1])")
        if self.lambda_min > self.lambda_start:
            raise ValueError(f"lambda_min must be <= lambda_start, got {self.lambda_min} > {self.lambda_start}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.cover < 1 or self.lambda_grid < 1 or self.checkpoints < 1:
            raise ValueError("cover, lambda_grid and checkpoints must be >= 1")


@dataclass(frozen=True)
class GameResult:
    """What one batch of games measured.

    Attributes:
        rounds: ``(C,)`` checkpoint rounds.
        samples: ``(R, C)`` samples used by each run up to each checkpoint (estimation included).
        gap: ``(R, C)`` optimality gap of the average iterate at each checkpoint.
        theta_bar: ``(R, n)`` final average iterate.
        awake_mean: ``(R,)`` mean number of awake groups per round.
        group_counts: ``(R, K)`` game samples drawn from each group.
        lam: ``(R,)`` the lambda each run ended with (``nan`` for the baseline).
        estimation_samples: ``(R,)`` samples spent on risk estimation.
    """

    rounds: np.ndarray
    samples: np.ndarray
    gap: np.ndarray
    theta_bar: np.ndarray
    awake_mean: np.ndarray
    group_counts: np.ndarray
    lam: np.ndarray
    estimation_samples: np.ndarray


def samples_per_group(lam: float | np.ndarray, n_groups: int, delta: float, dim: int = 0) -> np.ndarray:
    """Assumed ``m(lambda) = ceil((dim + ln(2K/delta)) / (2 (0.15 lambda)^2))`` (``dim=0`` for DF)."""
    lam = np.asarray(lam, dtype=float)
    return np.ceil((dim + math.log(2 * n_groups / delta)) / (2 * (0.15 * lam) ** 2)).astype(np.int64)


def dominant_set(risk_estimates: np.ndarray, lam: float | np.ndarray) -> np.ndarray:
    """DominantSet: the groups above the first gap larger than ``0.7 lambda`` in the sorted risks.

    Args:
        risk_estimates: ``(R, K)`` estimated risks at the current ``theta`` of each run.
        lam: lambda, a scalar or ``(R,)``.

    Returns:
        ``(R, K)`` booleans; all True in a run where no gap exceeds ``0.7 lambda`` (Assumed fallback).
    """
    r = np.asarray(risk_estimates, dtype=float)
    if r.ndim != 2 or r.shape[1] < 2:
        raise ValueError(f"risk_estimates must have shape (runs, K) with K >= 2, got {r.shape}")
    lam = np.broadcast_to(np.asarray(lam, dtype=float), (r.shape[0],))
    order = np.argsort(-r, axis=1, kind="stable")
    srt = np.take_along_axis(r, order, axis=1)
    big = (srt[:, :-1] - srt[:, 1:]) > 0.7 * lam[:, None]
    size = np.where(big.any(axis=1), big.argmax(axis=1) + 1, r.shape[1])
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(r.shape[1])[None].repeat(r.shape[0], 0), axis=1)
    return ranks < size[:, None]


class EmpiricalRisks:
    """Empirical risks from ``m`` samples per group and run, as multinomial counts over atoms."""

    def __init__(self, problem: AtomProblem, runs: int):
        self.problem = problem
        self.weights = np.zeros((runs,) + problem.probs.shape)
        self._summary = None

    def redraw(self, runs: np.ndarray, m: np.ndarray, rng: np.random.Generator) -> int:
        """Fresh ``m[i]`` samples per group for run ``runs[i]``; returns the samples drawn."""
        total = 0
        for r, mi in zip(np.atleast_1d(runs), np.atleast_1d(m)):
            counts = rng.multinomial(int(mi), self.problem.probs)
            self.weights[r] = counts / float(mi)
            total += int(mi) * self.problem.n_groups
        self._summary = None
        return total

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        """``(R, K)`` empirical risks at each run's ``theta``."""
        if self._summary is None:
            self._summary = self.problem.summarise(self.weights)
        return self.problem.weighted_risks(theta, self._summary)


def estimate_beta(problem: AtomProblem, lam: float, m: int, points: np.ndarray, rng: np.random.Generator) -> int:
    """Largest estimated dominant set over ``points`` ``(P, n)`` of ``Theta`` (EstG, Assumed form)."""
    est = EmpiricalRisks(problem, 1)
    est.redraw(np.array([0]), np.array([m]), rng)
    rhat = np.einsum("pkj,kj->pk", problem.atom_losses(points), est.weights[0])
    return int(dominant_set(rhat, lam).sum(axis=1).max())


def choose_lambda(problem: AtomProblem, config: GDROConfig, rng: np.random.Generator) -> tuple[float, int]:
    """SB-GDRO-A's choice of lambda on ``1, 1/5, 1/25, ...``; returns ``(lambda, samples spent)``.

    Assumed: minimise ``K m(lambda) + beta_lambda ln K / eps^2`` with ``beta_lambda`` from
    ``estimate_beta`` on ``config.cover`` points drawn uniformly from a box around the start and
    projected onto ``Theta`` (the paper's SolveOpt searches an interval with EstG on a cover).
    """
    K, n = problem.n_groups, problem.dim
    half = problem.diameter / 2
    points = problem.project(problem.start() + rng.uniform(-half, half, (config.cover, n)))
    best, spent = (None, math.inf), 0
    for i in range(config.lambda_grid):
        lam = 5.0 ** (-i)
        m = int(samples_per_group(lam, K, config.delta, n))
        beta = estimate_beta(problem, lam, m, points, rng)
        spent += K * m
        f = K * m + beta * math.log(K) / config.eps**2
        if f < best[1]:
            best = (lam, f)
    return float(best[0]), spent


def _checkpoints(T: int, count: int) -> np.ndarray:
    return np.unique(np.geomspace(1, T, count).round().astype(int))


def play(problem: AtomProblem, config: GDROConfig, runs: int, seed: int | np.random.Generator) -> GameResult:
    """``runs`` independent GDRO games with ``config.method``, advanced together.

    Args:
        problem: the GDRO instance.
        config: method and horizon.
        runs: number of independent games (>= 1).
        seed: seed or Generator for every random draw of the batch.
    """
    if not isinstance(runs, (int, np.integer)) or runs < 1:
        raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    K, n, T, method = problem.n_groups, problem.dim, int(config.rounds), config.method
    idx = np.arange(runs)
    eta_theta = problem.diameter / (problem.lipschitz * math.sqrt(T))
    theta = np.tile(problem.start(), (runs, 1))
    theta_sum = np.zeros_like(theta)
    regret = sleeping.init_state(runs, K)
    awake_total = np.zeros(runs)
    counts = np.zeros((runs, K))
    est_samples = np.zeros(runs)
    lam = np.full(runs, np.nan)
    est = EmpiricalRisks(problem, runs)
    if method in ("sb-gdro", "sb-gdro-df"):
        lam[:] = config.lam
    elif method == "sb-gdro-sa":
        lam[:] = config.lambda_start
    elif method == "sb-gdro-a":
        for r in range(runs):
            lam[r], spent = choose_lambda(problem, config, rng)
            est_samples[r] += spent
    if method in ("sb-gdro", "sb-gdro-sa", "sb-gdro-a"):
        for r in range(runs):
            est_samples[r] += est.redraw(np.array([r]), samples_per_group(lam[r : r + 1], K, config.delta, n), rng)
    sigma = 1
    if method == "sb-gdro-df":
        sigma = max(1, math.ceil(config.c_sigma * config.lam / (eta_theta * problem.lipschitz**2)))
        m_df = int(samples_per_group(config.lam, K, config.delta, 0))
    ln_k = math.log(K)
    marks = _checkpoints(T, config.checkpoints)
    gaps = np.zeros((runs, marks.size))
    used = np.zeros((runs, marks.size))
    c = 0
    awake = np.ones((runs, K), dtype=bool)
    for t in range(T):
        if method in ("sb-gdro", "sb-gdro-a"):
            awake = dominant_set(est(theta), lam)
        elif method == "sb-gdro-sa":
            awake = dominant_set(est(theta), lam)
            while True:
                halve = (awake.sum(axis=1) > ln_k) & (lam / 2 >= config.lambda_min)
                if not halve.any():
                    break
                rs = np.flatnonzero(halve)
                lam[rs] /= 2
                est_samples[rs] += [est.redraw(np.array([r]), samples_per_group(lam[r : r + 1], K, config.delta, n), rng)
                                    for r in rs]
                awake[rs] = dominant_set(est(theta)[rs], lam[rs])
        elif method == "sb-gdro-df" and t % sigma == 0:
            est.redraw(idx, np.full(runs, m_df), rng)
            est_samples += m_df * K
            awake = dominant_set(est(theta), lam)
        awake_total += awake.sum(axis=1)
        if config.max_rate == "fixed":
            eta_q = np.full(runs, config.eta_scale * math.sqrt(ln_k / (T * K)))
        else:
            eta_q = config.eta_scale * np.sqrt(ln_k / awake_total)
        p = sleeping.probabilities(regret, awake, eta_q[:, None])
        arms = sleeping.sample_arms(p, rng)
        atoms = problem.sample_atoms(arms, rng)
        loss, grad = problem.loss_grad(theta, arms, atoms)
        regret = sleeping.update(regret, p, awake, arms, 1.0 - loss, eta_q / 2)
        counts[idx, arms] += 1
        theta_sum += theta
        theta = problem.project(theta - eta_theta * grad)
        if c < marks.size and t + 1 == marks[c]:
            gaps[:, c] = problem.gap(theta_sum / (t + 1))
            used[:, c] = est_samples + t + 1
            c += 1
    return GameResult(rounds=marks, samples=used, gap=gaps, theta_bar=theta_sum / T, awake_mean=awake_total / T,
                      group_counts=counts, lam=lam, estimation_samples=est_samples)
