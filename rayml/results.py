"""The result record every ``rayml run`` / ``rayml bench`` writes, and the claims it evaluates.

A record is one JSON object (``schema_version`` 2):
``name, kind, size, seed, paper, config, metrics, baselines, claims, summary, claims_fingerprint,
tables, env``.
Claims are declared by the experiment as data before it runs (``Claim``); ``evaluate_claims``
decides ``holds`` from the measured numbers, so no experiment sets its own verdict.

Version 2 of the claim contract:

- every claim has a ``kind``: ``paper`` (a claim the paper makes, with its ``source``: the
  abstract's sentence, or the table / figure / theorem it reproduces) or ``sanity`` (identities,
  solver checks). Only paper claims count in a method's verdict (``summary``).
- a claim may name ``controls``: baselines run through the same claim with their numbers in the
  method's place. A paper claim that a control also passes is *not discriminating*, whatever it
  measured. A threshold claim (``compare`` a number) must name at least one control. A control
  equal to the measured baseline the claim compares with (``compare`` a path; on every pair of its
  paired test, or in value without one) counts neither way (``equals_baseline``, contract 2.2): a strongest baseline chosen at run
  time and run as its own control, or a control that ties it everywhere, shows only that the test
  refuses a zero difference.
- a paired test needs the power to decide (contract 2.4): when the design's pairs (ties and failed runs
  counted) cannot reach ``p < 0.05`` even if every pair were a win (``smallest_p(n) = 2^-n``, at most 4
  pairs) while the number is on the claim's side, the claim is ``incomplete`` and a control counts
  neither way; both carry ``no_power: true``. A number on the wrong side fails, test or not.
- each evaluated claim gets a ``status``: ``holds``, ``fails``, ``not discriminating`` or
  ``incomplete`` (a paper claim without a source, or a threshold paper claim without a
  control: it is not evidence until declared properly).
- ``claims_fingerprint`` hashes the declarations, so a README figure can be traced to the
  claims that were committed before the run.
Tables are tidy long-format rows (``metric`` / ``value`` columns plus keys such as ``method``,
``case``, ``seed``); ``write_outputs`` also writes them to ``results.parquet`` and the
experiment's plots as PNG. Every file is written to a temporary name and renamed. A record written
with ``--json PATH`` keeps its long tables in Parquet files beside it: ``rayml.records``
(``write_record``, and ``load_record`` to read one back with every table's rows).
"""

from __future__ import annotations

import json
import math
import operator
import os
import platform
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "SCHEMA_VERSION",
    "Claim",
    "Control",
    "KINDS",
    "is_threshold",
    "tie_mask",
    "smallest_p",
    "STATUSES",
    "summarize_claims",
    "claims_fingerprint",
    "evaluate_claims",
    "rejudge",
    "CONTRACT",
    "lookup",
    "environment",
    "validate_record",
    "write_json",
    "atomic_write",
    "write_outputs",
    "check_writable",
    "list_outputs",
    "to_jsonable",
]

SCHEMA_VERSION = 2
KINDS = ("paper", "sanity")
STATUSES = ("holds", "fails", "not discriminating", "incomplete")
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
TESTS = ("paired sign test over seeds", "wilcoxon signed-rank over seeds")
ALPHA = 0.05
RECORD_KEYS = (
    "schema_version", "name", "kind", "size", "seed", "paper", "config",
    "metrics", "baselines", "claims", "summary", "claims_fingerprint", "tables", "env",
)


@dataclass(frozen=True)
class Control:
    """A baseline run through a claim in the method's place.

    Args:
        name: the baseline's name (as in the record's ``baselines``).
        metric: the dotted path of the baseline's number that replaces ``Claim.metric``.
        a: for a claim with a paired ``test``, the row filter that replaces ``Claim.a``
            (the baseline's rows of the claim's table).
        b: for a paired ``test``, the row filter that replaces ``Claim.b`` (what the control is
            compared with, when it is not the claim's own reference: a random-subset control of
            an "in-regime beats out-of-regime" claim compares random subsets with the same
            reference rows, say, or a control whose reference is its own plain run).
        compare: the dotted path or number that replaces ``Claim.compare`` for this control.

    ``b`` and ``compare`` default to the claim's own.
    """

    name: str
    metric: str
    a: Mapping[str, Any] | None = None
    b: Mapping[str, Any] | None = None
    compare: str | float | None = None

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError("Control.name must be a non-empty string")
        if not self.metric or not isinstance(self.metric, str):
            raise ValueError(f"Control {self.name!r}: metric must be a dotted record path")
        for key in ("a", "b"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), Mapping):
                raise TypeError(f"Control {self.name!r}: {key} must be a row filter (a mapping) or None")
        if self.compare is not None and (isinstance(self.compare, bool)
                                         or not isinstance(self.compare, (str, int, float))):
            raise TypeError(f"Control {self.name!r}: compare must be a dotted record path or a number")


@dataclass(frozen=True)
class Claim:
    """A claim, declared before the experiment runs.

    ``holds`` is ``metric op compare + margin`` (for ``>``/``>=``) or ``metric op compare - margin``
    (for ``<``/``<=``), and, when ``test`` is given, the one-sided paired test over seeds in the
    claim's direction must also give ``p_value < 0.05``. The test carries the margin (contract v2.1,
    session 11): it pairs ``a`` with ``b + margin`` (``b - margin`` for ``<``/``<=``), so "beats by more
    than 5 points" is tested against the 5 points, not against 0, and a negative margin makes the
    test a non-inferiority test; wins, losses and ties count against the same shifted rows.

    Args:
        text: the claim in words.
        metric: a dotted path into the record, e.g. ``"metrics.success_rate"``.
        compare: a dotted path (``"baselines.homotopy.success_rate"``) or a number.
        op: one of ``>``, ``>=``, ``<``, ``<=``.
        margin: how far past ``compare`` the metric must be (on the mean, and pair by pair in ``test``).
        test: ``None`` or one of ``TESTS``.
        table, value, a, b, pair_on: for a test, the rows of ``tables[table]`` matching filter
            ``a`` and filter ``b`` are paired on the ``pair_on`` columns and their ``value``
            column compared.
        kind: ``"paper"`` (counts in the verdict) or ``"sanity"`` (an identity or solver check).
        source: for a paper claim, where the paper makes it ("abstract: '...'", "Table 2",
            "Theorem 3.1").
        controls: baselines run through the same claim (``Control``); a paper claim that a
            control also passes is not discriminating.
        tie: for a paired ``test``, the tie tolerance: a pair with ``|a - b| <= tie`` (a number:
            absolute) or ``<= max(abs, rel * max(|a|, |b|))`` (a pair ``(abs, rel)``) is a tie,
            neither a win nor a loss; ties are dropped before the test and the evaluated claim
            reports ``pairs: {wins, losses, ties}``. ``None`` (the default): only exact zeros are
            ties, as in every record written before the field existed.
        gates: the texts of ``sanity`` claims of the same list that state the paper's
            precondition in this setting; when one of them does not hold, this claim is
            ``incomplete`` (a run whose gate failed decides nothing), whatever it measured.
            ``rayml.evidence.gate`` declares them.

    Examples:
        >>> c = Claim("beats homotopy", "metrics.success", "baselines.homotopy.success",
        ...           source="abstract: 'finds the global basin more often'",
        ...           controls=(Control("plain", "baselines.plain.success"),))
        >>> c.kind
        'paper'
    """

    text: str
    metric: str
    compare: str | float
    op: str = ">"
    margin: float = 0.0
    test: str | None = None
    table: str | None = None
    value: str = "value"
    a: Mapping[str, Any] = field(default_factory=dict)
    b: Mapping[str, Any] = field(default_factory=dict)
    pair_on: tuple[str, ...] = ("seed",)
    kind: str = "paper"
    source: str = ""
    controls: tuple[Control, ...] = ()
    tie: float | tuple[float, float] | None = None
    gates: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Claim.kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.controls, tuple) or not all(isinstance(c, Control) for c in self.controls):
            raise TypeError(f"Claim {self.text!r}: controls must be a tuple of Control")
        if self.test is None and any(c.b is not None for c in self.controls):
            raise ValueError(f"Claim {self.text!r}: a control's b is a row filter of the paired test; set test too")
        if self.test is not None and any(c.a is None for c in self.controls):
            raise ValueError(f"Claim {self.text!r}: a control of a tested claim needs its row filter 'a'")
        if self.op not in _OPS:
            raise ValueError(f"Claim.op must be one of {sorted(_OPS)}, got {self.op!r}")
        if self.test is not None:
            if self.test not in TESTS:
                raise ValueError(f"Claim.test must be None or one of {TESTS}, got {self.test!r}")
            if not self.table:
                raise ValueError("Claim.table is required when Claim.test is given")
        if self.tie is not None:
            if self.test is None:
                raise ValueError(f"Claim {self.text!r}: tie is a tolerance of the paired test; set test too")
            tol = self.tie if isinstance(self.tie, tuple) else (self.tie, 0.0)
            if len(tol) != 2 or not all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in tol):
                raise ValueError(f"Claim {self.text!r}: tie must be a number >= 0 or a pair (abs, rel) >= 0, "
                                 f"got {self.tie!r}")
        if not isinstance(self.gates, tuple) or not all(isinstance(g, str) and g for g in self.gates):
            raise TypeError(f"Claim {self.text!r}: gates must be a tuple of claim texts")
        if self.kind == "sanity" and self.gates:
            raise ValueError(f"Claim {self.text!r}: only a paper claim is gated (a sanity claim is a gate)")


def lookup(record: Mapping, path: str) -> Any:
    """The value at a dotted ``path`` of ``record`` (``KeyError`` naming the path if absent)."""
    node: Any = record
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(f"claim path {path!r}: no {part!r} in the record")
        node = node[part]
    return node


def _paired_values(rows: Sequence[Mapping], claim: Claim, a: Mapping[str, Any],
                   b: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    def select(flt):
        # One value per pair key: a filter that matches several different values under one key would pair
        # an arbitrary one of them (a control whose filter lacks the metric column, say), so it is refused;
        # repeated identical rows are one value.
        out = {}
        for r in rows:
            if all(r.get(k) == v for k, v in flt.items()):
                key, value = tuple(r.get(k) for k in claim.pair_on), float(r[claim.value])
                if key in out and not (out[key] == value or (math.isnan(out[key]) and math.isnan(value))):
                    raise ValueError(f"claim {claim.text[:80]!r}: rows matching {dict(flt)} in table "
                                     f"{claim.table!r} hold several values for {dict(zip(claim.pair_on, key))} "
                                     f"({out[key]} and {value}); add the column that tells them apart to the filter")
                out[key] = value
        return out

    xa, xb = select(a), select(b)
    keys = sorted(set(xa) & set(xb), key=repr)
    return np.array([xa[k] for k in keys]), np.array([xb[k] for k in keys])


def tie_mask(a: np.ndarray, b: np.ndarray, tie: float | tuple[float, float] | None) -> np.ndarray:
    """Which pairs ``(a_i, b_i)`` are ties under the tolerance ``tie`` (see ``Claim.tie``):
    ``|a - b| <= max(abs, rel * max(|a|, |b|))``; ``None`` makes only exact equality a tie."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if tie is None:
        return a == b
    tol_abs, tol_rel = tie if isinstance(tie, tuple) else (float(tie), 0.0)
    return np.abs(a - b) <= np.maximum(tol_abs, tol_rel * np.maximum(np.abs(a), np.abs(b)))


def smallest_p(n: int) -> float:
    """The smallest one-sided p that ``n`` pairs allow in either paired test (``TESTS``): every pair a
    win, ``2^-n``. Ties and non-finite pairs count in ``n``: a tied pair is evidence of no difference and a
    failed run is an outcome, so a design of 16 pairs of which 12 tie can fail its claim, while a design
    of 4 pairs cannot decide it."""
    return 2.0 ** -int(n) if n > 0 else 1.0


def _one_sided_p(a: np.ndarray, b: np.ndarray, greater: bool, test: str,
                 tie: float | tuple[float, float] | None = None) -> float:
    """One-sided p of ``a > b`` (``greater``) or ``a < b`` over finite pairs; the pairs that are ties
    under ``tie`` are dropped first (with ``tie=None`` exact zeros stay in and each test drops them its
    own way, as in every record written before ``Claim.tie`` existed)."""
    from scipy import stats

    d = (a - b) if greater else (b - a)
    if tie is not None:  # dropped, not zeroed: scipy's Wilcoxon leaves its exact null when zeros remain
        d = d[~tie_mask(a, b, tie)]
    d = d[np.isfinite(d)]
    if test.startswith("paired sign"):
        nz = d[d != 0]
        if nz.size == 0:
            return 1.0
        return float(stats.binomtest(int((nz > 0).sum()), nz.size, 0.5, alternative="greater").pvalue)
    if np.all(d == 0) or d.size == 0:
        return 1.0
    nonzero = np.abs(d[d != 0])
    if nonzero.size <= EXACT_SIGNED_RANK_MAX and (nonzero.size < d.size or np.unique(nonzero).size < nonzero.size):
        return _signed_rank_exact_p(d)
    return float(stats.wilcoxon(d, alternative="greater", zero_method="wilcox").pvalue)


# Up to this many nonzero differences with ties or zeros, the signed-rank p is the exact sign-flip one;
# scipy switches to its normal approximation above 13 pairs (zeros counted), which is liberal when few
# pairs differ (4 of 16 in the claim's direction: 0.023-0.034, exact 0.0625; found in session 15). Without
# ties or zeros scipy's own exact null (to 50 pairs) is used, as before.
EXACT_SIGNED_RANK_MAX = 50


def _signed_rank_exact_p(d: np.ndarray) -> float:
    """The one-sided (``d > 0``) p of Wilcoxon's signed-rank test by its exact sign-flip null: the
    value scipy's ``wilcoxon`` gives for at most 13 pairs with ties or zeros (it enumerates all
    ``2**n`` flips with ``permutation_test``, seconds per call), counted here by a subset-sum of the
    doubled average ranks (integers) in microseconds; zeros are dropped (their flips change nothing).
    Used up to ``EXACT_SIGNED_RANK_MAX`` nonzero differences (int64 counts hold 2**50)."""
    from scipy.stats import rankdata

    nz = d[d != 0]
    ranks2 = np.rint(2 * rankdata(np.abs(nz))).astype(np.int64)  # average ranks are multiples of 1/2
    observed = int(ranks2[nz > 0].sum())
    counts = np.zeros(int(ranks2.sum()) + 1, dtype=np.int64)
    counts[0] = 1
    for w in ranks2:
        counts[w:] = counts[w:] + counts[:-w]  # the right side is built before the assignment
    return float(counts[observed:].sum() / 2.0 ** nz.size)


def _number(x: Any) -> float:
    """A claim's operand as a float; ``None`` (an unmeasurable or non-finite metric) is NaN."""
    return float("nan") if x is None else float(x)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def is_threshold(claim: Claim) -> bool:
    """Whether ``claim`` compares with a fixed number (an exponent, a ratio, a level)."""
    return isinstance(claim.compare, (int, float)) and not isinstance(claim.compare, bool)


def _measure(record: Mapping, c: Claim, metric: str, a: Mapping[str, Any],
             b: Mapping[str, Any] | None = None, compare: str | float | None = None) -> dict:
    """``metric op compare (+/- margin)``, and the paired test of rows ``a`` against rows ``b``
    (``c.b`` and ``c.compare`` unless a control replaces them)."""
    b = c.b if b is None else b
    compare = c.compare if compare is None else compare
    value = _number(lookup(record, metric))
    ref = _number(compare if isinstance(compare, (int, float)) else lookup(record, compare))
    greater = c.op in (">", ">=")
    threshold = ref + c.margin if greater else ref - c.margin
    # A metric that could not be measured (None/NaN) never makes a claim hold.
    holds = bool(_OPS[c.op](value, threshold)) and math.isfinite(value) and math.isfinite(ref)
    out = {"holds": holds, "p_value": None, "measured": f"{_fmt(value)} vs {_fmt(ref)}"}
    # Equal to what it is compared with (every pair, or the value without a test): as a control,
    # such a run shows only that the test refuses a zero difference, not that the claim discriminates.
    # (Only against a measured baseline: a control at exactly a stated reference such as a zero gain
    # is a null control that tells something.)
    against_baseline = not isinstance(compare, (int, float))
    out["equals_baseline"] = against_baseline and math.isfinite(value) and value == ref
    if c.test is not None:
        rows = lookup(record, f"tables.{c.table}")
        xa, xb = _paired_values(rows, c, a, b)
        out["equals_baseline"] = against_baseline and bool(xa.size) and bool(np.array_equal(xa, xb))
        xb = xb + c.margin if greater else xb - c.margin  # the margin is inside the test (v2.1)
        p = _one_sided_p(xa, xb, greater, c.test, c.tie) if xa.size else 1.0
        out["p_value"] = p
        out["holds"] = holds and p < ALPHA
        unit = "paired seeds" if tuple(c.pair_on) == ("seed",) else f"pairs of ({', '.join(c.pair_on)})"
        out["measured"] += f" over {xa.size} {unit}, p={p:.3g}"
        # (v2.4) the design cannot decide: every pair counts (a tie is evidence of no difference, a failed
        # run's non-finite pair an outcome), and only a number on the claim's side is left undecided (R17:
        # a number on the wrong side fails the claim as it would without a test)
        floor = smallest_p(int(xa.size))
        if xa.size and floor >= ALPHA and holds:
            out["no_power"] = True
            out["measured"] += f"; no power: {xa.size} pairs allow no p below {floor:.3g}"
        if c.tie is not None:
            fin = np.isfinite(xa) & np.isfinite(xb)
            ties = tie_mask(xa, xb, c.tie) & fin
            win = ((xa > xb) if greater else (xa < xb)) & fin & ~ties
            loss = ((xa < xb) if greater else (xa > xb)) & fin & ~ties
            out["pairs"] = {"wins": int(win.sum()), "losses": int(loss.sum()), "ties": int(ties.sum())}
            out["measured"] += (f" ({out['pairs']['wins']} wins, {out['pairs']['losses']} losses, "
                                f"{out['pairs']['ties']} ties within {_fmt_tie(c.tie)})")
    # could not be measured: a non-finite value, or a paired test without pairs
    out["unmeasured"] = not math.isfinite(value) or (c.test is not None and not xa.size)
    return out


def _fmt_tie(tie: float | tuple[float, float]) -> str:
    if isinstance(tie, tuple):
        return f"max({_fmt(float(tie[0]))}, {_fmt(float(tie[1]))} x |value|)"
    return _fmt(float(tie))


def _status(c: Claim, own: dict, controls: list[dict]) -> tuple[str, bool | None]:
    """The claim's status. Only measured controls count: a control whose number could not be
    measured (``unmeasured``) or whose paired test has no power (``no_power``) neither passes nor fails
    the claim, so a claim whose controls are all unmeasured has no evidence of discrimination (``None``);
    a claim whose own number could not be measured, whose own paired test has no power, or a threshold
    paper claim that holds without any measured control, is ``incomplete``."""
    measured = [ctl for ctl in controls if not ctl.get("unmeasured") and not ctl.get("equals_baseline")
                and not ctl.get("no_power")]
    discriminating = None if not measured else not any(ctl["holds"] for ctl in measured)
    if c.kind == "paper" and (not c.source.strip() or (is_threshold(c) and not controls)):
        return "incomplete", discriminating
    if own["unmeasured"] or own.get("no_power"):  # nothing to judge: neither holds nor fails
        return "incomplete", discriminating
    if not own["holds"]:
        return "fails", discriminating
    if c.kind == "paper" and is_threshold(c) and not measured:
        return "incomplete", discriminating
    if discriminating is False:
        return "not discriminating", discriminating
    return "holds", discriminating


def evaluate_claims(record: Mapping, claims: Sequence[Claim]) -> list[dict]:
    """Evaluate each claim, and each of its controls, against the measured numbers of ``record``.

    Returns JSON-ready dicts with ``holds`` (the claim's own comparison and test), the
    controls' outcomes (a control that could not be measured, a non-finite number or a paired
    test without pairs, carries ``unmeasured: true`` and does not count), ``discriminating``
    (``None`` without measured controls) and the ``status``. A paired test with a ``tie`` tolerance
    adds ``pairs`` (wins, losses, ties). A paired test whose pairs cannot reach ``p < ALPHA`` at all
    (``smallest_p``), with the number on the claim's side, adds ``no_power: true``: the claim is
    ``incomplete``, the control does not count.
    A claim whose ``gates`` (sanity claims of ``claims``) did
    not all hold is ``incomplete`` and names them under ``gated_by``.
    """
    texts = {c.text: c for c in claims}
    for c in claims:
        missing = [g for g in c.gates if g not in texts or texts[g].kind != "sanity"]
        if missing:
            raise ValueError(f"claim {c.text!r}: gates {missing} are not sanity claims of the same list")
    out = []
    for c in claims:
        own = _measure(record, c, c.metric, c.a)
        controls = []
        for ctl in c.controls:
            m = _measure(record, c, ctl.metric, ctl.a or c.a, ctl.b, ctl.compare)
            unmeasured = m.pop("unmeasured")
            same = m.pop("equals_baseline") and not unmeasured
            if same:
                m["measured"] += ("; equal to the baseline on every pair" if c.test is not None
                                  else "; equal to the baseline") + ": does not count"
            own_ref = {k: v for k, v in (("b", ctl.b), ("compare", ctl.compare)) if v is not None}
            controls.append({"name": ctl.name, "metric": ctl.metric, **own_ref, **m,
                             **({"unmeasured": True} if unmeasured else {}),
                             **({"equals_baseline": True} if same else {})})
        status, discriminating = _status(c, own, controls)
        del own["unmeasured"], own["equals_baseline"]
        out.append({
            "text": c.text,
            "kind": c.kind,
            "source": c.source,
            "metric": c.metric,
            "compare": c.compare,
            "op": c.op,
            "margin": c.margin,
            "test": c.test,
            **own,
            "controls": controls,
            "discriminating": discriminating,
            "status": status,
        })
    status_of = {e["text"]: e["status"] for e in out}
    for c, e in zip(claims, out):
        if c.gates:
            failed = [g for g in c.gates if status_of[g] != "holds"]
            e["gates"] = list(c.gates)
            if failed:
                e["gated_by"] = failed
                e["status"] = "incomplete"
    return out


# The claim contract: "2.1" puts a claim's margin inside its paired test (session 11); "2.2": a
# control equal to the claim's baseline (every pair, or its value) is no evidence of discrimination;
# "2.3" (session 15): the signed-rank p is the exact sign-flip one up to 50 nonzero differences with ties or
# zeros (``EXACT_SIGNED_RANK_MAX``), where scipy's normal approximation was liberal when few pairs differ;
# "2.4" (session 16): a paired test whose pairs (ties and failed runs counted) cannot reach p < ALPHA
# (``smallest_p``) has no power: its claim, when its number is on the claim's side, is incomplete, and such
# a control counts neither way (both used to read "fails"); a number on the wrong side still fails.
CONTRACT = "2.4"


def rejudge(record: Mapping, claims: Sequence[Claim], *, git: str | None = None) -> dict:
    """``record`` with its verdicts evaluated again from its own numbers and tables under today's
    contract (``CONTRACT``), without re-running anything. Only the same declarations may re-judge a
    record: ``claims`` must have the record's claims fingerprint (else ``ValueError``). The record
    keeps its provenance and gains ``env.judged = {"git": ..., "contract": CONTRACT}``."""
    fp = claims_fingerprint(claims)
    if fp != record.get("claims_fingerprint"):
        raise ValueError(f"claims: fingerprint {fp} is not the record's {record.get('claims_fingerprint')!r}; "
                         "changed declarations need a new run, not a re-judgement")
    out = dict(record)
    out["claims"] = evaluate_claims(record, claims)
    out["summary"] = summarize_claims(out["claims"])
    out["env"] = {**record["env"], "judged": {"git": git if git is not None else git_commit(), "contract": CONTRACT}}
    return out


def summarize_claims(evaluated: Sequence[Mapping]) -> dict:
    """Counts of a record's evaluated claims: paper claims by status, sanity checks passed."""
    paper = [c for c in evaluated if c["kind"] == "paper"]
    sanity = [c for c in evaluated if c["kind"] == "sanity"]
    counts = {s: sum(c["status"] == s for c in paper) for s in STATUSES}
    return {
        "paper": {"total": len(paper), "held": counts["holds"], "failed": counts["fails"],
                  "not_discriminating": counts["not discriminating"], "incomplete": counts["incomplete"],
                  "with_controls": sum(bool(c["controls"]) for c in paper)},
        "sanity": {"total": len(sanity), "passed": sum(bool(c["holds"]) for c in sanity)},
    }


def claims_fingerprint(claims: Sequence[Claim]) -> str:
    """A short hash of the claim declarations (text, paths, operator, margin, test, controls)."""
    import hashlib

    def declared(c: Claim) -> dict:
        d = to_jsonable(c)
        # fields added later count only where set, so older declarations keep their fingerprint
        for key, default in (("tie", None), ("gates", [])):
            if d.get(key) == default:
                d.pop(key, None)
        for ctl in d.get("controls", []):
            for key in ("b", "compare"):
                if ctl.get(key) is None:
                    ctl.pop(key, None)
        return d

    canon = json.dumps([declared(c) for c in claims], sort_keys=True, default=str)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def git_commit() -> str | None:
    """The short commit of the rayml checkout this process imports (None outside a git checkout)."""
    here = Path(__file__).resolve().parent.parent
    try:
        res = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


# Distributions whose versions a record names (``env.packages``): read from their installed metadata
# (``importlib.metadata``), so no package is imported to be named. The core ones always (where installed),
# the optional ones wherever installed (their imports happen in Ray workers). Why: the same code and seeds gave other
# numbers on a rebuilt machine (session 15: float32 kernels differ with the CPU's instruction set), and
# the records then named only python, torch and ray.
ENV_PACKAGES = ("numpy", "scipy", "torch", "scikit-learn", "ray", "transformers", "pyarrow", "threadpoolctl")
ENV_OPTIONAL = ("osqp", "highspy", "cvxpy", "clarabel", "networkx", "cma", "tokenizers", "safetensors", "DracoPy",
                "constriction", "diffusers", "sentence-transformers", "xgrammar", "vllm")


def package_versions(core: Sequence[str] = ENV_PACKAGES, optional: Iterable[str] = ENV_OPTIONAL) -> dict:
    """``{distribution: version}`` of the ``core`` and ``optional`` distributions that are installed. Installed,
    not imported: methods import their optional solvers inside Ray workers, which the driver that writes the
    record never sees (R15)."""
    import importlib.metadata as md

    names = list(core) + [d for d in optional if d not in core]
    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def cpu_info() -> dict:
    """What decides a float kernel's path on this machine, in a few fields: the CPU's model name,
    ``machine`` (``x86_64``, ``arm64``), ``flags`` (a 12-hex hash of the CPU's feature flags, where
    ``/proc/cpuinfo`` has them: equal hashes, equal instruction sets), ``torch_isa`` (the vector
    capability torch's kernels dispatch to: ``AVX512``, ``AVX2``, ...; only where torch is already
    imported) and ``blas`` (each BLAS/OpenMP library loaded in this process, with the core type
    OpenBLAS chose; from threadpoolctl). The driver's view: a cluster's worker nodes may differ."""
    import hashlib
    import sys

    out: dict = {"model": platform.processor() or None, "machine": platform.machine()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model Name") and out.get("model") in (None, "", platform.machine()):
            out["model"] = value.strip()
        elif key in ("flags", "Features") and "flags" not in out:
            flags = " ".join(sorted(value.split()))
            out["flags"] = hashlib.sha256(flags.encode()).hexdigest()[:12]
    if "torch" in sys.modules:
        try:
            out["torch_isa"] = sys.modules["torch"].backends.cpu.get_cpu_capability()
        except Exception:  # pragma: no cover - an old torch without the query
            pass
    try:
        from threadpoolctl import threadpool_info

        out["blas"] = sorted({" ".join(str(x) for x in (i.get("internal_api"), i.get("version"),
                                                         i.get("architecture")) if x)
                              for i in threadpool_info()})
    except Exception:  # pragma: no cover - threadpoolctl is a core dependency
        pass
    return out


_CACHE_NOTES: dict[str, str] = {}


def note_cache(path: str | os.PathLike, *, built: bool = False) -> None:
    """Name a cached artifact this process read (``built=False``) or built and cached (``built=True``)
    for the next record's ``env.cache``: its path under the cache root -> the first 12 hex digits of its
    bytes' sha256 (`` built here`` appended when this run trained it). Cached artifacts are keyed by
    their recipe, not by the machine that trained them; their contents follow that machine's float
    kernels, so two records that read different bytes under one key are told apart here."""
    import hashlib

    from rayml.runtime import cache_root

    path = Path(path)
    try:
        name = str(path.resolve().relative_to(Path(cache_root()).resolve()))
    except ValueError:
        name = str(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    _CACHE_NOTES[name] = h.hexdigest()[:12] + (" built here" if built else "")


def take_cache_notes() -> dict:
    """The artifacts ``note_cache`` named since the last call (and forget them)."""
    notes = dict(sorted(_CACHE_NOTES.items()))
    _CACHE_NOTES.clear()
    return notes


def environment(seconds: float, run_stats: Mapping[str, int], *, git: str | None = None) -> dict:
    """Provenance: cluster size, versions, git commit, wall time, and the Ray work that ran.

    ``git``: the commit the run started from (``git_commit()`` read before the work); by default
    the commit checked out now, which a long run's neighbours may have moved on. ``packages``:
    ``package_versions()``; ``cpu``: ``cpu_info()`` (the same code and seeds can give other float
    numbers on another CPU); ``cache`` (only where any): the cached artifacts the run read or built
    (``note_cache``). Imports nothing the run did not (versions come from metadata)."""
    import ray

    from rayml import __version__, runtime

    info = runtime.cluster_info() if runtime.is_connected() else {"ray_nodes": 0, "cpus": 0, "gpus": 0}
    packages = package_versions()
    cache = take_cache_notes()
    return {
        **info,
        "seconds": round(float(seconds), 3),
        "rayml": __version__,
        "git": git if git is not None else git_commit(),
        "python": platform.python_version(),
        "torch": packages.get("torch"),
        "ray": ray.__version__,
        "packages": packages,
        "cpu": cpu_info(),
        **({"cache": cache} if cache else {}),
        "tasks": int(run_stats.get("tasks", 0)),
        "worker_pids": int(run_stats.get("worker_pids", 0)),
        **({"resumed_items": int(run_stats["resumed_items"])} if run_stats.get("resumed_items") else {}),
    }


def to_jsonable(x: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and dataclasses into plain JSON types (NaN -> None)."""
    if hasattr(x, "__dataclass_fields__"):
        return to_jsonable(asdict(x))
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist())
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def validate_record(record: Mapping) -> None:
    """Raise ``ValueError`` naming what is missing or malformed in a result record (a table is its
    rows, or, as a ``--json`` file holds a long one, a reference to its Parquet file:
    ``rayml.records``)."""
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise ValueError(f"result record is missing {missing}")
    if record["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"schema_version must be {SCHEMA_VERSION}")
    if record["kind"] not in ("run", "bench"):
        raise ValueError(f"kind must be 'run' or 'bench', got {record['kind']!r}")
    for key in ("config", "metrics", "baselines", "tables", "env"):
        if not isinstance(record[key], Mapping):
            raise ValueError(f"{key} must be an object")
    for name, rows in record["tables"].items():
        if isinstance(rows, Mapping) and "parquet" in rows:  # as a --json file holds a long table
            if not (isinstance(rows["parquet"], str) and isinstance(rows.get("rows"), int)
                    and isinstance(rows.get("columns"), list)):
                raise ValueError(f"tables.{name}: a Parquet reference needs 'parquet' (a file name), "
                                 f"'rows' (a count) and 'columns' (a list)")
            continue
        if not isinstance(rows, list) or any(not isinstance(r, Mapping) for r in rows):
            raise ValueError(f"tables.{name} must be a list of row objects or a Parquet reference "
                             f"(rayml.records)")
    for c in record["claims"]:
        for key in ("text", "kind", "source", "metric", "compare", "op", "holds", "measured", "controls",
                    "discriminating", "status"):
            if key not in c:
                raise ValueError(f"claim {c.get('text')!r} is missing {key!r}")
        if c["status"] not in STATUSES:
            raise ValueError(f"claim {c.get('text')!r}: status must be one of {STATUSES}")
    if not isinstance(record["summary"], Mapping) or set(record["summary"]) != {"paper", "sanity"}:
        raise ValueError("summary must be an object with 'paper' and 'sanity' counts")
    for key in ("ray_nodes", "cpus", "seconds", "rayml", "python", "ray", "tasks", "worker_pids"):
        if key not in record["env"]:
            raise ValueError(f"env is missing {key!r}")
    json.dumps(record, allow_nan=False)


def _is_uri(path) -> bool:
    return isinstance(path, str) and "://" in path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Write ``path`` whole or not at all: ``write(tmp)`` fills a temporary file beside it, which is
    flushed to disk, given the user's umask and renamed over ``path``; on any error the temporary
    file is removed and an existing ``path`` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from the user's group
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _join(base: str | os.PathLike, name: str) -> str | Path:
    return f"{str(base).rstrip('/')}/{name}" if _is_uri(base) else Path(base) / name


def _write_bytes(target: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a local path atomically, or to a URI (``s3://``, ``gs://``, ``file://``, ...)
    through pyarrow's filesystems (object stores publish a file whole when it is closed)."""
    if _is_uri(target):
        from pyarrow import fs as pafs

        filesystem, path = pafs.FileSystem.from_uri(str(target))
        parent = path.rsplit("/", 1)[0]
        if parent and parent != path:
            filesystem.create_dir(parent, recursive=True)
        with filesystem.open_output_stream(path) as fh:
            fh.write(data)
        return
    atomic_write(Path(target), lambda tmp: Path(tmp).write_bytes(data))


def write_json(record: Mapping, path: str | os.PathLike) -> str | Path:
    """Write ``record`` as JSON to ``path`` (a local path, atomically, or a URI)."""
    data = (json.dumps(record, indent=1, allow_nan=False) + "\n").encode()
    _write_bytes(path, data)
    return path if _is_uri(path) else Path(path)


def check_writable(path: str | os.PathLike, *, is_dir: bool) -> None:
    """Raise ``ValueError`` before any work starts if ``path`` cannot be written: a probe file is
    really created and removed where the output will go (``os.access`` says yes to ``/proc`` as
    root), and special files (devices, pipes) are refused rather than replaced."""
    flag = "--out" if is_dir else "--json"
    if _is_uri(path):
        from pyarrow import fs as pafs

        try:
            filesystem, p = pafs.FileSystem.from_uri(str(path))
            probe_dir = p if is_dir else (p.rsplit("/", 1)[0] if "/" in p else "")
            probe = f"{probe_dir.rstrip('/')}/.rayml-write-probe-{os.getpid()}" if probe_dir else \
                f".rayml-write-probe-{os.getpid()}"
            if probe_dir:
                filesystem.create_dir(probe_dir, recursive=True)
            with filesystem.open_output_stream(probe) as fh:
                fh.write(b"")
            filesystem.delete_file(probe)
        except (OSError, ValueError, _arrow_error()) as exc:
            raise ValueError(f"{flag} {str(path)!r}: cannot write there ({exc})") from None
        return
    p = Path(path)
    if p.exists():
        if p.is_dir() != is_dir:
            raise ValueError(f"{flag} {str(path)!r}: exists and is not {'a directory' if is_dir else 'a file'}")
        if not is_dir and not p.is_file():
            raise ValueError(f"{flag} {str(path)!r}: is a special file (device, pipe or socket), not a regular file")
    probe = p if is_dir else p.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{flag} {str(path)!r}: cannot write under {str(probe)!r}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".rayml-write-probe-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r}: cannot write under {str(probe)!r} ({exc.strerror})") from None


def _arrow_error() -> type:
    import pyarrow as pa

    return pa.ArrowException


def tidy_rows(record: Mapping) -> list[dict]:
    """All tables of ``record`` as one list of rows with a ``table`` column added (a table still a
    Parquet reference, as a ``--json`` file holds it, is a ``ValueError``: load the record with
    ``rayml.records.load_record``)."""
    rows = []
    for name, table in record["tables"].items():
        if not isinstance(table, list):
            raise ValueError(f"tables.{name} is not rows (a Parquet reference?): read the record with "
                             f"rayml.records.load_record(path)")
        for r in table:
            rows.append({"table": name, "name": record["name"], "kind": record["kind"], **r})
    return rows


def list_outputs(out_dir: str | os.PathLike) -> list[str]:
    """The files in an output folder (local or URI), sorted."""
    if _is_uri(out_dir):
        from pyarrow import fs as pafs

        filesystem, path = pafs.FileSystem.from_uri(str(out_dir))
        infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(_join(out_dir, info.base_name) for info in infos if info.type == pafs.FileType.File)
    return sorted(str(p) for p in Path(out_dir).iterdir() if p.is_file())


def write_outputs(record: Mapping, out_dir: str | os.PathLike, figures: Mapping[str, Any] | None = None) -> list:
    """Write ``record.json``, ``results.parquet`` and ``<plot>.png`` files into ``out_dir`` (a local
    folder or a URI such as ``s3://bucket/run1``); returns what was written.

    The parquet file is tidy long format and carries the record's provenance (name, kind, size,
    seed, git, claims fingerprint) as schema metadata; integer columns stay integers."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tidy_rows(record)  # before anything is written: a record without its rows is refused
    written = [write_json(record, _join(out_dir, "record.json"))]
    if rows:
        columns = sorted({k for r in rows for k in r})
        data = {}
        for col in columns:
            vals = [r.get(col) for r in rows]
            numbers = [v for v in vals if v is not None]
            if numbers and all(isinstance(v, int) and not isinstance(v, bool) for v in numbers):
                data[col] = pa.array(vals, type=pa.int64())
            elif all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                data[col] = pa.array([None if v is None else float(v) for v in vals], type=pa.float64())
            else:
                data[col] = pa.array([None if v is None else str(v) for v in vals], type=pa.string())
        env = record.get("env", {})
        meta = {"rayml." + k: str(v) for k, v in (("name", record.get("name")), ("kind", record.get("kind")),
                                                   ("size", record.get("size")), ("seed", record.get("seed")),
                                                   ("git", env.get("git")), ("rayml", env.get("rayml")),
                                                   ("claims_fingerprint", record.get("claims_fingerprint")))}
        table = pa.table(data).replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        target = _join(out_dir, "results.parquet")
        _write_bytes(target, sink.getvalue().to_pybytes())
        written.append(target)
    for name, fig in (figures or {}).items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        target = _join(out_dir, f"{name}.png")
        _write_bytes(target, buf.getvalue())
        written.append(target)
    return written
