"""STOP: centralised spatio-temporal interaction for out-of-distribution forecasting.

Spatio-Temporal OOD Processor, ICML 2025 (code PoorOtterBob/STOP). The parts:

- backbone (the released ``MLP``: STID-style, no node identities, so it is inductive): the input
  window is split into seasonal and trend parts by a moving average, each embedded by a linear map
  over time, concatenated with time-of-day and day-of-week embeddings, and passed through residual
  feed-forward layers; a linear head predicts the horizon. It returns the shallow embedding ``h``,
  the deep embedding ``z`` and the prediction ``y``.
- Context-Aware Units (the released ``Core_Adaptive``): ``C`` learnable cores per head; nodes are
  softmax-aggregated into the cores (softmax over nodes) and the cores broadcast back (softmax over
  cores), replacing node-to-node messages; ``ffn([z - v, v]) + z`` then a batch norm.
- the STOP forward of the released code: ``h_res = CAU(z)``, ``z_res = backbone.encoder(h - h_res)``,
  ``y + decoder(z_res)``.
- message perturbation and the spatio-temporal DRO objective (not in the released code; assumed
  from the abstract): each training step builds ``K`` variant environments, each dropping a random
  ``s_ratio`` of the nodes from the node-to-core aggregation (spatial perturbation) and zeroing a
  random ``t_ratio`` of the input steps (temporal perturbation); the loss is the worst environment's
  MAE (hard-max DRO over the generated environments).

Baselines: the backbone alone (``stid-mlp``: the same MLP without centralised interaction) and a
node-to-node forecaster (``gwnet-like``: the same embedding followed by diffusion-convolution layers
over the road graph, forward and backward transition matrices, as in Graph WaveNet without its
adaptive adjacency so that it applies to unseen nodes).

Data (``road_graph``, ``simulate_traffic``): a road-like graph (k-nearest neighbours of random
points in the plane) and a traffic-like diffusion with daily periodicity: ``x_{t+1} = (1 - a) x_t +
a P x_t + demand_i(t) + noise``, with morning and evening peaks whose amplitude and phase vary per
node; after ``shift_day`` the dynamics shift (diffusion strength, peak amplitudes and phases).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rayml.graphs.message_passing import spmm

__all__ = ["road_graph", "simulate_traffic", "windows", "Backbone", "ContextAwareUnit", "STOP", "GWNetLike",
           "STConfig", "train_forecaster", "predict", "METHODS"]

METHODS = ("stop", "stid-mlp", "gwnet-like")


def road_graph(rng: np.random.Generator, n: int, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Node positions in the unit square and a symmetric kNN edge list (2, E) of a road-like graph."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < k + 1:
        raise ValueError(f"n must be an integer > k, got {n!r}")
    pos = rng.random((n, 2))
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    nbr = np.argsort(d, axis=1)[:, :k]
    e = {(min(i, j), max(i, j)) for i in range(n) for j in nbr[i]}
    e = np.array(sorted(e)).T
    return pos, np.concatenate([e, e[::-1]], axis=1)


def _transition(edges: np.ndarray, n: int) -> np.ndarray:
    P = np.zeros((n, n))
    P[edges[0], edges[1]] = 1.0
    return P / np.maximum(P.sum(1, keepdims=True), 1.0)


def simulate_traffic(rng: np.random.Generator, edges: np.ndarray, n: int, *, days: int, steps_per_day: int,
                     shift_day: int, diffusion: float = 0.3, shift_diffusion: float = 0.6,
                     shift_amplitude: float = 1.5, shift_phase: float = 0.08, noise: float = 0.05) -> np.ndarray:
    """A (T, n) traffic-like series with daily peaks; the dynamics shift from ``shift_day`` on."""
    if not 0 < shift_day <= days:
        raise ValueError(f"shift_day must lie in (0, days], got {shift_day}")
    P = _transition(edges, n)
    T = days * steps_per_day
    amp_m, amp_e = 0.5 + rng.random(n), 0.5 + rng.random(n)
    ph_m, ph_e = 0.33 + 0.04 * rng.normal(size=n), 0.72 + 0.04 * rng.normal(size=n)
    x = np.zeros((T, n))
    cur = rng.random(n)
    for t in range(T):
        day, tod = divmod(t, steps_per_day)
        f = tod / steps_per_day
        shifted = day >= shift_day
        a = shift_diffusion if shifted else diffusion
        s = shift_amplitude if shifted else 1.0
        dp = shift_phase if shifted else 0.0
        weekend = 0.6 if day % 7 >= 5 else 1.0
        demand = s * weekend * (amp_m * np.exp(-((f - ph_m - dp) ** 2) / 0.004) +
                                amp_e * np.exp(-((f - ph_e - dp) ** 2) / 0.006))
        cur = 0.7 * ((1 - a) * cur + a * (P @ cur)) + 0.3 * demand + noise * rng.normal(size=n)
        x[t] = cur
    return x


def windows(x: np.ndarray, steps_per_day: int, t0: int, t1: int, seq: int, horizon: int):
    """Inputs (B, seq, n, 3) = (value, time of day, day of week) and targets (B, horizon, n) for
    windows whose first target step lies in ``[t0, t1)``."""
    T, n = x.shape
    starts = [s for s in range(max(t0, seq), min(t1, T - horizon + 1))]
    tod = (np.arange(T) % steps_per_day) / steps_per_day
    dow = ((np.arange(T) // steps_per_day) % 7) / 7.0
    X = np.stack([np.stack([x[s - seq:s], np.repeat(tod[s - seq:s, None], n, 1),
                            np.repeat(dow[s - seq:s, None], n, 1)], -1) for s in starts])
    Y = np.stack([x[s:s + horizon] for s in starts])
    return X.astype(np.float32), Y.astype(np.float32)


class _FF(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, h):
        return h + self.fc(h)


class Backbone(nn.Module):
    """The STID-style MLP of the released code (decomposition, time embeddings, residual FFNs)."""

    def __init__(self, seq: int, horizon: int, dim: int, tod_size: int, layers: int = 2, kernel: int = 5):
        super().__init__()
        self.kernel, self.tod_size = kernel, tod_size
        self.seasonal, self.trend = nn.Linear(seq, dim), nn.Linear(seq, dim)
        self.tod = nn.Parameter(torch.empty(tod_size, dim // 2))
        self.dow = nn.Parameter(torch.empty(7, dim // 2))
        nn.init.xavier_uniform_(self.tod)
        nn.init.xavier_uniform_(self.dow)
        self.hidden = dim + 2 * (dim // 2)
        self.encoder = nn.Sequential(*[_FF(self.hidden) for _ in range(layers)])
        self.head = nn.Linear(self.hidden, horizon)

    def embed(self, X: torch.Tensor) -> torch.Tensor:
        v = X[..., 0].transpose(1, 2)  # (B, n, seq)
        pad = (self.kernel - 1) // 2
        padded = torch.cat([v[..., :1].expand(-1, -1, pad), v, v[..., -1:].expand(-1, -1, pad)], -1)
        trend = padded.unfold(-1, self.kernel, 1).mean(-1)
        tod = self.tod[(X[:, -1, :, 1] * self.tod_size).long().clamp(0, self.tod_size - 1)]
        dow = self.dow[(X[:, -1, :, 2] * 7).round().long().clamp(0, 6)]
        return torch.cat([self.seasonal(v - trend) + self.trend(trend), tod, dow], -1)  # (B, n, hidden)

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
    """The released STOP forward: backbone, CAU backcast on ``z``, residual branch through the encoder."""

    def __init__(self, seq: int, horizon: int, dim: int, tod_size: int, cores: int = 8, heads: int = 4):
        super().__init__()
        self.backbone = Backbone(seq, horizon, dim, tod_size)
        hid = self.backbone.hidden
        self.cau = ContextAwareUnit(hid, hid, cores, heads)
        self.decoder = nn.Sequential(nn.Linear(hid, dim), nn.GELU(), nn.Linear(dim, horizon))

    def forward(self, X, node_mask=None, edges=None):
        h, z, y = self.backbone(X)
        h_res = self.cau(z, node_mask)
        z_res = self.backbone.encoder(h - h_res)
        return y + self.decoder(z_res).transpose(1, 2)


class _MLPOnly(nn.Module):
    def __init__(self, seq, horizon, dim, tod_size):
        super().__init__()
        self.backbone = Backbone(seq, horizon, dim, tod_size)

    def forward(self, X, node_mask=None, edges=None):
        return self.backbone(X)[2]


class GWNetLike(nn.Module):
    """Node-to-node forecaster: the backbone's embedding, then diffusion convolutions (P and P^T, 2 hops)."""

    def __init__(self, seq, horizon, dim, tod_size, layers: int = 2):
        super().__init__()
        self.backbone = Backbone(seq, horizon, dim, tod_size, layers=1)
        hid = self.backbone.hidden
        self.mix = nn.ModuleList(nn.Linear(5 * hid, hid) for _ in range(layers))
        self.head = nn.Linear(hid, horizon)

    def forward(self, X, node_mask=None, edges=None):
        B, _, n, _ = X.shape
        h = self.backbone.encoder(self.backbone.embed(X))  # (B, n, hid)
        fw, bw = edges
        for lin in self.mix:
            flat = h.transpose(0, 1).reshape(n, -1)  # nodes first for the sparse products
            def hop(rows, cols, w, x):
                return spmm(rows, cols, w, x, n)
            f1 = hop(*fw, flat)
            f2 = hop(*fw, f1)
            b1 = hop(*bw, flat)
            b2 = hop(*bw, b1)
            parts = [t.reshape(n, B, -1).transpose(0, 1) for t in (flat, f1, f2, b1, b2)]
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
    """Training of one forecaster."""

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

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("dim", "epochs", "batch", "envs", "cores", "heads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not (0 <= self.s_ratio < 1 and 0 <= self.t_ratio < 1):
            raise ValueError("s_ratio and t_ratio must lie in [0, 1)")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _model(cfg: STConfig, seq, horizon, tod_size):
    if cfg.method == "stop":
        return STOP(seq, horizon, cfg.dim, tod_size, cfg.cores, cfg.heads)
    if cfg.method == "stid-mlp":
        return _MLPOnly(seq, horizon, cfg.dim, tod_size)
    return GWNetLike(seq, horizon, cfg.dim, tod_size)


def train_forecaster(X: np.ndarray, Y: np.ndarray, edges: np.ndarray, cfg: STConfig, seed: int, *,
                     tod_size: int, scale: tuple[float, float]):
    """Fit one forecaster on windows ``X`` (B, seq, n, 3) -> ``Y`` (B, horizon, n) of the training nodes.

    STOP trains on ``cfg.envs`` perturbed environments per step with the worst environment's MAE
    (spatio-temporal DRO); the baselines on the plain MAE. Values are standardised by ``scale``.
    """
    if X.ndim != 4 or Y.ndim != 3 or X.shape[0] != Y.shape[0] or X.shape[2] != Y.shape[2]:
        raise ValueError(f"X must be (B, seq, n, 3) and Y (B, horizon, n) with matching B and n, "
                         f"got {X.shape} and {Y.shape}")
    torch.manual_seed(int(seed) % (2**63 - 1))
    rng = np.random.default_rng(int(seed))
    mu, sd = scale
    Xt = torch.as_tensor(X).clone()
    Xt[..., 0] = (Xt[..., 0] - mu) / sd
    Yt = (torch.as_tensor(Y) - mu) / sd
    n = X.shape[2]
    model = _model(cfg, X.shape[1], Y.shape[1], tod_size)
    dif = _diffusion_edges(edges, n)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for _ in range(cfg.epochs):
        order = rng.permutation(X.shape[0])
        for s in range(0, len(order), cfg.batch):
            idx = torch.as_tensor(order[s:s + cfg.batch])
            xb, yb = Xt[idx], Yt[idx]
            if cfg.method == "stop":
                losses = []
                for _k in range(cfg.envs):
                    node_mask = torch.as_tensor(rng.random((len(idx), n)) >= cfg.s_ratio)
                    tmask = torch.as_tensor(rng.random((len(idx), X.shape[1], 1)) >= cfg.t_ratio)
                    xe = xb.clone()
                    xe[..., 0] = xe[..., 0] * tmask
                    losses.append((model(xe, node_mask) - yb).abs().mean())
                loss = torch.stack(losses).max()
            else:
                loss = (model(xb, None, dif) - yb).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return model


@torch.no_grad()
def predict(model: nn.Module, X: np.ndarray, edges: np.ndarray, scale: tuple[float, float]) -> np.ndarray:
    """Forecasts (B, horizon, n) in the original units (any node set: the models are inductive)."""
    mu, sd = scale
    Xt = torch.as_tensor(X).clone()
    Xt[..., 0] = (Xt[..., 0] - mu) / sd
    out = model(Xt, None, _diffusion_edges(edges, X.shape[2]))
    return (out * sd + mu).numpy()
