"""Product domains and the design-instruction suite of the design-DSL reproduction.

Each domain is a parametric prototype (a function of a few designer-level quantities returning
the parts of ``design_dsl_kernel``) plus the words designers use for it. The suite draws
instructions from templates with paraphrases (component and attribute synonyms, comparatives,
degree words) in four kinds, each with a checkable target model:

* ``absolute``: "set the height of the legs to 72" (target: a parameter value);
* ``percent``:  "make the tabletop 20% wider" (target: a relative change);
* ``degree``:   "make the legs slightly thicker" (target: the domain's convention for the degree
  word, ``DEGREES``: a property of the generated suite, stated here and in the docs);
* ``hole``:     "drill a 6 cm hole through the tabletop" (target: one more through-hole, centred).

The same generator also writes the *domain corpus* the automated domain specification is derived
from (``corpus``): prototype variants, and instruction / before / after model triples on seeds
kept apart from the test instructions. Assumed throughout: these three domains, their parameter
ranges and the paraphrase pools (the paper's suite covers real product-design domains).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from rayml.agents.design_dsl_kernel import Part

__all__ = ["Domain", "DOMAINS", "DEGREES", "KINDS_OF_INSTRUCTION", "PHRASINGS", "Instruction", "instruction_suite", "corpus",
           "target_model"]

# The suite's convention for degree words (relative change). Assumed: one convention for all domains.
DEGREES = {"slightly": 0.05, "a little": 0.1, "considerably": 0.3, "much": 0.5}
KINDS_OF_INSTRUCTION = ("absolute", "percent", "degree", "hole")


@dataclass(frozen=True)
class Attr:
    """A designer-level quantity: its parameter name in ``build``, its words, and the component."""

    name: str
    component: str
    nouns: tuple
    more: tuple
    less: tuple
    lo: float
    hi: float


@dataclass(frozen=True)
class Domain:
    name: str
    build: Callable[[Mapping[str, float]], tuple]
    attrs: tuple
    component_words: Mapping[str, tuple]
    holeable: Mapping[str, str]   # component word key -> part id the hole goes through

    def sample(self, rng: np.random.Generator) -> dict:
        return {a.name: float(np.round(rng.uniform(a.lo, a.hi), 1)) for a in self.attrs}


def _table(q):
    L, W, T, H, R = q["length"], q["width"], q["top_t"], q["leg_h"], q["leg_r"]
    parts = [Part("top", "box", {"w": L, "d": W, "h": T}, 0.0, 0.0, H + T / 2)]
    for sx, sy, tag in ((1, 1, "fr"), (-1, 1, "fl"), (1, -1, "br"), (-1, -1, "bl")):
        parts.append(Part(f"leg_{tag}", "cyl", {"r": R, "h": H}, sx * (L / 2 - 6), sy * (W / 2 - 6), H / 2))
    return tuple(parts)


def _mug(q):
    R, H, ht, hh = q["body_r"], q["body_h"], q["handle_t"], q["handle_h"]
    return (Part("body", "cyl", {"r": R, "h": H}, 0.0, 0.0, H / 2),
            Part("cavity", "cyl", {"r": R - 0.5, "h": H - 0.6}, 0.0, 0.0, 0.6 + (H - 0.6) / 2, "cut"),
            Part("handle", "box", {"w": 2.5, "d": ht, "h": hh}, R + 1.0, 0.0, H / 2))


def _shelf(q):
    Hs, D, t = q["height"], q["depth"], q["board_t"]
    Wd = 90.0
    parts = [Part("side_l", "box", {"w": t, "d": D, "h": Hs}, -(Wd / 2 - t / 2), 0.0, Hs / 2),
             Part("side_r", "box", {"w": t, "d": D, "h": Hs}, Wd / 2 - t / 2, 0.0, Hs / 2)]
    for i, z in enumerate((t / 2, Hs / 2, Hs - t / 2)):
        parts.append(Part(f"board_{i + 1}", "box", {"w": Wd - 2 * t, "d": D, "h": t}, 0.0, 0.0, z))
    return tuple(parts)


DOMAINS = {
    "table": Domain(
        "table", _table,
        (Attr("length", "top", ("length", "span"), ("longer",), ("shorter",), 90, 160),
         Attr("width", "top", ("width", "depth"), ("wider", "deeper"), ("narrower", "shallower"), 50, 90),
         Attr("top_t", "top", ("thickness",), ("thicker",), ("thinner",), 2, 6),
         Attr("leg_h", "legs", ("height", "length"), ("taller", "longer"), ("shorter",), 55, 80),
         Attr("leg_r", "legs", ("thickness", "girth"), ("thicker", "chunkier", "sturdier"), ("thinner", "slimmer"),
              1.5, 4)),
        {"top": ("top", "tabletop", "table top", "desk surface", "surface"),
         "legs": ("legs", "supports", "table legs", "feet")},
        {"top": "top"}),
    "mug": Domain(
        "mug", _mug,
        (Attr("body_r", "body", ("radius", "girth"), ("wider", "fatter"), ("narrower", "slimmer"), 3, 6),
         Attr("body_h", "body", ("height",), ("taller", "higher"), ("shorter", "lower"), 8, 14),
         Attr("handle_t", "handle", ("thickness",), ("thicker", "chunkier"), ("thinner", "slimmer"), 0.8, 2),
         Attr("handle_h", "handle", ("height", "size"), ("taller", "bigger"), ("shorter", "smaller"), 3, 7)),
        {"body": ("mug", "cup", "mug body", "vessel"), "handle": ("handle", "grip", "ear")},
        {}),
    "shelf": Domain(
        "shelf", _shelf,
        (Attr("height", "frame", ("height",), ("taller", "higher"), ("shorter", "lower"), 80, 180),
         Attr("depth", "frame", ("depth",), ("deeper",), ("shallower",), 20, 40),
         Attr("board_t", "boards", ("thickness",), ("thicker", "sturdier"), ("thinner", "slimmer"), 1.5, 3)),
        {"frame": ("bookcase", "shelf unit", "shelving", "bookshelf"),
         "boards": ("boards", "panels", "planks", "shelves")},
        {"boards": "board_2"}),
}


@dataclass(frozen=True)
class Instruction:
    """One design instruction with the hidden target (``intent``) it was generated from."""

    uid: str
    domain: str
    kind: str
    text: str
    params: Mapping[str, float]       # the prototype's designer-level parameters before the edit
    intent: Mapping[str, object]      # {"attr": name, "value": new value} or {"hole": part, "diameter": d}


_ABS = ("Set the {noun} of the {comp} to {v}.", "I want the {comp} {noun} to be {v}.",
        "Change the {comp} {noun} to {v} cm.", "Please make the {noun} of the {comp} exactly {v}.")
_PCT = ("Make the {comp} {adj} by {p}%.", "The {comp} should be {p} percent {adj}.",
        "{Verb} the {noun} of the {comp} by {p}%.")
_DEG = ("Make the {comp} {deg} {adj}.", "The {comp} could be {deg} {adj}.", "I'd like the {comp} {deg} {adj}.")
_HOLE = ("Drill a hole of {d} cm diameter through the {comp}.", "Add a {d} cm wide hole in the middle of the {comp}.",
         "Cut a round hole, diameter {d}, through the center of the {comp}.")


# the corpus's phrasings: held out from the test instructions' templates above (the same domain vocabulary of
# nouns, adjectives, degree words and units, different sentence frames), so a specification derived from the
# corpus is not fitted to the sentences it is tested on
_CORPUS = {
    "absolute": ("The {noun} of the {comp} needs to become {v}.", "Could you change the {noun} on the {comp} to {v}?",
                 "Let the {comp} have a {noun} of {v} cm.", "We agreed on {v} for the {comp} {noun}."),
    "percent": ("Please make the {comp} {p}% {adj}.", "We need the {comp} {adj}, by about {p} percent.",
                "{Verb} the {comp} {noun} {p}% please."),
    "degree": ("Can the {comp} get {deg} {adj}?", "Make it so the {comp} is {deg} {adj}.",
               "The {comp} should end up {deg} {adj}."),
    "hole": ("Put a {d} cm hole through the {comp}.", "The {comp} needs a hole with a diameter of {d} cm.",
             "Bore a {d} cm diameter opening in the {comp}."),
}
PHRASINGS = ("test", "corpus")


def _fmt(v: float) -> str:
    return f"{v:g}"


def _make(domain: Domain, kind: str, rng: np.random.Generator, uid: str, phrasing: str = "test") -> Instruction:
    params = domain.sample(rng)
    frames = (dict(absolute=_ABS, percent=_PCT, degree=_DEG, hole=_HOLE) if phrasing == "test" else _CORPUS)
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    if kind == "hole":
        comp = pick(sorted(domain.holeable))
        d = float(pick((2, 3, 4, 5, 6, 8)))
        text = pick(frames["hole"]).format(d=_fmt(d), comp=pick(domain.component_words[comp]))
        return Instruction(uid, domain.name, kind, text, params, {"hole": domain.holeable[comp], "diameter": d})
    attr = pick(domain.attrs)
    comp = pick(domain.component_words[attr.component])
    old = params[attr.name]
    if kind == "absolute":
        new = float(np.round(old * rng.uniform(0.7, 1.4), 1))
        if abs(new - old) < 0.1:
            new = old + 1.0
        text = pick(frames["absolute"]).format(noun=pick(attr.nouns), comp=comp, v=_fmt(new))
    elif kind == "percent":
        p = float(pick((10, 15, 20, 25, 30, 40, 50)))
        up = bool(rng.integers(2))
        new = old * (1 + p / 100) if up else old * (1 - p / 100)
        text = pick(frames["percent"]).format(comp=comp, adj=pick(attr.more if up else attr.less), p=_fmt(p),
                                 noun=pick(attr.nouns), Verb="Increase" if up else "Reduce")
    elif kind == "degree":
        word = pick(sorted(DEGREES))
        up = bool(rng.integers(2))
        new = old * (1 + DEGREES[word]) if up else old * (1 - DEGREES[word])
        text = pick(frames["degree"]).format(comp=comp, deg=word, adj=pick(attr.more if up else attr.less))
    else:
        raise ValueError(f"kind must be one of {KINDS_OF_INSTRUCTION}, got {kind!r}")
    return Instruction(uid, domain.name, kind, text, params, {"attr": attr.name, "value": float(new)})


def target_model(ins: Instruction) -> tuple:
    """The model the instruction asks for (built from the domain's parametric prototype)."""
    dom = DOMAINS[ins.domain]
    if "attr" in ins.intent:
        return dom.build({**ins.params, ins.intent["attr"]: ins.intent["value"]})
    parts = dom.build(ins.params)
    host = next(p for p in parts if p.id == ins.intent["hole"])
    hole = Part("hole_1", "cyl", {"r": ins.intent["diameter"] / 2, "h": 2 * host.params["h"]}, host.x, host.y,
                host.z, "cut")
    return parts + (hole,)


def instruction_suite(n_per_cell: int, seed: int, *, domains: Sequence[str] | None = None,
                      kinds: Sequence[str] = KINDS_OF_INSTRUCTION, prefix: str = "i",
                      phrasing: str = "test") -> list[Instruction]:
    """``n_per_cell`` instructions per (domain, kind) cell (hole instructions only where the domain
    has a holeable component), each drawn from its own spawned seed; ``phrasing`` ``"test"`` (the
    instruction templates) or ``"corpus"`` (the corpus's held-out sentence frames)."""
    if n_per_cell < 1:
        raise ValueError(f"n_per_cell must be >= 1, got {n_per_cell}")
    if phrasing not in PHRASINGS:
        raise ValueError(f"phrasing must be one of {PHRASINGS}, got {phrasing!r}")
    domains = list(domains or DOMAINS)
    for d in domains:
        if d not in DOMAINS:
            raise ValueError(f"domains: unknown domain {d!r} (known: {sorted(DOMAINS)})")
    for k in kinds:
        if k not in KINDS_OF_INSTRUCTION:
            raise ValueError(f"kinds: unknown kind {k!r} (known: {KINDS_OF_INSTRUCTION})")
    cells = [(d, k) for d in domains for k in kinds if k != "hole" or DOMAINS[d].holeable]
    children = np.random.SeedSequence(seed).spawn(len(cells) * n_per_cell)
    out = []
    for c, (d, k) in enumerate(cells):
        for j in range(n_per_cell):
            rng = np.random.default_rng(children[c * n_per_cell + j])
            out.append(_make(DOMAINS[d], k, rng, f"{prefix}-{d}-{k}-{j}", phrasing))
    return out


def corpus(domain: str, n_variants: int, n_edits: int, seed: int) -> dict:
    """The domain corpus of the automated domain specification: ``variants`` (prototype programs
    with sampled parameters) and ``edits`` (instruction text, model before, model after), the edit
    texts in the corpus's own sentence frames (held out from the test instructions' templates)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain: unknown {domain!r}")
    dom = DOMAINS[domain]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    variants = [dom.build(dom.sample(rng)) for _ in range(n_variants)]
    edits = []
    for ins in instruction_suite(max(1, n_edits // len(KINDS_OF_INSTRUCTION)), seed + 1_000_003,
                                 domains=[domain], prefix="corpus", phrasing="corpus"):
        edits.append({"text": ins.text, "before": dom.build(ins.params), "after": target_model(ins)})
    return {"domain": domain, "variants": variants, "edits": edits}
