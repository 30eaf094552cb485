"""SB-EXP3: exponential weights for sleeping bandits with per-action regret, vectorised over runs.

Nguyen & Mehta, "Near-optimal per-action regret bounds for sleeping bandits", AISTATS 2024
(arXiv 2403.01315), the max player of SB-GDRO in Nguyen, Mehta & Guzman, "Beyond Minimax Rates
in Group Distributionally Robust Optimization via a Novel Notion of Sparsity", ICML 2025.

Each round the adversary wakes a set ``A_t`` of arms; the learner plays only awake arms. The state
is, per arm ``a``, the learner's cumulative *estimated regret* against ``a`` over the rounds in
which ``a`` was awake, ``R[a] = sum_{s: a in A_s} (<p_s, lhat_s> - lhat_s(a))``, and

    p_t(a) = exp(eta R[a]) / sum_{b in A_t} exp(eta R[b])     for a in A_t, 0 otherwise,
    lhat_t(a) = l_t(a) 1[I_t = a] / (p_t(a) + gamma)           (implicit exploration, EXP3-IX),
    R[a] += <p_t, lhat_t> - lhat_t(a)                          for a in A_t only.

With every arm always awake this is exactly EXP3-IX (the common term ``<p, lhat>`` cancels in the
softmax), which is what the SMD-GDRO baseline's max player runs.

Assumed: the update is the sleeping-experts ("specialists") form above; the full text of the
AISTATS paper was not reachable, and this is the form a per-action bound needs. Assumed step sizes
(``default_rates``): ``eta = sqrt(ln K / (T A))`` with ``A`` the largest awake-set size, and
``gamma = eta / 2``.

All arrays carry a leading axis of ``runs`` independent learners.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SBExp3Config", "default_rates", "init_state", "probabilities", "update", "sample_arms"]


@dataclass(frozen=True)
class SBExp3Config:
    """Step sizes of SB-EXP3.

    Attributes:
        eta: learning rate (> 0).
        gamma: implicit-exploration parameter (>= 0; 0 gives the plain generalised EXP3).
    """

    eta: float
    gamma: float = 0.0

    def __post_init__(self):
        if not np.isfinite(self.eta) or self.eta <= 0:
            raise ValueError(f"eta must be a finite number > 0, got {self.eta!r}")
        if not np.isfinite(self.gamma) or self.gamma < 0:
            raise ValueError(f"gamma must be a finite number >= 0, got {self.gamma!r}")


def default_rates(n_arms: int, horizon: int, awake: int | None = None) -> SBExp3Config:
    """Assumed rates: ``eta = sqrt(ln K / (T A))``, ``gamma = eta / 2`` (``A`` = awake-set size bound)."""
    if n_arms < 2:
        raise ValueError(f"n_arms (K) must be >= 2, got {n_arms}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    a = n_arms if awake is None else int(awake)
    if not 1 <= a <= n_arms:
        raise ValueError(f"awake must be in [1, n_arms], got {awake}")
    eta = float(np.sqrt(np.log(n_arms) / (horizon * a)))
    return SBExp3Config(eta=eta, gamma=eta / 2)


def init_state(runs: int, n_arms: int) -> np.ndarray:
    """Zero estimated regrets, shape ``(runs, K)``."""
    if n_arms < 2:
        raise ValueError(f"n_arms (K) must be >= 2, got {n_arms}")
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    return np.zeros((runs, n_arms))


def probabilities(regret: np.ndarray, awake: np.ndarray, eta: float) -> np.ndarray:
    """``p_t``: softmax of ``eta * R`` over the awake arms of each run, 0 on sleeping arms.

    Args:
        regret: ``(runs, K)`` estimated regrets ``R``.
        awake: ``(runs, K)`` booleans, at least one True per run.
        eta: learning rate.
    """
    if regret.shape != awake.shape:
        raise ValueError(f"regret and awake must have the same shape, got {regret.shape} and {awake.shape}")
    if not np.all(awake.any(axis=1)):
        raise ValueError("awake must wake at least one arm in every run")
    z = np.where(awake, eta * regret, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=1, keepdims=True)


def sample_arms(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One arm per run drawn from each row of ``p`` (inverse-CDF with one uniform per run)."""
    u = rng.random(p.shape[0])
    cdf = np.cumsum(p, axis=1)
    arms = (cdf < u[:, None] * cdf[:, -1:]).sum(axis=1)
    # never pick a zero-probability arm through rounding at the top end
    arms = np.minimum(arms, p.shape[1] - 1)
    bad = p[np.arange(p.shape[0]), arms] <= 0
    if np.any(bad):
        arms[bad] = np.argmax(p[bad], axis=1)
    return arms


def update(regret: np.ndarray, p: np.ndarray, awake: np.ndarray, arms: np.ndarray, losses: np.ndarray,
           gamma: float) -> np.ndarray:
    """The SB-EXP3 update after playing ``arms`` and seeing ``losses`` in [0, 1]; returns the new ``R``.

    ``lhat(a) = l 1[a = I_t] / (p(a) + gamma)``; ``R[a] += <p, lhat> - lhat(a)`` for awake ``a``.
    """
    runs = regret.shape[0]
    idx = np.arange(runs)
    lhat = np.zeros_like(regret)
    lhat[idx, arms] = losses / (p[idx, arms] + gamma)
    learner = p[idx, arms] * lhat[idx, arms]
    return regret + np.where(awake, learner[:, None] - lhat, 0.0)
