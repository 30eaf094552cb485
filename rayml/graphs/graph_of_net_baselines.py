"""The N2GON experiment's baselines that train no network: label propagation and logistic regression.

N2GON (Wang et al., ICML 2025) claims "significant improvements over baselines"; besides the plain
GCN (``rayml.graphs.graph_of_net.GCN``, trained like N2GON) the two classic semi-supervised node
classifiers of a GON are:

- ``label_propagation`` over the GON's edges alone (Zhou, Bousquet, Lal, Weston and Schoelkopf,
  "Learning with Local and Global Consistency", NIPS 2004, Eq. 3 in closed form):
  ``F = (I - alpha S)^-1 Y`` with ``S = D^-1/2 A D^-1/2`` and ``Y`` the one-hot labels of the
  labelled node-graphs (zero rows elsewhere); the node contents are unused.
- ``logistic_regression`` on the flat vectors alone (``graph_of_net_data.flat_features``;
  multinomial, L2 penalty ``1 / C``, features standardised on the whole GON): the GON's edges
  are unused.

Each takes the same split as ``graph_of_net.train`` and returns the same accuracies.
"""

from __future__ import annotations

import numpy as np

from rayml.graphs.graph_of_net_data import GraphOfNet, flat_features

__all__ = ["label_propagation", "logistic_regression", "accuracies"]


def _check_split(split: dict, n: int) -> dict:
    out = {}
    for key in ("train", "val", "test"):
        idx = np.asarray(split.get(key, []) if isinstance(split, dict) else [], dtype=np.int64)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"split[{key!r}] must be non-empty node-graph ids in [0, {n})")
        out[key] = idx
    return out


def accuracies(scores: np.ndarray, y: np.ndarray, split: dict) -> dict:
    """``{"val_acc", "test_acc"}`` of the argmax of ``scores`` (n_graphs, classes)."""
    s = _check_split(split, len(y))
    pred = np.asarray(scores).argmax(1)
    return {"val_acc": float(np.mean(pred[s["val"]] == y[s["val"]])),
            "test_acc": float(np.mean(pred[s["test"]] == y[s["test"]]))}


def label_propagation(gon: GraphOfNet, split: dict, alpha: float) -> np.ndarray:
    """Class scores ``F = (I - alpha S)^-1 Y`` (Zhou et al. 2004) over the GON's edges; (n, classes)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    n = gon.n_graphs
    s = _check_split(split, n)
    A = np.zeros((n, n))
    e = np.asarray(gon.inter_edges)
    A[e[0], e[1]] = A[e[1], e[0]] = 1.0
    d = A.sum(1)
    inv = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-12)), 0.0)
    S = inv[:, None] * A * inv[None, :]
    Y = np.zeros((n, gon.n_classes))
    Y[s["train"], gon.y[s["train"]]] = 1.0
    return np.linalg.solve(np.eye(n) - alpha * S, Y)


def logistic_regression(gon: GraphOfNet, split: dict, C: float, seed: int = 0) -> np.ndarray:
    """Class probabilities of a multinomial logistic regression fitted on the labelled node-graphs'
    standardised flat vectors (L2 penalty ``1 / C``); (n, classes), zero columns for classes the
    labelled set lacks."""
    from sklearn.linear_model import LogisticRegression

    if isinstance(C, bool) or not isinstance(C, (int, float)) or not C > 0:
        raise ValueError(f"C must be > 0, got {C!r}")
    s = _check_split(split, gon.n_graphs)
    f = flat_features(gon).astype(np.float64)
    f = (f - f.mean(0)) / np.maximum(f.std(0), 1e-8)
    clf = LogisticRegression(C=float(C), max_iter=2000, random_state=int(seed) % (2**32))
    clf.fit(f[s["train"]], gon.y[s["train"]])
    out = np.zeros((gon.n_graphs, gon.n_classes))
    out[:, clf.classes_] = clf.predict_proba(f)
    return out
