"""Data and metrics of the INRFlow reproduction.

- ``digit_images``: ``sklearn.datasets.load_digits`` (8x8, 0..16) scaled to ``[-1, 1]`` and
  upsampled bilinearly (``align_corners=True``) to any resolution: every resolution samples the same
  continuous bilinear image at ``linspace(0, 1, R)``, so held-out data exists at resolutions the
  model never saw.
- ``shape_clouds``: 3-D point clouds sampled uniformly on the surfaces of spheres, tori, boxes and
  chairs built from boxes (seat, back, four legs), random sizes and a random turn about the vertical
  axis, centred and scaled into the unit ball.
- ``FeatureNet`` / ``feature_net``: a small conv classifier of the digits at one resolution, trained by
  the project and cached under ``rayml.runtime.cache_root()``; its penultimate activations are the
  features of the FID-like distance (``frechet_distance``, the FID formula).
- ``chamfer_matrix``, ``emd_matrix``, ``mmd_cov``: Chamfer and exact earth mover's distances between
  clouds, and the MMD-CD / COV-CD / MMD-EMD / COV-EMD of Achlioptas et al. (2018) between a generated
  and a reference set.
"""

from __future__ import annotations

import io
import math

import numpy as np
import torch
import torch.nn.functional as Fn
from torch import nn

__all__ = ["digit_images", "SHAPES", "shape_clouds", "FeatureNet", "feature_net", "load_feature_net", "features",
           "frechet_distance", "chamfer_matrix", "emd", "emd_matrix", "mmd_cov"]

SHAPES = ("sphere", "torus", "box", "chair")


def digit_images(resolution: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits at ``resolution`` in ``[-1, 1]``, ``(N, R, R)``, and their labels."""
    from sklearn.datasets import load_digits

    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 2:
        raise ValueError(f"resolution must be an integer >= 2, got {resolution!r}")
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32)[:, None] / 16.0 * 2 - 1
    x = Fn.interpolate(x, size=(resolution, resolution), mode="bilinear", align_corners=True)[:, 0]
    return x.clamp(-1, 1), torch.tensor(d.target)


# ----------------------------------------------------------------------------- point clouds


def _box_surface(rng, n, lo, hi):
    """``n`` points uniform on the surface of the axis-aligned box ``[lo, hi]``."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    size = hi - lo
    areas = np.array([size[1] * size[2], size[0] * size[2], size[0] * size[1]] * 2)
    face = rng.choice(6, size=n, p=areas / areas.sum())
    p = lo + rng.random((n, 3)) * size
    axis = face % 3
    side = face // 3
    p[np.arange(n), axis] = np.where(side == 0, lo[axis], hi[axis])
    return p


def _boxes_surface(rng, n, boxes):
    areas = np.array([2 * ((h[0] - l[0]) * (h[1] - l[1]) + (h[0] - l[0]) * (h[2] - l[2]) + (h[1] - l[1]) * (h[2] - l[2]))
                      for l, h in boxes])
    which = rng.choice(len(boxes), size=n, p=areas / areas.sum())
    out = np.empty((n, 3))
    for i, (l, h) in enumerate(boxes):
        k = int((which == i).sum())
        if k:
            out[which == i] = _box_surface(rng, k, l, h)
    return out


def _one_shape(rng, kind, n):
    if kind == "sphere":
        v = rng.normal(size=(n, 3))
        p = v / np.linalg.norm(v, axis=1, keepdims=True) * rng.uniform(0.6, 1.0)
    elif kind == "torus":
        big, small = rng.uniform(0.55, 0.75), rng.uniform(0.15, 0.3)
        pts = []
        while sum(len(q) for q in pts) < n:  # area-uniform: accept with prob (R + r cos v) / (R + r)
            u, v = rng.uniform(0, 2 * np.pi, (2, 4 * n))
            keep = rng.random(4 * n) < (big + small * np.cos(v)) / (big + small)
            u, v = u[keep], v[keep]
            pts.append(np.stack([(big + small * np.cos(v)) * np.cos(u), small * np.sin(v),
                                 (big + small * np.cos(v)) * np.sin(u)], 1))
        p = np.concatenate(pts)[:n]
    elif kind == "box":
        half = rng.uniform(0.25, 0.6, 3)
        p = _box_surface(rng, n, -half, half)
    else:  # chair: seat, back and four legs (y is up)
        w, dpt = rng.uniform(0.35, 0.5), rng.uniform(0.35, 0.5)
        seat_y, th = rng.uniform(-0.05, 0.1), 0.06
        back_h, leg = rng.uniform(0.4, 0.6), 0.05
        boxes = [((-w, seat_y, -dpt), (w, seat_y + th, dpt)),
                 ((-w, seat_y + th, dpt - th), (w, seat_y + th + back_h, dpt))]
        for sx in (-1, 1):
            for sz in (-1, 1):
                cx, cz = sx * (w - leg), sz * (dpt - leg)
                boxes.append(((cx - leg, -0.55, cz - leg), (cx + leg, seat_y, cz + leg)))
        p = _boxes_surface(rng, n, boxes)
    a = rng.uniform(0, 2 * np.pi)
    rot = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    p = p @ rot.T
    p = p - p.mean(0)
    return p / np.linalg.norm(p, axis=1).max()


def shape_clouds(n: int, n_points: int, seed: int, kinds=SHAPES) -> tuple[torch.Tensor, list[str]]:
    """``n`` clouds ``(n, n_points, 3)`` of shapes drawn evenly from ``kinds``, and their kinds."""
    for key, v in (("n", n), ("n_points", n_points)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    bad = [k for k in kinds if k not in SHAPES]
    if bad or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {SHAPES}, got {kinds!r}")
    rng = np.random.default_rng(seed)
    names = [kinds[i % len(kinds)] for i in range(n)]
    clouds = np.stack([_one_shape(rng, k, n_points) for k in names])
    return torch.tensor(clouds, dtype=torch.float32), names


# ----------------------------------------------------------------------------- the FID-like judge


class FeatureNet(nn.Module):
    """A small digits classifier; ``features`` (its penultimate layer) feed the FID-like distance."""

    def __init__(self, resolution: int):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 16, 64)
        self.out = nn.Linear(64, 10)

    def features(self, x):
        h = Fn.relu(self.c3(Fn.relu(self.c2(Fn.relu(self.c1(x))))))
        return Fn.relu(self.fc(Fn.adaptive_avg_pool2d(h, 4).flatten(1)))

    def forward(self, x):
        return self.out(self.features(x))


def _train_feature_net(resolution: int, seed: int, epochs: int) -> FeatureNet:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the cached judge must not depend on the caller's thread count
    try:
        torch.manual_seed(seed)
        net = FeatureNet(resolution)
        x, y = digit_images(resolution)
        x = x[:, None]
        g = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(net.parameters(), lr=2e-3)
        for _ in range(epochs):
            perm = torch.randperm(x.shape[0], generator=g)
            for i in range(0, x.shape[0], 64):
                idx = perm[i:i + 64]
                loss = Fn.cross_entropy(net(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    return net.eval()


def feature_net(resolution: int, seed: int = 0, epochs: int = 8) -> bytes:
    """The judge's weights at ``resolution`` as bytes (send these to tasks, not a path); trained on the
    digits once and cached under ``cache_root()/inrflow``."""
    from rayml.runtime import cache_root

    path = cache_root() / "inrflow" / f"featnet-r{resolution}-s{seed}-e{epochs}.pt"
    if path.exists():
        return path.read_bytes()
    net = _train_feature_net(resolution, seed, epochs)
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{id(data)}")
    tmp.write_bytes(data)
    tmp.replace(path)
    return data


def load_feature_net(data: bytes, resolution: int) -> FeatureNet:
    """A ``FeatureNet`` from the bytes of ``feature_net``."""
    net = FeatureNet(resolution)
    net.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))
    for p in net.parameters():
        p.requires_grad_(False)
    return net.eval()


@torch.no_grad()
def features(net: FeatureNet, images: torch.Tensor) -> torch.Tensor:
    """Features of images ``(N, R, R)`` in ``[-1, 1]`` (clamped first)."""
    return net.features(images.clamp(-1, 1)[:, None])


def frechet_distance(a: torch.Tensor, b: torch.Tensor, ridge: float = 1e-6) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets (the FID formula)."""
    from rayml.generative.diffadvmap import frechet_distance as fd

    return fd(a, b, ridge)


# ----------------------------------------------------------------------------- point-cloud metrics


def _sq_dists(x: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Squared distances ``(m, P, Q)`` from the points of one cloud ``x (P, 3)`` to each cloud of
    ``ys (m, Q, 3)``, float64 (``|x|^2 + |y|^2 - 2 x.y``: one batched matmul; ``cdist`` per pair is
    an order of magnitude slower on these small clouds)."""
    x, ys = x.double(), ys.double()
    d = (x * x).sum(-1)[None, :, None] + (ys * ys).sum(-1)[:, None, :] - 2 * torch.matmul(x[None], ys.transpose(1, 2))
    return d.clamp_min(0)


def chamfer_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``CD[i, j] = mean_p min_q |a_ip - b_jq|^2 + mean_q min_p |a_ip - b_jq|^2`` for clouds ``a (n, P, 3)``,
    ``b (m, Q, 3)`` (float64)."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[-1] != 3 or b.shape[-1] != 3:
        raise ValueError(f"a and b must be point clouds (n, P, 3), got {tuple(a.shape)} and {tuple(b.shape)}")
    out = torch.empty(a.shape[0], b.shape[0], dtype=torch.float64)
    for i in range(a.shape[0]):
        d = _sq_dists(a[i], b)  # (m, P, Q)
        out[i] = d.min(2).values.mean(1) + d.min(1).values.mean(1)
    return out


def emd(a: torch.Tensor, b: torch.Tensor) -> float:
    """Exact earth mover's distance between two equal-size clouds ``(P, 3)``: the mean Euclidean length
    of the optimal one-to-one matching, ``min_phi (1/P) sum_p |a_p - b_phi(p)|`` (Achlioptas et al.
    2018, who approximate it; solved exactly here by ``scipy.optimize.linear_sum_assignment``)."""
    from scipy.optimize import linear_sum_assignment

    if a.dim() != 2 or b.dim() != 2 or a.shape[-1] != 3 or b.shape[-1] != 3:
        raise ValueError(f"a and b must be point clouds (P, 3), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must have the same number of points for the EMD, got {a.shape[0]} and {b.shape[0]}")
    cost = _sq_dists(a, b[None])[0].sqrt().numpy()
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def emd_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``EMD[i, j] = emd(a[i], b[j])`` for clouds ``a (n, P, 3)``, ``b (m, P, 3)`` (float64)."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[-1] != 3 or b.shape[-1] != 3:
        raise ValueError(f"a and b must be point clouds (n, P, 3), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must have the same number of points for the EMD, got {a.shape[1]} and {b.shape[1]}")
    from scipy.optimize import linear_sum_assignment

    out = np.empty((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        cost = _sq_dists(a[i], b).sqrt().numpy()  # (m, P, P)
        for j in range(b.shape[0]):
            rows, cols = linear_sum_assignment(cost[j])
            out[i, j] = cost[j][rows, cols].mean()
    return torch.from_numpy(out)


def mmd_cov(generated: torch.Tensor, reference: torch.Tensor, with_emd: bool = False, reference_kinds=None) -> dict:
    """MMD-CD (mean over reference clouds of the Chamfer distance to the closest generated cloud; lower
    is better) and COV-CD (share of reference clouds that are some generated cloud's nearest; higher
    is better), Achlioptas et al. 2018; with ``with_emd=True`` also MMD-EMD and COV-EMD, the same with the
    exact EMD (``emd_matrix``; equal point counts).

    ``reference_kinds`` (one label per reference cloud, e.g. the shape class of ``shape_clouds``) adds
    ``by_kind: {kind: {metric: value}}``: the same two sums restricted to the reference clouds of each
    kind (nearest neighbours are still found among all reference clouds), so the whole-set MMD / COV
    is the count-weighted mean of the per-kind values (tested) and each shape class can be compared
    on its own."""
    if reference_kinds is not None and len(reference_kinds) != reference.shape[0]:
        raise ValueError(f"reference_kinds must have one label per reference cloud ({reference.shape[0]}), "
                         f"got {len(reference_kinds)}")
    out, by_kind = {}, {}
    kinds = None if reference_kinds is None else list(dict.fromkeys(reference_kinds))
    for name, fn in (("cd", chamfer_matrix),) + ((("emd", emd_matrix),) if with_emd else ()):
        d = fn(generated, reference)
        nearest = d.min(0).values  # per reference cloud
        covered = torch.zeros(reference.shape[0], dtype=torch.bool)
        covered[d.argmin(1)] = True
        mmd = float(nearest.mean())
        out[f"mmd_{name}"] = mmd if math.isfinite(mmd) else float("nan")
        out[f"cov_{name}"] = float(covered.double().mean())
        for k in kinds or ():
            sel = torch.tensor([r == k for r in reference_kinds])
            m = float(nearest[sel].mean())
            by_kind.setdefault(k, {})[f"mmd_{name}"] = m if math.isfinite(m) else float("nan")
            by_kind[k][f"cov_{name}"] = float(covered[sel].double().mean())
    if kinds is not None:
        out["by_kind"] = by_kind
    return out
