"""N2GON: a position-aware neural network for Graph-of-Net (GON), with its ablations as baselines.

Wang, Zhao, Wang, Shan, Li, Li, Huang, Wang, Pan and Wang, "N2GON: Neural Networks for
Graph-of-Net with Position Awareness", ICML 2025 (no public code). In a GON every node is a graph
(``rayml.graphs.graph_of_net_data``). Algorithm 1 of the paper (read through a secondary
reproducibility summary; the full text was not reachable):

    while not converged:
        encode every node-graph G_i by F1 (Eq. 2)                  -> h_Gi   (intra-graph encoder)
        update {h_Gi} by F2 over the GON's edges (Eq. 3)           -> v_Gi   (inter-graph encoder)
        generate the constraint net C (Eq. 4) and Pi (Eq. 6)      (graph constructors, positions)
        loss = NLL(labels) + L_con (Eq. 7); optimise F1 and F2

What each piece is here (every detail marked "assumed" is ours, not read in the paper):

- ``IntraEncoder`` (F1, Eq. 2): GIN layers ``h <- relu(W ((1 + eps) h + sum_{u in N(v)} h_u))`` over the
  disjoint union of all node-graphs (sparse ``spmm``), then a readout ``LayerNorm([mean || max])``
  per graph. assumed: GIN layers with one linear map each, the mean / max readout and its LayerNorm.
- ``InterEncoder`` (F2, Eq. 3): GCN layers ``v <- D^-1/2 (A + I) D^-1/2 v W`` over the GON's edges.
  assumed: GCN.
- graph constructors (Eq. 4): the constraint net ``C`` is the union, with weights, of (a) the GON's
  own edges, (b) must-links between labelled node-graphs of the same class (the "additional data
  like node labels" of the abstract) and (c) a refining constructor: the kNN graph over the current
  inter-graph embeddings ``v`` (detached), rebuilt every ``refine_every`` epochs ("build and refine
  a constraint network"). assumed: the three parts, their weights, k, the refresh period.
- positions and ``Pi`` (Eqs. 5-6): each node-graph gets a position ``p_i = W_p v_i`` in
  ``R^pos_dim``; ``Pi_ij = exp(-||p_i - p_j||^2) / sum_{k != i} exp(-||p_i - p_k||^2)`` is where the
  constraint system places node ``j`` relative to node ``i``. assumed: a linear position head and
  this softmax over squared distances (an SNE-style kernel).
- constraint loss (Eq. 7): ``L_con = - sum_{(i,j) in C} w_ij log Pi_ij / sum w_ij`` (nodes linked
  in ``C`` are placed close; every other node competes in the denominator). assumed: this form.
- prediction: a linear classifier on ``relu([v_i || p_i])`` ("nodes are adaptively arranged based on
  their positions"), trained with NLL on the labelled node-graphs plus ``lam * L_con``.
  assumed: the classifier reads positions; ``lam = 1`` is the paper's setting (unknown to us).

Baselines and ablations of equal parameter count (``build_model`` matches widths, ``n_params``
checks it): ``gcn`` (a plain two-layer GCN, Kipf and Welling, on one flat vector per node-graph,
``graph_of_net_data.flat_features``, over the GON's edges: the strongest simple baseline),
``intra-only`` (F1, then an MLP in place of F2: the GON's edges unused), ``inter-only`` (each
node-graph only through its node contents: F1 without intra-graph message passing, a DeepSets
encoder, then F2) and ``dual-encoder`` (N2GON with ``lam = 0``: the ablation without the constraint
network). Label propagation and logistic regression, which train no network, are in
``rayml.graphs.graph_of_net_baselines``.

``train`` returns a ``FittedGON`` (the weights of the epoch with the best validation accuracy)
under ``"model"``; its ``predict`` / ``predict_proba`` classify the node-graphs of any GON.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rayml.graphs.graph_of_net_data import GraphOfNet, flat_features
from rayml.graphs.message_passing import add_self_loops, gcn_norm, segment_mean, spmm

__all__ = ["N2GONConfig", "METHODS", "IntraEncoder", "InterEncoder", "N2GON", "IntraOnly", "InterOnly", "GCN",
           "segment_max", "readout", "constraint_net", "positions_pi", "constraint_loss", "build_model",
           "n_params", "FittedGON", "train"]

METHODS = ("n2gon", "intra-only", "inter-only", "dual-encoder", "gcn")


@dataclass(frozen=True)
class N2GONConfig:
    """One training run of N2GON or one of its baselines (``method``)."""

    method: str = "n2gon"
    hidden: int = 32
    intra_layers: int = 2
    inter_layers: int = 2
    pos_dim: int = 8
    lam: float = 1.0
    label_weight: float = 1.0
    refine_k: int = 3
    refine_weight: float = 0.5
    refine_every: int = 10
    epochs: int = 100
    lr: float = 0.01
    weight_decay: float = 5e-4
    dropout: float = 0.0
    eval_every: int = 5

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("hidden", "intra_layers", "inter_layers", "pos_dim", "refine_k", "refine_every", "epochs",
                     "eval_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("lam", "label_weight", "refine_weight", "weight_decay"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")


def segment_max(x: torch.Tensor, batch: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Per-graph maxima of node rows (``batch[i]`` is node ``i``'s graph; every graph non-empty)."""
    idx = batch.long().unsqueeze(-1).expand_as(x)
    out = torch.full((n_segments, x.shape[1]), float("-inf"), dtype=x.dtype)
    return out.scatter_reduce(0, idx, x, reduce="amax", include_self=True)


def readout(h: torch.Tensor, batch: torch.Tensor, n_graphs: int) -> torch.Tensor:
    """``[mean || max]`` of each node-graph's node rows."""
    return torch.cat([segment_mean(h, batch, n_graphs), segment_max(h, batch, n_graphs)], 1)


def _init(module: nn.Module) -> None:
    """He (ReLU) initialisation of every linear map, zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)


def _sym(edges: torch.Tensor) -> torch.Tensor:
    return torch.cat([edges, edges.flip(0)], 1)


class IntraEncoder(nn.Module):
    """F1 (Eq. 2): GIN layers over every node-graph at once (a disjoint union), then ``LN([mean || max])``.

    Each layer is ``h <- relu(W ((1 + eps) h + sum_{u in N(v)} h_u))`` (assumed: one linear map
    per layer, He initialisation; deeper per-layer MLPs trained much slower here; the LayerNorm on
    the graph readout, without which the sums of large node-graphs stalled F2's training). With
    ``message_passing=False`` the neighbour sum is dropped (a DeepSets encoder: node contents only,
    no intra-graph edges), which is the inter-only baseline's encoder.
    """

    def __init__(self, d_in: int, hidden: int, layers: int, dropout: float = 0.0, message_passing: bool = True):
        super().__init__()
        dims = [d_in] + [hidden] * layers
        self.mlps = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.eps = nn.Parameter(torch.zeros(layers)) if message_passing else None
        self.norm = nn.LayerNorm(2 * hidden)
        self.dropout = dropout
        _init(self)

    def forward(self, x: torch.Tensor, edges: torch.Tensor, batch: torch.Tensor, n_graphs: int) -> torch.Tensor:
        e = _sym(edges)
        h = x
        for k, mlp in enumerate(self.mlps):
            if self.eps is not None:
                h = (1 + self.eps[k]) * h + spmm(e[0], e[1], None, h, h.shape[0])
            h = torch.relu(mlp(h))
            h = nn.functional.dropout(h, self.dropout, self.training)
        return self.norm(readout(h, batch, n_graphs))


class InterEncoder(nn.Module):
    """F2 (Eq. 3): GCN layers over the GON's edges (ReLU between layers; the first maps ``d_in`` to ``hidden``)."""

    def __init__(self, d_in: int, hidden: int, layers: int, dropout: float = 0.0):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(d_in if k == 0 else hidden, hidden) for k in range(layers))
        self.dropout = dropout
        _init(self)

    def forward(self, h: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        n = h.shape[0]
        e = add_self_loops(_sym(edges), n)
        w = gcn_norm(e, n)
        for k, lin in enumerate(self.lins):
            h = spmm(e[0], e[1], w, lin(torch.relu(h) if k else h), n)
            if k < len(self.lins) - 1:
                h = nn.functional.dropout(h, self.dropout, self.training)
        return h


class N2GON(nn.Module):
    """F1 -> F2 -> positions ``p = W_p v``; logits from ``[v || p]``. ``forward`` returns ``(logits, v, p)``."""

    def __init__(self, d_in: int, n_classes: int, hidden: int, intra_layers: int, inter_layers: int, pos_dim: int,
                 dropout: float = 0.0):
        super().__init__()
        self.f1 = IntraEncoder(d_in, hidden, intra_layers, dropout)
        self.f2 = InterEncoder(2 * hidden, hidden, inter_layers, dropout)
        self.pos = nn.Linear(hidden, pos_dim)
        self.cls = nn.Linear(hidden + pos_dim, n_classes)
        self.dropout = dropout

    def forward(self, x, intra_edges, batch, inter_edges, n_graphs):
        v = self.f2(self.f1(x, intra_edges, batch, n_graphs), inter_edges)
        p = self.pos(v)
        z = nn.functional.dropout(torch.relu(torch.cat([v, p], 1)), self.dropout, self.training)
        return self.cls(z), v, p


class IntraOnly(nn.Module):
    """Baseline: F1, then an MLP of F2's depth in F2's place (the GON's edges are not used)."""

    def __init__(self, d_in: int, n_classes: int, hidden: int, intra_layers: int, inter_layers: int,
                 dropout: float = 0.0):
        super().__init__()
        self.f1 = IntraEncoder(d_in, hidden, intra_layers, dropout)
        self.mlp = nn.ModuleList(nn.Linear(2 * hidden if k == 0 else hidden, hidden) for k in range(inter_layers))
        _init(self.mlp)
        self.cls = nn.Linear(hidden, n_classes)
        self.dropout = dropout

    def forward(self, x, intra_edges, batch, inter_edges, n_graphs):
        h = self.f1(x, intra_edges, batch, n_graphs)
        for k, lin in enumerate(self.mlp):
            h = lin(torch.relu(h) if k else h)
        z = nn.functional.dropout(torch.relu(h), self.dropout, self.training)
        return self.cls(z), h, None


class InterOnly(nn.Module):
    """Baseline: each node-graph only through its node contents (F1 without its neighbour sums: a
    DeepSets encoder, the intra-graph edges unused), then F2 over the GON's edges."""

    def __init__(self, d_in: int, n_classes: int, hidden: int, intra_layers: int, inter_layers: int,
                 dropout: float = 0.0):
        super().__init__()
        self.f1 = IntraEncoder(d_in, hidden, intra_layers, dropout, message_passing=False)
        self.f2 = InterEncoder(2 * hidden, hidden, inter_layers, dropout)
        self.cls = nn.Linear(hidden, n_classes)
        self.dropout = dropout

    def forward(self, x, intra_edges, batch, inter_edges, n_graphs):
        v = self.f2(self.f1(x, intra_edges, batch, n_graphs), inter_edges)
        z = nn.functional.dropout(torch.relu(v), self.dropout, self.training)
        return self.cls(z), v, None


class GCN(nn.Module):
    """Baseline: a plain two-layer GCN (Kipf and Welling) on one flat vector per node-graph over the
    GON's edges: ``logits = A_hat relu(A_hat X W1) W2`` (``A_hat = D^-1/2 (A + I) D^-1/2``)."""

    def __init__(self, d_in: int, n_classes: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.enc = InterEncoder(d_in, hidden, 1, dropout)
        self.out = InterEncoder(hidden, n_classes, 1)
        self.dropout = dropout

    def forward(self, x, intra_edges, batch, inter_edges, n_graphs):
        """``x`` holds the flat vectors (one row per node-graph); the node-graphs' nodes are unused."""
        h = nn.functional.dropout(torch.relu(self.enc(x, inter_edges)), self.dropout, self.training)
        return self.out(h, inter_edges), h, None


def n_params(model: nn.Module) -> int:
    """The number of trainable scalars of ``model``."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def _make(method: str, d_in: int, n_classes: int, cfg: N2GONConfig, hidden: int) -> nn.Module:
    if method in ("n2gon", "dual-encoder"):
        return N2GON(d_in, n_classes, hidden, cfg.intra_layers, cfg.inter_layers, cfg.pos_dim, cfg.dropout)
    if method == "gcn":
        return GCN(d_in, n_classes, hidden, cfg.dropout)
    cls = IntraOnly if method == "intra-only" else InterOnly
    return cls(d_in, n_classes, hidden, cfg.intra_layers, cfg.inter_layers, cfg.dropout)


def build_model(cfg: N2GONConfig, d_in: int, n_classes: int, d_flat: int | None = None) -> nn.Module:
    """The model of ``cfg.method``; a baseline's width is the one whose parameter count is closest to
    N2GON's at ``cfg.hidden`` (the equal-size comparison). ``d_in``: the node features' width;
    ``d_flat``: the flat vectors' width (the ``gcn`` baseline's input; required for it)."""
    target = n_params(_make("n2gon", d_in, n_classes, cfg, cfg.hidden))
    if cfg.method in ("n2gon", "dual-encoder"):
        return _make(cfg.method, d_in, n_classes, cfg, cfg.hidden)
    if cfg.method == "gcn" and d_flat is None:
        raise ValueError("d_flat is required for the gcn baseline")
    d = d_flat if cfg.method == "gcn" else d_in
    best, gap = 2, None
    for w in range(2, 64 * cfg.hidden + 1):  # the count grows with the width: stop once past the target
        count = n_params(_make(cfg.method, d, n_classes, cfg, w))
        if gap is None or abs(count - target) < gap:
            best, gap = w, abs(count - target)
        if count >= target:
            break
    return _make(cfg.method, d, n_classes, cfg, best)


def _knn_pairs(z: torch.Tensor, k: int) -> torch.Tensor:
    """Directed pairs ``(i, j)``: ``j`` among the ``k`` nearest other rows of ``z`` to ``i`` (Euclidean)."""
    d = torch.cdist(z, z)
    d.fill_diagonal_(float("inf"))
    nn_idx = torch.topk(d, k, dim=1, largest=False).indices
    return torch.stack([torch.arange(z.shape[0]).repeat_interleave(k), nn_idx.reshape(-1)])


def constraint_net(inter_edges: torch.Tensor, n: int, y: torch.Tensor | None = None,
                   labelled: torch.Tensor | None = None, v: torch.Tensor | None = None, *,
                   label_weight: float = 1.0, refine_k: int = 3, refine_weight: float = 0.5
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The graph constructors (Eq. 4, assumed form): the constraint net ``C`` as ``(pairs, weights)``.

    ``C`` holds both directions of (a) every GON edge (weight 1), (b) every pair of labelled
    node-graphs of the same class (``label_weight``) and (c) the kNN pairs over ``v`` (detached;
    ``refine_weight``). Repeated pairs add their weights; self pairs are dropped.
    """
    if inter_edges.dim() != 2 or inter_edges.shape[0] != 2:
        raise ValueError(f"inter_edges must have shape (2, E), got {tuple(inter_edges.shape)}")
    parts, weights = [_sym(inter_edges.long())], [torch.ones(2 * inter_edges.shape[1])]
    if labelled is not None and label_weight > 0:
        if y is None:
            raise ValueError("y is required when labelled is given")
        lab = labelled.long()
        same = (y[lab][:, None] == y[lab][None, :]) & ~torch.eye(lab.numel(), dtype=torch.bool)
        i, j = torch.nonzero(same, as_tuple=True)
        parts.append(torch.stack([lab[i], lab[j]]))
        weights.append(torch.full((i.numel(),), float(label_weight)))
    if v is not None and refine_weight > 0 and refine_k > 0:
        pr = _knn_pairs(v.detach(), min(refine_k, n - 1))
        parts.append(_sym(pr))
        weights.append(torch.full((2 * pr.shape[1],), float(refine_weight)))
    pairs, w = torch.cat(parts, 1), torch.cat(weights)
    keep = pairs[0] != pairs[1]
    return pairs[:, keep], w[keep]


def positions_pi(p: torch.Tensor) -> torch.Tensor:
    """``log Pi`` (Eq. 6, assumed form): row ``i`` is ``log softmax_{j != i}(-||p_i - p_j||^2)``."""
    d2 = torch.cdist(p, p).pow(2)
    d2 = d2 + torch.diag(torch.full((p.shape[0],), float("inf")))
    return torch.log_softmax(-d2, dim=1)


def constraint_loss(p: torch.Tensor, pairs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``L_con`` (Eq. 7, assumed form): ``- sum_{(i,j) in C} w_ij log Pi_ij / sum w_ij``."""
    if pairs.numel() == 0:
        return p.sum() * 0.0
    logpi = positions_pi(p)
    return -(weights * logpi[pairs[0], pairs[1]]).sum() / weights.sum()


def _check_gon(gon: GraphOfNet, split: dict | None) -> None:
    if not isinstance(gon, GraphOfNet):
        raise TypeError(f"gon must be a GraphOfNet, got {type(gon).__name__}")
    if gon.x.ndim != 2 or gon.batch.shape != (gon.x.shape[0],):
        raise ValueError(f"gon.x must be (nodes, d) and gon.batch (nodes,), got {gon.x.shape}, {gon.batch.shape}")
    if gon.n_graphs < 2 or set(np.unique(gon.batch)) != set(range(gon.n_graphs)):
        raise ValueError("gon.batch must map nodes onto every node-graph 0..n_graphs-1 (each non-empty)")
    for name, e, n in (("intra_edges", gon.intra_edges, gon.x.shape[0]),
                       ("inter_edges", gon.inter_edges, gon.n_graphs)):
        if e.ndim != 2 or e.shape[0] != 2:
            raise ValueError(f"gon.{name} must have shape (2, E), got {e.shape}")
        if e.size and (e.min() < 0 or e.max() >= n):
            raise ValueError(f"gon.{name} refer to ids outside [0, {n})")
    for key in (() if split is None else ("train", "val", "test")):
        idx = np.asarray(split.get(key, []))
        if idx.size == 0 or idx.min() < 0 or idx.max() >= gon.n_graphs:
            raise ValueError(f"split[{key!r}] must be non-empty node-graph ids in [0, {gon.n_graphs})")


def _inputs(gon: GraphOfNet, method: str) -> tuple:
    """The forward arguments of a model on ``gon``: node features (flat vectors for ``gcn``), intra
    edges, batch, inter edges, number of node-graphs."""
    x = flat_features(gon) if method == "gcn" else gon.x
    return (torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(gon.intra_edges, dtype=torch.int64),
            torch.as_tensor(gon.batch, dtype=torch.int64), torch.as_tensor(gon.inter_edges, dtype=torch.int64),
            gon.n_graphs)


@dataclass
class FittedGON:
    """A trained N2GON (or baseline) with the weights of its best validation epoch.

    Attributes:
        model: the ``nn.Module`` (eval mode).
        method: the ``N2GONConfig.method`` it was trained as.
        n_classes: the number of classes it predicts.
    """

    model: nn.Module
    method: str
    n_classes: int

    def predict_proba(self, gon: GraphOfNet) -> np.ndarray:
        """(n_graphs, n_classes) class probabilities of every node-graph of ``gon`` (the training GON
        for transductive use, or a new one: the encoders apply to any GON with the same features)."""
        _check_gon(gon, None)
        self.model.eval()
        with torch.no_grad():
            logits = self.model(*_inputs(gon, self.method))[0]
        return torch.softmax(logits, 1).numpy()

    def predict(self, gon: GraphOfNet) -> np.ndarray:
        """(n_graphs,) the predicted class of every node-graph of ``gon``."""
        return self.predict_proba(gon).argmax(1)


def train(gon: GraphOfNet, split: dict, cfg: N2GONConfig, seed: int) -> dict:
    """Train ``cfg.method`` on the GON's labelled node-graphs (Algorithm 1 for N2GON; full batch).

    Args:
        gon: the Graph-of-Net.
        split: ``{"train", "val", "test"}`` node-graph ids (transductive: all node-graphs are seen,
            only the train labels are used).
        cfg: the run's settings.
        seed: seeds the weights and dropout.

    Returns:
        ``{"val_acc", "test_acc"}`` at the evaluation with the best validation accuracy (earliest on
        ties), ``"params"``, ``"best_epoch"``, ``"l_con"`` (the last constraint loss; N2GON only)
        and ``"model"``: a ``FittedGON`` holding the weights of that evaluation.
    """
    _check_gon(gon, split)
    torch.manual_seed(int(seed) % (2**63 - 1))
    X, E_in, B, E_out, n = _inputs(gon, cfg.method)
    y = torch.as_tensor(gon.y, dtype=torch.int64)
    tr, va, te = (torch.as_tensor(np.asarray(split[k]), dtype=torch.int64) for k in ("train", "val", "test"))
    model = build_model(cfg, gon.x.shape[1], gon.n_classes, X.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    use_con = cfg.method == "n2gon" and cfg.lam > 0
    pairs = weights = None
    best = (-1.0, 0.0, 0)
    l_con = float("nan")
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        logits, v, p = model(X, E_in, B, E_out, n)
        loss = nn.functional.cross_entropy(logits[tr], y[tr])
        if use_con:
            if pairs is None or (epoch - 1) % cfg.refine_every == 0:  # build, then refine, the constraint net
                pairs, weights = constraint_net(E_out, n, y, tr, v, label_weight=cfg.label_weight,
                                                refine_k=cfg.refine_k, refine_weight=cfg.refine_weight)
            lc = constraint_loss(p, pairs, weights)
            loss = loss + cfg.lam * lc
            l_con = float(lc.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
            model.eval()
            with torch.no_grad():
                pred = model(X, E_in, B, E_out, n)[0].argmax(1)
            acc_va = float((pred[va] == y[va]).float().mean())
            if acc_va > best[0]:
                best = (acc_va, float((pred[te] == y[te]).float().mean()), epoch)
                best_state = copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    model.eval()
    return {"val_acc": best[0], "test_acc": best[1], "best_epoch": best[2], "params": n_params(model),
            "l_con": l_con, "model": FittedGON(model, cfg.method, gon.n_classes)}
