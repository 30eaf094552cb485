"""The experiments' shared scaffolding: tie-tolerant paired counts, grid tuning on seeds kept apart
from the test seeds, power estimates from a pilot, and gates.

Every experiment in ``rayml.experiments`` needs the same few pieces of evidence-making around its
method, and this module holds them once (issue 35). It sits beside ``rayml.results`` (which
evaluates the claims) and imports nothing from a method's core or from ``rayml.experiments``.

- **Ties.** ``paired_counts`` / ``per_case`` count wins, losses and ties of paired numbers, where a
  pair within a tolerance (``rayml.results.tie_mask``: absolute, or relative to the values) is a
  tie. A claim declares the same tolerance with ``Claim(tie=...)``: its paired test then drops the
  ties before testing, and the evaluated claim reports ``pairs: {wins, losses, ties}``.
- **Tuning.** ``split_seeds`` gives disjoint test and tuning seeds; ``tune`` evaluates grids of
  settings (one per problem: a case x method, say) on the tuning seeds, picks the best, checks that
  the paper's values lie inside each grid, reports a choice on a grid's edge and, when asked,
  extends the grid past that edge and evaluates the new points before the recorded run;
  ``tuning_rows`` turns the choices into a tidy table for the record.
- **Power.** ``power_from_pilot`` estimates the number of pairs (seeds or instances) a one-sided
  sign test or Wilcoxon signed-rank test needs for a target power, from a pilot's paired
  differences or from an effect size and standard deviation; the result is a JSON-ready dict the
  experiment records (``budget`` or ``metrics``), with the method of the estimate named.
- **Binary outcomes.** ``mcnemar_exact`` is the exact one-sided McNemar test that paired 0/1
  outcomes got worse (a convergence check of an attack between two steps, say), with the test's
  exact false-alarm rate at its number of discordant pairs.
- **Gates.** ``gate`` attaches a sanity claim (the paper's precondition holds in this setting) to
  the paper claims that depend on it: ``rayml.results.evaluate_claims`` then makes those claims
  ``incomplete`` when the gate does not hold. ``nulled`` blanks an outcome's numbers when a run
  stops at its gate, so that nothing behind it is measured (the claims are ``incomplete`` too).

Examples:
    >>> import numpy as np
    >>> paired_counts([0.494306, 0.1, 0.3], [0.494304, 0.2, 0.2], tie=1e-4)
    {'wins': 1, 'losses': 1, 'ties': 1}
    >>> choice = tune(lambda items: [abs(s["lr"] - 0.1) for _, s in items],
    ...               {"demo": {"lr": [0.01, 0.1, 1.0]}}, paper={"lr": 0.1})["demo"]
    >>> choice.setting, choice.edges, choice.paper_inside
    ({'lr': 0.1}, {}, True)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from rayml.results import TESTS, Claim, _one_sided_p, tie_mask

__all__ = [
    "claim_differences",
    "paired_counts",
    "per_case",
    "margin_p",
    "split_seeds",
    "grid",
    "GridChoice",
    "on_edge",
    "tune",
    "tuning_rows",
    "power_from_pilot",
    "claim_power",
    "holm",
    "mcnemar_exact",
    "sign_test_thresholds",
    "gate",
    "nulled",
]

# ------------------------------------------------------------------------------------------
# paired comparisons with a tie tolerance

def paired_counts(a: Sequence[float], b: Sequence[float], *, tie: float | tuple[float, float] | None = None,
                  lower_is_better: bool = True) -> dict:
    """Wins, losses and ties of ``a`` against ``b``, pair by pair.

    A pair within ``tie`` (a number: absolute; ``(abs, rel)``: ``max(abs, rel * max(|a|, |b|))``;
    ``None``: exact equality) is a tie. A win is the better value of ``a`` (the lower one when
    ``lower_is_better``). Pairs with a non-finite side count nowhere.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D of the same length, got shapes {a.shape} and {b.shape}")
    finite = np.isfinite(a) & np.isfinite(b)
    ties = tie_mask(a, b, tie) & finite
    better = (a < b) if lower_is_better else (a > b)
    worse = (a > b) if lower_is_better else (a < b)
    return {"wins": int((better & finite & ~ties).sum()), "losses": int((worse & finite & ~ties).sum()),
            "ties": int(ties.sum())}


def per_case(rows: Sequence[Mapping], *, a: Mapping[str, Any], b: Mapping[str, Any], by: Sequence[str] = ("case",),
             pair_on: Sequence[str] = ("seed",), value: str = "value",
             tie: float | tuple[float, float] | None = None, lower_is_better: bool = True,
             test: str | None = None) -> list[dict]:
    """The per-case table of a paired comparison: for each distinct value of the ``by`` columns,
    the rows matching filter ``a`` paired with those matching filter ``b`` on ``pair_on``, with
    their wins, losses, ties (``paired_counts``), the number of pairs and the median of ``a``
    and ``b``. With ``test`` (one of ``rayml.results.TESTS``) each row also carries ``p_value``:
    the one-sided paired test that ``a`` is better, ties under ``tie`` dropped first, exactly as a
    ``Claim`` with that test computes it (a per-case p is a description, not a claim: a claim over
    cases is declared once, over all pairs). Tidy rows, ready for a record's ``tables``."""
    if test is not None and test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    def select(flt):
        out: dict = {}
        for r in rows:
            if all(r.get(k) == v for k, v in flt.items()):
                out.setdefault(tuple(r.get(k) for k in by), {})[tuple(r.get(k) for k in pair_on)] = float(r[value])
        return out

    xa, xb = select(a), select(b)
    table = []
    for case in sorted(set(xa) & set(xb), key=repr):
        keys = sorted(set(xa[case]) & set(xb[case]), key=repr)
        va, vb = np.array([xa[case][k] for k in keys]), np.array([xb[case][k] for k in keys])
        counts = paired_counts(va, vb, tie=tie, lower_is_better=lower_is_better)
        row = {**dict(zip(by, case)), **counts, "pairs": len(keys),
               "median_a": float(np.median(va)) if keys else float("nan"),
               "median_b": float(np.median(vb)) if keys else float("nan")}
        if test is not None:
            row["p_value"] = _one_sided_p(va, vb, not lower_is_better, test, tie) if keys else 1.0
        table.append(row)
    return table


def margin_p(a: Sequence[float], b: Sequence[float], margin: float, *, side: str = "within",
             test: str = "wilcoxon signed-rank over seeds", tie: float | tuple[float, float] | None = None) -> float:
    """One-sided paired p against a margin: ``side="within"`` tests that ``a - b < margin`` pair by pair
    (non-inferiority of a lower-is-better ``a`` to ``b`` at ``margin``), ``side="beyond"`` that
    ``a - b > margin`` (``a`` shown worse than ``b`` by more than the margin). The paired test (one of
    ``rayml.results.TESTS``) runs on ``b + margin`` against ``a`` (or the reverse), exactly as a ``Claim``
    computes it, ties under ``tie`` dropped first. Not rejecting "within" is not evidence of "beyond":
    a verdict that needs both directions asks for both p-values."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    if side not in ("within", "beyond"):
        raise ValueError(f"side must be 'within' or 'beyond', got {side!r}")
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D of the same length, got shapes {a.shape} and {b.shape}")
    if a.size == 0:
        return 1.0
    shifted = b + float(margin)
    return _one_sided_p(shifted, a, True, test, tie) if side == "within" else _one_sided_p(a, shifted, True, test, tie)


# ------------------------------------------------------------------------------------------
# tuning on seeds kept apart from the test seeds

def split_seeds(seed: int, n_test: int, n_tune: int) -> tuple[list[int], list[int]]:
    """``(test seeds, tuning seeds)``: ``n_test + n_tune`` seeds spawned from ``seed``
    (``rayml.runtime.seeds``), the test seeds first, so a run's test seeds do not change with the
    number of tuning seeds. The two lists never share a seed."""
    from rayml.runtime import seeds

    for name, n in (("n_test", n_test), ("n_tune", n_tune)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {n!r}")
    every = seeds(seed, int(n_test) + int(n_tune))
    test, tune_ = every[:n_test], every[n_test:]
    if set(test) & set(tune_):  # pragma: no cover - 63-bit spawned seeds
        raise RuntimeError("a tuning seed equals a test seed")
    return test, tune_


def grid(**axes: Sequence[Any]) -> list[dict]:
    """Every combination of the ``axes`` values (the first axis varies slowest), as settings."""
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not len(values):
            raise ValueError(f"grid axis {name!r} must be a non-empty list of values, got {values!r}")
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


@dataclass(frozen=True)
class GridChoice:
    """The tuned setting of one problem and how it sits on its grid.

    Attributes:
        setting: the chosen setting (a grid point).
        score: its tuning score.
        axes: the grid's axes as evaluated (after any extension), ``{axis: sorted values}``.
        scores: every evaluated setting with its score, in evaluation order.
        edges: the numeric axes on whose edge the choice sits, ``{axis: "low" | "high"}`` (an axis
            with one value has no edge).
        paper_inside: whether the paper's values lie inside the grid's range on every axis they
            name (``None``: no paper values given).
        extended: the axes extended past an edge, with the values added.
    """

    setting: dict
    score: float
    axes: dict
    scores: list = field(default_factory=list)
    edges: dict = field(default_factory=dict)
    paper_inside: bool | None = None
    extended: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-ready: the setting, score, edges, paper check and extensions (for ``budget``)."""
        return {"setting": dict(self.setting), "score": self.score, "on_edge": dict(self.edges),
                "paper_inside": self.paper_inside, "extended": {k: list(v) for k, v in self.extended.items()}}


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values)


def on_edge(value: Any, values: Sequence[Any], side: str = "either") -> bool:
    """Whether ``value`` sits on an edge of a grid axis ``values`` (its smallest or largest value;
    ``side="low"`` / ``"high"``: that edge only). An axis of one value has no edge."""
    if side not in ("either", "low", "high"):
        raise ValueError(f"side must be 'either', 'low' or 'high', got {side!r}")
    values = list(values)
    if len(set(values)) < 2:
        return False
    lo, hi = min(values), max(values)
    return bool((value == lo and side != "high") or (value == hi and side != "low"))


def _edges(setting: Mapping[str, Any], axes: Mapping[str, list]) -> dict:
    out = {}
    for name, values in axes.items():
        if _numeric(values):
            if on_edge(setting[name], values, "low"):
                out[name] = "low"
            elif on_edge(setting[name], values, "high"):
                out[name] = "high"
    return out


def _paper_inside(paper: Mapping[str, Any] | None, axes: Mapping[str, list]) -> bool | None:
    if paper is None:
        return None
    for name, v in paper.items():
        if name not in axes:
            raise ValueError(f"paper value {name!r} is not an axis of the grid {sorted(axes)}")
        values = axes[name]
        inside = (min(values) <= v <= max(values)) if _numeric(values) and _numeric([v]) else v in values
        if not inside:
            return False
    return True


def _step_past(values: list, side: str, limit: tuple[float, float] | None) -> Any:
    """The next value past an axis's ``side``: geometric when the axis is positive, else arithmetic."""
    lo, hi = (values[0], values[1]) if side == "low" else (values[-1], values[-2])
    nxt = lo * (lo / hi) if lo > 0 and hi > 0 else lo + (lo - hi)
    if isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer)):
        nxt = int(round(nxt))
    if limit is not None and not (limit[0] <= nxt <= limit[1]):
        return None
    return nxt


def tune(evaluate: Callable[[list[tuple[Hashable, dict]]], Sequence[float]], grids: Mapping[Hashable, Any], *,
         lower_is_better: bool = True, paper: Mapping[str, Any] | Mapping[Hashable, Mapping] | None = None,
         extend: int = 0, limits: Mapping[str, tuple[float, float]] | None = None,
         tie: float | tuple[float, float] = 0.0, tie_break: str | Callable[[dict], Any] = "first") -> dict[Hashable, GridChoice]:
    """Tune every problem on its grid; return ``{problem: GridChoice}``.

    Args:
        evaluate: called with a list of ``(problem, setting)`` items, returns their tuning scores
            in order (the mean over the tuning seeds, say). One call per round, so the caller
            can run every item of a round as parallel tasks (``rayml.runtime.pmap``).
        grids: ``{problem: {axis: values}}`` (axes crossed by ``grid``).
        lower_is_better: whether the lowest score wins (ties: see ``tie_break``).
        paper: the paper's values, ``{axis: value}`` for every problem or ``{problem: {axis:
            value}}``; each ``GridChoice.paper_inside`` says whether they lie inside the grid.
        extend: how many times a numeric axis is extended past the edge where the choice sits
            (one new value past it, geometric for positive axes, evaluated in a new round) before
            the choice is final; ``0`` only reports the edge. A problem whose every score is NaN or
            infinite is never extended: its choice is the first setting by default, not a best one.
        limits: ``{axis: (low, high)}``: no extension past these (a step size above 1, a
            negative scale); a choice at a limit stays on its edge and says so.
        tie: scores within ``tie`` of the best one are tied with it: a number (absolute) or a pair
            ``(abs, rel)``, within ``max(abs, rel * |best|)`` (``0``: only equal scores).
        tie_break: which tied setting wins: ``"first"`` in grid order, ``"middle"`` (the median
            one in grid order: a plateau's centre, away from its edges), or a callable
            ``key(setting)`` whose smallest value wins (``lambda s: abs(s["w"] - 0.5)`` prefers the
            setting nearest 0.5, ``lambda s: (s["a"], s["b"])`` the lexicographically first).

    Returns:
        The choices; ``edges`` names any axis whose edge still holds the choice (the caller says
        so on the page, or extends the grid).
    """
    if not grids:
        raise ValueError("grids must name at least one problem")
    if isinstance(extend, bool) or not isinstance(extend, int) or extend < 0:
        raise ValueError(f"extend must be an integer >= 0, got {extend!r}")
    tie_abs, tie_rel = tie if isinstance(tie, tuple) and len(tie) == 2 else (tie, 0.0)
    if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 for t in (tie_abs, tie_rel)):
        raise ValueError(f"tie must be a number >= 0 or a pair (abs, rel) >= 0, got {tie!r}")
    if not (callable(tie_break) or tie_break in ("first", "middle")):
        raise ValueError(f"tie_break must be 'first', 'middle' or a callable key(setting), got {tie_break!r}")
    axes = {p: {k: sorted(v) if _numeric(v) else list(v) for k, v in g.items()} for p, g in grids.items()}
    for p in axes:
        grid(**axes[p])  # checks every axis
    per_problem = paper is not None and set(paper) <= set(grids) and all(isinstance(v, Mapping) for v in paper.values())
    scored: dict = {p: {} for p in grids}  # problem -> {frozen setting: score}

    def run_round(items):
        if not items:
            return
        values = list(evaluate(items))
        if len(values) != len(items):
            raise ValueError(f"evaluate returned {len(values)} scores for {len(items)} settings")
        for (p, s), v in zip(items, values):
            scored[p][tuple(sorted(s.items()))] = float(v)

    def best(p):
        pts = [s for s in grid(**axes[p])]
        vals = [scored[p][tuple(sorted(s.items()))] for s in pts]
        key = [(v if lower_is_better else -v) if math.isfinite(v) else math.inf for v in vals]
        top = min(key)
        tol = max(tie_abs, tie_rel * abs(top)) if math.isfinite(top) else 0.0
        tied = [i for i, k in enumerate(key) if k <= top + tol] if math.isfinite(top) else [0]
        if tie_break == "first":
            i = tied[0]
        elif tie_break == "middle":
            i = tied[(len(tied) - 1) // 2]
        else:
            i = min(tied, key=lambda j: tie_break(dict(pts[j])))
        return pts[i], vals[i]

    run_round([(p, s) for p in grids for s in grid(**axes[p])])
    extended: dict = {p: {} for p in grids}
    for _ in range(extend):
        new_items = []
        for p in grids:
            setting, score = best(p)
            if not math.isfinite(score):  # no finite score on the grid: its "edge" choice says nothing
                continue
            for name, side in _edges(setting, axes[p]).items():
                nxt = _step_past(axes[p][name], side, (limits or {}).get(name))
                if nxt is None or nxt in axes[p][name]:
                    continue
                axes[p][name] = sorted([*axes[p][name], nxt])
                extended[p].setdefault(name, []).append(nxt)
            new_items += [(p, s) for s in grid(**axes[p]) if tuple(sorted(s.items())) not in scored[p]]
        if not new_items:
            break
        run_round(new_items)
    out = {}
    for p in grids:
        setting, score = best(p)
        pv = paper.get(p) if per_problem else paper
        out[p] = GridChoice(setting=setting, score=score, axes=axes[p],
                            scores=[(dict(k), v) for k, v in scored[p].items()], edges=_edges(setting, axes[p]),
                            paper_inside=_paper_inside(pv, axes[p]), extended=extended[p])
    return out


def tuning_rows(choices: Mapping[Hashable, GridChoice], *, keys: Sequence[str] = ("problem",),
                metric: str = "tuning_score") -> list[dict]:
    """The record's tuning table: one tidy row per problem x evaluated setting (the setting's
    values, ``chosen`` 1/0, ``on_edge`` 1/0 for the chosen one, ``metric`` / ``value``); a tuple
    problem key is spread over the ``keys`` columns."""
    rows = []
    for p, ch in choices.items():
        label = dict(zip(keys, p if isinstance(p, tuple) else (p,)))
        for s, v in ch.scores:
            chosen = s == ch.setting
            rows.append({**label, **s, "chosen": float(chosen), "on_edge": float(chosen and bool(ch.edges)),
                         "metric": metric, "value": v})
    return rows


# ------------------------------------------------------------------------------------------
# power from a pilot

def _sign_n(p: float, power: float, alpha: float, max_n: int) -> int | None:
    """The smallest number of non-tied pairs at which the exact one-sided sign test at ``alpha``
    rejects with probability >= ``power`` when a pair is a win with probability ``p``."""
    from scipy import stats

    for n in range(1, max_n + 1):
        k = int(stats.binom.ppf(1 - alpha, n, 0.5)) + 1  # smallest k with P(X >= k | 1/2) <= alpha
        if k <= n and stats.binom.sf(k - 1, n, p) >= power:
            return n
    return None


def power_from_pilot(diffs: Sequence[float] | None = None, *, effect: float | None = None, sd: float | None = None,
                     test: str = "sign", tie: float | tuple[float, float] | None = None, power: float = 0.8,
                     alpha: float = 0.05, max_n: int = 100_000) -> dict:
    """How many pairs a one-sided paired test needs to detect the pilot's effect.

    Give either the pilot's paired differences ``diffs`` (oriented so that a positive difference
    favours the method), or an ``effect`` (mean difference) and its ``sd`` (normal differences).

    - ``test="sign"``: the exact power of the one-sided sign test (binomial, no approximation),
      with the win probability among non-tied pairs from the pilot (or ``Phi(effect / sd)``); the
      ties of the pilot (within ``tie``) are dropped by the test, so the pairs needed are the
      non-tied ones divided by the pilot's share of non-tied pairs.
    - ``test="wilcoxon"``: Noether's (1987) normal approximation for the signed-rank test,
      ``n = (z_{1-alpha} + z_power)^2 / (3 (p' - 1/2)^2)`` with ``p' = P(D + D' > 0)``, estimated
      from the pilot's Walsh pairs ``i < j`` (or ``Phi(sqrt(2) effect / sd)``), then scaled for
      ties as for the sign test.

    Returns a JSON-ready dict: ``pairs_needed`` (``None`` when the pilot shows no effect in the
    claim's direction, or more than ``max_n`` would be needed), the estimated probabilities, the
    pilot's size, ``tie_share``, and ``method`` naming the estimate.
    """
    if test not in ("sign", "wilcoxon"):
        raise ValueError(f"test must be 'sign' or 'wilcoxon', got {test!r}")
    for name, v in (("power", power), ("alpha", alpha)):
        if not (isinstance(v, (int, float)) and 0 < v < 1):
            raise ValueError(f"{name} must be in (0, 1), got {v!r}")
    from scipy import stats

    if diffs is not None:
        if effect is not None or sd is not None:
            raise ValueError("give either diffs or effect and sd, not both")
        d = np.asarray(diffs, dtype=float)
        d = d[np.isfinite(d)]
        if d.ndim != 1 or d.size < 2:
            raise ValueError(f"diffs must hold at least 2 finite paired differences, got {d.size}")
        ties = tie_mask(d, np.zeros_like(d), tie)
        tie_share = float(ties.mean())
        nz = d[~ties]
        source = {"pilot_pairs": int(d.size), "pilot_wins": int((nz > 0).sum()), "pilot_losses": int((nz < 0).sum())}
        if test == "sign":
            prob = float((nz > 0).mean()) if nz.size else 0.5
        else:
            i, j = np.triu_indices(nz.size, k=1)
            walsh = nz[i] + nz[j]
            prob = float((walsh > 0).mean() + 0.5 * (walsh == 0).mean()) if walsh.size else 0.5
    else:
        if effect is None or sd is None or not (isinstance(sd, (int, float)) and sd > 0):
            raise ValueError(f"without diffs give effect and sd > 0, got effect={effect!r}, sd={sd!r}")
        tie_share, source = 0.0, {"effect": float(effect), "sd": float(sd)}
        z = float(effect) / float(sd)
        prob = float(stats.norm.cdf(z if test == "sign" else math.sqrt(2) * z))
    n_nonzero = None
    if prob > 0.5 and tie_share < 1.0:
        if test == "sign":
            n_nonzero = _sign_n(prob, power, alpha, max_n)
        else:
            zsum = stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)
            n_nonzero = int(math.ceil(zsum ** 2 / (3 * (prob - 0.5) ** 2)))
    needed = None if n_nonzero is None else int(math.ceil(n_nonzero / (1.0 - tie_share)))
    if needed is not None and needed > max_n:
        needed = None
    method = ("exact binomial power of the one-sided sign test" if test == "sign"
              else "Noether's normal approximation for the one-sided Wilcoxon signed-rank test")
    return {"test": test, "method": method, "power": power, "alpha": alpha, "pairs_needed": needed,
            "nonzero_pairs_needed": n_nonzero, ("p_win" if test == "sign" else "p_walsh_positive"): prob,
            "tie_share": tie_share, **source}


def claim_differences(rows: Sequence[Mapping], claim: Claim) -> np.ndarray:
    """The finite paired differences of ``claim``'s test on ``rows``, paired as
    ``rayml.results.evaluate_claims`` pairs them and oriented so that a positive one clears the claim's
    margin (contract 2.1): ``a - (b + margin)`` for ``>``/``>=``, ``(b - margin) - a`` for ``<``/``<=``."""
    from rayml.results import _paired_values

    xa, xb = _paired_values(rows, claim, claim.a, claim.b)
    d = (xa - (xb + claim.margin)) if claim.op in (">", ">=") else ((xb - claim.margin) - xa)
    return d[np.isfinite(d)]


def claim_power(tables: Mapping[str, Sequence[Mapping]], claims: Sequence[Claim], *, kinds: Sequence[str] = ("paper",),
                power: float = 0.8, alpha: float = 0.05) -> dict:
    """This run as the pilot of every paired claim: ``power_from_pilot`` on the claim's own pairs.

    For each claim of ``claims`` whose ``kind`` is in ``kinds`` and that has a paired ``test``, the
    rows of ``tables[claim.table]`` matching ``claim.a`` and ``claim.b`` are paired on
    ``claim.pair_on`` exactly as ``rayml.results.evaluate_claims`` pairs them, the differences are
    oriented so that a positive one favours the claim and measured past the claim's margin, as the
    claim's test is (contract 2.1: ``a - (b + margin)`` for ``>``/``>=``, ``(b - margin) - a`` for
    ``<``/``<=``), and ``power_from_pilot`` estimates the pairs the claim's own test (the sign test for
    a ``paired sign`` test, else Wilcoxon) needs, with the claim's tie tolerance. Returns
    ``{claim text: estimate}`` with ``pilot_mean_difference`` added; ``None`` for a claim with fewer
    than 2 finite pairs (nothing to estimate from). Claims without a test are left out.
    """
    out: dict = {}
    for c in claims:
        if c.kind not in kinds or c.test is None:
            continue
        d = claim_differences(tables.get(c.table, ()), c)
        if d.size < 2:
            out[c.text] = None
            continue
        test = "sign" if c.test.startswith("paired sign") else "wilcoxon"
        out[c.text] = {**power_from_pilot(d, test=test, tie=c.tie, power=power, alpha=alpha),
                       "pilot_mean_difference": float(d.mean())}
    return out


def holm(p_values: Mapping[Hashable, float] | Sequence[float]) -> Any:
    """Holm's (1979) step-down adjusted p-values of a family of tests (familywise error control).

    Sorted ascending, the ``i``-th smallest of ``m`` p-values (``i`` from 0) becomes
    ``min(1, max_{j <= i} (m - j) p_(j))``; a test rejects at ``alpha`` when its adjusted p is
    ``<= alpha``, which controls the chance of any false rejection in the family at ``alpha``
    under any dependence between the tests. Use it when a result is read per member of a family
    (per K, per case) and the reader may pick the members that pass. Takes a mapping (returns one
    with the same keys) or a sequence (returns a list in the same order); a NaN p stays NaN and
    does not count in ``m``.
    """
    keys = list(p_values.keys()) if isinstance(p_values, Mapping) else list(range(len(p_values)))
    vals = [float(p_values[k]) for k in keys]
    if any(v < 0 or v > 1 for v in vals if not math.isnan(v)):
        raise ValueError(f"p-values must lie in [0, 1], got {vals}")
    finite = sorted((v, i) for i, v in enumerate(vals) if not math.isnan(v))
    m, running, adj = len(finite), 0.0, [math.nan] * len(vals)
    for rank, (v, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * v))
        adj[i] = running
    return dict(zip(keys, adj)) if isinstance(p_values, Mapping) else adj


def sign_test_thresholds(d: Any, alpha: float = 0.05) -> np.ndarray:
    """Per discordant count ``d`` (array-like): the smallest loss count at which the exact one-sided
    sign (McNemar) test at ``alpha`` rejects, i.e. the smallest ``k`` with ``P(X >= k) <= alpha`` for
    ``X ~ Binomial(d, 1/2)``; ``d + 1`` where no count rejects."""
    from scipy import stats

    d = np.asarray(d)
    k = np.asarray(stats.binom.ppf(1 - alpha, d, 0.5), float) + 1
    for _ in range(3):  # ppf's float edges, either way
        k = np.where((k >= 2) & (stats.binom.sf(k - 2, d, 0.5) <= alpha), k - 1, k)
        k = np.where(stats.binom.sf(k - 1, d, 0.5) > alpha, k + 1, k)
    return np.minimum(k, d + 1)


def mcnemar_exact(before: Sequence[Any], after: Sequence[Any], *, alpha: float = 0.05) -> dict:
    """The exact one-sided McNemar test that paired binary outcomes got worse from ``before`` to
    ``after`` (a correct outcome turned wrong more often than a wrong one turned correct).

    ``before`` and ``after`` are paired 0/1 (or boolean) outcomes of the same units, any shape (they
    are flattened). Only the discordant pairs count: ``losses`` (1 -> 0) and ``gains`` (0 -> 1); under
    the null of no change each discordant pair is a loss with probability 1/2, so
    ``p = P(X >= losses)`` for ``X ~ Binomial(losses + gains, 1/2)`` (1.0 with no discordant pair). It
    is the exact paired sign test on binary outcomes (``rayml.results``' ``paired sign test``), here
    with the counts and the test's actual false-alarm rate at this many discordant pairs: ``size`` is
    ``P(p <= alpha)`` under the null, at most ``alpha`` and below it where the binomial is coarse (0
    under 5 discordant pairs at ``alpha = 0.05``: such a test cannot reject at all).
    """
    from scipy import stats

    x, y = np.asarray(before).ravel(), np.asarray(after).ravel()
    if x.shape != y.shape:
        raise ValueError(f"before and after must hold the same number of outcomes, got {x.size} and {y.size}")
    for name, v in (("before", x), ("after", y)):
        if v.size and not np.isin(v.astype(float), (0.0, 1.0)).all():
            raise ValueError(f"{name} must hold binary outcomes (0/1 or booleans)")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    x, y = x.astype(bool), y.astype(bool)
    losses, gains = int((x & ~y).sum()), int((~x & y).sum())
    n = losses + gains
    p = float(stats.binom.sf(losses - 1, n, 0.5)) if n else 1.0
    # the smallest loss count that rejects, and the null probability of reaching it
    k = int(sign_test_thresholds(n, alpha)) if n else 1
    size = float(stats.binom.sf(k - 1, n, 0.5)) if n and k <= n else 0.0
    return {"losses": losses, "gains": gains, "discordant": n, "units": int(x.size), "p": p, "size": size,
            "alpha": float(alpha)}


# ------------------------------------------------------------------------------------------
# gates

def too_few_pairs(n: int, what: str, *, alpha: float = 0.05) -> str | None:
    """Why ``n`` pairs cannot decide a one-sided paired test at ``alpha`` (its smallest p is ``2^-n``), or None."""
    if 2.0 ** -int(n) < alpha:
        return None
    return f"{what} = {int(n)} < {math.ceil(math.log2(1 / alpha) + 1e-12)} pairs"


def paper_not_inside(name: str, values: Sequence[Any], paper: Any, label: str = "setting") -> str | None:
    """Why grid ``values`` does not hold the paper's ``paper`` strictly inside (off both edges), or None."""
    g = sorted(values)
    if paper in g and paper not in (g[0], g[-1]):
        return None
    return f"{name} {g} must hold the paper's {label} {paper} strictly inside"


def gate(sanity: Claim, *claims: Claim) -> tuple[Claim, ...]:
    """``(sanity, *claims)`` with each of ``claims`` gated on ``sanity``: the sanity claim states
    the paper's precondition in this setting (the data carries the signal, the baseline is beaten,
    the phenomenon appears); when it does not hold, ``rayml.results.evaluate_claims`` makes the
    gated paper claims ``incomplete`` (listing the gate under ``gated_by``) instead of counting
    their verdicts. Put the result in the experiment's ``CLAIMS``."""
    if not isinstance(sanity, Claim) or sanity.kind != "sanity":
        raise ValueError("gate: the gate must be a Claim of kind 'sanity'")
    if not claims:
        raise ValueError("gate: name at least one claim behind the gate")
    for c in claims:
        if not isinstance(c, Claim):
            raise TypeError(f"gate: every gated claim must be a Claim, got {type(c).__name__}")
    return (sanity, *(replace(c, gates=tuple(dict.fromkeys((*c.gates, sanity.text)))) for c in claims))


def nulled(values: Mapping[str, Any], passed: bool) -> dict:
    """``values`` when the gate passed, else the same (nested) keys with ``None``: a run stopped at
    its gate measures nothing, so every claim on these numbers is ``incomplete``."""
    if passed:
        return dict(values)
    return {k: (nulled(v, False) if isinstance(v, Mapping) else None) for k, v in values.items()}
