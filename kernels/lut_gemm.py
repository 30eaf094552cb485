"""LUT GEMM: ``y = x W^T`` with ``W`` stored as packed low-bit indices plus a table per row.

The weight format of LUT-based non-uniform quantization (GANQ, Zhao & Yuan, ICML 2025; the
kernels follow the per-row LUT style of SqueezeLLM): ``W[n, k] = table[n, idx[n, k]]`` with
``idx`` of ``bits`` bits (2..8) packed little-end first into int32 words, ``32 // bits`` indices a
word (8 at 4 bits; 10 at 3 bits, i.e. 3.2 bits a weight; the 2 top bits are unused), each row
padded to whole words.

* ``lut_gemm_triton``: the Triton kernel and its launcher. Each program computes a
  ``BLOCK_M x BLOCK_N`` tile of ``y``; per ``BLOCK_K`` step it loads the packed words of its rows,
  extracts the indices with shifts and masks, looks the values up in the rows' tables (a gather
  from the small per-row table, no dense ``W`` in memory) and accumulates ``x_tile @ w_tile^T``
  with ``tl.dot`` in float32.
* ``lut_gemm_reference``: plain torch, also a table method: for each row ``n`` it sums the inputs
  that share an index (``B[m, n, s] = sum_{k: idx[n,k] = s} x[m, k]``, an ``index_add``) and
  takes ``y[m, n] = sum_s table[n, s] B[m, n, s]``: one multiply per table entry instead of one
  per weight.
* ``dequant_matmul``: the dequantise-then-multiply path (unpack, gather to a dense ``W``, matmul).
* ``lut_gemm``: the dispatcher: Triton on CUDA tensors when Triton is installed, the reference
  elsewhere.

``TRITON_INTERPRET=1`` (set before importing triton) runs the kernel on the CPU with numpy, which
is how the tests check it without a GPU.

Examples:
    >>> import torch
    >>> from rayml.kernels.lut_gemm import pack_indices, lut_gemm, dequant_matmul
    >>> idx = torch.tensor([[0, 1, 2, 3, 4], [7, 6, 5, 4, 3]])
    >>> table = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    >>> packed = pack_indices(idx, bits=3)
    >>> x = torch.ones(1, 5)
    >>> lut_gemm(x, packed, table, bits=3, in_features=5)
    tensor([[10., 65.]])
    >>> dequant_matmul(x, packed, table, bits=3, in_features=5)
    tensor([[10., 65.]])
"""

from __future__ import annotations

import functools
import importlib.util
import math

import torch

# Triton is optional and imported only when the kernel is first launched, so that setting
# TRITON_INTERPRET=1 any time before that (e.g. in a test module) takes effect.
HAS_TRITON = importlib.util.find_spec("triton") is not None

__all__ = [
    "HAS_TRITON",
    "indices_per_word",
    "pack_indices",
    "unpack_indices",
    "dequantize_packed",
    "lut_gemm_reference",
    "dequant_matmul",
    "lut_gemm_triton",
    "lut_gemm",
    "weight_bytes",
]


def _check_bits(bits) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer in 2..8, got {bits!r}")
    return bits


def indices_per_word(bits: int) -> int:
    """How many ``bits``-bit indices one int32 word holds (``32 // bits``)."""
    return 32 // _check_bits(bits)


def pack_indices(indices: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack ``(N, K)`` indices in ``[0, 2^bits)`` into ``(N, ceil(K / (32 // bits)))`` int32 words."""
    per = indices_per_word(bits)
    if indices.dim() != 2:
        raise ValueError(f"indices must be 2-d (out_features, in_features), got shape {tuple(indices.shape)}")
    q = indices.to(torch.int64)
    if q.numel() and (int(q.min()) < 0 or int(q.max()) >= 2 ** bits):
        raise ValueError(f"indices must lie in [0, {2 ** bits}) for bits={bits}")
    n, k = q.shape
    words = math.ceil(k / per)
    q = torch.nn.functional.pad(q, (0, words * per - k)).reshape(n, words, per)
    shifts = torch.arange(per, dtype=torch.int64) * bits
    packed = (q << shifts).sum(dim=2)
    packed = torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed)
    return packed.to(torch.int32).contiguous()


def unpack_indices(packed: torch.Tensor, bits: int, in_features: int) -> torch.Tensor:
    """Inverse of ``pack_indices``: ``(N, in_features)`` int64 indices."""
    per = indices_per_word(bits)
    shifts = torch.arange(per, dtype=torch.int64, device=packed.device) * bits
    q = (packed.to(torch.int64)[:, :, None] >> shifts) & (2 ** bits - 1)
    return q.reshape(packed.shape[0], -1)[:, :in_features]


def dequantize_packed(packed: torch.Tensor, table: torch.Tensor, bits: int, in_features: int) -> torch.Tensor:
    """The dense ``(N, in_features)`` weight ``table[n, idx[n, k]]``."""
    return torch.gather(table, 1, unpack_indices(packed, bits, in_features))


def _check(x, packed, table, bits, in_features):
    _check_bits(bits)
    if x.shape[-1] != in_features:
        raise ValueError(f"x: last dimension {x.shape[-1]} != in_features {in_features}")
    if packed.dtype != torch.int32 or packed.dim() != 2:
        raise ValueError(f"packed must be a 2-d int32 tensor, got {packed.dtype} {tuple(packed.shape)}")
    if packed.shape[1] != math.ceil(in_features / indices_per_word(bits)):
        raise ValueError(f"packed has {packed.shape[1]} words a row; in_features={in_features} at "
                         f"bits={bits} needs {math.ceil(in_features / indices_per_word(bits))}")
    if table.shape != (packed.shape[0], 2 ** bits):
        raise ValueError(f"table must have shape ({packed.shape[0]}, {2 ** bits}), got {tuple(table.shape)}")


def lut_gemm_reference(x: torch.Tensor, packed: torch.Tensor, table: torch.Tensor, bits: int,
                       in_features: int, *, max_elements: int = 1 << 22) -> torch.Tensor:
    """``y = x W^T`` by per-row bucket sums and table lookups (plain torch; any device).

    Args:
        x: ``(..., in_features)``.
        packed, table, bits, in_features: the LUT weight (see ``pack_indices``).
        max_elements: bound on the temporary ``M x rows x in_features`` scatter (memory only).

    Returns:
        ``(..., out_features)`` in ``x``'s dtype (accumulated in float32).
    """
    _check(x, packed, table, bits, in_features)
    lead = x.shape[:-1]
    xf = x.reshape(-1, in_features).to(torch.float32)
    m, n, levels = xf.shape[0], packed.shape[0], 2 ** bits
    idx = unpack_indices(packed, bits, in_features)
    tab = table.to(torch.float32)
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    rows = max(1, max_elements // max(1, m * in_features))
    for s in range(0, n, rows):
        e = min(n, s + rows)
        flat = (idx[s:e] + levels * torch.arange(e - s, device=x.device)[:, None]).reshape(-1)
        buckets = torch.zeros(m, (e - s) * levels, dtype=torch.float32, device=x.device)
        buckets.index_add_(1, flat, xf.repeat(1, e - s))
        y[:, s:e] = (buckets.view(m, e - s, levels) * tab[s:e]).sum(dim=2)
    return y.to(x.dtype).reshape(*lead, n)


def dequant_matmul(x: torch.Tensor, packed: torch.Tensor, table: torch.Tensor, bits: int,
                   in_features: int) -> torch.Tensor:
    """``y = x W^T`` by dequantising ``W`` to a dense matrix first, then one matmul."""
    _check(x, packed, table, bits, in_features)
    w = dequantize_packed(packed, table, bits, in_features).to(x.dtype)
    return x @ w.T


@functools.lru_cache(maxsize=None)
def _kernel():
    """Import Triton and define the kernel (once)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _lut_gemm_kernel(x_ptr, w_ptr, t_ptr, y_ptr, M, N, K,
                         stride_xm, stride_xk, stride_wn, stride_tn, stride_ym, stride_yn,
                         BITS: tl.constexpr, PER_WORD: tl.constexpr, IEEE: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < M
        mask_n = offs_n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < K
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                        mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            wmask = mask_n[:, None] & mask_k[None, :]
            words = tl.load(w_ptr + offs_n[:, None] * stride_wn + (offs_k // PER_WORD)[None, :],
                            mask=wmask, other=0)
            q = (words >> ((offs_k % PER_WORD) * BITS)[None, :]) & ((1 << BITS) - 1)
            w = tl.load(t_ptr + offs_n[:, None] * stride_tn + q, mask=wmask, other=0.0).to(x.dtype)
            if IEEE:
                acc += tl.dot(x, tl.trans(w), input_precision="ieee")
            else:
                acc += tl.dot(x, tl.trans(w))
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc,
                 mask=mask_m[:, None] & mask_n[None, :])

    return triton, _lut_gemm_kernel


def lut_gemm_triton(x: torch.Tensor, packed: torch.Tensor, table: torch.Tensor, bits: int,
                    in_features: int, *, block_m: int | None = None, block_n: int = 64,
                    block_k: int = 64) -> torch.Tensor:
    """Launch the Triton LUT GEMM kernel (CUDA tensors, or any tensors under ``TRITON_INTERPRET=1``).

    Returns ``(..., out_features)`` in ``x``'s dtype, accumulated in float32 (float32 inputs use
    IEEE products, not TF32).
    """
    if not HAS_TRITON:
        raise RuntimeError("lut_gemm_triton needs the 'triton' package (pip install triton)")
    _check(x, packed, table, bits, in_features)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, in_features).contiguous()
    m, n = x2.shape[0], packed.shape[0]
    packed = packed.contiguous()
    table = table.to(x2.dtype).contiguous()
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    bm = block_m if block_m is not None else (16 if m <= 16 else 64)
    triton, kernel = _kernel()
    grid = (triton.cdiv(m, bm), triton.cdiv(n, block_n))
    kernel[grid](
        x2, packed, table, y, m, n, in_features,
        x2.stride(0), x2.stride(1), packed.stride(0), table.stride(0), y.stride(0), y.stride(1),
        BITS=bits, PER_WORD=32 // bits, IEEE=x2.dtype == torch.float32,
        BLOCK_M=bm, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return y.to(x.dtype).reshape(*lead, n)


def lut_gemm(x: torch.Tensor, packed: torch.Tensor, table: torch.Tensor, bits: int,
             in_features: int) -> torch.Tensor:
    """``y = x W^T`` for a LUT weight: the Triton kernel on CUDA, ``lut_gemm_reference`` elsewhere."""
    if x.is_cuda and HAS_TRITON:
        return lut_gemm_triton(x, packed, table, bits, in_features)
    return lut_gemm_reference(x, packed, table, bits, in_features)


def weight_bytes(out_features: int, in_features: int, bits: int, table_bytes_per_entry: int = 2) -> int:
    """Bytes of a packed LUT weight: int32 words plus ``2^bits`` table entries a row."""
    words = math.ceil(in_features / indices_per_word(bits))
    return out_features * (4 * words + table_bytes_per_entry * 2 ** bits)
