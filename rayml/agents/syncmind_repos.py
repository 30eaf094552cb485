"""Source repositories for SyncBench-style out-of-sync scenarios (SyncMind, ICML 2025).

SyncBench (Guo et al., "SyncMind: Measuring Agent Out-of-Sync Recovery in Collaborative Software
Engineering", ICML 2025, Sec. 3 and the authors' ``syncbench/constructor``) traces the commit
history of each function of a Python repository with unit tests and restores an older version of
one function into the newest repository, keeping the instance when the repository's tests fail
with the old version and pass with the current one (fail-to-pass).

The paper mines 21 GitHub repositories. Here the repositories are of two kinds, both shipped as
plain data (``{path: text}`` per version) so that nothing node-local crosses a Ray task:

* ``generated_repository(seed)``: a small package assembled from *components* (a library module,
  a client module that calls it, and the component's tests), each with three versions in which a
  collaborator changes an API (a parameter renamed or added, a tuple return turned into a dict, a
  function renamed, a boundary made inclusive ...) and updates its callers and tests in the same
  commit. The seed picks the components, their constants and the order in which the components'
  versions are committed (so commits of different components interleave).
* ``stdlib_repository(module, seed)``: the source of an installed pure-Python stdlib module
  (``colorsys``, ``fnmatch``, ``shlex``, ``textwrap``) as the current version, with tests generated
  from its behaviour (inputs drawn from the seed, expected values computed by the installed module).
  These modules ship no history, so the older version is synthesised: one function gets an edit of
  the kind real histories contain (a comparison's boundary, a constant, an arithmetic or boolean
  operator). Assumed: such edits stand in for the real older versions, which are not installed.
"""

from __future__ import annotations

import ast
import random
from string import Template
from typing import Mapping

__all__ = ["COMPONENTS", "STDLIB_MODULES", "generated_repository", "stdlib_repository", "mutate_function"]

# ----------------------------------------------------------------------------------------------
# Components of generated repositories: three versions each ({path: template}); ``$NAME`` fields
# are filled from the component's seeded constants.

_UNITS = [
    {
        "pkg/units.py": '''FACTORS = {"m": 1.0, "ft": 0.3048, "in": 0.0254, "yd": 0.9144}


def to_metres(value, unit):
    """Convert ``value`` in ``unit`` to metres."""
    return value * FACTORS[unit]
''',
        "pkg/route.py": '''from pkg.units import to_metres


def leg_length(value, unit):
    return to_metres(value, unit)


def route_length(legs):
    return sum(leg_length(v, u) for v, u in legs)
''',
        "tests/test_units.py": '''from pkg.units import to_metres
from pkg.route import route_length


def test_feet():
    got = to_metres($A, "ft")
    assert abs(got - $A * 0.3048) < 1e-9, (got, $A * 0.3048)


def test_route():
    got = route_length([(1, "m"), ($A, "in")])
    assert abs(got - (1 + $A * 0.0254)) < 1e-9, got
''',
    },
    {
        "pkg/units.py": '''FACTORS = {"m": 1.0, "ft": 0.3048, "in": 0.0254, "yd": 0.9144}


def to_metres(value, from_unit="m"):
    """Convert ``value`` in ``from_unit`` to metres."""
    return value * FACTORS[from_unit]
''',
        "pkg/route.py": '''from pkg.units import to_metres


def leg_length(value, unit):
    return to_metres(value, from_unit=unit)


def route_length(legs):
    return sum(leg_length(v, u) for v, u in legs)
''',
        "tests/test_units.py": '''from pkg.units import to_metres
from pkg.route import route_length


def test_feet():
    got = to_metres($A, from_unit="ft")
    assert abs(got - $A * 0.3048) < 1e-9, (got, $A * 0.3048)


def test_default_unit():
    assert to_metres($A) == $A


def test_route():
    got = route_length([(1, "m"), ($A, "in")])
    assert abs(got - (1 + $A * 0.0254)) < 1e-9, got
''',
    },
    {
        "pkg/units.py": '''FACTORS = {"m": 1.0, "ft": 0.3048, "in": 0.0254, "yd": 0.9144}


def to_metres(value, from_unit="m", precision=None):
    """Convert ``value`` in ``from_unit`` to metres, rounded to ``precision`` digits if given."""
    out = value * FACTORS[from_unit]
    return out if precision is None else round(out, precision)
''',
        "pkg/route.py": '''from pkg.units import to_metres

PRECISION = $P


def leg_length(value, unit):
    return to_metres(value, from_unit=unit, precision=PRECISION)


def route_length(legs):
    return round(sum(leg_length(v, u) for v, u in legs), PRECISION)
''',
        "tests/test_units.py": '''from pkg.units import to_metres
from pkg.route import route_length


def test_feet():
    got = to_metres($A, from_unit="ft")
    assert abs(got - $A * 0.3048) < 1e-9, (got, $A * 0.3048)


def test_default_unit():
    assert to_metres($A) == $A


def test_precision():
    got = to_metres(1.23456789, from_unit="yd", precision=$P)
    assert got == round(1.23456789 * 0.9144, $P), got


def test_route():
    got = route_length([(1.23456789, "ft"), ($A, "in")])
    want = round(round(1.23456789 * 0.3048, $P) + round($A * 0.0254, $P), $P)
    assert got == want, (got, want)
''',
    },
]

_STATS = [
    {
        "pkg/stats.py": '''def summarize(xs):
    """Mean and spread of ``xs``."""
    n = len(xs)
    mean = sum(xs) / n
    spread = max(xs) - min(xs)
    return mean, spread
''',
        "pkg/report.py": '''from pkg.stats import summarize


def report(xs):
    s = summarize(xs)
    return "mean=%.${D}f spread=%.${D}f" % (s[0], s[1])
''',
        "tests/test_stats.py": '''from pkg.stats import summarize
from pkg.report import report


def test_summary():
    got = summarize([1.0, $B, 3.0])
    assert got == ((4.0 + $B) / 3, max(3.0, $B) - min(1.0, $B)), got


def test_report():
    got = report([1.0, 3.0])
    assert got == "mean=%.${D}f spread=%.${D}f" % (2.0, 2.0), got
''',
    },
    {
        "pkg/stats.py": '''def summarize(xs):
    """Mean and spread of ``xs`` by name."""
    n = len(xs)
    mean = sum(xs) / n
    spread = max(xs) - min(xs)
    return {"mean": mean, "spread": spread}
''',
        "pkg/report.py": '''from pkg.stats import summarize


def report(xs):
    s = summarize(xs)
    return "mean=%.${D}f spread=%.${D}f" % (s["mean"], s["spread"])
''',
        "tests/test_stats.py": '''from pkg.stats import summarize
from pkg.report import report


def test_summary():
    got = summarize([1.0, $B, 3.0])
    assert got["mean"] == (4.0 + $B) / 3, got


def test_report():
    got = report([1.0, 3.0])
    assert got == "mean=%.${D}f spread=%.${D}f" % (2.0, 2.0), got
''',
    },
    {
        "pkg/stats.py": '''def summarize(xs):
    """Count, mean and standard deviation of ``xs`` by name."""
    n = len(xs)
    mean = sum(xs) / n
    spread = (sum((x - mean) ** 2 for x in xs) / n) ** 0.5
    return {"n": n, "mean": mean, "spread": spread}
''',
        "pkg/report.py": '''from pkg.stats import summarize


def report(xs):
    s = summarize(xs)
    return "n=%d mean=%.${D}f spread=%.${D}f" % (s["n"], s["mean"], s["spread"])
''',
        "tests/test_stats.py": '''from pkg.stats import summarize
from pkg.report import report


def test_summary():
    got = summarize([1.0, $B, 3.0])
    assert got["n"] == 3 and got["mean"] == (4.0 + $B) / 3, got


def test_spread():
    got = summarize([1.0, 3.0])["spread"]
    assert abs(got - 1.0) < 1e-12, got


def test_report():
    got = report([1.0, 3.0])
    assert got == "n=2 mean=%.${D}f spread=%.${D}f" % (2.0, 1.0), got
''',
    },
]

_SLUG = [
    {
        "pkg/slug.py": '''def slugify(title):
    """A URL slug of ``title``."""
    return "_".join(title.lower().split())
''',
        "pkg/urls.py": '''from pkg.slug import slugify

BASE = "$BASE"


def make_url(title):
    return BASE + "/" + slugify(title)
''',
        "tests/test_slug.py": '''from pkg.slug import slugify
from pkg.urls import make_url


def test_slug():
    got = slugify("Hello $WORD World")
    assert got == "hello_${LWORD}_world", got


def test_url():
    got = make_url("A B")
    assert got == "$BASE/a_b", got
''',
    },
    {
        "pkg/slug.py": '''def slugify(title, sep="-"):
    """A URL slug of ``title`` joined by ``sep``."""
    return sep.join(title.lower().split())
''',
        "pkg/urls.py": '''from pkg.slug import slugify

BASE = "$BASE"


def make_url(title):
    return BASE + "/" + slugify(title)
''',
        "tests/test_slug.py": '''from pkg.slug import slugify
from pkg.urls import make_url


def test_slug():
    got = slugify("Hello $WORD World")
    assert got == "hello-$LWORD-world", got


def test_sep():
    assert slugify("a b", sep="+") == "a+b"


def test_url():
    got = make_url("A B")
    assert got == "$BASE/a-b", got
''',
    },
    {
        "pkg/slug.py": '''def slugify(title, sep="-"):
    """A URL slug of ``title``: lower-case alphanumeric words joined by ``sep``."""
    words = ["".join(ch for ch in w if ch.isalnum()) for w in title.lower().split()]
    return sep.join(w for w in words if w)
''',
        "pkg/urls.py": '''from pkg.slug import slugify

BASE = "$BASE"


def make_url(title):
    return BASE + "/posts/" + slugify(title) + "/"
''',
        "tests/test_slug.py": '''from pkg.slug import slugify
from pkg.urls import make_url


def test_slug():
    got = slugify("Hello, $WORD World!")
    assert got == "hello-$LWORD-world", got


def test_sep():
    assert slugify("a b", sep="+") == "a+b"


def test_url():
    got = make_url("A B")
    assert got == "$BASE/posts/a-b/", got
''',
    },
]

_PRICING = [
    {
        "pkg/pricing.py": '''TAX = $TAX


def with_tax(price):
    """``price`` with tax."""
    return round(price * (1 + TAX), 2)
''',
        "pkg/invoice.py": '''from pkg import pricing


def invoice_total(items):
    return round(sum(pricing.with_tax(p) * q for p, q in items), 2)
''',
        "tests/test_pricing.py": '''from pkg.pricing import with_tax
from pkg.invoice import invoice_total


def test_tax():
    got = with_tax(100.0)
    assert got == round(100.0 * (1 + $TAX), 2), got


def test_invoice():
    got = invoice_total([(10.0, 2), (5.0, 1)])
    assert got == round(2 * round(10.0 * (1 + $TAX), 2) + round(5.0 * (1 + $TAX), 2), 2), got
''',
    },
    {
        "pkg/pricing.py": '''TAX = $TAX


def gross(price, rate=TAX):
    """``price`` with tax at ``rate``."""
    return round(price * (1 + rate), 2)
''',
        "pkg/invoice.py": '''from pkg import pricing


def invoice_total(items):
    return round(sum(pricing.gross(p) * q for p, q in items), 2)
''',
        "tests/test_pricing.py": '''from pkg.pricing import gross
from pkg.invoice import invoice_total


def test_tax():
    got = gross(100.0)
    assert got == round(100.0 * (1 + $TAX), 2), got


def test_rate():
    assert gross(100.0, rate=0.5) == 150.0


def test_invoice():
    got = invoice_total([(10.0, 2), (5.0, 1)])
    assert got == round(2 * round(10.0 * (1 + $TAX), 2) + round(5.0 * (1 + $TAX), 2), 2), got
''',
    },
    {
        "pkg/pricing.py": '''TAX = $TAX


def gross(price, rate=TAX, discount=0.0):
    """``price`` less ``discount`` (a fraction), with tax at ``rate``."""
    return round(price * (1 - discount) * (1 + rate), 2)
''',
        "pkg/invoice.py": '''from pkg import pricing


def invoice_total(items, discount=0.0):
    return round(sum(pricing.gross(p, discount=discount) * q for p, q in items), 2)
''',
        "tests/test_pricing.py": '''from pkg.pricing import gross
from pkg.invoice import invoice_total


def test_tax():
    got = gross(100.0)
    assert got == round(100.0 * (1 + $TAX), 2), got


def test_discount():
    got = gross(100.0, rate=0.5, discount=$DISC)
    assert got == round(100.0 * (1 - $DISC) * 1.5, 2), got


def test_invoice():
    got = invoice_total([(10.0, 2), (5.0, 1)], discount=$DISC)
    want = round(2 * round(10.0 * (1 - $DISC) * (1 + $TAX), 2) + round(5.0 * (1 - $DISC) * (1 + $TAX), 2), 2)
    assert got == want, (got, want)
''',
    },
]

_SHAPES = [
    {
        "pkg/shapes.py": '''import math


def area(kind, *dims):
    """Area of a ``kind`` shape with dimensions ``dims``."""
    if kind == "circle":
        return math.pi * dims[0] ** 2
    if kind == "rect":
        return dims[0] * dims[1]
    raise ValueError(kind)
''',
        "pkg/plan.py": '''from pkg.shapes import area


def total_area(shapes):
    return sum(area(kind, *dims) for kind, dims in shapes)
''',
        "tests/test_shapes.py": '''import math

from pkg.shapes import area
from pkg.plan import total_area


def test_rect():
    assert area("rect", $W, 2.0) == $W * 2.0


def test_total():
    got = total_area([("rect", (1.0, 2.0)), ("circle", (1.0,))])
    assert abs(got - (2.0 + math.pi)) < 1e-12, got
''',
    },
    {
        "pkg/shapes.py": '''import math


def area(kind, dims):
    """Area of a ``kind`` shape with the dimension sequence ``dims``."""
    if kind == "circle":
        return math.pi * dims[0] ** 2
    if kind == "rect":
        return dims[0] * dims[1]
    raise ValueError(kind)
''',
        "pkg/plan.py": '''from pkg.shapes import area


def total_area(shapes):
    return sum(area(kind, dims) for kind, dims in shapes)
''',
        "tests/test_shapes.py": '''import math

from pkg.shapes import area
from pkg.plan import total_area


def test_rect():
    assert area("rect", ($W, 2.0)) == $W * 2.0


def test_total():
    got = total_area([("rect", (1.0, 2.0)), ("circle", (1.0,))])
    assert abs(got - (2.0 + math.pi)) < 1e-12, got
''',
    },
    {
        "pkg/shapes.py": '''import math


def area(kind, dims, scale=1.0):
    """Area of a ``kind`` shape with the dimension sequence ``dims`` drawn at ``scale``."""
    if kind == "circle":
        out = math.pi * dims[0] ** 2
    elif kind == "rect":
        out = dims[0] * dims[1]
    elif kind == "tri":
        out = 0.5 * dims[0] * dims[1]
    else:
        raise ValueError(kind)
    return out * scale ** 2
''',
        "pkg/plan.py": '''from pkg.shapes import area

SCALE = $S


def total_area(shapes):
    return sum(area(kind, dims, scale=SCALE) for kind, dims in shapes)
''',
        "tests/test_shapes.py": '''import math

from pkg.shapes import area
from pkg.plan import total_area


def test_rect():
    assert area("rect", ($W, 2.0)) == $W * 2.0


def test_tri():
    assert area("tri", (2.0, 3.0), scale=2.0) == 12.0


def test_total():
    got = total_area([("rect", (1.0, 2.0)), ("circle", (1.0,))])
    want = (2.0 + math.pi) * $S ** 2
    assert abs(got - want) < 1e-9, (got, want)
''',
    },
]

_CHECKS = [
    {
        "pkg/checks.py": '''def in_range(x, lo, hi):
    """Whether ``lo <= x < hi``."""
    return lo <= x < hi
''',
        "pkg/filters.py": '''from pkg.checks import in_range


def keep(xs, lo, hi):
    return [x for x in xs if in_range(x, lo, hi)]
''',
        "tests/test_checks.py": '''from pkg.checks import in_range
from pkg.filters import keep


def test_inside():
    assert in_range($M, 0, $H)


def test_keep():
    got = keep([-1, 0, $M, $H + 1], 0, $H)
    assert got == [0, $M], got
''',
    },
    {
        "pkg/checks.py": '''def in_range(x, lo, hi):
    """Whether ``lo <= x <= hi`` (both ends included)."""
    return lo <= x <= hi
''',
        "pkg/filters.py": '''from pkg.checks import in_range


def keep(xs, lo, hi):
    return [x for x in xs if in_range(x, lo, hi)]
''',
        "tests/test_checks.py": '''from pkg.checks import in_range
from pkg.filters import keep


def test_inside():
    assert in_range($M, 0, $H)


def test_upper_end():
    assert in_range($H, 0, $H)


def test_keep():
    got = keep([-1, 0, $M, $H, $H + 1], 0, $H)
    assert got == [0, $M, $H], got
''',
    },
    {
        "pkg/checks.py": '''def in_range(x, lo=None, hi=None):
    """Whether ``lo <= x <= hi``; a bound of None is open."""
    return (lo is None or lo <= x) and (hi is None or x <= hi)
''',
        "pkg/filters.py": '''from pkg.checks import in_range


def keep(xs, lo=None, hi=None):
    return [x for x in xs if in_range(x, lo=lo, hi=hi)]
''',
        "tests/test_checks.py": '''from pkg.checks import in_range
from pkg.filters import keep


def test_inside():
    assert in_range($M, 0, $H)


def test_open_bounds():
    assert in_range($H + 100, lo=0) and in_range(-100, hi=$H)


def test_keep():
    got = keep([-1, 0, $M, $H, $H + 1], 0, $H)
    assert got == [0, $M, $H], got
    assert keep([-1, $H + 1], hi=0) == [-1]
''',
    },
]

COMPONENTS: Mapping[str, list] = {
    "units": _UNITS, "stats": _STATS, "slug": _SLUG, "pricing": _PRICING, "shapes": _SHAPES, "checks": _CHECKS,
}

_WORDS = ["Big", "Red", "Fast", "Quiet", "Blue", "Green", "Tiny", "Bold"]
_BASES = ["https://a.example", "https://docs.example.org", "http://site.test"]


def _constants(rng: random.Random) -> dict:
    word = rng.choice(_WORDS)
    h = rng.randint(5, 20)
    return {"A": rng.choice([2, 3, 5, 7, 11]), "P": rng.choice([2, 3, 4]), "B": rng.choice([2.0, 4.0, 8.0]),
            "D": rng.choice([1, 2, 3]), "WORD": word, "LWORD": word.lower(), "BASE": rng.choice(_BASES),
            "TAX": rng.choice([0.07, 0.19, 0.2, 0.25]), "DISC": rng.choice([0.1, 0.25, 0.5]),
            "W": rng.choice([1.5, 3.0, 4.0]), "S": rng.choice([2.0, 3.0, 0.5]), "H": h, "M": rng.randint(1, h - 1)}


def generated_repository(seed: int, n_components: int = 3) -> dict:
    """A generated package with a version history (SyncBench's source repositories, generated).

    Args:
        seed: picks the components, their constants and the commit order.
        n_components: how many of ``COMPONENTS`` the package holds (1 .. 6).

    Returns:
        ``{"name", "kind": "generated", "commits": [{"message", "files": {path: text}}, ...]}``:
        every commit is a full snapshot of the tree; a commit advances one component by one version
        (library, client and tests together, as one collaborator's change).
    """
    if not isinstance(n_components, int) or not 1 <= n_components <= len(COMPONENTS):
        raise ValueError(f"n_components must be an integer in [1, {len(COMPONENTS)}], got {n_components!r}")
    rng = random.Random(int(seed))
    names = rng.sample(sorted(COMPONENTS), n_components)
    consts = {n: _constants(rng) for n in names}

    def files_of(name, version):
        return {p: Template(t).substitute(consts[name]) for p, t in COMPONENTS[name][version].items()}

    versions = {n: 0 for n in names}
    tree = {"pkg/__init__.py": ""}
    for n in names:
        tree.update(files_of(n, 0))
    commits = [{"message": "initial version of " + ", ".join(names), "files": dict(tree)}]
    steps = [n for n in names for _ in range(len(COMPONENTS[n]) - 1)]
    rng.shuffle(steps)
    # keep each component's versions in order whatever the shuffle did
    for n in steps:
        versions[n] += 1
        tree.update(files_of(n, versions[n]))
        commits.append({"message": f"{n}: version {versions[n]} (API change, callers and tests updated)",
                        "files": dict(tree)})
    return {"name": f"gen{seed}", "kind": "generated", "commits": commits}


# ----------------------------------------------------------------------------------------------
# Installed stdlib modules: current source, generated behaviour tests, a synthesised older version.

STDLIB_MODULES = ("colorsys", "fnmatch", "shlex", "textwrap")


def _gen_calls(module: str, rng: random.Random, n: int) -> list[tuple[str, str, tuple]]:
    """``n`` seeded calls ``(test name, function, args)`` of ``module``'s public functions."""
    letters = "abcxyz"
    out = []
    for i in range(n):
        if module == "colorsys":
            fn = rng.choice(["rgb_to_yiq", "yiq_to_rgb", "rgb_to_hls", "hls_to_rgb", "rgb_to_hsv", "hsv_to_rgb"])
            args = tuple(round(rng.random(), 3) for _ in range(3))
            if rng.random() < 0.3:  # grey and edge values exercise the branches
                v = rng.choice([0.0, 0.5, 1.0])
                args = (v, v, v) if rng.random() < 0.5 else (1.0, rng.choice([0.0, 1.0]), 0.0)
        elif module == "fnmatch":
            fn = rng.choice(["fnmatch", "fnmatchcase", "filter"])
            pieces = ["*", "?", "[a-c]", "[!x]", "a", "b", "x", ".py"]
            pat = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))
            names = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 4))) + rng.choice(["", ".py"])
                     for _ in range(4)]
            args = (names, pat) if fn == "filter" else (names[0], pat)
        elif module == "shlex":
            fn = rng.choice(["quote", "split", "join"])
            words = ["".join(rng.choice(letters + " '\"$") for _ in range(rng.randint(0, 5))) for _ in range(3)]
            if fn == "quote":
                args = (words[0],)
            elif fn == "join":
                args = (words,)
            else:
                args = (" ".join(__import__("shlex").quote(w) for w in words),)
        elif module == "textwrap":
            fn = rng.choice(["wrap", "fill", "shorten", "dedent", "indent"])
            text = " ".join(rng.choice(["lorem", "ipsum", "dolor", "sit", "amet,", "consectetur", "a", "b"])
                            for _ in range(rng.randint(3, 14)))
            if fn in ("wrap", "fill"):
                args = (text, rng.randint(6, 20))
            elif fn == "shorten":
                args = (text, rng.randint(10, 30))
            elif fn == "dedent":
                pad = " " * rng.randint(1, 4)
                args = ("\n".join(pad + line for line in text.split(" ")[:4]) + "\n",)
            else:
                args = (text.replace(" ", "\n", 2), rng.choice(["> ", "  ", "# "]))
        else:
            raise ValueError(f"module must be one of {STDLIB_MODULES}, got {module!r}")
        out.append((f"test_{fn}_{i}", fn, args))
    return out


def _test_file(module: str, calls) -> str:
    mod = __import__(module)
    lines = [f"from vendor import {module}", "", "",
             "def _same(a, b):",
             "    if isinstance(a, float) or isinstance(b, float):",
             "        return abs(a - b) < 1e-9",
             "    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):",
             "        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))",
             "    return a == b", ""]
    for name, fn, args in calls:
        want = getattr(mod, fn)(*args)
        arg_text = ", ".join(repr(a) for a in args)
        lines += ["", f"def {name}():", f"    got = {module}.{fn}({arg_text})",
                  f"    want = {want!r}", "    assert _same(got, want), (got, want)", ""]
    return "\n".join(lines)


_CMP_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_BIN_FLIP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


class _Mutator(ast.NodeTransformer):
    """Applies the ``target``-th mutation site of one kind (comparison, constant, operator)."""

    def __init__(self, kind: str, target: int):
        self.kind, self.target, self.seen, self.done = kind, target, 0, False

    def _hit(self) -> bool:
        hit = self.seen == self.target
        self.seen += 1
        if hit:
            self.done = True
        return hit

    def visit_Compare(self, node):
        self.generic_visit(node)
        if self.kind == "compare" and type(node.ops[0]) in _CMP_FLIP and self._hit():
            node.ops = [_CMP_FLIP[type(node.ops[0])]()] + node.ops[1:]
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if self.kind == "binop" and type(node.op) in _BIN_FLIP and self._hit():
            node.op = _BIN_FLIP[type(node.op)]()
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if self.kind == "boolop" and self._hit():
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return node

    def visit_Constant(self, node):
        if self.kind == "constant" and isinstance(node.value, (int, float)) and not isinstance(node.value, bool) \
                and self._hit():
            return ast.copy_location(ast.Constant(node.value + 1 if isinstance(node.value, int) else node.value * 2),
                                     node)
        return node


def mutate_function(source: str, kind: str, target: int) -> str | None:
    """``source`` (one function) with its ``target``-th site of ``kind`` edited, or None if it has
    fewer sites. Kinds: ``compare`` (boundary flip), ``binop`` (+/-, * and / swapped), ``boolop``
    (and/or swapped), ``constant`` (a number changed)."""
    if kind not in ("compare", "binop", "boolop", "constant"):
        raise ValueError(f"kind must be compare, binop, boolop or constant, got {kind!r}")
    tree = ast.parse(source)
    m = _Mutator(kind, target)
    tree = m.visit(tree)
    if not m.done:
        return None
    return ast.unparse(ast.fix_missing_locations(tree))


def stdlib_repository(module: str, seed: int, n_tests: int = 12) -> dict:
    """An installed stdlib module as a two-commit repository: a synthesised older version, then the
    current source with behaviour tests (see the module docstring).

    The tests are generated from the installed module's behaviour; every function of the module
    gets one synthesised older version in the first commit (its first mutation site of a
    seed-chosen kind), so that history tracing finds an older version of each.
    """
    if module not in STDLIB_MODULES:
        raise ValueError(f"module must be one of {STDLIB_MODULES}, got {module!r}")
    import importlib
    import inspect

    from rayml.agents.syncmind_bench import function_spans, replace_function

    rng = random.Random(int(seed) * 7919 + STDLIB_MODULES.index(module))
    mod = importlib.import_module(module)
    current = inspect.getsource(mod)
    tests = _test_file(module, _gen_calls(module, rng, n_tests))
    older = current
    for qualname in sorted(function_spans(current)):
        src = function_spans(older)[qualname][2]
        for kind in rng.sample(["compare", "binop", "boolop", "constant"], 4):
            edited = mutate_function(_dedent(src), kind, 0)
            if edited is not None:
                older = replace_function(older, qualname, edited)
                break
    files_old = {"vendor/__init__.py": "", f"vendor/{module}.py": older, f"tests/test_{module}.py": tests}
    files_new = {"vendor/__init__.py": "", f"vendor/{module}.py": current, f"tests/test_{module}.py": tests}
    return {"name": f"std-{module}{seed}", "kind": "stdlib",
            "commits": [{"message": f"{module}: older version (synthesised)", "files": files_old},
                        {"message": f"{module}: current installed source", "files": files_new}]}


def _dedent(src: str) -> str:
    import textwrap

    return textwrap.dedent(src)
