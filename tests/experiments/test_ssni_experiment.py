"""rayml.experiments.ssni: every declared claim is wired to a number its run measures."""

import copy
import functools
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


def _gate_paths(lab):
    """The gates' claim paths at a radius, each with its raw p and its power statement (R14)."""
    att = f"metrics.{lab}.attack"
    out = {f"{att}.range_gate_p": (f"{att}.range_holm_min_p", f"{att}.gate_power.range"),
           f"{att}.last_step_sign_gate_p": (f"{att}.last_step_sign_p", f"{att}.gate_power.sign")}
    for name in ssni.OURS:
        out[f"metrics.{lab}.{name}.own_gate_p"] = (f"metrics.{lab}.{name}.own_holm_min_p",
                                                   f"metrics.{lab}.{name}.own_gate.power")
    # R15: the per-defence range claims at KEY_RANGE_ALPHA (l_inf 0.2) and the controls' paired tests
    for where, name in (("baselines", ssni.CONTROL), ("metrics", "diffpure_ssni_n"), ("metrics", "diffpure_ssni_l")):
        out[f"{where}.{lab}.{name}.range_key_p"] = (f"{where}.{lab}.{name}.range_p",
                                                    f"{where}.{lab}.{name}.range_key_power")
    out[f"baselines.{lab}.{ssni.CONTROL}.control_gap"] = (f"baselines.{lab}.{ssni.CONTROL}.gap_at_equal_clean",
                                                          f"baselines.{lab}.{ssni.CONTROL}.control_power")
    for who, what in (("random_noise", "score_norm"), ("clean_redraw", "score_norm"), ("random_noise", "level_shift"),
                      ("diffpure_constant", "level_shift")):
        out[f"baselines.{lab}.{who}.control_{what}"] = (f"baselines.{lab}.{who}.{what}",
                                                        f"baselines.{lab}.{who}.control_power.{what}")
    return out


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims, tiny_record):
    """Every claim path holds a number at tiny size, except a convergence gate that has no power there (4
    images: R14's rule leaves its metric empty, so its claims are incomplete): its raw p is measured and its
    power statement says why."""
    from rayml.results import lookup

    record = tiny_record("ssni")
    gates = {k: v for lab in ssni.LABELS for k, v in _gate_paths(lab).items()}
    missing = unmeasured_claims("ssni")
    for path in missing:
        assert path in gates, path
        raw, power = gates[path]
        assert isinstance(lookup(record, raw), float)
        stated = lookup(record, power)
        assert stated["status"] == "no power" and stated["smallest_attainable_p"] >= stated["level"]
        assert "holds whatever the data" in stated["reason"] or "cannot pass" in stated["reason"]


def _robust_claims(out, lab):
    texts = [t for t in out if t.startswith("SSNI-") and "DiffPure's curve" in t and f"l_inf {lab};" in t]
    assert len(texts) == 2
    return texts


def _with_attack(record, lab, range_holm_p, sign_p):
    """Set a radius's convergence numbers (and the per-defence ones the claims read, which a record
    from before the range test lacks; they gate nothing)."""
    for where, name in (("baselines", ssni.CONTROL), ("metrics", "diffpure_ssni_n"), ("metrics", "diffpure_ssni_l")):
        record[where][lab][name].setdefault("range_p", 1.0)
        record[where][lab][name].setdefault("range_key_p", 1.0)
    # a record from before R15 lacks the controls' power-checked metrics: there they read the raw numbers
    ctl = record["baselines"][lab][ssni.CONTROL]
    ctl.setdefault("control_gap", ctl["gap_at_equal_clean"])
    for who, what in (("random_noise", "score_norm"), ("clean_redraw", "score_norm"), ("random_noise", "level_shift"),
                      ("diffpure_constant", "level_shift")):
        record["baselines"][lab][who].setdefault(f"control_{what}", record["baselines"][lab][who][what])
    for name in ssni.OURS:  # the own-defence gate (session 11, R7; session 14) passes: not what these tests are about
        record["metrics"][lab][name]["mcnemar_min_p"] = 1.0
        record["metrics"][lab][name]["own_holm_min_p"] = 1.0
        record["metrics"][lab][name]["own_gate_p"] = 1.0
    record["metrics"][lab]["attack"]["range_holm_min_p"] = range_holm_p
    record["metrics"][lab]["attack"]["last_step_sign_p"] = sign_p
    record["metrics"][lab]["attack"]["range_gate_p"] = range_holm_p
    record["metrics"][lab]["attack"]["last_step_sign_gate_p"] = sign_p


def test_robustness_claims_are_incomplete_where_an_attack_did_not_converge():
    """Issue 40 audit: the full record's two holds at l_inf 0.2 stood on adaptive attacks still moving at
    the schedule's cap. Each radius's SSNI-vs-DiffPure claims are gated on every defence's attack having
    converged at that radius (and on the attack working), so the same record with one radius unconverged
    makes exactly that radius's claims incomplete."""
    record = copy.deepcopy(records.load_record(FULL))
    _with_attack(record, "eps100", 1.0, 1.0)                     # converged, no common trend
    _with_attack(record, "eps200", ssni.RANGE_ALPHA / 2, 1.0)    # one defence still moving
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


def _r5_range_tests():
    """R5's l_inf 0.1 windows through the range test, with the fewest changed outcomes their accuracies
    allow (each step's change all losses or all gains: the test's most powerful case)."""
    tests = {}
    for name, accs in R5_EPS100.items():
        counts = [round(a * 96) for a in accs]
        tests[name] = ssni._range_test([abs(b - a) for a, b in zip(counts, counts[1:])], max(counts) - min(counts))
    return tests


def test_r5_trajectories_fail_the_trend_gate_at_the_old_full_size():
    """R5's l_inf 0.1 numbers make the radius's robustness claims incomplete through the sign test over
    defences: 13 of 14 non-tied last steps lost accuracy (one-sided p = 15 / 2**14). The range test per
    defence does not see this shared slide at 96 outcomes: DiffPure t* = 250's 63 -> 61 -> 57 is the
    most extreme window (p = 2 / 2**6 with no churn), and Holm across the 17 defences makes that 17 / 32;
    a slide all defences share is the sign test's job, which is why it stays."""
    sign = ssni._last_step_sign([v[-1] - v[-2] for v in R5_EPS100.values()])
    assert (sign["losses"], sign["gains"], sign["ties"]) == (13, 1, 3)
    assert abs(sign["p"] - 15 / 2 ** 14) < 1e-12
    tests = _r5_range_tests()
    assert abs(tests["diffpure_t250"]["p"] - 2 / 2 ** 6) < 1e-12
    holm = ssni._holm({n: t["p"] for n, t in tests.items()})
    assert abs(min(holm.values()) - 17 / 32) < 1e-12
    record = copy.deepcopy(records.load_record(FULL))
    _with_attack(record, "eps100", min(holm.values()), sign["p"])
    _with_attack(record, "eps200", 1.0, 1.0)
    out = {c["text"]: c for c in evaluate_claims(record, ssni.CLAIMS)}
    for text in _robust_claims(out, "eps100"):
        assert out[text]["status"] == "incomplete"
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


# The stack's Monte Carlo (``_stack_rates``: a recorded diagnostic no claim reads) takes most of a full-size
# ``_summarise``; the gate tests run it at FEW_STACK_SIMS draws, the stack's own test at ssni.STACK_SIMS.
FEW_STACK_SIMS = 200


def _evaluated(parts, config, stack_sims=FEW_STACK_SIMS):
    from unittest import mock

    with mock.patch.object(ssni, "_stack_rates", functools.partial(ssni._stack_rates, sims=stack_sims)):
        metrics, baselines, tables = ssni._summarise(parts, config)
    out = evaluate_claims({"metrics": metrics, "baselines": baselines, "tables": tables}, ssni.CLAIMS)
    return metrics, {c["text"]: c for c in out}


def _nested(count, draws, images):
    """``(draws, images)`` outcomes with the first ``count`` (in draw-major order) correct."""
    return np.arange(draws * images).reshape(draws, images) < count


def test_r7_slide_in_ssni_alone_fails_the_range_and_per_defence_gates_at_480_outcomes():
    """Session 11, R7: SSNI-N alone slides 0.021 a step (10 of 480 outcomes per step: 240 images x 2
    draws), every other defence is flat. The sign test over defences sees 1 loss and 16 ties (p = 0.5)
    and the old fixed tolerance passed it (range 20 / 480 = 0.042 < 0.05); the exact range test sees 20
    outcomes of range from 20 changed ones (p = 2 / 2**20; Holm across the 17 defences 17 / 2**19), so
    the every-defence gate fails, and the exact McNemar between SSNI-N's last two steps (10 losses, 0
    gains, p = 2^-10) gates its claim on its own; SSNI-L's own defences are flat."""
    config = {**ssni.SIZES["full"], "n_test": 240, "n_clean": 240}
    images, draws = 240, 2
    flat = [_nested(400, draws, images)] * 4
    outcomes = {n: flat for n in ssni.defences(config)}
    outcomes["diffpure_ssni_n"] = [_nested(420 - 10 * k, draws, images) for k in range(4)]
    metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
    for lab in ssni.LABELS:
        att = metrics[lab]["attack"]
        assert abs(att["max_recent_range"] - 20 / 480) < 1e-12 and 20 / 480 < 0.05  # the old tolerance passed
        assert (att["last_step_losses"], att["last_step_gains"], att["last_step_sign_p"]) == (1, 0, 0.5)
        # one defence moved: the sign test cannot reach 0.0125 (R14), so it has no power and gates both claims
        assert att["gate_power"]["sign"]["status"] == "no power"
        assert out[ssni._no_common_trend(lab).text]["status"] == "incomplete"
        assert abs(att["range_p"]["diffpure_ssni_n"] - 2.0 ** -19) < 1e-15
        assert abs(att["range_holm_min_p"] - 17 * 2.0 ** -19) < 1e-15 and att["range_rejected"] == ["diffpure_ssni_n"]
        assert not out[ssni._converged_every(lab).text]["holds"]
        n_test = metrics[lab]["diffpure_ssni_n"]["mcnemar"]["diffpure_ssni_n"]
        assert (n_test["losses"], n_test["gains"]) == (10, 0) and abs(n_test["p"] - 2.0 ** -10) < 1e-15
        assert not out[ssni._claim_defences_flat("n", lab).text]["holds"]
        assert out[ssni._claim_defences_flat("l", lab).text]["holds"]
        claim_n, claim_l = (out[ssni._equal_clean(v, lab).text] for v in ("n", "l"))
        assert claim_n["status"] == claim_l["status"] == "incomplete"
        assert set(claim_n["gated_by"]) == {ssni._claim_defences_flat("n", lab).text, ssni._converged_every(lab).text,
                                            ssni._no_common_trend(lab).text}
        assert set(claim_l["gated_by"]) == {ssni._converged_every(lab).text, ssni._no_common_trend(lab).text}
        # the envelope's DiffPure levels are tested too (here every grid level ties, the lowest t* is kept)
        assert metrics[lab]["diffpure_ssni_n"]["convergence_defences"][0] == "diffpure_ssni_n"
        assert len(metrics[lab]["diffpure_ssni_n"]["convergence_defences"]) >= 2


def test_r7_slide_in_one_claim_defence_fails_the_range_gate_at_full_size():
    """At the full size (160 images x 2 draws = 320 outcomes) R7's slide in SSNI-N alone is 7 outcomes a
    step; with no churn its window's range is 14 of 320 = 0.044, under the old 0.05 tolerance, while the
    range test gives p = 2 / 2**14 and Holm across the 17 defences 17 / 2**13 < 0.05: the every-defence
    gate fails, and the McNemar gate (7 losses, p = 2^-7) fails the claim too."""
    config = ssni.SIZES["full"]
    images, draws = config["n_test"], config["replicates"]
    assert images * draws == 320
    outcomes = {n: [_nested(260, draws, images)] * 4 for n in ssni.defences(config)}
    outcomes["diffpure_ssni_n"] = [_nested(281 - 7 * k, draws, images) for k in range(4)]
    metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
    for lab in ssni.LABELS:
        att = metrics[lab]["attack"]
        assert abs(att["max_recent_range"] - 14 / 320) < 1e-12 and 14 / 320 < 0.05
        assert abs(att["range_holm_min_p"] - 17 * 2.0 ** -13) < 1e-15
        assert not out[ssni._converged_every(lab).text]["holds"]
        assert att["gate_power"]["sign"]["status"] == "no power"  # one defence moved (R14)
        assert not out[ssni._claim_defences_flat("n", lab).text]["holds"]


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
        assert set(out[ssni._equal_clean(v, lab).text]["gated_by"]) == {ssni._claim_defences_flat(v, lab).text,
                                                                          ssni._converged_every(lab).text,
                                                                          ssni._no_common_trend(lab).text}


def _plateau(images, draws, base, steps):
    """``(draws, images)`` outcomes over the schedule: ``base`` correct, then each step re-decides the given
    (losses, gains) relative to the step before (a flat plateau when they balance out)."""
    cur = _nested(base, draws, images).ravel()
    seq = [cur.reshape(draws, images)]
    for losses, gains in steps:
        cur = cur.copy()
        right, wrong = np.nonzero(cur)[0], np.nonzero(~cur)[0]
        cur[right[:losses]] = False
        cur[wrong[-gains:] if gains else []] = True
        seq.append(cur.reshape(draws, images))
    return seq


@functools.lru_cache(maxsize=1)
def _full_size_flat_plateau():
    """The full size's flat noisy plateau (every defence re-decides 30 outcomes a step: 5 / 5, 20 / 10, 7 / 23),
    evaluated once, with the stack at its recorded ssni.STACK_SIMS draws (shared by the two tests that read it;
    they do not modify it)."""
    config = ssni.SIZES["full"]
    images, draws = config["n_test"], config["replicates"]
    seq = _plateau(images, draws, 250, [(5, 5), (20, 10), (7, 23)])
    outcomes = {n: seq for n in ssni.defences(config)}
    return _evaluated(_schedule_parts(config, images, draws, outcomes), config, stack_sims=ssni.STACK_SIMS)


def test_a_flat_noisy_plateau_passes_every_convergence_gate_at_full_size():
    """Full size (160 images x 2 draws = 320 outcomes): every defence re-decides 30 outcomes a step (the
    churn of SSNI-L at 0.1 in the 96-outcome record, 9 of 96), 20 lost and 10 gained, then 7 lost and 23
    gained: the accuracy wanders 0, -10, +6 outcomes. Its range, 16 of 320 = 0.05, failed the old fixed
    tolerance (0.05 not < 0.05); the exact range test gives p = 0.056 per defence (Holm across 17: 0.95),
    the McNemar tests see a net gain, the sign test no loss: every gate passes."""
    metrics, out = _full_size_flat_plateau()
    for lab in ssni.LABELS:
        att = metrics[lab]["attack"]
        assert att["outcomes"] == 320 and abs(att["max_recent_range"] - 16 / 320) < 1e-12 and not 16 / 320 < 0.05
        d = metrics[lab]["diffpure_ssni_n"]
        assert d["range_test"]["changed"] == [30, 30] and d["range_test"]["range"] == 16
        assert abs(d["range_p"] - ssni._range_test([30, 30], 16)["p"]) < 1e-15 and 0.05 < d["range_p"] < 0.06
        assert att["range_holm_min_p"] > 0.9 and att["range_rejected"] == []
        assert att["range_family_false_alarm"] <= ssni.RANGE_ALPHA
        for v in ("n", "l"):
            assert out[ssni._equal_clean(v, lab).text]["status"] != "incomplete"
        for gate_claim in (ssni._converged_every(lab), ssni._no_common_trend(lab), ssni._claim_defences_flat("n", lab)):
            assert out[gate_claim.text]["holds"]


def test_range_test_matches_brute_force_and_its_size_is_at_most_its_level():
    import itertools

    for window in ([3, 4], [2, 1, 3], [5, 0], [6, 6]):
        ranges = {}
        for signs in itertools.product(*[list(itertools.product((-1, 1), repeat=d)) for d in window]):
            pos = np.cumsum([0] + [sum(s) for s in signs])
            r = int(pos.max() - pos.min())
            ranges[r] = ranges.get(r, 0.0) + 2.0 ** -sum(window)
        for observed in range(sum(window) + 2):
            brute = sum(pr for r, pr in ranges.items() if r >= observed) if observed > 0 else 1.0
            t = ssni._range_test(window, observed)
            assert abs(t["p"] - brute) < 1e-12
        tail = {m: sum(pr for r, pr in ranges.items() if r >= m) for m in range(sum(window) + 2)}
        size = ssni._range_test(window, 0, 0.1)["size"]
        assert size <= 0.1 and abs(size - max([v for v in tail.values() if v < 0.1], default=0.0)) < 1e-12
    assert ssni._range_test([0, 0], 0)["p"] == 1.0 and ssni._range_test([0, 0], 0)["size"] == 0.0


def test_holm_adjusts_step_down():
    adj = ssni._holm({"a": 0.01, "b": 0.04, "c": 0.5, "d": 0.03})
    assert np.allclose([adj["a"], adj["d"], adj["b"], adj["c"]], [0.04, 0.09, 0.09, 0.5])


def test_mcnemar_power_matches_enumeration_and_r7_needs_319_outcomes():
    """The exact power of the per-defence McNemar gate, against enumerating every (losses, gains) of a
    small run through ``rayml.evidence.mcnemar_exact``; R7's clean 0.021 slide needs 319 outcomes for
    power 0.8 (0.05 at the old full size's 96), the 0.042 over the two-step window 159."""
    from scipy import stats

    from rayml.evidence import mcnemar_exact

    n, slide, churn = 14, 0.1, 0.2
    pl, pg = slide + churn / 2, churn / 2
    brute = 0.0
    for losses in range(n + 1):
        for gains in range(n + 1 - losses):
            pr = stats.multinomial.pmf([losses, gains, n - losses - gains], n, [pl, pg, 1 - pl - pg])
            test = mcnemar_exact(np.r_[np.ones(losses), np.zeros(gains)], np.r_[np.zeros(losses), np.ones(gains)])
            brute += pr * (test["p"] <= 0.05)
    assert abs(ssni._mcnemar_power(n, slide, churn) - brute) < 1e-12
    assert ssni._mcnemar_outcomes_needed(ssni.R7_SLIDE, 0.0) == 319
    assert ssni._mcnemar_power(318, ssni.R7_SLIDE, 0.0) < 0.8 <= ssni._mcnemar_power(319, ssni.R7_SLIDE, 0.0)
    assert ssni._mcnemar_power(96, ssni.R7_SLIDE, 0.0) < 0.06
    assert ssni._mcnemar_outcomes_needed(2 * ssni.R7_SLIDE, 0.0) == 159
    # more churn needs more outcomes
    assert ssni._mcnemar_outcomes_needed(ssni.R7_SLIDE, 0.05) > ssni._mcnemar_outcomes_needed(ssni.R7_SLIDE, 0.01) > 319


# --- session 14, after R10: the two-step window, the stack's false-alarm budget --------------------------


def _r10_outcomes(config, images, draws, ssni_steps):
    """Every defence flat (250 of 320 correct, no outcome changes); SSNI-N's adaptive steps re-decide the
    given (losses, gains) per step (distinct outcomes: none flips back)."""
    flat = [_nested(250, draws, images)] * 4
    outcomes = {n: flat for n in ssni.defences(config)}
    outcomes["diffpure_ssni_n"] = _plateau(images, draws, 250, ssni_steps)
    return outcomes


def test_r10_two_step_slide_in_ssni_n_fails_the_own_defence_gate_at_full_size():
    """R10 on the full record: SSNI-N at l_inf 0.1 changed 6 then 4 outcomes of 320, 9 of the 10 losses (6 / 0,
    then 3 / 1: range 8, own range p = 0.021), and passed every gate before session 14 -- range Holm across 17
    0.36, last-step McNemar 3 / 1 (p = 5/16), the sign test one loss among 16 ties. The McNemar of step k-2
    against k sees 9 / 1 (p = 11/1024); the min-p over the two windows is 11/1024 too (the last step's 4
    discordant outcomes cannot reach it), Holm across SSNI-N's two tested defences 22/1024 < 0.025: the
    own-defence gate fails and SSNI-N's claim is incomplete; SSNI-L's defences are flat. Since session 15 the
    changed outcomes sit in distinct images, so the image-level counts are the same; the sign test (one
    defence moved) has no power and reads incomplete, which gates both claims (R14)."""
    config = ssni.SIZES["full"]
    images, draws = config["n_test"], config["replicates"]
    metrics, out = _evaluated(_schedule_parts(config, images, draws,
                                              _r10_outcomes(config, images, draws, [(0, 0), (6, 0), (3, 1)])), config)
    for lab in ssni.LABELS:
        d, att = metrics[lab]["diffpure_ssni_n"], metrics[lab]["attack"]
        assert d["window_changed_outcomes"] == [6, 4] and d["recent_range_outcomes"] == 8
        assert abs(d["range_p"] - 0.021) < 0.001
        # the gates before session 14 all pass: range Holm at 0.05, sign test at 0.05, last-step McNemar at 0.05
        assert att["range_holm_min_p"] > 0.3 and att["last_step_sign_p"] == 0.5
        assert d["mcnemar_min_p"] == 5 / 16 and d["mcnemar_min_p"] >= 0.05
        # the range gate: Holm over 17 with 10 changed outcomes in one defence cannot reach 0.0125 (17 x 2 / 2**10
        # = 0.033), and the sign test over one moving defence cannot either: both have no power (R14)
        assert att["gate_power"]["range"]["status"] == att["gate_power"]["sign"]["status"] == "no power"
        assert out[ssni._converged_every(lab).text]["status"] == "incomplete"
        assert out[ssni._no_common_trend(lab).text]["status"] == "incomplete"
        # the two-step window, over images
        win = d["own_gate"]["defences"]["diffpure_ssni_n"]
        assert (win["image_window"]["window_losses"], win["image_window"]["window_gains"]) == (9, 1)
        assert abs(win["outcome_level"]["two_step_mcnemar"] - 11 / 1024) < 1e-12 and abs(win["p"] - 11 / 1024) < 1e-9
        assert len(d["convergence_defences"]) == 2
        assert abs(d["own_holm_min_p"] - 22 / 1024) < 1e-9 and d["own_holm_min_p"] < ssni.OWN_ALPHA
        assert not out[ssni._claim_defences_flat("n", lab).text]["holds"]
        assert out[ssni._claim_defences_flat("l", lab).text]["holds"]
        claim_n, claim_l = (out[ssni._equal_clean(v, lab).text] for v in ("n", "l"))
        assert claim_n["status"] == "incomplete"
        powerless = {ssni._no_common_trend(lab).text, ssni._converged_every(lab).text}
        assert set(claim_n["gated_by"]) == {ssni._claim_defences_flat("n", lab).text, *powerless}
        assert set(claim_l["gated_by"]) == powerless
        # SSNI-L's own defences did not move at all: its own gate holds ("no change"), not "no power"
        assert metrics[lab]["diffpure_ssni_l"]["own_gate"]["power"]["status"] == "no change"


def test_a_flat_plateau_over_the_two_step_window_passes_the_own_defence_gate():
    """The same changed outcomes as R10's slide (6, then 4), balanced: 3 lost / 3 gained, then 2 / 2. The window
    sees 5 / 5 (over outcomes and over images); the own-defence gates pass. Only SSNI-N moved, with no net change
    on its last step, so the sign test has no defence to count ("no change"); the range gate (Holm over 17, 10
    changed outcomes in one defence) has no power, so both claims read incomplete through it alone (R14)."""
    config = ssni.SIZES["full"]
    images, draws = config["n_test"], config["replicates"]
    metrics, out = _evaluated(_schedule_parts(config, images, draws,
                                              _r10_outcomes(config, images, draws, [(0, 0), (3, 3), (2, 2)])), config)
    for lab in ssni.LABELS:
        d = metrics[lab]["diffpure_ssni_n"]
        win = d["own_gate"]["defences"]["diffpure_ssni_n"]
        assert (win["image_window"]["window_losses"], win["image_window"]["window_gains"]) == (5, 5) and win["p"] > 0.5
        assert metrics[lab]["attack"]["gate_power"]["sign"]["status"] == "no change"
        assert metrics[lab]["attack"]["gate_power"]["range"]["status"] == "no power"
        assert d["own_holm_min_p"] == 1.0 and d["own_gate"]["power"]["status"] == "can fail"
        for v in ("n", "l"):
            assert out[ssni._claim_defences_flat(v, lab).text]["holds"]
            assert out[ssni._equal_clean(v, lab).text]["gated_by"] == [ssni._converged_every(lab).text]


def test_window_min_p_matches_enumeration_and_flip_backs_leave_the_window():
    """The min-p combination of the last-step and two-step McNemar tests against enumerating every sign
    pattern of the changed outcomes (an outcome changed on both steps flips back: concordant over the window)."""
    import itertools

    from scipy import stats

    for a, o, c in ((3, 0, 4), (2, 2, 3), (0, 3, 2), (4, 1, 0), (1, 0, 0)):
        first, last, window = c + o, a + o, a + c
        assert ssni._window_parts(first, last, window) == (a, o, c)
        sf = lambda k, n: float(stats.binom.sf(k - 1, n, 0.5)) if n else 1.0  # noqa: E731
        pats = []
        for A, B, C in itertools.product(range(a + 1), range(o + 1), range(c + 1)):
            pr = stats.binom.pmf(A, a, .5) * stats.binom.pmf(B, o, .5) * stats.binom.pmf(C, c, .5)
            pats.append((pr, A + B, A + C, min(sf(A + B, last), sf(A + C, window))))
        for _, l2, lw, t in pats:
            brute = sum(pr for pr, _, _, u in pats if u <= t * (1 + 1e-9))
            assert abs(ssni._window_min_p(first, l2, last, lw, window) - min(brute, 1.0)) < 1e-9
    # the combination lies between the smaller p and twice it
    p = ssni._window_min_p(10, 8, 12, 18, 20)
    t = min(float(stats.binom.sf(7, 12, .5)), float(stats.binom.sf(17, 20, .5)))
    assert t - 1e-12 <= p <= 2 * t + 1e-12


def test_two_step_range_table_matches_the_dynamic_programme():
    for first, last in ((3, 4), (6, 0), (7, 9), (0, 0), (12, 5)):
        dist = ssni._range_distribution([first, last])
        tail = np.cumsum(dist[::-1])[::-1]
        for level in (0.05, 0.05 / 17):
            expect = tail < level
            expect[0] = False
            assert (ssni._range_reject_table(first, last, level) == expect).all()


def test_the_stack_splits_its_budget_and_stays_under_it_on_a_flat_plateau():
    """The three stacked gates share STACK_ALPHA by Bonferroni; at the flat plateau of the R10 test's twin (the
    changes of test_a_flat_plateau... at full size) the simulated false-alarm rate of the stack is within its
    budget and each gate within its share (Monte Carlo, 4000 draws: 3 standard errors of slack)."""
    assert ssni.OWN_ALPHA + ssni.RANGE_ALPHA + ssni.SIGN_ALPHA <= ssni.STACK_ALPHA + 1e-15
    metrics, _ = _full_size_flat_plateau()  # 30 changed outcomes a step, every defence
    st = metrics[ssni.LABELS[0]]["diffpure_ssni_n"]["stack"]
    assert st["sims"] == ssni.STACK_SIMS
    slack = 3 * np.sqrt(0.05 * 0.95 / st["sims"])
    assert st["false_alarm"] <= ssni.STACK_ALPHA + slack
    new = st["per_gate"]["flat_plateau"]["new"]
    for gate_name, share in (("own", ssni.OWN_ALPHA), ("range", ssni.RANGE_ALPHA), ("sign", ssni.SIGN_ALPHA)):
        assert new[gate_name] <= share + slack
    assert st["r7_detection"] > st["false_alarm"]  # a slide is caught more often than a plateau is failed


# --- session 15, after R14: gates without power, the own-defence gate over images ----------------------


def test_a_gate_that_cannot_reach_its_level_reports_no_power_and_leaves_its_claims_incomplete():
    """R14: quick's sign test saw 5 defences move, all losses; its smallest attainable p, 1/32 = 0.031, is above
    SIGN_ALPHA = 0.0125, so it held whatever the data and the two claims behind it were decided. Now the gate
    has no power: its metric is empty, the gate line and both claims are incomplete. With 7 defences moving
    (smallest p 1/128 < 0.0125) the same gate can fail, and does at 7 losses / 0 gains."""
    assert ssni.no_power(1 / 32, ssni.SIGN_ALPHA) and not ssni.no_power(1 / 128, ssni.SIGN_ALPHA)
    assert ssni.no_power(ssni.SIGN_ALPHA, ssni.SIGN_ALPHA)  # rejection is p < level: p = level cannot fail
    config = ssni.SIZES["full"]
    images, draws = config["n_test"], config["replicates"]
    names = ssni.defences(config)
    for moving, dead in ((5, True), (7, False)):
        outcomes = {n: [_nested(250, draws, images)] * 4 for n in names}
        for n in [n for n in names if n not in ssni.OURS][:moving]:  # one outcome lost on the last step
            outcomes[n] = [_nested(250, draws, images)] * 3 + [_nested(249, draws, images)]
        metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
        for lab in ssni.LABELS:
            att = metrics[lab]["attack"]
            assert (att["last_step_losses"], att["last_step_gains"]) == (moving, 0)
            assert abs(att["last_step_sign_p"] - 2.0 ** -moving) < 1e-15
            gate_line = out[ssni._no_common_trend(lab).text]
            claims = [out[ssni._equal_clean(v, lab).text] for v in ("n", "l")]
            if dead:
                assert att["gate_power"]["sign"]["status"] == "no power" and att["last_step_sign_gate_p"] is None
                assert gate_line["status"] == "incomplete" and not gate_line["holds"]
            else:
                assert att["gate_power"]["sign"]["status"] == "can fail" and att["last_step_sign_gate_p"] == 2.0 ** -7
                assert gate_line["status"] == "fails"
            for c in claims:
                assert c["status"] == "incomplete" and ssni._no_common_trend(lab).text in c["gated_by"]
    # the range gate (Holm over 17): one outcome changed on each step of one defence, nothing else
    assert ssni._range_test([1, 1], 2)["smallest_attainable_p"] == 0.5


def test_the_own_defence_gate_has_no_power_with_few_changed_images_and_can_fail_with_many():
    few = {"types": [[0, 1, 3]], "net_last": 0, "net_window": -3}  # 3 images each lost one draw on step k-1
    assert abs(ssni._image_min_p_smallest(few) - 1 / 8) < 1e-12 and abs(ssni._image_min_p(few) - 1 / 8) < 1e-12
    assert ssni.no_power(2 * ssni._image_min_p_smallest(few), ssni.OWN_ALPHA)
    many = {"types": [[0, 1, 8]], "net_last": 0, "net_window": -8}
    assert not ssni.no_power(2 * ssni._image_min_p_smallest(many), ssni.OWN_ALPHA)
    assert ssni._image_min_p_smallest({"types": [], "net_last": 0, "net_window": 0}) == 1.0


def _brute_image_min_p(v, w):
    """Enumerate every sign flip of the images' change vectors ``(v_i, w_i)``."""
    import itertools

    v, w = np.asarray(v), np.asarray(w)
    pats = np.array([((e * v).sum(), (e * w).sum()) for e in map(np.array, itertools.product((-1, 1), repeat=v.size))])
    minp = lambda a, b: min(np.mean(pats[:, 0] <= a), np.mean(pats[:, 1] <= b))  # noqa: E731
    allm = np.array([minp(a, b) for a, b in pats])
    return float(np.mean(allm <= minp(v.sum(), w.sum()) * (1 + 1e-9)))


def test_image_level_min_p_matches_enumeration_over_image_sign_flips():
    rng = np.random.default_rng(3)
    for _ in range(25):
        n = int(rng.integers(1, 8))
        v, w = rng.integers(-2, 3, n), rng.integers(-2, 3, n)
        win = {"types": [[a, b, k] for (a, b), k in ssni._change_types(v, w)], "net_last": int(v.sum()),
               "net_window": int(w.sum())}
        assert abs(ssni._image_min_p(win) - _brute_image_min_p(v, w)) < 1e-9, (v, w)


def test_image_window_sums_net_changes_over_draws():
    """An image whose two draws move together counts as one unit of two; draws that change in opposite
    directions cancel."""
    before = np.array([[1, 1, 1, 0, 1, 1], [1, 1, 0, 0, 1, 1]], bool)
    middle = np.array([[1, 0, 1, 1, 1, 1], [1, 0, 0, 0, 1, 1]], bool)
    after = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 0]], bool)
    win = ssni._image_window(before, middle, after)
    # per image (v, w): (-2, -2), (0, -2), (0, 0) with both draws changing, (+1, +2), (0, 0), (-1, -1)
    assert win["net_last"] == -2 and win["net_window"] == -3
    assert sorted(map(tuple, win["types"])) == [(0, 2, 1), (1, 1, 1), (1, 2, 1), (2, 2, 1)]
    assert (win["last_losses"], win["last_gains"], win["window_losses"], win["window_gains"]) == (2, 1, 3, 1)
    assert win["last_conflicts"] == 1 and win["window_conflicts"] == 1


def test_draws_moving_together_do_not_double_the_evidence():
    """R14's failure in its simplest form: 6 images each lose both draws over the window. Counted per (image,
    draw) outcome that is 12 / 0 (p = 2^-12); with each image's change vector flipped as a unit p = 1/64 for
    the window, and the min-p over the last step (no change) and the window stays 1/64."""
    images = 40
    base = np.ones((2, images), bool)
    mid = base.copy()
    mid[:, :6] = False
    win = ssni._image_window(base, mid, mid)
    assert win["net_window"] == -12 and win["types"] == [[0, 2, 6]]
    assert abs(ssni._image_min_p(win) - 1 / 64) < 1e-12


def test_r15_per_defence_range_claims_report_no_power_where_the_range_test_cannot_reach_its_level():
    """R15: the quick record's DiffPure t*=90 changed 3 then 2 outcomes at l_inf 0.2; its range test's smallest
    attainable p is 1/16 = 0.0625, not below KEY_RANGE_ALPHA = 0.05, yet its claim read "holds" (p = 0.625).
    Now that claim reads ``range_key_p``, None there (incomplete); with 3 then 3 changes (1/32) it can fail."""
    dead, alive = ssni._range_test([3, 2], 1), ssni._range_test([3, 3], 6)
    assert abs(dead["smallest_attainable_p"] - 1 / 16) < 1e-12 and ssni.no_power(dead["smallest_attainable_p"],
                                                                                    ssni.KEY_RANGE_ALPHA)
    assert not ssni.no_power(alive["smallest_attainable_p"], ssni.KEY_RANGE_ALPHA) and alive["p"] < ssni.KEY_RANGE_ALPHA
    claims = [c for c in ssni.CLAIMS if c.metric.endswith(".range_p") or c.metric.endswith(".range_key_p")]
    assert len(claims) == 3 and all(c.metric.endswith(".range_key_p") for c in claims)
    config = ssni.SIZES["full"]
    images, draws = config["n_test"], config["replicates"]
    names = ssni.defences(config)
    outcomes = {n: [_nested(250, draws, images)] * 4 for n in names}
    # the control: one outcome lost on the last two steps (1 + 1 changes: smallest p 0.5), SSNI-N 3 + 3 lost
    outcomes[ssni.CONTROL] = [_nested(250, draws, images)] * 2 + [_nested(249, draws, images),
                                                                   _nested(248, draws, images)]
    outcomes["diffpure_ssni_n"] = [_nested(250, draws, images)] * 2 + [_nested(247, draws, images),
                                                                       _nested(244, draws, images)]
    metrics, out = _evaluated(_schedule_parts(config, images, draws, outcomes), config)
    lab = ssni.SHIPPED
    by_metric = {c.metric: out[c.text] for c in claims}
    ctl = by_metric[f"baselines.{lab}.{ssni.CONTROL}.range_key_p"]
    assert ctl["status"] == "incomplete" and not ctl["holds"]
    assert by_metric[f"metrics.{lab}.diffpure_ssni_n.range_key_p"]["status"] == "fails"
    assert by_metric[f"metrics.{lab}.diffpure_ssni_l.range_key_p"]["status"] == "holds"  # nothing moved
    assert metrics[lab]["diffpure_ssni_l"]["range_key_power"]["status"] == "no change"


def test_r15_a_control_that_cannot_pass_is_unmeasured():
    """R15: a control whose paired test has 4 nonzero pairs of 16 (smallest p 1/16 >= 0.05) cannot pass, so it
    must not count as a failing control (which makes the claim look discriminating): its metric is None and
    rayml.results marks it unmeasured. With 5 nonzero pairs (1/32) it is measured and its number is kept."""
    d4, d5 = np.r_[np.full(4, 0.5), np.zeros(12)], np.r_[np.full(5, -0.5), np.zeros(11)]
    dead, alive = ssni._control_power(d4, 0.125, "x"), ssni._control_power(d5, -0.15625, "x")
    assert dead["value"] is None and dead["status"] == "no power" and dead["measured_value"] == 0.125
    assert alive["value"] == -0.15625 and alive["status"] == "can pass" and alive["nonzero_pairs"] == 5
    claim = ssni._equal_clean("n", ssni.SHIPPED)
    assert claim.controls[0].metric.endswith(".control_gap")
    record = {"metrics": {ssni.SHIPPED: {"diffpure_ssni_n": {"gap_at_equal_clean": 0.2}}},
              "baselines": {ssni.SHIPPED: {ssni.CONTROL: {"control_gap": None}}},
              "tables": {"equal_clean": [{"radius": ssni.SHIPPED, "defence": d, "image": i, "value": v}
                                         for i in range(16)
                                         for d, v in (("diffpure_ssni_n", 0.2), ("zero", 0.0),
                                                      (ssni.CONTROL, float(d4[i])))]}}
    (res,) = evaluate_claims(record, [claim])
    # a threshold paper claim without a measured control is incomplete (rayml.results): no evidence it discriminates
    assert res["controls"][0].get("unmeasured") and res["discriminating"] is None and res["status"] == "incomplete"
    record["baselines"][ssni.SHIPPED][ssni.CONTROL]["control_gap"] = 0.125  # counted: the control now "fails"
    (res,) = evaluate_claims(record, [claim])
    assert not res["controls"][0].get("unmeasured") and res["status"] in ("holds", "not discriminating")


def test_more_draws_than_the_gate_is_calibrated_for_warn():
    """R15: the image-level own gate is valid at 2 draws per image; at 8 (PAPER_SCALE) it is liberal."""
    import warnings

    import pytest

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ssni._check(ssni.SIZES["quick"])
    assert ssni.SIZES["quick"]["replicates"] == ssni.CALIBRATED_DRAWS
    with pytest.warns(UserWarning, match="calibrated at 2 draws"):
        ssni._check({**ssni.SIZES["quick"], "replicates": 8})
