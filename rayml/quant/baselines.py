"""Weight-quantization baselines for GANQ, on the same layers and calibration statistics.

* ``rtn_per_channel``: round-to-nearest on a per-row asymmetric min-max grid of ``2^N`` levels.
* ``rtn_grouped``: the same on groups of ``group_size`` consecutive columns of each row.
* ``equal_bits_group_size``: the group size at which a grid per group (an fp16 scale and an
  ``N``-bit zero point) costs no more bits per row than a per-row table of ``2^N`` fp16 entries
  (GANQ's and k-means' format), so grouped baselines are compared at equal bits per weight.
* ``gptq``: GPTQ, Frantar, Ashkboos, Hoefler and Alistarh, "GPTQ: Accurate Post-Training
  Quantization for Generative Pre-trained Transformers", ICLR 2023 (arXiv 2210.17323),
  Algorithm 1: columns quantized in order, the error of each column spread over the columns
  not yet quantized through the upper Cholesky factor of ``H^-1``, with lazy batch updates of
  ``block`` columns; dampening ``H + 0.01 mean(diag H) I`` (paper Sec. 4, "Cholesky
  Reformulation"); per-row min-max grid fixed from the original row (the paper's per-channel
  setting). Assumed: the original code's handling of dead inputs (``H_jj = 0``: ``H_jj = 1`` and
  ``W_:j = 0``); no act-order (not in the paper).
* ``gptq_grouped``: the same with a min-max grid per group of ``group_size`` columns, set when
  the sweep reaches the group's first column from the weights as updated so far (the grouping of
  the GPTQ reference code; the lazy-batch width is a multiple of the group size, so every group
  starts a batch and its grid sees all earlier updates).
* ``kmeans_per_row``: Lloyd's algorithm in 1-d on each row, optionally weighted per column
  (e.g. by ``diag(H)``, the diagonal of GANQ's objective); a per-row table like GANQ's.
  Assumed: init at the row's quantiles ``(k + 1/2) / 2^N``; an empty cluster keeps its centre.
  Assignment to the nearest centre by ``searchsorted`` on the midpoints of the sorted centres
  (ties go to the lower centre, as ``argmin`` would).

Every per-row-grid method returns a ``rayml.quant.ganq.LayerQuant`` (indices + per-row table),
so the same LUT kernels run them; ``rtn_grouped`` returns the dense dequantized weight.

Examples:
    >>> import torch
    >>> from rayml.quant.baselines import rtn_per_channel
    >>> q = rtn_per_channel(torch.tensor([[0.0, 1.0, 2.0, 3.0]]), bits=2)
    >>> q.dequantize()
    tensor([[0., 1., 2., 3.]])
"""

from __future__ import annotations

import torch

from rayml.quant.layer import LayerQuant, check_bits

__all__ = ["minmax_grid", "rtn_per_channel", "rtn_grouped", "equal_bits_group_size", "gptq", "gptq_grouped",
           "kmeans_per_row"]

_DTYPE = torch.float64


def _check_w(W) -> torch.Tensor:
    if not isinstance(W, torch.Tensor) or W.dim() != 2:
        raise ValueError(f"W must be a 2-d tensor (out_features, in_features), got {getattr(W, 'shape', W)!r}")
    return W.detach().to(_DTYPE).cpu()


def minmax_grid(W: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ``(scale, zero)`` of the asymmetric min-max grid ``scale * (k - zero)``, k < 2^N.

    The range always contains 0 (as in the GPTQ code); a constant row gets ``scale = 1``.
    """
    levels = 2 ** check_bits(bits) - 1
    lo = W.min(dim=1).values.clamp(max=0)
    hi = W.max(dim=1).values.clamp(min=0)
    scale = (hi - lo) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-lo / scale)
    return scale, zero


def _round(W: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    return torch.clamp(torch.round(W / scale[:, None]) + zero[:, None], 0, 2 ** bits - 1)


def _grid_table(scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    k = torch.arange(2 ** bits, dtype=_DTYPE)
    return scale[:, None] * (k[None, :] - zero[:, None])


def rtn_per_channel(W: torch.Tensor, bits: int) -> LayerQuant:
    """Round-to-nearest on each row's min-max grid, as a ``LayerQuant`` (table = the grid)."""
    W = _check_w(W)
    scale, zero = minmax_grid(W, bits)
    q = _round(W, scale, zero, bits)
    return LayerQuant(indices=q.to(torch.uint8), table=_grid_table(scale, zero, bits).float(), bits=bits)


def rtn_grouped(W: torch.Tensor, bits: int, group_size: int = 128) -> torch.Tensor:
    """Round-to-nearest with a min-max grid per ``group_size`` columns of each row (dense result)."""
    W = _check_w(W)
    check_bits(bits)
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
    out = torch.empty_like(W)
    for s in range(0, W.shape[1], group_size):
        g = W[:, s:s + group_size]
        scale, zero = minmax_grid(g, bits)
        out[:, s:s + group_size] = scale[:, None] * (_round(g, scale, zero, bits) - zero[:, None])
    return out.float()


def equal_bits_group_size(bits: int, in_features: int) -> int:
    """The smallest group size whose grids cost at most a per-row table of ``2^bits`` fp16 entries.

    A group stores an fp16 scale and a ``bits``-bit zero point (``16 + bits`` bits, the GPTQ
    format); a row of ``in_features`` columns may then hold ``G = floor(16 * 2^bits / (16 + bits))``
    groups (6 at 3 bits, 12 at 4 bits), i.e. groups of ``ceil(in_features / G)`` columns.
    """
    check_bits(bits)
    if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features < 1:
        raise ValueError(f"in_features must be an integer >= 1, got {in_features!r}")
    groups = (16 * 2 ** bits) // (16 + bits)
    return -(-in_features // groups)


def _gptq(W: torch.Tensor, H: torch.Tensor, bits: int, block: int, percdamp: float,
          group_size: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """GPTQ's sweep; returns ``(indices, dequantized W, per-row (scale, zero) or None)``."""
    W = _check_w(W).clone()
    check_bits(bits)
    n = W.shape[1]
    if not isinstance(H, torch.Tensor) or H.shape != (n, n):
        raise ValueError(f"H must be a ({n}, {n}) tensor, got {tuple(getattr(H, 'shape', ()))}")
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block!r}")
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
        block = group_size * max(1, block // group_size)  # every group starts a lazy batch
    H = H.detach().to(_DTYPE).cpu().clone()
    dead = torch.diagonal(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    scale, zero = minmax_grid(W, bits)
    H += percdamp * torch.diagonal(H).mean() * torch.eye(n, dtype=_DTYPE)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    Q = torch.zeros_like(W)
    out = torch.zeros_like(W)
    for i1 in range(0, n, block):
        i2 = min(i1 + block, n)
        W1 = W[:, i1:i2].clone()
        E1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for j in range(i2 - i1):
            if group_size is not None and (i1 + j) % group_size == 0:
                scale, zero = minmax_grid(W1[:, j:j + group_size], bits)
            w = W1[:, j]
            q = _round(w[:, None], scale, zero, bits)[:, 0]
            Q[:, i1 + j] = q
            deq = scale * (q - zero)
            out[:, i1 + j] = deq
            err = (w - deq) / Hinv1[j, j]
            W1[:, j:] -= err[:, None] * Hinv1[j, j:][None, :]
            E1[:, j] = err
        W[:, i2:] -= E1 @ Hinv[i1:i2, i2:]
    return Q, out, (scale, zero) if group_size is None else None


def gptq(W: torch.Tensor, H: torch.Tensor, bits: int, *, block: int = 128, percdamp: float = 0.01) -> LayerQuant:
    """GPTQ (Algorithm 1 of Frantar et al., ICLR 2023) with a per-row min-max grid.

    Args:
        W: ``(out_features, in_features)`` weight.
        H: ``X X^T`` of the calibration inputs (any positive scale).
        bits: 2..8.
        block: the lazy-batch width ``B``.
        percdamp: dampening as a fraction of ``mean(diag H)``.
    """
    Q, _, (scale, zero) = _gptq(W, H, bits, block, percdamp, None)
    return LayerQuant(indices=Q.to(torch.uint8), table=_grid_table(scale, zero, bits).float(), bits=bits)


def gptq_grouped(W: torch.Tensor, H: torch.Tensor, bits: int, group_size: int, *, block: int = 128,
                 percdamp: float = 0.01) -> torch.Tensor:
    """GPTQ with a min-max grid per ``group_size`` columns of each row (the GPTQ paper's grouping,
    its Table 4 / reference code ``groupsize``); returns the dense dequantized weight (float32)."""
    _, out, _ = _gptq(W, H, bits, block, percdamp, group_size)
    return out.float()


def kmeans_per_row(W: torch.Tensor, bits: int, *, weights: torch.Tensor | None = None,
                   iterations: int = 50, row_chunk: int = 256) -> LayerQuant:
    """Per-row 1-d (weighted) k-means with ``2^N`` centres, the centres being the row's table.

    Args:
        W: ``(out_features, in_features)`` weight.
        bits: 2..8.
        weights: optional ``(in_features,)`` non-negative column weights (e.g. ``diag(H)``).
        iterations: Lloyd iterations (stops early when assignments stop changing).
        row_chunk: rows processed at once (memory only).
    """
    W = _check_w(W)
    levels = 2 ** check_bits(bits)
    n = W.shape[1]
    if weights is None:
        wt = torch.ones(n, dtype=_DTYPE)
    else:
        wt = torch.as_tensor(weights, dtype=_DTYPE).flatten()
        if wt.shape != (n,) or bool((wt < 0).any()):
            raise ValueError(f"weights must be {n} non-negative numbers")
        wt = wt + 1e-12 * float(wt.max().clamp_min(1e-300))
    fractions = (torch.arange(levels, dtype=_DTYPE) + 0.5) / levels
    idx_out, tab_out = [], []
    for s in range(0, W.shape[0], row_chunk):
        Wc = W[s:s + row_chunk]
        C = torch.quantile(Wc, fractions, dim=1).T.contiguous()
        assign = None
        for _ in range(iterations):
            C = torch.sort(C, dim=1).values
            mid = (0.5 * (C[:, 1:] + C[:, :-1])).contiguous()
            new = torch.searchsorted(mid, Wc.contiguous(), side="left")
            if assign is not None and torch.equal(new, assign):
                break
            assign = new
            mass = torch.zeros(Wc.shape[0], levels, dtype=_DTYPE).scatter_add_(1, assign, wt.expand_as(Wc))
            total = torch.zeros(Wc.shape[0], levels, dtype=_DTYPE).scatter_add_(1, assign, wt * Wc)
            C = torch.where(mass > 0, total / mass.clamp_min(1e-300), C)
        idx_out.append(assign)
        tab_out.append(C)
    return LayerQuant(indices=torch.cat(idx_out).to(torch.uint8), table=torch.cat(tab_out).float(), bits=bits)
