"""rayml.evidence: tie-tolerant paired counts, grid tuning on separate seeds, power from a pilot, gates;
and the layering rule that no module outside rayml.experiments imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rayml import evidence, results
from rayml.results import Claim

ROOT = Path(__file__).resolve().parents[1]


# --- ties ---------------------------------------------------------------------------------------

def test_paired_counts_treat_differences_within_the_tolerance_as_ties():
    a = [0.494306, 0.494306, 0.1, 0.5]
    b = [0.494304, 0.494305, 0.2, 0.4]
    assert evidence.paired_counts(a, b) == {"wins": 1, "losses": 3, "ties": 0}
    assert evidence.paired_counts(a, b, tie=1e-4) == {"wins": 1, "losses": 1, "ties": 2}
    assert evidence.paired_counts(a, b, tie=1e-4, lower_is_better=False) == {"wins": 1, "losses": 1, "ties": 2}
    assert evidence.paired_counts([1.0, np.nan], [2.0, 1.0]) == {"wins": 1, "losses": 0, "ties": 0}
    with pytest.raises(ValueError, match="same length"):
        evidence.paired_counts([1.0], [1.0, 2.0])


def test_per_case_tables_pair_within_each_case():
    rows = [{"case": c, "method": m, "seed": s, "value": v}
            for c, off in (("x", 0.0), ("y", 1.0)) for s in range(4)
            for m, v in (("ours", off + s * 0.1), ("base", off + s * 0.1 + (1e-9 if c == "x" else -0.5)))]
    table = evidence.per_case(rows, a={"method": "ours"}, b={"method": "base"}, tie=1e-6)
    assert [(r["case"], r["wins"], r["losses"], r["ties"], r["pairs"]) for r in table] == [
        ("x", 0, 0, 4, 4), ("y", 0, 4, 0, 4)]
    # with a test each case carries the claim's one-sided p: y loses every pair, 8 wins of 8 give 1/256
    rows += [{"case": "z", "method": m, "seed": s, "value": v} for s in range(8)
             for m, v in (("ours", s), ("base", s + 1.0))]
    tested = {r["case"]: r for r in evidence.per_case(rows, a={"method": "ours"}, b={"method": "base"}, tie=1e-6,
                                                      test="paired sign test over seeds")}
    assert tested["y"]["p_value"] == 1.0 and tested["z"]["p_value"] == pytest.approx(1 / 256)
    assert tested["x"]["p_value"] == 1.0  # every pair a tie: nothing left to test
    wil = {r["case"]: r for r in evidence.per_case(rows, a={"method": "ours"}, b={"method": "base"},
                                                   test="wilcoxon signed-rank over seeds")}
    assert wil["z"]["p_value"] == pytest.approx(stats.wilcoxon(np.full(8, -1.0), alternative="less").pvalue)
    with pytest.raises(ValueError, match="test must be"):
        evidence.per_case(rows, a={"method": "ours"}, b={"method": "base"}, test="t-test")


# --- tuning -------------------------------------------------------------------------------------

def test_split_seeds_are_disjoint_and_the_test_seeds_do_not_move():
    test, tune = evidence.split_seeds(3, 5, 2)
    assert len(test) == 5 and len(tune) == 2 and not set(test) & set(tune)
    assert evidence.split_seeds(3, 5, 7)[0] == test
    with pytest.raises(ValueError, match="n_tune"):
        evidence.split_seeds(3, 5, -1)


def test_tune_picks_the_best_and_reports_the_paper_and_the_edge():
    calls = []

    def evaluate(items):
        calls.append(len(items))
        return [(s["sigma"] - 0.3) ** 2 + 0.01 * s["n"] for _, s in items]

    out = evidence.tune(evaluate, {"a": {"sigma": [0.25, 0.5, 1.0], "n": [1, 3, 10]}}, paper={"sigma": 1.0, "n": 3})
    ch = out["a"]
    assert ch.setting == {"sigma": 0.25, "n": 1} and calls == [9]
    assert ch.edges == {"sigma": "low", "n": "low"} and ch.paper_inside is True
    outside = evidence.tune(lambda items: [s["sigma"] for _, s in items], {"a": {"sigma": [0.5, 1.0]}},
                            paper={"sigma": 2.0})
    assert outside["a"].paper_inside is False


def test_tune_breaks_ties_by_grid_order_plateau_middle_or_a_key():
    # a plateau: every w in [0.3, 0.7] scores 0 (within a tolerance of 0.01 for 0.3)
    def evaluate(items):
        return [0.0 if 0.35 <= s["w"] <= 0.7 else (0.005 if s["w"] == 0.3 else 1.0) for _, s in items]

    grids = {"p": {"w": [0.1, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9]}}
    assert evidence.tune(evaluate, grids)["p"].setting == {"w": 0.4}
    assert evidence.tune(evaluate, grids, tie=0.01)["p"].setting == {"w": 0.3}
    assert evidence.tune(evaluate, grids, tie=0.01, tie_break="middle")["p"].setting == {"w": 0.5}
    # a relative tolerance scales with the best score: 1.0 is within 1% of 1.005, 1.02 is not
    rel = evidence.tune(lambda items: [1.0 + 0.02 * (s["w"] > 0.5) + 0.005 * (s["w"] == 0.1) for _, s in items],
                        grids, tie=(0.0, 0.01), tie_break="middle")["p"]
    assert rel.setting == {"w": 0.3}
    near = evidence.tune(evaluate, grids, tie_break=lambda s: abs(s["w"] - 0.62))["p"]
    assert near.setting == {"w": 0.6} and near.score == 0.0
    with pytest.raises(ValueError, match="tie_break"):
        evidence.tune(evaluate, grids, tie_break="last")
    with pytest.raises(ValueError, match="tie must"):
        evidence.tune(evaluate, grids, tie=-1)


def test_tune_extends_an_edge_until_the_choice_is_inside():
    def evaluate(items):
        return [abs(np.log(s["sigma"] / 0.06)) for _, s in items]

    ch = evidence.tune(evaluate, {"p": {"sigma": [0.25, 0.5, 1.0]}}, extend=3)["p"]
    assert ch.setting == {"sigma": 0.0625} and ch.extended == {"sigma": [0.125, 0.0625, 0.03125]}
    assert ch.edges == {}
    # a limit stops the extension, and the choice says it still sits on the edge
    ch = evidence.tune(evaluate, {"p": {"sigma": [0.25, 0.5, 1.0]}}, extend=3, limits={"sigma": (0.2, 10)})["p"]
    assert ch.setting == {"sigma": 0.25} and ch.edges == {"sigma": "low"} and ch.extended == {}


def test_tune_does_not_extend_a_grid_whose_every_score_is_nan():
    """Helper B's finding (session 7): with no finite score, the first setting is the choice by
    default, and extending past that "edge" only spent tuning rounds."""
    calls = []

    def evaluate(items):
        calls.append(len(items))
        return [float("nan") if p == "none" else abs(np.log(s["sigma"] / 0.06)) for p, s in items]

    out = evidence.tune(evaluate, {"none": {"sigma": [0.25, 0.5, 1.0]}, "p": {"sigma": [0.25, 0.5, 1.0]}}, extend=3)
    assert out["none"].extended == {} and out["none"].setting == {"sigma": 0.25}
    assert out["p"].extended == {"sigma": [0.125, 0.0625, 0.03125]}
    assert calls == [6, 1, 1, 1]  # the NaN problem got no extension rounds


def test_tune_maximises_and_writes_a_record_ready_table():
    out = evidence.tune(lambda items: [s["lr"] for _, s in items], {("c", "m"): {"lr": [0.1, 0.01]}},
                        lower_is_better=False)
    rows = evidence.tuning_rows(out, keys=("case", "method"))
    assert out[("c", "m")].setting == {"lr": 0.1}
    assert {(r["case"], r["method"], r["lr"], r["chosen"], r["on_edge"]) for r in rows} == {
        ("c", "m", 0.1, 1.0, 1.0), ("c", "m", 0.01, 0.0, 0.0)}
    with pytest.raises(ValueError, match="scores"):
        evidence.tune(lambda items: [1.0], {"a": {"lr": [0.1, 0.01]}})
    with pytest.raises(ValueError, match="axis 'lr'"):
        evidence.tune(lambda items: [], {"a": {"lr": []}})


# --- power --------------------------------------------------------------------------------------

def test_sign_test_power_is_exact_at_the_returned_size():
    est = evidence.power_from_pilot(effect=0.5, sd=1.0, test="sign")
    n, p = est["pairs_needed"], est["p_win"]
    assert p == pytest.approx(stats.norm.cdf(0.5))

    def exact_power(m):
        k = min(k for k in range(m + 2) if stats.binom.sf(k - 1, m, 0.5) <= 0.05)
        return stats.binom.sf(k - 1, m, p)

    assert exact_power(n) >= 0.8 and all(exact_power(m) < 0.8 for m in range(1, n))


def test_wilcoxon_power_matches_a_simulation():
    est = evidence.power_from_pilot(effect=0.5, sd=1.0, test="wilcoxon")
    n = est["pairs_needed"]
    assert 25 <= n <= 35  # about the t-test's 25 over the signed-rank test's efficiency 0.955
    rng = np.random.default_rng(0)
    d = rng.normal(0.5, 1.0, size=(2000, n))
    power = float(np.mean(stats.wilcoxon(d, alternative="greater", axis=1).pvalue < 0.05))
    assert abs(power - 0.8) < 0.05


def test_power_from_a_pilot_scales_for_its_ties_and_says_when_there_is_no_effect():
    pilot = [1e-6] * 6 + [0.3, 0.2, -0.1, 0.4]
    est = evidence.power_from_pilot(pilot, tie=1e-4)
    assert est["tie_share"] == pytest.approx(0.6) and est["p_win"] == pytest.approx(0.75)
    assert est["pairs_needed"] == int(np.ceil(est["nonzero_pairs_needed"] / 0.4))
    assert evidence.power_from_pilot([-1.0, -2.0, 0.5])["pairs_needed"] is None
    with pytest.raises(ValueError, match="test"):
        evidence.power_from_pilot([1.0, 2.0], test="t")
    with pytest.raises(ValueError, match="sd"):
        evidence.power_from_pilot(effect=1.0)


# --- gates --------------------------------------------------------------------------------------

def test_a_gate_makes_its_paper_claims_incomplete_when_it_fails():
    sanity = Claim("the local basin traps plain smoothing", "baselines.plain.trapped", 0.5, ">", kind="sanity")
    paper = Claim("beats plain smoothing", "metrics.found", "baselines.plain.found", ">", source="Table 2")
    claims = evidence.gate(sanity, paper)
    assert claims[1].gates == (sanity.text,) and claims[0] is sanity
    rec = {"metrics": {"found": 0.9}, "baselines": {"plain": {"found": 0.1, "trapped": 0.2}}}
    out = results.evaluate_claims(rec, claims)
    assert out[1]["holds"] and out[1]["status"] == "incomplete" and out[1]["gated_by"] == [sanity.text]
    rec["baselines"]["plain"]["trapped"] = 0.9
    assert results.evaluate_claims(rec, claims)[1]["status"] == "holds"
    with pytest.raises(ValueError, match="sanity"):
        evidence.gate(paper, paper)


def test_nulled_blanks_every_number_behind_a_failed_gate():
    values = {"a": 1.0, "b": {"c": 2.0}}
    assert evidence.nulled(values, True) == values
    assert evidence.nulled(values, False) == {"a": None, "b": {"c": None}}


# --- layering -----------------------------------------------------------------------------------

def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


# the entry points that run experiments by name
ALLOWED = {"rayml/cli.py", "rayml/registry.py", "rayml/__main__.py"}


def test_no_module_outside_the_experiments_imports_them():
    offenders = []
    for path in sorted((ROOT / "rayml").rglob("*.py")) + sorted((ROOT / "actors").rglob("*.py")) \
            + sorted((ROOT / "kernels").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("rayml/experiments/") or rel in ALLOWED:
            continue
        if any(m == "rayml.experiments" or m.startswith("rayml.experiments.") for m in _imports(path)):
            offenders.append(rel)
    assert offenders == [], f"a method's core imports rayml.experiments: {offenders}"


def test_evidence_imports_no_method_core():
    mods = _imports(ROOT / "rayml" / "evidence.py")
    assert {m.split(".")[1] for m in mods if m.startswith("rayml.")} <= {"results", "runtime"}


def test_on_edge_names_a_grid_axis_ends():
    assert evidence.on_edge(0.1, [0.01, 0.1]) and evidence.on_edge(0.01, [0.1, 0.01], "low")
    assert not evidence.on_edge(0.1, [0.01, 0.1], "low") and not evidence.on_edge(0.05, [0.01, 0.05, 0.1])
    assert not evidence.on_edge(1.0, [1.0])  # one value: no edge
    with pytest.raises(ValueError, match="side"):
        evidence.on_edge(1.0, [1.0, 2.0], "middle")


def test_too_few_pairs_and_paper_not_inside():
    assert evidence.too_few_pairs(4, "seeds") == "seeds = 4 < 5 pairs" and evidence.too_few_pairs(5, "seeds") is None
    assert evidence.paper_not_inside("g", [1, 2, 3], 2) is None
    assert "strictly inside" in evidence.paper_not_inside("g", [1, 2, 3], 3)
    assert "strictly inside" in evidence.paper_not_inside("g", [1, 3], 2)


def test_holm_adjusts_step_down_keeps_order_and_nan():
    # hand case: m = 3, sorted 0.01, 0.02, 0.04 -> 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04
    assert evidence.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    # monotone step-down: a larger raw p never gets a smaller adjusted p; capped at 1
    assert evidence.holm({"K2": 0.999, "K4": 0.090, "K8": 0.020}) == pytest.approx({"K2": 0.999, "K4": 0.18, "K8": 0.06})
    out = evidence.holm([0.01, float("nan"), 0.04])  # NaN stays NaN and does not count in m
    assert out[0] == pytest.approx(0.02) and np.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert evidence.holm([]) == [] and evidence.holm([0.3]) == [0.3] and evidence.holm([0.6, 0.7]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="p-values"):
        evidence.holm([1.5])


def test_margin_p_within_and_beyond():
    plain = np.linspace(0.1, 0.5, 8)
    # a 0.01 above b on every pair: within a 0.05 margin (p = 2^-8 for the sign test), not beyond it
    a = plain + 0.01
    assert evidence.margin_p(a, plain, 0.05, test="paired sign test over seeds") == pytest.approx(2.0 ** -8)
    assert evidence.margin_p(a, plain, 0.05, side="beyond", test="paired sign test over seeds") == pytest.approx(1.0)
    # 0.1 above: beyond the margin, not within; the Wilcoxon p matches scipy's on the shifted differences
    from scipy import stats
    worse = plain + 0.1 + np.linspace(-0.01, 0.01, 8)
    assert evidence.margin_p(worse, plain, 0.05) == pytest.approx(
        stats.wilcoxon(plain + 0.05 - worse, alternative="greater").pvalue)
    assert evidence.margin_p(worse, plain, 0.05) > 0.5
    assert evidence.margin_p(worse, plain, 0.05, side="beyond") < 0.01
    # the margin matters: the same pairs are within a 0.2 margin
    assert evidence.margin_p(worse, plain, 0.2) < 0.01
    assert evidence.margin_p([], [], 0.05) == 1.0
    with pytest.raises(ValueError):
        evidence.margin_p(a, plain, 0.05, side="outside")
    with pytest.raises(ValueError):
        evidence.margin_p(a, plain[:3], 0.05)


def test_claim_power_pairs_and_orients_like_the_claims_test():
    from rayml.results import Claim

    rows = [{"m": m, "seed": s, "value": v} for s, (x, y) in enumerate([(1.0, 2.0), (1.5, 2.0), (3.0, 2.5), (0.5, 2.0)])
            for m, v in (("ours", x), ("base", y))]
    rows.append({"m": "ours", "seed": 9, "value": 0.0})  # unpaired: dropped
    lower = Claim("ours lower", "metrics.x", "baselines.b.x", op="<", test="wilcoxon signed-rank over seeds", table="t",
                  a={"m": "ours"}, b={"m": "base"}, source="s")
    sign = Claim("ours lower (sign)", "metrics.x", "baselines.b.x", op="<", test="paired sign test over seeds",
                 table="t", a={"m": "ours"}, b={"m": "base"}, source="s", tie=0.6)
    few = Claim("one pair", "metrics.x", "baselines.b.x", op=">", test="paired sign test over seeds", table="t",
                a={"m": "ours", "seed": 0}, b={"m": "base", "seed": 0}, source="s")
    untested = Claim("no test", "metrics.x", "baselines.b.x", source="s")
    sanity = Claim("sanity", "metrics.x", "baselines.b.x", test="paired sign test over seeds", table="t",
                   a={"m": "ours"}, b={"m": "base"}, kind="sanity")
    out = evidence.claim_power({"t": rows}, [lower, sign, few, untested, sanity])
    assert set(out) == {"ours lower", "ours lower (sign)", "one pair"}
    d = [1.0, 0.5, -0.5, 1.5]  # base - ours: positive favours "lower"
    assert out["ours lower"]["pairs_needed"] == evidence.power_from_pilot(d, test="wilcoxon")["pairs_needed"]
    assert out["ours lower"]["pilot_mean_difference"] == pytest.approx(0.625)
    assert (out["ours lower"]["pilot_wins"], out["ours lower"]["pilot_losses"]) == (3, 1)
    # the sign claim's tie (0.6) drops the pairs 0.5 and -0.5: 2 wins of 2, half the pilot tied
    assert out["ours lower (sign)"]["test"] == "sign"
    assert out["ours lower (sign)"]["tie_share"] == 0.5 and out["ours lower (sign)"]["pilot_losses"] == 0
    assert out["one pair"] is None
    # contract 2.1: the margin is inside the differences, as it is inside the claim's test
    by = Claim("ours lower by 0.5", "metrics.x", "baselines.b.x", op="<", margin=0.5,
               test="wilcoxon signed-rank over seeds", table="t", a={"m": "ours"}, b={"m": "base"}, source="s")
    (est,) = evidence.claim_power({"t": rows}, [by]).values()
    assert est["pilot_mean_difference"] == pytest.approx(0.125)
    assert (est["pilot_wins"], est["pilot_losses"]) == (2, 1)  # 0.5 and 1.0 clear the margin; 0 ties; -1.0 loses


def test_mcnemar_exact_counts_discordant_pairs_and_matches_brute_force():
    from itertools import product
    from math import comb

    before = np.array([1, 1, 1, 1, 1, 0, 0, 1, 0, 1], bool)
    after = np.array([0, 0, 0, 0, 0, 0, 1, 1, 0, 1], bool)
    r = evidence.mcnemar_exact(before, after)
    assert (r["losses"], r["gains"], r["discordant"], r["units"]) == (5, 1, 6, 10)
    assert abs(r["p"] - (comb(6, 5) + comb(6, 6)) / 2 ** 6) < 1e-12  # P(X >= 5 | n=6)
    # worse-only direction: the reverse change is no evidence of getting worse
    assert evidence.mcnemar_exact(after, before)["p"] > 0.9
    assert evidence.mcnemar_exact([1, 0], [1, 0]) == {"losses": 0, "gains": 0, "discordant": 0, "units": 2,
                                                      "p": 1.0, "size": 0.0, "alpha": 0.05}
    # any shape (replicates x images) is flattened; the size is the exact false-alarm rate: the null
    # probability of a p at or below alpha, enumerated over every sign pattern of n discordant pairs
    for n in range(0, 11):
        size = sum(evidence.mcnemar_exact(np.array(s), 1 - np.array(s))["p"] <= 0.05 for s in product((0, 1), repeat=n))
        r = evidence.mcnemar_exact(np.ones((1, n)), np.zeros((1, n)))
        assert abs(r["size"] - size / 2 ** n) < 1e-12 and r["size"] <= 0.05
        assert r["size"] == 0.0 if n < 5 else r["size"] > 0.0
    with pytest.raises(ValueError, match="binary"):
        evidence.mcnemar_exact([0, 2], [0, 1])
    with pytest.raises(ValueError, match="same number"):
        evidence.mcnemar_exact([0, 1], [0])
