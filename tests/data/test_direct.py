"""DIRECT (rayml.data.direct) and its baselines: hand-computed cases, brute force, properties, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.data import active_baselines as ab
from rayml.data import direct as d
from rayml.data.active_learning import ActiveLearningClassifier, al_round, imbalanced_digits, initial_state


class LeftmostRng:
    """A stand-in generator: ``choice`` takes the leftmost candidates, the tie coin always says 'left'."""

    def choice(self, a, size, replace):
        assert not replace
        return np.asarray(a)[:size]

    def integers(self, high):
        return 0


def test_threshold_scores_match_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        w = rng.choice([-1, 0, 1], size=int(rng.integers(1, 15)))
        acc = d.threshold_scores(w)
        for j in range(w.size + 1):
            correct = np.sum(w[:j] == 1) + np.sum(w[j:] == -1)
            assert acc[j] == 2 * correct - np.count_nonzero(w)
        assert d.best_threshold(w) == int(np.argmax(acc))


def test_initial_interval_by_hand():
    # leading labelled run of the class ends at 2; trailing run of others starts at 7
    assert d.initial_interval(np.array([1, 0, 1, 0, -1, 1, 0, -1, 0, -1])) == (2, 7)
    assert d.initial_interval(np.array([0, -1, 0, 1, 0])) == (0, 4)
    assert d.initial_interval(np.array([0, 0, 0])) == (0, 2)


def test_interval_search_on_a_fixed_label_sequence_by_hand():
    # true labels in margin order; position 5 is a flipped (noisy) label of another class
    y = np.array([1, 1, 1, 1, -1, 1, -1, -1, -1, -1])
    y[4] = -1
    w = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, -1])
    labeled = w != 0
    calls = []

    def annotate(pos):
        calls.append(list(pos))
        return y[pos]

    queried, interval = d.interval_search(w, labeled, 0, 9, n_annotators=2, budget=6, annotate=annotate,
                                          rng=LeftmostRng())
    # round 1 labels 1, 2; acc = [-2, 0, 2, 4, 4, 4, 4, 4, 4, 4, 2]; diam 6, 3 rounds left, target
    # ceil(6 / 6^(1/3)) = 4: I moves 0 -> 1 -> 2 -> 3 (lower score), then ties at 3 and 4 (coin: left)
    # drop two unlabelled examples: [5, 9]. Round 2 labels 5 (noisy +1) and 6; diam 2, target
    # ceil(2 / sqrt 2) = 2: no move. Round 3 labels 7 and 8.
    assert calls == [[1, 2], [5, 6], [7, 8]]
    assert queried == [1, 2, 5, 6, 7, 8]
    assert interval == (5, 9)
    assert list(w) == [1, 1, 1, 0, 0, 1, -1, -1, -1, -1]
    assert d.best_threshold(w) == 6


def test_interval_search_single_round_does_not_shrink():
    w = np.array([1, 0, 0, 0, -1])
    lab = w != 0
    queried, interval = d.interval_search(w, lab, 0, 4, n_annotators=20, budget=2,
                                          annotate=lambda p: np.ones(len(p), int), rng=np.random.default_rng(0))
    assert len(queried) == 2 and interval == (0, 4)


def _threshold_errors(noise: float, search: bool) -> float:
    """Median |best threshold - true threshold| over 40 lines of 300 with 12 labels."""
    n, t = 300, 117
    y = np.where(np.arange(n) < t, 1, -1)
    errors = []
    for seed in range(40):
        r = np.random.default_rng(100 + seed)
        yy = np.where(r.random(n) < noise, -y, y)
        w = np.zeros(n, dtype=int)
        w[0], w[-1] = 1, -1
        if search:
            d.interval_search(w, w != 0, 0, n - 1, n_annotators=1, budget=12, annotate=lambda p: yy[p],
                              rng=np.random.default_rng(seed))
        else:
            idx = r.choice(np.arange(1, n - 1), size=12, replace=False)
            w[idx] = yy[idx]
        errors.append(abs(d.best_threshold(w) - t))
    return float(np.median(errors))


def test_interval_search_finds_the_threshold_better_than_random_labels_with_and_without_noise():
    assert _threshold_errors(0.0, True) <= 3 < _threshold_errors(0.0, False)
    assert _threshold_errors(0.1, True) < _threshold_errors(0.1, False)


def test_query_around_threshold_alternates_left_first_and_skips_labelled():
    lab = np.zeros(10, dtype=bool)
    lab[4] = True
    assert d.query_around_threshold(lab, 5, 4) == [5, 3, 6, 2]
    assert lab[[2, 3, 5, 6]].all()
    lab = np.zeros(3, dtype=bool)
    assert sorted(d.query_around_threshold(lab, 0, 10)) == [0, 1, 2]


def test_margin_scores_and_class_order():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.5, 0.4], [0.3, 0.3, 0.4]])
    m = d.margin_scores(p)
    np.testing.assert_allclose(m, p - p.max(1, keepdims=True) + 1e-8 * p.max(1, keepdims=True))
    assert list(d.class_order(p, 2)) == [2, 1, 0]


def _pool(n=400, C=4, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(C, size=n)
    logits = rng.normal(size=(n, C)) + 2.0 * np.eye(C)[y]
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return p, y


def test_direct_select_spends_the_budget_on_new_distinct_examples_in_annotator_batches():
    p, y = _pool()
    labeled = np.arange(10)
    sizes = []

    def annotate(idx):
        sizes.append(len(idx))
        return y[idx]

    q, seen = d.direct_select(p, labeled, y[labeled], 40, annotate, n_annotators=3, rng=0)
    assert q.size == 40 and np.unique(q).size == 40 and not np.isin(q, labeled).any()
    assert max(sizes) <= 3
    assert all(y[i] == v for i, v in seen.items()) and set(seen) <= set(q.tolist())
    q2, _ = d.direct_select(p, labeled, y[labeled], 40, lambda i: y[i], n_annotators=3, rng=0)
    np.testing.assert_array_equal(q, q2)


def test_direct_select_gives_the_rare_classes_the_interval_search():
    p, y = _pool()
    labeled = np.flatnonzero(y != 3)[:30]  # class 3 has no labels: the rarest
    asked_for = []
    q, seen = d.direct_select(p, labeled, y[labeled], 20, lambda i: asked_for.append(len(i)) or y[i],
                              n_annotators=1, min_budget_per_class=5, rng=1)
    # 20 // 4 // 2 = 2 < 5: every class gets B2 = 2 single-annotator rounds, then 12 around thresholds
    assert len(seen) == 8 and len(asked_for) == 8 and q.size == 20


@pytest.mark.parametrize("kwargs, match", [
    (dict(probs=np.ones(5)), "probs"),
    (dict(labels=np.array([9])), "labels"),
    (dict(labeled_idx=np.array([], int), labels=np.array([], int)), "labeled_idx"),
    (dict(budget=-1), "budget"),
    (dict(n_annotators=0), "n_annotators"),
    (dict(min_budget_per_class=0), "min_budget_per_class"),
])
def test_direct_select_rejects_bad_input(kwargs, match):
    p, y = _pool(50)
    args = dict(probs=p, labeled_idx=np.array([0]), labels=y[:1], budget=5, annotate=lambda i: y[i])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        d.direct_select(args.pop("probs"), args.pop("labeled_idx"), args.pop("labels"), args.pop("budget"),
                        args.pop("annotate"), **args)


def test_weights_and_intervals_reject_bad_input():
    with pytest.raises(ValueError, match="w must"):
        d.threshold_scores(np.array([2, 0]))
    with pytest.raises(ValueError, match="I <= J"):
        d.interval_search(np.zeros(4, int), np.zeros(4, bool), 3, 1, n_annotators=1, budget=1,
                          annotate=lambda p: p, rng=np.random.default_rng(0))


def test_uncertainty_baselines_match_brute_force():
    p, _ = _pool(60)
    unl = np.arange(10, 60)
    for kind, score in (("confidence", lambda r: 1 - r.max()), ("margin", lambda r: -(np.sort(r)[-1] - np.sort(r)[-2])),
                        ("entropy", lambda r: -(r * np.log(r)).sum())):
        brute = sorted(unl, key=lambda i: (-score(p[i]), i))[:7]
        np.testing.assert_array_equal(ab.top_uncertain(ab.uncertainty_scores(p, kind), unl, 7), brute)


def test_exact_ties_in_uncertainty_are_broken_at_random_not_by_index():
    # a head that has seen one class scores every example the same: by index it would query one end of the pool
    scores, unl = np.zeros(100), np.arange(100)
    picks = [set(ab.top_uncertain(scores, unl, 10, np.random.default_rng(s)).tolist()) for s in range(3)]
    assert picks[0] != picks[1] and any(max(p) > 50 for p in picks)
    assert list(ab.top_uncertain(scores, unl, 3)) == [0, 1, 2]  # without rng: by index


def test_coreset_picks_the_farthest_point_then_the_next_farthest():
    emb = np.array([[0.0], [1.0], [10.0], [4.0], [6.0]])
    lab = np.array([True, False, False, False, False])
    # squared distances to {0}: 1, 100, 16, 36 -> 10; then to {0, 10}: 1, 16, 16 (tie: first) -> 4; then 6
    assert list(ab.coreset(emb, lab, 3)) == [2, 3, 4]


def test_galaxy_bisects_the_shortest_unlabelled_run_between_differing_labels():
    # one class, line order = index order: labelled + at 0, - at 6, + at 8, - at 11 (pos 8 a flip)
    n = 12
    order = np.arange(n)
    observed = np.full(n, -1)
    taken = np.zeros(n, bool)
    for i, lab in ((0, 0), (6, 1), (8, 0), (11, 1)):
        observed[i], taken[i] = lab, True
    # runs: 1..5 (5 long, 0|1), 7 (1 long, 1|0), 9..10 (2 long, 0|1): the shortest is {7}
    assert ab._galaxy_pick(order, observed, taken, 0, np.random.default_rng(0)) == 7
    taken[7], observed[7] = True, 1
    assert ab._galaxy_pick(order, observed, taken, 0, np.random.default_rng(0)) == 9


def test_badge_returns_distinct_unlabelled_examples():
    p, _ = _pool(80)
    emb = np.random.default_rng(1).normal(size=(80, 5))
    lab = np.zeros(80, bool)
    lab[:20] = True
    q = ab.badge(p, emb, lab, 15, np.random.default_rng(0))
    assert np.unique(q).size == 15 and (q >= 20).all()


def test_imbalanced_digits_is_imbalanced_noisy_and_deterministic():
    a = imbalanced_digits(3, noise=0.2)
    b = imbalanced_digits(3, noise=0.2)
    np.testing.assert_array_equal(a.y_noisy, b.y_noisy)
    counts = np.bincount(a.y_true, minlength=10)
    assert counts.max() > 10 * counts[list(a.minority)].max()
    assert 0.15 < np.mean(a.y_noisy != a.y_true) < 0.25
    assert np.all(np.bincount(a.y_test, minlength=10) > 30)


def test_al_round_is_deterministic_and_grows_the_labelled_set_by_the_batch():
    data = imbalanced_digits(0, noise=0.1)
    for strategy in ("direct", "galaxy", "badge"):
        st = initial_state(strategy, data, initial=20, seed=5, C=1.0)
        one = al_round(st, data, round_index=0, batch=30, select=True, n_annotators=2)
        two = al_round(st, data, round_index=0, batch=30, select=True, n_annotators=2)
        assert one == two and len(one.labeled) == 50 and len(set(one.labeled)) == 50


def test_active_learning_classifier_fits_predicts_and_validates():
    from sklearn.datasets import load_digits
    from sklearn.base import clone

    X, y = load_digits(return_X_y=True)
    clf = ActiveLearningClassifier(batch=20, rounds=2, random_state=0).fit(X / 16, y)
    assert clf.labeled_indices_.size == 60 and clf.score(X / 16, y) > 0.6
    assert clone(clf).get_params() == clf.get_params()
    with pytest.raises(ValueError, match="strategy"):
        ActiveLearningClassifier(strategy="nope").fit(X, y)
    with pytest.raises(ValueError, match="batch"):
        ActiveLearningClassifier(batch=0).fit(X, y)


def _estimator_checks():
    from sklearn.utils.estimator_checks import parametrize_with_checks

    return parametrize_with_checks([ActiveLearningClassifier(initial=5, batch=5, rounds=2, random_state=0)])


@_estimator_checks()
def test_active_learning_classifier_passes_sklearn_estimator_checks(estimator, check):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


def test_fit_head_class_weight_balanced_and_unweighted_match_sklearn():
    from sklearn.linear_model import LogisticRegression

    from rayml.data.active_learning import fit_head

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    y = np.r_[np.zeros(50, int), np.ones(6, int), np.full(4, 2)]
    X[y == 1] += 1.0
    for cw in ("balanced", None):
        ours = fit_head(X, y, 0.5, 3, class_weight=cw)
        ref = LogisticRegression(C=0.5, max_iter=300, class_weight=cw).fit(X, y)
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)
    # the default is the balanced head, and the two differ on imbalanced labels
    assert not np.allclose(fit_head(X, y, 0.5, 3).intercept_, fit_head(X, y, 0.5, 3, class_weight=None).intercept_)
    with pytest.raises(ValueError, match="class_weight"):
        fit_head(X, y, 0.5, 3, class_weight="inverse")


def test_al_round_records_minority_and_majority_recall_by_hand():
    from rayml.data.active_learning import RunState, fit_head, predict_proba

    data = imbalanced_digits(1, noise=0.0)
    st = initial_state("random", data, initial=60, seed=2, C=1.0)
    point = al_round(st, data, round_index=0, batch=10, select=False).curve[-1]
    lab = np.asarray(st.labeled)
    pred = predict_proba(fit_head(data.X_pool[lab], np.asarray(st.observed), 1.0, 10), data.X_test, 10).argmax(1)
    recall = {c: np.mean(pred[data.y_test == c] == c) for c in range(10)}
    assert point["minority_recall"] == pytest.approx(np.mean([recall[c] for c in data.minority]))
    assert point["majority_recall"] == pytest.approx(np.mean([recall[c] for c in range(10) if c not in data.minority]))
    # balanced accuracy is the class-count-weighted mean of the two
    k = len(data.minority)
    assert point["balanced_accuracy"] == pytest.approx((k * point["minority_recall"]
                                                        + (10 - k) * point["majority_recall"]) / 10)
    # an unweighted head is what class_weight=None runs
    unw = al_round(RunState(**{**st.__dict__}), data, round_index=0, batch=10, select=False, class_weight=None)
    pred_u = predict_proba(fit_head(data.X_pool[lab], np.asarray(st.observed), 1.0, 10, class_weight=None),
                           data.X_test, 10).argmax(1)
    assert unw.curve[-1]["balanced_accuracy"] == pytest.approx(
        np.mean([np.mean(pred_u[data.y_test == c] == c) for c in range(10)]))


def test_oracle_balanced_labels_each_true_class_evenly_and_shares_a_short_class():
    from rayml.data.active_learning import oracle_balanced

    y = np.array([0] * 50 + [1] * 50 + [2] * 3 + [3] * 10)
    rng = np.random.default_rng(0)
    q = oracle_balanced(y, np.array([0, 50]), 20, 4, rng)
    assert q.size == 20 and np.unique(q).size == 20 and not np.isin(q, [0, 50]).any()
    # class 2 has 3 examples: all of them, its shortfall of 2 shared by the others (5 + 1 or 5 + 0 each)
    counts = np.bincount(y[q], minlength=4)
    assert counts[2] == 3 and sorted(counts[[0, 1, 3]]) == [5, 6, 6]
    assert counts.sum() == 20 and counts[[0, 1, 3]].min() >= 5
    # the labels read are the true ones, the budget is spent while the pool lasts, and the pool can run out
    assert oracle_balanced(y, np.arange(100), 50, 4, rng).size == 13
    # a remainder smaller than the classes with room goes to distinct classes
    assert sorted(np.bincount(y[oracle_balanced(y, np.array([], dtype=int), 6, 4, rng)], minlength=4)) == [1, 1, 2, 2]


def test_al_round_runs_the_oracle_on_true_labels_and_records_head_iterations():
    from rayml.data.active_learning import MAX_ITER, ORACLE, STRATEGIES

    assert ORACLE in STRATEGIES
    data = imbalanced_digits(0, noise=0.3)
    st = initial_state(ORACLE, data, initial=20, seed=5, C=1.0)
    nxt = al_round(st, data, round_index=0, batch=40, select=True)
    new = np.asarray(nxt.labeled[20:])
    assert np.bincount(data.y_true[new], minlength=10).tolist() == [4] * 10  # true classes, not noisy labels
    assert list(nxt.observed[20:]) == data.y_noisy[new].tolist()  # the annotations stay noisy
    assert 0 < nxt.curve[-1]["head_iterations"] < MAX_ITER
