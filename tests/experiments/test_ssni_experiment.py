"""rayml.experiments.ssni: every declared claim is wired to a number its run measures."""

import copy
import pathlib

import numpy as np

from rayml import records
from rayml.experiments import ssni
from rayml.results import evaluate_claims

FULL = pathlib.Path(__file__).resolve().parents[2] / "docs" / "records" / "ssni@full.json"

# Session 10, R5: the full record at 7761130, l_inf 0.1 -- every defence's adaptive accuracy over the
# three schedule steps it ran (1x1, 2x1, 4x2; of 48 images x 2 draws = 96). Each step moved every
# defence by less than 0.05, so the old rule called all 17 converged (largest step 0.042), while
# DiffPure t* = 250 slid 0.062 over the last two steps and 13 defences lost accuracy on the last step
# against 1 that gained.
R5_EPS100 = {name: [v / 96 for v in counts] for name, counts in {
    "diffpure_t25": [83, 79, 79], "diffpure_t50": [85, 84, 84], "diffpure_t75": [83, 83, 80],
    "diffpure_t100": [81, 80, 79], "diffpure_t125": [82, 81, 79], "diffpure_t150": [78, 78, 76],
    "diffpure_t250": [63, 61, 57], "gdmp_t25": [81, 82, 78], "gdmp_t50": [83, 84, 82], "gdmp_t75": [87, 89, 86],
    "gdmp_t100": [85, 87, 84], "gdmp_t125": [85, 85, 82], "gdmp_t150": [81, 81, 79], "gdmp_t250": [75, 73, 76],
    "diffpure_t90": [81, 81, 81], "diffpure_ssni_n": [84, 82, 80], "diffpure_ssni_l": [86, 85, 82]}.items()}


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("ssni") == []


def _robust_claims(out, lab):
    texts = [t for t in out if t.startswith("SSNI-") and "DiffPure's curve" in t and f"l_inf {lab};" in t]
    assert len(texts) == 2
    return texts


def _with_attack(record, lab, recent_range, sign_p):
    """Set a radius's convergence numbers (and the per-defence ones the claims read, which a record
    from before the range rule lacks; they gate nothing)."""
    for where, name in (("baselines", ssni.CONTROL), ("metrics", "diffpure_ssni_n"), ("metrics", "diffpure_ssni_l")):
        record[where][lab][name].setdefault("recent_range", 0.0)
    for name in ssni.OURS:  # the per-defence McNemar gate (session 11, R7) passes: not what these tests are about
        record["metrics"][lab][name]["mcnemar_min_p"] = 1.0
    record["metrics"][lab]["attack"]["max_recent_range"] = recent_range
    record["metrics"][lab]["attack"]["last_step_sign_p"] = sign_p


def test_robustness_claims_are_incomplete_where_an_attack_did_not_converge():
    """Issue 40 audit: the full record's two holds at l_inf 0.2 stood on adaptive attacks still moving at
    the schedule's cap. Each radius's SSNI-vs-DiffPure claims are gated on every defence's attack having
    converged at that radius (and on the attack working), so the same record with one radius unconverged
    makes exactly that radius's claims incomplete."""
    record = copy.deepcopy(records.load_record(FULL))
    _with_attack(record, "eps100", 0.0, 1.0)                     # converged, no common trend
    _with_attack(record, "eps200", 2 * ssni.TOLERANCE, 1.0)      # one defence still moving
    out = {c["text"]: c for c in evaluate_claims(record, ssni.CLAIMS)}
    for text in _robust_claims(out, "eps200"):
        assert out[text]["status"] == "incomplete"
        assert out[text]["gated_by"] == [ssni._converged_every("eps200").text]
    for text in _robust_claims(out, "eps100"):
        assert "gated_by" not in out[text] and out[text]["status"] != "incomplete"
        assert ssni._converged_every("eps100").text in out[text]["gates"]
        assert ssni._no_common_trend("eps100").text in out[text]["gates"]


def test_r5_slow_slide_is_not_convergence():
    """Session 10, R5: DiffPure t* = 250 at l_inf 0.1 went 0.656 -> 0.635 -> 0.594, each step under the
    0.05 tolerance but 0.062 over the two; the rule judges the range over the patience window, so it
    is not converged and its attack continues (on the old per-step rule it stopped)."""
    traj = R5_EPS100["diffpure_t250"]
    assert all(abs(b - a) < ssni.TOLERANCE for a, b in zip(traj, traj[1:]))
    assert ssni._recent_change(traj, ssni.PATIENCE) >= ssni.TOLERANCE
    assert abs(ssni._recent_change(traj, ssni.PATIENCE) - 6 / 96) < 1e-12
    assert abs(ssni._recent_change([0.5, 0.53, 0.5], 2) - 0.03) < 1e-12  # a rise and fall count as movement
    # the stopping rule itself: the old full config (min_steps 2, 4 steps) after 3 steps, R5's numbers
    config = {**ssni.SIZES["full"], "min_steps": 2}
    names = ssni.defences(config)
    assert set(names) == set(R5_EPS100)
    parts = []
    for start in range(0, 48, 24):
        correct = {}
        for lab in ssni.LABELS:
            for name in names:
                for k, acc in enumerate(R5_EPS100[name]):
                    row = np.arange(96).reshape(2, 48) < round(acc * 96)  # 2 draws x 48 images
                    correct[(lab, name, f"adaptive_{k}")] = row[:, start:start + 24]
        parts.append({"chunk": start // 24, "start": start, "n": 24, "correct": correct, "levels": {}})
    jobs = ssni.next_jobs(parts, config)
    assert sorted(jobs) == sorted((float(r), "diffpure_t250", "adaptive", 3) for r in config["radii"])


def test_r5_trajectories_fail_both_convergence_gates_at_full_size():
    """R5's l_inf 0.1 numbers make the radius's robustness claims incomplete: the largest range over the
    window is 0.0625 >= 0.05 (DiffPure t* = 250), and 13 of 14 non-tied last steps lost accuracy
    (one-sided sign test p = 15 / 2**14)."""
    ranges = [ssni._recent_change(v, ssni.PATIENCE) for v in R5_EPS100.values()]
    sign = ssni._last_step_sign([v[-1] - v[-2] for v in R5_EPS100.values()])
    assert (sign["losses"], sign["gains"], sign["ties"]) == (13, 1, 3)
    assert abs(sign["p"] - 15 / 2 ** 14) < 1e-12
    # the old rule's number (largest single step) passed: 4 / 96 = 0.042 < 0.05
    assert max(max(abs(b - a) for a, b in zip(v, v[1:])) for v in R5_EPS100.values()) < ssni.TOLERANCE
    record = copy.deepcopy(records.load_record(FULL))
    _with_attack(record, "eps100", max(ranges), sign["p"])
    _with_attack(record, "eps200", 0.0, 1.0)
    out = {c["text"]: c for c in evaluate_claims(record, ssni.CLAIMS)}
    for text in _robust_claims(out, "eps100"):
        assert out[text]["status"] == "incomplete"
        assert set(out[text]["gated_by"]) == {ssni._converged_every("eps100").text,
                                              ssni._no_common_trend("eps100").text}
    # each gate alone is enough: the window range passing, the sign test still fails the claims
    _with_attack(record, "eps100", 0.0, sign["p"])
    out = {c["text"]: c for c in evaluate_claims(record, ssni.CLAIMS)}
    for text in _robust_claims(out, "eps100"):
        assert out[text]["gated_by"] == [ssni._no_common_trend("eps100").text]


def test_last_step_sign_test_edges():
    assert ssni._last_step_sign([0.0, 0.0, float("nan")]) == {"losses": 0, "gains": 0, "ties": 2, "p": 1.0}
    both = ssni._last_step_sign([-0.1, 0.1])
    assert (both["losses"], both["gains"]) == (1, 1) and both["p"] == 0.75
    assert ssni._last_step_sign([0.1] * 10)["p"] == 1.0  # rises never count as strengthening
    assert ssni._last_step_sign([-0.01] * 5)["p"] == 1 / 32


def test_every_size_runs_its_whole_schedule():
    """R5: convergence was declared after 3 of the full size's 4 steps; every size (and the cluster's
    paper scale) now runs its whole schedule before convergence is judged."""
    for cfg in (*ssni.SIZES.values(), ssni.PAPER_SCALE):
        assert cfg["min_steps"] == len(cfg["schedule"])


def test_envelope_candidate_schedule_follows_its_levels():
    grid = ["a", "b"]
    acc = {"a": {"schedule": [0.9, 0.8, 0.7]}, "b": {"schedule": [0.5, 0.5]}}
    assert ssni._candidate_schedule({"points": [0], "weight": 1.0}, grid, acc) == [0.9, 0.8, 0.7]
    mixed = ssni._candidate_schedule({"points": [0, 1], "weight": 0.25}, grid, acc)
    assert np.allclose(mixed, [0.25 * 0.9 + 0.75 * 0.5, 0.25 * 0.8 + 0.75 * 0.5])


# --- session 11, R7: a slide in SSNI alone, and a noisy plateau -----------------------------------------


def _schedule_parts(config, images, draws, outcomes_by_name):
    """One part (all ``images``) whose adaptive steps hold, per defence at both radii, the given
    ``(draws, images)`` boolean outcomes per step; the other keys ``_summarise`` reads are constant."""
    names = ssni.defences(config)
    correct, norms, norm_levels = {}, {}, {}
    for lab in ssni.LABELS:
        for a in ("clean", "pgd", "random"):  # PGD works on the bare classifier (the radius's attack gate)
            correct[(lab, "classifier", a)] = np.full((1, images), a != "pgd")
        for name in names:
            correct[(lab, name, "clean")] = np.ones((draws, images), bool)
            correct[(lab, name, "clean_extra")] = np.zeros((draws, 0), bool)
            correct[(lab, name, "pgd")] = np.ones((draws, images), bool)
            for k, out in enumerate(outcomes_by_name[name]):
                correct[(lab, name, f"adaptive_{k}")] = out
        norms.update({(lab, k): np.full(images, 3.0) for k in ("pgd", "random")})
        norm_levels.update({(lab, k): np.full(images, 50.0) for k in ("clean", "pgd", "random")})
    norms.update({("all", "clean"): np.ones(images), ("all", "clean_redraw"): np.ones(images)})
    return [{"chunk": 0, "seed": 0, "start": 0, "n": images, "correct": correct, "levels": {}, "norms": norms,
             "norm_levels": norm_levels}]


def _evaluated(parts, config):
    metrics, baselines, tables = ssni._summarise(parts, config)
    out = evaluate_claims({"metrics": metrics, "baselines": baselines, "tables": tables}, ssni.CLAIMS)
    return metrics, {c["text"]: c for c in out}


def _nested(count, draws, images):
    """``(draws, images)`` outcomes with the first ``count`` (in draw-major order) correct."""
    return np.arange(draws * images).reshape(draws, images) < count


def test_r7_slide_in_ssni_alone_fails_the_per_defence_gate_and_passed_the_old_ones():
    """Session 11, R7: SSNI-N alone slides 0.021 a step (10 of 480 outcomes per step: 240 images x 2
    draws), every other defence is flat. The old gates pass it -- the range over the last 3 steps is
    20 / 480 = 0.042 < 0.05, and the sign test over defences sees 1 loss and 16 ties (p = 0.5) -- but the
    exact McNemar between SSNI-N's last two steps (10 losses, 0 gains, p = 2^-10) makes its equal-clean
    claim incomplete; SSNI-L's claim, whose defences are flat, is not gated by its own test."""
    config = {**ssni.SIZES["full"], "n_test": 240, "n_clean": 240}
    images, draws = 240, 2
    flat = [_nested(400, draws, images)] * 4
    outcomes = {n: flat for n in ssni.defences(config)}
    outcomes["diffpure_ssni_n"] = [_nested(420 - 10 * k, draws, images) for k in range(4)]
    metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
    for lab in ssni.LABELS:
        att = metrics[lab]["attack"]
        assert abs(att["max_recent_range"] - 20 / 480) < 1e-12 and 20 / 480 < ssni.TOLERANCE  # old gate passes
        assert (att["last_step_losses"], att["last_step_gains"], att["last_step_sign_p"]) == (1, 0, 0.5)
        assert out[ssni._converged_every(lab).text]["holds"] and out[ssni._no_common_trend(lab).text]["holds"]
        n_test = metrics[lab]["diffpure_ssni_n"]["mcnemar"]["diffpure_ssni_n"]
        assert (n_test["losses"], n_test["gains"]) == (10, 0) and abs(n_test["p"] - 2.0 ** -10) < 1e-15
        assert not out[ssni._claim_defences_flat("n", lab).text]["holds"]
        assert out[ssni._claim_defences_flat("l", lab).text]["holds"]
        claim_n, claim_l = (out[ssni._equal_clean(v, lab).text] for v in ("n", "l"))
        assert claim_n["status"] == "incomplete"
        assert claim_n["gated_by"] == [ssni._claim_defences_flat("n", lab).text]
        assert "gated_by" not in claim_l
        # the envelope's DiffPure levels are tested too (here every grid level ties, the lowest t* is kept)
        assert metrics[lab]["diffpure_ssni_n"]["convergence_defences"][0] == "diffpure_ssni_n"
        assert len(metrics[lab]["diffpure_ssni_n"]["convergence_defences"]) >= 2


def test_a_slide_in_an_envelope_level_gates_the_claim_too():
    config = {**ssni.SIZES["full"], "n_test": 240, "n_clean": 240}
    images, draws = 240, 2
    outcomes = {n: [_nested(400, draws, images)] * 4 for n in ssni.defences(config)}
    # DiffPure t* = 25 is the best level (the envelope candidate) and is still sliding
    outcomes["diffpure_t25"] = [_nested(470 - 10 * k, draws, images) for k in range(4)]
    metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
    lab = ssni.LABELS[0]
    assert "diffpure_t25" in metrics[lab]["diffpure_ssni_n"]["convergence_defences"]
    for v in ("n", "l"):
        assert out[ssni._equal_clean(v, lab).text]["gated_by"] == [ssni._claim_defences_flat(v, lab).text]


def test_a_flat_noisy_plateau_passes_every_convergence_gate_at_full_size():
    """Full size (48 images x 2 draws = 96 outcomes): every defence re-decides 6 outcomes at each step, 3
    each way (accuracy flat at 80 / 96). Every gate passes: the range is 0 outcomes (the tolerance is 5),
    each McNemar test sees 3 losses and 3 gains (p = 42 / 64), no defence's last step is a loss. The
    computed false-alarm rates at this size: each McNemar test at 6 discordant outcomes rejects a flat
    plateau with probability 1 / 64, and the range rule with this plateau's changes (6 a step) fails 5
    outcomes with the probability the exact recursion gives (checked by brute force below)."""
    config = ssni.SIZES["full"]
    images, draws = 48, 2
    base = _nested(80, draws, images).ravel()
    seq = []
    for k in range(4):
        out = base.copy()
        if k % 2:  # alternate: 3 correct turn wrong and 3 wrong turn correct, then back
            out[[0, 1, 2]] = False
            out[[90, 91, 92]] = True
        seq.append(out.reshape(draws, images))
    outcomes = {n: seq for n in ssni.defences(config)}
    metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
    for lab in ssni.LABELS:
        att = metrics[lab]["attack"]
        assert att["outcomes"] == 96 and att["range_fails_at_outcomes"] == 5 and att["max_recent_range"] == 0.0
        for v in ("n", "l"):
            d = metrics[lab][f"diffpure_ssni_{v}"]
            assert all(t["losses"] == 3 and t["gains"] == 3 for t in d["mcnemar"].values())
            assert abs(d["mcnemar_min_p"] - 42 / 64) < 1e-12
            k = len(d["convergence_defences"])
            assert abs(d["mcnemar_family_false_alarm"] - (1 - (1 - 1 / 64) ** k)) < 1e-12
            assert out[ssni._equal_clean(v, lab).text]["status"] != "incomplete"
        fa = att["range_false_alarm"]["diffpure_ssni_n"]
        assert abs(fa - ssni._range_false_alarm([6, 6], 96, ssni.TOLERANCE)) < 1e-15 and 0 < fa < 1
        for gate_claim in (ssni._converged_every(lab), ssni._no_common_trend(lab)):
            assert out[gate_claim.text]["holds"]


def test_range_false_alarm_matches_brute_force_and_states_the_tolerance_in_outcomes():
    import itertools

    assert ssni._range_fail_outcomes(0.05, 96) == 5 and ssni._range_fail_outcomes(0.05, 32) == 2
    assert ssni._range_fail_outcomes(0.05, 100) == 5  # 5 / 100 is not < 0.05
    for window, outcomes in (([3, 4], 96), ([2, 1, 3], 32), ([5, 0], 60)):
        m = ssni._range_fail_outcomes(ssni.TOLERANCE, outcomes)
        fail = 0.0
        for signs in itertools.product(*[list(itertools.product((-1, 1), repeat=d)) for d in window]):
            pos = np.cumsum([0] + [sum(s) for s in signs])
            fail += float(pos.max() - pos.min() >= m) * 2.0 ** -sum(window)
        assert abs(ssni._range_false_alarm(window, outcomes, ssni.TOLERANCE) - fail) < 1e-12
    assert ssni._range_false_alarm([0, 0], 96, ssni.TOLERANCE) == 0.0
    # R7: at quick size (16 images x 2 draws) two outcomes re-decided per step already fail often
    assert ssni._range_false_alarm([2, 2], 32, ssni.TOLERANCE) > 0.5
    # and at full size the largest last-step slide the range rule passes (4 of 96 outcomes lost, none
    # gained) is beyond what the per-defence McNemar test can detect at 0.05: p = 1 / 16
    from rayml.evidence import mcnemar_exact

    assert mcnemar_exact(np.ones(4), np.zeros(4))["p"] == 1 / 16
