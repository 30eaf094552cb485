"""A LUT-quantized weight (``LayerQuant``) and the bit-width check shared by GANQ, its baselines
and ``QuantLinear``: the one data type every quantizer in ``rayml.quant`` returns."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["LayerQuant", "check_bits"]


def check_bits(bits) -> int:
    """``bits`` as an int in 2..8, else ``ValueError`` naming ``bits``."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer in 2..8, got {bits!r}")
    return bits


@dataclass(frozen=True)
class LayerQuant:
    """A LUT-quantized weight: ``W~[i, j] = table[i, indices[i, j]]`` plus optional outliers.

    Attributes:
        indices: ``(m, n)`` uint8 indices into each row's table.
        table: ``(m, 2^bits)`` float32 per-row tables.
        bits: the bit width.
        outlier_index: ``(k, 2)`` int64 (row, column) of full-precision entries, or ``None``.
        outlier_value: ``(k,)`` float32 values added at those positions, or ``None``.
    """

    indices: torch.Tensor
    table: torch.Tensor
    bits: int
    outlier_index: torch.Tensor | None = None
    outlier_value: torch.Tensor | None = None

    def dequantize(self) -> torch.Tensor:
        """The dense ``(m, n)`` float32 weight this quantization represents."""
        w = torch.gather(self.table, 1, self.indices.long())
        if self.outlier_index is not None and len(self.outlier_index):
            w = w.index_put((self.outlier_index[:, 0], self.outlier_index[:, 1]), self.outlier_value,
                            accumulate=True)
        return w
