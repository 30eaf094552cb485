"""The domain-specific interface between designers' language and modelling commands, and its
automated domain specification.

Implements the architecture of "Targeted control of fast prototyping through domain-specific
interface" (Yu-Zhe Shi, Mingchen Liu, Hanlu Ma, Qiao Xu, Huamin Qu, Kun He, Lecheng Ruan, Qining
Wang; ICML 2025, arXiv 2506.11070). Only the abstract and the opening of the introduction could be
reached; the paper names three gaps between designers' language and modelling languages and an
interface that bridges each, with an algorithm that specifies the interface for a domain
automatically. What is implemented, gap by gap:

* **abstraction level** (one designer intent = many modelling commands): the interface exposes
  the domain's *independent* quantities and its operational mechanism (``compile_statements``)
  propagates an edit through the domain's dependencies into every modelling command it needs
  (four leg heights *and* the tabletop's elevation);
* **semantic precision** (vague degree words, percentages, diameters): the DSL keeps the
  designer's value form (``TO v``, ``BY +p%``, ``+slightly``, ``HOLE part v``) and the interface
  resolves it with the domain's calibrated magnitudes;
* **lexical scope** (designers' words vs. part identifiers): the specification carries the
  domain's lexicon, which the language model sees in its prompt (and the retrieval parser scores).

The **automated domain specification** (``derive_spec``) derives all of this from a domain corpus
(prototype variants and instruction / before / after triples, ``design_dsl_domains.corpus``), in
the spirit of the same group's AutoDSL (Shi et al., ACL 2024), which derives a DSL's syntax and
semantics from a domain corpus:

1. parameters tied across every variant form one quantity (the four leg radii);
2. an affine basis of independent quantities is selected greedily (sizes before placements) and
   every parameter is fitted as an affine function of it by least squares (the dependencies);
3. the lexicon is a multinomial naive-Bayes model of instruction words given the quantity (or
   feature) each corpus edit changed;
4. degree words are the words (uni- and bigrams) whose corpus edits all change a quantity by the
   same relative amount; their magnitude is the median; direction words are scored by their
   smoothed log-odds of going with an increase;
5. the hole feature's value factor (diameter to radius) is the median corpus ratio.

Without the automated specification (``generic_spec``) the same interface runs on a generic
geometry-level specification: every part parameter is its own quantity (no dependencies), the
lexicon is part identifiers plus a domain-independent geometry glossary, and every degree word
means 20%. Assumed (the full text was not reachable): this DSL, this operational mechanism, these
derivation steps and the generic fallback; the paper's own interface is richer (hierarchical
structures, real CAD back ends).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from rayml.agents.design_dsl_kernel import (PARAMS, PLACEMENT, Part, apply_program, hole_count, iou, model_params,
                                               mirror_symmetry)

__all__ = ["DomainSpec", "derive_spec", "generic_spec", "tokens", "numbers", "GLOSSARY", "GENERIC_DIRECTION",
           "GENERIC_DEGREE", "compile_statements", "format_statement", "evaluate", "SUCCESS_TOL"]

SUCCESS_TOL = 0.01     # relative tolerance of every parameter for a task to count as done
PRECISION_TOL = 0.02   # relative tolerance of the intended quantity (parameter precision)
GENERIC_DEGREE = 0.2   # what a generic interface takes every degree word to mean (assumed)
# A domain-independent geometry glossary (parameter letter -> words), shared by the direct
# pipeline and the generic interface.
GLOSSARY = {
    "w": ("width", "wide", "wider", "narrow", "narrower", "length", "long", "longer", "span"),
    "d": ("depth", "deep", "deeper", "shallow", "shallower", "width", "wider"),
    "h": ("height", "tall", "taller", "high", "higher", "low", "lower", "short", "shorter", "thickness", "thick",
          "thicker", "thinner"),
    "r": ("radius", "diameter", "thick", "thicker", "thickness", "thinner", "girth", "fat", "fatter", "slim",
          "slimmer"),
    "x": ("left", "right"), "y": ("front", "back"), "z": ("up", "down", "elevation"),
}
GENERIC_DIRECTION = {w: 1.0 for w in ("increase", "larger", "bigger", "taller", "higher", "wider", "longer", "thicker",
                                       "deeper", "fatter", "chunkier", "sturdier", "more", "raise", "grow")}
GENERIC_DIRECTION.update({w: -1.0 for w in ("reduce", "decrease", "smaller", "shorter", "lower", "narrower",
                                             "thinner", "shallower", "slimmer", "less", "shrink")})
GENERIC_DEGREE_WORDS = ("slightly", "a little", "a bit", "considerably", "much", "a lot")
HOLE_WORDS = ("hole", "drill", "bore", "cut")


def tokens(text: str) -> list[str]:
    """Lower-case word tokens (letters only) of ``text``."""
    return re.findall(r"[a-z]+", str(text).lower())


def numbers(text: str) -> list[float]:
    """The numbers written in ``text``, in order, without repeats."""
    out = []
    for m in re.findall(r"\d+(?:\.\d+)?", str(text)):
        v = float(m)
        if v not in out:
            out.append(v)
    return out


def _grams(text: str) -> list[str]:
    t = tokens(text)
    return t + [f"{a} {b}" for a, b in zip(t, t[1:])]


@dataclass
class DomainSpec:
    """A specification of the interface for one domain (derived, or generic).

    Attributes:
        name: ``"<domain>"`` (derived) or ``"generic"``.
        quantities: ``{quantity name: [parameter keys "part.param"]}`` the DSL can adjust.
        columns: every parameter key the dependency model covers.
        basis: the independent quantities (names), in the order the affine model uses them.
        coef: ``(1 + len(basis), len(columns))`` affine map from the basis to every column.
        lexicon: ``{quantity or "HOLE:<part>": {word: log P(word | label)}}`` plus ``"_prior"``.
        degree: ``{degree word: relative magnitude}``.
        direction: ``{word: log-odds of an increase}``.
        hole_factor: radius per number of a hole instruction.
        holeable: part ids a hole may go through.
        derived: whether it came from ``derive_spec``.
    """

    name: str
    quantities: dict
    columns: list
    basis: list
    coef: np.ndarray | None
    lexicon: dict
    degree: dict
    direction: dict
    hole_factor: float | None
    holeable: list
    derived: bool
    description: dict = field(default_factory=dict)

    def label_scores(self, text: str) -> dict:
        """Naive-Bayes log scores of each label (quantity or hole target) for ``text``."""
        words = _grams(text)
        out = {}
        for label, table in self.lexicon.items():
            if label.startswith("_"):
                continue
            out[label] = self.lexicon["_prior"].get(label, 0.0) + sum(table.get(w, table["_unk"]) for w in words
                                                                       if w in self.lexicon["_vocab"])
        return out

    def prompt_reference(self) -> str:
        """The specification as the language model sees it in its prompt."""
        lines = ["Statements: ADJUST <quantity> TO <number> | ADJUST <quantity> BY <+/-number>% | "
                 "ADJUST <quantity> <+/-degree word> | HOLE <part> <number> | END"]
        for q in self.quantities:
            words = self.description.get(q, "")
            lines.append(f"quantity {q}" + (f" ({words})" if words else ""))
        if self.degree:
            lines.append("degree words: " + ", ".join(f"{w}={m:.0%}" for w, m in sorted(self.degree.items())))
        if self.holeable:
            lines.append("hole targets: " + ", ".join(self.holeable))
        return "\n".join(lines)


def _stem(word: str) -> str:
    return word[:4]


def _labels_of_edit(before: Sequence[Part], after: Sequence[Part], quantities: Mapping[str, list]) -> tuple:
    pb, pa = model_params(before), model_params(after)
    new = [p for p in after if p.id not in {q.id for q in before}]
    if new and new[0].role == "cut":
        host = min((p for p in before if p.role == "add"),
                   key=lambda p: abs(p.x - new[0].x) + abs(p.y - new[0].y) + abs(p.z - new[0].z))
        return f"HOLE:{host.id}", new[0].params.get("r"), None
    changed = [q for q, cols in quantities.items() if abs(pa[cols[0]] - pb[cols[0]]) > 1e-9]
    if len(changed) != 1:
        return None, None, None
    q = changed[0]
    old, newv = pb[quantities[q][0]], pa[quantities[q][0]]
    return q, newv, newv / old - 1.0


def derive_spec(corpus: Mapping) -> DomainSpec:
    """Automated domain specification from a domain corpus (steps 1-5 of the module docstring).

    Args:
        corpus: ``{"domain", "variants": [model, ...], "edits": [{"text", "before", "after"}, ...]}``
            (``design_dsl_domains.corpus``); every variant has the same parts.
    """
    variants = corpus.get("variants") or []
    if len(variants) < 3:
        raise ValueError(f"corpus: need at least 3 variants, got {len(variants)}")
    cols = sorted(model_params(variants[0]))
    X = np.array([[model_params(v)[c] for c in cols] for v in variants])
    # 1. ties and constants
    const = X.std(0) < 1e-9
    groups: dict = {}
    for j, c in enumerate(cols):
        if const[j]:
            continue
        for name, members in groups.items():
            if np.allclose(X[:, cols.index(members[0])], X[:, j], atol=1e-9):
                members.append(c)
                break
        else:
            groups[c] = [c]
    # 2. an affine basis: size quantities before placements, each added if it is not already in the span
    order = sorted(groups, key=lambda g: (g.split(".")[1] in PLACEMENT, g))
    basis: list = []
    A = np.ones((len(X), 1))
    for g in order:
        y = X[:, cols.index(g)]
        resid = y - A @ np.linalg.lstsq(A, y, rcond=None)[0]
        if np.abs(resid).max() > 1e-6 * max(1.0, np.abs(y).max()):
            basis.append(g)
            A = np.column_stack([A, y])
    coef = np.linalg.lstsq(A, X, rcond=None)[0]
    quantities = {g: groups[g] for g in basis}
    # 3-5. lexicon, degree words, direction words, hole factor from the corpus edits
    label_words: dict = defaultdict(Counter)
    ratios: dict = defaultdict(list)
    signs: dict = defaultdict(lambda: [0, 0])
    hole_ratios = []
    holeable = set()
    for e in corpus.get("edits", []):
        label, value, rel = _labels_of_edit(e["before"], e["after"], quantities)
        if label is None:
            continue
        grams = _grams(e["text"])
        label_words[label].update(grams)
        if label.startswith("HOLE:"):
            holeable.add(label[5:])
            nums = numbers(e["text"])
            if nums and value:
                hole_ratios.append(value / nums[0])
            continue
        for w in set(grams):
            signs[w][0 if rel > 0 else 1] += 1
            ratios[w].append(abs(rel) if not numbers(e["text"]) else math.nan)
    vocab = set().union(*label_words.values()) if label_words else set()
    total = sum(sum(c.values()) for c in label_words.values())
    lexicon: dict = {"_prior": {}, "_vocab": vocab}
    for label, counts in label_words.items():
        n = sum(counts.values())
        lexicon["_prior"][label] = math.log(n / total)
        denom = n + 0.1 * len(vocab)
        lexicon[label] = {w: math.log((counts[w] + 0.1) / denom) for w in counts}
        lexicon[label]["_unk"] = math.log(0.1 / denom)
    for label in label_words:
        if label.startswith("HOLE:"):
            for w in label_words[label]:
                ratios[w].append(math.nan)
    # a degree word never comes with a number and always with the same relative change
    degree = {w: float(np.median(r)) for w, r in ratios.items()
              if len(r) >= 3 and not np.isnan(r).any() and np.ptp(r) < 1e-6 and np.median(r) > 0}
    degree = {w: m for w, m in degree.items()
              if not any(v != w and v in w.split() and abs(m - degree[v]) < 1e-9 for v in degree)}
    # direction words: always with an increase, or always with a decrease, in at least 3 edits
    direction = {w: math.log((u + 0.5) / (d + 0.5)) for w, (u, d) in signs.items() if u + d >= 3 and min(u, d) == 0}
    description = {}
    for q in quantities:
        top = sorted(((c, w) for w, c in label_words.get(q, Counter()).items() if " " not in w and len(w) > 3),
                     reverse=True)
        description[q] = ", ".join(w for _, w in top[:4])
    return DomainSpec(name=str(corpus.get("domain", "domain")), quantities=quantities, columns=cols, basis=basis,
                      coef=coef, lexicon=lexicon, degree=degree, direction=direction,
                      hole_factor=float(np.median(hole_ratios)) if hole_ratios else None,
                      holeable=sorted(holeable), derived=True, description=description)


def generic_spec(model: Sequence[Part]) -> DomainSpec:
    """The interface without automated domain specification: part-level quantities, no dependencies,
    a lexicon of part identifiers and the generic glossary, every degree word = ``GENERIC_DEGREE``."""
    quantities = {k: [k] for k in model_params(model)}
    vocab: set = set()
    lexicon: dict = {"_prior": {}, "_vocab": vocab}
    for q in quantities:
        pid, param = q.split(".")
        words = [_stem(w) for w in tokens(pid.replace("_", " "))] + [_stem(w) for w in GLOSSARY.get(param, ())]
        vocab.update(words)
        lexicon[q] = {w: 0.0 for w in words}
        lexicon[q]["_unk"] = -3.0
    for p in model:
        if p.role == "add" and p.kind == "box":
            label = f"HOLE:{p.id}"
            words = [_stem(w) for w in tokens(p.id.replace("_", " "))] + [_stem(w) for w in HOLE_WORDS]
            vocab.update(words)
            lexicon[label] = {w: 0.0 for w in words}
            lexicon[label]["_unk"] = -3.0
    lexicon["_stemmed"] = True
    description = {q: ", ".join(GLOSSARY.get(q.split(".")[1], ())[:4]) for q in quantities}
    return DomainSpec(name="generic", quantities=quantities, columns=list(quantities), basis=list(quantities),
                      coef=None, lexicon=lexicon, degree={w: GENERIC_DEGREE for w in GENERIC_DEGREE_WORDS},
                      direction=dict(GENERIC_DIRECTION), hole_factor=None,
                      holeable=[p.id for p in model if p.role == "add" and p.kind == "box"], derived=False,
                      description=description)


def _generic_scores(spec: DomainSpec, text: str) -> dict:
    words = [_stem(w) for w in tokens(text)]
    out = {}
    for label, table in spec.lexicon.items():
        if label.startswith("_"):
            continue
        out[label] = float(sum(1 for w in words if w in table))
    return out


def label_scores(spec: DomainSpec, text: str) -> dict:
    """Lexical scores of the spec's labels for ``text`` (naive Bayes when derived, overlap when generic)."""
    return spec.label_scores(text) if spec.derived else _generic_scores(spec, text)


DomainSpec.scores = label_scores  # type: ignore[attr-defined]


def format_statement(st: tuple) -> str:
    """One DSL statement as text: ``("ADJUST", q, "TO 72")`` -> ``"ADJUST q TO 72"``."""
    return " ".join(str(s) for s in st)


def _value(spec: DomainSpec, old: float, form: str) -> float | None:
    form = form.strip()
    if m := re.fullmatch(r"TO (-?\d+(?:\.\d+)?)", form):
        return float(m.group(1))
    if m := re.fullmatch(r"BY ([+-]\d+(?:\.\d+)?)%", form):
        return old * (1 + float(m.group(1)) / 100)
    if m := re.fullmatch(r"([+-])(.+)", form):
        mag = spec.degree.get(m.group(2))
        if mag is None:
            return None
        return old * (1 + mag) if m.group(1) == "+" else old * (1 - mag)
    return None


def compile_statements(spec: DomainSpec, model: Sequence[Part], statements: Sequence[tuple]) -> list[str]:
    """The interface's operational mechanism: DSL statements -> modelling commands.

    ``("ADJUST", quantity, value form)`` sets the quantity and, for a derived specification, every
    parameter that depends on it (the affine dependency model evaluated at the new basis);
    ``("HOLE", part, number)`` adds a centred through-cut (radius = ``hole_factor`` x number for a
    derived specification, the number itself for the generic one). Statements that do not resolve
    compile to nothing.
    """
    commands: list[str] = []
    parts = {p.id: p for p in model}
    values = model_params(model)
    n_holes = sum(1 for p in model if p.role == "cut" and p.id.startswith("hole_"))
    for st in statements:
        if not st or st[0] == "END":
            break
        if st[0] == "HOLE" and len(st) == 3 and st[1] in parts:
            host = parts[st[1]]
            r = float(st[2]) * (spec.hole_factor if spec.hole_factor else 1.0)
            n_holes += 1
            commands.append(f"ADD cut cyl hole_{n_holes} r={r:.6g} h={2 * host.params['h']:.6g} "
                            f"AT {host.x:.6g} {host.y:.6g} {host.z:.6g}")
            continue
        if st[0] != "ADJUST" or len(st) != 3 or st[1] not in spec.quantities:
            continue
        q = st[1]
        cols = spec.quantities[q]
        if cols[0] not in values:
            continue
        new = _value(spec, values[cols[0]], st[2])
        if new is None or not math.isfinite(new) or (q.split(".")[1] not in PLACEMENT and new <= 0):
            continue
        if spec.coef is None:
            changes = {c: new for c in cols}
        else:
            basis = np.array([1.0] + [values[spec.quantities[b][0]] for b in spec.basis])
            basis[1 + spec.basis.index(q)] = new
            pred = basis @ spec.coef
            changes = {c: float(v) for c, v in zip(spec.columns, pred)}
        for c, v in changes.items():
            if c in values and abs(values[c] - v) > 1e-9:
                commands.append(f"SET {c} = {v:.6g}")
                values[c] = v
    return commands


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-9)


def collateral(result: Sequence[Part], target: Sequence[Part], before: Sequence[Part]) -> float:
    """Collateral edits: the fraction of the prototype's parameters that the instruction leaves
    alone (equal in ``before`` and ``target``) but ``result`` changed by more than ``SUCCESS_TOL``
    (or removed) -- targeted control means touching only what was asked for."""
    pb, pt, pr = model_params(before), model_params(target), model_params(result)
    fixed = [c for c in pb if c in pt and (abs(pb[c] - pt[c]) < 1e-9)]
    if not fixed:
        return 0.0
    moved = [c not in pr or (_rel(pr[c], pb[c]) > SUCCESS_TOL and abs(pr[c] - pb[c]) >= 1e-6) for c in fixed]
    return float(np.mean(moved))


def evaluate(result: Sequence[Part], target: Sequence[Part], before: Sequence[Part], intent: Mapping,
             *, res: int | None = None, geometry: bool = True) -> dict:
    """Checkable targets of one episode: success (every parameter within ``SUCCESS_TOL`` and the
    same parts and holes), the intended quantity's relative error (parameter precision), voxel IoU,
    volume error, bounding-box error, hole counts and mirror symmetry (``geometry=False``: the
    voxel metrics are NaN, not computed)."""
    from rayml.agents.design_dsl_kernel import bbox, volume

    def key(m):
        adds = {p.id: p for p in m if p.role == "add" or not p.id.startswith("hole_")}
        cuts = sorted((round(p.x, 3), round(p.y, 3), round(p.z, 3), p.params.get("r", 0)) for p in m
                      if p.role == "cut" and p.id.startswith("hole_"))
        return adds, cuts

    ra, rc = key(result)
    ta, tc = key(target)
    same_parts = set(ra) == set(ta) and len(rc) == len(tc)
    ok = same_parts and all(_rel(ra[i].get(k), ta[i].get(k)) <= SUCCESS_TOL or abs(ra[i].get(k) - ta[i].get(k)) < 1e-6
                            for i in ta for k in PARAMS[ta[i].kind] + PLACEMENT)
    ok = ok and all(_rel(a[3], b[3]) <= SUCCESS_TOL and max(abs(a[j] - b[j]) for j in range(3)) < 1e-3
                    for a, b in zip(rc, tc))
    if "attr" in intent:
        pb, pt, pr = model_params(before), model_params(target), model_params(result)
        cols = [c for c in pt if abs(pt[c] - intent["value"]) < 1e-9 and abs(pb.get(c, math.inf) - pt[c]) > 1e-9]
        err = float(np.mean([_rel(pr.get(c, pb[c]), pt[c]) for c in cols])) if cols else 1.0
    else:
        want = intent["diameter"] / 2
        err = min([_rel(c[3], want) for c in rc[len(key(before)[1]):]] or [1.0])
    out = {"success": float(ok), "param_error": float(min(err, 1.0)), "precise": float(err <= PRECISION_TOL),
           "holes_ok": float(hole_count(result) == hole_count(target)), "collateral": collateral(result, target, before)}
    if not geometry:
        return {**out, "iou": math.nan, "volume_error": math.nan, "bbox_error": math.nan, "symmetry_ok": math.nan}
    sym_t = mirror_symmetry(target, res)
    sym_r = mirror_symmetry(result, res)
    bt, br = bbox(target), bbox(result)
    vt = volume(target, res)
    return {**out, "iou": iou(result, target, res), "volume_error": _rel(volume(result, res), vt),
            "bbox_error": float(np.abs(br - bt).max() / max(np.abs(bt[1] - bt[0]).max(), 1e-9)),
            "symmetry_ok": float((sym_r >= 0.97) == (sym_t >= 0.97))}


def apply_statements(spec: DomainSpec, model: Sequence[Part], statements: Sequence[tuple]):
    """Compile and run DSL statements; returns ``(model, commands, failed commands)``."""
    cmds = compile_statements(spec, model, statements)
    out, failed = apply_program(model, cmds)
    return out, cmds, failed


__all__ += ["apply_statements", "label_scores", "PRECISION_TOL", "collateral"]
