"""KL-regularized UCB (contextual bandits) and KL-regularized LSVI-UCB (episodic MDPs), vectorised.

Zhao, Ye, Xiong, Gu & Zhang, "Logarithmic Regret for Online KL-Regularized Reinforcement
Learning", ICML 2025 (PMLR 267:77864-77884; arXiv 2502.07460).

Objective (contextual bandit): ``Q(pi) = E_x[ E_{a~pi} R*(x, a) - KL(pi(.|x) || pi0(.|x)) / eta ]``,
maximised by ``pi*(a|x) ∝ pi0(a|x) exp(eta R*(x, a))``; regret ``sum_t Q(pi*) - Q(pi_t)``. For a
softmax policy ``Q(pi*) - Q(pi) = E_x KL(pi || pi*) / eta`` (``policy_regret`` computes the general
form, which also scores deterministic policies).

Algorithm 1 (KL-regularized UCB), linear reward class ``R(x, a) = <theta, phi(x, a)>``
(``run_bandit`` with ``method="kl-ucb"``): ridge least squares ``theta_hat_t = Sigma_t^-1 sum phi_i
r_i`` with ``Sigma_t = lambda I + sum phi_i phi_i^T``, bonus ``b_t = min{1, beta_T ||phi||_{Sigma_t^-1}}``
(the elliptical uncertainty of the linear class), policy ``pi_t ∝ pi0 exp(eta (R_hat + b_t))``.
Baselines on the same data and objective: ``"kl-greedy"`` (the same without the bonus),
``"linucb"`` (argmax of ``R_hat + b``, no regularization) and ``"lin-ts"`` (argmax of a Thompson
sample ``theta ~ N(theta_hat, beta_T^2 Sigma^-1)``).

Algorithm 2 (KL-regularized LSVI with UCB), tabular features (``run_mdp``): backward over
``h = H..1``, ``f_h = (sum of r + V_{h+1}(s')) / (n + lambda)`` (ridge with one-hot features),
``Q_h = min{H - h + 1, f_h + min{H - h + 1, beta / sqrt(n + lambda)}}``, ``pi_h ∝ pi0 exp(eta Q_h)``
and the soft value ``V_h = log sum_a pi0 exp(eta Q_h) / eta``.

Assumed (the full text was not reachable; the research notes give Algorithm 1 and 2 from reviews
and digests): the linear instance of the paper's general uncertainty ``U`` is
``||phi||_{Sigma^-1}``; ``beta_T`` is the OFUL radius ``sigma sqrt(d log(1 + T/(lambda d)) +
2 log(1/delta)) + sqrt(lambda) B`` with ``sigma = 1/2`` (rewards in [0, 1]) times ``bonus_scale``;
``R_hat + b`` is not clipped in the bandit; in the MDP the bonus is capped and ``Q_h`` clipped at
``H - h + 1`` and ``beta = H sqrt(log(2 S A H T / delta) / 2)`` (Hoeffding) times ``bonus_scale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BANDIT_METHODS",
    "MDP_METHODS",
    "LinearBandit",
    "TabularMDP",
    "KLConfig",
    "softmax_policy",
    "soft_value",
    "policy_regret",
    "confidence_radius",
    "run_bandit",
    "run_bandit_loop",
    "run_mdp",
    "KLUCB",
]

BANDIT_METHODS = ("kl-ucb", "kl-greedy", "linucb", "lin-ts")
MDP_METHODS = ("kl-lsvi-ucb", "kl-lsvi-greedy")


def _dirichlet_reference(rng, shape, mix):
    p = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])
    return (1 - mix) * p + mix / shape[-1]


class LinearBandit:
    """A linear contextual bandit with Bernoulli rewards and a reference policy.

    ``phi(x, a) = (psi(x, a) / 2, 1/2)`` with ``||psi|| <= 1`` and ``theta* = (u, 1)`` with
    ``||u|| <= 1``, so ``R*(x, a) = (1 + <u, psi>) / 2`` lies in [0, 1], ``||phi|| <= 1`` and
    ``||theta*|| <= sqrt(2)``. Contexts are uniform over ``n_contexts``.

    ``reference="mixed"``: ``pi0`` is a Dirichlet(1) draw mixed half-half with uniform (every action
    has probability >= 1/(2K): the reference policy covers the feature space).
    ``reference="low-coverage"``: one *rare* action per context is the only one with a component
    (``rho = 0.9``) along the last direction of ``psi``, ``u`` weighs that direction by 0.9 (so the
    rare action is the optimal one in every context, by a gap >= 0.09), and ``pi0`` gives it
    probability ``coverage``: the reference policy's feature covariance has an eigenvalue of order
    ``coverage`` along the direction that decides the optimum. This is the case the paper's
    "no coverage assumption" is about (greedy sampling from ``pi0 exp(eta R_hat)`` hardly ever
    plays the rare action). Assumed: our own instances (the paper has no experiments).
    """

    REFERENCES = ("mixed", "low-coverage")

    def __init__(self, n_actions: int = 8, dim: int = 6, n_contexts: int = 16, *, instance_seed: int = 0,
                 reference: str = "mixed", coverage: float = 1e-3):
        if n_actions < 2:
            raise ValueError(f"n_actions (K) must be >= 2, got {n_actions}")
        if dim < 2 or (reference == "low-coverage" and dim < 3):
            raise ValueError(f"dim must be >= 2 (>= 3 for low-coverage; one feature is the constant), got {dim}")
        if n_contexts < 1:
            raise ValueError(f"n_contexts must be >= 1, got {n_contexts}")
        if reference not in self.REFERENCES:
            raise ValueError(f"reference must be one of {self.REFERENCES}, got {reference!r}")
        if not 0 < coverage < 1 / n_actions:
            raise ValueError(f"coverage (pi0 of the rare action) must be in (0, 1/K), got {coverage!r}")
        rng = np.random.default_rng(instance_seed)
        psi = rng.standard_normal((n_contexts, n_actions, dim - 1))
        psi *= rng.random((n_contexts, n_actions, 1)) ** (1 / (dim - 1)) / np.linalg.norm(psi, axis=2, keepdims=True)
        u = rng.standard_normal(dim - 1)
        u /= np.linalg.norm(u)
        self.rare = None
        if reference == "low-coverage":
            rho = 0.9
            rare = rng.integers(n_actions, size=n_contexts)
            psi[..., -1] = 0.0
            psi[..., :-1] /= np.maximum(1.0, np.linalg.norm(psi[..., :-1], axis=2, keepdims=True))
            xs = np.arange(n_contexts)
            psi[xs, rare, :-1] *= math.sqrt(1 - rho ** 2)
            psi[xs, rare, -1] = rho
            u[-1] = 0.0
            u *= math.sqrt(1 - rho ** 2) / np.linalg.norm(u)
            u[-1] = rho
            self.rare = rare
        self.phi = np.concatenate([psi / 2, np.full((n_contexts, n_actions, 1), 0.5)], axis=2)
        self.theta = np.concatenate([u, [1.0]])
        self.mean = self.phi @ self.theta                              # (X, K)
        self.pi0 = _dirichlet_reference(rng, (n_contexts, n_actions), 0.5)
        if reference == "low-coverage":
            p = self.pi0.copy()
            p[xs, rare] = 0.0
            p *= (1 - coverage) / p.sum(axis=1, keepdims=True)
            p[xs, rare] = coverage
            self.pi0 = p
        self.reference, self.coverage = reference, float(coverage)
        self.n_actions, self.dim, self.n_contexts = n_actions, dim, n_contexts
        self.theta_bound = float(np.linalg.norm(self.theta))

    def coverage_stats(self, eta: float) -> dict:
        """How well ``pi0`` covers the problem: the smallest eigenvalue of ``E_{x, a~pi0} phi phi^T``,
        the smallest ``pi0`` of an optimal action, and ``max pi*/pi0`` at ``eta``."""
        cov = np.einsum("xk,xkd,xke->de", self.pi0, self.phi, self.phi) / self.n_contexts
        best = self.mean.argmax(axis=1)
        pi_star = softmax_policy(self.pi0, self.mean, eta)
        return {"min_eig_pi0_feature_cov": float(np.linalg.eigvalsh(cov)[0]),
                "min_pi0_of_best_action": float(self.pi0[np.arange(self.n_contexts), best].min()),
                "max_pi_star_over_pi0": float((pi_star / self.pi0).max()),
                "mean_pi_star_of_best_action": float(pi_star[np.arange(self.n_contexts), best].mean())}


class TabularMDP:
    """An episodic MDP with ``S`` states, ``A`` actions, horizon ``H``, Bernoulli rewards, start state 0.

    Transitions ``P_h(.|s, a)`` are Dirichlet(0.5) draws, mean rewards uniform on [0, 1], ``pi0``
    a Dirichlet(1) draw mixed half-half with uniform (``reference="mixed"``). With
    ``reference="low-coverage"`` one rare action per ``(h, s)`` has mean reward 1, the others
    uniform on [0, 0.6], and ``pi0`` gives the rare action probability ``coverage``. Assumed: our
    own instances.
    """

    def __init__(self, n_states: int = 5, n_actions: int = 3, horizon: int = 4, *, instance_seed: int = 0,
                 reference: str = "mixed", coverage: float = 1e-3):
        if n_states < 1 or n_actions < 2 or horizon < 1:
            raise ValueError(f"need n_states >= 1, n_actions (K) >= 2, horizon >= 1, got {n_states}, {n_actions}, {horizon}")
        if reference not in LinearBandit.REFERENCES:
            raise ValueError(f"reference must be one of {LinearBandit.REFERENCES}, got {reference!r}")
        if not 0 < coverage < 1 / n_actions:
            raise ValueError(f"coverage (pi0 of the rare action) must be in (0, 1/K), got {coverage!r}")
        rng = np.random.default_rng(instance_seed)
        S, A, H = n_states, n_actions, horizon
        self.P = rng.dirichlet(np.full(S, 0.5), size=(H, S, A))           # (H, S, A, S)
        self.r = rng.random((H, S, A))
        self.pi0 = _dirichlet_reference(rng, (H, S, A), 0.5)
        if reference == "low-coverage":
            rare = rng.integers(A, size=(H, S))
            onehot = np.arange(A)[None, None] == rare[..., None]
            self.r = np.where(onehot, 1.0, 0.6 * self.r)
            p = np.where(onehot, 0.0, self.pi0)
            self.pi0 = np.where(onehot, coverage, p * (1 - coverage) / p.sum(axis=2, keepdims=True))
        self.reference, self.coverage = reference, float(coverage)
        self.n_states, self.n_actions, self.horizon = S, A, H

    def soft_optimal(self, eta: float) -> tuple[np.ndarray, np.ndarray]:
        """``(V*, pi*)`` of the KL-regularized objective by backward soft Bellman recursion."""
        H, S = self.horizon, self.n_states
        V = np.zeros((H + 1, S))
        pi = np.zeros_like(self.pi0)
        for h in range(H - 1, -1, -1):
            Q = self.r[h] + self.P[h] @ V[h + 1]
            pi[h] = softmax_policy(self.pi0[h], Q, eta)
            V[h] = soft_value(self.pi0[h], Q, eta)
        return V, pi

    def policy_value(self, pi: np.ndarray, eta: float) -> np.ndarray:
        """Regularized value ``V^pi_1(s_1)`` of policies ``pi`` ``(R, H, S, A)``: ``(R,)``."""
        H = self.horizon
        V = np.zeros(pi.shape[0:1] + (self.n_states,))
        for h in range(H - 1, -1, -1):
            Q = self.r[h][None] + np.einsum("sat,rt->rsa", self.P[h], V)
            p = pi[:, h]
            kl = np.sum(np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(self.pi0[h][None])), 0.0), axis=2)
            V = np.sum(p * Q, axis=2) - kl / eta
        return V[:, 0]


@dataclass(frozen=True)
class KLConfig:
    """Settings of a KL-regularized learner.

    Attributes:
        method: one of ``BANDIT_METHODS`` (``run_bandit``) or ``MDP_METHODS`` (``run_mdp``).
        eta: inverse regularization strength (> 0); larger means a weaker KL penalty.
        rounds: ``T`` rounds (bandit) or episodes (MDP), >= 1.
        ridge: ``lambda`` of the ridge regression (> 0).
        delta: confidence level of ``beta`` (in (0, 1)).
        bonus_scale: multiplies ``beta`` (>= 0); 1 is the stated radius.
        checkpoints: how many log-spaced rounds the cumulative regret is recorded at.
    """

    method: str = "kl-ucb"
    eta: float = 5.0
    rounds: int = 1000
    ridge: float = 1.0
    delta: float = 0.01
    bonus_scale: float = 1.0
    checkpoints: int = 20

    def __post_init__(self):
        if self.method not in BANDIT_METHODS + MDP_METHODS:
            raise ValueError(f"method must be one of {BANDIT_METHODS + MDP_METHODS}, got {self.method!r}")
        if not np.isfinite(self.eta) or self.eta <= 0:
            raise ValueError(f"eta must be a finite number > 0, got {self.eta!r}")
        if not isinstance(self.rounds, (int, np.integer)) or self.rounds < 1:
            raise ValueError(f"rounds (horizon T) must be an integer >= 1, got {self.rounds!r}")
        if not self.ridge > 0:
            raise ValueError(f"ridge (lambda) must be > 0, got {self.ridge!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        if not self.bonus_scale >= 0:
            raise ValueError(f"bonus_scale must be >= 0, got {self.bonus_scale!r}")
        if self.checkpoints < 1:
            raise ValueError(f"checkpoints must be >= 1, got {self.checkpoints!r}")


def softmax_policy(pi0: np.ndarray, values: np.ndarray, eta: float) -> np.ndarray:
    """``pi ∝ pi0 exp(eta values)`` along the last axis (shapes broadcast)."""
    z = np.log(pi0) + eta * values
    z = z - z.max(axis=-1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=-1, keepdims=True)


def soft_value(pi0: np.ndarray, values: np.ndarray, eta: float) -> np.ndarray:
    """``log(sum_a pi0 exp(eta values)) / eta`` = ``max_pi E_pi values - KL(pi || pi0) / eta``."""
    z = np.log(pi0) + eta * values
    top = z.max(axis=-1)
    return (top + np.log(np.sum(np.exp(z - top[..., None]), axis=-1))) / eta


def policy_regret(env: LinearBandit, pi: np.ndarray, eta: float) -> np.ndarray:
    """``Q(pi*) - Q(pi)`` for policies ``pi`` ``(R, X, K)`` over uniform contexts: ``(R,)``."""
    v_star = soft_value(env.pi0, env.mean, eta)                                 # (X,)
    safe = np.where(pi > 0, pi, 1.0)
    kl = np.sum(np.where(pi > 0, pi * (np.log(safe) - np.log(env.pi0)[None]), 0.0), axis=2)
    q = np.sum(pi * env.mean[None], axis=2) - kl / eta
    return np.mean(v_star[None] - q, axis=1)


def confidence_radius(env: LinearBandit, config: KLConfig) -> float:
    """Assumed OFUL radius ``beta_T`` (see the module docstring), times ``bonus_scale``."""
    d, T, lam = env.dim, int(config.rounds), config.ridge
    beta = 0.5 * math.sqrt(d * math.log(1 + T / (lam * d)) + 2 * math.log(1 / config.delta))
    return config.bonus_scale * (beta + math.sqrt(lam) * env.theta_bound)


def _checkpoints(T: int, count: int) -> np.ndarray:
    """Log-spaced rounds, always including ``T/16``, ``T/4``, ``T/2`` and ``T`` (for growth ratios)."""
    marks = np.geomspace(1, T, count).round().astype(int)
    return np.unique(np.concatenate([marks, [max(1, T // 16), max(1, T // 4), max(1, T // 2), T]]))


def _bandit_policy(method, env, theta_hat, sigma_inv, beta, eta, rng):
    """Every run's policy over all contexts, ``(R, X, K)``, from its current estimate."""
    phi = env.phi
    mean = np.einsum("xkd,rd->rxk", phi, theta_hat)
    if method == "kl-greedy":
        return softmax_policy(env.pi0[None], mean, eta)
    if method == "lin-ts":
        chol = np.linalg.cholesky(sigma_inv)
        sample = theta_hat + beta * np.einsum("rij,rj->ri", chol, rng.standard_normal(theta_hat.shape))
        scores = np.einsum("xkd,rd->rxk", phi, sample)
    else:
        width = np.sqrt(np.maximum(np.einsum("xkd,rde,xke->rxk", phi, sigma_inv, phi), 0.0))
        scores = mean + np.minimum(1.0, beta * width) if method == "kl-ucb" else mean + beta * width
        if method == "kl-ucb":
            return softmax_policy(env.pi0[None], scores, eta)
    best = scores.argmax(axis=2)
    return (np.arange(env.n_actions)[None, None] == best[..., None]).astype(float)


def run_bandit(env: LinearBandit, config: KLConfig, runs: int, seed: int | np.random.Generator) -> dict:
    """``runs`` independent learners on ``env``, advanced together; cumulative regret at checkpoints.

    Returns:
        ``{"rounds": (C,), "regret": (R, C) cumulative KL-regularized regret, "final": (R,),
        "regret_unreg": (R, C) cumulative unregularized regret sum_t E_x[max_a R* - E_{pi_t} R*],
        "final_unreg": (R,)}``.
    """
    if config.method not in BANDIT_METHODS:
        raise ValueError(f"method must be one of {BANDIT_METHODS} for run_bandit, got {config.method!r}")
    if not isinstance(runs, (int, np.integer)) or runs < 1:
        raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    d, T, eta = env.dim, int(config.rounds), float(config.eta)
    beta = confidence_radius(env, config)
    sigma_inv = np.tile(np.eye(d) / config.ridge, (runs, 1, 1))
    b = np.zeros((runs, d))
    idx = np.arange(runs)
    marks = _checkpoints(T, config.checkpoints)
    out = np.zeros((runs, marks.size))
    out_unreg = np.zeros((runs, marks.size))
    cum = np.zeros(runs)
    cum_unreg = np.zeros(runs)
    best = env.mean.max(axis=1)
    c = 0
    for t in range(T):
        theta_hat = np.einsum("rij,rj->ri", sigma_inv, b)
        pi = _bandit_policy(config.method, env, theta_hat, sigma_inv, beta, eta, rng)
        cum += policy_regret(env, pi, eta)
        cum_unreg += np.mean(best[None] - np.sum(pi * env.mean[None], axis=2), axis=1)
        x = rng.integers(env.n_contexts, size=runs)
        p = pi[idx, x]
        cdf = np.cumsum(p, axis=1)
        a = np.minimum((cdf < rng.random(runs)[:, None] * cdf[:, -1:]).sum(axis=1), env.n_actions - 1)
        r = (rng.random(runs) < env.mean[x, a]).astype(float)
        f = env.phi[x, a]                                                       # (R, d)
        sf = np.einsum("rij,rj->ri", sigma_inv, f)
        sigma_inv = sigma_inv - sf[:, :, None] * sf[:, None, :] / (1.0 + np.sum(f * sf, axis=1))[:, None, None]
        b += r[:, None] * f
        if c < marks.size and t + 1 == marks[c]:
            out[:, c] = cum
            out_unreg[:, c] = cum_unreg
            c += 1
    return {"rounds": marks, "regret": out, "final": cum.copy(), "regret_unreg": out_unreg,
            "final_unreg": cum_unreg.copy()}


def run_bandit_loop(env: LinearBandit, config: KLConfig, seed: int) -> float:
    """KL-regularized UCB for ONE run with a plain per-round loop (the benchmark's reference).

    Same algorithm as ``run_bandit(method="kl-ucb")`` on one run, written round by round with
    per-context Python-level work; returns the cumulative regret.
    """
    rng = np.random.default_rng(seed)
    d, T, eta = env.dim, int(config.rounds), float(config.eta)
    beta = confidence_radius(env, config)
    sigma_inv = np.eye(d) / config.ridge
    b = np.zeros(d)
    v_star = soft_value(env.pi0, env.mean, eta)
    total = 0.0
    for _ in range(T):
        theta_hat = sigma_inv @ b
        regret = 0.0
        pis = []
        for x in range(env.n_contexts):
            phi = env.phi[x]
            width = np.sqrt(np.maximum(np.einsum("kd,de,ke->k", phi, sigma_inv, phi), 0.0))
            pi = softmax_policy(env.pi0[x], phi @ theta_hat + np.minimum(1.0, beta * width), eta)
            kl = float(np.sum(pi * (np.log(pi) - np.log(env.pi0[x]))))
            regret += v_star[x] - (float(pi @ env.mean[x]) - kl / eta)
            pis.append(pi)
        total += regret / env.n_contexts
        x = int(rng.integers(env.n_contexts))
        a = int(rng.choice(env.n_actions, p=pis[x]))
        r = float(rng.random() < env.mean[x, a])
        f = env.phi[x, a]
        sf = sigma_inv @ f
        sigma_inv = sigma_inv - np.outer(sf, sf) / (1.0 + f @ sf)
        b = b + r * f
    return total


def run_mdp(env: TabularMDP, config: KLConfig, runs: int, seed: int | np.random.Generator) -> dict:
    """KL-regularized LSVI-UCB (``"kl-lsvi-ucb"``) or its bonus-free version on a tabular MDP.

    Returns:
        ``{"rounds": (C,) episodes, "regret": (R, C) cumulative regret, "final": (R,)}``.
    """
    if config.method not in MDP_METHODS:
        raise ValueError(f"method must be one of {MDP_METHODS} for run_mdp, got {config.method!r}")
    if not isinstance(runs, (int, np.integer)) or runs < 1:
        raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    S, A, H, T, eta = env.n_states, env.n_actions, env.horizon, int(config.rounds), float(config.eta)
    beta = config.bonus_scale * H * math.sqrt(math.log(2 * S * A * H * T / config.delta) / 2)
    if config.method == "kl-lsvi-greedy":
        beta = 0.0
    V_star, _ = env.soft_optimal(eta)
    n = np.zeros((runs, H, S, A))
    rsum = np.zeros((runs, H, S, A))
    trans = np.zeros((runs, H, S, A, S))
    idx = np.arange(runs)
    marks = _checkpoints(T, config.checkpoints)
    out = np.zeros((runs, marks.size))
    cum = np.zeros(runs)
    c = 0
    for t in range(T):
        V = np.zeros((runs, S))
        pi = np.zeros((runs, H, S, A))
        for h in range(H - 1, -1, -1):
            cap = H - h
            f = (rsum[:, h] + np.einsum("rsat,rt->rsa", trans[:, h], V)) / (n[:, h] + config.ridge)
            Q = np.minimum(cap, f + np.minimum(cap, beta / np.sqrt(n[:, h] + config.ridge)))
            pi[:, h] = softmax_policy(env.pi0[h][None], Q, eta)
            V = soft_value(env.pi0[h][None], Q, eta)
        cum += V_star[0, 0] - env.policy_value(pi, eta)
        s = np.zeros(runs, dtype=int)
        for h in range(H):
            p = pi[idx, h, s]
            a = np.minimum((np.cumsum(p, 1) < rng.random(runs)[:, None]).sum(1), A - 1)
            r = (rng.random(runs) < env.r[h, s, a]).astype(float)
            cdf = np.cumsum(env.P[h, s, a], axis=1)
            s2 = np.minimum((cdf < rng.random(runs)[:, None]).sum(1), S - 1)
            n[idx, h, s, a] += 1
            rsum[idx, h, s, a] += r
            trans[idx, h, s, a, s2] += 1
            s = s2
        if c < marks.size and t + 1 == marks[c]:
            out[:, c] = cum
            c += 1
    return {"rounds": marks, "regret": out, "final": cum.copy()}


class KLUCB:
    """KL-regularized UCB (Algorithm 1, linear class) as an online learner on the user's own data.

    ``features[x, a]`` is ``phi(x, a)`` (contexts indexed ``0..X-1``; ``||phi|| <= 1`` is what the
    bonus's cap of 1 assumes), ``reference_policy[x]`` is ``pi0(.|x)``. ``act(x)`` samples an action
    from ``pi_t(.|x) ∝ pi0(.|x) exp(eta (<theta_hat, phi(x, .)> + min{1, beta ||phi(x, .)||_{Sigma^-1}}))``,
    ``update(x, a, r)`` adds the observed reward to the ridge regression (Sherman-Morrison update
    of ``Sigma^-1``). The same learner as ``run_bandit(method="kl-ucb")``, one run, round by round.

    Args:
        features: ``(X, K, d)`` array of feature vectors.
        reference_policy: ``(X, K)`` array, each row a distribution with every entry > 0.
        eta: inverse KL strength (> 0).
        beta: the bonus radius ``beta_T`` (>= 0); ``None`` uses ``confidence_radius``'s OFUL radius
            for ``horizon`` rounds with ``||theta*|| <= theta_bound``, times ``bonus_scale``.
        ridge, delta, horizon, theta_bound, bonus_scale: the radius's ingredients (as in ``KLConfig``).
        seed: seed or ``numpy.random.Generator`` of ``act``'s sampling.

    Examples:
        >>> import numpy as np
        >>> phi = np.random.default_rng(0).normal(size=(3, 4, 2)) / 2
        >>> learner = KLUCB(phi, np.full((3, 4), 0.25), eta=2.0, seed=0)
        >>> a = learner.act(1)
        >>> learner.update(1, a, 1.0)
        >>> learner.policy(1).shape
        (4,)
    """

    def __init__(self, features, reference_policy, *, eta: float = 5.0, beta: float | None = None,
                 ridge: float = 1.0, delta: float = 0.01, horizon: int = 1000, theta_bound: float = 1.0,
                 bonus_scale: float = 1.0, seed: int | np.random.Generator | None = 0):
        phi = np.asarray(features, dtype=float)
        pi0 = np.asarray(reference_policy, dtype=float)
        if phi.ndim != 3 or phi.shape[1] < 2 or phi.shape[2] < 1 or not np.all(np.isfinite(phi)):
            raise ValueError(f"features must be a finite (X, K >= 2, d) array, got shape {phi.shape}")
        if pi0.shape != phi.shape[:2] or not np.all(pi0 > 0) or not np.allclose(pi0.sum(axis=1), 1.0):
            raise ValueError(f"reference_policy must be an (X, K) = {phi.shape[:2]} array of positive rows "
                             f"summing to 1, got shape {pi0.shape}")
        if not (np.isfinite(eta) and eta > 0):
            raise ValueError(f"eta must be a finite number > 0, got {eta!r}")
        if not ridge > 0:
            raise ValueError(f"ridge (lambda) must be > 0, got {ridge!r}")
        if beta is None:
            d = phi.shape[2]
            if not 0 < delta < 1 or int(horizon) < 1 or not theta_bound >= 0 or not bonus_scale >= 0:
                raise ValueError("delta must be in (0, 1), horizon >= 1, theta_bound >= 0 and bonus_scale >= 0, got "
                                 f"{delta!r}, {horizon!r}, {theta_bound!r}, {bonus_scale!r}")
            radius = 0.5 * math.sqrt(d * math.log(1 + int(horizon) / (ridge * d)) + 2 * math.log(1 / delta))
            beta = bonus_scale * (radius + math.sqrt(ridge) * theta_bound)
        if not (np.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
        self.features, self.reference_policy = phi, pi0
        self.eta, self.beta = float(eta), float(beta)
        self.sigma_inv_ = np.eye(phi.shape[2]) / ridge
        self.b_ = np.zeros(phi.shape[2])
        self.rounds_ = 0
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def _context(self, x) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < self.features.shape[0]:
            raise ValueError(f"x must be a context index in [0, {self.features.shape[0]}), got {x!r}")
        return int(x)

    @property
    def theta_(self) -> np.ndarray:
        """The ridge estimate ``Sigma^-1 sum phi_i r_i``."""
        return self.sigma_inv_ @ self.b_

    def policy(self, x: int) -> np.ndarray:
        """``pi_t(.|x)``: the optimistic KL-regularized policy in context ``x``."""
        phi = self.features[self._context(x)]
        width = np.sqrt(np.maximum(np.einsum("kd,de,ke->k", phi, self.sigma_inv_, phi), 0.0))
        return softmax_policy(self.reference_policy[x], phi @ self.theta_ + np.minimum(1.0, self.beta * width),
                              self.eta)

    def act(self, x: int) -> int:
        """An action sampled from ``pi_t(.|x)``."""
        return int(self._rng.choice(self.features.shape[1], p=self.policy(x)))

    def update(self, x: int, a: int, r: float) -> None:
        """Add the reward ``r`` of action ``a`` in context ``x`` to the ridge regression."""
        x = self._context(x)
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 0 <= a < self.features.shape[1]:
            raise ValueError(f"a must be an action index in [0, {self.features.shape[1]}), got {a!r}")
        if not np.isfinite(r):
            raise ValueError(f"r must be a finite reward, got {r!r}")
        f = self.features[x, a]
        sf = self.sigma_inv_ @ f
        self.sigma_inv_ = self.sigma_inv_ - np.outer(sf, sf) / (1.0 + f @ sf)
        self.b_ = self.b_ + float(r) * f
        self.rounds_ += 1
