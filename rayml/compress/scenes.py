"""Procedural scenes for the HybridGS reproduction: analytic objects, ray-cast views, SfM-like points.

A scene is a few spheres and boxes with striped colour textures, Lambert-shaded under one light
plus ambient light, on a black background. ``render_views`` ray-casts it (2x2 supersampling) for
a list of ``splatting.Camera``; ``surface_points`` samples coloured points on the visible surfaces,
the stand-in for the SfM point cloud that initialises 3D Gaussian splatting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rayml.compress.splatting import Camera

__all__ = ["KINDS", "Primitive", "Scene", "make_scene", "render_views", "surface_points"]

KINDS = ("spheres", "boxes", "mixed")
_LIGHT = np.array([0.4, -0.8, -0.45]) / np.linalg.norm([0.4, -0.8, -0.45])  # direction towards the light


@dataclass(frozen=True)
class Primitive:
    """A sphere (``size`` = radius, one value) or an axis-aligned box (``size`` = half extents)."""

    kind: str
    center: tuple
    size: tuple
    color: tuple
    stripe_color: tuple
    stripe_freq: float


@dataclass(frozen=True)
class Scene:
    name: str
    primitives: tuple


def make_scene(kind: str, seed: int) -> Scene:
    """A scene of 3-4 primitives of ``kind`` (``KINDS``) drawn from ``seed``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng([int(seed), KINDS.index(kind)])
    n = int(rng.integers(3, 5))
    prims = []
    for i in range(n):
        shape = {"spheres": "sphere", "boxes": "box"}.get(kind, "sphere" if i % 2 == 0 else "box")
        center = tuple(float(v) for v in rng.uniform(-0.45, 0.45, 3))
        size = (float(rng.uniform(0.18, 0.32)),) if shape == "sphere" else tuple(float(v) for v in rng.uniform(0.12, 0.28, 3))
        prims.append(Primitive(shape, center, size, tuple(float(v) for v in rng.uniform(0.35, 1.0, 3)),
                               tuple(float(v) for v in rng.uniform(0.1, 1.0, 3)), float(rng.uniform(6.0, 14.0))))
    return Scene(f"{kind}-{seed}", tuple(prims))


def _intersect(prim: Primitive, o: np.ndarray, d: np.ndarray):
    """Ray parameters ``t`` (inf on a miss) and unit normals of the first hit."""
    c = np.asarray(prim.center)
    if prim.kind == "sphere":
        r = prim.size[0]
        oc = o - c
        b = (oc * d).sum(-1)
        disc = b * b - ((oc * oc).sum(-1) - r * r)
        sq = np.sqrt(np.maximum(disc, 0.0))
        t = -b - sq
        t = np.where(t > 1e-6, t, -b + sq)
        t = np.where((disc >= 0) & (t > 1e-6), t, np.inf)
        p = o + d * np.where(np.isfinite(t), t, 0.0)[:, None]
        return t, (p - c) / r
    h = np.asarray(prim.size)
    inv = 1.0 / np.where(np.abs(d) < 1e-12, 1e-12, d)
    t1, t2 = (c - h - o) * inv, (c + h - o) * inv
    tmin, tmax = np.minimum(t1, t2).max(-1), np.maximum(t1, t2).min(-1)
    t = np.where((tmax >= tmin) & (tmax > 1e-6), np.where(tmin > 1e-6, tmin, tmax), np.inf)
    p = o + d * np.where(np.isfinite(t), t, 0.0)[:, None]
    q = (p - c) / h
    axis = np.argmax(np.abs(q), -1)
    nrm = np.zeros_like(q)
    nrm[np.arange(len(q)), axis] = np.sign(q[np.arange(len(q)), axis])
    return t, nrm


def _albedo(prim: Primitive, p: np.ndarray) -> np.ndarray:
    s = 0.5 + 0.5 * np.sin(prim.stripe_freq * (p[:, 0] + 0.7 * p[:, 1] - 0.4 * p[:, 2]))
    s = (s > 0.5).astype(np.float64)[:, None]
    return (1 - s) * np.asarray(prim.color) + s * np.asarray(prim.stripe_color)


def _shade(scene: Scene, o: np.ndarray, d: np.ndarray):
    best = np.full(len(o), np.inf)
    color = np.zeros((len(o), 3))
    points = np.zeros((len(o), 3))
    for prim in scene.primitives:
        t, nrm = _intersect(prim, o, d)
        hit = t < best
        if not hit.any():
            continue
        best = np.where(hit, t, best)
        p = o[hit] + d[hit] * t[hit, None]
        lam = np.clip((nrm[hit] * _LIGHT).sum(-1), 0.0, 1.0)[:, None]
        color[hit] = _albedo(prim, p) * (0.45 + 0.55 * lam)
        points[hit] = p
    return best, np.clip(color, 0.0, 1.0), points


def _rays(cam: Camera, sub: int):
    offs = (np.arange(sub) + 0.5) / sub
    us = (np.arange(cam.width)[:, None] + offs[None, :]).reshape(-1)
    vs = (np.arange(cam.height)[:, None] + offs[None, :]).reshape(-1)
    U, V = np.meshgrid(us, vs)
    dc = np.stack([(U - cam.cx) / cam.fx, (V - cam.cy) / cam.fy, np.ones_like(U)], -1).reshape(-1, 3)
    d = dc @ np.asarray(cam.R)  # camera -> world: R^T x, row form
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    return np.broadcast_to(cam.center, d.shape).copy(), d


def render_views(scene: Scene, cams, *, supersample: int = 2) -> np.ndarray:
    """Ray-cast views ``(V, H, W, 3)`` in [0, 1] (float32) of ``scene`` from ``cams``."""
    if not isinstance(scene, Scene):
        raise TypeError(f"scene must be a Scene, got {type(scene).__name__}")
    out = []
    for cam in cams:
        o, d = _rays(cam, supersample)
        _, col, _ = _shade(scene, o, d)
        s = supersample
        img = col.reshape(cam.height, s, cam.width, s, 3).mean((1, 3))
        out.append(img)
    return np.stack(out).astype(np.float32)


def surface_points(scene: Scene, cams, n: int, seed: int):
    """``n`` visible surface points ``(n, 3)`` with their shaded colours ``(n, 3)``: rays from the
    cameras through random sub-pixel positions, kept where they hit an object."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    rng = np.random.default_rng(seed)
    pts, cols = [], []
    total = 0
    for _ in range(50):
        for cam in cams:
            m = max(4 * n // len(cams), 16)
            u, v = rng.uniform(0, cam.width, m), rng.uniform(0, cam.height, m)
            dc = np.stack([(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy, np.ones(m)], -1)
            d = dc @ np.asarray(cam.R)
            d /= np.linalg.norm(d, axis=-1, keepdims=True)
            t, col, p = _shade(scene, np.broadcast_to(cam.center, d.shape).copy(), d)
            hit = np.isfinite(t)
            pts.append(p[hit])
            cols.append(col[hit])
            total += int(hit.sum())
        if total >= n:
            break
    P, C = np.concatenate(pts), np.concatenate(cols)
    if len(P) < n:
        raise ValueError(f"the scene shows fewer than n={n} surface samples to the cameras")
    idx = rng.choice(len(P), n, replace=False)
    return P[idx], C[idx]
