"""Sparse message passing on plain torch (``index_add``), shared by the graph methods of rayml.

Every aggregation here is a sparse matrix product written as gather + ``index_add_``:
``spmm(rows, cols, vals, x, n)[i] = sum_{e: rows[e] = i} vals[e] * x[cols[e]]``, which is
``M @ x`` for the sparse matrix ``M`` with entries ``M[rows[e], cols[e]] += vals[e]``. The tests
compare each of them with the dense product. Batches of graphs are one disjoint union: node ids
are offset per graph and ``batch`` vectors map nodes to their graph (``segment_mean``).
"""

from __future__ import annotations

import torch

__all__ = ["spmm", "scatter_sum", "segment_mean", "segment_sum", "gcn_norm", "to_undirected", "add_self_loops",
           "dense_adjacency"]


def _check_index(index: torch.Tensor, name: str) -> None:
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer torch tensor")
    if index.dim() != 1:
        raise ValueError(f"{name} must be 1-d, got shape {tuple(index.shape)}")


def scatter_sum(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """``out[i] = sum_{e: index[e] = i} src[e]`` with ``n`` output rows."""
    _check_index(index, "index")
    if src.shape[0] != index.shape[0]:
        raise ValueError(f"src has {src.shape[0]} rows but index has {index.shape[0]} entries")
    out = torch.zeros((n,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    return out.index_add_(0, index.long(), src)


def spmm(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor | None, x: torch.Tensor, n: int) -> torch.Tensor:
    """Sparse ``M @ x`` for ``M`` given as COO ``(rows, cols, vals)`` with ``n`` rows (``vals=None``: ones)."""
    _check_index(rows, "rows")
    _check_index(cols, "cols")
    if rows.shape != cols.shape:
        raise ValueError(f"rows and cols must have the same shape, got {tuple(rows.shape)} and {tuple(cols.shape)}")
    msg = x[cols.long()]
    if vals is not None:
        if vals.shape[0] != rows.shape[0]:
            raise ValueError(f"vals has {vals.shape[0]} entries but there are {rows.shape[0]} edges")
        msg = msg * (vals.unsqueeze(-1) if msg.dim() > 1 else vals)
    return scatter_sum(msg, rows, n)


def segment_sum(x: torch.Tensor, batch: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Per-graph sums of node rows (``batch[i]`` is node ``i``'s graph)."""
    return scatter_sum(x, batch, n_segments)


def segment_mean(x: torch.Tensor, batch: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Per-graph means of node rows (empty segments give zeros)."""
    s = scatter_sum(x, batch, n_segments)
    cnt = scatter_sum(torch.ones(x.shape[0], dtype=x.dtype, device=x.device), batch, n_segments).clamp_min(1.0)
    return s / (cnt.unsqueeze(-1) if s.dim() > 1 else cnt)


def to_undirected(edges: torch.Tensor) -> torch.Tensor:
    """``(2, E)`` edge index with both directions, duplicates and self loops removed, sorted."""
    if edges.dim() != 2 or edges.shape[0] != 2:
        raise ValueError(f"edges must have shape (2, E), got {tuple(edges.shape)}")
    e = torch.cat([edges, edges.flip(0)], dim=1)
    e = e[:, e[0] != e[1]]
    return torch.unique(e, dim=1)


def add_self_loops(edges: torch.Tensor, n: int) -> torch.Tensor:
    """``edges`` plus one loop per node."""
    loops = torch.arange(n, dtype=edges.dtype).repeat(2, 1)
    return torch.cat([edges, loops], dim=1)


def gcn_norm(edges: torch.Tensor, n: int) -> torch.Tensor:
    """Symmetric normalisation ``d_i^{-1/2} d_j^{-1/2}`` of each edge of ``edges`` (Kipf & Welling, Eq. 2)."""
    deg = scatter_sum(torch.ones(edges.shape[1]), edges[0], n)
    inv = deg.clamp_min(1e-12).pow(-0.5)
    return inv[edges[0]] * inv[edges[1]]


def dense_adjacency(edges: torch.Tensor, n: int, vals: torch.Tensor | None = None) -> torch.Tensor:
    """The dense ``(n, n)`` matrix of COO edges (duplicates add), for tests and small graphs."""
    M = torch.zeros(n, n, dtype=vals.dtype if vals is not None else torch.float32)
    M.index_put_((edges[0].long(), edges[1].long()),
                 vals if vals is not None else torch.ones(edges.shape[1]), accumulate=True)
    return M
