"""Securing the equal share C/n in repeated multiplayer symmetric games, vectorised over runs.

Paper: Ge, Wang, Li & Jin, "Securing Equal Share: A Principled Approach for Learning Multiplayer
Symmetric Games", ICML 2025 (arXiv 2406.04201). In an n-player symmetric constant-sum game
(payoffs sum to C) a player who faces n - 1 opponents all playing the SAME strategy sigma gets
exactly C/n by playing sigma too; so a no-regret learner secures C/n - o(1) against identical
opponents whose common strategy changes slowly enough. Against opponents playing different
strategies, or arbitrarily adaptive ones, no algorithm can (the paper's impossibility results).

Games (``majority_game``): ``m`` actions; with ``n_b`` players on action ``b`` a player on ``a``
gets ``u = sign * scale * (n_a - sum_b n_b^2 / n)``, which sums to ``C = 0`` over players.
``n = 3, m = 2, scale = 3`` is majority vote (unanimous: 0; 2-1 split: +1 to each of the
majority, -2 to the minority); ``sign = -1`` is minority vote; ``n = 30`` gives a many-player game.

Learners (full information: the opponents' actions are observed after each round, so the payoff
``U_t(a)`` of every own action is known):

* ``"hedge"``: ``x_t ~ exp(eta sum_{s<t} U_s)``; for identical fixed opponents.
* ``"saol-hedge"``: the strongly adaptive wrapper SAOL (Daniely, Gonen & Shalev-Shwartz, ICML
  2015) around Hedge, for slowly changing identical opponents: geometric covering intervals
  ``[i 2^k, (i + 1) 2^k - 1]``; one Hedge copy per interval (restarted at its start, rate tuned to
  ``2^k``); meta weights over the active copies start at ``eta_I = min(1/2, |I|^-1/2)`` and are
  multiplied by ``1 + eta_I r_t(I)`` with ``r_t(I)`` the copy's payoff minus the combined payoff
  (payoffs rescaled to [0, 1]); play the weight-averaged distribution.
  Checked against an interval-by-interval reimplementation of Daniely et al.'s definitions
  (``tests/bandits/test_equal_share.py``: equal to 1e-12). Against a fixed pure opponent SAOL
  trails plain Hedge (issue 16: -0.27 against -0.02 of the payoff scale at T = 1000 in majority
  vote) by construction, not by a bug: the length-1 copy restarts every round with weight 1/2 and
  plays uniform, and at every ``t = 2^j`` all copies restart together, so the mixture keeps a
  near-uniform part whose share only long-lived copies outgrow; the gap shrinks slowly with T
  (-0.31, -0.27, -0.24 at T = 250, 1000, 4000), as SAOL's ``O(sqrt(|I|) log T)`` interval regret
  allows.
* ``"behaviour-cloning"``: play the empirical distribution of all opponents' actions in the last
  ``window`` rounds (uniform before any data). The paper's behaviour cloning (per a digest of the
  PDF) plays uniformly in the first round and then repeats the opponents' last action: ``window =
  1``, where the empirical distribution of the ``n - 1`` opponents' last actions has the same
  expectation ``sigma_{t-1}`` as one opponent's action (differs: lower variance), so its average
  payoff is at least ``C/n - (V_T + 1) / T`` in units of ``B`` (the paper's ``-O(V_T / T)``).
* ``"fixed"``: a fixed mixed strategy (what the self-play meta-algorithms output).

Self-play meta-algorithms (``selfplay_strategy``): ``"self-play-hedge"`` (all n players run Hedge
against each other; output player 0's last strategy) and ``"fictitious-play"`` (every player best
responds to the empirical history of the others' play, i.e. follows the leader on cumulative
counterfactual payoffs; output player 0's empirical action frequencies).

Opponents (``opponent_counts``): ``identical`` fixed sigma; ``slow`` identical with
``sigma_t = lam_t e_0 + (1 - lam_t) e_1``, ``lam_t = (1 + sin(2 pi t / period)) / 2``;
``adaptive`` identical and arbitrarily adaptive: all play the pure action that minimises the
learner's expected payoff under its current mixed strategy; ``different``: fixed, different pure
strategies (opponent j plays action j mod m).

Which adaptive learner the paper uses (issue 37): SAOL with Hedge ("SAOL_H", a reviewer's summary
of the ICLR submission and a digest of the ICML PDF both name it; its dynamic-regret guarantee is
``C/n - O(V_T^{1/3} T^{-1/3} (sqrt(log(m / delta)) + log T))`` for opponents whose common
strategy has total variation ``V_T``), so ``"saol-hedge"`` is the paper's learner, not a variant.
Any symmetric constant-sum game can be given as a payoff function (``symmetric_game``).

Assumed (the full text was not reachable; the notes and reviews give the structure): the game
family above (the vote tables match the reviewers' description, the 30-player game is ours), the
opponent models, Hedge's rate ``eta = sqrt(8 ln m / T) / (2 B)`` with ``B`` the largest |payoff|,
SAOL's details as recalled from Daniely et al., the cloning window, and the self-play
meta-algorithms' forms. Payoffs are reported divided by ``B`` (so C/n = 0 and values are in [-1, 1]),
using the learner's expected payoff ``<x_t, U_t>`` given the realised opponent actions.

Examples:
    >>> from rayml.bandits.equal_share import majority_game, play
    >>> g = majority_game(3, 2)
    >>> avg = play(g, "hedge", {"kind": "identical", "sigma": [0.3, 0.7]}, horizon=200, runs=4, seed=0)
    >>> avg.shape
    (4,)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

__all__ = [
    "LEARNERS",
    "SELFPLAY",
    "OPPONENTS",
    "SymmetricGame",
    "majority_game",
    "symmetric_game",
    "slow_sigma",
    "total_variation",
    "expected_payoffs",
    "slow_best_response",
    "payoff_vectors",
    "opponent_counts",
    "hedge_rate",
    "saol_intervals",
    "selfplay_strategy",
    "play",
]

LEARNERS = ("hedge", "saol-hedge", "behaviour-cloning", "fixed")
SELFPLAY = ("self-play-hedge", "fictitious-play")
OPPONENTS = ("identical", "slow", "adaptive", "different")


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class SymmetricGame:
    """``u(a; n_.) = sign * scale * (n_a - sum_b n_b^2 / n)``: symmetric, constant-sum with C = 0.

    Attributes:
        name: a label.
        n_players: ``n`` (>= 3: the paper's setting is n > 2).
        n_actions: ``m`` (>= 2).
        sign: +1 (majority: being in a large group pays) or -1 (minority).
        scale: payoff multiplier (> 0).
    """

    name: str
    n_players: int
    n_actions: int
    sign: int = 1
    scale: float = 1.0
    lookup: np.ndarray | None = field(default=None, compare=False, repr=False)
    total: float = 0.0

    def __post_init__(self):
        _check_int("n_players", self.n_players, 3)
        _check_int("n_actions", self.n_actions, 2)
        if self.sign not in (1, -1):
            raise ValueError(f"sign must be +1 or -1, got {self.sign!r}")
        if not np.isfinite(self.scale) or self.scale <= 0:
            raise ValueError(f"scale must be a finite number > 0, got {self.scale!r}")

    @property
    def equal_share(self) -> float:
        """C / n in the game's own payoff units (``payoff_vectors`` is centred on it: C/n - C/n = 0)."""
        return self.total / self.n_players

    @property
    def payoff_bound(self) -> float:
        """``B = max |u|`` over own actions and all opponent count vectors (by enumeration)."""
        n, m = self.n_players, self.n_actions
        counts = np.array([c for c in itertools.product(range(n), repeat=m) if sum(c) == n - 1])
        return float(np.abs(payoff_vectors(self, counts)).max())


def majority_game(n_players: int, n_actions: int, *, minority: bool = False) -> SymmetricGame:
    """Majority (or minority) game; with ``n = 3, m = 2`` the payoffs are the vote tables (+1 / -2)."""
    scale = 3.0 if (n_players == 3 and n_actions == 2) else 1.0
    kind = "minority" if minority else "majority"
    return SymmetricGame(name=f"{kind}-{n_players}", n_players=n_players, n_actions=n_actions,
                         sign=-1 if minority else 1, scale=scale)


def _compositions(total: int, parts: int):
    """Every tuple of ``parts`` non-negative integers summing to ``total``."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


def symmetric_game(payoff, n_players: int, n_actions: int, *, name: str = "custom",
                   tol: float = 1e-9) -> SymmetricGame:
    """A symmetric constant-sum game from the user's payoff function ``payoff(a, others) -> float``.

    ``others`` is the tuple of the other ``n - 1`` players' action counts (length ``m``): a payoff
    that depends on the own action and on how many others play each action is symmetric by
    construction. The game must be constant-sum: for every profile (counts ``N`` summing to ``n``),
    ``sum_a N_a payoff(a, N - e_a)`` is the same ``C`` (checked, within ``tol``); ``payoff_vectors``
    then returns payoffs centred on the equal share ``C / n`` (so every learner's guarantee reads
    "at least 0"), and ``game.equal_share`` is ``C / n``.

    Examples:
        >>> def crowd(a, k):   # a pot of 1 shared by the players of the more crowded action
        ...     return 1 / (k[a] + 1) if k[a] + 1 > k[1 - a] else 0.0
        >>> g = symmetric_game(crowd, 3, 2, name="crowd")
        >>> round(g.equal_share, 6), payoff_vectors(g, np.array([2.0, 0.0])).round(6).tolist()
        (0.333333, [0.0, -0.333333])
    """
    n = _check_int("n_players", n_players, 3)
    m = _check_int("n_actions", n_actions, 2)
    if not callable(payoff):
        raise TypeError(f"payoff must be a callable payoff(a, others) -> float, got {type(payoff).__name__}")
    if n ** m > 5_000_000:
        raise ValueError(f"n_players ** n_actions must be <= 5e6 (the payoff table is indexed by counts), got {n ** m}")
    radix = n ** np.arange(m)
    lookup = np.full((n ** m, m), np.nan)
    for k in _compositions(n - 1, m):
        row = [float(payoff(a, k)) for a in range(m)]
        if not np.all(np.isfinite(row)):
            raise ValueError(f"payoff must return finite numbers, got {row} for others = {k}")
        lookup[int(np.dot(k, radix))] = row
    totals = []
    for N in _compositions(n, m):
        totals.append(sum(N[a] * lookup[int(np.dot(N, radix) - radix[a]), a] for a in range(m) if N[a]))
    C = float(np.mean(totals))
    if max(abs(t - C) for t in totals) > tol * (1 + abs(C)):
        raise ValueError(f"payoff is not constant-sum: the players' payoffs sum to between {min(totals):.6g} and "
                         f"{max(totals):.6g} over the profiles")
    return SymmetricGame(name=name, n_players=n, n_actions=m, lookup=lookup - C / n, total=C)


def payoff_vectors(game: SymmetricGame, others: np.ndarray) -> np.ndarray:
    """``U[..., a]``: one player's payoff for each own action ``a`` given the OTHER players' counts,
    centred on the equal share (``C / n`` subtracted).

    ``others`` has shape ``(..., m)`` and sums to ``n - 1`` along the last axis.
    """
    k = np.asarray(others, dtype=float)
    if k.shape[-1] != game.n_actions:
        raise ValueError(f"others must have last dimension n_actions = {game.n_actions}, got {k.shape}")
    if game.lookup is not None:
        code = np.rint(k).astype(np.int64) @ (game.n_players ** np.arange(game.n_actions))
        return game.lookup[code]
    sq = np.sum(k * k, axis=-1, keepdims=True)
    n = game.n_players
    return game.sign * game.scale * ((k + 1.0) - (sq + 2.0 * k + 1.0) / n)


def opponent_counts(game: SymmetricGame, spec: Mapping[str, Any], t: int, horizon: int, x: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """The n - 1 opponents' action counts ``(R, m)`` in round ``t`` for opponent model ``spec``.

    ``x (R, m)`` is the learner's current mixed strategy (only ``adaptive`` opponents use it).
    """
    R, m, n1 = x.shape[0], game.n_actions, game.n_players - 1
    kind = spec["kind"]
    if kind == "identical":
        sigma = np.asarray(spec["sigma"], dtype=float)
        return rng.multinomial(n1, sigma, size=R).astype(float)
    if kind == "slow":
        return rng.multinomial(n1, slow_sigma(m, t, float(spec.get("period", horizon / 2))), size=R).astype(float)
    if kind == "adaptive":
        pure = n1 * np.eye(m)  # (b, m): all opponents on action b
        value = x @ payoff_vectors(game, pure).T  # (R, b): learner's expected payoff
        b = np.argmin(value, axis=1)
        return pure[b]
    if kind == "different":
        return np.broadcast_to(np.bincount(np.arange(n1) % m, minlength=m).astype(float), (R, m)).copy()
    raise ValueError(f"opponent kind must be one of {OPPONENTS}, got {kind!r}")


def slow_sigma(n_actions: int, t: int, period: float) -> np.ndarray:
    """The ``slow`` opponents' common strategy in round ``t``: ``lam_t e_0 + (1 - lam_t) e_1`` with
    ``lam_t = (1 + sin(2 pi t / period)) / 2``."""
    lam = 0.5 * (1 + math.sin(2 * math.pi * t / period))
    sigma = np.zeros(n_actions)
    sigma[0], sigma[1] = lam, 1 - lam
    return sigma


def total_variation(n_actions: int, horizon: int, period: float) -> float:
    """``V_T = sum_{t=2}^T ||sigma_t - sigma_{t-1}||_1`` of the ``slow`` opponents (the paper's
    budget of adaptivity)."""
    sig = np.array([slow_sigma(n_actions, t, period) for t in range(1, _check_int("horizon", horizon, 1) + 1)])
    return float(np.abs(np.diff(sig, axis=0)).sum())


def expected_payoffs(game: SymmetricGame, sigma) -> np.ndarray:
    """``E[U(a)]`` for each own action ``a`` when the ``n - 1`` opponents each draw an action from
    ``sigma`` independently (counts multinomial), centred on C/n; ``sigma (..., m)`` -> ``(..., m)``."""
    sig = np.asarray(sigma, dtype=float)
    m, n1 = game.n_actions, game.n_players - 1
    if sig.shape[-1] != m or np.any(sig < 0) or not np.allclose(sig.sum(axis=-1), 1):
        raise ValueError(f"sigma must be probability vectors of length n_actions = {m}, got shape {sig.shape}")
    counts = np.array(list(_compositions(n1, m)), dtype=float)                        # (K, m)
    coef = np.array([math.factorial(n1) / math.prod(math.factorial(int(c)) for c in k) for k in counts])
    prob = coef * np.prod(sig[..., None, :] ** counts, axis=-1)                         # (..., K); 0^0 = 1
    return prob @ payoff_vectors(game, counts)


def slow_best_response(game: SymmetricGame, horizon: int, period: float | None = None) -> float:
    """The dynamic comparator of SAOL_H's bound against the ``slow`` opponents:
    ``(1 / (T B)) sum_t max_a E[U(a) | sigma_t]`` (the per-round best response to their current
    common strategy), in units of ``B`` like ``play``'s payoffs (default period ``T / 2``)."""
    T = _check_int("horizon", horizon, 1)
    per = T / 2 if period is None else float(period)
    sig = np.array([slow_sigma(game.n_actions, t, per) for t in range(1, T + 1)])
    return float(expected_payoffs(game, sig).max(axis=-1).sum() / (T * game.payoff_bound))


def hedge_rate(horizon: int, n_actions: int, bound: float) -> float:
    """Assumed Hedge rate for payoffs in ``[-B, B]``: ``sqrt(8 ln m / T) / (2 B)``."""
    return math.sqrt(8 * math.log(n_actions) / horizon) / (2 * bound)


def saol_intervals(t: int, horizon: int) -> list[tuple[int, int]]:
    """Active geometric covering intervals at round ``t`` (1-indexed): ``(k, start)`` with ``2^k <= t``."""
    out, k = [], 0
    while 2**k <= min(t, horizon):
        out.append((k, (t // 2**k) * 2**k))
        k += 1
    return out


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=-1, keepdims=True)


def selfplay_strategy(game: SymmetricGame, method: str, rounds: int, runs: int, seed) -> np.ndarray:
    """The strategy ``(R, m)`` a self-play meta-algorithm outputs for player 0 after ``rounds`` rounds."""
    if method not in SELFPLAY:
        raise ValueError(f"method must be one of {SELFPLAY}, got {method!r}")
    T = _check_int("rounds", rounds, 1)
    R = _check_int("runs", runs, 1)
    rng = np.random.default_rng(seed)
    n, m = game.n_players, game.n_actions
    B = game.payoff_bound
    eta = hedge_rate(T, m, B)
    S = 1e-6 * rng.standard_normal((R, n, m))  # tiny random tie-breaking
    freq = np.zeros((R, m))
    x = _softmax(eta * S)
    for _ in range(T):
        if method == "self-play-hedge":
            x = _softmax(eta * S)
            u = rng.random((R, n, 1))
            acts = np.minimum((u >= np.cumsum(x, axis=-1)).sum(-1), m - 1)
        else:
            acts = np.argmax(S, axis=-1)
        onehot = np.eye(m)[acts]  # (R, n, m)
        others = onehot.sum(axis=1, keepdims=True) - onehot
        S = S + payoff_vectors(game, others)
        freq += onehot[:, 0]
    return x[:, 0] if method == "self-play-hedge" else freq / T


def play(game: SymmetricGame, method: str, opponent: Mapping[str, Any], horizon: int, runs: int, seed, *,
         strategy: np.ndarray | None = None, window: int = 50) -> np.ndarray:
    """Average normalised payoff ``(1 / (T B)) sum_t <x_t, U_t>`` of ``runs`` learners, shape ``(R,)``.

    Args:
        game: the symmetric game.
        method: one of ``LEARNERS``; ``"fixed"`` needs ``strategy (R, m)`` or ``(m,)``.
        opponent: ``{"kind": one of OPPONENTS, ...}`` (``sigma`` for ``identical``, optional
            ``period`` for ``slow``).
        horizon: rounds ``T`` (>= 1).
        runs: independent runs advanced together (>= 1).
        seed: int or ``numpy.random.SeedSequence``.
        window: the behaviour-cloning window (>= 1).
    """
    if method not in LEARNERS:
        raise ValueError(f"method must be one of {LEARNERS}, got {method!r}")
    if opponent.get("kind") not in OPPONENTS:
        raise ValueError(f"opponent kind must be one of {OPPONENTS}, got {opponent.get('kind')!r}")
    T = _check_int("horizon", horizon, 1)
    R = _check_int("runs", runs, 1)
    W = _check_int("window", window, 1)
    m, n1 = game.n_actions, game.n_players - 1
    if opponent["kind"] == "identical":
        sigma = np.asarray(opponent["sigma"], dtype=float)
        if sigma.shape != (m,) or np.any(sigma < 0) or not np.isclose(sigma.sum(), 1):
            raise ValueError(f"sigma must be a probability vector of length n_actions = {m}, got {sigma!r}")
    if method == "fixed":
        if strategy is None:
            raise ValueError("strategy is required for method 'fixed'")
        fixed = np.broadcast_to(np.asarray(strategy, dtype=float), (R, m)) if np.ndim(strategy) else None
        if fixed is None or not np.allclose(fixed.sum(axis=1), 1):
            raise ValueError("strategy must have shape (runs, n_actions) or (n_actions,), rows summing to 1")
    rng = np.random.default_rng(seed)
    B = game.payoff_bound
    eta = hedge_rate(T, m, B)
    S = np.zeros((R, m))
    levels = [k for k in range(64) if 2**k <= T]
    S_k = np.zeros((len(levels), R, m))
    w_k = np.zeros((len(levels), R))
    eta_k = np.array([hedge_rate(2**k, m, B) for k in levels])
    meta_k = np.array([min(0.5, 2 ** (-k / 2)) for k in levels])
    buf = np.zeros((W, R, m))
    total = np.zeros(R)
    for t in range(1, T + 1):
        if method == "hedge":
            x = _softmax(eta * S)
        elif method == "fixed":
            x = fixed
        elif method == "behaviour-cloning":
            seen = buf.sum(axis=0)
            x = seen / seen.sum(axis=1, keepdims=True) if t > 1 else np.full((R, m), 1.0 / m)
        else:  # saol-hedge
            active = [k for k in levels if 2**k <= t]
            for k in active:
                if t % 2**k == 0:  # interval [t, t + 2^k - 1] starts: restart its copy
                    S_k[k] = 0.0
                    w_k[k] = meta_k[k]
            xs = _softmax(eta_k[active, None, None] * S_k[active])  # (A, R, m)
            wa = w_k[active]  # (A, R)
            x = np.einsum("ar,arm->rm", wa, xs) / wa.sum(axis=0)[:, None]
        k_t = opponent_counts(game, opponent, t, T, x, rng)
        U = payoff_vectors(game, k_t)
        gain = np.sum(x * U, axis=1)
        total += gain
        if method == "hedge":
            S += U
        elif method == "behaviour-cloning":
            buf[t % W] = k_t
        elif method == "saol-hedge":
            g01 = (U + B) / (2 * B)
            r = np.einsum("arm,rm->ar", xs, g01) - np.sum(x * g01, axis=1)[None]
            w_k[active] = wa * (1 + meta_k[active, None] * r)
            S_k[active] += U[None]
    return total / (T * B)
