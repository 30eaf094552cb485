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
