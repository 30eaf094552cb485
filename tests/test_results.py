"""rayml.results: claims evaluated from measured numbers, record validation, atomic outputs."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from scipy import stats

from rayml import results
from rayml.results import Claim, Control


def _record(**over):
    rows = [{"method": m, "seed": s, "metric": "gap", "value": v}
            for m, vals in (("ours", [0.1, 0.2, 0.05, 0.3, 0.1, 0.2, 0.1, 0.0]),
                            ("base", [0.5, 0.4, 0.6, 0.2, 0.9, 0.8, 0.7, 0.6]))
            for s, v in enumerate(vals)]
    rec = {
        "schema_version": 2, "name": "x", "kind": "run", "size": "tiny", "seed": 0, "paper": "p",
        "config": {}, "metrics": {"gap": 0.13, "rate": 0.9}, "baselines": {"base": {"gap": 0.59, "rate": 0.4}},
        "claims": [], "summary": {"paper": {}, "sanity": {}}, "claims_fingerprint": "0", "tables": {"runs": rows},
        "env": {"ray_nodes": 1, "cpus": 2, "gpus": 0, "seconds": 1.0, "rayml": "0.1.0", "git": None,
                "python": "3.11", "torch": "2", "ray": "2", "tasks": 2, "worker_pids": 2},
    }
    rec.update(over)
    return rec


def test_comparison_claims_follow_op_and_margin():
    rec = _record()
    out = results.evaluate_claims(rec, [
        Claim("rate higher", "metrics.rate", "baselines.base.rate", ">"),
        Claim("rate higher by 0.6", "metrics.rate", "baselines.base.rate", ">", margin=0.6),
        Claim("gap lower", "metrics.gap", "baselines.base.gap", "<"),
        Claim("gap lower by 0.5", "metrics.gap", "baselines.base.gap", "<", margin=0.5),
        Claim("rate above a number", "metrics.rate", 0.95, ">="),
    ])
    assert [c["holds"] for c in out] == [True, False, True, False, False]
    assert out[0]["measured"] == "0.9 vs 0.4"


def test_paired_sign_test_matches_a_binomial_test_by_hand():
    rec = _record()
    claim = Claim("gap lower", "metrics.gap", "baselines.base.gap", "<", test="paired sign test over seeds",
                  table="runs", a={"method": "ours"}, b={"method": "base"})
    (out,) = results.evaluate_claims(rec, [claim])
    # ours < base on 7 of 8 seeds (seed 3: 0.3 vs 0.2)
    assert out["p_value"] == pytest.approx(stats.binomtest(7, 8, 0.5, alternative="greater").pvalue)
    assert out["holds"] is True  # p = 0.035
    wil = Claim("gap lower", "metrics.gap", "baselines.base.gap", "<", test="wilcoxon signed-rank over seeds",
                table="runs", a={"method": "ours"}, b={"method": "base"})
    (out,) = results.evaluate_claims(rec, [wil])
    ours = np.array([0.1, 0.2, 0.05, 0.3, 0.1, 0.2, 0.1, 0.0])
    base = np.array([0.5, 0.4, 0.6, 0.2, 0.9, 0.8, 0.7, 0.6])
    assert out["p_value"] == pytest.approx(stats.wilcoxon(base - ours, alternative="greater").pvalue)


def test_a_claim_that_does_not_hold_is_reported_so():
    rec = _record()
    claim = Claim("base is better", "baselines.base.gap", "metrics.gap", "<", test="paired sign test over seeds",
                  table="runs", a={"method": "base"}, b={"method": "ours"})
    (out,) = results.evaluate_claims(rec, [claim])
    assert out["holds"] is False and out["p_value"] > 0.5


def test_an_unmeasured_metric_never_holds():
    rec = _record(metrics={"gap": None, "rate": 0.9})
    out = results.evaluate_claims(rec, [Claim("gap lower", "metrics.gap", "baselines.base.gap", "<"),
                                        Claim("rate above nothing", "metrics.rate", "metrics.gap", ">")])
    assert [c["holds"] for c in out] == [False, False]
    assert out[0]["measured"].startswith("nan vs")


def test_bad_claims_are_rejected():
    with pytest.raises(ValueError, match="op"):
        Claim("x", "metrics.a", 1.0, "==")
    with pytest.raises(ValueError, match="test"):
        Claim("x", "metrics.a", 1.0, ">", test="t-test")
    with pytest.raises(ValueError, match="table"):
        Claim("x", "metrics.a", 1.0, ">", test="paired sign test over seeds")
    with pytest.raises(KeyError, match="metrics.nope"):
        results.evaluate_claims(_record(), [Claim("x", "metrics.nope", 1.0)])


SRC = "Table 1"


def test_a_control_that_also_passes_makes_a_paper_claim_not_discriminating():
    rec = _record(baselines={"base": {"gap": 0.59, "rate": 0.4}, "strong": {"gap": 0.2, "rate": 0.95},
                             "weak": {"gap": 0.8, "rate": 0.1}})
    out = results.evaluate_claims(rec, [
        Claim("rate above 0.5", "metrics.rate", 0.5, ">", source=SRC,
              controls=(Control("strong", "baselines.strong.rate"),)),
        Claim("rate above 0.5 (weak control)", "metrics.rate", 0.5, ">", source=SRC,
              controls=(Control("weak", "baselines.weak.rate"), Control("base", "baselines.base.rate"))),
        Claim("gap below base", "metrics.gap", "baselines.base.gap", "<", source=SRC,
              controls=(Control("strong", "baselines.strong.gap"),)),
    ])
    assert [c["holds"] for c in out] == [True, True, True]
    assert [c["status"] for c in out] == ["not discriminating", "holds", "not discriminating"]
    assert [c["discriminating"] for c in out] == [False, True, False]
    assert [x["holds"] for x in out[1]["controls"]] == [False, False]
    assert out[0]["controls"][0]["measured"] == "0.95 vs 0.5"
    summary = results.summarize_claims(out)
    assert summary["paper"] == {"total": 3, "held": 1, "failed": 0, "not_discriminating": 2, "incomplete": 0,
                                "with_controls": 3}


def test_paper_claims_without_source_or_threshold_claims_without_controls_are_incomplete():
    rec = _record()
    out = results.evaluate_claims(rec, [
        Claim("rate above 0.5", "metrics.rate", 0.5, ">", source=SRC),
        Claim("rate higher", "metrics.rate", "baselines.base.rate", ">"),
        Claim("rate higher", "metrics.rate", "baselines.base.rate", ">", source=SRC),
        Claim("identity", "metrics.rate", 0.5, ">", kind="sanity"),
    ])
    assert [c["status"] for c in out] == ["incomplete", "incomplete", "holds", "holds"]
    summary = results.summarize_claims(out)
    assert summary["paper"]["incomplete"] == 2 and summary["paper"]["held"] == 1
    assert summary["sanity"] == {"total": 1, "passed": 1}


def test_a_claim_whose_own_number_is_unmeasured_is_incomplete_not_failing():
    rec = _record(metrics={"gap": None, "rate": float("nan")})
    out = results.evaluate_claims(rec, [
        Claim("rate above 0.5", "metrics.rate", 0.5, ">", source=SRC, controls=(Control("b", "baselines.base.rate"),)),
        Claim("gap below base", "metrics.gap", "baselines.base.gap", "<", source=SRC),
        Claim("identity", "metrics.rate", 0.5, ">", kind="sanity"),
    ])
    assert [c["status"] for c in out] == ["incomplete"] * 3
    assert not any(c["holds"] for c in out) and "unmeasured" not in out[0]


def test_an_unmeasured_control_neither_passes_nor_fails_a_claim():
    rec = _record(baselines={"base": {"gap": 0.59, "rate": 0.4}, "weak": {"rate": 0.1}, "none": {"rate": None}})
    out = results.evaluate_claims(rec, [
        Claim("rate above 0.5", "metrics.rate", 0.5, ">", source=SRC,
              controls=(Control("none", "baselines.none.rate"), Control("weak", "baselines.weak.rate"))),
        Claim("rate above 0.5, only an unmeasured control", "metrics.rate", 0.5, ">", source=SRC,
              controls=(Control("none", "baselines.none.rate"),)),
        Claim("rate above 0.95, only an unmeasured control", "metrics.rate", 0.95, ">", source=SRC,
              controls=(Control("none", "baselines.none.rate"),)),
    ])
    assert [c["controls"][0].get("unmeasured") for c in out] == [True, True, True]
    assert "unmeasured" not in out[0]["controls"][1]
    assert [c["discriminating"] for c in out] == [True, None, None]
    # it holds only against its measured control; with none measured it is incomplete (or fails on its own)
    assert [c["status"] for c in out] == ["holds", "incomplete", "fails"]
    # a paired control with no rows is unmeasured too
    rows = [{"method": m, "seed": s, "value": v} for m, vals in (("ours", [0.1] * 6), ("base", [0.5] * 6))
            for s, v in enumerate(vals)]
    rec = _record(tables={"runs": rows}, baselines={"base": {"gap": 0.59}, "gone": {"gap": 0.01}})
    (out,) = results.evaluate_claims(rec, [Claim(
        "gap lower", "metrics.gap", "baselines.base.gap", "<", test="paired sign test over seeds", table="runs",
        a={"method": "ours"}, b={"method": "base"}, source=SRC,
        controls=(Control("gone", "baselines.gone.gap", a={"method": "gone"}),))])
    assert out["controls"][0]["unmeasured"] is True and out["discriminating"] is None and out["status"] == "holds"
    assert "over 6 paired seeds" in out["measured"]


def _method_rows(**more):
    """Tidy rows of "ours" and "base" over 8 seeds, plus the methods named in ``more``."""
    methods = {"ours": [0.1, 0.2, 0.1, 0.1, 0.0, 0.1, 0.2, 0.1], "base": [0.5, 0.4, 0.6, 0.2, 0.9, 0.8, 0.7, 0.6], **more}
    return [{"method": m, "seed": s, "value": v} for m, vals in methods.items() for s, v in enumerate(vals)]


def _lower_than_base(control: str) -> Claim:
    """"ours has a lower gap than base" over the paired seeds, with ``control`` run in ours' place."""
    return Claim("gap lower", "metrics.gap", "baselines.base.gap", "<", test="paired sign test over seeds",
                 table="runs", a={"method": "ours"}, b={"method": "base"}, source=SRC,
                 controls=(Control(control, f"baselines.{control}.gap", a={"method": control}),))


def test_a_control_of_a_paired_claim_is_tested_on_its_own_rows():
    rows = _method_rows(ctl=[0.6, 0.5, 0.7, 0.6, 0.9, 0.5, 0.6, 0.7])
    rec = _record(tables={"runs": rows}, baselines={"base": {"gap": 0.59}, "ctl": {"gap": 0.51}})
    claim = _lower_than_base("ctl")
    (out,) = results.evaluate_claims(rec, [claim])
    assert out["status"] == "holds"
    ctl = out["controls"][0]
    # the control's mean is lower but it wins only 3 of 8 pairs: it fails the claim
    assert ctl["holds"] is False and ctl["p_value"] > 0.5
    with pytest.raises(ValueError, match="row filter"):
        Claim("x", "metrics.gap", "baselines.base.gap", "<", test="paired sign test over seeds", table="runs",
              controls=(Control("ctl", "baselines.ctl.gap"),))
    with pytest.raises(ValueError, match="kind"):
        Claim("x", "metrics.gap", 1.0, kind="anecdote")


def test_a_control_equal_to_the_baseline_counts_neither_way():
    # contract 2.2: the run-time strongest baseline run as its own control fails "beats the
    # baseline" by construction; it must not make the claim look discriminating
    rows = _method_rows(near=[0.5, 0.4, 0.6, 0.2, 0.9, 0.8, 0.7, 0.61])
    rec = _record(tables={"runs": rows}, baselines={"base": {"gap": 0.5875}, "near": {"gap": 0.58875}})
    claim = _lower_than_base("base")
    (out,) = results.evaluate_claims(rec, [claim])
    ctl = out["controls"][0]
    assert ctl["holds"] is False and ctl["equals_baseline"] is True and "does not count" in ctl["measured"]
    assert out["status"] == "holds" and out["discriminating"] is None
    # a control that differs from the baseline on one pair still counts
    near = _lower_than_base("near")
    (out,) = results.evaluate_claims(rec, [near])
    assert "equals_baseline" not in out["controls"][0] and out["discriminating"] is True
    # against a stated number (a zero gain), a control at exactly that number is a null control: it counts
    zero = Claim("gap above zero", "metrics.gap", 0.0, ">", test="paired sign test over seeds", table="runs",
                 a={"method": "ours"}, b={"method": "base"}, source=SRC,
                 controls=(Control("base", "baselines.base.gap", a={"method": "base"}),))
    (out,) = results.evaluate_claims(rec, [zero])
    assert "equals_baseline" not in out["controls"][0] and out["discriminating"] is True
    # without a test: a control whose value equals the compared value; a threshold claim's control
    # is compared with a number and is never "the baseline"
    rec = _record(metrics={"rate": 0.9}, baselines={"base": {"rate": 0.4}, "same": {"rate": 0.4}})
    (mean_claim, threshold) = results.evaluate_claims(rec, [
        Claim("rate above base", "metrics.rate", "baselines.base.rate", ">", source=SRC,
              controls=(Control("same", "baselines.same.rate"),)),
        Claim("rate above 0.4", "metrics.rate", 0.4, ">=", source=SRC,
              controls=(Control("same", "baselines.same.rate"),))])
    assert mean_claim["controls"][0]["equals_baseline"] is True and mean_claim["discriminating"] is None
    assert "equals_baseline" not in threshold["controls"][0] and threshold["status"] == "not discriminating"


def test_a_control_may_bring_its_own_reference_rows_and_number():
    # an "in-regime beats out-of-regime" claim; its control compares random subsets with the
    # same out-of-regime reference (b) and is measured against the random subsets' own number
    rows = [{"arm": arm, "seed": s, "value": v}
            for arm, vals in (("in", [0.9, 0.8, 0.9, 0.85, 0.95, 0.9, 0.8, 0.9]),
                              ("out", [0.5, 0.4, 0.6, 0.5, 0.55, 0.45, 0.5, 0.6]),
                              ("random", [0.7, 0.6, 0.8, 0.65, 0.75, 0.7, 0.6, 0.7]),
                              ("random_ref", [0.8, 0.7, 0.9, 0.75, 0.85, 0.8, 0.7, 0.8])) for s, v in enumerate(vals)]
    rec = _record(tables={"runs": rows}, metrics={"gain": 0.38},
                  baselines={"random": {"gain": 0.19, "ref": 0.25}})
    claim = Claim("in-regime beats out", "metrics.gain", 0.1, ">", test="paired sign test over seeds",
                  table="runs", a={"arm": "in"}, b={"arm": "out"}, source=SRC,
                  controls=(Control("random", "baselines.random.gain", a={"arm": "random"}),
                            Control("random vs own", "baselines.random.gain", a={"arm": "random"},
                                    b={"arm": "random_ref"}, compare="baselines.random.ref")))
    (out,) = results.evaluate_claims(rec, [claim])
    same_ref, own_ref = out["controls"]
    assert same_ref["holds"] is True and "vs 0.1" in same_ref["measured"]
    # against its own rows and number the random control loses every pair and misses the bar
    assert own_ref["holds"] is False and own_ref["p_value"] > 0.5 and "vs 0.25" in own_ref["measured"]
    assert own_ref["b"] == {"arm": "random_ref"} and "b" not in same_ref
    with pytest.raises(ValueError, match="set test too"):
        Claim("x", "metrics.gain", 0.1, source=SRC, controls=(Control("r", "baselines.random.gain", b={"arm": "out"}),))
    with pytest.raises(TypeError, match="compare"):
        Control("r", "baselines.random.gain", compare=["x"])
    # fields a control leaves unset do not move the fingerprint of older declarations
    plain = Claim("x", "metrics.gain", 0.1, source=SRC, controls=(Control("r", "baselines.random.gain"),))
    moved = Claim("x", "metrics.gain", 0.1, source=SRC,
                  controls=(Control("r", "baselines.random.gain", compare="baselines.random.ref"),))
    assert results.claims_fingerprint([plain]) != results.claims_fingerprint([moved])


def test_the_fingerprint_changes_with_a_threshold():
    a = results.claims_fingerprint([Claim("x", "metrics.a", 1.0)])
    assert a == results.claims_fingerprint([Claim("x", "metrics.a", 1.0)])
    assert a != results.claims_fingerprint([Claim("x", "metrics.a", 1.1)])


def test_validate_record():
    rec = _record()
    results.validate_record(rec)
    bad = dict(rec)
    del bad["env"]
    with pytest.raises(ValueError, match="missing"):
        results.validate_record(bad)
    with pytest.raises(ValueError, match="kind"):
        results.validate_record(_record(kind="walk"))
    with pytest.raises(ValueError, match="tables.runs"):
        results.validate_record(_record(tables={"runs": [1, 2]}))
    with pytest.raises(ValueError):
        results.validate_record(_record(metrics={"x": float("nan")}))
    with pytest.raises(ValueError, match="summary"):
        results.validate_record(_record(summary={}))
    evaluated = results.evaluate_claims(rec, [Claim("x", "metrics.rate", 0.5)])
    results.validate_record(_record(claims=evaluated))
    with pytest.raises(ValueError, match="status"):
        results.validate_record(_record(claims=[{**evaluated[0], "status": "great"}]))


def test_to_jsonable_converts_numpy_and_nan():
    out = results.to_jsonable({"a": np.float32(1.5), "b": np.arange(3), "c": (np.int64(2), float("nan")),
                               "d": np.bool_(True)})
    assert out == {"a": 1.5, "b": [0, 1, 2], "c": [2, None], "d": True}
    json.dumps(out, allow_nan=False)


def test_outputs_are_written_whole(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow.parquet as pq

    rec = _record()
    fig = plt.figure()
    written = results.write_outputs(rec, tmp_path / "out", {"plot": fig})
    names = sorted(p.name for p in written)
    assert names == ["plot.png", "record.json", "results.parquet"]
    assert json.loads((tmp_path / "out" / "record.json").read_text())["name"] == "x"
    table = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert len(table) == 16 and {"table", "method", "seed", "metric", "value"} <= set(table[0])
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith(".tmp")]


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "r.json"
    with pytest.raises(ValueError):
        results.write_json({"x": float("nan")}, target)
    assert os.listdir(tmp_path) == []


def test_check_writable(tmp_path):
    results.check_writable(tmp_path / "new" / "dir", is_dir=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        results.check_writable(tmp_path / "file", is_dir=True)
    with pytest.raises(ValueError, match="cannot write"):
        results.check_writable(tmp_path / "file" / "below", is_dir=True)


def test_outputs_go_to_a_uri_through_pyarrow_filesystems(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow.parquet as pq

    uri = (tmp_path / "bucket" / "run1").as_uri()  # file://..., as s3://... would be
    results.check_writable(uri, is_dir=True)
    assert not list((tmp_path / "bucket" / "run1").iterdir())  # the probe is gone
    rec = _record()
    results.write_outputs(rec, uri, {"plot": plt.figure()})
    assert [p.rsplit("/", 1)[1] for p in results.list_outputs(uri)] == ["plot.png", "record.json", "results.parquet"]
    assert json.loads((tmp_path / "bucket" / "run1" / "record.json").read_text())["name"] == "x"
    table = pq.read_table(tmp_path / "bucket" / "run1" / "results.parquet")
    assert table.schema.field("seed").type == "int64"          # integer seeds stay integers
    assert table.schema.metadata[b"rayml.name"] == b"x" and b"rayml.claims_fingerprint" in table.schema.metadata
    results.write_json(rec, (tmp_path / "r.json").as_uri())
    assert json.loads((tmp_path / "r.json").read_text())["name"] == "x"


def test_results_are_written_with_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = results.write_json({"a": 1}, tmp_path / "r.json")
    finally:
        os.umask(old)
    assert (os.stat(path).st_mode & 0o777) == 0o644


def test_special_files_are_refused_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="special file"):
        results.check_writable(fifo, is_dir=False)
    with pytest.raises(ValueError, match="special file"):
        results.check_writable("/dev/null", is_dir=False)
    with pytest.raises(ValueError, match="cannot write"):
        results.check_writable("/proc/rayml-out", is_dir=True)


def test_the_paired_test_carries_the_margin():
    # contract v2.1: "beats by more than 0.05" is tested against b + 0.05 pair by pair, not against 0.
    # Seven gains of 0.02 and one of 0.5 pass the mean (0.0775 > 0.05) and a test against 0 (p = 0.004),
    # but not the margin: only one pair beats it.
    gains = [0.02] * 7 + [0.5]
    rows = [{"method": m, "seed": s, "metric": "acc", "value": v}
            for s, g in enumerate(gains) for m, v in (("ours", 0.5 + g), ("base", 0.5))]
    rec = _record(tables={"runs": rows}, metrics={"acc": 0.5 + float(np.mean(gains))}, baselines={"base": {"acc": 0.5}})
    paired = dict(test="wilcoxon signed-rank over seeds", table="runs", a={"method": "ours"}, b={"method": "base"})
    beyond, plain = results.evaluate_claims(rec, [
        Claim("beats by more than 0.05", "metrics.acc", "baselines.base.acc", ">", margin=0.05, **paired),
        Claim("beats", "metrics.acc", "baselines.base.acc", ">", **paired)])
    assert plain["holds"] is True
    assert beyond["holds"] is False
    assert beyond["p_value"] == pytest.approx(
        stats.wilcoxon(np.array(gains) - 0.05, alternative="greater").pvalue)
    # a negative margin is a non-inferiority test: 0.01 below on every pair is within 0.05
    rows = [{"method": m, "seed": s, "metric": "acc", "value": v}
            for s in range(8) for m, v in (("ours", 0.49 + 0.001 * s), ("base", 0.5 + 0.001 * s))]
    rec = _record(tables={"runs": rows}, metrics={"acc": 0.4935}, baselines={"base": {"acc": 0.5035}})
    (noninf,) = results.evaluate_claims(rec, [
        Claim("on par within 0.05", "metrics.acc", "baselines.base.acc", ">=", margin=-0.05, **paired)])
    assert noninf["holds"] is True and noninf["p_value"] < 0.01


# --- tie tolerance and gates of paired claims (issue 35: rayml.evidence's scaffolding) ----------------


def _tie_record(diffs, base=0.494304):
    """Two methods over seeds: ``ours = base + diffs`` (lower is better), ``base`` for the baseline."""
    rows = [{"method": m, "seed": s, "metric": "gap", "value": v}
            for s, d in enumerate(diffs) for m, v in (("ours", base + d), ("base", base))]
    return _record(tables={"runs": rows}, metrics={"gap": base + float(np.mean(diffs))},
                   baselines={"base": {"gap": base}})


def _tie_claim(tie=None, **kw):
    return Claim("ours has the lower gap", "metrics.gap", "baselines.base.gap", "<", test="paired sign test over seeds",
                 table="runs", a={"method": "ours"}, b={"method": "base"}, source="Table 1", tie=tie, **kw)


def test_differences_inside_the_tie_tolerance_are_ties_not_losses():
    # the two-peak finding: 0.494306 vs 0.494304 is one shared basin, not a loss
    diffs = [2e-6] * 6 + [-0.3] * 4
    rec = _tie_record(diffs)
    strict = results.evaluate_claims(rec, [_tie_claim()])[0]
    tied = results.evaluate_claims(rec, [_tie_claim(tie=1e-4)])[0]
    assert "pairs" not in strict  # an undeclared tolerance writes what it always wrote
    assert tied["pairs"] == {"wins": 4, "losses": 0, "ties": 6}
    assert "4 wins, 0 losses, 6 ties" in tied["measured"]
    assert tied["p_value"] == pytest.approx(stats.binomtest(4, 4, 0.5, alternative="greater").pvalue)
    assert strict["p_value"] == pytest.approx(stats.binomtest(4, 10, 0.5, alternative="greater").pvalue)


def test_a_relative_tie_tolerance_scales_with_the_values():
    a, b = np.array([100.0, 1.0, 0.0]), np.array([100.5, 1.5, 0.0])
    assert list(results.tie_mask(a, b, (0.0, 0.01))) == [True, False, True]
    assert list(results.tie_mask(a, b, 0.6)) == [True, True, True]
    assert list(results.tie_mask(a, b, None)) == [False, False, True]


def test_the_wilcoxon_test_drops_ties_too():
    diffs = [1e-7, -1e-7, 2e-7] * 4 + [-0.2, -0.3, -0.25, -0.4, -0.1, -0.35]
    rec = _tie_record(diffs)
    c = _tie_claim(tie=1e-5)
    c = Claim(**{**c.__dict__, "test": "wilcoxon signed-rank over seeds"})
    out = results.evaluate_claims(rec, [c])[0]
    d = np.array([0.2, 0.3, 0.25, 0.4, 0.1, 0.35])
    assert out["pairs"] == {"wins": 6, "losses": 0, "ties": 12}
    assert out["p_value"] == pytest.approx(stats.wilcoxon(d, alternative="greater").pvalue)


def test_the_exact_signed_rank_p_with_ties_equals_scipys_permutation_null():
    """scipy's ``wilcoxon`` enumerates the 2**n sign flips (seconds a call) for <= 13 pairs with ties or
    zeros; the subset-sum count gives the same p, to the last bit."""
    from scipy import stats

    from rayml.results import _one_sided_p, _signed_rank_exact_p

    cases = [np.array([0.0625] * 10 + [-0.0625] * 2), np.array([1.0, 1.0, -2.0, 0.0, 3.0, 3.0, -1.0]),
             np.array([0.5, -0.5, 0.5, 0.25, 0.0, 0.0, 0.75, -0.25, 0.5]), np.array([-1.0, -1.0, 2.0])]
    for d in cases:
        want = float(stats.wilcoxon(d, alternative="greater", zero_method="wilcox").pvalue)
        assert _signed_rank_exact_p(d) == want
        assert _one_sided_p(d, np.zeros_like(d), True, "paired Wilcoxon") == want
    assert _signed_rank_exact_p(np.array([1.0, 1.0])) == 0.25  # both flips positive: 1 of 4


def test_few_differing_pairs_among_many_get_the_exact_p_not_the_normal_approximation():
    """4 of 16 pairs differ, all in the claim's direction: the exact sign-flip p is 1/16; scipy's normal
    approximation (above 13 pairs with zeros) said 0.023 / 0.034 (contract 2.3)."""
    from rayml.results import _one_sided_p

    for d in (np.array([1.0] * 4 + [0.0] * 12), np.array([1.0, 2.0, 3.0, 4.0] + [0.0] * 12)):
        assert _one_sided_p(d, np.zeros_like(d), True, "paired Wilcoxon") == 0.0625
    d = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0] * 9)  # 54 tied nonzero pairs: past the exact range, all positive
    assert _one_sided_p(d, np.zeros_like(d), True, "paired Wilcoxon") < 1e-9


def test_a_paired_test_without_power_is_incomplete_not_failing():
    """Contract 2.4: 4 pairs cannot reach p < 0.05 even when every pair is a win (smallest p 1/16): the
    claim is incomplete, not failed, and says so; a fifth pair gives it the power to fail or hold."""
    four = results.evaluate_claims(_tie_record([-0.3, -0.2, 0.1, -0.1]), [_tie_claim()])[0]
    assert four["status"] == "incomplete" and four["no_power"] is True and four["holds"] is False
    assert "no power: 4 pairs allow no p below 0.0625" in four["measured"]
    # R17: a number on the wrong side fails, as it would without a test (a test never makes escape easier)
    wrong = results.evaluate_claims(_tie_record([0.3, 0.2, -0.1, 0.1]), [_tie_claim()])[0]
    assert wrong["status"] == "fails" and "no_power" not in wrong
    five = results.evaluate_claims(_tie_record([-0.3, -0.2, 0.1, -0.1, -0.2]), [_tie_claim()])[0]
    assert five["status"] == "fails" and "no_power" not in five
    won = results.evaluate_claims(_tie_record([-0.3, -0.2, -0.1, -0.1, -0.2]), [_tie_claim()])[0]
    assert won["status"] == "holds" and won["p_value"] == results.smallest_p(5) == 1 / 32
    # R17: a failed run (a non-finite pair) is an outcome, not a smaller design
    failed_run = _tie_record([-0.3, -0.2, -0.1, -0.1, 0.0])
    failed_run["tables"]["runs"][-2]["value"] = float("nan")  # ours on the fifth seed
    out = results.evaluate_claims(failed_run, [_tie_claim()])[0]
    assert out["status"] == "fails" and "no_power" not in out and "over 5 paired seeds" in out["measured"]


def test_ties_count_in_the_design_so_a_claim_with_many_tied_pairs_can_fail():
    """16 pairs of which 12 tie: the design could decide (smallest p 2^-16), the ties say "no difference",
    so the claim fails (4 wins alone give p = 1/16); ties are evidence, not missing pairs."""
    out = results.evaluate_claims(_tie_record([-0.3] * 4 + [1e-7] * 12), [_tie_claim(tie=1e-5)])[0]
    assert out["pairs"] == {"wins": 4, "losses": 0, "ties": 12}
    assert out["p_value"] == 0.0625 and out["status"] == "fails" and "no_power" not in out


def test_a_control_without_power_counts_neither_way():
    rows = _method_rows(ctl=[0.6, 0.5, 0.7, 0.6, 0.9, 0.5, 0.6, 0.7])
    rows = [r for r in rows if r["method"] != "ctl" or r["seed"] < 3]  # the control ran on 3 seeds only
    rec = _record(tables={"runs": rows}, baselines={"base": {"gap": 0.59}, "ctl": {"gap": 0.58}})
    (out,) = results.evaluate_claims(rec, [_lower_than_base("ctl")])
    ctl = out["controls"][0]
    assert ctl["no_power"] is True and ctl["holds"] is False and "over 3 paired seeds" in ctl["measured"]
    assert out["discriminating"] is None and out["status"] == "holds"
    assert [results.smallest_p(n) for n in (0, 1, 4)] == [1.0, 0.5, 0.0625]


def test_a_bad_tie_tolerance_is_refused_naming_it():
    with pytest.raises(ValueError, match="tie"):
        _tie_claim(tie=-1.0)
    with pytest.raises(ValueError, match="tie"):
        _tie_claim(tie=(1e-3,))
    with pytest.raises(ValueError, match="tie"):
        Claim("no test", "metrics.gap", 1.0, tie=1e-3)


def test_an_undeclared_tie_and_gate_keep_the_fingerprint():
    plain = results.claims_fingerprint([_tie_claim()])
    assert plain == results.claims_fingerprint([_tie_claim(tie=None, gates=())])
    assert plain != results.claims_fingerprint([_tie_claim(tie=1e-4)])


def test_a_failed_gate_makes_the_claims_behind_it_incomplete():
    rec = _tie_record([-0.3] * 10)
    gate_ok = Claim("the setting has two basins", "baselines.base.gap", 0.1, ">", kind="sanity")
    gate_bad = Claim("the setting is hard", "baselines.base.gap", 10.0, ">", kind="sanity")
    passed = results.evaluate_claims(rec, [gate_ok, _tie_claim(gates=(gate_ok.text,))])
    failed = results.evaluate_claims(rec, [gate_bad, _tie_claim(gates=(gate_bad.text,))])
    assert passed[1]["status"] == "holds" and "gated_by" not in passed[1]
    assert failed[1]["holds"] and failed[1]["status"] == "incomplete"
    assert failed[1]["gated_by"] == [gate_bad.text]
    with pytest.raises(ValueError, match="gates"):
        results.evaluate_claims(rec, [_tie_claim(gates=("no such claim",))])
    with pytest.raises(ValueError, match="gated"):
        Claim("a gated gate", "metrics.gap", 1.0, kind="sanity", gates=("x",))


def test_a_record_as_its_json_file_holds_it_is_valid(tmp_path):
    from rayml import records

    rows = [{"method": "m", "seed": s, "metric": "gap", "value": s / 3} for s in range(400)]
    path = tmp_path / "r.json"
    records.write_record(_record(tables={"runs": rows}), path)
    on_disk = json.loads(path.read_text())
    assert records.is_table_ref(on_disk["tables"]["runs"])
    results.validate_record(on_disk)
    results.validate_record(records.load_record(path))
    with pytest.raises(ValueError, match="Parquet reference"):
        results.validate_record(_record(tables={"runs": {"parquet": "r.tables/runs.parquet"}}))


def test_outputs_of_a_record_read_without_its_tables_are_refused(tmp_path):
    from rayml import records

    path = tmp_path / "r.json"
    records.write_record(_record(tables={"runs": [{"seed": s, "value": s / 3} for s in range(900)]}), path)
    with pytest.raises(ValueError, match="load_record"):
        results.write_outputs(records.load_record(path, tables=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert len(results.tidy_rows(records.load_record(path))) == 900


def test_rejudge_reevaluates_a_record_under_the_same_declarations_only():
    rec = _record()
    claim = Claim("gap lower by 0.3", "metrics.gap", "baselines.base.gap", "<", margin=0.3,
                  test="wilcoxon signed-rank over seeds", table="runs", a={"method": "ours"}, b={"method": "base"})
    rec["claims"] = [{"status": "stale"}]
    rec["claims_fingerprint"] = results.claims_fingerprint([claim])
    new = results.rejudge(rec, [claim], git="abc1234")
    assert new["claims"] == results.evaluate_claims(rec, [claim])
    assert new["env"]["judged"] == {"git": "abc1234", "contract": results.CONTRACT}
    assert rec["claims"] == [{"status": "stale"}] and "judged" not in rec["env"]  # the input is not changed
    results.validate_record(new)
    other = Claim("gap lower", "metrics.gap", "baselines.base.gap", "<")
    with pytest.raises(ValueError, match="claims: fingerprint"):
        results.rejudge(rec, [other])


def test_a_filter_that_pairs_several_values_under_one_key_is_refused():
    # session-11 review R7: a control filter without the metric column paired whichever metric row came last
    rows = [{"method": m, "seed": s, "metric": metric, "value": v}
            for s in range(4) for m in ("ours", "base")
            for metric, v in (("acc", 0.5 + 0.1 * (m == "ours")), ("flops", 100.0))]
    rec = _record(tables={"runs": rows + rows[:2]})  # a repeated identical row is one value
    ok = Claim("acc higher", "metrics.rate", "baselines.base.rate", ">", test="paired sign test over seeds", table="runs",
               a={"method": "ours", "metric": "acc"}, b={"method": "base", "metric": "acc"})
    assert "over 4 paired seeds, p=0.0625; no power" in results.evaluate_claims(rec, [ok])[0]["measured"]
    bad = Claim("acc higher", "metrics.rate", "baselines.base.rate", ">", test="paired sign test over seeds",
                table="runs", a={"method": "ours"}, b={"method": "base", "metric": "acc"})
    with pytest.raises(ValueError, match="several values for {'seed': 0}.*add the column"):
        results.evaluate_claims(rec, [bad])


def test_environment_names_versions_and_the_cpu_without_importing_what_the_run_did_not():
    # A rebuilt machine gave other float numbers from the same code and seeds (session 15): a record
    # must name the package versions and the CPU's instruction set; naming them imports nothing.
    import importlib.metadata as md
    import subprocess
    import sys

    code = ("import json, sys; from rayml import results; e = results.environment(1.0, {}); "
            "print(json.dumps({'env': e, 'loaded': [m for m in ('torch', 'transformers', 'sklearn') "
            "if m in sys.modules]}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    env, loaded = got["env"], got["loaded"]
    assert loaded == []
    for dist in ("numpy", "scipy", "torch", "scikit-learn", "ray"):
        assert env["packages"][dist] == md.version(dist)
    assert env["torch"] == md.version("torch") and env["ray"] == md.version("ray")
    assert env["cpu"]["machine"] and "torch_isa" not in env["cpu"]  # torch was not imported
    if os.path.exists("/proc/cpuinfo"):
        assert len(env["cpu"]["flags"]) == 12


def test_package_versions_skip_what_is_not_installed_and_list_optional_ones_not_imported_here():
    import importlib.metadata as md
    import sys

    assert "no_such_module_rayml" not in sys.modules  # scipy's entry names a module never imported
    got = results.package_versions(core=("numpy", "no-such-distribution-rayml"),
                                   optional={"scipy": "no_such_module_rayml", "pytest": "pytest",
                                             "no-such-optional-rayml": "x"})
    assert got == {"numpy": md.version("numpy"), "scipy": md.version("scipy"), "pytest": md.version("pytest")}


def test_cpu_info_names_torchs_instruction_set_once_torch_is_imported():
    import torch

    info = results.cpu_info()
    assert info["torch_isa"] == torch.backends.cpu.get_cpu_capability()
    assert any(b.startswith(("openblas", "mkl", "blis")) for b in info.get("blas", []))


def test_a_record_names_the_cached_bytes_it_read_and_forgets_them_after(tmp_path, monkeypatch):
    # fedag's encoder and selective-dpo's warm-up are cached by recipe, not by machine: their bytes
    # follow the CPU that trained them, so the record names a hash of what it read
    import hashlib

    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    results.take_cache_notes()
    art = tmp_path / "image_text" / "clip-digits-k.pt"
    art.parent.mkdir()
    art.write_bytes(b"weights")
    results.note_cache(art)
    other = tmp_path / "alignment" / "warm.npz"
    other.parent.mkdir()
    other.write_bytes(b"state")
    results.note_cache(other, built=True)
    env = results.environment(1.0, {})
    assert env["cache"] == {"alignment/warm.npz": hashlib.sha256(b"state").hexdigest()[:12] + " built here",
                            "image_text/clip-digits-k.pt": hashlib.sha256(b"weights").hexdigest()[:12]}
    assert "cache" not in results.environment(1.0, {})  # named once, for the record of the run that read it


def test_the_image_text_encoder_names_its_cache_file_when_loaded(tmp_path, monkeypatch):
    import torch

    from rayml.data import image_text as it

    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    results.take_cache_notes()
    config = it.EncoderConfig()
    path = tmp_path / "image_text" / f"clip-digits-{it._cache_key(0, config)}.pt"
    path.parent.mkdir()
    torch.save(it.ImageTextEncoder(config).state_dict(), path)
    it.load_or_train(0, config)
    notes = results.take_cache_notes()
    name = f"image_text/{path.name}"
    assert list(notes) == [name] and not notes[name].endswith("built here")
