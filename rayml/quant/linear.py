"""``QuantLinear``: an ``nn.Linear`` replacement holding a LUT-quantized weight, and checkpoints.

The weight is stored as packed indices plus a table per output row (``rayml.kernels.lut_gemm``
format); ``forward`` runs ``rayml.kernels.lut_gemm.lut_gemm`` (the Triton kernel on CUDA, the torch
table reference elsewhere) and adds the full-precision outliers of GANQ's Algorithm 2, if any,
and the bias.

``save_quantized`` writes a model with its ``QuantLinear`` layers to one safetensors file (the
layers' shapes and bit widths in the file's metadata); ``load_quantized`` rebuilds them in a
freshly constructed model of the same architecture and loads every tensor.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> from rayml.quant.baselines import rtn_per_channel
    >>> from rayml.quant.linear import QuantLinear
    >>> lin = nn.Linear(10, 3)
    >>> q = QuantLinear.from_linear(lin, rtn_per_channel(lin.weight, bits=4))
    >>> q(torch.ones(2, 10)).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from rayml.kernels.lut_gemm import indices_per_word, lut_gemm, pack_indices
from rayml.quant.layer import LayerQuant, check_bits

__all__ = ["QuantLinear", "replace_linears", "save_quantized", "load_quantized", "METADATA_KEY"]

METADATA_KEY = "rayml.quant_linear"


class QuantLinear(nn.Module):
    """``y = x W~^T + b`` with ``W~[n, k] = table[n, idx[n, k]]`` (+ sparse full-precision outliers).

    Args:
        in_features, out_features: as in ``nn.Linear``.
        bits: index width (2..8).
        bias: whether there is a bias.
        n_outliers: number of full-precision entries (0: none).
    """

    def __init__(self, in_features: int, out_features: int, bits: int, *, bias: bool = True,
                 n_outliers: int = 0):
        super().__init__()
        check_bits(bits)
        self.in_features, self.out_features, self.bits = int(in_features), int(out_features), bits
        words = math.ceil(self.in_features / indices_per_word(bits))
        self.register_buffer("packed", torch.zeros(out_features, words, dtype=torch.int32))
        self.register_buffer("table", torch.zeros(out_features, 2 ** bits))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        self.register_buffer("outlier_index", torch.zeros(n_outliers, 2, dtype=torch.int64))
        self.register_buffer("outlier_value", torch.zeros(n_outliers))

    @classmethod
    def from_linear(cls, linear: nn.Linear, quant: LayerQuant) -> "QuantLinear":
        """Build from an ``nn.Linear`` (for its bias) and its quantized weight."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        if tuple(quant.indices.shape) != (linear.out_features, linear.in_features):
            raise ValueError(f"quant.indices has shape {tuple(quant.indices.shape)}, the layer's weight is "
                             f"{(linear.out_features, linear.in_features)}")
        k = 0 if quant.outlier_index is None else int(quant.outlier_index.shape[0])
        mod = cls(linear.in_features, linear.out_features, quant.bits, bias=linear.bias is not None, n_outliers=k)
        dev = linear.weight.device
        mod.packed = pack_indices(quant.indices.long().cpu(), quant.bits).to(dev)
        mod.table = quant.table.detach().to(device=dev, dtype=linear.weight.dtype).clone()
        if linear.bias is not None:
            mod.bias = linear.bias.detach().clone()
        if k:
            mod.outlier_index = quant.outlier_index.to(dev).clone()
            mod.outlier_value = quant.outlier_value.to(device=dev, dtype=linear.weight.dtype).clone()
        return mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = lut_gemm(x, self.packed, self.table, self.bits, self.in_features)
        if self.outlier_index.shape[0]:
            lead = y.shape[:-1]
            x2 = x.reshape(-1, self.in_features)
            y2 = y.reshape(-1, self.out_features).clone()
            rows, cols = self.outlier_index[:, 0], self.outlier_index[:, 1]
            y2.index_add_(1, rows, x2[:, cols] * self.outlier_value.to(x.dtype))
            y = y2.reshape(*lead, self.out_features)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"bias={self.bias is not None}, outliers={self.outlier_index.shape[0]}")


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def replace_linears(model: nn.Module, quants: Mapping[str, LayerQuant]) -> nn.Module:
    """Replace each named ``nn.Linear`` of ``model`` by a ``QuantLinear`` of ``quants[name]`` (in place).

    Raises:
        KeyError: a name is not a module of ``model``.
        TypeError: a named module is not an ``nn.Linear``.
    """
    modules = dict(model.named_modules())
    for name in quants:
        if name not in modules:
            raise KeyError(f"quants: the model has no module {name!r}")
        if not isinstance(modules[name], nn.Linear):
            raise TypeError(f"quants: module {name!r} is a {type(modules[name]).__name__}, not an nn.Linear")
    for name, quant in quants.items():
        _set_module(model, name, QuantLinear.from_linear(modules[name], quant))
    return model


def save_quantized(model: nn.Module, path) -> Path:
    """Write ``model``'s state (``QuantLinear`` buffers included) to a safetensors file."""
    from safetensors.torch import save_file

    layers = {name: {"in_features": m.in_features, "out_features": m.out_features, "bits": m.bits,
                     "bias": m.bias is not None, "n_outliers": int(m.outlier_index.shape[0])}
              for name, m in model.named_modules() if isinstance(m, QuantLinear)}
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    path = Path(path)
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(layers)})
    return path


def load_quantized(model: nn.Module, path) -> nn.Module:
    """Load a ``save_quantized`` file into ``model`` (same architecture, full precision): the
    recorded layers become ``QuantLinear`` and every tensor is loaded strictly."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        meta = (f.metadata() or {}).get(METADATA_KEY)
    if meta is None:
        raise ValueError(f"path: {path} is not a rayml quantized checkpoint (no {METADATA_KEY!r} metadata)")
    modules = dict(model.named_modules())
    for name, spec in json.loads(meta).items():
        old = modules.get(name)
        if not isinstance(old, (nn.Linear, QuantLinear)):
            raise TypeError(f"model: module {name!r} should be an nn.Linear, got {type(old).__name__}")
        _set_module(model, name, QuantLinear(spec["in_features"], spec["out_features"], spec["bits"],
                                             bias=spec["bias"], n_outliers=spec["n_outliers"]))
    state = load_file(str(path))
    model.load_state_dict(state, strict=True)
    return model
