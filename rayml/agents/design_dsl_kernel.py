"""The modelling side of the design-DSL reproduction: a small parametric-CAD command set and a
voxel geometry kernel in numpy.

"Targeted control of fast prototyping through domain-specific interface" (Shi et al., ICML 2025)
puts an interface between designers' language and a modelling language. The paper drives real
CAD tools; here the modelling language is a command set the project defines:

* primitives: ``box`` (``w`` x ``d`` x ``h``, axis-aligned) and ``cyl`` (radius ``r``, height
  ``h``, axis z), each a *part* with a centre ``x, y, z`` and a boolean role ``add`` (union) or
  ``cut`` (subtracted from the union of the added parts);
* commands: ``SET <part>.<param> = <number>`` (parameters and placement), ``ADD <role> <kind>
  <id> <param>=<number> ... AT <x> <y> <z>``, ``DELETE <part>``, ``MIRROR <part> <new id> X``
  (a transform: a copy reflected through the plane x = 0).

The kernel voxelises a model (signed distances of the primitives on a regular grid) for the
checkable targets: volume, bounding box, intersection over union with a target model, the count
of through-cut features (holes) and mirror symmetry. Assumed: axis-aligned primitives and
z-axis cylinders are enough for the product domains of the suite.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

__all__ = ["Part", "KINDS", "PARAMS", "CommandError", "apply_command", "apply_program", "parse_command",
           "format_part", "adaptive_res", "voxelize", "volume", "analytic_volume", "bbox", "iou", "hole_count", "mirror_symmetry",
           "model_params"]

KINDS = ("box", "cyl")
PARAMS = {"box": ("w", "d", "h"), "cyl": ("r", "h")}
PLACEMENT = ("x", "y", "z")


class CommandError(ValueError):
    """A modelling command that does not parse or names a part / parameter that does not exist."""


@dataclass(frozen=True)
class Part:
    """One primitive: ``kind`` in ``KINDS``, its size ``params``, its centre and its role."""

    id: str
    kind: str
    params: Mapping[str, float]
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    role: str = "add"
    tags: tuple = field(default=(), compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.role not in ("add", "cut"):
            raise ValueError(f"role must be 'add' or 'cut', got {self.role!r}")
        if set(self.params) != set(PARAMS[self.kind]):
            raise ValueError(f"params of a {self.kind} must be {PARAMS[self.kind]}, got {sorted(self.params)}")
        if any(not math.isfinite(v) or v <= 0 for v in self.params.values()):
            raise ValueError(f"part {self.id!r}: sizes must be finite and > 0, got {dict(self.params)}")

    def get(self, name: str) -> float:
        return float(getattr(self, name)) if name in PLACEMENT else float(self.params[name])

    def set(self, name: str, value: float) -> "Part":
        if name in PLACEMENT:
            return replace(self, **{name: float(value)})
        if name not in self.params:
            raise CommandError(f"a {self.kind} has no parameter {name!r} (has {PARAMS[self.kind] + PLACEMENT})")
        return replace(self, params={**self.params, name: float(value)})

    def half_extents(self) -> tuple[float, float, float]:
        p = self.params
        if self.kind == "box":
            return p["w"] / 2, p["d"] / 2, p["h"] / 2
        return p["r"], p["r"], p["h"] / 2


def model_params(model: Sequence[Part]) -> dict:
    """``{"part.param": value}`` over every size and placement parameter of the model."""
    out = {}
    for p in model:
        for name in PARAMS[p.kind] + PLACEMENT:
            out[f"{p.id}.{name}"] = p.get(name)
    return out


def format_part(p: Part) -> str:
    """The ``ADD`` command that creates ``p`` (how the current model is shown in prompts)."""
    sizes = " ".join(f"{k}={_num(p.params[k])}" for k in PARAMS[p.kind])
    return f"ADD {p.role} {p.kind} {p.id} {sizes} AT {_num(p.x)} {_num(p.y)} {_num(p.z)}"


def _num(v: float) -> str:
    return f"{v:.4g}"


_NUM = r"(-?\d+(?:\.\d+)?)"
_SET = re.compile(rf"^SET\s+(\w+)\.(\w+)\s*=\s*{_NUM}$")
_ADD = re.compile(rf"^ADD\s+(add|cut)\s+(box|cyl)\s+(\w+)((?:\s+\w+={_NUM})+)\s+AT\s+{_NUM}\s+{_NUM}\s+{_NUM}$")
_DEL = re.compile(r"^DELETE\s+(\w+)$")
_MIR = re.compile(r"^MIRROR\s+(\w+)\s+(\w+)\s+X$")


def parse_command(text: str) -> tuple:
    """Parse one modelling command to a tuple ``(verb, ...)``; raises ``CommandError``."""
    t = " ".join(str(text).split())
    if m := _SET.match(t):
        return ("SET", m.group(1), m.group(2), float(m.group(3)))
    if m := _ADD.match(t):
        sizes = dict((k, float(v)) for k, v in re.findall(rf"(\w+)={_NUM}", m.group(4)))
        return ("ADD", m.group(1), m.group(2), m.group(3), sizes, float(m.group(6)), float(m.group(7)),
                float(m.group(8)))
    if m := _DEL.match(t):
        return ("DELETE", m.group(1))
    if m := _MIR.match(t):
        return ("MIRROR", m.group(1), m.group(2))
    raise CommandError(f"not a modelling command: {text!r}")


def apply_command(model: Sequence[Part], command: str | tuple) -> tuple[Part, ...]:
    """The model after one command (a new tuple; the input is not changed)."""
    c = parse_command(command) if isinstance(command, str) else command
    parts = list(model)
    ids = [p.id for p in parts]
    if c[0] == "SET":
        _, pid, name, value = c
        if pid not in ids:
            raise CommandError(f"no part {pid!r} (parts: {ids})")
        i = ids.index(pid)
        if name not in PARAMS[parts[i].kind] + PLACEMENT:
            raise CommandError(f"part {pid!r} ({parts[i].kind}) has no parameter {name!r}")
        if name not in PLACEMENT and value <= 0:
            raise CommandError(f"SET {pid}.{name}: sizes must be > 0, got {value}")
        parts[i] = parts[i].set(name, value)
    elif c[0] == "ADD":
        _, role, kind, pid, sizes, x, y, z = c
        if pid in ids:
            raise CommandError(f"part {pid!r} exists already")
        try:
            parts.append(Part(pid, kind, sizes, x, y, z, role))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
    elif c[0] == "DELETE":
        if c[1] not in ids:
            raise CommandError(f"no part {c[1]!r}")
        parts.pop(ids.index(c[1]))
    elif c[0] == "MIRROR":
        if c[1] not in ids or c[2] in ids:
            raise CommandError(f"MIRROR needs an existing source and a new id, got {c[1]!r} -> {c[2]!r}")
        src = parts[ids.index(c[1])]
        parts.append(replace(src, id=c[2], x=-src.x))
    return tuple(parts)


def apply_program(model: Sequence[Part], commands: Sequence[str]) -> tuple[tuple[Part, ...], int]:
    """Apply commands in order, skipping those that fail; returns ``(model, number that failed)``."""
    failed = 0
    out = tuple(model)
    for cmd in commands:
        try:
            out = apply_command(out, cmd)
        except CommandError:
            failed += 1
    return out, failed


def bbox(model: Sequence[Part]) -> np.ndarray:
    """``[[xmin, ymin, zmin], [xmax, ymax, zmax]]`` of the added parts (cuts only remove)."""
    adds = [p for p in model if p.role == "add"] or list(model)
    lo = np.min([[p.x - e[0], p.y - e[1], p.z - e[2]] for p in adds for e in [p.half_extents()]], axis=0)
    hi = np.max([[p.x + e[0], p.y + e[1], p.z + e[2]] for p in adds for e in [p.half_extents()]], axis=0)
    return np.stack([lo, hi])


def _inside(p: Part, X, Y, Z) -> np.ndarray:
    hx, hy, hz = p.half_extents()
    dz = np.abs(Z - p.z) <= hz
    if p.kind == "box":
        return (np.abs(X - p.x) <= hx) & (np.abs(Y - p.y) <= hy) & dz
    return ((X - p.x) ** 2 + (Y - p.y) ** 2 <= p.params["r"] ** 2) & dz


def adaptive_res(models: Sequence[Sequence[Part]], box: np.ndarray, lo: int = 16, hi: int = 256) -> tuple:
    """Voxels per axis so that the thinnest part along each axis spans at least 3 voxels (clipped
    to ``[lo, hi]``): thin boards are not lost between voxel centres."""
    ext = np.asarray(box, float)[1] - np.asarray(box, float)[0]
    thin = np.full(3, np.inf)
    for m in models:
        for p in m:
            thin = np.minimum(thin, 2 * np.array(p.half_extents()))
    return tuple(int(np.clip(np.ceil(3 * ext[i] / thin[i]), lo, hi)) for i in range(3))


def voxelize(model: Sequence[Part], box: np.ndarray, res: int | tuple | None = 48) -> tuple[np.ndarray, float]:
    """Occupancy on a grid of voxel centres spanning ``box`` (``res`` per axis: an int, a 3-tuple or
    ``None`` for ``adaptive_res``); returns ``(grid, voxel volume)``."""
    if res is None:
        res = adaptive_res([model], box)
    res = (res,) * 3 if isinstance(res, (int, np.integer)) else tuple(res)
    if len(res) != 3 or min(res) < 2:
        raise ValueError(f"res must be >= 2 per axis, got {res}")
    lo, hi = np.asarray(box, float)
    step = (hi - lo) / np.array(res)
    axes = [lo[i] + step[i] * (np.arange(res[i]) + 0.5) for i in range(3)]
    X, Y, Z = np.meshgrid(*axes, indexing="ij")
    occ = np.zeros(X.shape, bool)
    for p in model:
        if p.role == "add":
            occ |= _inside(p, X, Y, Z)
    for p in model:
        if p.role == "cut":
            occ &= ~_inside(p, X, Y, Z)
    return occ, float(np.prod(step))


def _common_box(*models) -> np.ndarray:
    b = np.stack([bbox(m) for m in models])
    lo, hi = b[:, 0].min(0), b[:, 1].max(0)
    pad = 0.02 * (hi - lo).max()
    return np.stack([lo - pad, hi + pad])


def volume(model: Sequence[Part], res: int | tuple | None = None) -> float:
    """Voxel estimate of the solid's volume (union of added parts minus the cuts)."""
    occ, dv = voxelize(model, _common_box(model), res)
    return float(occ.sum() * dv)


def analytic_volume(p: Part) -> float:
    """Closed-form volume of one primitive (the reference the voxel kernel is tested against)."""
    q = p.params
    return q["w"] * q["d"] * q["h"] if p.kind == "box" else math.pi * q["r"] ** 2 * q["h"]


def iou(a: Sequence[Part], b: Sequence[Part], res: int | tuple | None = None) -> float:
    """Voxel intersection over union of two models on a common grid."""
    box = _common_box(a, b)
    res = adaptive_res([a, b], box) if res is None else res
    oa, _ = voxelize(a, box, res)
    ob, _ = voxelize(b, box, res)
    union = (oa | ob).sum()
    return float((oa & ob).sum() / union) if union else 1.0


def hole_count(model: Sequence[Part]) -> int:
    """Cut features that remove material: cuts whose extent overlaps an added part's extent."""
    adds = [p for p in model if p.role == "add"]
    n = 0
    for c in model:
        if c.role != "cut":
            continue
        ch = c.half_extents()
        for a in adds:
            ah = a.half_extents()
            if all(abs(getattr(c, k) - getattr(a, k)) < ch[i] + ah[i] for i, k in enumerate("xyz")):
                n += 1
                break
    return n


def mirror_symmetry(model: Sequence[Part], res: int | tuple | None = None) -> float:
    """IoU of the model's occupancy with its own reflection through the plane x = 0."""
    b = bbox(model)
    m = max(abs(b[0, 0]), abs(b[1, 0]))
    box = np.array([[-m, b[0, 1], b[0, 2]], [m, b[1, 1], b[1, 2]]]) * 1.02
    occ, _ = voxelize(model, box, res)
    flip = occ[::-1]
    union = (occ | flip).sum()
    return float((occ & flip).sum() / union) if union else 1.0
