"""The vLLM part of ``rayml bench zapformat`` (``rayml.experiments.zapformat_vllm``) without vLLM: its
summary of measured rows and the clear skip line when the vLLM venv is absent. (The part itself runs
only where ``scripts/setup_vllm_cpu.sh`` built the venv: ``rayml bench zapformat --quick``.)"""

import pytest

from rayml.experiments import zapformat_vllm as zv


def _row(r, b, wall, prefill, steps):
    return {"round": r, "backend": b, "wall_s": wall, "cpu_s": wall, "prefill_wall_s": prefill, "prefill_cpu_s": prefill,
            "steps": steps, "tokens": 8 * steps, "outputs": 8, "valid": None if b == "none" else 8, "stopped": 8}


def test_summary_is_medians_of_timed_rounds_and_ratios():
    rows = [_row(0, "zapformat", 99.0, 1.0, 10), _row(0, "xgrammar", 99.0, 1.0, 10), _row(0, "none", 99.0, 1.0, 10)]
    for r, (z, x) in enumerate([(2.0, 4.0), (3.0, 5.0), (2.5, 6.0)], 1):
        rows += [_row(r, "zapformat", z, 0.1, 11), _row(r, "xgrammar", x, 0.1, 11), _row(r, "none", 2.0, 0.1, 11)]
    s = zv.summarize(rows)
    assert s["zapformat"]["step_ms"] == pytest.approx(1e3 * 2.5 / 11)  # the warm-up round (99 s) is not timed
    assert s["zapformat"]["tpot_ms"] == pytest.approx(1e3 * 2.4 / 10)
    assert s["xgrammar"]["first_round_step_ms"] == pytest.approx(9900.0)
    assert s["zapformat"]["valid"] == s["zapformat"]["outputs"] == 32
    assert s["ratio_zapformat_to_xgrammar"]["step_ms"] == pytest.approx(2.5 / 5.0)
    # paired within rounds: per-round ratios 2/4, 3/5, 2.5/6 -> median 0.5; ZapFormat below in all 3
    pr = s["paired_zapformat_to_xgrammar"]["step_ms"]
    assert pr["median_ratio"] == pytest.approx(0.5) and pr["rounds_at_or_below"] == pr["rounds"] == 3
    assert pr["sign_test_p"] == pytest.approx(0.25)
    table = zv.vllm_table({"vllm_version": "x", "batch": 8, "startup_s": 1.0, "rounds": 3, **s})
    assert "| zapformat |" in table and "ZapFormat / xgrammar: 0.500 per step" in table
    assert "Paired within rounds" in table and "step_ms 0.500 (3 / 3, p = 0.25)" in table


def test_paired_ratios_count_rounds_where_zapformat_is_slower():
    rows = []
    for r, (z, x) in enumerate([(5.0, 4.0), (6.0, 5.0), (2.0, 4.0), (7.0, 6.0)], 1):
        rows += [_row(r, "zapformat", z, 0.1, 11), _row(r, "xgrammar", x, 0.1, 11)]
    pr = zv.paired_ratios(rows)["cpu_step_ms"]
    assert pr["rounds"] == 4 and pr["rounds_at_or_below"] == 1
    assert pr["median_ratio"] == pytest.approx((7 / 6 + 1.2) / 2)  # of 1.25, 1.2, 0.5, 7/6


def test_absent_vllm_venv_is_skipped_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("RAYML_VLLM_PYTHON", "/nonexistent/python")
    out = zv.run_vllm({"vllm": {"batch": 8}})
    assert out["available"] == 0.0 and "RAYML_VLLM_PYTHON" in out["reason"]
    assert capsys.readouterr().out.startswith("[zapformat bench] vLLM part skipped:")
    assert zv.run_vllm({})["available"] == 0.0  # sizes without a vllm setting: off
