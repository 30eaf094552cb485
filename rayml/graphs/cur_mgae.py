"""Cur-MGAE: a masked graph autoencoder with a structure-aware, self-paced edge-masking curriculum.

Li, Wang, Zhang, Wu, Xiao and Zhu, "Self-supervised Masked Graph Autoencoder via Structure-aware
Curriculum", ICML 2025 (no public code). The pieces (Algorithm 1 of the paper, as far as we could
read it through the abstract, the ICLR reviews and secondary notes):

- encoder: a K-layer GCN on the *visible* graph (the train edges minus the masked ones); every
  layer's output is kept.
- decoder (the S2GAE cross-correlation decoder the method builds on): for a pair ``(u, v)`` the
  Hadamard products ``h_u^(k) * h_v^(l)`` over all layer pairs ``(k, l)``, concatenated, through an
  MLP to an edge logit.
- difficulty measurer: the reconstruction residual of each edge, ``d_e = |A_e - sigma(s_e)| = 1 -
  sigma(s_e)`` for an existing edge, scored by the current model on the full training graph.
- self-paced scheduler: soft selection weights ``S in [0, 1]^E`` minimising
  ``sum_e S_e d_e - lambda sum_e S_e + mu / 2 ||S - S_prev||^2``, i.e.
  ``S = clip(S_prev - (d - lambda) / mu, 0, 1)``, with the pace ``lambda`` growing each epoch so that
  harder edges enter over time.
- masking: a budget of ``mask_ratio * |E|`` edges; ``split_ratio`` of it is drawn from the
  selected edges (``S > 0``) with probability proportional to ``S`` (the pool starts with the easiest
  edges and widens as ``lambda`` grows) and the rest uniformly at random; the masked edges (with as
  many random non-edges) are the reconstruction targets (binary cross-entropy).

Baselines with the same encoder and budget: random edge masking (S2GAE-style: ``split_ratio = 0``),
a shuffled curriculum (the control: Cur-MGAE's schedule on its difficulty scores permuted over the
edges, so the pace and pool are the same but the order ignores structure; its traces measure its
masks on the true scores) and feature masking (GraphMAE-style: a learnable mask token replaces the
features of a fraction of nodes; a one-layer GCN decoder reconstructs them under the scaled cosine
error).

Schedule (the review's fixes; assumed, not read in the paper text): ``warmup`` epochs of random
edge masking first (an untrained model's difficulties are near-uniform and order nothing); the
difficulty of an edge is scored with that edge hidden from the encoder (``folds`` folds of the
training edges, each scored on the graph without it: a held-out residual, not a memorised one),
re-measured every ``measure_every`` epochs; the pace ``lambda`` is the ``q``-quantile of the
current difficulties, ``q`` growing linearly from ``lambda0`` after the warm-up to 1 at the last
epoch, so the selectable pool reaches every edge only at the end; ``mu = 1``; GCN normalisation
with self loops; Adam.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rayml.graphs.message_passing import add_self_loops, gcn_norm, spmm

__all__ = ["MGAEConfig", "GCNEncoder", "CrossCorrelationDecoder", "self_paced_weights", "pace_quantile",
           "heldout_difficulty", "curriculum_mask",
           "pretrain", "METHODS"]

METHODS = ("cur-mgae", "random-edge-mask", "feature-mask", "shuffled-curriculum")


@dataclass(frozen=True)
class MGAEConfig:
    """One pre-training run."""

    method: str = "cur-mgae"
    hidden: int = 64
    layers: int = 2
    epochs: int = 100
    lr: float = 0.01
    mask_ratio: float = 0.5
    split_ratio: float = 0.7
    lambda0: float = 0.3
    mu: float = 1.0
    measure_every: int = 1
    warmup: int = 0
    folds: int = 5

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("hidden", "layers", "epochs", "measure_every", "folds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("mask_ratio", "split_ratio", "lambda0"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)!r}")
        if not 0.0 < self.mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must lie in (0, 1), got {self.mask_ratio!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or not 0 <= self.warmup < self.epochs:
            raise ValueError(f"warmup must be an integer in [0, epochs), got {self.warmup!r}")
        if self.lr <= 0 or self.mu <= 0:
            raise ValueError("lr and mu must be > 0")


def _sym(edges: torch.Tensor) -> torch.Tensor:
    return torch.cat([edges, edges.flip(0)], 1)


class GCNEncoder(nn.Module):
    """K GCN layers ``H <- relu(D^-1/2 (A + I) D^-1/2 H W)``; returns every layer's output."""

    def __init__(self, d_in: int, hidden: int, layers: int):
        super().__init__()
        dims = [d_in] + [hidden] * layers
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> list[torch.Tensor]:
        n = x.shape[0]
        e = add_self_loops(_sym(edges), n)
        w = gcn_norm(e, n)
        out, h = [], x
        for k, lin in enumerate(self.lins):
            h = spmm(e[0], e[1], w, lin(h), n)
            if k < len(self.lins) - 1:
                h = torch.relu(h)
            out.append(h)
        return out


class CrossCorrelationDecoder(nn.Module):
    """Edge logit from ``[h_u^(k) * h_v^(l)]_{k,l}`` through an MLP (S2GAE's decoder)."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(hidden * layers * layers, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, hs: list[torch.Tensor], pairs: torch.Tensor) -> torch.Tensor:
        u, v = pairs[0], pairs[1]
        z = torch.cat([hk[u] * hl[v] for hk in hs for hl in hs], 1)
        z_rev = torch.cat([hk[v] * hl[u] for hk in hs for hl in hs], 1)
        return 0.5 * (self.mlp(z) + self.mlp(z_rev)).squeeze(-1)  # symmetric in (u, v)


def self_paced_weights(difficulty: np.ndarray, prev: np.ndarray, lam: float, mu: float) -> np.ndarray:
    """The self-paced selection step: ``argmin_S S.d - lam sum S + mu/2 ||S - prev||^2`` over ``[0, 1]^E``."""
    return np.clip(prev - (difficulty - lam) / mu, 0.0, 1.0)


def pace_quantile(epoch: int, epochs: int, warmup: int, lambda0: float) -> float:
    """The pace as a quantile of the difficulties: ``lambda0`` at the first curriculum epoch (after
    ``warmup``), growing linearly to 1 at the last epoch (the pool holds every edge only then)."""
    span = max(epochs - 1 - warmup, 1)
    return float(min(1.0, lambda0 + (1.0 - lambda0) * max(epoch - warmup, 0) / span))


def heldout_difficulty(enc: nn.Module, dec: nn.Module, X: torch.Tensor, edges: torch.Tensor, folds: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Each training edge's residual ``1 - sigma(s_e)``, scored by the encoder on the graph without
    the edge's fold (``folds`` random folds), so the score is not read off the edge itself."""
    E = edges.shape[1]
    fold = rng.permutation(E) % max(1, min(folds, E))
    d = np.empty(E)
    with torch.no_grad():
        for f in range(int(fold.max()) + 1):
            hold = fold == f
            hs = enc(X, edges[:, torch.as_tensor(~hold)])
            d[hold] = (1 - torch.sigmoid(dec(hs, edges[:, torch.as_tensor(hold)]))).numpy()
    return d


def curriculum_mask(rng: np.random.Generator, weights: np.ndarray, budget: int, split_ratio: float) -> np.ndarray:
    """Indices of the masked edges: ``split_ratio`` of ``budget`` drawn from the selected pool with
    probability proportional to the self-paced weights (only edges with ``S > 0`` can be drawn; as the
    pace grows the pool widens to harder edges), the rest uniformly among the remaining edges."""
    E = weights.shape[0]
    if not 0 <= budget <= E:
        raise ValueError(f"budget must lie in [0, {E}], got {budget}")
    pool = np.flatnonzero(weights > 0)
    k = min(int(round(split_ratio * budget)), pool.size)
    chosen = (rng.choice(pool, size=k, replace=False, p=weights[pool] / weights[pool].sum()) if k
              else np.array([], dtype=np.int64))
    rest = np.setdiff1d(np.arange(E), chosen)
    extra = rng.choice(rest, size=budget - k, replace=False) if budget > k else np.array([], dtype=np.int64)
    return np.concatenate([chosen, extra]).astype(np.int64)


def _sce(x: torch.Tensor, y: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    cos = nn.functional.cosine_similarity(x, y, dim=-1)
    return ((1 - cos) ** alpha).mean()


def pretrain(x: np.ndarray, train_edges: np.ndarray, cfg: MGAEConfig, seed: int) -> dict:
    """Self-supervised pre-training; returns frozen embeddings and the masking trace.

    Args:
        x: (n, d) node features.
        train_edges: (2, E) training edges, each pair once.
        cfg: the run's settings (``cfg.method`` picks Cur-MGAE or a baseline).
        seed: seeds the weights, the masks and the negatives.

    Returns:
        ``{"embeddings": (n, hidden * layers) array, "masked_difficulty": [per curriculum epoch, the
        mean held-out difficulty of the masked edges], "difficulty_mean": [per curriculum epoch, the
        mean over all edges], "random_masked_difficulty": [the same for a uniform mask of the same
        size, a control], "pool_fraction": [per curriculum epoch, the share of edges with S > 0],
        "difficulty_first": the first curriculum measurement per training edge (or None)}``; the
        traces are empty for the baselines.
    """
    x = np.asarray(x, dtype=np.float32)
    train_edges = np.asarray(train_edges, dtype=np.int64)
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-d feature matrix, got shape {x.shape}")
    if train_edges.ndim != 2 or train_edges.shape[0] != 2 or train_edges.shape[1] < 2:
        raise ValueError(f"train_edges must have shape (2, E) with E >= 2, got {train_edges.shape}")
    if train_edges.min() < 0 or train_edges.max() >= x.shape[0]:
        raise ValueError("train_edges refer to nodes outside x")
    torch.manual_seed(int(seed) % (2**63 - 1))
    rng = np.random.default_rng(int(seed))
    n, E = x.shape[0], train_edges.shape[1]
    X = torch.as_tensor(x)
    edges = torch.as_tensor(train_edges)
    enc = GCNEncoder(x.shape[1], cfg.hidden, cfg.layers)
    params = list(enc.parameters())
    if cfg.method == "feature-mask":
        token = nn.Parameter(torch.zeros(1, x.shape[1]))
        dec_lin = nn.Linear(cfg.hidden, x.shape[1])
        params += [token] + list(dec_lin.parameters())
    else:
        dec = CrossCorrelationDecoder(cfg.hidden, cfg.layers)
        params += list(dec.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr)
    budget = int(round(cfg.mask_ratio * E))
    S = np.zeros(E)
    difficulty = order = np.full(E, 0.5)
    masked_trace, diff_trace, pool_trace, random_trace, first = [], [], [], [], None
    ctrl = np.random.default_rng([int(seed), 1])
    for epoch in range(cfg.epochs):
        curriculum = cfg.method in ("cur-mgae", "shuffled-curriculum") and epoch >= cfg.warmup
        if curriculum and (epoch - cfg.warmup) % cfg.measure_every == 0:
            difficulty = heldout_difficulty(enc, dec, X, edges, cfg.folds, rng)
            # the schedule's scores; the shuffled control assigns the same scores to random edges (its
            # traces below still measure the masks on the true scores)
            order = difficulty[ctrl.permutation(E)] if cfg.method == "shuffled-curriculum" else difficulty
            first = difficulty.copy() if first is None else first
        if cfg.method == "feature-mask":
            nodes = rng.permutation(n)[: int(round(cfg.mask_ratio * n))]
            Xm = X.clone()
            Xm[torch.as_tensor(nodes)] = token
            hs = enc(Xm, edges)
            h = hs[-1].clone()
            h[torch.as_tensor(nodes)] = 0.0  # GraphMAE's re-mask before the decoder
            e = add_self_loops(_sym(edges), n)
            rec = spmm(e[0], e[1], gcn_norm(e, n), dec_lin(h), n)
            loss = _sce(rec[torch.as_tensor(nodes)], X[torch.as_tensor(nodes)])
        else:
            if curriculum:
                # the pace admits the edges at or below the quantile (d <= lambda: the hardest one at q = 1)
                lam = float(np.quantile(order, pace_quantile(epoch, cfg.epochs, cfg.warmup, cfg.lambda0))) + 1e-9
                S = self_paced_weights(order, S, lam, cfg.mu)
                pool_trace.append(float((S > 0).mean()))
                mask = curriculum_mask(rng, S, budget, cfg.split_ratio)
                masked_trace.append(float(difficulty[mask].mean()))
                diff_trace.append(float(difficulty.mean()))
                # the same scores under a uniform mask of the same size (the trace's own random control)
                random_trace.append(float(difficulty[ctrl.choice(E, size=budget, replace=False)].mean()))
            else:  # random edge masking (the baseline, and Cur-MGAE's warm-up)
                mask = rng.choice(E, size=budget, replace=False)
            keep = np.ones(E, dtype=bool)
            keep[mask] = False
            pos = edges[:, torch.as_tensor(mask)]
            neg = torch.as_tensor(rng.integers(0, n, size=(2, budget)))
            hs = enc(X, edges[:, torch.as_tensor(keep)])
            logits = dec(hs, torch.cat([pos, neg], 1))
            target = torch.cat([torch.ones(budget), torch.zeros(budget)])
            loss = nn.functional.binary_cross_entropy_with_logits(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        emb = torch.cat(enc(X, edges), 1).numpy()
    return {"embeddings": emb, "masked_difficulty": masked_trace, "difficulty_mean": diff_trace,
            "pool_fraction": pool_trace, "random_masked_difficulty": random_trace, "difficulty_first": first}
