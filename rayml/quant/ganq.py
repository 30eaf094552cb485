"""GANQ: layer-wise LUT-based non-uniform post-training quantization of ``nn.Linear`` layers.

Pengxiang Zhao and Xiaoming Yuan, "GANQ: GPU-Adaptive Non-Uniform Quantization for Large
Language Models", ICML 2025 (arXiv 2501.12956 v2).

Each output row ``i`` of a layer ``W`` (``m x n``) gets its own table ``T_i`` of ``2^N`` values
and an index row ``Q_i``; the quantized weight is ``W~_ij = T_{i, Q_ij}``. The paper minimises
the layer output error ``|W X - W~ X|_F^2`` (eq. 1), which splits into ``m`` independent row
problems (eq. 2) over ``H = X X^T``, by alternating (eqs. 3-4; Algorithm 1):

* the S-step (``s_step``): with the table fixed, sweep the columns ``j = n-1 .. 0`` of the
  Cholesky factor ``H = L L^T`` (eq. 8) and pick, for every row at once, the entry nearest to
  ``W_ij + (1 / L_jj) sum_{u > j} r_u L_uj`` with ``r_u = W_iu - W~_iu`` (eq. 20). The printed
  Algorithm 1 updates the residual with column ``j`` of ``L`` instead of ``j - 1``; this module
  follows eq. (20), which is what the derivation (eqs. 12-19) gives;
* the T-step (``t_step``): the closed form ``T_i = W_i H S_i^T (S_i H S_i^T)^+`` (eq. 5), a
  ``2^N x 2^N`` Moore-Penrose pseudo-inverse per row, batched over rows;
* Remark 3.1: when ``H`` is not positive definite, ``H + lambda I`` is factored instead;
* Section 3.3 / Appendix A, Algorithm 2 (optional, ``outlier_ratio > 0``): the fraction
  ``outlier_ratio`` of each row's largest and smallest entries (half each side) stays in full
  precision (a sparse part) and the rest, with zeros at those positions, is quantized.

Assumed (not in the paper):
  * ``T^0``: the paper takes it as an input. Following a third-party port (PrunaAI/pruna), 4-bit
    tables put 3, 5, 5, 3 levels (2, 6, 6, 2 with outliers) on the four equal quarters of each
    row's ``[min, max]`` (linspace including both ends of each quarter), 3-bit tables are the
    row's empirical quantiles at 0, .2, .35, .5, .65, .8, .9, 1. Other bit widths (2, 5..8):
    quantiles at evenly spaced fractions. The port's per-row median/IQR normalisation is left
    out: each row's problem is invariant to a per-row affine map.
  * ``lambda`` of Remark 3.1: ``damp * mean(diag H)``, multiplied by 10 until Cholesky succeeds.
  * The returned iterate is the one with the lowest objective ``tr(R H R^T)`` over the ``K``
    iterations (both ports do this; the paper returns the last one), ``K = 10`` (paper Sec. 4.4).
  * A table entry that no index of its row uses after an S-step keeps its previous value; the
    pseudo-inverse would set it to 0. Both minimise eq. (4) equally.
  * All arithmetic in float64; ``H`` is averaged over calibration tokens (a scale of ``H``
    changes neither step).
  * Keeping an unused entry (rather than the pseudo-inverse's 0) was measured on the ``base``
    substrate's layers: equal at 3 bits, a lower objective at 4 bits on 3 of 4 layers (e.g.
    ``mlp.up_proj`` relative error 1.86e-4 vs 2.40e-4). The port's 4-bit ``T^0`` repeats the three
    quarter boundaries; the repeats separate after the first T-step (16 distinct levels in use).

Not in the paper (off by default): ``GANQConfig.percdamp > 0`` runs both steps on
``H + percdamp * mean(diag H) I`` (GPTQ's dampening). Remark 3.1 damps only an ``H`` that is not
positive definite; an ``H`` that is positive definite but ill-conditioned (condition numbers up to ~1e7 on
the ``base`` substrate's layers, Cholesky succeeds even in float32) can make the
back-substitution's ``c_j / L_jj`` large and the S-step far from optimal (measured on
``layers.1.self_attn.o_proj`` at 3 bits: calibration relative error 1.2e-2, GPTQ 1.5e-3, with
``percdamp=0.01`` in the S-step 1.1e-3).

Calibration protocol (``quantize_sequential``): the authors' code is GPTQ's (the paper, Sec. 4.1,
follows Frantar et al. for calibration), as a port that mirrors it shows (PrunaAI/pruna: "group
submodules like the official repo"): decoder blocks are quantized in order, each on the outputs
of the already-quantized blocks before it, and inside a block the groups ``[k, v, q]``, ``[o]``,
``[up, gate]``, ``[down]`` in order, each calibrated on inputs computed with the groups before it
already quantized (``LLAMA_GROUPS``).

Rows are independent, so ``quantize_weight`` works on row blocks and ``quantize_weight_ray``
sends the same blocks to Ray tasks (``rayml.runtime.pmap``, ``shared=`` the layer's ``W`` and
``H``); both give bit-identical results. ``quantize_layers`` quantizes many layers at several
bit widths as one map.

Examples:
    >>> import torch
    >>> from rayml.quant.ganq import GANQConfig, quantize_weight
    >>> g = torch.Generator().manual_seed(0)
    >>> W, X = torch.randn(8, 32, generator=g), torch.randn(256, 32, generator=g)
    >>> res = quantize_weight(W, X.T @ X / 256, GANQConfig(bits=3))
    >>> res.quant.indices.shape, res.quant.table.shape
    (torch.Size([8, 32]), torch.Size([8, 8]))
    >>> bool(res.objective <= res.history[0]["objective_s"])
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

import torch
from torch import nn

from rayml.quant.layer import LayerQuant, check_bits
from rayml.quant.linear import replace_linears

__all__ = [
    "GANQConfig",
    "LayerQuant",
    "GANQResult",
    "check_bits",
    "linear_layers",
    "collect_hessians",
    "cholesky_factor",
    "objective",
    "initial_table",
    "split_outliers",
    "s_step",
    "t_step",
    "ganq_rows",
    "quantize_weight",
    "quantize_weight_ray",
    "row_blocks",
    "quantize_layers",
    "quantize_model",
    "LLAMA_GROUPS",
    "quantize_sequential",
]

_DTYPE = torch.float64


@dataclass(frozen=True)
class GANQConfig:
    """Settings of GANQ.

    Attributes:
        bits: ``N``: each row's table has ``2^N`` entries (2..8; the paper uses 3 and 4).
        iterations: ``K`` alternations of S-step and T-step (paper: 10).
        outlier_ratio: fraction of each row kept in full precision (Algorithm 2; the paper's
            GANQ* uses 0.005); 0 disables outlier extraction (the paper's plain GANQ).
        damp: ``lambda = damp * mean(diag H)`` when ``H`` is not positive definite (Remark 3.1).
        percdamp: not in the paper (0, the default, is the paper's GANQ): when ``> 0`` both steps
            work on ``H + percdamp * mean(diag H) I`` always (GPTQ's dampening; a ridge term on
            the objective), which keeps the back-substitution stable when ``H`` is positive
            definite but ill-conditioned. The reported objective stays the undamped one.
        keep_best: return the iterate with the lowest objective (both ports) instead of the last.
        row_block: rows per block (``None``: all rows in one block); the Ray path sends one block
            per task.
        block_columns: columns per block of the S-step's lazy residual update (speed only).
    """

    bits: int = 4
    iterations: int = 10
    outlier_ratio: float = 0.0
    damp: float = 1e-6
    percdamp: float = 0.0
    keep_best: bool = True
    row_block: int | None = None
    block_columns: int = 64

    def __post_init__(self):
        check_bits(self.bits)
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {self.iterations!r}")
        if not 0.0 <= float(self.outlier_ratio) < 0.5:
            raise ValueError(f"outlier_ratio must be in [0, 0.5), got {self.outlier_ratio!r}")
        if not float(self.damp) > 0:
            raise ValueError(f"damp must be > 0, got {self.damp!r}")
        if not float(self.percdamp) >= 0:
            raise ValueError(f"percdamp must be >= 0, got {self.percdamp!r}")
        if self.row_block is not None and (not isinstance(self.row_block, int) or self.row_block < 1):
            raise ValueError(f"row_block must be None or an integer >= 1, got {self.row_block!r}")
        if not isinstance(self.block_columns, int) or self.block_columns < 1:
            raise ValueError(f"block_columns must be an integer >= 1, got {self.block_columns!r}")


@dataclass(frozen=True)
class GANQResult:
    """What ``quantize_weight`` returns.

    Attributes:
        quant: the quantized weight.
        objective: ``tr(R H R^T)`` of the returned iterate (``R = W - W~``, undamped ``H``).
        history: per iteration ``{"iteration", "objective_s", "objective_t"}``: the objective
            after the S-step and after the T-step (summed over row blocks).
        initial_objective: the objective of nearest-entry rounding to ``T^0``.
    """

    quant: LayerQuant
    objective: float
    history: list = field(default_factory=list)
    initial_objective: float = float("nan")


# ---------------------------------------------------------------------------------------------
# Calibration


def linear_layers(model: nn.Module, names: Sequence[str] | None = None) -> dict[str, nn.Linear]:
    """``{name: module}`` of the model's ``nn.Linear`` layers (all, or the ``names`` given).

    Raises:
        TypeError: a named module is not an ``nn.Linear``.
        KeyError: a name is not a module of ``model``.
    """
    modules = dict(model.named_modules())
    if names is None:
        return {n: m for n, m in modules.items() if isinstance(m, nn.Linear)}
    out = {}
    for name in names:
        if name not in modules:
            raise KeyError(f"names: the model has no module {name!r}")
        if not isinstance(modules[name], nn.Linear):
            raise TypeError(f"names: module {name!r} is a {type(modules[name]).__name__}, "
                            "GANQ quantizes nn.Linear layers only")
        out[name] = modules[name]
    return out


@torch.no_grad()
def collect_hessians(model: nn.Module, batches: Iterable, names: Sequence[str] | None = None,
                     *, forward=None, skip_positions: int = 0) -> dict[str, torch.Tensor]:
    """``H = X X^T / tokens`` (float64) of every chosen ``nn.Linear``'s input, from forward hooks.

    Args:
        model: any torch model.
        batches: calibration inputs; each is passed to ``forward(model, batch)`` (default
            ``model(batch)``).
        names: the linear layers to calibrate (default: all ``nn.Linear``).
        forward: how to run one batch.
        skip_positions: the first positions of every ``(batch, sequence, features)`` input left out
            of ``H`` (an attention sink kept at full precision, as ``quantize_sequential``'s).

    Raises:
        ValueError: no calibration batch (or no token) reached a layer.
    """
    layers = linear_layers(model, names)
    if not layers:
        raise ValueError("model: it has no nn.Linear layer to calibrate")
    sums = {n: torch.zeros(m.in_features, m.in_features, dtype=_DTYPE) for n, m in layers.items()}
    counts = {n: 0 for n in layers}

    def hook(name):
        def fn(module, inputs, output):
            x = inputs[0].detach()
            if skip_positions and x.dim() == 3:
                x = x[:, skip_positions:]
            x = x.reshape(-1, module.in_features).to(_DTYPE).cpu()
            sums[name] += x.T @ x
            counts[name] += x.shape[0]
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in layers.items()]
    try:
        for batch in batches:
            forward(model, batch) if forward is not None else model(batch)
    finally:
        for h in handles:
            h.remove()
    empty = [n for n, c in counts.items() if c == 0]
    if empty:
        raise ValueError(f"batches: no calibration data reached layers {empty}; pass at least one batch")
    return {n: sums[n] / counts[n] for n in layers}


# ---------------------------------------------------------------------------------------------
# The algorithm's pieces


def _check_wh(W: torch.Tensor, H: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(W, torch.Tensor) or W.dim() != 2:
        raise ValueError(f"W must be a 2-d tensor (out_features, in_features), got {getattr(W, 'shape', W)!r}")
    if not isinstance(H, torch.Tensor) or H.shape != (W.shape[1], W.shape[1]):
        raise ValueError(f"H must be a ({W.shape[1]}, {W.shape[1]}) tensor, got {tuple(getattr(H, 'shape', ()))}")
    if not (torch.isfinite(W).all() and torch.isfinite(H).all()):
        raise ValueError("W and H must be finite")
    return W.detach().to(_DTYPE).cpu(), H.detach().to(_DTYPE).cpu()


def cholesky_factor(H: torch.Tensor, damp: float = 1e-6) -> tuple[torch.Tensor, float]:
    """Lower-triangular ``L`` with ``L L^T = H + lambda I`` (eq. 8, Remark 3.1) and ``lambda``.

    ``lambda = 0`` when ``H`` is positive definite, else ``damp * mean(diag H)`` times powers of 10
    until the factorisation succeeds (Assumed: the paper gives no value).
    """
    H = H.to(_DTYPE)
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) == 0:
        return L, 0.0
    scale = float(torch.diagonal(H).mean().clamp_min(1e-12))
    lam = damp * scale
    eye = torch.eye(H.shape[0], dtype=_DTYPE)
    for _ in range(20):
        L, info = torch.linalg.cholesky_ex(H + lam * eye)
        if int(info) == 0:
            return L, lam
        lam *= 10.0
    raise ValueError("H: could not make it positive definite (is it symmetric and finite?)")


def objective(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """Per-row ``(W_i - W~_i) H (W_i - W~_i)^T`` (eq. 2 with ``H = X X^T``)."""
    R = (W - W_hat).to(_DTYPE)
    return ((R @ H.to(_DTYPE)) * R).sum(dim=1)


def initial_table(W: torch.Tensor, bits: int, *, outliers: bool = False) -> torch.Tensor:
    """``T^0`` (``m x 2^bits``), Assumed from a third-party port (see the module docstring)."""
    check_bits(bits)
    W = W.to(_DTYPE)
    levels = 2 ** bits
    if bits == 4:
        lo, hi = W.min(dim=1).values, W.max(dim=1).values
        edges = [lo + (hi - lo) * q / 4 for q in range(5)]
        counts = (2, 6, 6, 2) if outliers else (3, 5, 5, 3)
        parts = []
        for q, c in enumerate(counts):
            t = torch.linspace(0, 1, c, dtype=_DTYPE)
            parts.append(edges[q][:, None] + (edges[q + 1] - edges[q])[:, None] * t[None, :])
        return torch.cat(parts, dim=1)
    if bits == 3:
        fractions = torch.tensor([0.0, 0.20, 0.35, 0.50, 0.65, 0.80, 0.90, 1.00], dtype=_DTYPE)
    else:
        fractions = torch.linspace(0, 1, levels, dtype=_DTYPE)
    return torch.quantile(W, fractions, dim=1).T.contiguous()


def split_outliers(W: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Appendix A, Algorithm 2: a row-wise mask of outliers and the dense part ``W`` without them.

    With ``p = 1 - ratio / 2``, row ``i``'s upper cutoff is its sorted value at index
    ``floor(n p)`` and the lower cutoff the one at ``ceil(n (1 - p))``; entries ``>=`` the upper or
    ``<=`` the lower cutoff are outliers. Returns ``(mask, W_dense)`` with zeros at the mask.
    """
    n = W.shape[1]
    if ratio <= 0:
        mask = torch.zeros_like(W, dtype=torch.bool)
        return mask, W.clone()
    p = 1.0 - 0.5 * ratio
    srt = torch.sort(W, dim=1).values
    upper = srt[:, min(n - 1, int(math.floor(n * p)))]
    lower = srt[:, max(0, min(n - 1, int(math.ceil(n * (1.0 - p)))))]
    mask = (W >= upper[:, None]) | (W <= lower[:, None])
    return mask, torch.where(mask, torch.zeros_like(W), W)


def _nearest(target: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Row-wise ``argmin_s |target_i - T_is|`` (ties: the lowest index)."""
    return torch.argmin((target[:, None] - T).abs(), dim=1)


def s_step(W: torch.Tensor, T: torch.Tensor, L: torch.Tensor, block_columns: int = 64) -> torch.Tensor:
    """The S-step by back-substitution (eq. 20) for all rows at once; returns ``Q`` (int64).

    For ``j = n-1 .. 0``: ``c_j = sum_{u > j} r_u L_{u,j}``, ``Q_{:,j} = argmin_s |W_{:,j} +
    c_j / L_{j,j} - T_{:,s}|`` (ties: the lowest index) and ``r_j = W_{:,j} - T[Q_{:,j}]``. The sums
    ``c`` are accumulated lazily per block of ``block_columns`` columns (same sums, fewer passes
    over ``L``); the column loop runs in numpy (float64), whose small-array calls cost a fraction
    of torch's.
    """
    import numpy as np

    with _one_blas_thread():
        return _s_step_numpy(np, W, T, L, block_columns)


def _one_blas_thread():
    """Limit numpy's BLAS to one thread (its small matrix-vector products only lose from more)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _s_step_numpy(np, W, T, L, block_columns):
    # column-major copies: the loop reads and writes whole columns of W, R and Q
    Wt = np.ascontiguousarray(W.detach().to(_DTYPE).cpu().numpy().T)      # (n, m)
    Tn = T.detach().to(_DTYPE).cpu().numpy()                               # (m, levels)
    Lt = np.ascontiguousarray(L.detach().to(_DTYPE).cpu().numpy().T)      # Lt[j, u] = L[u, j]
    n, m = Wt.shape
    Qt = np.empty((n, m), dtype=np.int64)
    Rt = np.zeros((n, m))
    acc = np.zeros((n, m))  # contributions of finished blocks to c_j
    flat = np.arange(m) * Tn.shape[1]
    Tflat = Tn.reshape(-1)
    for end in range(n, 0, -block_columns):
        start = max(0, end - block_columns)
        for j in range(end - 1, start - 1, -1):
            c = acc[j]
            if j + 1 < end:
                c = c + Lt[j, j + 1:end] @ Rt[j + 1:end]
            target = Wt[j] + c / Lt[j, j]
            idx = np.abs(target[:, None] - Tn).argmin(axis=1)
            Qt[j] = idx
            Rt[j] = Wt[j] - Tflat[flat + idx]
        if start > 0:
            acc[:start] += Lt[:start, start:end] @ Rt[start:end]
    Q = Qt.T.copy()
    return torch.from_numpy(Q)


def t_step(W: torch.Tensor, H: torch.Tensor, Q: torch.Tensor, T_prev: torch.Tensor) -> torch.Tensor:
    """The T-step (eq. 5): ``T_i = W_i H S_i^T (S_i H S_i^T)^+`` for every row, in float64.

    Entries no index uses keep their value in ``T_prev`` (Assumed; see the module docstring).
    """
    m, n = W.shape
    levels = T_prev.shape[1]
    W, H = W.to(_DTYPE), H.to(_DTYPE)
    S = torch.zeros(m, levels, n, dtype=_DTYPE)
    S.scatter_(1, Q.long()[:, None, :], 1.0)
    SH = S @ H                                    # (m, levels, n)
    A = SH @ S.transpose(1, 2)                    # (m, levels, levels) = S_i H S_i^T
    b = torch.einsum("in,isn->is", W, SH)         # W_i H S_i^T
    T = (torch.linalg.pinv(A, hermitian=True) @ b[:, :, None])[:, :, 0]
    used = S.sum(dim=2) > 0
    return torch.where(used, T, T_prev.to(_DTYPE))


def ganq_rows(W: torch.Tensor, H: torch.Tensor, L: torch.Tensor, config: GANQConfig,
              table0: torch.Tensor | None = None) -> dict:
    """Algorithm 1 on a block of rows (float64 tensors; ``L L^T`` = the damped ``H``).

    ``table0`` is Algorithm 1's input ``T^0`` for these rows (default: ``initial_table``).

    Returns ``{"Q", "T", "mask", "values", "objective", "initial", "history"}``, where
    ``objective`` / ``history`` are sums over the block's rows of the undamped objective.
    """
    mask, dense = split_outliers(W, float(config.outlier_ratio))
    if table0 is None:
        T = initial_table(dense, config.bits, outliers=config.outlier_ratio > 0)
    else:
        T = table0.to(_DTYPE).clone()

    H_steps = _ridge(H, config.percdamp)

    def loss(Q, T):
        return float(objective(dense, torch.gather(T, 1, Q), H).sum())

    initial = loss(_nearest_all(dense, T), T)
    best = None
    history = []
    for k in range(config.iterations):
        Q = s_step(dense, T, L, config.block_columns)
        f_s = loss(Q, T)
        T = t_step(dense, H_steps, Q, T)
        f_t = loss(Q, T)
        history.append({"iteration": k + 1, "objective_s": f_s, "objective_t": f_t})
        if best is None or not config.keep_best or f_t < best[2]:
            best = (Q, T, f_t)
    Q, T, f = best
    return {"Q": Q, "T": T, "mask": mask, "values": W[mask], "objective": f, "initial": initial,
            "history": history}


def _ridge(H: torch.Tensor, percdamp: float) -> torch.Tensor:
    """``H + percdamp * mean(diag H) I`` (``H`` itself when ``percdamp == 0``)."""
    if not percdamp:
        return H
    lam = float(percdamp) * float(torch.diagonal(H).mean())
    return H + lam * torch.eye(H.shape[0], dtype=H.dtype)


def _nearest_all(W: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    return torch.argmin((W[:, :, None] - T[:, None, :]).abs(), dim=2)


def row_blocks(m: int, row_block: int | None) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(m)`` in blocks of ``row_block`` rows."""
    size = m if row_block is None else int(row_block)
    return [(s, min(m, s + size)) for s in range(0, m, max(1, size))]


def _assemble(parts: list[dict], blocks: list[tuple[int, int]], W: torch.Tensor, bits: int) -> GANQResult:
    Q = torch.cat([p["Q"] for p in parts]).to(torch.uint8)
    T = torch.cat([p["T"] for p in parts]).to(torch.float32)
    mask = torch.cat([p["mask"] for p in parts])
    out_idx = out_val = None
    if bool(mask.any()):
        out_idx = mask.nonzero()
        out_val = W[mask].to(torch.float32)
    history = []
    for k in range(len(parts[0]["history"])):
        history.append({"iteration": k + 1,
                        "objective_s": sum(p["history"][k]["objective_s"] for p in parts),
                        "objective_t": sum(p["history"][k]["objective_t"] for p in parts)})
    return GANQResult(
        quant=LayerQuant(indices=Q, table=T, bits=bits, outlier_index=out_idx, outlier_value=out_val),
        objective=sum(p["objective"] for p in parts), history=history,
        initial_objective=sum(p["initial"] for p in parts))


def _block_task(item: tuple, shared: Mapping) -> dict:
    """One Ray task: GANQ on rows ``item = (start, stop)`` of the shared layer."""
    start, stop = item
    T0 = shared.get("T0")
    return ganq_rows(shared["W"][start:stop], shared["H"], shared["L"], shared["config"],
                     None if T0 is None else T0[start:stop])


def _prepare(W, H, config: GANQConfig, table0=None) -> dict:
    if not isinstance(config, GANQConfig):
        raise TypeError(f"config must be a GANQConfig, got {type(config).__name__}")
    W, H = _check_wh(W, H)
    if table0 is not None and tuple(table0.shape) != (W.shape[0], 2 ** config.bits):
        raise ValueError(f"table0 must have shape ({W.shape[0]}, {2 ** config.bits}), got {tuple(table0.shape)}")
    L, _ = cholesky_factor(_ridge(H, config.percdamp), config.damp)
    return {"W": W, "H": H, "L": L, "config": config,
            "T0": None if table0 is None else table0.detach().to(_DTYPE).cpu()}


def quantize_weight(W: torch.Tensor, H: torch.Tensor, config: GANQConfig = GANQConfig(), *,
                    table0: torch.Tensor | None = None) -> GANQResult:
    """GANQ (Algorithm 1, with Algorithm 2 when ``outlier_ratio > 0``) of one weight, serially.

    Args:
        W: ``(out_features, in_features)`` weight.
        H: ``(in_features, in_features)`` ``X X^T`` of the calibration inputs.
        config: the settings; rows are processed in blocks of ``config.row_block``.
        table0: Algorithm 1's initial table ``T^0`` (``(out_features, 2^bits)``); default
            ``initial_table``.
    """
    shared = _prepare(W, H, config, table0)
    blocks = row_blocks(shared["W"].shape[0], config.row_block)
    parts = [_block_task(b, shared) for b in blocks]
    return _assemble(parts, blocks, shared["W"], config.bits)


def quantize_weight_ray(W: torch.Tensor, H: torch.Tensor, config: GANQConfig = GANQConfig(), *,
                        table0: torch.Tensor | None = None) -> GANQResult:
    """``quantize_weight`` with one Ray task per row block (``rayml.runtime.pmap``, ``shared=``
    the layer's ``W``, ``H`` and Cholesky factor); bit-identical to the serial path."""
    from rayml import runtime

    shared = _prepare(W, H, config, table0)
    blocks = row_blocks(shared["W"].shape[0], config.row_block)
    parts = runtime.pmap(_block_task, blocks, shared=shared, desc="ganq row blocks", progress=False)
    return _assemble(parts, blocks, shared["W"], config.bits)


def _layer_task(item: tuple, shared: Mapping) -> dict:
    name, bits, start, stop = item
    layer = shared["layers"][name]
    config = replace(shared["config"], bits=bits)
    return ganq_rows(layer["W"][start:stop], layer["H"], layer["L"], config)


def quantize_layers(weights: Mapping[str, torch.Tensor], hessians: Mapping[str, torch.Tensor],
                    bits: Sequence[int] = (3, 4), config: GANQConfig = GANQConfig(), *,
                    use_ray: bool = True) -> dict[tuple[str, int], GANQResult]:
    """GANQ of several layers at several bit widths: every (layer, bits, row block) is one task.

    Args:
        weights: ``{layer name: W}``.
        hessians: ``{layer name: H}`` (e.g. from ``collect_hessians``).
        bits: the bit widths (each 2..8).
        config: shared settings (its ``bits`` is replaced by each entry of ``bits``).
        use_ray: map over Ray tasks (``rayml.runtime.pmap``); ``False`` runs the same tasks here.

    Returns:
        ``{(layer name, bits): GANQResult}``.
    """
    bits = [check_bits(b) for b in bits]
    if not bits:
        raise ValueError("bits: give at least one bit width")
    missing = [n for n in weights if n not in hessians]
    if missing:
        raise ValueError(f"hessians: no calibration statistics for layers {missing}")
    layers = {}
    for name, W in weights.items():
        prep = _prepare(W, hessians[name], config)
        layers[name] = {k: prep[k] for k in ("W", "H", "L")}
    items = [(name, b, s, e) for name in layers for b in bits
             for s, e in row_blocks(layers[name]["W"].shape[0], config.row_block)]
    shared = {"layers": layers, "config": config}
    if use_ray:
        from rayml import runtime

        parts = runtime.pmap(_layer_task, items, shared=shared, desc="ganq layers", progress=False)
    else:
        parts = [_layer_task(it, shared) for it in items]
    out = {}
    for name in layers:
        for b in bits:
            mine = [(it, p) for it, p in zip(items, parts) if it[0] == name and it[1] == b]
            out[(name, b)] = _assemble([p for _, p in mine], [(it[2], it[3]) for it, _ in mine],
                                       layers[name]["W"], b)
    return out


def quantize_model(model: nn.Module, batches: Iterable, config: GANQConfig = GANQConfig(), *,
                   names: Sequence[str] | None = None, forward=None, use_ray: bool = True) -> dict:
    """Calibrate, GANQ-quantize and swap in ``QuantLinear`` layers, in place, for any torch model.

    Args:
        model: e.g. the embedded ``rayml.llm`` transformer or a local Hugging Face model.
        batches: calibration inputs (see ``collect_hessians``; ``forward(model, batch)`` runs one,
            e.g. ``lambda m, b: m(input_ids=b)`` for Hugging Face).
        config: GANQ settings (one bit width).
        names: the ``nn.Linear`` layers to quantize (default: all).
        forward: how to run one batch.
        use_ray: quantize every (layer, row block) as a Ray task.

    Returns:
        ``{layer name: GANQResult}``; ``model`` now holds ``QuantLinear`` layers.
    """
    layers = linear_layers(model, names)
    hessians = collect_hessians(model, batches, list(layers), forward=forward)
    weights = {n: m.weight for n, m in layers.items()}
    results = quantize_layers(weights, hessians, bits=(config.bits,), config=config, use_ray=use_ray)
    out = {n: results[(n, config.bits)] for n in layers}
    replace_linears(model, {n: r.quant for n, r in out.items()})
    return out


# ---------------------------------------------------------------------------------------------
# The sequential (GPTQ-style) calibration protocol

LLAMA_GROUPS = (
    ("self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"),
    ("self_attn.o_proj",),
    ("mlp.up_proj", "mlp.gate_proj"),
    ("mlp.down_proj",),
)


class _GroupSeen(Exception):
    """Raised by a hook once every layer of a group has seen its input (stops the forward)."""


@torch.no_grad()
def quantize_sequential(blocks: Sequence[nn.Module], inputs: torch.Tensor, run_block,
                        quantize, *, groups: Sequence[Sequence[str]] = LLAMA_GROUPS,
                        prefix: str = "layers.", skip_positions: int = 0) -> dict[str, torch.Tensor]:
    """Quantize ``blocks`` in order, each group calibrated on the already-quantized prefix.

    For block ``b`` and each group of ``groups`` in turn, ``H = X X^T / tokens`` of the group's
    (shared) input is collected by running ``run_block(block, x)`` until every layer of the group
    has seen its input (the rest of the block is skipped), then ``quantize(name, W, H)`` returns
    the dequantized weight that replaces ``W`` in place. After the last group the block's output,
    computed with all its layers quantized, becomes the next block's input.

    Args:
        blocks: the decoder blocks (e.g. ``model.layers``).
        inputs: the calibration hidden states entering ``blocks[0]`` (``(batch, seq, d)``).
        run_block: ``run_block(block, x) -> x_out``.
        quantize: ``quantize(name, W, H) -> W_hat`` with ``name = f"{prefix}{b}.{layer}"``.
        groups: layer names inside a block, in the order they are quantized.
        prefix: the blocks' module-name prefix (for ``name``).
        skip_positions: the first positions of every calibration sequence left out of ``H`` (they
            still run, as the context of the rest): ``1`` protects the attention-sink token, whose
            massive activations would otherwise take ``H`` over (calibration windows that start
            after the sink; not in the paper, declared on the method's page).

    Returns:
        ``{name: H}`` of every quantized layer (float64).

    Raises:
        TypeError: a named module is not an ``nn.Linear``.
        ValueError: a group's layers never saw an input (they are not run by ``run_block``).
    """
    if not isinstance(inputs, torch.Tensor) or inputs.numel() == 0:
        raise ValueError("inputs: give a non-empty calibration batch")
    if isinstance(skip_positions, bool) or not isinstance(skip_positions, int) or skip_positions < 0 or (
            inputs.dim() == 3 and skip_positions >= inputs.shape[1]):
        raise ValueError(f"skip_positions must be an integer in [0, sequence length), got {skip_positions!r}")
    hessians = {}
    x = inputs
    for b, block in enumerate(blocks):
        for group in groups:
            mods = {}
            for name in group:
                mod = block.get_submodule(name)
                if not isinstance(mod, nn.Linear):
                    raise TypeError(f"groups: {prefix}{b}.{name} is a {type(mod).__name__}, "
                                    "not an nn.Linear")
                mods[name] = mod
            sums, counts = {}, {}

            def hook(name):
                def fn(module, args, output):
                    a = args[0].detach()
                    if skip_positions:
                        a = a[..., skip_positions:, :]
                    a = a.reshape(-1, module.in_features).to(_DTYPE)
                    sums[name] = sums.get(name, 0) + a.T @ a
                    counts[name] = counts.get(name, 0) + a.shape[0]
                    if len(sums) == len(mods):
                        raise _GroupSeen
                return fn

            handles = [m.register_forward_hook(hook(n)) for n, m in mods.items()]
            try:
                run_block(block, x)
            except _GroupSeen:
                pass
            finally:
                for h in handles:
                    h.remove()
            missing = [n for n in mods if n not in sums]
            if missing:
                raise ValueError(f"groups: layers {missing} of block {b} saw no input from run_block")
            for name, mod in mods.items():
                full = f"{prefix}{b}.{name}"
                H = sums[name] / counts[name]
                hessians[full] = H
                W_hat = quantize(full, mod.weight.detach(), H)
                mod.weight.copy_(torch.as_tensor(W_hat).to(mod.weight.dtype).reshape(mod.weight.shape))
        x = run_block(block, x)
    return hessians
