"""Message-passing GNNs for (mixed-integer) linearly constrained quadratic programs.

Chen, Chen, Liu, Wang and Yin, "Expressive Power of Graph Neural Networks for (Mixed-Integer)
Quadratic Programs", ICML 2025 (arXiv 2406.05938; code liujl11git/GNN-QP).

- ``encode``: the LCQP-graph of Section 2: one node per constraint with features ``(b_i, circ_i)``
  (``circ_i`` = 1 for an equality), one node per variable with ``(c_j, l_j, u_j)`` (plus finiteness
  flags of the bounds, and the integrality flag for MI-LCQPs), an edge ``A_ij`` between constraint
  ``i`` and variable ``j`` and an edge ``Q_jj'`` between variables ``j, j'`` (diagonal included).
- ``QPGNN``: the message-passing GNN of Section 3 (as in the authors' ``models.py``):
  ``h_c <- g([h_c, sum_j A_ij f(h_v_j)])`` then
  ``h_v <- g'([h_v, sum_i A_ij f'(h_c_i), sum_j' Q_jj' f''(h_v_j')])``, ReLU between layers; graph
  readout ``r([mean h_v, mean h_c])`` for feasibility and the optimal objective, node readout
  ``r([h_v_j, mean h_v, mean h_c])`` for the optimal solution. ``edge_mode="gather_first"`` is the
  mixed-integer variant of the authors' code (messages ``f([A_ij, h_j])``, nonlinear in the weight).
- ``wl_colors``: the WL test on LCQP-graphs (Algorithm 1 of the paper, the colour refinement the
  separation theorems are stated in): two instances with equal colour histograms are mapped to
  the same output by every MP-GNN; an MI-LCQP is *unfoldable* when the refinement gives every
  variable its own colour.
- the GNN classes compared in the separation experiment: ``use_q=False`` (an LP-GNN that sees only
  ``diag Q`` as a variable feature), the paper's GNN, and the paper's GNN with random node features.

Assumed (not read in the paper text, which we could reach only through the abstract, reviews and
the authors' code): targets are standardised by their training mean and standard deviation; the
losses are the authors' relative squared errors (objective ``(y - y')^2 / max(y^2, 1)``, solution
``||x - x'||^2 / max(||x||^2, 1)``) and binary cross-entropy for feasibility; Adam, minibatches of
whole graphs, fixed epochs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from rayml.graphs.message_passing import segment_mean, segment_sum, spmm
from rayml.optim.qp_instances import QP

__all__ = ["QPGraph", "encode", "collate", "QPGNN", "TrainConfig", "train", "predict", "relative_errors",
           "wl_colors", "wl_indistinguishable", "is_unfoldable", "TARGETS", "CLASSES"]

TARGETS = ("objective", "solution", "feasibility")
CLASSES = ("qp-gnn", "lp-gnn", "qp-gnn-rf")
CONS_DIM = 2
VAR_DIM = 7  # c, l, u, l finite, u finite, integer, diag Q (read only by the LP-GNN class)


@dataclass
class QPGraph:
    """A batch of LCQP-graphs as one disjoint union (node ids offset per graph)."""

    cons_x: torch.Tensor  # (Nc, CONS_DIM)
    var_x: torch.Tensor  # (Nv, VAR_DIM)
    a_cons: torch.Tensor  # (Ea,) constraint node of each A edge
    a_var: torch.Tensor  # (Ea,) variable node of each A edge
    a_val: torch.Tensor  # (Ea,)
    q_row: torch.Tensor  # (Eq,)
    q_col: torch.Tensor  # (Eq,)
    q_val: torch.Tensor  # (Eq,)
    cons_batch: torch.Tensor  # (Nc,)
    var_batch: torch.Tensor  # (Nv,)
    n_graphs: int


def encode(qp: QP) -> dict:
    """The LCQP-graph of one instance as numpy arrays (Section 2 of the paper)."""
    if not isinstance(qp, QP):
        raise TypeError(f"qp must be a QP, got {type(qp).__name__}")
    fl, fu = np.isfinite(qp.lb), np.isfinite(qp.ub)
    var_x = np.stack([qp.c, np.where(fl, qp.lb, 0.0), np.where(fu, qp.ub, 0.0), fl, fu,
                      qp.integer.astype(float), np.diag(qp.Q)], axis=1)
    cons_x = np.stack([qp.b, qp.eq.astype(float)], axis=1) if qp.m else np.zeros((0, CONS_DIM))
    ai, aj = np.nonzero(qp.A)
    qi, qj = np.nonzero(qp.Q)
    return {"cons_x": cons_x, "var_x": var_x, "a": (ai, aj, qp.A[ai, aj]), "q": (qi, qj, qp.Q[qi, qj])}


def collate(graphs: Sequence[dict]) -> QPGraph:
    """Batch encoded graphs into one ``QPGraph``."""
    if not graphs:
        raise ValueError("graphs must not be empty")
    cons, var, ac, av, aw, qr, qc, qw, cb, vb = [], [], [], [], [], [], [], [], [], []
    oc = ov = 0
    for g_id, g in enumerate(graphs):
        m, n = g["cons_x"].shape[0], g["var_x"].shape[0]
        cons.append(g["cons_x"])
        var.append(g["var_x"])
        ai, aj, a = g["a"]
        ac.append(ai + oc)
        av.append(aj + ov)
        aw.append(a)
        qi, qj, q = g["q"]
        qr.append(qi + ov)
        qc.append(qj + ov)
        qw.append(q)
        cb.append(np.full(m, g_id))
        vb.append(np.full(n, g_id))
        oc, ov = oc + m, ov + n
    f = lambda parts: torch.as_tensor(np.concatenate(parts), dtype=torch.float32)  # noqa: E731
    i = lambda parts: torch.as_tensor(np.concatenate(parts), dtype=torch.int64)  # noqa: E731
    return QPGraph(f(cons), f(var), i(ac), i(av), f(aw), i(qr), i(qc), f(qw), i(cb), i(vb), len(graphs))


def _mlp(d_in: int, d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d))


class _Layer(nn.Module):
    """One round: variables -> constraints, then constraints (and Q neighbours) -> variables."""

    def __init__(self, d: int, use_q: bool, gather_first: bool):
        super().__init__()
        self.use_q, self.gather_first = use_q, gather_first
        e = 1 if gather_first else 0
        self.f_v2c, self.g_c = _mlp(d + e, d), _mlp(2 * d, d)
        self.f_c2v = _mlp(d + e, d)
        self.f_q = _mlp(d + e, d) if use_q else None
        self.g_v = _mlp((3 if use_q else 2) * d, d)

    def _message(self, f, rows, cols, vals, h, n):
        if self.gather_first:  # f([w_e, h_src]) summed: the mixed-integer variant
            return spmm(rows, torch.arange(rows.shape[0]), None, f(torch.cat([vals[:, None], h[cols]], 1)), n)
        return spmm(rows, cols, vals, f(h), n)

    def forward(self, g: QPGraph, hc: torch.Tensor, hv: torch.Tensor):
        nc, nv = hc.shape[0], hv.shape[0]
        mc = self._message(self.f_v2c, g.a_cons, g.a_var, g.a_val, hv, nc)
        hc = torch.relu(self.g_c(torch.cat([hc, mc], 1)))
        mv = self._message(self.f_c2v, g.a_var, g.a_cons, g.a_val, hc, nv)
        parts = [hv, mv]
        if self.use_q:
            parts.append(self._message(self.f_q, g.q_row, g.q_col, g.q_val, hv, nv))
        hv = torch.relu(self.g_v(torch.cat(parts, 1)))
        return hc, hv


class QPGNN(nn.Module):
    """The paper's message-passing GNN on LCQP-graphs (see the module docstring).

    Args:
        emb: hidden width (the paper's experiments vary it).
        layers: message-passing rounds.
        level: ``"graph"`` (feasibility, objective) or ``"node"`` (solution).
        gnn_class: ``"qp-gnn"`` (the paper's), ``"lp-gnn"`` (no ``Q`` edges; ``diag Q`` as a
            feature), ``"qp-gnn-rf"`` (the paper's plus one random feature per node per call).
        gather_first: the mixed-integer message variant of the authors' code.
    """

    def __init__(self, emb: int = 32, layers: int = 2, *, level: str = "graph", gnn_class: str = "qp-gnn",
                 gather_first: bool = False):
        super().__init__()
        if isinstance(emb, bool) or not isinstance(emb, int) or emb < 1:
            raise ValueError(f"emb must be an integer >= 1, got {emb!r}")
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be an integer >= 1, got {layers!r}")
        if level not in ("graph", "node"):
            raise ValueError(f"level must be 'graph' or 'node', got {level!r}")
        if gnn_class not in CLASSES:
            raise ValueError(f"gnn_class must be one of {CLASSES}, got {gnn_class!r}")
        self.level, self.gnn_class = level, gnn_class
        self.use_q, self.rf = gnn_class != "lp-gnn", gnn_class == "qp-gnn-rf"
        extra = 1 if self.rf else 0
        var_in = VAR_DIM - (1 if self.use_q else 0)  # the Q-aware classes read Q through edges only
        self.cons_emb = nn.Sequential(nn.Linear(CONS_DIM + extra, emb), nn.ReLU())
        self.var_emb = nn.Sequential(nn.Linear(var_in + extra, emb), nn.ReLU())
        self.layers = nn.ModuleList(_Layer(emb, self.use_q, gather_first) for _ in range(layers))
        self.readout = nn.Sequential(nn.Linear((3 if level == "node" else 2) * emb, emb), nn.ReLU(),
                                     nn.Linear(emb, 1, bias=False))

    def forward(self, g: QPGraph, generator: torch.Generator | None = None) -> torch.Tensor:
        cx, vx = g.cons_x, g.var_x[:, :-1] if self.use_q else g.var_x
        if self.rf:
            cx = torch.cat([cx, torch.rand(cx.shape[0], 1, generator=generator)], 1)
            vx = torch.cat([vx, torch.rand(vx.shape[0], 1, generator=generator)], 1)
        hc, hv = self.cons_emb(cx), self.var_emb(vx)
        for layer in self.layers:
            hc, hv = layer(g, hc, hv)
        pooled = torch.cat([segment_mean(hv, g.var_batch, g.n_graphs),
                            segment_mean(hc, g.cons_batch, g.n_graphs)], 1)
        if self.level == "node":
            return self.readout(torch.cat([hv, pooled[g.var_batch]], 1)).squeeze(-1)
        return self.readout(pooled).squeeze(-1)


@dataclass(frozen=True)
class TrainConfig:
    """Training of one GNN on one target."""

    target: str = "objective"
    gnn_class: str = "qp-gnn"
    emb: int = 32
    layers: int = 2
    epochs: int = 100
    batch: int = 32
    lr: float = 1e-3
    gather_first: bool = False

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        if self.gnn_class not in CLASSES:
            raise ValueError(f"gnn_class must be one of {CLASSES}, got {self.gnn_class!r}")
        for name in ("emb", "layers", "epochs", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _labels(target: str, labels: Sequence) -> list[np.ndarray]:
    if target == "solution":
        return [np.asarray(x, dtype=np.float64) for x in labels]
    return [np.asarray([float(y)]) for y in labels]


def train(graphs: Sequence[dict], labels: Sequence, cfg: TrainConfig, seed: int):
    """Fit a ``QPGNN`` to ``labels`` (objective values, solutions or 0/1 feasibility) by Adam.

    Returns ``(model, scale)``, where ``scale = (mean, std)`` standardised the regression targets.
    """
    if len(graphs) != len(labels) or not graphs:
        raise ValueError(f"graphs and labels must be non-empty and of equal length, got {len(graphs)}, {len(labels)}")
    torch.manual_seed(int(seed) % (2**63 - 1))
    gen = torch.Generator().manual_seed(int(seed) % (2**63 - 1) + 1)
    ys = _labels(cfg.target, labels)
    if cfg.target == "feasibility":
        mean, std = 0.0, 1.0
    else:
        flat = np.concatenate(ys)
        mean, std = float(flat.mean()), float(flat.std() + 1e-8)
    model = QPGNN(cfg.emb, cfg.layers, level="node" if cfg.target == "solution" else "graph",
                  gnn_class=cfg.gnn_class, gather_first=cfg.gather_first)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    rng = np.random.default_rng(int(seed) % (2**63 - 1))
    n = len(graphs)
    batches = [(collate([graphs[k] for k in range(s, min(s + cfg.batch, n))]),
                torch.as_tensor(np.concatenate(ys[s:s + cfg.batch]), dtype=torch.float32))
               for s in range(0, n, cfg.batch)] if n <= cfg.batch else None
    for _ in range(cfg.epochs):
        if batches is None:
            order = rng.permutation(n)
            epoch = [(collate([graphs[k] for k in order[s:s + cfg.batch]]),
                      torch.as_tensor(np.concatenate([ys[k] for k in order[s:s + cfg.batch]]), dtype=torch.float32))
                     for s in range(0, n, cfg.batch)]
        else:
            epoch = batches
        for g, y in epoch:
            out = model(g, gen)
            loss = _regression_loss(cfg.target, out, y, g, mean, std)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, (mean, std)


def _regression_loss(target, out, y, g, mean, std):
    if target == "feasibility":
        return nn.functional.binary_cross_entropy_with_logits(out, y)
    pred = out * std + mean
    if target == "objective":
        return (((pred - y) / std) ** 2 / torch.clamp(y ** 2 / std ** 2, min=1.0)).mean()
    err = segment_sum(((pred - y) / std) ** 2, g.var_batch, g.n_graphs)
    den = torch.clamp(segment_sum((y / std) ** 2, g.var_batch, g.n_graphs), min=1.0)
    return (err / den).mean()


@torch.no_grad()
def predict(model: QPGNN, graphs: Sequence[dict], scale=(0.0, 1.0), *, seed: int = 0, draws: int = 1) -> list:
    """Predictions per instance: floats (objective; feasibility as a probability) or arrays (solution).

    For the random-feature class the output is averaged over ``draws`` draws of the features.
    """
    g = collate(list(graphs))
    gen = torch.Generator().manual_seed(int(seed))
    out = torch.stack([model(g, gen) for _ in range(max(1, draws))]).double()
    mean, std = scale
    out = out * std + mean
    if model.level == "node":
        out = out.mean(0)
        sizes = np.bincount(g.var_batch.numpy(), minlength=g.n_graphs)
        return [a.numpy() for a in torch.split(out, sizes.tolist())]
    return out.mean(0).tolist()


def relative_errors(target: str, pred: Sequence, labels: Sequence) -> np.ndarray:
    """Per-instance errors: ``|y' - y| / max(|y|, 1)``, ``||x' - x|| / max(||x||, 1)``, or 0/1 misclassification."""
    if target == "objective":
        return np.array([abs(p - y) / max(abs(y), 1.0) for p, y in zip(pred, labels)])
    if target == "solution":
        return np.array([np.linalg.norm(np.asarray(p) - np.asarray(y)) / max(np.linalg.norm(y), 1.0)
                         for p, y in zip(pred, labels)])
    if target == "feasibility":
        return np.array([float((1.0 / (1.0 + np.exp(-p)) > 0.5) != bool(y)) for p, y in zip(pred, labels)])
    raise ValueError(f"target must be one of {TARGETS}, got {target!r}")


def _h(*parts) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def wl_colors(qps: Sequence[QP], iters: int | None = None, *, decimals: int = 9) -> list[dict]:
    """WL colour refinement on the LCQP-graphs of ``qps`` (one shared palette), Algorithm 1.

    Initial colours hash the node features; each round a constraint's colour becomes the hash of
    its colour and the multiset ``{(A_ij, colour_j)}``, a variable's the hash of its colour and the
    multisets ``{(A_ij, colour_i)}`` and ``{(Q_jj', colour_j')}``. Returns, per instance, the final
    ``{"cons": [...], "var": [...]}`` colour lists (run to a stable partition by default).
    """
    r = lambda a: float(np.round(a, decimals)) + 0.0  # noqa: E731  (+0.0 folds -0.0)
    state = []
    for qp in qps:
        g = encode(qp)
        state.append({"cons": [_h("c", tuple(map(r, row))) for row in g["cons_x"]],
                      "var": [_h("v", tuple(map(r, row))) for row in g["var_x"]]})

    def n_colours():
        return len({c for s in state for k in ("cons", "var") for c in s[k]})

    rounds = iters if iters is not None else sum(qp.m + qp.n for qp in qps) + 1
    before = n_colours()
    for _ in range(rounds):
        new = []
        for qp, s in zip(qps, state):
            cons = [_h(s["cons"][i], tuple(sorted((r(qp.A[i, j]), s["var"][j]) for j in np.flatnonzero(qp.A[i]))))
                    for i in range(qp.m)]
            var = [_h(s["var"][j],
                      tuple(sorted((r(qp.A[i, j]), cons[i]) for i in np.flatnonzero(qp.A[:, j]))),
                      tuple(sorted((r(qp.Q[j, k]), s["var"][k]) for k in np.flatnonzero(qp.Q[j]))))
                   for j in range(qp.n)]
            new.append({"cons": cons, "var": var})
        state = new
        after = n_colours()
        if iters is None and after == before:
            break
        before = after
    return state


def wl_indistinguishable(qp1: QP, qp2: QP) -> bool:
    """Whether the WL test cannot tell ``qp1`` and ``qp2`` apart (equal colour histograms)."""
    c1, c2 = wl_colors([qp1, qp2])
    return sorted(c1["cons"]) == sorted(c2["cons"]) and sorted(c1["var"]) == sorted(c2["var"])


def is_unfoldable(qp: QP) -> bool:
    """Whether the WL refinement gives every variable node its own colour (the paper's unfoldable MI-LCQPs)."""
    colours = wl_colors([qp])[0]["var"]
    return len(set(colours)) == len(colours)


def _cycle_edges(n: int, triangles: bool) -> list[tuple[int, int]]:
    if triangles:  # two disjoint triangles on {0,1,2} and {3,4,5}
        return [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]
    return [(i, (i + 1) % n) for i in range(n)]


def separation_pairs() -> dict:
    """The instance pairs of the separation experiment: ``{name: (P, P_hat, target)}``.

    - ``lcqp-q-sign``: two convex LCQPs that differ only in the sign of ``Q_12`` (same ``diag Q``,
      ``c``, ``A``, ``b``, bounds): optimal values ``-2/3`` and ``-2``. WL on the LCQP-graph (and the
      paper's GNN) separates them; a GNN without ``Q`` edges cannot.
    - ``milcqp-objective``: six binary variables, ``sum x = 3``, ``Q = 2I + adj``, with ``adj`` a
      6-cycle vs two triangles: WL-indistinguishable (both 2-regular), optimal values 3 and 4,
      equal relaxations (3 at ``x = 1/2``).
    - ``milcqp-feasibility``: ``Q = I``, constraints ``x_i + x_j = 1`` along the 6-cycle vs the two
      triangles, binary ``x``: feasible vs infeasible (an odd cycle), both relaxations feasible.

    Assumed: the pairs follow the construction of the paper's MI-LCQP counter-examples (WL-equivalent
    2-regular graphs: one 6-cycle vs two triangles, as in Chen et al.'s MILP counter-example); the
    exact instances of the paper's figure could not be read.
    """
    pairs = {}
    Qp, Qm = np.array([[1.0, 0.5], [0.5, 1.0]]), np.array([[1.0, -0.5], [-0.5, 1.0]])
    args = dict(c=np.ones(2), A=np.array([[1.0, 1.0]]), b=np.array([10.0]), eq=np.array([False]),
                lb=-5 * np.ones(2), ub=5 * np.ones(2))
    pairs["lcqp-q-sign"] = (QP(Q=Qp, **args), QP(Q=Qm, **args), "objective")
    n = 6
    for name in ("milcqp-objective", "milcqp-feasibility"):
        inst = []
        for tri in (False, True):
            adj = np.zeros((n, n))
            for i, j in _cycle_edges(n, tri):
                adj[i, j] = adj[j, i] = 1.0
            if name == "milcqp-objective":
                inst.append(QP(Q=2 * np.eye(n) + adj, c=np.zeros(n), A=np.ones((1, n)), b=np.array([3.0]),
                               eq=np.array([True]), lb=np.zeros(n), ub=np.ones(n), integer=np.ones(n, bool)))
            else:
                edges = _cycle_edges(n, tri)
                A = np.zeros((len(edges), n))
                for r, (i, j) in enumerate(edges):
                    A[r, i] = A[r, j] = 1.0
                inst.append(QP(Q=np.eye(n), c=np.zeros(n), A=A, b=np.ones(len(edges)),
                               eq=np.ones(len(edges), bool), lb=np.zeros(n), ub=np.ones(n),
                               integer=np.ones(n, bool)))
        pairs[name] = (inst[0], inst[1], "feasibility" if name == "milcqp-feasibility" else "objective")
    return pairs
