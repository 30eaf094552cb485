"""Synthetic graphs: stochastic block models with controllable homophily (and a sensitive attribute).

Used by the graph methods of rayml (``cur_mgae``'s synthetic graphs: 10 classes at edge homophily
0.1 / 0.5 / 0.9, as in the paper's synthetic study).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Graph", "homophilous_sbm", "edge_homophily", "split_edges", "negative_edges"]


@dataclass(frozen=True)
class Graph:
    """An undirected graph: ``edges`` (2, E) with each pair once (``u < v``), features, labels, sensitive."""

    edges: np.ndarray
    x: np.ndarray
    y: np.ndarray
    sensitive: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.x.shape[0])


def homophilous_sbm(rng: np.random.Generator, *, n: int = 1000, classes: int = 10, degree: float = 10.0,
                    homophily: float = 0.5, feat_dim: int = 32, feat_signal: float = 1.0,
                    sensitive_bias: float | None = None) -> Graph:
    """A stochastic block model whose expected edge homophily is ``homophily``.

    Nodes get uniform classes; an intra-class pair is an edge with probability
    ``p_in = h d / (n / K)`` and an inter-class pair with ``p_out = (1 - h) d / (n - n / K)``, so a
    node has ``d`` neighbours in expectation and a fraction ``h`` of them share its class. Features
    are ``feat_signal * mu_y + N(0, I)`` with class means ``mu_k ~ N(0, I / feat_dim)`` scaled to
    unit norm. With ``sensitive_bias`` set, a binary sensitive attribute ``s`` is drawn correlated
    with the class (``P(s = 1 | y) = 0.5 +/- sensitive_bias``).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    for name, v in (("n", n), ("classes", classes), ("feat_dim", feat_dim)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if classes < 2 or n < 2 * classes:
        raise ValueError(f"need classes >= 2 and n >= 2 * classes, got n={n}, classes={classes}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must lie in [0, 1], got {homophily!r}")
    if not 0 < degree < n / classes:
        raise ValueError(f"degree must lie in (0, n / classes), got {degree!r}")
    y = rng.integers(0, classes, size=n)
    size = n / classes
    p_in, p_out = homophily * degree / size, (1 - homophily) * degree / (n - size)
    iu, ju = np.triu_indices(n, k=1)
    same = y[iu] == y[ju]
    keep = rng.random(iu.shape[0]) < np.where(same, p_in, p_out)
    edges = np.stack([iu[keep], ju[keep]])
    mu = rng.normal(size=(classes, feat_dim))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    x = feat_signal * mu[y] + rng.normal(size=(n, feat_dim)) / np.sqrt(feat_dim) * 1.0
    s = None
    if sensitive_bias is not None:
        if not 0 <= sensitive_bias <= 0.5:
            raise ValueError(f"sensitive_bias must lie in [0, 0.5], got {sensitive_bias!r}")
        p = 0.5 + np.where(y % 2 == 0, sensitive_bias, -sensitive_bias)
        s = (rng.random(n) < p).astype(np.int64)
    return Graph(edges=edges.astype(np.int64), x=x.astype(np.float32), y=y.astype(np.int64), sensitive=s)


def edge_homophily(edges: np.ndarray, y: np.ndarray) -> float:
    """The fraction of edges whose endpoints share a label."""
    edges = np.asarray(edges)
    if edges.size == 0:
        return float("nan")
    return float(np.mean(y[edges[0]] == y[edges[1]]))


def negative_edges(rng: np.random.Generator, n: int, count: int, forbid: np.ndarray) -> np.ndarray:
    """``count`` node pairs ``u < v`` drawn uniformly among non-edges (``forbid``: (2, E) pairs to avoid)."""
    taken = set(map(tuple, np.sort(np.asarray(forbid), axis=0).T.tolist()))
    out: list[tuple[int, int]] = []
    while len(out) < count:
        u, v = rng.integers(0, n, size=(2, 2 * (count - len(out)) + 8))
        for a, b in zip(u.tolist(), v.tolist()):
            if a == b:
                continue
            p = (min(a, b), max(a, b))
            if p not in taken:
                taken.add(p)
                out.append(p)
                if len(out) == count:
                    break
    return np.array(out, dtype=np.int64).T.reshape(2, -1)


def split_edges(rng: np.random.Generator, edges: np.ndarray, n: int, val: float = 0.05, test: float = 0.1) -> dict:
    """Random train / val / test split of the edges (each pair once), with as many negatives for val/test."""
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise ValueError(f"val and test must be fractions with val + test < 1, got {val}, {test}")
    E = edges.shape[1]
    perm = rng.permutation(E)
    nv, nt = int(round(val * E)), int(round(test * E))
    out = {"val": edges[:, perm[:nv]], "test": edges[:, perm[nv:nv + nt]], "train": edges[:, perm[nv + nt:]]}
    neg = negative_edges(rng, n, nv + nt, edges)
    out["val_neg"], out["test_neg"] = neg[:, :nv], neg[:, nv:]
    return out
