"""Cross-learning bandits: hand-computed updates, a per-run loop reference, oracle, bad input, determinism."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rayml.bandits import cross_learning as cl


def tiny_env(T=6):
    # 2 contexts, 3 actions, two loss tables alternating.
    tables = np.array([[[0.1, 0.5, 0.9], [0.7, 0.2, 0.4]],
                       [[0.3, 0.6, 0.0], [1.0, 0.1, 0.5]]])
    return cl.CrossLearningEnv(name="tiny", context_probs=np.array([0.3, 0.7]), allowed=np.ones((2, 3), bool),
                               tables=tables, schedule=np.arange(T) % 2)


def test_exp_weights_by_hand():
    L = np.array([[0.0, 1.0, 2.0]])
    p = cl.exp_weights(L, 0.5, np.ones((1, 3), bool))
    w = np.exp(-0.5 * np.array([0.0, 1.0, 2.0]))
    assert np.allclose(p[0], w / w.sum())
    p = cl.exp_weights(L, 0.5, np.array([[True, False, True]]))
    assert p[0, 1] == 0 and np.isclose(p[0, 0], 1 / (1 + math.exp(-1.0)))
    # per-row learning rates (per-context EXP3)
    p = cl.exp_weights(np.array([[0.0, 1.0], [0.0, 1.0]]), np.array([1.0, 2.0]), np.ones((2, 2), bool))
    assert np.isclose(p[0, 0], 1 / (1 + math.exp(-1))) and np.isclose(p[1, 0], 1 / (1 + math.exp(-2)))


def test_marginal_and_cross_learned_update_by_hand():
    # one run, 2 contexts, 2 actions
    probs = np.array([[[0.8, 0.2], [0.4, 0.6]]])
    f = cl.estimated_marginal(probs, np.array([1]), np.array([0.25, 0.75]))
    assert np.isclose(f[0], 0.25 * 0.2 + 0.75 * 0.6)
    cum = np.zeros((1, 2, 2))
    table = np.array([[0.5, 0.3], [0.9, 0.6]])
    cl.cross_learned_update(cum, np.array([1]), table, np.ones((2, 2), bool), np.array([0.5]))
    assert np.allclose(cum[0], [[0.0, 0.6], [0.0, 1.2]])  # every context's loss of the played action / 0.5
    # sleeping: a context where the action is asleep is not updated
    cum = np.zeros((1, 2, 2))
    cl.cross_learned_update(cum, np.array([1]), table, np.array([[True, True], [True, False]]), np.array([0.5]))
    assert np.allclose(cum[0], [[0.0, 0.6], [0.0, 0.0]])


def test_known_distribution_estimator_is_unbiased_exactly():
    # E over c' ~ nu and A ~ pi(.|c') of l(c, a) 1[A = a] / f(a) equals l(c, a) for every c, a.
    rng = np.random.default_rng(0)
    C, K = 4, 3
    nu = rng.dirichlet(np.ones(C))
    pi = rng.dirichlet(np.ones(K), size=C)
    loss = rng.random((C, K))
    f = nu @ pi
    expect = np.zeros((C, K))
    for cp, A in itertools.product(range(C), range(K)):
        expect[:, A] += nu[cp] * pi[cp, A] * loss[:, A] / f[A]
    assert np.allclose(expect, loss)


def test_comparator_is_the_best_policy_by_brute_force():
    env = tiny_env(T=7)
    total = env.total_losses()
    ref = sum(env.tables[env.schedule[t]] for t in range(env.horizon))
    assert np.allclose(total, ref)
    best = min(itertools.product(range(3), repeat=2),
               key=lambda pol: sum(env.context_probs[c] * total[c, pol[c]] for c in range(2)))
    assert tuple(env.comparator()) == best


def _reference_run(env, method, contexts, uniforms, cfg, coins=None, explore=None, discount=0.99, phases=None):
    """A plain per-round loop for ONE run, written from the module docstring's formulas (with ``phases``, also the
    regret against each phase's best action per context, by brute force over the phase's rounds)."""
    C, K, T = env.n_contexts, env.n_actions, env.horizon
    Lh = np.zeros((C, K))
    best = env.comparator()
    visits = np.zeros(C)
    visits_ck = np.zeros((C, K))
    prev, cur = None, []
    regret = 0.0
    phase_regret = 0.0
    if phases is not None:
        bounds = [0, *phases, T]
        phase_best = []
        for j in range(len(bounds) - 1):
            tot = sum(env.tables[env.schedule[t]] for t in range(bounds[j], bounds[j + 1]))
            phase_best.append([min((b for b in range(K) if env.allowed[x, b]), key=lambda b: (tot[x, b], b))
                               for x in range(C)])

    def policy(row, eta, allowed):
        w = np.array([math.exp(-eta * (row[a] - row[allowed].min())) if allowed[a] else 0.0 for a in range(K)])
        return w / w.sum()

    def draw(p, u):
        cdf = np.cumsum(p)
        return int(min(np.sum(u * cdf[-1] >= cdf), K - 1))

    for t in range(T):
        table = env.tables[env.schedule[t]]
        c = contexts[t]
        if method == "uniform":
            a = draw(env.allowed[c] / env.allowed[c].sum(), uniforms[t])
        elif method in ("explore-then-commit", "epsilon-greedy", "discounted-epsilon-greedy"):
            eps = explore if explore is not None else cl.DEFAULT_EXPLORE[method]
            if method == "discounted-epsilon-greedy":   # discount every stored sum and count, then add
                Lh *= discount
                visits_ck *= discount
            means = [Lh[c, b] / visits_ck[c, b] if visits_ck[c, b] > 0 else -1.0 for b in range(K)]
            a = min((b for b in range(K) if env.allowed[c, b]), key=lambda b: (means[b], b))
            uniform = method == "explore-then-commit" and t < eps * T or method != "explore-then-commit" and coins[t] < eps
            if uniform:
                a = draw(env.allowed[c] / env.allowed[c].sum(), uniforms[t])
            for x in range(C):
                if env.allowed[x, a]:
                    Lh[x, a] += table[x, a]
                    visits_ck[x, a] += 1
        elif method in ("greedy", "follow-the-leader"):
            scores = []
            for b in range(K):
                if not env.allowed[c, b]:
                    scores.append(math.inf)
                elif method == "follow-the-leader":
                    scores.append(Lh[c, b])
                else:
                    scores.append(Lh[c, b] / visits_ck[c, b] if visits_ck[c, b] else -1.0)
            a = min(range(K), key=lambda b: (scores[b], b))
            for x in range(C):
                if env.allowed[x, a]:
                    Lh[x, a] += table[x, a]
                    visits_ck[x, a] += 1
        elif method == "per-context-exp3":
            visits[c] += 1
            p = policy(Lh[c], math.sqrt(math.log(K) / (K * visits[c])), env.allowed[c])
            a = draw(p, uniforms[t])
            Lh[c, a] += table[c, a] / p[a]
        else:
            pis = [policy(Lh[x], cfg.eta, env.allowed[x]) for x in range(C)]
            a = draw(pis[c], uniforms[t])
            if method == "known-distribution":
                d = sum(env.context_probs[x] * pis[x][a] for x in range(C))
            elif method == "assumed-uniform-nu":
                d = sum(pis[x][a] for x in range(C)) / C
            elif method == "propensity-weighted":
                d = pis[c][a] + cfg.gamma
            else:
                if t > 0 and t % cfg.epoch_length == 0:
                    prev, cur = cur, []
                d = None if prev is None else sum(pis[x][a] for x in prev) / len(prev) + cfg.gamma
                cur.append(c)
            if d is not None:
                for x in range(C):
                    if env.allowed[x, a]:
                        Lh[x, a] += table[x, a] / d
        regret += table[c, a] - table[c, best[c]]
        if phases is not None:
            j = sum(t >= s for s in phases)
            phase_regret += table[c, a] - table[c, phase_best[j][c]]
    return regret if phases is None else (regret, phase_regret)


@pytest.mark.parametrize("method", ["cross-learning", "known-distribution", "assumed-uniform-nu", "propensity-weighted",
                                    "per-context-exp3", "uniform", "greedy", "follow-the-leader"])
@pytest.mark.parametrize("kind", ["auction", "sleeping"])
def test_vectorised_learners_match_a_per_round_loop(method, kind):
    env = cl.first_price_auction(5, 4, 40, 3) if kind == "auction" else cl.sleeping_bandit(3, 40, 3)
    cfg = cl.LearnerConfig(eta=0.3, gamma=0.05, epoch_length=7)
    R, seed = 3, 11
    res = cl.simulate(env, method, R, seed, config=cfg)
    ctx_rng, act_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    contexts = ctx_rng.choice(env.n_contexts, size=(R, env.horizon), p=env.context_probs)
    uniforms = act_rng.random((R, env.horizon))
    ref = [_reference_run(env, method, contexts[r], uniforms[r], cfg) for r in range(R)]
    assert np.allclose(res.regret, ref)
    assert np.allclose(res.curve[:, -1], res.regret)


@pytest.mark.parametrize("method,explore", [("explore-then-commit", 0.2), ("epsilon-greedy", 0.3),
                                            ("discounted-epsilon-greedy", 0.3), ("explore-then-commit", None),
                                            ("greedy", None), ("cross-learning", None)])
@pytest.mark.parametrize("kind", ["auction", "sleeping", "switching"])
def test_session10_controls_and_phase_regret_match_a_per_round_loop(method, explore, kind):
    # session 10 (R3): explore-then-commit, epsilon-greedy and discounted epsilon-greedy against the per-round loop,
    # which discounts every stored sum each round (the vectorised learner re-weights instead); and the regret
    # against the per-phase comparator, brute-forced per phase
    env = {"auction": lambda: cl.first_price_auction(5, 4, 60, 3), "sleeping": lambda: cl.sleeping_bandit(3, 60, 3),
           "switching": lambda: cl.switching_best_arm(3, 4, 60, 2, switch=0.3)}[kind]()
    cfg = cl.LearnerConfig(eta=0.3, gamma=0.05, epoch_length=7)
    R, seed, phases, disc = 3, 5, [18, 40], 0.9
    res = cl.simulate(env, method, R, seed, config=cfg, explore=explore, discount=disc, phases=phases)
    ctx_rng, act_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    contexts = ctx_rng.choice(env.n_contexts, size=(R, env.horizon), p=env.context_probs)
    uniforms = act_rng.random((R, env.horizon))
    coins = act_rng.random((R, env.horizon))
    ref = [_reference_run(env, method, contexts[r], uniforms[r], cfg, coins=coins[r], explore=explore, discount=disc,
                          phases=phases) for r in range(R)]
    assert np.allclose(res.regret, [x[0] for x in ref]) and np.allclose(res.phase_regret, [x[1] for x in ref])
    assert cl.simulate(env, method, R, seed, config=cfg, explore=explore, discount=disc).phase_regret is None


def test_discounted_sums_rescale_without_changing_the_play():
    # discount 0.7 over 800 rounds passes the vectorised learner's rescaling point (0.7^-t > 1e100 near t = 646)
    env = cl.switching_best_arm(3, 4, 800, 1, switch=0.3)
    cfg = cl.default_config(4, 800)
    res = cl.simulate(env, "discounted-epsilon-greedy", 2, 9, explore=0.2, discount=0.7)
    ctx_rng, act_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(9).spawn(2))
    contexts = ctx_rng.choice(3, size=(2, 800), p=env.context_probs)
    uniforms, coins = act_rng.random((2, 800)), act_rng.random((2, 800))
    ref = [_reference_run(env, "discounted-epsilon-greedy", contexts[r], uniforms[r], cfg, coins=coins[r], explore=0.2,
                          discount=0.7) for r in range(2)]
    assert np.allclose(res.regret, ref)


def test_session10_controls_behave():
    env = cl.switching_best_arm(8, 4, 1000, 0, switch=0.3)
    # explore-then-commit with share 0 and epsilon-greedy with probability 0 are greedy; discount 1 undiscounted
    g = cl.simulate(env, "greedy", 4, 1).regret
    assert np.array_equal(cl.simulate(env, "explore-then-commit", 4, 1, explore=0.0).regret, g)
    assert np.array_equal(cl.simulate(env, "epsilon-greedy", 4, 1, explore=0.0).regret, g)
    assert np.allclose(cl.simulate(env, "discounted-epsilon-greedy", 4, 1, explore=0.1, discount=1.0).regret,
                       cl.simulate(env, "epsilon-greedy", 4, 1, explore=0.1).regret)
    # greedy never leaves action 0 after the switch (its mean stays below 0.7); the discounted learner re-learns it
    # within ~1 / (1 - discount) rounds, so its per-phase regret is far below greedy's
    ph = [300]
    gr = cl.simulate(env, "greedy", 4, 1, phases=ph).phase_regret
    dg = cl.simulate(env, "discounted-epsilon-greedy", 4, 1, explore=0.1, discount=0.99, phases=ph).phase_regret
    assert dg.max() < 0.5 * gr.min()
    # exploring with probability 1 is uniform play in expectation: regret near uniform's
    un = cl.simulate(env, "uniform", 16, 2).regret.mean()
    assert abs(cl.simulate(env, "epsilon-greedy", 16, 2, explore=1.0).regret.mean() - un) < 0.1 * abs(un)
    with pytest.raises(ValueError, match="explore"):
        cl.simulate(env, "epsilon-greedy", 2, 0, explore=1.5)
    with pytest.raises(ValueError, match="discount"):
        cl.simulate(env, "discounted-epsilon-greedy", 2, 0, discount=0.0)
    with pytest.raises(ValueError, match="phase starts"):
        cl.simulate(env, "greedy", 2, 0, phases=[0])
    with pytest.raises(ValueError, match="phase starts"):
        env.phase_comparator([500, 400])


def test_phase_comparator_by_brute_force_and_regret_shift():
    env = cl.switching_best_arm(4, 4, 200, 0, switch=0.3)
    pc = env.phase_comparator([60])
    assert pc.shape == (2, 4) and np.all(pc[0] == 0) and np.all(pc[1] == 1)
    # every context shares the loss table here, so the two regrets differ by the comparators' loss gap, the
    # static comparator's cushion before the switch (a constant, the same in every run)
    res = cl.simulate(env, "cross-learning", 5, 3, phases=[60])
    tab = env.tables[env.schedule]
    gap = float(tab[:60, 0, 1].sum() - tab[:60, 0, 0].sum())
    assert gap > 0 and np.allclose(res.phase_regret - res.regret, gap)


def test_uniform_play_regret_grows_linearly_in_T():
    from rayml.experiments.cross_learning import growth_exponent

    hs = [200, 400, 800]
    med = [np.median(cl.simulate(cl.contextual_best_arm(64, 4, h, 0), "uniform", 8, 1).regret) for h in hs]
    assert 0.9 < growth_exponent(hs, med) < 1.1                          # learns nothing: linear regret


def test_oracle_regret_is_zero_and_learners_play_allowed_actions_only():
    env = cl.sleeping_bandit(4, 300, 0)
    assert np.all(cl.simulate(env, "oracle", 5, 0).curve == 0)
    # an asleep arm is never chosen: its probability is exactly 0
    p = cl.exp_weights(np.zeros((env.n_contexts, 4)), 1.0, env.allowed)
    assert np.all(p[~env.allowed] == 0)


def test_environments():
    env = cl.first_price_auction(10, 5, 200, 1)
    assert env.tables.min() >= 0 and env.tables.max() <= 1
    assert env.allowed[:, 0].all()  # bidding 0 is always allowed
    vals, bids = env.info["values"], env.info["bids"]
    t = 17
    m_level = env.schedule[t] / 64
    u = (vals[:, None] - bids[None, :]) * (bids[None, :] >= m_level - 1e-12)
    assert np.allclose(env.tables[env.schedule[t]][env.allowed], (1 - u)[env.allowed])
    s = cl.sleeping_bandit(3, 100, 0, p_available=[0.5, 0.5, 0.5])
    assert s.n_contexts == 7 and np.isclose(s.context_probs.sum(), 1.0)
    assert np.isclose(s.context_probs[-1], 0.125 + 0.125)  # all awake + the empty draw
    # loss of an arm is the same in every context where it is awake
    tab = s.tables[s.schedule[5]]
    for a in range(3):
        assert len(set(tab[s.allowed[:, a], a])) == 1


def test_default_config():
    cfg = cl.default_config(8, 1000)
    assert np.isclose(cfg.eta, math.sqrt(math.log(8) / 8000)) and np.isclose(cfg.gamma, cfg.eta / 2)
    assert cfg.epoch_length == math.ceil(math.sqrt(8000))


def test_same_seed_same_result():
    env = cl.first_price_auction(6, 4, 120, 0)
    a = cl.simulate(env, "cross-learning", 4, 5)
    b = cl.simulate(env, "cross-learning", 4, 5)
    assert np.array_equal(a.regret, b.regret)
    assert not np.array_equal(a.regret, cl.simulate(env, "cross-learning", 4, 6).regret)


@pytest.mark.parametrize("fn, match", [
    (lambda: cl.first_price_auction(4, 1, 10, 0), "n_bids"),
    (lambda: cl.sleeping_bandit(1, 10, 0), "n_arms"),
    (lambda: cl.first_price_auction(4, 3, 0, 0), "horizon"),
    (lambda: cl.default_config(1, 10), "n_actions"),
    (lambda: cl.LearnerConfig(eta=0.0, gamma=0.1, epoch_length=3), "eta"),
    (lambda: cl.LearnerConfig(eta=-1.0, gamma=0.1, epoch_length=3), "eta"),
    (lambda: cl.LearnerConfig(eta=0.1, gamma=-0.1, epoch_length=3), "gamma"),
    (lambda: cl.LearnerConfig(eta=0.1, gamma=0.1, epoch_length=0), "epoch_length"),
    (lambda: cl.simulate(tiny_env(), "exp4", 2, 0), "method"),
    (lambda: cl.simulate(tiny_env(), "oracle", 0, 0), "runs"),
    (lambda: cl.CrossLearningEnv("x", np.array([0.5, 0.5]), np.ones((3, 2), bool), np.zeros((1, 3, 2)),
                                 np.zeros(4, int)), "allowed"),
    (lambda: cl.CrossLearningEnv("x", np.array([0.5, 0.5]), np.ones((2, 2), bool), np.zeros((1, 2, 3)),
                                 np.zeros(4, int)), "tables"),
    (lambda: cl.CrossLearningEnv("x", np.array([0.5, 0.5]), np.ones((2, 1), bool), np.zeros((1, 2, 1)),
                                 np.zeros(4, int)), "K"),
    (lambda: cl.CrossLearningEnv("x", np.array([0.5, 0.5]), np.ones((2, 2), bool), np.zeros((1, 2, 2)),
                                 np.zeros(0, int)), "horizon"),
])
def test_bad_input_is_rejected(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_growth_exponent_of_exact_power_laws():
    from rayml.experiments.cross_learning import growth_exponent

    hs = [100, 400, 1600]
    assert np.isclose(growth_exponent(hs, [3 * h**0.5 for h in hs]), 0.5)
    assert np.isnan(growth_exponent(hs, [1.0, -1.0, 2.0]))


def test_growth_ratio_4x_of_exact_power_laws_and_offsets():
    from rayml.experiments.cross_learning import RATIO_MAX, growth_ratio_4x

    hs = [250, 500, 1000, 2000]
    assert np.isclose(growth_ratio_4x(hs, [3 * h**0.5 for h in hs]), 2.0)          # uses 500 -> 2000
    assert np.isclose(growth_ratio_4x(hs, [h ** (2 / 3) for h in hs]), 4 ** (2 / 3))
    assert np.isclose(growth_ratio_4x([150, 300], [h**0.5 for h in [150, 300]]), 2.0)   # extrapolated per 4x
    assert np.isclose(growth_ratio_4x(hs[::-1], [(h / 500) * 7 for h in hs[::-1]]), 4.0)  # order-free
    assert 4 ** 0.5 < RATIO_MAX < 4 ** (2 / 3)
    assert growth_ratio_4x(hs, [math.sqrt(h * math.log(h)) for h in hs]) <= RATIO_MAX      # one log under the root
    assert np.isnan(growth_ratio_4x(hs, [1.0, 0.0, 2.0, 3.0]))


def test_experiment_tiny_is_identical_with_1_and_2_workers(ray_session):
    from rayml import runtime
    from rayml.experiments.cross_learning import EXPERIMENT, EXTEND, SIZES

    cfg = dict(SIZES["tiny"])
    with runtime.max_workers(1):
        one = EXPERIMENT.run(cfg, 3)
    with runtime.max_workers(2):
        two = EXPERIMENT.run(cfg, 3)
    assert one.metrics == two.metrics
    assert one.tables["runs"] == two.tables["runs"]
    paper = [c for c in EXPERIMENT.claims if c.kind == "paper"]
    assert len(paper) == 5 and all((c.controls or c.test) and c.gates for c in paper)
    tuning = one.budget["tuning"]                                        # no choice left on a grid edge
    assert min(SIZES["quick"]["eta_grid"]) <= 0.5 and max(SIZES["quick"]["eta_grid"]) >= 8  # issue 37's grid
    for problem, choice in tuning.items():
        assert choice["paper_inside"] is True, problem
        assert choice["on_edge"] == {} or len(choice["extended"].get("eta_scale", [])) == EXTEND, problem
    # tuned per number of contexts, and on the skewed and switching instances of their own (session 8)
    assert set(one.metrics["eta_scale"]) == ({f"C={c}" for c in cfg["contexts"]}
                                             | {f"skewed C={cfg['skew_contexts']}", f"switching C={max(cfg['contexts'])}",
                                                f"alternating C={max(cfg['contexts'])}"})
    assert one.metrics["tail"]["runs"] == cfg["tail_runs"] and "tail_spread_over_level" in one.baselines["cross-learning-gamma0"]
    # session 7: the rate and tail claims test the bound's sqrt(T), with uniform play as their trivial control
    assert set(one.metrics["tail"]["q99_by_horizon"]) == {str(h) for h in cfg["tail_horizons"]}
    for block in (one.metrics, one.baselines["uniform"], one.baselines["cross-learning-gamma0"]):
        assert np.isfinite(block["q99_exponent_tail"])
    assert one.baselines["uniform"]["eta_scale"] == {}
    assert all("uniform play" in {c.name for c in claim.controls} for claim in paper[:3])
    # session 8: the skewed-nu claim's controls are the propensity-weighted learner and Balseiro et al.'s with a
    # uniform guess of nu; the tail claim is a level (q99 - median over sqrt(K T ln 100)) with gamma = 0 its control
    assert paper[1].metric.endswith("growth_ratio_4x_skewed") and len(paper[1].controls) == 8
    assert set(one.baselines["assumed-uniform-nu"]["q95_regret_skewed"]) == {str(h) for h in cfg["skew_horizons"]}
    # session 9: the tail claim takes the worse of the switching and alternating-switch instances; greedy and
    # follow-the-leader are controls of the skewed and tail claims and have no rate
    assert paper[2].metric.endswith("tail_phase_q99_over_level_worst") and len(paper[2].controls) == 5
    for claim in paper[1:3]:
        assert {"greedy (empirical mean, no exploration)", "follow-the-leader (cumulative loss)"} <= {
            c.name for c in claim.controls}
    for block in (one.metrics, *(one.baselines[b] for b in ("greedy", "follow-the-leader", "cross-learning-gamma0"))):
        assert block["tail_q99_over_level_worst"] == max(block["tail_q99_over_level"],
                                                         block["tail_q99_over_level_alternating"])
    assert one.baselines["greedy"]["eta_scale"] == {} and one.baselines["follow-the-leader"]["eta_scale"] == {}
    # session 10 (R3): linear-regret controls of the skewed claim at its own horizons, discounted epsilon-greedy a
    # control of the tail claim, which is measured against each phase's best action (the fixed comparator's cushion
    # before the switch is >= 0 and the same in every run, so the phase regret is the static one plus it)
    names = {c.name for c in paper[1].controls}
    assert {"explore-then-commit (2% uniform, then greedy)", "epsilon-greedy (epsilon 0.01)",
            "epsilon-greedy (epsilon 0.02)"} <= names
    assert "discounted epsilon-greedy (0.1, discount 0.99)" in {c.name for c in paper[2].controls}
    for b in ("explore-then-commit-2pct", "epsilon-greedy-1pct", "epsilon-greedy-2pct"):
        assert np.isfinite(one.baselines[b]["growth_ratio_4x_skewed"]) and one.baselines[b]["eta_scale"] == {}
    for block in (one.metrics, one.baselines["discounted-epsilon-greedy"], one.baselines["cross-learning-stated-rate"]):
        assert block["tail_phase_q99_over_level_worst"] == max(block["tail_phase_q99_over_level"],
                                                               block["tail_phase_q99_over_level_alternating"])
        for k in ("tail", "tail_alternating"):
            assert all(v >= 0 for v in block[k]["cushion_over_level_by_horizon"].values())
            assert block[k]["phase_q99"] >= block[k]["q99"]
    assert one.baselines["cross-learning-stated-rate"]["eta_scale"] == {}
    lvl = math.sqrt(4 * max(cfg["tail_horizons"]) * math.log(100))
    t = one.metrics["tail"]
    assert one.metrics["tail_q99_over_level"] == pytest.approx(t["q99"] / lvl)
    assert one.metrics["tail_spread_over_level"] == pytest.approx((t["q99"] - t["median"]) / lvl)
    # session 7 review: the T^(-2/3)-rate learner is a control of the rate claim, run at the same T and runs
    assert any("T^(-2/3)" in c.name for c in paper[0].controls)
    assert paper[0].metric.endswith("growth_ratio_4x_contextual")
    t23 = one.baselines["cross-learning-T23"]
    assert set(t23["q95_regret_contextual"]) == set(one.metrics["q95_regret_contextual"])
    most = f"C={max(cfg['contexts'])}"
    assert np.isfinite(t23["growth_ratio_4x_contextual"]) and t23["eta_scale"] == {most: one.metrics["eta_scale"][most]}
    with pytest.raises(ValueError, match="horizons"):
        EXPERIMENT.run({**cfg, "horizons": [10]}, 0)
    with pytest.raises(ValueError, match="tail_horizons"):
        EXPERIMENT.run({**cfg, "tail_horizons": [300, 300]}, 0)
    with pytest.raises(ValueError, match="chunk_runs"):
        EXPERIMENT.run({**cfg, "runs": 7}, 0)
    with pytest.raises(ValueError, match="eta_grid"):
        EXPERIMENT.run({**cfg, "eta_grid": [0.5, 2.0]}, 0)


def test_contextual_best_arm_losses_and_comparator():
    env = cl.contextual_best_arm(50, 3, 4000, 0)
    best = env.info["best"]
    assert np.array_equal(env.comparator(), best)                         # each context's own best action
    mean = env.total_losses() / env.horizon
    own = mean[np.arange(50), best]
    other = np.where(np.arange(3)[None] == best[:, None], np.nan, mean)
    assert np.all(np.abs(own - 0.25) < 0.05) and np.all(np.abs(np.nanmean(other, 1) - 0.75) < 0.05)
    assert np.allclose(env.context_probs, 1 / 50)
    with pytest.raises(ValueError, match="levels"):
        cl.contextual_best_arm(4, 8, 10, 0, levels=4)                     # 4^8 patterns


def test_per_context_exp3_fails_with_many_contexts_where_cross_learning_does_not():
    env = cl.contextual_best_arm(400, 3, 600, 1)
    cross = cl.simulate(env, "cross-learning", 6, 2)
    per = cl.simulate(env, "per-context-exp3", 6, 2)
    assert np.median(cross.regret) < 0.6 * np.median(per.regret)


def test_eta_scale_multiplies_the_rates():
    base, double = cl.default_config(4, 100), cl.default_config(4, 100, 2.0)
    assert np.isclose(double.eta, 2 * base.eta) and np.isclose(double.gamma, 2 * base.gamma)
    assert double.epoch_length == base.epoch_length
    with pytest.raises(ValueError, match="eta_scale"):
        cl.default_config(4, 100, 0.0)


def _drive_online(env, cfg, contexts, uniforms):
    """The CrossLearner object, round by round, with run's contexts and uniforms (its own draws aside)."""
    learner = cl.CrossLearner(env.n_contexts, env.n_actions, config=cfg, allowed=env.allowed)
    best, regret = env.comparator(), 0.0
    for t, (c, u) in enumerate(zip(contexts, uniforms)):
        table = env.tables[env.schedule[t]]
        p = learner.policy(int(c))
        cdf = np.cumsum(p)
        a = int(min(np.sum(u * cdf[-1] >= cdf), env.n_actions - 1))
        learner.update(int(c), a, np.where(env.allowed[:, a], table[:, a], np.nan))
        regret += table[c, a] - table[c, best[c]]
    return regret, learner


@pytest.mark.parametrize("kind", ["sleeping", "contextual"])
def test_online_cross_learner_equals_the_per_round_loop_and_simulate(kind):
    env = cl.sleeping_bandit(3, 60, 2) if kind == "sleeping" else cl.contextual_best_arm(40, 3, 60, 2)
    cfg = cl.LearnerConfig(eta=0.4, gamma=0.05, epoch_length=9)
    R, seed = 2, 5
    res = cl.simulate(env, "cross-learning", R, seed, config=cfg)
    ctx_rng, act_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    contexts = ctx_rng.choice(env.n_contexts, size=(R, env.horizon), p=env.context_probs)
    uniforms = act_rng.random((R, env.horizon))
    for r in range(R):
        online, learner = _drive_online(env, cfg, contexts[r], uniforms[r])
        assert online == pytest.approx(_reference_run(env, "cross-learning", contexts[r], uniforms[r], cfg))
        assert online == pytest.approx(res.regret[r])
        assert learner.rounds_ == env.horizon


def test_online_cross_learner_rejects_bad_input_naming_the_argument():
    learner = cl.CrossLearner(3, 2, horizon=50)
    with pytest.raises(ValueError, match="c must"):
        learner.act(3)
    with pytest.raises(ValueError, match="a must"):
        learner.update(0, 2, np.zeros(3))
    with pytest.raises(ValueError, match="losses"):
        learner.update(0, 1, np.zeros(2))
    with pytest.raises(ValueError, match="losses"):
        learner.update(0, 1, np.array([0.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="allowed"):
        cl.CrossLearner(3, 2, allowed=np.zeros((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="n_actions"):
        cl.CrossLearner(3, 1)



def test_tuning_ties_go_to_the_stated_rate_and_a_flat_curve_leaves_no_edge():
    from rayml import evidence
    from rayml.experiments.cross_learning import EXTEND, TUNE_TIE, nearest_stated_rate

    flat = lambda items: [10.0 - 0.01 * s["eta_scale"] for _, s in items]  # noqa: E731  tiny gain towards the top
    choice = evidence.tune(flat, {"p": {"eta_scale": [0.5, 1.0, 2.0, 4.0, 8.0]}}, paper={"eta_scale": 1.0},
                           extend=EXTEND, tie=TUNE_TIE, tie_break=nearest_stated_rate)["p"]
    assert choice.setting["eta_scale"] == 1.0 and choice.edges == {}
    steep = lambda items: [100.0 / s["eta_scale"] for _, s in items]  # noqa: E731  keeps improving: extended
    choice = evidence.tune(steep, {"p": {"eta_scale": [0.5, 1.0, 2.0, 4.0, 8.0]}}, paper={"eta_scale": 1.0},
                           extend=EXTEND, tie=TUNE_TIE, tie_break=nearest_stated_rate)["p"]
    assert choice.setting["eta_scale"] == 8.0 * 2 ** EXTEND and choice.edges == {"eta_scale": "high"}


def test_t23_rate_option_matches_the_per_round_loop_and_decays_as_T_to_minus_two_thirds():
    # session 7 review: the T^(-2/3)-rate cross-learner, the rate claim's control
    K, T, T_a = 4, 40, 20
    cfg = cl.default_config(K, T, 2.0, rate_exponent=2 / 3, anchor_horizon=T_a)
    eta = 2.0 * math.sqrt(math.log(K) / (K * T_a)) * (T_a / T) ** (2 / 3)
    assert np.isclose(cfg.eta, eta) and np.isclose(cfg.gamma, eta / 2)
    assert cfg.epoch_length == math.ceil(math.sqrt(K * T))
    assert np.isclose(cl.default_config(K, T_a, 2.0, rate_exponent=2 / 3, anchor_horizon=T_a).eta,
                      cl.default_config(K, T_a, 2.0).eta)                       # equal at the anchor
    assert np.isclose(cl.default_config(K, T, 2.0, rate_exponent=0.5, anchor_horizon=T_a).eta,
                      cl.default_config(K, T, 2.0).eta)                           # the anchor is moot at T^(-1/2)
    env = cl.first_price_auction(5, K, T, 3)
    R, seed = 3, 11
    res = cl.simulate(env, "cross-learning", R, seed, eta_scale=2.0, rate_exponent=2 / 3, anchor_horizon=T_a)
    ctx_rng, act_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    contexts = ctx_rng.choice(env.n_contexts, size=(R, T), p=env.context_probs)
    uniforms = act_rng.random((R, T))
    ref = [_reference_run(env, "cross-learning", contexts[r], uniforms[r], cfg) for r in range(R)]
    assert np.allclose(res.regret, ref)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="rate_exponent"):
            cl.default_config(K, T, rate_exponent=bad)
    with pytest.raises(ValueError, match="anchor_horizon"):
        cl.default_config(K, T, rate_exponent=2 / 3, anchor_horizon=0)


def test_session8_instances():
    # warm-up: the first floor(warmup T) rounds have one shared loss, so every action costs 0 regret there; after
    # it the instance is the warmup = 0 one, draw for draw
    plain, warm = cl.contextual_best_arm(64, 4, 400, 0), cl.contextual_best_arm(64, 4, 400, 0, warmup=0.25)
    assert warm.info["warmup_rounds"] == 100 and np.array_equal(plain.schedule[100:], warm.schedule[100:])
    early = warm.tables[warm.schedule[:100]]                                   # (100, C, K)
    assert np.all(early == early[:, :1, :1]) and 0 < early[:, 0, 0].mean() < 1
    assert np.array_equal(plain.comparator(), warm.comparator())
    res = cl.simulate(warm, "uniform", 5, 1, points=400)
    assert np.all(res.curve[:, :100] == 0) and np.any(res.curve[:, -1] != 0)
    # skewed nu: one frequent context, action 0 best everywhere
    sk = cl.skewed_contexts(16, 4, 300, 0, frequent=0.8)
    assert np.isclose(sk.context_probs[0], 0.8) and np.allclose(sk.context_probs[1:], 0.2 / 15)
    assert np.all(sk.comparator() == 0)
    assert np.allclose(sk.info["mu"][0], [0.05, 0.95, 0.95, 0.95]) and np.allclose(sk.info["mu"][1], [0.3, 0.8, 0.8, 0.8])
    # switching: action 0 best before round 0.3 T, action 1 after (and over the whole horizon)
    sw = cl.switching_best_arm(8, 4, 1000, 0, switch=0.3)
    mean = lambda lo, hi: sw.tables[sw.schedule[lo:hi]].mean(axis=0)[0]  # noqa: E731
    assert np.argmin(mean(0, 300)) == 0 and np.argmin(mean(300, 1000)) == 1 and np.all(sw.comparator() == 1)
    for fn, match in ((lambda: cl.contextual_best_arm(4, 2, 10, 0, warmup=1.0), "warmup"),
                      (lambda: cl.skewed_contexts(1, 2, 10, 0), "n_contexts"),
                      (lambda: cl.skewed_contexts(4, 2, 10, 0, frequent=1.0), "frequent"),
                      (lambda: cl.switching_best_arm(4, 2, 10, 0, switch=0.0), "switch")):
        with pytest.raises(ValueError, match=match):
            fn()


def test_assumed_uniform_nu_equals_known_distribution_when_nu_is_uniform():
    env = cl.contextual_best_arm(8, 3, 120, 2)
    a, b = (cl.simulate(env, m, 3, 5, eta_scale=2.0) for m in ("known-distribution", "assumed-uniform-nu"))
    assert np.array_equal(a.regret, b.regret)
    sk = cl.skewed_contexts(8, 3, 120, 2)
    a, b = (cl.simulate(sk, m, 3, 5, eta_scale=2.0) for m in ("known-distribution", "assumed-uniform-nu"))
    assert not np.array_equal(a.curve, b.curve)


def test_session9_instances_and_controls():
    # mixed skew: the frequent context and every even rare index keep action 0, the odd ones cycle 1 .. K - 1
    sk = cl.skewed_contexts(9, 4, 200, 0, mixed=True)
    assert sk.info["best"].tolist() == [0, 0, 1, 0, 2, 0, 3, 0, 1]
    assert np.array_equal(sk.comparator(), sk.info["best"])
    assert np.array_equal(cl.skewed_contexts(9, 4, 200, 0).comparator(), np.zeros(9))
    # a context-free learner (always action 0) has regret linear in T there
    always0 = lambda e: sum(e.tables[e.schedule[t]][c, 0] - e.tables[e.schedule[t]][c, e.comparator()[c]]  # noqa: E731
                            for t in range(e.horizon) for c in range(e.n_contexts)) / e.n_contexts
    assert always0(sk) > 0
    # alternating switch: the first phase is switching_best_arm's, then (1, 0), (0, 1), ... on actions 1 and 2
    env = cl.alternating_switch(3, 4, 100, 0, switch=0.3)
    tab = env.tables[env.schedule]                                               # (T, C, K)
    sw = cl.switching_best_arm(3, 4, 100, 0, switch=0.3)
    assert np.array_equal(tab[:30], sw.tables[sw.schedule[:30]])
    assert np.all(tab[30::2, :, 1] == 1) and np.all(tab[30::2, :, 2] == 0)
    assert np.all(tab[31::2, :, 1] == 0) and np.all(tab[31::2, :, 2] == 1) and np.all(tab[30:, :, 0] == 1)
    assert set(env.comparator().tolist()) <= {1, 2}
    # follow-the-leader is trapped by the alternation: it pays 1 on (almost) every round after the switch
    T = 400
    env = cl.alternating_switch(2, 4, T, 0, switch=0.3)
    ftl = cl.simulate(env, "follow-the-leader", 2, 0, points=T)
    after = np.diff(ftl.curve, axis=1)[:, int(0.3 * T) + 10:]                  # regret increments after the switch
    assert after.mean() > 0.3
    # greedy and follow-the-leader ignore eta_scale (no rate) and the seed's action uniforms
    for m in ("greedy", "follow-the-leader"):
        assert np.array_equal(cl.simulate(env, m, 2, 0).regret, cl.simulate(env, m, 2, 0, eta_scale=8.0).regret)
    with pytest.raises(ValueError, match="n_actions"):
        cl.alternating_switch(4, 2, 10, 0)
    with pytest.raises(ValueError, match="switch"):
        cl.alternating_switch(4, 3, 10, 0, switch=1.0)
