"""STOP: centralised spatio-temporal interaction for out-of-distribution forecasting.

Spatio-Temporal OOD Processor, ICML 2025 (code PoorOtterBob/STOP). The parts:

- backbone (the released ``MLP``: STID-style, no node identities, so it is inductive): the input
  window is split into seasonal and trend parts by a moving average, each embedded by a linear map
  over time, concatenated with time-of-day and day-of-week embeddings, and passed through residual
  feed-forward layers (with dropout); a linear head predicts the horizon. It returns the shallow
  embedding ``h``, the deep embedding ``z`` and the prediction ``y``.
- Context-Aware Units (the released ``Core_Adaptive``): ``C`` learnable cores per head; nodes are
  softmax-aggregated into the cores (softmax over nodes) and the cores broadcast back (softmax over
  cores), replacing node-to-node messages; ``ffn([z - v, v]) + z`` then a normalisation.
- the STOP forward of the released code: ``h_res = CAU(z)``, ``z_res = encoder'(h - h_res)``,
  ``y + decoder(z_res)``, where ``encoder'`` is a deep copy of the backbone's encoder (the authors'
  default ``same=0``: the residual branch has its own weights, initialised from the backbone's).
- message perturbation and the spatio-temporal DRO objective (not in the released code; assumed
  from the abstract): each training step builds ``K`` variant environments, each dropping a random
  ``s_ratio`` of the nodes from the node-to-core aggregation (spatial perturbation) and zeroing a
  random ``t_ratio`` of the input steps (temporal perturbation); the loss is the worst environment's
  MAE (hard-max DRO over the generated environments). ``stop-nodro`` is the same model trained on
  the plain MAE (the ablation).

Baselines (the paper's kinds, able to fail the way the paper's do on new nodes and a rewired
graph): ``stid`` (the backbone plus STID's learnable node embeddings: a node unseen in training
keeps its untrained embedding) and ``gwnet-like`` (the same embedding, then diffusion convolutions
over the given road graph, forward and backward, 2 hops, plus Graph WaveNet's adaptive adjacency
``softmax(relu(E1 E2^T))`` from learnable node embeddings). Two linear forecasters (issue 39, outside
review R8: they matched the learned models): ``fit_ridge`` with ``neighbours=False`` (``ridge``: a
node's own history and time of day) and ``neighbours=True`` (``ridge-graph``: its given-graph
neighbours' mean history added), one closed-form ridge regression shared by every node.

Every method shares the training regularisers (assumed, declared on the page): dropout in the
feed-forward layers, gradient-norm clipping and early stopping on the validation MAE (the best
epoch's weights are kept). The data are in ``rayml.graphs.stop_data``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rayml.graphs.message_passing import spmm
from rayml.graphs.stop_data import neighbour_gain, rewire, road_graph, simulate_traffic, windows
from rayml.training import EarlyStopping

__all__ = ["road_graph", "rewire", "simulate_traffic", "windows", "neighbour_gain", "Backbone",
           "ContextAwareUnit", "STOP", "GWNetLike", "STConfig", "train_forecaster", "predict", "METHODS",
           "RidgeForecaster", "fit_ridge", "RIDGES"]

METHODS = ("stop", "stop-nodro", "stid", "gwnet-like")
RIDGES = {"ridge": False, "ridge-graph": True}  # name -> whether the given graph's neighbour mean is a feature


class _FF(nn.Module):
    def __init__(self, d: int, dropout: float = 0.0):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * d, d))

    def forward(self, h):
        return h + self.fc(h)


def _node_ids(X: torch.Tensor) -> torch.Tensor:
    """The global node id of each column (channel 3 of the windows, the same in every window)."""
    return X[0, -1, :, 3].round().long()


class Backbone(nn.Module):
    """The STID-style MLP of the released code (decomposition, time embeddings, residual FFNs);
    ``n_nodes > 0`` adds STID's learnable node embeddings (a table over ``n_nodes`` global ids)."""

    def __init__(self, seq: int, horizon: int, dim: int, tod_size: int, layers: int = 2, kernel: int = 5,
                 n_nodes: int = 0, dropout: float = 0.0):
        super().__init__()
        self.kernel, self.tod_size = kernel, tod_size
        self.seasonal, self.trend = nn.Linear(seq, dim), nn.Linear(seq, dim)
        self.tod = nn.Parameter(torch.empty(tod_size, dim // 2))
        self.dow = nn.Parameter(torch.empty(7, dim // 2))
        nn.init.xavier_uniform_(self.tod)
        nn.init.xavier_uniform_(self.dow)
        self.node = None
        if n_nodes:
            self.node = nn.Parameter(torch.empty(n_nodes, dim // 2))
            nn.init.xavier_uniform_(self.node)
        self.hidden = dim + (3 if n_nodes else 2) * (dim // 2)
        self.encoder = nn.Sequential(*[_FF(self.hidden, dropout) for _ in range(layers)])
        self.head = nn.Linear(self.hidden, horizon)

    def embed(self, X: torch.Tensor) -> torch.Tensor:
        v = X[..., 0].transpose(1, 2)  # (B, n, seq)
        pad = (self.kernel - 1) // 2
        padded = torch.cat([v[..., :1].expand(-1, -1, pad), v, v[..., -1:].expand(-1, -1, pad)], -1)
        trend = padded.unfold(-1, self.kernel, 1).mean(-1)
        tod = self.tod[(X[:, -1, :, 1] * self.tod_size).long().clamp(0, self.tod_size - 1)]
        dow = self.dow[(X[:, -1, :, 2] * 7).round().long().clamp(0, 6)]
        parts = [self.seasonal(v - trend) + self.trend(trend), tod, dow]
        if self.node is not None:
            ids = _node_ids(X)
            if int(ids.max()) >= self.node.shape[0] or int(ids.min()) < 0:
                raise ValueError(f"node ids must lie in [0, {self.node.shape[0]}), the model's n_nodes")
            parts.append(self.node[ids].expand(X.shape[0], -1, -1))
        return torch.cat(parts, -1)  # (B, n, hidden)

    def forward(self, X: torch.Tensor):
        h = self.embed(X)
        z = self.encoder(h)
        return h, z, self.head(z).transpose(1, 2)  # y: (B, horizon, n)


class ContextAwareUnit(nn.Module):
    """Centralised interaction through ``cores`` learnable cores per head (no node-to-node messages)."""

    def __init__(self, d: int, d_out: int, cores: int = 8, heads: int = 4):
        super().__init__()
        if d % heads:
            raise ValueError(f"the width {d} must be divisible by heads={heads}")
        self.heads, self.hd = heads, d // heads
        self.cores = nn.Parameter(torch.randn(heads, cores, self.hd))
        self.value = nn.Linear(d, d)
        self.ffn = nn.Sequential(nn.Linear(2 * d, 4 * d), nn.GELU(), nn.Linear(4 * d, d_out))
        self.norm = nn.LayerNorm(d_out)

    def forward(self, z: torch.Tensor, node_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, n, d = z.shape
        q = self.value(z).view(B, n, self.heads, self.hd)
        aff = torch.einsum("hcd,bnhd->bhcn", self.cores, q) / self.hd ** 0.5  # (B, h, cores, n)
        if node_mask is not None:  # message perturbation: masked nodes send nothing to the cores
            aff_in = aff.masked_fill(~node_mask[:, None, None, :], float("-inf"))
        else:
            aff_in = aff
        to_core = torch.softmax(aff_in, dim=-1)  # over nodes
        to_node = torch.softmax(aff, dim=-2)  # over cores
        v = z.view(B, n, self.heads, self.hd)
        core_state = torch.einsum("bnhd,bhcn->bhcd", v, to_core)
        back = torch.einsum("bhcd,bhcn->bnhd", core_state, to_node).reshape(B, n, d)
        return self.norm(self.ffn(torch.cat([z - back, back], -1)) + z)


class STOP(nn.Module):
    """The released STOP forward: backbone, CAU backcast on ``z``, the residual branch through a
    deep copy of the backbone's encoder (the authors' ``same=0``), its decoder added to ``y``."""

    def __init__(self, seq: int, horizon: int, dim: int, tod_size: int, cores: int = 8, heads: int = 4,
                 dropout: float = 0.0):
        super().__init__()
        self.backbone = Backbone(seq, horizon, dim, tod_size, dropout=dropout)
        hid = self.backbone.hidden
        self.cau = ContextAwareUnit(hid, hid, cores, heads)
        self.res_encoder = copy.deepcopy(self.backbone.encoder)
        self.decoder = nn.Sequential(nn.Linear(hid, dim), nn.GELU(), nn.Linear(dim, horizon))

    def forward(self, X, node_mask=None, edges=None):
        h, z, y = self.backbone(X)
        h_res = self.cau(z, node_mask)
        z_res = self.res_encoder(h - h_res)
        return y + self.decoder(z_res).transpose(1, 2)


class _STID(nn.Module):
    def __init__(self, seq, horizon, dim, tod_size, n_nodes, dropout=0.0):
        super().__init__()
        self.backbone = Backbone(seq, horizon, dim, tod_size, n_nodes=n_nodes, dropout=dropout)

    def forward(self, X, node_mask=None, edges=None):
        return self.backbone(X)[2]


class GWNetLike(nn.Module):
    """Node-to-node forecaster: the backbone's embedding, then diffusion convolutions over the given
    graph (P and P^T, 2 hops) and over Graph WaveNet's adaptive adjacency ``softmax(relu(E1 E2^T))``."""

    def __init__(self, seq, horizon, dim, tod_size, n_nodes, layers: int = 2, adaptive_dim: int = 10,
                 dropout: float = 0.0):
        super().__init__()
        self.backbone = Backbone(seq, horizon, dim, tod_size, layers=1, dropout=dropout)
        hid = self.backbone.hidden
        self.e1 = nn.Parameter(torch.randn(n_nodes, adaptive_dim))
        self.e2 = nn.Parameter(torch.randn(n_nodes, adaptive_dim))
        self.mix = nn.ModuleList(nn.Linear(6 * hid, hid) for _ in range(layers))
        self.head = nn.Linear(hid, horizon)

    def forward(self, X, node_mask=None, edges=None):
        B, _, n, _ = X.shape
        ids = _node_ids(X)
        if int(ids.max()) >= self.e1.shape[0] or int(ids.min()) < 0:
            raise ValueError(f"node ids must lie in [0, {self.e1.shape[0]}), the model's n_nodes")
        adp = torch.softmax(torch.relu(self.e1[ids] @ self.e2[ids].T), dim=1)  # (n, n) over the present nodes
        h = self.backbone.encoder(self.backbone.embed(X))  # (B, n, hid)
        fw, bw = edges
        for lin in self.mix:
            flat = h.transpose(0, 1).reshape(n, -1)  # nodes first for the sparse products
            f1 = spmm(*fw, flat, n)
            b1 = spmm(*bw, flat, n)
            hops = (flat, f1, spmm(*fw, f1, n), b1, spmm(*bw, b1, n), adp @ flat)
            parts = [t.reshape(n, B, -1).transpose(0, 1) for t in hops]
            h = h + torch.relu(lin(torch.cat(parts, -1)))
        return self.head(h).transpose(1, 2)


def _diffusion_edges(edges: np.ndarray, n: int):
    e = torch.as_tensor(edges, dtype=torch.long)
    deg_out = torch.zeros(n).index_add_(0, e[0], torch.ones(e.shape[1]))
    deg_in = torch.zeros(n).index_add_(0, e[1], torch.ones(e.shape[1]))
    fw = (e[0], e[1], 1.0 / deg_out[e[0]].clamp_min(1))
    bw = (e[1], e[0], 1.0 / deg_in[e[1]].clamp_min(1))
    return fw, bw


@dataclass(frozen=True)
class STConfig:
    """Training of one forecaster (``dropout``, ``clip`` and ``patience``: the regularisers every
    method shares; ``patience`` epochs without a better validation MAE end training)."""

    method: str = "stop"
    dim: int = 32
    epochs: int = 20
    batch: int = 32
    lr: float = 1e-3
    envs: int = 3
    s_ratio: float = 0.2
    t_ratio: float = 0.1
    cores: int = 8
    heads: int = 4
    dropout: float = 0.1
    clip: float = 5.0
    patience: int = 10

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("dim", "epochs", "batch", "envs", "cores", "heads", "patience"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not (0 <= self.s_ratio < 1 and 0 <= self.t_ratio < 1 and 0 <= self.dropout < 1):
            raise ValueError("s_ratio, t_ratio and dropout must lie in [0, 1)")
        if self.lr <= 0 or self.clip <= 0:
            raise ValueError(f"lr and clip must be > 0, got {self.lr!r}, {self.clip!r}")


def _model(cfg: STConfig, seq, horizon, tod_size, n_nodes):
    if cfg.method in ("stop", "stop-nodro"):
        return STOP(seq, horizon, cfg.dim, tod_size, cfg.cores, cfg.heads, cfg.dropout)
    if cfg.method == "stid":
        return _STID(seq, horizon, cfg.dim, tod_size, n_nodes, cfg.dropout)
    return GWNetLike(seq, horizon, cfg.dim, tod_size, n_nodes, dropout=cfg.dropout)


def _standardise(X, Y, scale):
    mu, sd = scale
    Xt = torch.as_tensor(X).clone()
    Xt[..., 0] = (Xt[..., 0] - mu) / sd
    return Xt, (None if Y is None else (torch.as_tensor(Y) - mu) / sd)


def _dro_loss(model, xb, yb, cfg, rng):
    """The worst of ``cfg.envs`` perturbed environments' MAE, the environments stacked in one batch."""
    B, seq, n, _ = xb.shape
    K = cfg.envs
    node_mask = torch.as_tensor(rng.random((K * B, n)) >= cfg.s_ratio)
    tmask = torch.as_tensor(rng.random((K * B, seq, 1)) >= cfg.t_ratio)
    xe = xb.repeat(K, 1, 1, 1)
    xe[..., 0] = xe[..., 0] * tmask
    err = (model(xe, node_mask) - yb.repeat(K, 1, 1)).abs().reshape(K, -1).mean(1)
    return err.max()


def train_forecaster(X: np.ndarray, Y: np.ndarray, edges: np.ndarray, cfg: STConfig, seed: int, *,
                     tod_size: int, scale: tuple[float, float], n_nodes: int | None = None,
                     val: tuple[np.ndarray, np.ndarray] | None = None):
    """Fit one forecaster on windows ``X`` (B, seq, n, 4) -> ``Y`` (B, horizon, n) of the training nodes.

    STOP trains on ``cfg.envs`` perturbed environments per step with the worst environment's MAE
    (spatio-temporal DRO); ``stop-nodro`` and the baselines on the plain MAE. Values are
    standardised by ``scale``. ``n_nodes``: the size of the node tables (``stid``, ``gwnet-like``;
    default: the largest id in ``X`` + 1). ``val``: validation windows (same nodes) for early
    stopping; the best epoch's weights are returned.
    """
    if X.ndim != 4 or X.shape[-1] != 4 or Y.ndim != 3 or X.shape[0] != Y.shape[0] or X.shape[2] != Y.shape[2]:
        raise ValueError(f"X must be (B, seq, n, 4) and Y (B, horizon, n) with matching B and n, "
                         f"got {X.shape} and {Y.shape}")
    torch.manual_seed(int(seed) % (2**63 - 1))
    rng = np.random.default_rng(int(seed))
    Xt, Yt = _standardise(X, Y, scale)
    n = X.shape[2]
    n_nodes = int(X[0, -1, :, 3].max()) + 1 if n_nodes is None else int(n_nodes)
    model = _model(cfg, X.shape[1], Y.shape[1], tod_size, n_nodes)
    dif = _diffusion_edges(edges, n)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    stopper = EarlyStopping(model, cfg.patience, keep_initial=False)
    kept = cfg.epochs  # the epoch whose weights are returned (1-based; the last without validation)
    for epoch in range(cfg.epochs):
        model.train()
        order = rng.permutation(X.shape[0])
        for s in range(0, len(order), cfg.batch):
            idx = torch.as_tensor(order[s:s + cfg.batch])
            xb, yb = Xt[idx], Yt[idx]
            if cfg.method == "stop":
                loss = _dro_loss(model, xb, yb, cfg, rng)
            else:
                loss = (model(xb, None, dif) - yb).abs().mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
        if val is not None:
            mae = float(np.abs(predict(model, val[0], edges, scale) - val[1]).mean())
            stop = stopper.step(mae, model)
            if stopper.bad == 0:
                kept = epoch + 1
            if stop:
                break
    stopper.restore(model)
    model.eval()
    model.kept_epoch = kept
    return model


@dataclass(frozen=True)
class RidgeForecaster:
    """A fitted linear forecaster (``fit_ridge``): ``weights`` (features, horizon) over standardised values."""

    weights: np.ndarray
    neighbours: bool
    tod_size: int
    scale: tuple[float, float]
    penalty: float

    def predict(self, X: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """Forecasts (B, horizon, n) in the original units for windows ``X`` (B, seq, n, 4) on ``edges``."""
        F = _ridge_features(X, edges, self.neighbours, self.tod_size, self.scale)
        B, n = X.shape[0], X.shape[2]
        out = (F @ self.weights).reshape(B, n, -1).transpose(0, 2, 1)
        return out * self.scale[1] + self.scale[0]


def _ridge_features(X: np.ndarray, edges: np.ndarray, neighbours: bool, tod_size: int,
                    scale: tuple[float, float]) -> np.ndarray:
    """Rows (B * n, features): the node's standardised history (seq), with ``neighbours`` the mean
    standardised history of its in-neighbours in ``edges`` (0, the training mean, for a node with none),
    and a one-hot of the last input step's time of day (``tod_size`` slots; it carries the intercept)."""
    if X.ndim != 4 or X.shape[-1] != 4:
        raise ValueError(f"X must be (B, seq, n, 4), got {X.shape}")
    B, seq, n, _ = X.shape
    v = (X[..., 0].astype(np.float64) - scale[0]) / scale[1]  # (B, seq, n)
    parts = [v.transpose(0, 2, 1)]  # (B, n, seq)
    if neighbours:
        e = np.asarray(edges)
        if e.ndim != 2 or e.shape[0] != 2 or (e.size and (e.min() < 0 or e.max() >= n)):
            raise ValueError(f"edges must be a (2, E) list of node indices in [0, {n}), got shape {e.shape}")
        A = np.zeros((n, n))
        A[e[1], e[0]] = 1.0  # node e[1] receives from e[0]
        A /= np.maximum(A.sum(1, keepdims=True), 1.0)
        parts.append(np.einsum("ij,bsj->bis", A, v))
    slot = np.rint(X[:, -1, :, 1].astype(np.float64) * tod_size).astype(np.int64) % tod_size  # (B, n)
    parts.append(np.eye(tod_size)[slot])
    return np.concatenate(parts, -1).reshape(B * n, -1)


def fit_ridge(X: np.ndarray, Y: np.ndarray, edges: np.ndarray, *, penalty: float, neighbours: bool,
              tod_size: int, scale: tuple[float, float]) -> RidgeForecaster:
    """Closed-form ridge regression from windows ``X`` (B, seq, n, 4) to ``Y`` (B, horizon, n), one set of
    weights for every node (so it applies to unseen nodes): ``W = (F^T F + penalty I)^-1 F^T Y`` over
    the rows of ``_ridge_features`` (the penalty on every weight, the time-of-day one-hots included)."""
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not penalty > 0 or not np.isfinite(penalty):
        raise ValueError(f"penalty must be a finite number > 0, got {penalty!r}")
    if isinstance(tod_size, bool) or not isinstance(tod_size, (int, np.integer)) or tod_size < 1:
        raise ValueError(f"tod_size must be an integer >= 1, got {tod_size!r}")
    if Y.ndim != 3 or X.ndim != 4 or X.shape[0] != Y.shape[0] or X.shape[2] != Y.shape[2]:
        raise ValueError(f"X must be (B, seq, n, 4) and Y (B, horizon, n) with matching B and n, "
                         f"got {X.shape} and {Y.shape}")
    if not scale[1] > 0:
        raise ValueError(f"scale must be (mean, sd > 0), got {scale!r}")
    F = _ridge_features(X, edges, bool(neighbours), int(tod_size), scale)
    T = ((Y.astype(np.float64) - scale[0]) / scale[1]).transpose(0, 2, 1).reshape(F.shape[0], -1)
    W = np.linalg.solve(F.T @ F + float(penalty) * np.eye(F.shape[1]), F.T @ T)
    return RidgeForecaster(W, bool(neighbours), int(tod_size), (float(scale[0]), float(scale[1])), float(penalty))


@torch.no_grad()
def predict(model: nn.Module | RidgeForecaster, X: np.ndarray, edges: np.ndarray,
            scale: tuple[float, float]) -> np.ndarray:
    """Forecasts (B, horizon, n) in the original units for windows ``X`` (B, seq, n, 4) on the graph
    ``edges`` (any node set whose ids the model's node tables hold). A ``RidgeForecaster`` uses the
    scale it was fitted with."""
    if isinstance(model, RidgeForecaster):
        return model.predict(X, edges)
    mu, sd = scale
    was = model.training
    model.eval()
    Xt, _ = _standardise(X, None, scale)
    out = model(Xt, None, _diffusion_edges(edges, X.shape[2]))
    model.train(was)
    return (out * sd + mu).numpy()
