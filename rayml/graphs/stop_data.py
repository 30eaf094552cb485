"""STOP's data: a road graph, its test-time rewiring, a traffic flow with travel times, windows, and
the ridge check that the data carries a spatial signal.

The flow (``simulate_traffic``) is transport along the road graph: every edge is directed by the
x-coordinate of its ends (traffic flows left to right), and a node's value is ``flow`` times the
mean of its upstream neighbours' values ``lag`` steps earlier (the travel time) plus ``1 - flow``
times its local input (daily demand with node-specific peaks plus persistent local incidents);
nodes without upstream neighbours carry only their local input. What reaches a node in the next
``lag`` steps is already on its upstream neighbours now, so their history predicts it and the
node's own history cannot: ``neighbour_gain`` measures that with two ridge forecasters. After
``shift_day`` the graph is rewired (``rewire``: some roads closed, others opened) and the demand
peaks grow and move later.
"""

from __future__ import annotations

import numpy as np

__all__ = ["road_graph", "rewire", "simulate_traffic", "windows", "neighbour_gain", "is_weekend", "pernode_ridge"]

WEEKEND_DEMAND = 0.6  # the demand on weekend days (day % 7 in {5, 6}), a share of a weekday's


def is_weekend(day: int) -> bool:
    """Whether ``day`` (0 = the first simulated day, a weekday) is a weekend day of ``simulate_traffic``."""
    return int(day) % 7 >= 5


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


def rewire(rng: np.random.Generator, pos: np.ndarray, edges: np.ndarray, frac: float = 0.3,
           k: int = 6) -> np.ndarray:
    """Close a fraction ``frac`` of the roads and open as many new ones between nodes among each other's
    ``k`` nearest neighbours; returns the symmetric edge list (2, E') of the rewired graph."""
    if not 0 <= frac <= 1:
        raise ValueError(f"frac must lie in [0, 1], got {frac!r}")
    n = len(pos)
    und = sorted({(min(i, j), max(i, j)) for i, j in edges.T})
    drop = set(rng.choice(len(und), size=int(round(frac * len(und))), replace=False).tolist())
    kept = {e for i, e in enumerate(und) if i not in drop}
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    near = np.argsort(d, axis=1)[:, :k]
    pool = sorted({(min(i, j), max(i, j)) for i in range(n) for j in near[i]} - set(und))
    add = [pool[i] for i in rng.permutation(len(pool))[:len(drop)]]
    e = np.array(sorted(kept | set(add))).T
    return np.concatenate([e, e[::-1]], axis=1)


def _upstream(pos: np.ndarray, edges: np.ndarray, n: int) -> np.ndarray:
    """Row-normalised (n, n) matrix averaging each node's upstream neighbours (left of it)."""
    up = edges[:, pos[edges[0], 0] < pos[edges[1], 0]]
    P = np.zeros((n, n))
    P[up[1], up[0]] = 1.0
    return P / np.maximum(P.sum(1, keepdims=True), 1.0)


def simulate_traffic(rng: np.random.Generator, pos: np.ndarray, edges: np.ndarray, *, days: int, steps_per_day: int,
                     shift_day: int, edges_after: np.ndarray | None = None, flow: float = 0.8, lag: int = 6,
                     persistence: float = 0.5, noise: float = 0.5, shift_amplitude: float = 1.5,
                     shift_phase: float = 0.08) -> np.ndarray:
    """A (T, n) traffic flow on the graph ``edges`` (``edges_after`` from ``shift_day`` on), T = days x steps.

    ``x_i(t) = flow * mean_{j upstream of i} x_j(t - lag) + (1 - flow) * (demand_i(t) + u_i(t))``
    (``x_i = demand_i + u_i`` without upstream neighbours), ``u_i`` an AR(1) incident process
    (``persistence``, innovation sd ``noise``); demand has morning and evening peaks, 0.6 x on weekends.
    """
    if not 0 < shift_day <= days:
        raise ValueError(f"shift_day must lie in (0, days], got {shift_day}")
    if not 0 <= flow < 1:
        raise ValueError(f"flow must lie in [0, 1), got {flow!r}")
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be an integer >= 1, got {lag!r}")
    n = len(pos)
    Ps = [_upstream(pos, edges, n), _upstream(pos, edges if edges_after is None else edges_after, n)]
    T = days * steps_per_day
    amp_m, amp_e = 0.5 + rng.random(n), 0.5 + rng.random(n)
    ph_m, ph_e = 0.33 + 0.04 * rng.normal(size=n), 0.72 + 0.04 * rng.normal(size=n)
    x = np.zeros((T + lag, n))
    u = np.zeros(n)
    for t in range(T):
        day, tod = divmod(t, steps_per_day)
        f = tod / steps_per_day
        shifted = day >= shift_day
        s, dp = (shift_amplitude, shift_phase) if shifted else (1.0, 0.0)
        weekend = WEEKEND_DEMAND if is_weekend(day) else 1.0
        demand = s * weekend * (amp_m * np.exp(-((f - ph_m - dp) ** 2) / 0.004) +
                                amp_e * np.exp(-((f - ph_e - dp) ** 2) / 0.006))
        u = persistence * u + noise * rng.normal(size=n)
        P = Ps[int(shifted)]
        w = flow * (P.sum(1) > 0)
        x[t + lag] = w * (P @ x[t]) + (1 - w) * (demand + u)
    return x[lag:]


def windows(x: np.ndarray, steps_per_day: int, t0: int, t1: int, seq: int, horizon: int,
            nodes: np.ndarray | None = None):
    """Inputs (B, seq, n, 4) = (value, time of day, day of week, node id) and targets (B, horizon, n)
    for windows whose first target step lies in ``[t0, t1)``; ``nodes`` are the columns' global ids
    (default ``0 .. n-1``: the models with node embeddings look them up)."""
    T, n = x.shape
    ids = np.arange(n) if nodes is None else np.asarray(nodes)
    if ids.shape != (n,):
        raise ValueError(f"nodes must hold one id per column of x ({n}), got shape {ids.shape}")
    starts = [s for s in range(max(t0, seq), min(t1, T - horizon + 1))]
    tod = (np.arange(T) % steps_per_day) / steps_per_day
    dow = ((np.arange(T) // steps_per_day) % 7) / 7.0
    idc = np.broadcast_to(ids[None].astype(np.float64), (seq, n))
    X = np.stack([np.stack([x[s - seq:s], np.repeat(tod[s - seq:s, None], n, 1),
                            np.repeat(dow[s - seq:s, None], n, 1), idc], -1) for s in starts])
    Y = np.stack([x[s:s + horizon] for s in starts])
    return X.astype(np.float32), Y.astype(np.float32)


def neighbour_gain(x: np.ndarray, edges: np.ndarray, steps_per_day: int, train_end: int, t0: int, t1: int, *,
                   seq: int, horizon: int, ridge: float = 1e-2) -> tuple[float, float]:
    """Test MAE of two ridge forecasters fitted on the windows before ``train_end``, tested on
    ``[t0, t1)``: one on a node's own history and time of day, one with its neighbours' mean history
    added (the graph undirected, as the models see it). Their ratio is the spatial signal the data carries."""
    T, n = x.shape
    A = np.zeros((n, n))
    A[edges[0], edges[1]] = 1.0
    nb = x @ (A / np.maximum(A.sum(1, keepdims=True), 1.0)).T
    tod = np.arange(T) % steps_per_day

    def design(starts, with_nb):
        rows = []
        for s in starts:
            oh = np.zeros((n, steps_per_day))
            oh[:, tod[s]] = 1.0
            rows.append(np.concatenate([x[s - seq:s].T] + ([nb[s - seq:s].T] if with_nb else []) + [oh], 1))
        return np.concatenate(rows), np.concatenate([x[s:s + horizon].T for s in starts])

    tr, te = range(seq, train_end - horizon + 1), range(max(t0, seq), min(t1, T) - horizon + 1)
    if len(tr) < 2 or len(te) < 1:
        raise ValueError("neighbour_gain needs training windows before train_end and test windows in [t0, t1)")
    out = []
    for with_nb in (False, True):
        Xa, Ya = design(tr, with_nb)
        W = np.linalg.solve(Xa.T @ Xa + ridge * np.eye(Xa.shape[1]), Xa.T @ Ya)
        Xb, Yb = design(te, with_nb)
        out.append(float(np.abs(Xb @ W - Yb).mean()))
    return out[0], out[1]


def _hop_means(x: np.ndarray, edges: np.ndarray, hops: int) -> list:
    """``x`` (T, m) and its 1 .. ``hops``-hop neighbour means over the undirected graph ``edges`` (local ids)."""
    m = x.shape[1]
    A = np.zeros((m, m))
    A[edges[1], edges[0]] = 1.0
    A[edges[0], edges[1]] = 1.0
    P = A / np.maximum(A.sum(1, keepdims=True), 1.0)
    out = [x]
    for _ in range(hops):
        out.append(out[-1] @ P.T)
    return out


def pernode_ridge(x: np.ndarray, steps_per_day: int, fit: tuple, tests: list, *, seq: int, horizon: int,
                  hops: int = 0, penalty: float = 1.0) -> list:
    """Per-node linear forecasters (one ridge per node, not inductive): a node's own ``seq`` past values,
    with ``hops`` > 0 its 1 .. ``hops``-hop neighbour means on a given graph, and a time-of-day one-hot.

    ``fit = (nodes, edges, t1)``: the nodes (global column ids of ``x``), the graph over them (local ids)
    and the end of the training targets (windows whose targets lie before ``t1``). ``tests``: a list of
    ``(eval_nodes, nodes, edges, t0, t1)``, the nodes scored (a subset of the fitted ones), the context
    nodes and graph the neighbour means are taken over (a node's context may differ from training: the
    test graph), windows whose first target step lies in ``[t0, t1)``. Returns per test an array of the
    eval nodes' MAE."""
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise ValueError(f"hops must be an integer >= 0, got {hops!r}")
    if not penalty > 0:
        raise ValueError(f"penalty must be > 0, got {penalty!r}")
    T = x.shape[0]
    tod = np.arange(T) % steps_per_day
    lag, ahead = np.arange(-seq, 0), np.arange(horizon)

    def design(H, starts, j):
        feats = [h[starts[:, None] + lag, j] for h in H]
        oh = np.zeros((len(starts), steps_per_day))
        oh[np.arange(len(starts)), tod[starts]] = 1.0
        return np.concatenate(feats + [oh], 1)

    nodes, edges, t1 = fit
    nodes = np.asarray(nodes)
    tr = np.arange(seq, t1 - horizon + 1)
    if len(tr) < 2:
        raise ValueError("pernode_ridge needs training windows before the fit's t1")
    H = _hop_means(x[:, nodes], edges, hops)
    W = {}
    for j, i in enumerate(nodes):
        F, Y = design(H, tr, j), x[tr[:, None] + ahead, i]
        W[int(i)] = np.linalg.solve(F.T @ F + penalty * np.eye(F.shape[1]), F.T @ Y)
    out = []
    for eval_nodes, ctx, g, t0, t_end in tests:
        ctx = np.asarray(ctx)
        starts = np.arange(max(t0, seq), min(t_end, T - horizon + 1))
        if len(starts) < 1:
            raise ValueError("pernode_ridge: a test range holds no window")
        Hc = _hop_means(x[:, ctx], g, hops)
        errs = []
        for i in np.asarray(eval_nodes):
            if int(i) not in W:
                raise ValueError(f"node {int(i)} was not fitted")
            j = int(np.searchsorted(ctx, i))
            if j >= len(ctx) or ctx[j] != i:
                raise ValueError(f"node {int(i)} is not among the test's context nodes (sorted)")
            errs.append(float(np.abs(design(Hc, starts, j) @ W[int(i)] - x[starts[:, None] + ahead, i]).mean()))
        out.append(np.array(errs))
    return out
