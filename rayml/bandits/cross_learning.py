"""Cross-learning contextual bandits with an unknown context distribution, vectorised over runs.

Paper: Huang & Huang, "High Probability Bound for Cross-Learning Contextual Bandits with Unknown
Context Distributions", ICML 2025 (PMLR 267:25329-25355; arXiv 2410.04080). It proves that the
algorithm of Schneider & Zimmert, "Optimal cross-learning for contextual bandits with unknown
context distributions", NeurIPS 2023 (arXiv 2401.01857), has regret O~(sqrt(K T log(1/delta)))
with probability 1 - delta against any fixed policy, independent of the number of contexts.
Huang & Huang do not change the algorithm, so this module implements Schneider & Zimmert's.

Setting. ``C`` contexts drawn i.i.d. from an unknown ``nu``; ``K`` actions; an oblivious adversary
fixes losses ``l_t(c, a)`` in [0, 1]. Each round the learner sees ``c_t``, plays ``A_t`` and then
observes ``l_t(c, A_t)`` for EVERY context ``c`` (cross-learning, Balseiro et al. 2019).

Learners (all are exponential weights per context, ``pi_t(a | c) ~ exp(-eta Lhat_t(c, a))``):

* ``"cross-learning"`` (Schneider & Zimmert, Algorithm 1 as reconstructed here): rounds are cut
  into epochs of ``L`` rounds. The marginal ``f_t(a) = E_{c ~ nu} pi_t(a | c)`` is estimated
  with the contexts of the PREVIOUS epoch, ``fhat_t(a) = (1/L) sum_{s in epoch e-1} pi_t(a | c_s)``,
  evaluated at the current policy, and the cross-learned estimate for every context is
  ``lhat_t(c, a) = l_t(c, a) 1[A_t = a] / (fhat_t(a) + gamma)``.
* ``"known-distribution"`` (Balseiro et al. 2019, EXP3 with cross-learning, ``nu`` known): the
  same update with the exact ``f_t(a)`` and no ``gamma``.
* ``"assumed-uniform-nu"`` (a control, not from either paper): Balseiro et al.'s learner when ``nu`` is
  NOT known and the user plugs in the uniform distribution over contexts: the same update with
  ``sum_c (1 / C) pi_t(a | c)`` in place of ``f_t(a)``. It equals ``"known-distribution"`` when ``nu`` is
  uniform; on a skewed ``nu`` its denominator is wrong, so it is the learner that needs ``nu`` run
  without it (session 8).
* ``"propensity-weighted"`` (a control, not from either paper; the outside review's "simplest
  cross-learner"): exponential weights over cross-learned losses whose importance weight is the
  played context's own propensity, ``lhat_t(c, a) = l_t(c, a) 1[A_t = a] / (pi_t(a | c_t) +
  gamma)`` for every context ``c``. Unbiased up to ``gamma`` (``A_t`` is drawn from
  ``pi_t(. | c_t)``), with no epochs and no marginal; its variance grows where ``pi_t(a | c_t)`` is
  much smaller than the marginal ``f_t(a)`` (contexts whose policies differ), which is what
  Schneider & Zimmert's estimate of ``f_t`` avoids.
* ``"per-context-exp3"``: one independent EXP3 per context using only its own feedback
  ``l_t(c_t, A_t) 1[A_t = a] / pi_t(a | c_t)``; its regret grows like ``sqrt(C K T)``.
* ``"uniform"``: plays uniformly over the context's allowed actions and learns nothing (the trivial
  control of the rate and tail claims: its regret grows linearly in ``T``).
* ``"greedy"`` (a control, not from either paper; session 9, after the session-8 end review): no exploration,
  per context the action with the smallest empirical MEAN of the losses observed so far (cross-learned: a
  played action's loss is observed in every context where it is allowed, and counted there), actions never
  observed in the context first, ties to the lowest index.
* ``"follow-the-leader"`` (a control, not from either paper; session 9): no exploration, per context the
  action with the smallest CUMULATIVE observed (cross-learned, not importance-weighted) loss, ties to the
  lowest index. Against the classic alternating losses ``(1, 0), (0, 1), ...`` it pays 1 every round.
* ``"explore-then-commit"`` (a control, not from either paper; session 10, the session-9 end review R3): uniform play
  over the context's allowed actions for the first ``explore T`` rounds (``t < explore T``), then greedy on the
  cross-learned empirical means as above; it keeps observing (and counting) after the commit. Its regret is linear
  in ``T`` (the exploration share's cost).
* ``"epsilon-greedy"`` (a control; session 10, R3): each round, with probability ``explore`` (a coin from a
  second uniform stream) uniform play over the allowed actions, else greedy on the cross-learned empirical means;
  linear regret (``explore`` x the uniform gap).
* ``"discounted-epsilon-greedy"`` (a control; session 10, R3): epsilon-greedy on discounted means, the observation
  of round ``s`` weighted ``discount^(t - s)`` in the sums and in the counts (a tracking learner with no regret
  guarantee; it re-learns a switch in about ``1 / (1 - discount)`` rounds).
* ``"oracle"``: plays the comparator policy; its regret is exactly zero.

Any cross-learning learner can also run at the slower rate ``eta ~ T^(-2/3)`` (``default_config``'s
``rate_exponent = 2/3``, anchored to the stated rate at ``anchor_horizon``): the classic schedule of a
``T^(2/3)`` regret bound, the control that a test of the ``sqrt(T)`` rate must reject (not from
either paper).

Regret (what the high-probability bound is about): for the fixed comparator policy
``pi*(c) = argmin_a sum_t l_t(c, a)`` (the best policy in expectation over contexts),
``Reg_T = sum_t l_t(c_t, A_t) - l_t(c_t, pi*(c_t))`` on the realised contexts and actions.
``simulate(..., phases=[s_1, ...])`` also returns the regret against the per-phase comparator
``pi*_j(c) = argmin_a sum_{t in phase j} l_t(c, a)`` (phases cut at rounds ``s_1 < s_2 < ...``;
``CrossLearningEnv.phase_comparator``): a switching comparator, stronger than the papers' best fixed
policy (its regret is never smaller in expectation over contexts), session 10.

Assumed (the full texts of both papers were not reachable here; the structure above comes from
the abstracts - "epochs scheduled so that the estimation of the unknown distribution is
decorrelated from the actions played", "weak dependency between different epochs" - and a
reviewer's summary "use one step to estimate the distribution of the context"):
the reference sample of epoch ``e`` is exactly the contexts of epoch ``e - 1``; the first epoch
plays the initial (uniform) policy, collects contexts and makes no update; the denominator is
``fhat + gamma`` (implicit exploration); defaults ``eta = sqrt(ln K / (K T))``,
``gamma = eta / 2`` and ``L = ceil(sqrt(K T))``. Per-context EXP3 uses the anytime rate
``eta_c = sqrt(ln K / (K n_c))`` with ``n_c`` the visits of ``c`` so far.

Examples:
    >>> from rayml.bandits.cross_learning import first_price_auction, simulate
    >>> env = first_price_auction(n_values=8, n_bids=6, horizon=500, seed=0)
    >>> res = simulate(env, "cross-learning", runs=4, seed=1)
    >>> res.regret.shape
    (4,)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "METHODS",
    "CrossLearningEnv",
    "LearnerConfig",
    "SimulationResult",
    "first_price_auction",
    "sleeping_bandit",
    "contextual_best_arm",
    "skewed_contexts",
    "switching_best_arm",
    "alternating_switch",
    "default_config",
    "exp_weights",
    "estimated_marginal",
    "cross_learned_update",
    "simulate",
    "CrossLearner",
]

METHODS = ("cross-learning", "known-distribution", "assumed-uniform-nu", "propensity-weighted", "per-context-exp3",
           "uniform", "greedy", "follow-the-leader", "explore-then-commit", "epsilon-greedy",
           "discounted-epsilon-greedy", "oracle")
GREEDY_LIKE = ("greedy", "follow-the-leader", "explore-then-commit", "epsilon-greedy", "discounted-epsilon-greedy")
# session 10 (R3's values): the exploration share / probability and the discount of the controls when not given
DEFAULT_EXPLORE = {"explore-then-commit": 0.02, "epsilon-greedy": 0.01, "discounted-epsilon-greedy": 0.1}
DEFAULT_DISCOUNT = 0.99


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class CrossLearningEnv:
    """An oblivious cross-learning environment with ``C`` contexts and ``K`` actions.

    The round-``t`` loss table is ``base[kind_index[t]] + slope * indicator`` (see the builders);
    stored here generically as ``tables`` and a per-round index so that long horizons stay small.

    Attributes:
        name: a label.
        context_probs: ``nu``, shape ``(C,)``, sums to 1.
        allowed: ``(C, K)`` bool, the actions playable in each context (all True except sleeping).
        tables: ``(M, C, K)`` distinct loss tables, values in [0, 1].
        schedule: ``(T,)`` int, the table used in round ``t``.
    """

    name: str
    context_probs: np.ndarray
    allowed: np.ndarray
    tables: np.ndarray
    schedule: np.ndarray
    info: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        p = np.asarray(self.context_probs, dtype=float)
        if p.ndim != 1 or p.size < 1 or np.any(p < 0) or not np.isclose(p.sum(), 1.0):
            raise ValueError("context_probs must be a 1-d probability vector")
        allowed = np.asarray(self.allowed, dtype=bool)
        tables = np.asarray(self.tables, dtype=float)
        if allowed.shape != (p.size, allowed.shape[-1]) or allowed.ndim != 2:
            raise ValueError(f"allowed must have shape (C, K) = ({p.size}, K), got {allowed.shape}")
        if allowed.shape[1] < 2:
            raise ValueError(f"the number of actions K must be >= 2, got {allowed.shape[1]}")
        if not allowed.any(axis=1).all():
            raise ValueError("allowed: every context needs at least one allowed action")
        if tables.ndim != 3 or tables.shape[1:] != allowed.shape:
            raise ValueError(f"tables must have shape (M, C, K) with (C, K) = {allowed.shape}, got {tables.shape}")
        if np.any(tables < 0) or np.any(tables > 1):
            raise ValueError("tables: losses must lie in [0, 1]")
        sched = np.asarray(self.schedule)
        if sched.ndim != 1 or sched.size < 1 or sched.min() < 0 or sched.max() >= tables.shape[0]:
            raise ValueError("schedule must be a non-empty 1-d array of indices into tables (horizon >= 1)")
        object.__setattr__(self, "context_probs", p / p.sum())
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "schedule", sched.astype(np.int64))

    @property
    def n_contexts(self) -> int:
        return int(self.context_probs.size)

    @property
    def n_actions(self) -> int:
        return int(self.allowed.shape[1])

    @property
    def horizon(self) -> int:
        return int(self.schedule.size)

    def total_losses(self) -> np.ndarray:
        """``sum_t l_t(c, a)``, shape ``(C, K)``."""
        counts = np.bincount(self.schedule, minlength=self.tables.shape[0]).astype(float)
        return np.einsum("m,mck->ck", counts, self.tables)

    def comparator(self) -> np.ndarray:
        """``pi*(c) = argmin_{a allowed} sum_t l_t(c, a)``, shape ``(C,)``."""
        tot = np.where(self.allowed, self.total_losses(), np.inf)
        return np.argmin(tot, axis=1)

    def phase_comparator(self, starts) -> np.ndarray:
        """The per-phase comparator: ``pi*_j(c) = argmin_{a allowed} sum_{t in phase j} l_t(c, a)``, shape
        ``(P, C)``, phases cut at the rounds ``starts`` (strictly increasing, in ``(0, T)``; phase 0 starts at 0)."""
        cuts = _phase_starts(starts, self.horizon)
        bounds = [0, *cuts, self.horizon]
        out = np.zeros((len(bounds) - 1, self.n_contexts), dtype=np.int64)
        for j in range(len(bounds) - 1):
            counts = np.bincount(self.schedule[bounds[j]:bounds[j + 1]], minlength=self.tables.shape[0]).astype(float)
            tot = np.where(self.allowed, np.einsum("m,mck->ck", counts, self.tables), np.inf)
            out[j] = np.argmin(tot, axis=1)
        return out


def _phase_starts(starts, horizon: int) -> list[int]:
    cuts = [int(s) for s in np.atleast_1d(np.asarray(starts))]
    if any(not 0 < s < horizon for s in cuts) or any(b <= a for a, b in zip(cuts, cuts[1:])):
        raise ValueError(f"phase starts must be strictly increasing rounds in (0, {horizon}), got {starts!r}")
    return cuts


def first_price_auction(n_values: int, n_bids: int, horizon: int, seed: int, *, levels: int = 64) -> CrossLearningEnv:
    """Learning to bid in a repeated first-price auction (context = private value, action = bid).

    Values ``v_c = (c + 1) / C`` with ``nu(v)`` proportional to a discretised bump around 0.6;
    bids ``b_a = a / K``, and only bids ``b <= v`` are allowed (overbidding is dominated). The
    adversary's highest competing bid ``m_t`` is drawn once from ``seed`` (oblivious): uniform on
    [0.1, 0.5] in the first half, on [0.3, 0.7] in the second, rounded up to ``levels`` levels.
    Utility ``(v - b) 1[b >= m_t]`` in [0, 1], loss ``1 - utility``. Cross-learning: once the
    outcome ``1[b >= m_t]`` of the bid is known, its loss is known for every value.
    """
    C = _check_int("n_values", n_values, 1)
    K = _check_int("n_bids", n_bids, 2)
    T = _check_int("horizon", horizon, 1)
    rng = np.random.default_rng(seed)
    values = np.arange(1, C + 1) / C
    bids = np.arange(K) / K
    nu = np.exp(-(((values - 0.6) / 0.3) ** 2))
    nu = nu / nu.sum()
    first = rng.uniform(0.1, 0.5, T // 2)
    second = rng.uniform(0.3, 0.7, T - T // 2)
    m = np.concatenate([first, second])
    grid = np.linspace(0.0, 1.0, levels + 1)
    idx = np.clip(np.searchsorted(grid, m), 0, levels)
    win = bids[None, :] >= grid[:, None]  # (levels + 1, K)
    allowed = bids[None, :] <= values[:, None] + 1e-12
    tables = 1.0 - np.clip(values[None, :, None] - bids[None, None, :], 0.0, 1.0) * win[:, None, :]
    return CrossLearningEnv(name=f"auction-C{C}", context_probs=nu, allowed=allowed,
                            tables=tables, schedule=idx, info={"values": values, "bids": bids})


def sleeping_bandit(n_arms: int, horizon: int, seed: int, *, p_available=None) -> CrossLearningEnv:
    """Sleeping bandit with stochastic availability (context = the set of awake arms).

    Each arm is awake independently with probability ``p_available[a]`` (default ``linspace(0.35,
    0.9)``); an empty draw counts as "all awake". The ``2^K - 1`` non-empty sets are the contexts
    and ``nu`` is computed exactly. Losses ``l_t(a)`` are Bernoulli draws fixed once from ``seed``
    (oblivious), with means ``linspace(0.2, 0.8, K)`` in a random order fixed by ``seed``. The loss of arm ``a`` is the same
    in every context where ``a`` is awake, so playing it reveals it for all those contexts.
    """
    K = _check_int("n_arms", n_arms, 2)
    T = _check_int("horizon", horizon, 1)
    if K > 12:
        raise ValueError(f"n_arms must be <= 12 (2^K contexts are enumerated), got {K}")
    p = np.linspace(0.35, 0.9, K) if p_available is None else np.asarray(p_available, dtype=float)
    if p.shape != (K,) or np.any(p <= 0) or np.any(p > 1):
        raise ValueError(f"p_available must have shape ({K},) with values in (0, 1], got {p!r}")
    masks = ((np.arange(1, 2**K)[:, None] >> np.arange(K)[None, :]) & 1).astype(bool)  # (C, K)
    nu = np.prod(np.where(masks, p, 1 - p), axis=1)
    nu[-1] += np.prod(1 - p)  # the empty set counts as all awake
    rng = np.random.default_rng(seed)
    means = np.linspace(0.2, 0.8, K)
    mu = rng.permutation(means)[None, :]
    losses = (rng.random((T, K)) < mu).astype(float)  # (T, K) in {0, 1}
    codes = losses @ (2 ** np.arange(K))  # each round's loss vector is one of 2^K patterns
    patterns = ((np.arange(2**K)[:, None] >> np.arange(K)[None, :]) & 1).astype(float)
    tables = np.where(masks[None], patterns[:, None, :], 1.0)
    return CrossLearningEnv(name=f"sleeping-K{K}", context_probs=nu, allowed=masks,
                            tables=tables, schedule=codes.astype(np.int64), info={"p_available": p})


def _check_sizes(n_contexts, n_actions, horizon, levels, *, min_contexts: int = 1) -> tuple[int, int, int, int]:
    return (_check_int("n_contexts", n_contexts, min_contexts), _check_int("n_actions", n_actions, 2),
            _check_int("horizon", horizon, 1), _check_int("levels", levels, 2))


def _level_tables(mus: np.ndarray, levels: int) -> np.ndarray:
    """Loss tables ``1[level_g(a) < mu_p(c, a)]`` for every phase ``p`` and level pattern ``g`` (one level per
    action, ``levels`` equally spaced points in (0, 1)): shape ``(P * levels^K, C, K)``, phase-major."""
    K = mus.shape[-1]
    if levels ** K > 4096:
        raise ValueError(f"levels ** n_actions must be <= 4096 (loss patterns are enumerated), got {levels ** K}")
    grid = (np.arange(levels) + 0.5) / levels
    digits = (np.arange(levels ** K)[:, None] // levels ** np.arange(K)[None]) % levels   # (M, K) level index
    return np.concatenate([(grid[digits][:, None, :] < mu[None]).astype(float) for mu in mus])


def contextual_best_arm(n_contexts: int, n_actions: int, horizon: int, seed: int, *, levels: int = 4,
                        low: float = 0.2, high: float = 0.7, warmup: float = 0.0) -> CrossLearningEnv:
    """Many contexts, each with its own best action: where per-context learning cannot keep up.

    Every context ``c`` has a best action ``b(c)`` (uniform, fixed by ``seed``) with mean loss
    ``low`` and the other actions ``high``; contexts are uniform. Each round the adversary draws
    (obliviously, from ``seed``) one level ``U_t(a)`` per action from ``levels`` equally spaced
    points in (0, 1), and ``l_t(c, a) = 1[U_t(a) < mu(c, a)]``: playing ``a`` reveals its loss in
    every context (cross-learning). With ``C`` much larger than the epoch length ``sqrt(K T)``
    a context is seen a handful of times, so one EXP3 per context plays near-uniformly (regret
    about ``T (1 - 1/K) (P(high) - P(low))``), while cross-learning's regret does not depend on
    ``C``. ``warmup`` (session 8): in the first ``floor(warmup T)`` rounds every action has the same
    loss in every context, ``1[V_t < (low + high) / 2]`` (``V_t`` uniform, from ``seed`` after the levels),
    so no action is better there and any play costs exactly 0 regret: with ``warmup T >= sqrt(K T)``
    the algorithm's first epoch (uniform play, no update) costs nothing. ``warmup = 0`` is the instance of
    earlier sessions, draw for draw. Assumed: our own instance (neither paper has experiments).
    """
    C, K, T, G = _check_sizes(n_contexts, n_actions, horizon, levels)
    if not 0 <= low < high <= 1:
        raise ValueError(f"need 0 <= low < high <= 1, got low={low}, high={high}")
    if not (np.isfinite(warmup) and 0 <= warmup < 1):
        raise ValueError(f"warmup must be a fraction in [0, 1), got {warmup!r}")
    rng = np.random.default_rng(seed)
    best = rng.integers(K, size=C)
    mu = np.where(np.arange(K)[None] == best[:, None], low, high)                    # (C, K)
    tables = _level_tables(mu[None], G)
    codes = rng.integers(G, size=(T, K))
    schedule = codes @ (G ** np.arange(K))
    n_warm = int(math.floor(warmup * T))
    if n_warm:
        shared = np.stack([np.zeros((C, K)), np.ones((C, K))])                     # every action: 0, or 1
        schedule[:n_warm] = tables.shape[0] + (rng.random(n_warm) < (low + high) / 2)
        tables = np.concatenate([tables, shared])
    return CrossLearningEnv(name=f"contextual-C{C}" + (f"-warm{warmup:g}" if n_warm else ""),
                            context_probs=np.full(C, 1.0 / C), allowed=np.ones((C, K), dtype=bool), tables=tables,
                            schedule=schedule, info={"best": best, "mu": mu, "warmup_rounds": n_warm})


def skewed_contexts(n_contexts: int, n_actions: int, horizon: int, seed: int, *, frequent: float = 0.8,
                    levels: int = 4, frequent_mu: tuple = (0.05, 0.95), rare_mu: tuple = (0.3, 0.8),
                    mixed: bool = False) -> CrossLearningEnv:
    """A skewed ``nu`` (session 8): context 0 has probability ``frequent``, the ``C - 1`` rare ones share the rest.

    Action 0 is best everywhere, with mean loss ``frequent_mu[0]`` (others ``frequent_mu[1]``) in the frequent
    context and ``rare_mu[0]`` (others ``rare_mu[1]``) in the rare ones; losses ``1[U_t(a) < mu(c, a)]`` with
    one oblivious level per action and round as in ``contextual_best_arm``. The frequent context soon plays
    action 0 almost surely, so ``pi_t(a | c_t) << gamma`` for the other actions in a fraction ``frequent`` of
    the rounds. A learner whose importance weight is the played context's own propensity then sees the loss
    of an action ``a != 0`` scaled by about ``1 - frequent`` (``E[pi / (pi + gamma)]``) and that of action 0
    by about ``frequent``: with ``(1 - frequent) rare_mu[1] < rare_mu[0]`` (defaults: 0.16 < 0.3) the rare
    contexts prefer the wrong actions for ever (linear regret). Balseiro et al.'s learner with a uniform
    guess of ``nu`` over-weights the rare contexts' policies in ``f_t(0)`` and avoids action 0 there too.
    The marginal ``f_t`` (known, or estimated from past contexts as Schneider & Zimmert do) has neither
    problem. ``mixed=True`` (session 9, after the session-8 end review: with action 0 best everywhere a greedy
    learner locks on it and passes): the best action differs by context, rare context ``c`` (``j = c - 1``) has
    best action 0 for even ``j`` and ``1 + (j // 2) mod (K - 1)`` for odd ``j`` (the frequent context keeps 0);
    a context-free learner then has linear regret, and the propensity-weighted learner's bias still hits the
    rare contexts whose best action is 0. Assumed: our own instance, built for the outside review's request
    (neither paper has experiments).
    """
    C, K, T, G = _check_sizes(n_contexts, n_actions, horizon, levels, min_contexts=2)
    if not (np.isfinite(frequent) and 0 < frequent < 1):
        raise ValueError(f"frequent must be a probability in (0, 1), got {frequent!r}")
    for name, pair in (("frequent_mu", frequent_mu), ("rare_mu", rare_mu)):
        if len(pair) != 2 or not 0 <= pair[0] < pair[1] <= 1:
            raise ValueError(f"{name} must be (best, other) with 0 <= best < other <= 1, got {pair!r}")
    nu = np.r_[frequent, np.full(C - 1, (1 - frequent) / (C - 1))]
    j = np.arange(C - 1)
    best = np.r_[0, np.where(j % 2 == 0, 0, 1 + (j // 2) % (K - 1))] if mixed else np.zeros(C, dtype=np.int64)
    mu = np.where(np.arange(K)[None] == best[:, None], float(rare_mu[0]), float(rare_mu[1]))
    mu[0] = frequent_mu[1]
    mu[0, 0] = frequent_mu[0]
    rng = np.random.default_rng(seed)
    codes = rng.integers(G, size=(T, K))
    return CrossLearningEnv(name=f"skewed-C{C}" + ("-mixed" if mixed else ""), context_probs=nu,
                            allowed=np.ones((C, K), dtype=bool), tables=_level_tables(mu[None], G),
                            schedule=codes @ (G ** np.arange(K)), info={"mu": mu, "frequent": frequent, "best": best})


def switching_best_arm(n_contexts: int, n_actions: int, horizon: int, seed: int, *, switch: float = 0.3,
                       levels: int = 4) -> CrossLearningEnv:
    """An adversarial switch (session 8, the tail instance; issue 37's side experiment): in every context
    action 0 is best (mean loss 0.2, the others 0.7) until round ``floor(switch T)``, then action 1 is
    (0.05, action 0 0.95, the others 0.7); uniform contexts, one oblivious level per action and round as
    in ``contextual_best_arm``. After the switch action 1's ``f_t`` has collapsed: without implicit
    exploration (``gamma = 0``) some runs take very long to recover it (a heavy right tail of the regret),
    with it they do not. The comparator (action 1) loses to action 0 before the switch, so the regret's
    median can be negative. Assumed: our own instance."""
    C, K, T, G = _check_sizes(n_contexts, n_actions, horizon, levels)
    if not (np.isfinite(switch) and 0 < switch < 1):
        raise ValueError(f"switch must be a fraction in (0, 1), got {switch!r}")
    mu = np.full((2, C, K), 0.7)
    mu[0, :, 0] = 0.2
    mu[1, :, 0], mu[1, :, 1] = 0.95, 0.05
    rng = np.random.default_rng(seed)
    codes = rng.integers(G, size=(T, K))
    phase = (np.arange(T) >= int(math.floor(switch * T))).astype(np.int64)
    return CrossLearningEnv(name=f"switching-C{C}", context_probs=np.full(C, 1.0 / C),
                            allowed=np.ones((C, K), dtype=bool), tables=_level_tables(mu, G),
                            schedule=phase * G ** K + codes @ (G ** np.arange(K)), info={"switch": switch})


def alternating_switch(n_contexts: int, n_actions: int, horizon: int, seed: int, *, switch: float = 0.3,
                       levels: int = 4) -> CrossLearningEnv:
    """The tail instance of session 9: ``switching_best_arm``'s first phase, then the classic alternating losses.

    Before round ``floor(switch T)`` action 0 is best in every context (mean loss 0.2, the others 0.7, one
    oblivious level per action and round as in ``contextual_best_arm``); from then on action 0 always loses
    (0.95), actions 1 and 2 alternate deterministically, ``(1, 0)`` on the switch round, ``(0, 1)`` on the next,
    and so on (mean 0.5 each), and the others keep 0.7. The comparator is action 1 or 2 (whichever the first
    phase's draws favour). A learner that re-learns the switch gains at most ``0.5 switch T`` before it, but
    follow-the-leader (cumulative observed loss, ties balanced) is trapped by the alternation and pays 1 a
    round after it (regret about ``(0.5 (1 - switch) - 0.25 switch) T``); greedy stays on action 0; without
    implicit exploration the collapsed ``f_t`` of actions 1 and 2 turns one loss of 1 into a jump of
    ``1 / fhat`` (a heavy right tail). Needs ``K >= 3``. Assumed: our own instance (the session-8 end review
    found ``switching_best_arm`` passed by follow-the-leader; neither paper has experiments)."""
    C, K, T, G = _check_sizes(n_contexts, n_actions, horizon, levels)
    if K < 3:
        raise ValueError(f"n_actions must be >= 3 (actions 1 and 2 alternate), got {K}")
    if not (np.isfinite(switch) and 0 < switch < 1):
        raise ValueError(f"switch must be a fraction in (0, 1), got {switch!r}")
    mu = np.full((3, C, K), 0.7)
    mu[0, :, 0] = 0.2
    mu[1:, :, 0] = 0.95
    mu[1, :, 1], mu[1, :, 2] = 1.0, 0.0     # loss 1 / 0 at every level
    mu[2, :, 1], mu[2, :, 2] = 0.0, 1.0
    rng = np.random.default_rng(seed)
    codes = rng.integers(G, size=(T, K))
    start = int(math.floor(switch * T))
    t = np.arange(T)
    phase = np.where(t < start, 0, 1 + (t - start) % 2).astype(np.int64)
    return CrossLearningEnv(name=f"alternating-C{C}", context_probs=np.full(C, 1.0 / C),
                            allowed=np.ones((C, K), dtype=bool), tables=_level_tables(mu, G),
                            schedule=phase * G ** K + codes @ (G ** np.arange(K)), info={"switch": switch})


@dataclass(frozen=True)
class LearnerConfig:
    """Step sizes of the learners.

    Attributes:
        eta: learning rate of the cross-learning learners (> 0).
        gamma: implicit exploration in the ``cross-learning`` denominator (>= 0).
        epoch_length: ``L``, rounds per epoch of ``cross-learning`` (>= 1).
    """

    eta: float
    gamma: float
    epoch_length: int

    def __post_init__(self):
        if not np.isfinite(self.eta) or self.eta <= 0:
            raise ValueError(f"eta must be a finite number > 0, got {self.eta!r}")
        if not np.isfinite(self.gamma) or self.gamma < 0:
            raise ValueError(f"gamma must be a finite number >= 0, got {self.gamma!r}")
        _check_int("epoch_length", self.epoch_length, 1)


def default_config(n_actions: int, horizon: int, eta_scale: float = 1.0, *, rate_exponent: float = 0.5,
                   anchor_horizon: int | None = None) -> LearnerConfig:
    """Assumed defaults: ``eta = eta_scale sqrt(ln K / (K T))``, ``gamma = eta / 2``, ``L = ceil(sqrt(K T))``.

    ``eta_scale = 1`` is the stated rate; the experiment tunes ``eta_scale`` on a grid around it.
    ``rate_exponent`` (default 0.5, the stated ``T^(-1/2)``) sets how the rate decays with ``T``:
    ``eta = eta_scale sqrt(ln K / (K T_a)) (T_a / T)^rate_exponent`` with ``T_a = anchor_horizon``
    (default ``horizon``), so the rate equals the stated one at ``T = T_a``. ``rate_exponent = 2/3``
    is the slower ``T^(-2/3)`` schedule of a ``T^(2/3)``-regret learner: the control of the rate claim
    (session 7 outside review), not the paper's algorithm. With 0.5 the anchor has no effect.
    """
    K = _check_int("n_actions", n_actions, 2)
    T = _check_int("horizon", horizon, 1)
    if not (np.isfinite(eta_scale) and eta_scale > 0):
        raise ValueError(f"eta_scale must be a finite number > 0, got {eta_scale!r}")
    if isinstance(rate_exponent, bool) or not (np.isfinite(rate_exponent) and 0 < rate_exponent <= 1):
        raise ValueError(f"rate_exponent must be a number in (0, 1], got {rate_exponent!r}")
    T_a = T if anchor_horizon is None else _check_int("anchor_horizon", anchor_horizon, 1)
    eta = eta_scale * math.sqrt(math.log(K) / (K * T_a)) * (T_a / T) ** rate_exponent
    return LearnerConfig(eta=eta, gamma=eta / 2, epoch_length=int(math.ceil(math.sqrt(K * T))))


def exp_weights(cum_loss: np.ndarray, eta, allowed: np.ndarray) -> np.ndarray:
    """``pi(a | c) = exp(-eta Lhat(c, a)) / sum_{b allowed} exp(-eta Lhat(c, b))`` over the last axis.

    ``eta`` is a scalar or broadcasts against ``cum_loss[..., :1]``; disallowed actions get 0.
    """
    eta = np.asarray(eta, dtype=float)
    z = np.where(allowed, -(eta[..., None] if eta.ndim else eta) * cum_loss, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=-1, keepdims=True)


def estimated_marginal(probs_all: np.ndarray, actions: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``sum_c weights[r, c] pi(A_r | c)``: the marginal probability of the played action.

    With ``weights = nu`` this is Balseiro et al.'s exact ``f_t(A_t)``; with the empirical context
    frequencies of the previous epoch it is Schneider & Zimmert's estimate ``fhat_t(A_t)``.
    Shapes: ``probs_all (R, C, K)``, ``actions (R,)``, ``weights (R, C)`` or ``(C,)``.
    """
    R = probs_all.shape[0]
    col = probs_all[np.arange(R), :, actions]  # (R, C)
    return np.sum(np.broadcast_to(weights, col.shape) * col, axis=1)


def cross_learned_update(cum_loss: np.ndarray, actions: np.ndarray, loss_table: np.ndarray,
                         allowed: np.ndarray, denom: np.ndarray) -> None:
    """In place: ``Lhat(c, A_r) += l_t(c, A_r) / denom_r`` for every context ``c`` where ``A_r`` is allowed."""
    R = cum_loss.shape[0]
    upd = loss_table[:, actions].T * allowed[:, actions].T / denom[:, None]  # (R, C)
    cum_loss[np.arange(R), :, actions] += upd


@dataclass(frozen=True)
class SimulationResult:
    """Outcome of ``simulate``: ``regret (R,)`` at the horizon and ``curve (R, P)`` at ``checkpoints (P,)``; with
    ``phases``, ``phase_regret (R,)`` against the per-phase comparator (``CrossLearningEnv.phase_comparator``)."""

    method: str
    regret: np.ndarray
    curve: np.ndarray
    checkpoints: np.ndarray
    phase_regret: np.ndarray | None = None   # against the per-phase comparator, when ``phases`` was given


def _sample(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(probs, axis=1)
    a = (u[:, None] * cdf[:, -1:] >= cdf).sum(axis=1)
    return np.minimum(a, probs.shape[1] - 1)


def simulate(env: CrossLearningEnv, method: str, runs: int, seed, *, config: LearnerConfig | None = None,
             points: int = 20, eta_scale: float = 1.0, rate_exponent: float = 0.5,
             anchor_horizon: int | None = None, explore: float | None = None, discount: float | None = None,
             phases=None) -> SimulationResult:
    """Run ``runs`` independent learners of ``method`` on ``env`` for its horizon, all vectorised.

    Contexts and the uniforms that draw actions come from ``seed`` (two spawned streams), so every
    method sees the same contexts for the same seed (common random numbers).

    Args:
        env: the environment (its losses are fixed: an oblivious adversary).
        method: one of ``METHODS``.
        runs: independent runs advanced together (>= 1).
        seed: an int or ``numpy.random.SeedSequence``.
        config: step sizes; default ``default_config(K, T, eta_scale)``.
        points: regret checkpoints recorded along the horizon.
        eta_scale: multiplies the default rates (also per-context EXP3's ``eta_c``); ignored when
            ``config`` is given for the cross-learning learners.
        rate_exponent, anchor_horizon: the default rate's decay in ``T`` (``default_config``; 2/3 is
            the ``T^(2/3)`` control of the rate claim); ignored when ``config`` is given.
        explore: the exploration share of ``T`` (explore-then-commit) or probability (the epsilon-greedy
            controls), in ``[0, 1]``; default ``DEFAULT_EXPLORE[method]``; other learners ignore it.
        discount: the discount in ``(0, 1]`` of ``discounted-epsilon-greedy`` (default ``DEFAULT_DISCOUNT``).
        phases: rounds where a new phase starts; if given, ``phase_regret`` is the regret against the
            per-phase comparator (``env.phase_comparator(phases)``), computed on the same run.

    Returns:
        ``SimulationResult`` with the regret against the comparator policy ``env.comparator()``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    R = _check_int("runs", runs, 1)
    points = _check_int("points", points, 1)
    C, K, T = env.n_contexts, env.n_actions, env.horizon
    cfg = config or default_config(K, T, eta_scale, rate_exponent=rate_exponent, anchor_horizon=anchor_horizon)
    eps = DEFAULT_EXPLORE.get(method, 0.0) if explore is None else float(explore)
    disc = DEFAULT_DISCOUNT if discount is None else float(discount)
    if not (np.isfinite(eps) and 0 <= eps <= 1):
        raise ValueError(f"explore must be a number in [0, 1], got {explore!r}")
    if not (np.isfinite(disc) and 0 < disc <= 1):
        raise ValueError(f"discount must be a number in (0, 1], got {discount!r}")
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(int(seed))
    ctx_rng, act_rng = (np.random.default_rng(s) for s in ss.spawn(2))
    contexts = ctx_rng.choice(C, size=(R, T), p=env.context_probs)
    uniforms = act_rng.random((R, T))
    # the epsilon-greedy coins: a second draw of the same stream (the other learners' draws are unchanged)
    coins = act_rng.random((R, T)) if method in ("epsilon-greedy", "discounted-epsilon-greedy") else None
    best = env.comparator()
    if phases is not None:
        cuts = _phase_starts(phases, T)
        phase_best = env.phase_comparator(cuts)                                         # (P, C)
        phase_of = np.searchsorted(np.asarray(cuts), np.arange(T), side="right")        # (T,)
        phase_regret = np.zeros(R)
    weight, base = 1.0, 0   # discounted sums: round s's observation enters with weight discount^(-(s - base))
    allowed = env.allowed
    cum = np.zeros((R, C, K))
    ar = np.arange(R)
    checkpoints = np.unique(np.linspace(1, T, points).round().astype(int))
    curve = np.zeros((R, checkpoints.size))
    regret = np.zeros(R)
    visits = np.zeros((R, C))
    greedy_like = method in GREEDY_LIKE
    visits_ck = np.zeros((R, C, K) if greedy_like else (1, 1, 1))   # observations per (context, action)
    L = cfg.epoch_length
    k = 0
    for t in range(T):
        table = env.tables[env.schedule[t]]
        c = contexts[:, t]
        if method == "oracle":
            a = best[c]
        elif method == "uniform":
            a = _sample(allowed[c] / allowed[c].sum(axis=1, keepdims=True), uniforms[:, t])
        elif greedy_like:
            seen, obs = cum[ar, c], visits_ck[ar, c]                                    # (R, K) each
            if method == "follow-the-leader":
                score = seen
            else:   # the smallest (discounted) empirical mean; never-observed actions first
                score = np.where(obs > 0, seen / np.where(obs > 0, obs, 1.0), -1.0)
            a = np.argmin(np.where(allowed[c], score, np.inf), axis=1)
            if method == "explore-then-commit" and t < eps * T:
                a = _sample(allowed[c] / allowed[c].sum(axis=1, keepdims=True), uniforms[:, t])
            elif coins is not None:
                a = np.where(coins[:, t] < eps, _sample(allowed[c] / allowed[c].sum(axis=1, keepdims=True),
                                                        uniforms[:, t]), a)
            if method == "discounted-epsilon-greedy" and disc < 1:
                weight = disc ** -(t - base)
                if weight > 1e100:   # rescale: only the ratios of the weights matter
                    cum *= 1.0 / weight
                    visits_ck *= 1.0 / weight
                    base, weight = t, 1.0
            known = allowed[:, a].T                                                     # (R, C)
            cum[ar, :, a] += table[:, a].T * known * weight
            visits_ck[ar, :, a] += known * weight
        elif method == "per-context-exp3":
            visits[ar, c] += 1
            eta_c = eta_scale * np.sqrt(math.log(K) / (K * visits[ar, c]))
            p = exp_weights(cum[ar, c], eta_c, allowed[c])
            a = _sample(p, uniforms[:, t])
            cum[ar, c, a] += table[c, a] / p[ar, a]
        elif method in ("known-distribution", "assumed-uniform-nu"):
            probs_all = exp_weights(cum, cfg.eta, allowed)  # (R, C, K)
            a = _sample(probs_all[ar, c], uniforms[:, t])
            nu = env.context_probs if method == "known-distribution" else np.full(C, 1.0 / C)
            cross_learned_update(cum, a, table, allowed, estimated_marginal(probs_all, a, nu))
        elif method == "propensity-weighted":
            p = exp_weights(cum[ar, c], cfg.eta, allowed[c])
            a = _sample(p, uniforms[:, t])
            cross_learned_update(cum, a, table, allowed, p[ar, a] + cfg.gamma)
        else:  # cross-learning (Schneider & Zimmert)
            a = _sample(exp_weights(cum[ar, c], cfg.eta, allowed[c]), uniforms[:, t])
            if t >= L:  # epoch e >= 1: the contexts of epoch e - 1 estimate f_t at the current policy
                e = t // L
                prev = contexts[:, (e - 1) * L:e * L]                                     # (R, L)
                p_prev = exp_weights(cum[ar[:, None], prev], cfg.eta, allowed[prev])     # (R, L, K)
                denom = p_prev[ar, :, a].mean(axis=1) + cfg.gamma
                cross_learned_update(cum, a, table, allowed, denom)
        regret += table[c, a] - table[c, best[c]]
        if phases is not None:
            phase_regret += table[c, a] - table[c, phase_best[phase_of[t], c]]
        if k < checkpoints.size and t + 1 == checkpoints[k]:
            curve[:, k] = regret
            k += 1
    return SimulationResult(method=method, regret=regret, curve=curve, checkpoints=checkpoints,
                            phase_regret=phase_regret if phases is not None else None)


class CrossLearner:
    """Schneider & Zimmert's cross-learning algorithm as an online learner on the user's own data.

    One learner, round by round (the same algorithm as ``simulate(method="cross-learning")``):
    ``act(c)`` samples ``A_t ~ pi_t(.|c) ∝ exp(-eta Lhat(c, .))`` over the context's allowed actions;
    ``update(c, a, losses)`` takes the cross-learning feedback, ``losses[c']`` = the loss of action
    ``a`` in EVERY context ``c'`` (``nan`` where ``a`` is not allowed), and, from the second epoch on,
    adds ``losses[c'] / (fhat_t(a) + gamma)`` to ``Lhat(c', a)``, where ``fhat_t(a)`` is the mean of
    ``pi_t(a | c_s)`` over the contexts ``c_s`` of the previous epoch of ``L`` rounds.

    Args:
        n_contexts, n_actions: ``C`` and ``K`` (>= 1, >= 2).
        horizon: ``T``, for the default step sizes (``default_config``).
        eta_scale: multiplies the default ``eta`` (``gamma = eta / 2``).
        config: explicit ``LearnerConfig`` (overrides ``horizon`` / ``eta_scale``).
        allowed: ``(C, K)`` bool mask of playable actions (default: all).
        seed: seed or ``numpy.random.Generator`` of ``act``'s sampling.

    Examples:
        >>> import numpy as np
        >>> learner = CrossLearner(3, 2, horizon=100, seed=0)
        >>> a = learner.act(1)
        >>> learner.update(1, a, np.array([0.2, 0.5, 1.0]))
        >>> learner.policy(1).round(2).tolist()
        [0.5, 0.5]
    """

    def __init__(self, n_contexts: int, n_actions: int, *, horizon: int = 1000, eta_scale: float = 1.0,
                 config: LearnerConfig | None = None, allowed=None,
                 seed: int | np.random.Generator | None = 0):
        C = _check_int("n_contexts", n_contexts, 1)
        K = _check_int("n_actions", n_actions, 2)
        self.config = config if config is not None else default_config(K, horizon, eta_scale)
        if not isinstance(self.config, LearnerConfig):
            raise TypeError(f"config must be a LearnerConfig, got {type(config).__name__}")
        mask = np.ones((C, K), dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
        if mask.shape != (C, K) or not mask.any(axis=1).all():
            raise ValueError(f"allowed must be a ({C}, {K}) bool mask with an action in every context, "
                             f"got shape {mask.shape}")
        self.allowed = mask
        self.cum_loss_ = np.zeros((C, K))
        self.rounds_ = 0
        self._epoch: list[int] = []       # contexts of the current epoch
        self._previous: list[int] = []    # contexts of the previous epoch (the reference sample)
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def _context(self, c) -> int:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < self.allowed.shape[0]:
            raise ValueError(f"c must be a context index in [0, {self.allowed.shape[0]}), got {c!r}")
        return int(c)

    def policy(self, c: int) -> np.ndarray:
        """``pi_t(.|c)``: exponential weights on the cross-learned cumulative losses."""
        c = self._context(c)
        return exp_weights(self.cum_loss_[c], self.config.eta, self.allowed[c])

    def act(self, c: int) -> int:
        """An action sampled from ``pi_t(.|c)``."""
        return int(self._rng.choice(self.allowed.shape[1], p=self.policy(c)))

    def update(self, c: int, a: int, losses) -> None:
        """Feed back the losses of the played action ``a`` in every context (``losses``, shape ``(C,)``)."""
        c = self._context(c)
        C, K = self.allowed.shape
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 0 <= a < K or not self.allowed[c, a]:
            raise ValueError(f"a must be an action allowed in context {c}, in [0, {K}), got {a!r}")
        loss = np.asarray(losses, dtype=float)
        if loss.shape != (C,):
            raise ValueError(f"losses must hold the loss of action a in each of the {C} contexts, got shape {loss.shape}")
        known = self.allowed[:, a]
        if np.any(~np.isfinite(loss[known])) or np.any((loss[known] < 0) | (loss[known] > 1)):
            raise ValueError("losses must lie in [0, 1] in every context where a is allowed")
        L = self.config.epoch_length
        if self._previous:   # epoch >= 1: fhat at the current policy from the previous epoch's contexts
            prev = np.asarray(self._previous)
            fhat = exp_weights(self.cum_loss_[prev], self.config.eta, self.allowed[prev])[:, a].mean()
            self.cum_loss_[known, a] += loss[known] / (fhat + self.config.gamma)
        self._epoch.append(c)
        self.rounds_ += 1
        if self.rounds_ % L == 0:
            self._previous, self._epoch = self._epoch, []
