"""Item response theory for LLM evaluation: a multidimensional 2PL fitted to a models x items
correctness matrix, abilities, and MERGE^3's merged-performance estimators.

"MERGE^3: Efficient Evolutionary Merging on Consumer-grade GPUs" (Mencattini et al., ICML 2025),
building on tinyBenchmarks (Maia Polo et al., ICML 2024):

* The model (the 2PL of the papers, py-irt's ``multidim_2pl``): model ``l`` answers item ``j``
  correctly with ``P = sigmoid(a_j . theta_l - b_j)``, ``a_j, theta_l`` in ``R^D``. (py-irt stores a
  difficulty per dimension; only their sum enters ``P``, so one ``b_j`` per item is the same model.)
* ``fit_irt``: item parameters and population abilities by maximum likelihood in torch.
  Assumed: a standard-normal prior on abilities and weak Gaussian priors on ``a`` and ``b``
  (``prior_*``, a MAP fit; pure joint MLE diverges for all-correct rows), standing in for py-irt's
  hierarchical priors; L-BFGS in float64 from a seeded initialisation; location and scale are then
  identified by standardising the population's abilities (mean 0, sd 1 per dimension), which
  undoes the joint fit's shrinkage of abilities (and inflation of ``a``) without changing any
  probability.
* ``fit_ability``: one model's ``theta`` by MLE with the items fixed (BFGS, as tinyBenchmarks and
  mergenetic do for the endpoint models on the full data). As in tinyBenchmarks' ``item_curve``
  (which mergenetic reuses), the logits ``a_j . theta - b_j`` are clipped to ``[-CLIP, CLIP]``
  (``CLIP = 30``), which bounds the ability of a model that answers every item right (or wrong):
  without it the MLE diverges. ``prior_sd`` adds an optional Gaussian prior ``N(0, prior_sd^2 I)``
  on ``theta`` (a MAP fit; assumed: a regularised alternative, not in the authors' code).
* ``fit_lambda`` / merged ability (MERGE^3, Sec. 3 "Estimate"): the merged model's ability is a
  combination of the endpoint abilities, ``theta_merge = sum_i lambda_i theta_i``, with ``lambda``
  fitted by MLE on the merged model's answers to the ``n`` extracted items (BFGS from
  ``lambda_i = 1/k``, unconstrained, as in the authors' code).
* ``mp_irt``: ``(n/N) * observed + (1 - n/N) * mean_{j unseen} P(correct | theta_merge)`` where
  observed is the weighted accuracy on the extracted items (weights ``1/n`` for a random
  extraction); ``gmp_irt = delta * observed + (1 - delta) * mp_irt`` with ``delta = 0.5`` (the
  authors' default). ``p_irt`` / ``gp_irt`` are tinyBenchmarks' single-model versions (the ability
  fitted directly on the extracted items).

Examples:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> A, b = rng.normal(1, 0.3, (200, 1)), rng.normal(0, 1, 200)
    >>> thetas = rng.normal(0, 1, (40, 1))
    >>> Y = (rng.random((40, 200)) < prob(thetas, A, b)).astype(float)
    >>> fit = fit_irt(Y, dims=1, seed=0)
    >>> fit.A.shape, fit.b.shape, fit.theta.shape
    ((200, 1), (200,), (40, 1))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

__all__ = ["CLIP", "IRTFit", "save_fit", "load_fit", "prob", "fit_irt", "fit_ability", "fit_lambda", "merged_ability",
           "mp_irt", "gmp_irt",
           "p_irt", "gp_irt", "estimates"]


CLIP = 30.0  # tinyBenchmarks' item_curve: logits clipped to [-30, 30]


@dataclass(frozen=True)
class IRTFit:
    """A fitted multidimensional 2PL.

    Attributes:
        A: item discriminations, ``(N, D)``.
        b: item difficulties, ``(N,)``.
        theta: abilities of the fitted population, ``(M, D)``.
        nll: the final negative log-likelihood (data term, summed).
    """

    A: np.ndarray
    b: np.ndarray
    theta: np.ndarray
    nll: float

    @property
    def dims(self) -> int:
        """The ability dimension ``D``."""
        return int(self.A.shape[1])


def save_fit(fit: IRTFit, path) -> None:
    """Write ``fit`` to an ``.npz`` file (tinyBenchmarks-style pre-fitted item parameters)."""
    np.savez(path, A=fit.A, b=fit.b, theta=fit.theta, nll=np.array(fit.nll))


def load_fit(path) -> IRTFit:
    """Read an ``IRTFit`` written by ``save_fit`` (plain arrays; nothing is unpickled)."""
    with np.load(path, allow_pickle=False) as z:
        A, b = np.asarray(z["A"], float), np.asarray(z["b"], float)
        if A.ndim != 2 or b.shape != (A.shape[0],):
            raise ValueError(f"{path}: A must be (N, D) and b (N,), got {A.shape} and {b.shape}")
        return IRTFit(A=A, b=b, theta=np.asarray(z["theta"], float), nll=float(z["nll"]))


def prob(theta: np.ndarray, A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``P(correct) = sigmoid(theta . a_j - b_j)``: ``(D,) -> (N,)`` or ``(M, D) -> (M, N)``."""
    theta, A, b = np.asarray(theta, float), np.asarray(A, float), np.asarray(b, float)
    return expit(theta @ A.T - b)


def _check_matrix(Y) -> np.ndarray:
    Y = np.asarray(Y, dtype=float)
    if Y.ndim != 2 or Y.shape[0] < 1 or Y.shape[1] < 1:
        raise ValueError(f"Y must be a non-empty models x items matrix, got shape {Y.shape}")
    if not np.all((Y == 0) | (Y == 1)):
        raise ValueError("Y must contain only 0 and 1")
    return Y


def fit_irt(Y, dims: int = 2, *, seed: int = 0, prior_theta: float = 1.0, prior_a: float = 3.0,
            prior_b: float = 3.0, max_iter: int = 300) -> IRTFit:
    """Fit a ``dims``-dimensional 2PL to the correctness matrix ``Y`` (models x items) in torch.

    Minimises ``-log L(Y | A, b, theta) + |theta|^2 / (2 prior_theta^2) + |A|^2 / (2 prior_a^2)
    + |b|^2 / (2 prior_b^2)`` with L-BFGS (float64), from ``theta ~ N(0, 0.1)``, ``A ~ N(1/D, 0.1)``,
    ``b = 0`` drawn from ``seed``. Abilities are identified only up to rotations of ``R^D``.
    """
    import torch
    import torch.nn.functional as F

    Y = _check_matrix(Y)
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ValueError(f"dims must be a positive integer, got {dims!r}")
    for name, v in (("prior_theta", prior_theta), ("prior_a", prior_a), ("prior_b", prior_b)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    M, N = Y.shape
    g = torch.Generator().manual_seed(int(seed))
    y = torch.as_tensor(Y, dtype=torch.float64)
    theta = (0.1 * torch.randn(M, dims, generator=g, dtype=torch.float64)).requires_grad_()
    A = (1.0 / dims + 0.1 * torch.randn(N, dims, generator=g, dtype=torch.float64)).requires_grad_()
    b = torch.zeros(N, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([theta, A, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-9,
                            tolerance_change=1e-12, history_size=50, line_search_fn="strong_wolfe")

    def data_nll():
        z = theta @ A.T - b
        return F.binary_cross_entropy_with_logits(z, y, reduction="sum")

    def closure():
        opt.zero_grad()
        loss = data_nll() + (theta ** 2).sum() / (2 * prior_theta ** 2) + (A ** 2).sum() / (2 * prior_a ** 2) \
            + (b ** 2).sum() / (2 * prior_b ** 2)
        loss.backward()
        return loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest and deterministic
    try:
        opt.step(closure)
    finally:
        torch.set_num_threads(threads)
    with torch.no_grad():
        nll = float(data_nll())
    return _standardized(A.detach().numpy().copy(), b.detach().numpy().copy(), theta.detach().numpy().copy(), nll)


def _standardized(A: np.ndarray, b: np.ndarray, theta: np.ndarray, nll: float) -> IRTFit:
    """Identify location and scale: the population's abilities get mean 0 and sd 1 per dimension
    (``theta' = (theta - m) / s``, ``a' = a s``, ``b' = b - a . m``); probabilities are unchanged."""
    m = theta.mean(axis=0)
    s = theta.std(axis=0)
    s = np.where(s > 1e-8, s, 1.0)
    return IRTFit(A=A * s, b=b - A @ m, theta=(theta - m) / s, nll=nll)


def _items(items, N: int) -> np.ndarray:
    idx = np.arange(N) if items is None else np.asarray(items, dtype=int).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= N):
        raise ValueError(f"items must index the {N} items, got range [{idx.min()}, {idx.max()}]")
    return idx


def _nll_and_grad(theta: np.ndarray, y: np.ndarray, A: np.ndarray, b: np.ndarray, clip: float | None = CLIP,
                  prior_sd: float | None = None) -> tuple[float, np.ndarray]:
    raw = A @ theta - b
    z = raw if clip is None else np.clip(raw, -clip, clip)
    nll = float(np.sum(np.logaddexp(0.0, z) - y * z))
    r = expit(z) - y
    if clip is not None:
        r = np.where(np.abs(raw) < clip, r, 0.0)  # the clipped logit is flat in theta
    grad = A.T @ r
    if prior_sd is not None:
        nll += float(theta @ theta) / (2 * prior_sd ** 2)
        grad = grad + theta / prior_sd ** 2
    return nll, grad


def _check_reg(clip, prior_sd) -> None:
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be > 0 or None, got {clip!r}")
    if prior_sd is not None and not prior_sd > 0:
        raise ValueError(f"prior_sd must be > 0 or None, got {prior_sd!r}")


def fit_ability(y, A: np.ndarray, b: np.ndarray, items: Sequence[int] | None = None,
                theta0: np.ndarray | None = None, *, clip: float | None = CLIP,
                prior_sd: float | None = None) -> np.ndarray:
    """A model's ability ``theta`` (``(D,)``) by MLE (BFGS) from its answers ``y`` to ``items``
    (default: all items; ``y`` then has one entry per item of ``items``), with ``A, b`` fixed.

    ``clip``: logits clipped to ``[-clip, clip]`` (tinyBenchmarks' 30; ``None``: the plain MLE,
    which diverges for all-correct or all-wrong answers); ``prior_sd``: a Gaussian prior on
    ``theta`` (MAP) when given."""
    _check_reg(clip, prior_sd)
    A, b = np.asarray(A, float), np.asarray(b, float)
    idx = _items(items, A.shape[0])
    y = np.asarray(y, float).reshape(-1)
    if y.shape[0] != idx.shape[0]:
        raise ValueError(f"y must have one answer per item ({idx.shape[0]}), got {y.shape[0]}")
    x0 = np.zeros(A.shape[1]) if theta0 is None else np.asarray(theta0, float).reshape(-1)
    res = minimize(_nll_and_grad, x0, args=(y, A[idx], b[idx], clip, prior_sd), jac=True, method="BFGS")
    return res.x


def fit_lambda(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], thetas: Sequence[np.ndarray],
               lambda0: np.ndarray | None = None, *, clip: float | None = CLIP) -> np.ndarray:
    """MERGE^3's combination weights: ``lambda`` maximising the likelihood of the merged model's
    answers ``y`` to ``items`` under ``theta = sum_i lambda_i thetas[i]`` (BFGS from ``1/k``; logits
    clipped to ``[-clip, clip]`` as in ``fit_ability``)."""
    _check_reg(clip, None)
    A, b = np.asarray(A, float), np.asarray(b, float)
    idx = _items(items, A.shape[0])
    y = np.asarray(y, float).reshape(-1)
    if y.shape[0] != idx.shape[0]:
        raise ValueError(f"y must have one answer per item ({idx.shape[0]}), got {y.shape[0]}")
    T = np.stack([np.asarray(t, float).reshape(-1) for t in thetas])  # (k, D)
    if T.shape[1] != A.shape[1]:
        raise ValueError(f"thetas must have dimension {A.shape[1]}, got {T.shape[1]}")
    k = T.shape[0]
    x0 = np.full(k, 1.0 / k) if lambda0 is None else np.asarray(lambda0, float)
    Ai, bi = A[idx], b[idx]

    def f(lam):
        nll, g_theta = _nll_and_grad(lam @ T, y, Ai, bi, clip)
        return nll, T @ g_theta

    return minimize(f, x0, jac=True, method="BFGS").x


def merged_ability(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], thetas: Sequence[np.ndarray]) -> np.ndarray:
    """``theta_merge = sum_i lambda_i theta_i`` with ``lambda = fit_lambda(...)``."""
    lam = fit_lambda(y, A, b, items, thetas)
    return lam @ np.stack([np.asarray(t, float).reshape(-1) for t in thetas])


def _blend(y, A, b, items, theta, weights, population) -> float:
    """``(n/N_g) * sum_j w_j y_j + (1 - n/N_g) * mean_{unseen in group} P(theta)``."""
    N = A.shape[0]
    idx = _items(items, N)
    pop = np.arange(N) if population is None else _items(population, N)
    y = np.asarray(y, float).reshape(-1)
    w = np.full(idx.shape[0], 1.0 / max(1, idx.shape[0])) if weights is None else np.asarray(weights, float)
    if w.shape[0] != idx.shape[0]:
        raise ValueError(f"weights must have one entry per item ({idx.shape[0]}), got {w.shape[0]}")
    observed = float(np.sum(w * y))
    unseen = np.setdiff1d(pop, idx)
    if unseen.size == 0:
        return observed
    lam = idx.shape[0] / pop.shape[0]
    return lam * observed + (1 - lam) * float(prob(theta, A[unseen], b[unseen]).mean())


def mp_irt(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], thetas: Sequence[np.ndarray], *,
           weights: Sequence[float] | None = None, population: Sequence[int] | None = None) -> float:
    """MERGE^3's mp-IRT estimate of the merged model's accuracy on ``population`` (default: all items)
    from its answers ``y`` to the extracted ``items`` (a subset of ``population``)."""
    theta = merged_ability(y, A, b, items, thetas)
    return _blend(y, A, b, items, theta, weights, population)


def gmp_irt(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], thetas: Sequence[np.ndarray], *,
            weights: Sequence[float] | None = None, population: Sequence[int] | None = None,
            delta: float = 0.5) -> float:
    """MERGE^3's gmp-IRT: ``delta * observed + (1 - delta) * mp_irt`` (``delta = 0.5``)."""
    return estimates(y, A, b, items, thetas, weights=weights, population=population, delta=delta)["gmp_irt"]


def p_irt(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], *, weights: Sequence[float] | None = None,
          population: Sequence[int] | None = None) -> float:
    """tinyBenchmarks' p-IRT: as ``mp_irt`` with ``theta`` fitted directly on the extracted items."""
    idx = _items(items, np.asarray(A).shape[0])
    theta = fit_ability(y, A, b, idx)
    return _blend(y, A, b, idx, theta, weights, population)


def gp_irt(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], *, weights: Sequence[float] | None = None,
           population: Sequence[int] | None = None, delta: float = 0.5) -> float:
    """tinyBenchmarks' gp-IRT: ``delta * observed + (1 - delta) * p_irt``."""
    idx = _items(items, np.asarray(A).shape[0])
    w = np.full(idx.shape[0], 1.0 / max(1, idx.shape[0])) if weights is None else np.asarray(weights, float)
    obs = float(np.sum(w * np.asarray(y, float).reshape(-1)))
    return delta * obs + (1 - delta) * p_irt(y, A, b, idx, weights=w, population=population)


def estimates(y, A: np.ndarray, b: np.ndarray, items: Sequence[int], thetas: Sequence[np.ndarray], *,
              weights: Sequence[float] | None = None, population: Sequence[int] | None = None,
              delta: float = 0.5) -> dict[str, float]:
    """Every estimator at once (``lambda`` fitted once): ``mean`` (the weighted observed accuracy),
    ``mp_irt``, ``gmp_irt``."""
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta!r}")
    idx = _items(items, np.asarray(A).shape[0])
    w = np.full(idx.shape[0], 1.0 / max(1, idx.shape[0])) if weights is None else np.asarray(weights, float)
    obs = float(np.sum(w * np.asarray(y, float).reshape(-1)))
    theta = merged_ability(y, A, b, idx, thetas)
    mp = _blend(y, A, b, idx, theta, w, population)
    return {"mean": obs, "mp_irt": mp, "gmp_irt": delta * obs + (1 - delta) * mp}
