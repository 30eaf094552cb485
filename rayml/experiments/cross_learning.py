"""Cross-learning reproduction: the regret's rate in T and in the number of contexts, and its tail.

Environments with cross-learning feedback (``rayml.bandits.cross_learning``): ``contextual_best_arm``
with ``C`` much larger than the epoch length ``L = sqrt(K T)`` (each context has its own best
action and is seen a handful of times: where one EXP3 per context must fail and where "independent
of the number of contexts" is tested), at ``C`` in ``contexts`` (few, middle, many). The two
applications the abstracts name, a first-price auction (context = value) and a sleeping bandit
(context = awake set), stay in the core (``first_price_auction``, ``sleeping_bandit``) but are no
longer run (issue 37: with 16 and 31 contexts per-context EXP3 keeps up, so they could not
discriminate). Learners share each seed's contexts (common random
numbers): Schneider & Zimmert's algorithm (unknown ``nu``), the same with ``gamma = 0`` (no implicit
exploration: the heavy-tailed variant, control of the tail claim), Balseiro et al.'s EXP3 with
cross-learning given the true ``nu`` (the known-distribution reference), one EXP3 per context, and
uniform play (the trivial control: it learns nothing, so its regret grows linearly in ``T``).

Claims (session 7: the paper's bound as stated, an upper bound ``O~(sqrt(K T log(1/delta)))`` with
probability ``1 - delta``): at ``delta = 0.05`` the 95th-percentile regret grows in ``T`` at most like
``sqrt(T)`` (after the session-7 review: by at most ``4^(7/12) = 2.245`` per factor 4 at the largest
horizons, the geometric midpoint of ``sqrt(T)``'s 2 and ``T^(2/3)``'s 2.52, with the same algorithm at a
``T^(-2/3)`` rate as a control; the one-decade log-log slope, an offset flattens it, is still reported); at
``delta = 0.01`` the same for the 99th percentile over ``tail_runs`` runs at the ``tail_horizons``
(uniform play and the ``gamma = 0`` variant are its controls); it does not grow with ``C`` (fitted
exponent in ``C`` at most 0.1); it is below per-context EXP3's at ``C >> L`` (paired over runs).
Session 8 (the session-7 review's open items): the contextual instance's first quarter of rounds has equal
losses (``warmup``: the first epoch's uniform play costs exactly 0 regret, so the rate claim measures learning,
not ``0.375 L``); a skewed-``nu`` instance (``skewed_contexts``: one context of probability 0.8) where the
rate claim is run again with the propensity-weighted learner and Balseiro et al.'s learner given a uniform
guess of ``nu`` (``assumed-uniform-nu``) as controls; and the tail stated at a level on the switching instance
(``switching_best_arm``), ``q99 <= sqrt(K T ln(1/0.01))`` (the bound's own form; the first session-8 quick run
claimed the spread ``q99 - median`` at that level, which uniform play passed) with ``gamma = 0`` and uniform play
as its controls (the q99 exponent and the spread are still reported). Session 9 (the session-8 end review: greedy
passed the skewed claim, action 0 being best in every context, and follow-the-leader the tail claim, the comparator
losing 0.5 a round before the switch): the skewed instance's best action differs by context (``mixed``), the tail
claim takes the worse of the switching instance and ``alternating_switch`` (the same first phase, then the classic
alternating losses against follow-the-leader; on it alone ``gamma = 0`` keeps a light tail, since two actions must
collapse), each tuned on its own, and greedy on the empirical mean and follow-the-leader
(``rayml.bandits.cross_learning``, no exploration, no rate) are controls of both claims. All are gated on ``C > L``. Every
learner's rate multiplier ``eta_scale`` is tuned (``rayml.evidence.tune``) on the same grid (1, the
stated rate, inside; an edge choice extends it twice) on tuning seeds apart from the test seeds, per
environment at the largest ``T``; the tuning runs of cross-learning and per-context EXP3 are the
pilot of the paired claim's power estimate. Session 10 (the session-9 end review R3): the skewed claim was passed at quick's horizons (250 .. 2000) by
linear-regret learners whose early commit errors shrink faster than their exploration cost grows; the skewed
instance now runs at its own ``skew_horizons`` (quick 500 / 2000 / 8000, full 2000 / 8000 / 32000) with
explore-then-commit (2%) and epsilon-greedy (0.01, 0.02) as controls (R3's values, fixed, not tuned). The tail
claim's level was loose: the fixed comparator (action 1) loses 0.5 a round before the switch, a 0.15 T cushion; the
claim now measures the regret against each phase's best action (``simulate(..., phases=)``: stronger than the
paper's fixed-policy regret, which is still reported), with epsilon-greedy on discounted means (0.1, 0.99) as a
control, and the algorithm at the stated rate (``eta_scale`` 1) is run on the tail instances and reported. Work
items are (study, environment, learner, horizon, chunk).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.bandits import cross_learning as cl
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = ("High Probability Bound for Cross-Learning Contextual Bandits with Unknown Context "
         "Distributions (Huang & Huang), ICML 2025")
METHOD = "cross-learning"
GAMMA0 = "cross-learning-gamma0"
UNIFORM_NU = "assumed-uniform-nu"   # session 8: Balseiro et al.'s learner with a uniform guess of nu (skewed study)
PROP = "propensity-weighted"   # the outside review's control: cross-learned losses over pi(A | c_t) + gamma
UNIFORM = "uniform"            # session 7: the trivial control of the rate and tail claims (learns nothing)
T23 = "cross-learning-T23"     # session 7 review: the same algorithm at a T^(-2/3) rate (a T^(2/3) learner)
GREEDY = "greedy"              # session 9 (session-8 end review): per-context empirical-mean greedy, no exploration
FTL = "follow-the-leader"      # session 9: per-context cumulative observed loss, no exploration
# session 10 (the session-9 end review R3): linear-regret controls at R3's values (fixed, not tuned; declared)
ETC2 = "explore-then-commit-2pct"     # uniform for the first 2% of T, then greedy on the cross-learned means
EPS1 = "epsilon-greedy-1pct"          # uniform with probability 0.01, else greedy on the cross-learned means
EPS2 = "epsilon-greedy-2pct"          # the same with probability 0.02
DEPS = "discounted-epsilon-greedy"    # epsilon-greedy (0.1) on discounted means (discount 0.99): tracks a switch
STATED = "cross-learning-stated-rate"   # session 10: the algorithm at eta_scale 1 on the tail instances (reported)
CONTROL_ARGS = {ETC2: ("explore-then-commit", dict(explore=0.02)), EPS1: ("epsilon-greedy", dict(explore=0.01)),
                EPS2: ("epsilon-greedy", dict(explore=0.02)),
                DEPS: ("discounted-epsilon-greedy", dict(explore=0.1, discount=0.99))}
UNTUNED = (UNIFORM, GREEDY, FTL, ETC2, EPS1, EPS2, DEPS, STATED)   # learners without a tuned rate
BASELINES = ("known-distribution", "per-context-exp3", PROP, GAMMA0, UNIFORM, T23, UNIFORM_NU, GREEDY, FTL, ETC2, EPS1,
             EPS2, DEPS, STATED)
ENVS = ("contextual", "skewed", "switching", "alternating")
TAIL_ENVS = ("switching", "alternating")   # session 9: the tail claim takes the worse of the two
SOURCE_HP = ("abstract: 'we present a novel, in-depth analysis of their algorithm and demonstrate that it actually "
             "achieves near-optimal regret with high probability' (O~(sqrt(K T log(1/delta))))")
SOURCE_NU = ("abstract: 'Balseiro et al. (2019) ... achieves near-optimal regret under the assumption that the "
             "context distribution is known in advance. However, this assumption is often unrealistic. ... Schneider & "
             "Zimmert (2023) ... [their algorithm] actually achieves near-optimal regret with high probability' "
             "(O~(sqrt(K T log(1/delta))) without knowing nu)")
SOURCE_TAIL = ("abstract: 'expected regret can be significantly weaker than high-probability bounds ... it actually "
               "achieves near-optimal regret with high probability': regret <= O~(sqrt(K T log(1/delta))) w.p. 1 - delta")
DELTA_TAIL = 0.01   # the tail claim's delta: the 99th percentile
LEVEL_MAX = 1.0     # assumed: the constant of the tail claim's level, q99 <= 1 x sqrt(K T ln(1/delta))
SOURCE_C = ("abstract (Schneider & Zimmert, the algorithm analysed): 'nearly tight ... regret bound of O~(sqrt(TK)), "
            "independent of the number of contexts'")
EXPONENT_TOL = 0.1
SQRT_T = 0.5   # the bound's exponent in T: O~(sqrt(K T log(1/delta)))
# the rate claim's growth ratio q95(4T) / q95(T): sqrt(T) gives 2, T^(2/3) gives 4^(2/3) = 2.52; the threshold
# is their geometric midpoint 4^(7/12) = 2.245 (sqrt(T ln T) gives 2.21 from T = 500 to 2000, 2.18 from 2000 to 8000)
RATIO_MAX = 4.0 ** ((0.5 + 2 / 3) / 2)
EXTEND = 6   # session 5: two extensions left the known-distribution learner on the top edge (32)
TUNE_TIE = (0.0, 0.1)   # q95 tuning scores within 10% of the best are tied (10 tuning runs: noise-level)


def nearest_stated_rate(setting: Mapping[str, Any]) -> float:
    """Tie-break key of the tuning: among tied ``eta_scale`` values the one nearest (in log) to 1, the
    stated rate, wins (a flat score curve then stays at the paper's rate instead of the grid's edge)."""
    return abs(math.log(float(setting["eta_scale"])))
GAMMA0_FLOOR = 1e-12   # "gamma = 0": a floor that keeps 1 / fhat finite where fhat underflows to 0

_GRID = [0.5, 1.0, 2.0, 4.0, 8.0]
# session 8: warmup (the contextual instance's first quarter of rounds has equal losses: its first epoch costs 0),
# skew_contexts / frequent (the skewed-nu instance: one context of probability 0.8 and skew_contexts - 1 rare ones),
# switch (the tail instance switches its best action at 0.3 T)
_NEW = dict(warmup=0.25, frequent=0.8, switch=0.3)
SIZES = {
    "tiny": dict(horizons=[150, 300], tune_horizon=150, runs=8, chunk_runs=4, tune_runs=4, contexts=[2, 16, 256],
                 context_actions=4, eta_grid=_GRID, instance_seed=0, q=95, tail_runs=16, tail_chunk=8,
                 tail_horizons=[150, 300], skew_contexts=16, skew_horizons=[150, 600], stated_rate_tail=True, **_NEW),
    "quick": dict(horizons=[250, 500, 1000, 2000], tune_horizon=1000, runs=40, chunk_runs=20, tune_runs=10,
                  contexts=[2, 32, 1024], context_actions=4, eta_grid=_GRID, instance_seed=0, q=95, tail_runs=200,
                  tail_chunk=100, tail_horizons=[500, 1000, 2000], skew_contexts=64, skew_horizons=[500, 2000, 8000],
                  **_NEW),
    "full": dict(horizons=[1000, 2000, 4000, 8000], tune_horizon=2000, runs=100, chunk_runs=50, tune_runs=50,
                 contexts=[2, 64, 1024], context_actions=4, eta_grid=_GRID, instance_seed=0, q=95, tail_runs=1000,
                 tail_chunk=200, tail_horizons=[1000, 2000, 4000], skew_contexts=64,
                 skew_horizons=[2000, 8000, 32000], stated_rate_tail=True, **_NEW),
}


def make_env(kind: str, size: int, horizon: int, config: Mapping[str, Any]) -> cl.CrossLearningEnv:
    """``("contextual", C)`` (with the warm-up), ``("skewed", C)`` (mixed best actions), ``("switching", C)`` or
    ``("alternating", C)`` at ``horizon``
    (fixed instance seed)."""
    seed, K = int(config["instance_seed"]), int(config["context_actions"])
    if kind == "contextual":
        return cl.contextual_best_arm(size, K, horizon, seed, warmup=float(config["warmup"]))
    if kind == "skewed":   # session 9: the best action differs by context (mixed)
        return cl.skewed_contexts(size, K, horizon, seed, frequent=float(config["frequent"]), mixed=True)
    if kind == "switching":
        return cl.switching_best_arm(size, K, horizon, seed, switch=float(config["switch"]))
    if kind == "alternating":   # session 9: the first phase of switching_best_arm, then the alternating losses
        return cl.alternating_switch(size, K, horizon, seed, switch=float(config["switch"]))
    raise ValueError(f"unknown environment {kind!r}")


def run_chunk(item: tuple, config: Mapping[str, Any]) -> dict:
    """One work item ``(study, env kind, env size, learner, horizon, eta_scale, chunk, runs, seed)``;
    the learner ``cross-learning-gamma0`` is cross-learning with ``gamma = 0``, ``cross-learning-T23`` is
    cross-learning with its rate decaying as ``T^(-2/3)``, equal to ``eta_scale`` times the stated rate at
    ``tune_horizon`` (``default_config(rate_exponent=2/3, anchor_horizon=tune_horizon)``)."""
    study, kind, size, method, horizon, scale, chunk, runs, seed = item
    env = make_env(kind, size, horizon, config)
    # session 10: on the tail instances the regret against each phase's best action too (one switch)
    ph = dict(phases=[switch_round(horizon, config)]) if kind in TAIL_ENVS else {}
    if method == GAMMA0:
        cfg = cl.default_config(env.n_actions, env.horizon, scale)
        res = cl.simulate(env, METHOD, runs, seed, points=10,
                          config=cl.LearnerConfig(eta=cfg.eta, gamma=GAMMA0_FLOOR, epoch_length=cfg.epoch_length), **ph)
    elif method == T23:
        res = cl.simulate(env, METHOD, runs, seed, points=10, eta_scale=scale, rate_exponent=2 / 3,
                          anchor_horizon=int(config["tune_horizon"]), **ph)
    elif method == STATED:
        res = cl.simulate(env, METHOD, runs, seed, points=10, eta_scale=1.0, **ph)
    elif method in CONTROL_ARGS:
        base, kw = CONTROL_ARGS[method]
        res = cl.simulate(env, base, runs, seed, points=10, **kw, **ph)
    else:
        res = cl.simulate(env, method, runs, seed, points=10, eta_scale=scale, **ph)
    phase = {} if res.phase_regret is None else {"phase_regret": res.phase_regret.tolist()}
    return {"study": study, "env": env.name, "kind": kind, "size": size, "method": method, "horizon": horizon,
            "scale": scale, "chunk": chunk, "regret": res.regret.tolist(), "curve": res.curve.tolist(),
            "checkpoints": res.checkpoints.tolist(), "K": env.n_actions, "C": env.n_contexts, **phase}


def switch_round(horizon: int, config: Mapping[str, Any]) -> int:
    """The round where the tail instances switch: ``floor(switch T)`` (``switching_best_arm``, ``alternating_switch``)."""
    return int(math.floor(float(config["switch"]) * int(horizon)))


def _validate(config: Mapping[str, Any]) -> None:
    for key in ("runs", "chunk_runs", "tune_runs", "tail_runs", "tail_chunk", "tune_horizon"):
        if int(config[key]) < 1:
            raise ValueError(f"{key} must be >= 1, got {config[key]}")
    if int(config["context_actions"]) < 2:
        raise ValueError(f"context_actions (K) must be >= 2, got {config['context_actions']}")
    for total, chunk in (("runs", "chunk_runs"), ("tail_runs", "tail_chunk")):
        if int(config[total]) % int(config[chunk]):
            raise ValueError(f"{total} ({config[total]}) must be a multiple of {chunk} ({config[chunk]})")
    for key in ("horizons", "tail_horizons", "skew_horizons"):
        hs = list(config[key])
        if len(hs) < 2 or len(set(hs)) != len(hs) or any(int(h) < 1 for h in hs):
            raise ValueError(f"{key} must list at least two distinct horizons >= 1, got {hs}")
    cs = [int(c) for c in config["contexts"]]
    if len(cs) < 2 or len(set(cs)) != len(cs) or any(c < 1 for c in cs):
        raise ValueError(f"contexts must list at least two distinct context counts >= 1, got {config['contexts']}")
    grid = [float(g) for g in config["eta_grid"]]
    if 1.0 not in grid or any(g <= 0 for g in grid) or len(grid) < 2:
        raise ValueError(f"eta_grid must hold >= 2 values > 0 including 1 (the stated rate), got {config['eta_grid']}")
    if int(config["skew_contexts"]) < 2:
        raise ValueError(f"skew_contexts must be >= 2, got {config['skew_contexts']}")
    if not 0 <= float(config["warmup"]) < 1:
        raise ValueError(f"warmup must be a fraction in [0, 1), got {config['warmup']}")
    for key in ("frequent", "switch"):
        if not 0 < float(config[key]) < 1:
            raise ValueError(f"{key} must be a fraction in (0, 1), got {config[key]}")
    if not 50 <= float(config["q"]) < 100:
        raise ValueError(f"q must be a percentile in [50, 100), got {config['q']}")


def growth_exponent(horizons, values) -> float:
    """Least-squares slope of ``log value`` on ``log T`` (``nan`` if a value is not positive)."""
    v = np.asarray(values, dtype=float)
    if np.any(v <= 0):
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(horizons, dtype=float)), np.log(v), 1)[0])


def growth_ratio_4x(horizons, values) -> float:
    """The regret's growth per factor 4 in ``T`` at the top of the horizons: ``(q(T_max) / q(T_lo))^(ln 4 /
    ln(T_max / T_lo))`` with ``T_lo`` the largest horizon ``<= T_max / 4`` (the smallest if none), i.e.
    ``q(4T) / q(T)`` when both are run; ``sqrt(T)`` gives 2, ``T^(2/3)`` 2.52. An additive offset
    ``a + b T^p`` pulls it below ``4^p`` less at large ``T`` than over the whole range (``nan`` if a value
    is not positive)."""
    hs = np.asarray(horizons, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(hs)
    hs, v = hs[order], v[order]
    if np.any(v <= 0) or hs.size < 2:
        return float("nan")
    below = np.nonzero(hs <= hs[-1] / 4)[0]
    lo = int(below[-1]) if below.size else 0
    return float((v[-1] / v[lo]) ** (math.log(4.0) / math.log(hs[-1] / hs[lo])))


def _learners(kind: str = "contextual") -> tuple[str, ...]:
    """The horizon study's learners per instance (the gamma = 0 variant runs in the tail study only)."""
    if kind == "skewed":
        return SKEW_LEARNERS
    return (METHOD, "known-distribution", PROP, "per-context-exp3", UNIFORM, T23)


TAIL_LEARNERS = (METHOD, GAMMA0, UNIFORM, GREEDY, FTL, DEPS)   # the tail study's learners (on both TAIL_ENVS)


def tail_learners(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The tail study's learners; with ``stated_rate_tail`` (tiny and full; quick leaves it out for time) also the
    algorithm at the stated rate, ``eta_scale`` 1 (reported, session 10: R3 found the claim rests on the tuned
    rate)."""
    return TAIL_LEARNERS + ((STATED,) if config.get("stated_rate_tail", False) else ())
SKEW_LEARNERS = (METHOD, PROP, UNIFORM_NU, "known-distribution", UNIFORM, GREEDY, FTL, ETC2, EPS1,
                 EPS2)   # the skewed-nu study's
TUNED = (METHOD, "known-distribution", PROP, "per-context-exp3")   # uniform play has no rate to tune


CONTEXT_LEARNERS = (METHOD, PROP, "per-context-exp3")   # the context study's learners (tuned at every C)


def _tune(config, tune_seeds, sizes, T_tune, q, skew_c):
    """``rayml.evidence.tune`` of every (contexts C, learner)'s ``eta_scale`` on tuning seeds
    (``tune_seeds[j]`` for the j-th largest C, from ``evidence.split_seeds``: apart from the test
    seeds; shared by the C's learners and grid points), scored by the
    q-th percentile regret at ``tune_horizon`` (``eta_scale`` multiplies ``sqrt(1 / T)``, so it
    carries over to the other horizons): every learner of the horizon and tail studies at the most
    contexts, cross-learning and per-context EXP3 at each smaller C of the context study, the skewed study's
    learners on the skewed instance and the tail study's on each tail instance (each instance tuned on
    its own: a rate carries over between horizons, not between instances). Returns
    the choices and the pilot's paired differences (per-context EXP3 minus cross-learning at the
    most contexts, at the chosen scales)."""
    many = sizes[-1]
    seed_of = {c: tune_seeds[j] for j, c in enumerate(reversed(sizes))}
    finals: dict = {}

    def evaluate(items):
        tasks = [("tune", p[0], p[1], p[2], T_tune, s["eta_scale"], 0, int(config["tune_runs"]),
                  seed_of.get(p[1], tune_seeds[0])) for p, s in items]
        out = runtime.pmap(run_chunk, tasks, shared=dict(config), desc="cross-learning tuning")
        for (p, s), o in zip(items, out):
            finals[(p, s["eta_scale"])] = np.array(o["regret"])
        return [float(np.percentile(o["regret"], q)) for o in out]

    axis = {"eta_scale": [float(g) for g in config["eta_grid"]]}
    grids = {("contextual", many, m): axis for m in TUNED}
    grids.update({("contextual", c, m): axis for c in sizes[:-1] for m in CONTEXT_LEARNERS})
    grids.update({("skewed", skew_c, m): axis for m in SKEW_LEARNERS if m not in UNTUNED})
    grids.update({(k, many, m): axis for k in TAIL_ENVS for m in (METHOD, GAMMA0)})
    choices = evidence.tune(evaluate, grids, paper={"eta_scale": 1.0}, extend=EXTEND, limits={"eta_scale": (1e-3, 1e4)},
                            tie=TUNE_TIE, tie_break=nearest_stated_rate)
    pick = lambda m: finals[(("contextual", many, m), choices[("contextual", many, m)].setting["eta_scale"])]  # noqa: E731
    return choices, pick("per-context-exp3") - pick(METHOD)


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune every learner's rate on held-out seeds, then the horizon, context and tail studies, all as pmap tasks."""
    _validate(config)
    n_chunks = int(config["runs"]) // int(config["chunk_runs"])
    per, q = int(config["chunk_runs"]), float(config["q"])
    sizes = sorted(int(c) for c in config["contexts"])
    chunk_seeds, tune_seeds = evidence.split_seeds(seed, n_chunks, len(sizes))
    horizons = sorted(int(h) for h in config["horizons"])
    T_max = horizons[-1]
    many = sizes[-1]
    skew_c = int(config["skew_contexts"])
    envs = [("contextual", many), ("skewed", skew_c)]
    choices, pilot = _tune(config, tune_seeds, sizes, int(config["tune_horizon"]), q, skew_c)
    chosen = {k: c.setting["eta_scale"] for k, c in choices.items()}
    for key in [("contextual", many, UNIFORM)] + [(k, n, m) for k, n in (("skewed", skew_c), ("switching", many),
                                                                         ("alternating", many)) for m in UNTUNED]:
        chosen[key] = 1.0   # ignored: uniform play and the greedy-like controls have no rate; STATED plays 1
    # the T^(2/3) control equals the algorithm at tune_horizon (same rate there, same tuning seeds), so the same
    # grid gives it the same choice: it is not tuned twice
    chosen[("contextual", many, T23)] = chosen[("contextual", many, METHOD)]

    # session 10: the skewed instance runs at its own horizons (R3: linear-regret controls pass over 250 .. 2000)
    hz = {"contextual": horizons, "skewed": sorted(int(h) for h in config["skew_horizons"])}
    items = [("horizon", kind, size, m, h, chosen[(kind, size, m)], i, per, s) for kind, size in envs
             for m in _learners(kind) for h in hz[kind] for i, s in enumerate(chunk_seeds)]
    items += [("contexts", "contextual", c, m, T_max, chosen[("contextual", c, m)], i, per, s)
              for c in sizes[:-1] for m in CONTEXT_LEARNERS for i, s in enumerate(chunk_seeds)]
    tail_per = int(config["tail_chunk"])
    tail_seeds = runtime.seeds(np.random.SeedSequence([seed, 2]), int(config["tail_runs"]) // tail_per)
    tail_hs = sorted(int(h) for h in config["tail_horizons"])
    T_tail = tail_hs[-1]
    items += [("tail", kind, many, m, h, chosen[(kind, many, m)], i, tail_per, s)
              for kind in TAIL_ENVS for m in tail_learners(config) for h in tail_hs for i, s in enumerate(tail_seeds)]
    out = runtime.pmap(run_chunk, items, shared=dict(config), desc="cross-learning runs")
    # the many-context point of the context study is the horizon study's contextual run at T_max
    out += [{**r, "study": "contexts"} for r in out if r["study"] == "horizon" and r["kind"] == "contextual"
            and r["horizon"] == T_max and r["method"] in CONTEXT_LEARNERS]

    rows, curve_rows, summary = [], [], {}
    groups: dict[tuple, list] = {}
    for r in out:
        key = (r["study"], r["kind"], r["size"], r["method"], r["horizon"])
        groups.setdefault(key, []).append(r)
        level = ("most" if r["size"] == many else "fewer") if r["study"] == "contexts" else ""
        n = tail_per if r["study"] == "tail" else per
        for j, v in enumerate(r["regret"]):
            rows.append({"study": r["study"], "env": r["kind"], "contexts": r["C"], "context_level": level,
                         "method": r["method"], "horizon": r["horizon"], "run": r["chunk"] * n + j,
                         "metric": "regret", "value": v})
    for key, rs in groups.items():
        study, kind, size, method, horizon = key
        rs = sorted(rs, key=lambda r: r["chunk"])
        reg = np.concatenate([r["regret"] for r in rs])
        summary[key] = {"q": float(np.percentile(reg, q)), "median": float(np.median(reg)),
                        "q99": float(np.percentile(reg, 99)), "mean": float(reg.mean()), "K": rs[0]["K"],
                        "C": rs[0]["C"]}
        if "phase_regret" in rs[0]:   # session 10: the tail instances' regret against each phase's best action
            preg = np.concatenate([r["phase_regret"] for r in rs])
            summary[key].update(pq99=float(np.percentile(preg, 99)), pmedian=float(np.median(preg)),
                                cushion=float(np.mean(preg - reg)))
        if study == "tail":
            continue
        curves = np.concatenate([np.asarray(r["curve"]) for r in rs])
        for j, t in enumerate(rs[0]["checkpoints"]):
            for stat, val in (("median", np.median(curves[:, j])), ("q05", np.percentile(curves[:, j], 5)),
                              (f"q{q:g}", np.percentile(curves[:, j], q))):
                curve_rows.append({"study": study, "env": kind, "contexts": rs[0]["C"], "method": method,
                                   "horizon": horizon, "t": int(t), "metric": stat, "value": float(val)})

    def method_metrics(m: str) -> dict:
        d: dict[str, Any] = {"eta_scale": {(f"C={k[1]}" if k[0] == "contextual" else f"{k[0]} C={k[1]}"): v
                                           for k, v in chosen.items() if k[2] == m and m not in UNTUNED}}
        for kind, size in envs:
            if m not in _learners(kind):
                continue
            hs_k = hz[kind]
            qs = [summary[("horizon", kind, size, m, h)]["q"] for h in hs_k]
            K, C = summary[("horizon", kind, size, m, hs_k[-1])]["K"], summary[("horizon", kind, size, m, hs_k[-1])]["C"]
            d[f"q{q:g}_regret_{kind}"] = {str(h): v for h, v in zip(hs_k, qs)}
            d[f"median_regret_{kind}"] = {str(h): summary[("horizon", kind, size, m, h)]["median"] for h in hs_k}
            d[f"exponent_{kind}"] = growth_exponent(hs_k, qs)
            d[f"growth_ratio_4x_{kind}"] = growth_ratio_4x(hs_k, qs)
            d[f"q_over_sqrt_KTlnK_{kind}"] = qs[-1] / math.sqrt(K * hs_k[-1] * math.log(K))
            d[f"q_final_{kind}"] = qs[-1]
            d[f"contexts_{kind}"] = C
        if m in CONTEXT_LEARNERS:
            cq = [summary[("contexts", "contextual", c, m, T_max)]["q"] for c in sizes]
            d["q_by_contexts"] = {str(c): v for c, v in zip(sizes, cq)}
            d["exponent_in_contexts"] = growth_exponent(sizes, cq)
            d["abs_exponent_in_contexts"] = abs(d["exponent_in_contexts"])
            d["q_most_contexts"] = cq[-1]
        if m in tail_learners(config):
            K_t = int(config["context_actions"])
            level = lambda h: math.sqrt(K_t * h * math.log(1 / DELTA_TAIL))  # noqa: E731
            for kind in TAIL_ENVS:
                sm = lambda h: summary[("tail", kind, many, m, h)]  # noqa: E731
                t, q99s = sm(T_tail), [sm(h)["q99"] for h in tail_hs]
                sfx = "" if kind == "switching" else f"_{kind}"
                d["tail" + sfx] = {
                    "q99": t["q99"], "median": t["median"], "mean": t["mean"], "runs": int(config["tail_runs"]),
                    "horizon": T_tail, "q99_by_horizon": {str(h): v for h, v in zip(tail_hs, q99s)},
                    "median_by_horizon": {str(h): sm(h)["median"] for h in tail_hs},
                    "max": float(max(max(r["regret"]) for r in out if r["study"] == "tail" and r["kind"] == kind
                                     and r["method"] == m and r["horizon"] == T_tail)),
                    "q99_over_level_by_horizon": {str(h): sm(h)["q99"] / level(h) for h in tail_hs},
                    "spread_over_level_by_horizon": {str(h): (sm(h)["q99"] - sm(h)["median"]) / level(h)
                                                     for h in tail_hs},
                    # session 10: against each phase's best action (one switch); the cushion is the fixed
                    # comparator's loss minus the per-phase comparator's, on the same rounds (>= 0)
                    "phase_q99": t["pq99"], "phase_median": t["pmedian"],
                    "phase_q99_over_level_by_horizon": {str(h): sm(h)["pq99"] / level(h) for h in tail_hs},
                    "cushion_over_level_by_horizon": {str(h): sm(h)["cushion"] / level(h) for h in tail_hs}}
                # session 8: the tail at a level, q99 in units of sqrt(K T ln(1 / 0.01)) at the largest tail T; the
                # spread q99 - median in the same units is reported (the first session-8 quick run claimed it:
                # uniform play, which concentrates around a linear regret, passed it)
                d["tail_q99_over_level" + sfx] = t["q99"] / level(T_tail)
                d["tail_spread_over_level" + sfx] = (t["q99"] - t["median"]) / level(T_tail)
                d["q99_exponent_tail" + sfx] = growth_exponent(tail_hs, q99s)   # described, no longer a claim
                d["tail_phase_q99_over_level" + sfx] = t["pq99"] / level(T_tail)   # session 10: the claim's form
            # session 9: the claim takes the worse of the two tail instances (the bound holds for every oblivious
            # sequence; each instance is built against one failure: gamma = 0 on switching, follow-the-leader on
            # alternating)
            d["tail_q99_over_level_worst"] = max(d["tail_q99_over_level" + ("" if k == "switching" else f"_{k}")]
                                                 for k in TAIL_ENVS)
            d["tail_phase_q99_over_level_worst"] = max(
                d["tail_phase_q99_over_level" + ("" if k == "switching" else f"_{k}")] for k in TAIL_ENVS)
        return d

    metrics = method_metrics(METHOD)
    baselines = {b: method_metrics(b) for b in BASELINES}
    known_exp = baselines["known-distribution"]["exponent_contextual"]
    for block in (metrics, baselines["per-context-exp3"], baselines[PROP], baselines[UNIFORM]):
        block["exponent_gap_to_known"] = abs(block["exponent_contextual"] - known_exp)
    K_c = int(config["context_actions"])
    metrics["epoch_length_at_T_max"] = int(math.ceil(math.sqrt(K_c * T_max)))
    metrics["eta_on_edge_count"] = sum(bool(c.edges) for c in choices.values())
    budget = {"rounds": horizons, "skew_rounds": hz["skewed"], "runs_per_setting": int(config["runs"]), "tail_runs": int(config["tail_runs"]),
              "tail_horizons": tail_hs,
              "tasks": len(items), "percentile": q, "tune_horizon": int(config["tune_horizon"]),
              "tuning": {"/".join(map(str, k)): c.summary() for k, c in choices.items()}, "tuning_runs": int(config["tune_runs"]),
              "power_vs_per_context_exp3": evidence.power_from_pilot(pilot, test="sign"),
              "step_sizes": "eta = eta_scale sqrt(ln K / (K T)), gamma = eta / 2 (0 for cross-learning-gamma0), "
                            "L = ceil(sqrt(K T)); per-context EXP3: eta_c = eta_scale sqrt(ln K / (K n_c)); "
                            f"{T23}: eta = eta_scale sqrt(ln K / (K T_a)) (T_a / T)^(2/3), T_a = tune_horizon, "
                            "eta_scale = cross-learning's (the two are the same learner at T_a)"}
    # per number of contexts: cross-learning against per-context EXP3 and against the propensity-weighted
    # control, paired over runs (a description beside the claims, rayml.evidence.per_case)
    ctx_rows = [r for r in rows if r["study"] == "contexts"]
    per_c = [{"versus": other, **row} for other in ("per-context-exp3", PROP)
             for row in evidence.per_case(ctx_rows, a={"method": METHOD}, b={"method": other}, by=("contexts",),
                                          pair_on=("run",), test="paired sign test over seeds")]
    metrics["by_contexts"] = {f"vs {r['versus']} at C={r['contexts']}": {k: r[k] for k in
                              ("median_a", "median_b", "wins", "losses", "p_value")} for r in per_c}
    tuning = evidence.tuning_rows(choices, keys=("env", "contexts", "method"), metric=f"tuning_q{q:g}_regret")
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"runs": rows, "curves": curve_rows, "tuning": tuning, "by_contexts": per_c}, budget=budget)


_PER = "baselines.per-context-exp3"


def _unlearned(metric: str) -> tuple:
    """Session 9: the learners without exploration or rate (greedy, follow-the-leader) and uniform play, as controls
    of ``metric``: a claim that one of them passes does not single out the algorithm."""
    return (Control("greedy (empirical mean, no exploration)", f"baselines.{GREEDY}.{metric}"),
            Control("follow-the-leader (cumulative loss)", f"baselines.{FTL}.{metric}"),
            Control("uniform play", f"baselines.{UNIFORM}.{metric}"))


CLAIMS = evidence.gate(
    Claim(text="many contexts: the contextual instance has more contexts C than rounds per epoch L = sqrt(K T) at the "
               "largest T (a context is seen a handful of times)",
          metric="metrics.contexts_contextual", compare="metrics.epoch_length_at_T_max", op=">", kind="sanity"),
    Claim(text="with probability 0.95 the regret is O~(sqrt(T)), not T^(2/3): the 95th-percentile regret grows by "
               "at most 4^(7/12) = 2.245 per factor 4 in T at the largest horizons (sqrt T: 2, T^(2/3): 2.52), C >> L, "
               "on the instance whose first quarter of rounds has equal losses (the first epoch costs 0 regret); "
               "controls: uniform play (learns nothing: 4), per-context EXP3, the propensity-weighted cross-learner "
               "and the same algorithm at a T^(-2/3) rate (a T^(2/3) learner: must fail)",
          metric="metrics.growth_ratio_4x_contextual", compare=RATIO_MAX, op="<=", source=SOURCE_HP,
          controls=(Control("uniform play", f"baselines.{UNIFORM}.growth_ratio_4x_contextual"),
                    Control("per-context-exp3", f"{_PER}.growth_ratio_4x_contextual"),
                    Control(f"{PROP} (no epochs, no marginal)", f"baselines.{PROP}.growth_ratio_4x_contextual"),
                    Control("T^(-2/3) rate (a T^(2/3) learner)", f"baselines.{T23}.growth_ratio_4x_contextual"))),
    Claim(text="without knowing nu, also where nu is skewed: on the skewed instance (one context of probability 0.8; "
               "the best action differs by context, so no context-free learner wins) the 95th-percentile regret "
               "grows by at most 4^(7/12) = 2.245 per factor 4 in T at the instance's largest horizons (quick "
               "2000 -> 8000, full 8000 -> 32000); controls: the "
               "propensity-weighted cross-learner (importance weight pi(A | c_t): must fail), Balseiro et al.'s "
               "learner with a uniform guess of nu (the learner that needs nu, run without it: must fail), greedy on "
               "the empirical mean and follow-the-leader (no exploration: must fail), uniform play, and three "
               "linear-regret learners (explore-then-commit with a 2% uniform share, epsilon-greedy with epsilon "
               "0.01 and 0.02, all on the cross-learned means: must fail)",
          metric="metrics.growth_ratio_4x_skewed", compare=RATIO_MAX, op="<=", source=SOURCE_NU,
          controls=(Control(f"{PROP} (no epochs, no marginal)", f"baselines.{PROP}.growth_ratio_4x_skewed"),
                    Control("known-distribution learner with a uniform guess of nu",
                            f"baselines.{UNIFORM_NU}.growth_ratio_4x_skewed"),
                    *_unlearned("growth_ratio_4x_skewed"),
                    Control("explore-then-commit (2% uniform, then greedy)", f"baselines.{ETC2}.growth_ratio_4x_skewed"),
                    Control("epsilon-greedy (epsilon 0.01)", f"baselines.{EPS1}.growth_ratio_4x_skewed"),
                    Control("epsilon-greedy (epsilon 0.02)", f"baselines.{EPS2}.growth_ratio_4x_skewed"))),
    Claim(text="with probability 0.99 (the tail, at a level): the 99th-percentile regret, measured against each "
               "phase's best action (a one-switch comparator, stronger than the paper's best fixed policy: the fixed "
               "comparator loses 0.15 T before the switch, a cushion any switch-tracking learner collects), is at most "
               "sqrt(K T ln(1/0.01)) at the largest tail horizon (the bound's sqrt(K T log(1/delta)) with constant 1) "
               "on both tail instances, each built against one failure: the switching instance (action 0 best until "
               "0.3 T, then action 1: f_t(1) collapses first) and the alternating-switch instance (the same first "
               "phase, then actions 1 and 2 alternate losses 1 / 0, the classic sequence against follow-the-leader); "
               "the metric is the worse of the two; controls: the same algorithm with gamma = 0 (no implicit "
               "exploration), greedy on the empirical mean, follow-the-leader, uniform play and epsilon-greedy (0.1) "
               "on discounted means (discount 0.99, a switch tracker without a regret bound; all must fail)",
          metric="metrics.tail_phase_q99_over_level_worst", compare=LEVEL_MAX, op="<=", source=SOURCE_TAIL,
          controls=(Control("gamma = 0 (no implicit exploration)",
                            f"baselines.{GAMMA0}.tail_phase_q99_over_level_worst"),
                    *_unlearned("tail_phase_q99_over_level_worst"),
                    Control("discounted epsilon-greedy (0.1, discount 0.99)",
                            f"baselines.{DEPS}.tail_phase_q99_over_level_worst"))),
    Claim(text="the 95th-percentile regret does not grow with the number of contexts: fitted exponent in C at most "
               "0.1 (C from 2 to >> L)",
          metric="metrics.exponent_in_contexts", compare=EXPONENT_TOL, op="<=", source=SOURCE_C,
          controls=(Control("per-context-exp3", f"{_PER}.exponent_in_contexts"),
                    Control(f"{PROP} (no epochs, no marginal)", f"baselines.{PROP}.exponent_in_contexts"))),
    Claim(text="with C >> L contexts the regret is below per-context EXP3's (paired over runs)",
          metric="metrics.q_most_contexts", compare=f"{_PER}.q_most_contexts", op="<",
          test="paired sign test over seeds", table="runs",
          a={"study": "contexts", "method": METHOD, "context_level": "most"},
          b={"study": "contexts", "method": "per-context-exp3", "context_level": "most"}, pair_on=("run",),
          source=SOURCE_C,
          controls=(Control(f"{PROP} (no epochs, no marginal)", f"baselines.{PROP}.q_most_contexts",
                            a={"study": "contexts", "method": PROP, "context_level": "most"}),)),
) + (
    Claim(text="tuning: no learner's eta_scale lies on an edge of its grid {0.5 .. 8} (extended up to six times), ties "
               "within 10% broken towards the stated rate 1",
          metric="metrics.eta_on_edge_count", compare=0, op="<=", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """q95 and median regret against T (log-log, 5-95% band), and q95 against the number of contexts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q = record["config"]["q"]
    rows = record["tables"]["runs"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    hs = sorted({r["horizon"] for r in rows if r["study"] == "horizon"})
    for m in _learners():
        vals = [np.array([r["value"] for r in rows if r["study"] == "horizon" and r["env"] == "contextual"
                          and r["method"] == m and r["horizon"] == h]) for h in hs]
        line, = ax.plot(hs, [np.percentile(v, q) for v in vals], "o-", label=f"{m} q{q:g}")
        ax.plot(hs, [np.median(v) for v in vals], "--", color=line.get_color(), alpha=0.7)
        ax.fill_between(hs, [np.percentile(v, 5) for v in vals], [np.percentile(v, q) for v in vals],
                        color=line.get_color(), alpha=0.15)
    hs = np.array(hs, dtype=float)
    ax.plot(hs, np.sqrt(hs) * (ax.get_ylim()[1] / np.sqrt(hs[-1])) * 0.5, "k:", label="~ sqrt(T)")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_title(f"C >> L: regret (q{q:g} solid, median dashed, 5-q{q:g} band)", fontsize=9)
    ax.set_xlabel("T")
    ax.legend(fontsize=7)
    ax = axes[1]
    cs = sorted({r["contexts"] for r in rows if r["study"] == "contexts"})
    for m in CONTEXT_LEARNERS:
        vals = [np.array([r["value"] for r in rows if r["study"] == "contexts" and r["method"] == m
                          and r["contexts"] == c]) for c in cs]
        line, = ax.plot(cs, [np.percentile(v, q) for v in vals], "o-", label=m)
        ax.fill_between(cs, [np.percentile(v, 5) for v in vals], [np.percentile(v, q) for v in vals],
                        color=line.get_color(), alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel("number of contexts C")
    ax.set_title(f"contextual best arm at T={max(record['config']['horizons'])}: regret q{q:g}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return {"regret": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="(environment x learner x horizon x chunk of runs) as pmap tasks, and the tuning grid as pmap tasks; "
        "each task advances chunk_runs independent runs together in numpy",
    checked_against="abstracts of Huang & Huang (ICML 2025) and Schneider & Zimmert (NeurIPS 2023), "
                    "reviews and summaries (secondary); the full texts were not reachable (searched again for "
                    "issue 16), so the epoch schedule and step sizes are a documented reconstruction",
    sizes=SIZES, run=run, check=_validate, claims=CLAIMS, plots=plots,
)
