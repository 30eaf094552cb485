"""Equal share: payoff tables by hand, learner updates, opponent models, bad input, determinism."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rayml.bandits import equal_share as es


def brute_payoff(n, m, sign, scale, own, others):
    """The payoff from the full action profile (player 0 plays own)."""
    profile = [own] + list(others)
    cnt = np.bincount(profile, minlength=m)
    return sign * scale * (cnt[own] - np.sum(cnt**2) / n)


def test_vote_tables_match_the_description():
    maj, mino = es.majority_game(3, 2), es.majority_game(3, 2, minority=True)
    # others' counts (k0, k1); own action 0
    assert np.allclose(es.payoff_vectors(maj, np.array([2.0, 0.0])), [0.0, -2.0])   # unanimous / lone minority
    assert np.allclose(es.payoff_vectors(maj, np.array([1.0, 1.0])), [1.0, 1.0])    # 2-1 split, in the majority
    assert np.allclose(es.payoff_vectors(mino, np.array([0.0, 2.0])), [2.0, 0.0])
    assert maj.payoff_bound == 2.0


@pytest.mark.parametrize("n, m, sign", [(3, 2, 1), (4, 3, -1), (5, 3, 1)])
def test_payoffs_against_brute_force_and_constant_sum(n, m, sign):
    g = es.SymmetricGame("g", n, m, sign=sign, scale=1.0)
    for profile in itertools.product(range(m), repeat=n):
        pays = []
        for i in range(n):
            others = profile[:i] + profile[i + 1:]
            k = np.bincount(others, minlength=m).astype(float)
            u = es.payoff_vectors(g, k)[profile[i]]
            assert np.isclose(u, brute_payoff(n, m, sign, 1.0, profile[i], others))
            pays.append(u)
        assert np.isclose(sum(pays), 0.0)  # C = 0
    # symmetry: identical mixed strategies give every player exactly C/n = 0 in expectation
    rng = np.random.default_rng(0)
    sigma = rng.dirichlet(np.ones(m))
    exp = 0.0
    for others in itertools.product(range(m), repeat=n - 1):
        p = np.prod(sigma[list(others)])
        exp += p * sigma @ es.payoff_vectors(g, np.bincount(others, minlength=m).astype(float))
    assert abs(exp) < 1e-12


def test_hedge_one_round_by_hand():
    # T = 1: the first play is uniform, so the average payoff is the uniform mixture's payoff.
    g = es.majority_game(3, 2)
    avg = es.play(g, "hedge", {"kind": "identical", "sigma": [0.0, 1.0]}, 1, 2, 0)
    assert np.allclose(avg, 0.5 * (-2.0 + 0.0) / 2.0)
    # T = 2 with both opponents on action 1: after round 1, U = (-2, 0), so x_2 = softmax(eta U)
    eta = es.hedge_rate(2, 2, 2.0)
    x2 = np.exp(eta * np.array([-2.0, 0.0]))
    x2 /= x2.sum()
    expect = (0.5 * -2.0 + x2[0] * -2.0) / (2 * 2.0)
    assert np.allclose(es.play(g, "hedge", {"kind": "identical", "sigma": [0.0, 1.0]}, 2, 3, 0), expect)
    assert math.isclose(eta, math.sqrt(8 * math.log(2) / 2) / 4)


def test_behaviour_cloning_copies_identical_pure_opponents():
    g = es.majority_game(30, 3)
    avg = es.play(g, "behaviour-cloning", {"kind": "identical", "sigma": [0.0, 0.0, 1.0]}, 50, 3, 1, window=5)
    u1 = np.full(3, 1 / 3) @ es.payoff_vectors(g, np.array([0.0, 0.0, 29.0]))
    assert np.allclose(avg, u1 / (50 * g.payoff_bound))  # only round 1 (uniform) differs from C/n = 0


def test_fixed_strategy_matches_exact_expectation():
    g = es.majority_game(3, 2)
    x = np.array([0.3, 0.7])
    p = 0.6  # opponents' prob of action 0
    exact = 0.0
    for k0 in range(3):
        prob = math.comb(2, k0) * p**k0 * (1 - p) ** (2 - k0)
        exact += prob * x @ es.payoff_vectors(g, np.array([k0, 2 - k0], float))
    avg = es.play(g, "fixed", {"kind": "identical", "sigma": [p, 1 - p]}, 4000, 50, 2, strategy=x)
    se = avg.std() / math.sqrt(avg.size)
    assert abs(avg.mean() - exact / 2.0) < 5 * se + 1e-3


def test_saol_intervals():
    assert es.saol_intervals(1, 100) == [(0, 1)]
    assert es.saol_intervals(6, 100) == [(0, 6), (1, 6), (2, 4)]
    assert es.saol_intervals(8, 100) == [(0, 8), (1, 8), (2, 8), (3, 8)]


def test_opponent_models():
    g = es.majority_game(3, 2)
    rng = np.random.default_rng(0)
    x = np.array([[0.9, 0.1], [0.2, 0.8]])
    adv = es.opponent_counts(g, {"kind": "adaptive"}, 1, 10, x, rng)
    assert np.array_equal(adv, [[0, 2], [2, 0]])  # all on the learner's less likely action
    diff = es.opponent_counts(g, {"kind": "different"}, 1, 10, x, rng)
    assert np.array_equal(diff, [[1, 1], [1, 1]])
    slow = es.opponent_counts(g, {"kind": "slow", "period": 4}, 1, 10, x, rng)  # lam = 1: all on action 0
    assert np.array_equal(slow, [[2, 0], [2, 0]])


def test_impossibility_cases_and_equal_share_for_a_no_regret_learner():
    mino = es.majority_game(3, 2, minority=True)
    # different fixed opponents in minority vote: every strategy is in a majority: -1 each round
    for method in ("hedge", "behaviour-cloning"):
        assert np.allclose(es.play(mino, method, {"kind": "different"}, 100, 2, 0), -0.5)
    maj = es.majority_game(3, 2)
    assert np.all(es.play(maj, "hedge", {"kind": "identical", "sigma": [0.75, 0.25]}, 2000, 8, 0) > -0.05)


def test_selfplay_outputs_are_strategies_and_pure_in_majority_vote():
    g = es.majority_game(3, 2)
    for method in es.SELFPLAY:
        x = es.selfplay_strategy(g, method, 200, 6, 0)
        assert x.shape == (6, 2) and np.allclose(x.sum(axis=1), 1.0)
        assert np.all(x.max(axis=1) > 0.9)  # self-play settles on a convention


def test_same_seed_same_result():
    g = es.majority_game(30, 3)
    spec = {"kind": "slow"}
    a = es.play(g, "saol-hedge", spec, 64, 3, 4)
    assert np.array_equal(a, es.play(g, "saol-hedge", spec, 64, 3, 4))


@pytest.mark.parametrize("fn, match", [
    (lambda: es.SymmetricGame("g", 2, 2), "n_players"),
    (lambda: es.SymmetricGame("g", 3, 1), "n_actions"),
    (lambda: es.SymmetricGame("g", 3, 2, sign=0), "sign"),
    (lambda: es.SymmetricGame("g", 3, 2, scale=0.0), "scale"),
    (lambda: es.play(es.majority_game(3, 2), "exp3", {"kind": "slow"}, 10, 2, 0), "method"),
    (lambda: es.play(es.majority_game(3, 2), "hedge", {"kind": "nasty"}, 10, 2, 0), "opponent kind"),
    (lambda: es.play(es.majority_game(3, 2), "hedge", {"kind": "slow"}, 0, 2, 0), "horizon"),
    (lambda: es.play(es.majority_game(3, 2), "hedge", {"kind": "slow"}, 10, 0, 0), "runs"),
    (lambda: es.play(es.majority_game(3, 2), "hedge", {"kind": "identical", "sigma": [1.0]}, 10, 2, 0), "sigma"),
    (lambda: es.play(es.majority_game(3, 2), "fixed", {"kind": "slow"}, 10, 2, 0), "strategy"),
    (lambda: es.payoff_vectors(es.majority_game(3, 2), np.ones(3)), "others"),
    (lambda: es.selfplay_strategy(es.majority_game(3, 2), "psro", 10, 2, 0), "method"),
])
def test_bad_input_is_rejected(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_experiment_tiny_is_identical_with_1_and_2_workers(ray_session):
    from rayml import runtime
    from rayml.experiments.equal_share import EXPERIMENT, SIZES, parse_game

    cfg = dict(SIZES["tiny"])
    with runtime.max_workers(1):
        one = EXPERIMENT.run(cfg, 3)
    with runtime.max_workers(2):
        two = EXPERIMENT.run(cfg, 3)
    assert one.metrics == two.metrics and one.tables["runs"] == two.tables["runs"]
    paper = [c for c in EXPERIMENT.claims if c.kind == "paper"]
    assert len(paper) == 5 and all(c.controls and c.gates for c in paper)
    assert not any("minority-3" in c.metric for c in paper)              # it cannot discriminate (issue 37)
    assert all("0.05" not in c.text for c in EXPERIMENT.claims)          # no invented margin
    assert one.metrics["minus_hedge_bound"]["majority-3"] == pytest.approx(-2 * math.sqrt(math.log(2) / 120))
    assert set(one.metrics["saol-hedge"]["slow_by_horizon"]) == {"60", "240"}
    saol = one.metrics["saol-hedge"]
    assert saol["slow_exponent_ci95"][0] <= saol["slow_exponent"] <= saol["slow_exponent_ci95"][1]
    assert set(saol["slow_local_exponents"]) == {"60-240"}
    assert set(one.metrics["behaviour-cloning"]["slow_by_horizon"]) == {"60", "240"}
    br = one.metrics["slow_best_response_by_horizon"]
    for h in ("60", "240"):   # dynamic regret = best response's payoff - SAOL_H's
        assert saol["slow_dynamic_regret_by_horizon"][h] == pytest.approx(br[h] - saol["slow_by_horizon"][h])
    with pytest.raises(ValueError, match="game"):
        parse_game("coordination-3")
    with pytest.raises(ValueError, match="chunk_runs"):
        EXPERIMENT.run({**cfg, "runs": 3}, 0)


def test_expected_payoffs_against_enumeration_and_the_best_response_comparator():
    g = es.majority_game(4, 3)
    sigma = np.array([0.5, 0.2, 0.3])
    brute = np.zeros(3)
    for others in itertools.product(range(3), repeat=3):
        brute += np.prod(sigma[list(others)]) * es.payoff_vectors(g, np.bincount(others, minlength=3).astype(float))
    assert np.allclose(es.expected_payoffs(g, sigma), brute)
    assert abs(sigma @ brute) < 1e-12                       # copying identical opponents gets exactly C/n
    # majority vote against lam e_0 + (1 - lam) e_1: E U / B = ((1 - lam)(2 lam - 1), lam (1 - 2 lam))
    mv = es.majority_game(3, 2)
    lam = np.array([0.0, 0.3, 0.5, 0.9])
    ev = es.expected_payoffs(mv, np.stack([lam, 1 - lam], 1)) / mv.payoff_bound
    assert np.allclose(ev, np.stack([(1 - lam) * (2 * lam - 1), lam * (1 - 2 * lam)], 1))
    T = 400
    lam_t = 0.5 * (1 + np.sin(2 * np.pi * np.arange(1, T + 1) / (T / 2)))
    expect = np.mean(np.maximum((1 - lam_t) * (2 * lam_t - 1), lam_t * (1 - 2 * lam_t)))
    assert es.slow_best_response(mv, T) == pytest.approx(expect)
    with pytest.raises(ValueError, match="sigma"):
        es.expected_payoffs(mv, [0.5, 0.6])


def test_exponent_interval_resamples_runs_jointly_across_horizons():
    from rayml.experiments.equal_share import exponent_interval, shortfall_exponent

    hs = [1000, 4000, 16000]
    exact = np.array([[-(h ** -0.3)] * 40 for h in hs])         # every run on the power law: no spread
    ci = exponent_interval(hs, exact, resamples=50)
    assert ci["low"] == pytest.approx(-0.3) and ci["high"] == pytest.approx(-0.3)
    rng = np.random.default_rng(0)
    noisy = exact * np.exp(0.2 * rng.standard_normal((3, 40)))
    ci = exponent_interval(hs, noisy, resamples=400, seed=1)
    assert ci["low"] < shortfall_exponent(hs, noisy.mean(axis=1)) < ci["high"]
    assert ci["exponents"].shape == (400,)
    # a run shared by every horizon moves together: perfectly correlated noise leaves the slope fixed
    shared = exact * np.exp(0.2 * rng.standard_normal(40))[None]
    ci = exponent_interval(hs, shared, resamples=100)
    assert ci["high"] - ci["low"] < 1e-9
    for kwargs, match in [(dict(resamples=0), "resamples"), (dict(level=1.0), "level")]:
        with pytest.raises(ValueError, match=match):
            exponent_interval(hs, exact, **kwargs)
    with pytest.raises(ValueError, match="runs_by_horizon"):
        exponent_interval(hs, exact[:2])


def _saol_reference(game, T, pure):
    """SAOL over Hedge written from Daniely, Gonen & Shalev-Shwartz (2015) interval by interval:
    geometric covering intervals [i 2^k, (i + 1) 2^k - 1], i >= 1; a fresh Hedge copy (rate tuned to
    2^k) and meta weight eta_I = min(1/2, |I|^-1/2) when I starts; w_I *= 1 + eta_I r_t(I)."""
    m, B = game.n_actions, game.payoff_bound
    others = np.zeros(m)
    others[pure] = game.n_players - 1
    U = es.payoff_vectors(game, others[None])[0]
    experts, total = {}, 0.0
    for t in range(1, T + 1):
        live, k = {}, 0
        while 2 ** k <= t:
            key = (k, (t // 2 ** k) * 2 ** k)
            live[key] = experts.get(key) or [np.zeros(m), min(0.5, 2 ** (-k / 2))]
            k += 1
        experts = live
        xs = {}
        for key, (S, _) in experts.items():
            z = np.exp(es.hedge_rate(2 ** key[0], m, B) * (S - S.max()))
            xs[key] = z / z.sum()
        W = sum(w for _, w in experts.values())
        x = sum(experts[key][1] * xs[key] for key in experts) / W
        total += float(x @ U)
        g = (U + B) / (2 * B)
        for key, v in experts.items():
            v[1] *= 1 + min(0.5, 2 ** (-key[0] / 2)) * (float(xs[key] @ g) - float(x @ g))
            v[0] = v[0] + U
    return total / (T * B)


def test_saol_matches_an_interval_by_interval_reference_and_its_cost_is_the_restarts():
    g = es.majority_game(3, 2)
    for T in (37, 300):
        vec = es.play(g, "saol-hedge", {"kind": "identical", "sigma": [1.0, 0.0]}, T, 2, 0)
        assert vec == pytest.approx([_saol_reference(g, T, 0)] * 2, abs=1e-12)
    # against a fixed pure opponent SAOL trails Hedge (fresh copies play uniform: every round the
    # length-1 copy, and at t = 2^j every copy restarts), and the gap shrinks with T
    short = es.play(g, "saol-hedge", {"kind": "identical", "sigma": [1.0, 0.0]}, 128, 2, 0).mean()
    long = es.play(g, "saol-hedge", {"kind": "identical", "sigma": [1.0, 0.0]}, 2048, 2, 0).mean()
    hedge = es.play(g, "hedge", {"kind": "identical", "sigma": [1.0, 0.0]}, 2048, 2, 0).mean()
    assert short < long < hedge


def test_a_payoff_function_builds_the_same_game_as_the_closed_form():
    for n, m, minority in ((3, 2, False), (3, 2, True), (6, 3, False)):
        ref = es.majority_game(n, m, minority=minority)
        game = es.symmetric_game(lambda a, k: float(es.payoff_vectors(ref, np.array(k, float))[a]), n, m)
        others = np.array([k for k in itertools.product(range(n), repeat=m) if sum(k) == n - 1], float)
        assert np.allclose(es.payoff_vectors(game, others), es.payoff_vectors(ref, others), atol=1e-12)
        assert game.equal_share == pytest.approx(0.0, abs=1e-12) and game.payoff_bound == pytest.approx(ref.payoff_bound)
        for method in ("hedge", "saol-hedge", "behaviour-cloning"):   # same payoffs, same random stream
            spec = {"kind": "slow", "period": 17}
            assert es.play(game, method, spec, 50, 2, 1) == pytest.approx(es.play(ref, method, spec, 50, 2, 1))


def test_a_constant_sum_payoff_is_centred_on_its_equal_share():
    def crowd(a, k):                       # a pot of 2 shared by the players of the most crowded action
        size = [k[b] + (b == a) for b in range(3)]
        top = [b for b in range(3) if size[b] == max(size)]
        return 2.0 / (len(top) * size[a]) if a in top else 0.0

    game = es.symmetric_game(crowd, 4, 3)
    assert game.equal_share == pytest.approx(0.5)
    # all four on action 0: each gets 2/4 = C/n, centred 0; a lone deviator to action 1 gets 0 - 1/2
    assert es.payoff_vectors(game, np.array([3.0, 0.0, 0.0])) == pytest.approx([0.0, -0.5, -0.5])
    avg = es.play(game, "hedge", {"kind": "identical", "sigma": [0.2, 0.5, 0.3]}, 400, 4, 0)
    assert avg.mean() > -0.2
    with pytest.raises(ValueError, match="constant-sum"):
        es.symmetric_game(lambda a, k: float(k[a]), 3, 2)
    with pytest.raises(ValueError, match="finite"):
        es.symmetric_game(lambda a, k: float("nan"), 3, 2)
    with pytest.raises(TypeError, match="payoff"):
        es.symmetric_game([1, 2], 3, 2)


def test_total_variation_of_the_slow_opponents_by_hand():
    # period 4: lam_t = 1, 1/2, 0, 1/2, 1, ... (t = 1, 2, ...): every step moves sigma by 1 in l1
    assert es.total_variation(2, 9, 4.0) == pytest.approx(8.0)
    assert es.slow_sigma(3, 1, 4.0) == pytest.approx([1.0, 0.0, 0.0])
    long = es.total_variation(2, 4000, 2000.0)
    assert long == pytest.approx(es.total_variation(2, 1000, 500.0), rel=0.01)   # V_T fixed when period = T/2


def test_behaviour_cloning_of_the_last_round_meets_its_variation_bound():
    g = es.majority_game(3, 2)
    T, period = 2000, 40.0
    avg = es.play(g, "behaviour-cloning", {"kind": "slow", "period": period}, T, 32, 0, window=1)
    assert avg.mean() >= -(es.total_variation(2, T, period) + 1) / T
