"""rayml.graphs.message_passing: every sparse aggregation equals its dense matrix product."""

import numpy as np
import pytest
import torch

from rayml.graphs import message_passing as mp


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Small graphs: one thread is much faster than a contended pool (and is what Ray tasks use)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _coo(n_rows, n_cols, nnz, seed):
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, n_rows, (nnz,), generator=g)
    cols = torch.randint(0, n_cols, (nnz,), generator=g)
    vals = torch.randn(nnz, generator=g, dtype=torch.float64)
    return rows, cols, vals


@pytest.mark.parametrize("shape", [(7, 5, 20), (13, 13, 60), (1, 9, 4)])
def test_spmm_equals_dense_product_with_duplicates(shape):
    n_rows, n_cols, nnz = shape
    rows, cols, vals = _coo(n_rows, n_cols, nnz, seed=sum(shape))
    x = torch.randn(n_cols, 3, dtype=torch.float64)
    M = torch.zeros(n_rows, n_cols, dtype=torch.float64)
    for r, c, v in zip(rows.tolist(), cols.tolist(), vals.tolist()):
        M[r, c] += v  # duplicates add
    assert torch.allclose(mp.spmm(rows, cols, vals, x, n_rows), M @ x)
    assert torch.allclose(mp.spmm(rows, cols, None, x, n_rows), _count(rows, cols, n_rows, n_cols) @ x)
    assert torch.allclose(mp.dense_adjacency(torch.stack([rows, cols]), max(n_rows, n_cols), vals)[:n_rows, :n_cols], M)


def _count(rows, cols, n_rows, n_cols):
    C = torch.zeros(n_rows, n_cols, dtype=torch.float64)
    for r, c in zip(rows.tolist(), cols.tolist()):
        C[r, c] += 1
    return C


def test_gcn_norm_matches_dense_normalised_adjacency():
    e = mp.to_undirected(torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 4, 4]]))
    e = mp.add_self_loops(e, 5)
    w = mp.gcn_norm(e, 5)
    A = mp.dense_adjacency(e, 5)
    d = A.sum(1)
    ref = A / torch.sqrt(d[:, None] * d[None, :])
    x = torch.randn(5, 2)
    assert torch.allclose(mp.spmm(e[0], e[1], w, x, 5), ref @ x, atol=1e-6)


def test_segment_mean_and_sum():
    x = torch.arange(12.0).reshape(6, 2)
    batch = torch.tensor([0, 0, 1, 1, 1, 3])
    s = mp.segment_sum(x, batch, 4)
    assert torch.equal(s[1], x[2:5].sum(0)) and torch.equal(s[2], torch.zeros(2))
    m = mp.segment_mean(x, batch, 4)
    assert torch.allclose(m[1], x[2:5].mean(0)) and torch.equal(m[3], x[5])


def test_to_undirected_drops_loops_and_duplicates():
    e = mp.to_undirected(torch.tensor([[0, 1, 1, 2], [1, 0, 1, 0]]))
    assert sorted(map(tuple, e.t().tolist())) == [(0, 1), (0, 2), (1, 0), (2, 0)]


def test_bad_input():
    with pytest.raises(TypeError, match="index"):
        mp.scatter_sum(torch.ones(3), torch.ones(3), 2)
    with pytest.raises(ValueError, match="rows"):
        mp.spmm(torch.tensor([0, 1]), torch.tensor([0]), None, torch.ones(2, 1), 2)
    with pytest.raises(ValueError, match="edges"):
        mp.to_undirected(torch.zeros(3, 2, dtype=torch.long))
