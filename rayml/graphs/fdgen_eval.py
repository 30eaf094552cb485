"""How FDGen's generated graphs are judged: a GNN's fairness gaps and structure statistics against the real graph.

Wang and Zhang, "FDGen: A Fairness-Aware Graph Generation Model", ICML 2025. The paper reports the
demographic-parity and equal-opportunity gaps (``Delta_SP``, ``Delta_EO``) of a GNN trained on the
generated graphs, with its accuracy (utility), and generation quality as distances between graph
statistics of the generated and real graphs. Implemented here:

- ``fairness_gaps``: ``Delta_SP = |P(y_hat = 1 | s = 0) - P(y_hat = 1 | s = 1)|`` and
  ``Delta_EO = |P(y_hat = 1 | y = 1, s = 0) - P(y_hat = 1 | y = 1, s = 1)|`` (the standard
  definitions, e.g. FairGNN, Dai and Wang 2021).
- ``train_gcn`` / ``predict_gcn``: a two-layer GCN (Kipf and Welling 2017) on sparse message passing,
  trained by full-batch Adam on the labelled nodes. Assumed: GCN as the downstream GNN, 2 x 16
  units, 150 epochs, lr 0.01, weight decay 5e-4.
- ``structure_mmd``: squared MMD between the generated graphs and the real graph of three statistics
  (GraphRNN's protocol, You et al. 2018): the degree histogram, the histogram of local clustering
  coefficients (20 bins on [0, 1]) and the histogram of the normalised-Laplacian eigenvalues (40
  bins on [0, 2]), each compared under a Gaussian kernel of the total-variation distance,
  ``k(p, q) = exp(-TV(p, q)^2 / (2 sigma^2))``. Assumed: ``sigma = 0.5`` for all three (GraphRNN
  uses an EMD kernel for degree and clustering; TV is its cheaper sibling).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rayml.graphs.message_passing import add_self_loops, gcn_norm, spmm

__all__ = ["fairness_gaps", "GCN", "train_gcn", "predict_gcn", "degree_histogram", "clustering_histogram",
           "laplacian_spectrum", "spectral_histogram", "gaussian_tv_mmd", "structure_mmd"]


def fairness_gaps(pred: np.ndarray, y: np.ndarray, s: np.ndarray) -> dict:
    """``{"dsp": Delta_SP, "deo": Delta_EO, "acc": accuracy}`` of binary predictions ``pred``.

    A group that is empty (no node with ``s = g``, or no positive of ``s = g`` for ``Delta_EO``)
    makes the gap NaN rather than a made-up number.
    """
    pred, y, s = (np.asarray(a).astype(np.int64).ravel() for a in (pred, y, s))
    if not (pred.shape == y.shape == s.shape):
        raise ValueError(f"pred, y and s must have one entry per node, got {pred.shape}, {y.shape}, {s.shape}")
    for name, a in (("pred", pred), ("y", y), ("s", s)):
        if a.size and not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{name} must be binary (0/1)")

    def rate(mask):
        return float(pred[mask].mean()) if mask.any() else float("nan")

    dsp = abs(rate(s == 0) - rate(s == 1))
    deo = abs(rate((s == 0) & (y == 1)) - rate((s == 1) & (y == 1)))
    return {"dsp": dsp, "deo": deo, "acc": float(np.mean(pred == y)) if pred.size else float("nan")}


def _prop(edges: np.ndarray, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    edges = np.asarray(edges, dtype=np.int64).reshape(2, -1)
    e = torch.as_tensor(np.concatenate([edges, edges[::-1]], 1))
    e = e[:, e[0] != e[1]]
    e = add_self_loops(torch.unique(e, dim=1), n)
    return e, gcn_norm(e, n)


class GCN(nn.Module):
    """Two GCN layers ``softmax(A_hat relu(A_hat X W1) W2)``, ``A_hat = D^-1/2 (A + I) D^-1/2``."""

    def __init__(self, d: int, hidden: int = 16, classes: int = 2):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d, hidden), nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, e: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        h = torch.relu(spmm(e[0], e[1], w, self.l1(x), n))
        return spmm(e[0], e[1], w, self.l2(h), n)


def train_gcn(x: np.ndarray, edges: np.ndarray, y: np.ndarray, train_idx: np.ndarray, seed: int, *,
              hidden: int = 16, epochs: int = 150, lr: float = 0.01, weight_decay: float = 5e-4) -> dict:
    """Train the GCN on the nodes ``train_idx`` of graph ``(x, edges)``; returns ``{"model", "x_mean", "x_std"}``.

    Features are standardised with the training graph's statistics (the same scaling is applied to
    any graph the model later predicts on).
    """
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    train_idx = np.asarray(train_idx, dtype=np.int64)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"x must be (n, d) and y (n,), got {x.shape} and {y.shape}")
    if train_idx.size == 0 or train_idx.min() < 0 or train_idx.max() >= x.shape[0]:
        raise ValueError("train_idx must be a non-empty set of node indices of x")
    torch.manual_seed(int(seed) % (2**63 - 1))
    mean, std = x.mean(0), x.std(0) + 1e-6
    X = torch.as_tensor((x - mean) / std)
    e, w = _prop(edges, x.shape[0])
    model = GCN(x.shape[1], hidden, int(max(2, y.max() + 1)))
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    idx, target = torch.as_tensor(train_idx), torch.as_tensor(y[train_idx])
    for _ in range(epochs):
        loss = nn.functional.cross_entropy(model(X, e, w)[idx], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"model": model, "x_mean": mean, "x_std": std}


def predict_gcn(trained: dict, x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Class predictions of a ``train_gcn`` model on graph ``(x, edges)``."""
    x = np.asarray(x, dtype=np.float32)
    e, w = _prop(edges, x.shape[0])
    with torch.no_grad():
        out = trained["model"](torch.as_tensor((x - trained["x_mean"]) / trained["x_std"]), e, w)
    return out.argmax(1).numpy()


def _adjacency(edges: np.ndarray, n: int) -> np.ndarray:
    A = np.zeros((n, n))
    edges = np.asarray(edges, dtype=np.int64).reshape(2, -1)
    A[edges[0], edges[1]] = 1.0
    A[edges[1], edges[0]] = 1.0
    np.fill_diagonal(A, 0.0)
    return A


def degree_histogram(edges: np.ndarray, n: int, max_degree: int) -> np.ndarray:
    """Normalised histogram of node degrees over ``0 .. max_degree`` (larger degrees in the last bin)."""
    deg = _adjacency(edges, n).sum(1).astype(np.int64)
    h = np.bincount(np.minimum(deg, max_degree), minlength=max_degree + 1).astype(np.float64)
    return h / h.sum()


def clustering_histogram(edges: np.ndarray, n: int, bins: int = 20) -> np.ndarray:
    """Normalised histogram of local clustering coefficients on [0, 1] (nodes of degree < 2 count as 0)."""
    A = _adjacency(edges, n)
    deg = A.sum(1)
    # (A @ A * A).sum(1) = einsum("ij,jk,ki->i", A, A, A) for a symmetric 0/1 A, through BLAS: O(n^3) flops
    # in a matmul rather than a three-operand einsum loop (integer sums, exact in float64, so identical)
    tri = (A @ A * A).sum(1) / 2.0
    c = np.where(deg >= 2, tri / np.maximum(deg * (deg - 1) / 2.0, 1.0), 0.0)
    h, _ = np.histogram(c, bins=bins, range=(0.0, 1.0))
    return h / max(h.sum(), 1)


def laplacian_spectrum(edges: np.ndarray, n: int) -> np.ndarray:
    """Eigenvalues of the normalised Laplacian ``I - D^-1/2 A D^-1/2`` (an isolated node contributes 0), ascending."""
    A = _adjacency(edges, n)
    deg = A.sum(1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-12)), 0.0)
    L = np.diag((deg > 0).astype(float)) - inv[:, None] * A * inv[None, :]
    return np.linalg.eigvalsh(L)


def spectral_histogram(edges: np.ndarray, n: int, bins: int = 40) -> np.ndarray:
    """Normalised histogram of ``laplacian_spectrum`` on [0, 2]."""
    ev = laplacian_spectrum(edges, n)
    h, _ = np.histogram(np.clip(ev, 0.0, 2.0), bins=bins, range=(0.0, 2.0))
    return h / h.sum()


def gaussian_tv_mmd(xs: list[np.ndarray], ys: list[np.ndarray], sigma: float = 0.5) -> float:
    """Squared MMD between two sets of histograms under ``k(p, q) = exp(-TV(p, q)^2 / (2 sigma^2))`` (biased V-statistic)."""
    if not xs or not ys:
        raise ValueError("both sets of histograms must be non-empty")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")

    def k(p, q):
        m = max(p.size, q.size)
        p, q = np.pad(p, (0, m - p.size)), np.pad(q, (0, m - q.size))
        return float(np.exp(-(0.5 * np.abs(p - q).sum()) ** 2 / (2 * sigma ** 2)))

    kxx = np.mean([k(a, b) for a in xs for b in xs])
    kyy = np.mean([k(a, b) for a in ys for b in ys])
    kxy = np.mean([k(a, b) for a in xs for b in ys])
    return float(max(kxx + kyy - 2 * kxy, 0.0))


def structure_mmd(generated: list[np.ndarray], real: np.ndarray, n: int, sigma: float = 0.5) -> dict:
    """``{"degree_mmd", "clustering_mmd", "spectral_mmd"}`` of the generated edge sets against the real one."""
    if not generated:
        raise ValueError("generated must hold at least one edge set")
    max_deg = int(max(_adjacency(e, n).sum(1).max() for e in list(generated) + [real]))
    out = {}
    for name, f in (("degree_mmd", lambda e: degree_histogram(e, n, max_deg)),
                    ("clustering_mmd", lambda e: clustering_histogram(e, n)),
                    ("spectral_mmd", lambda e: spectral_histogram(e, n))):
        out[name] = gaussian_tv_mmd([f(e) for e in generated], [f(real)], sigma)
    return out
