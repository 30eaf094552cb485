"""MoE-X: a mixture-of-experts layer that is a wide, sparse ReLU MLP, with sparsity-aware routing.

Yang, Venhoff, Khakzar, Schroeder de Witt, Dokania, Bibi & Torr, "Mixture of Experts Made
Intrinsically Interpretable", ICML 2025 (arXiv 2503.07639). No official code is public.

The MoE layer (Section 4.1) with ``E`` experts ``f_j(x) = W_dec^j sigma(W_enc^j x + b_enc^j)`` and
gates ``g(x)`` (top-k, then softmax over the chosen experts) is

    MoE(x) = sum_j g_j(x) W_dec^j sigma(W_enc^j x + b_enc^j) + b_dec
           = W_dec [g_1(x) sigma(W_enc^1 x + b^1); ...; g_E(x) sigma(W_enc^E x + b^E)] + b_dec,

one MLP of hidden width ``E * D`` with the stacked encoders and the concatenated decoders, whose
hidden vector is zero outside the chosen experts (``MoELayer.wide_hidden``; ``MoELayer.sparse_mlp``
evaluates this form and ``tests/architectures/test_moe_x.py`` checks it equals the dispatching
forward). MoE-X makes the experts ReLU MLPs (so ``g_j ReLU(a) = ReLU(g_j a)``: a wide ReLU MLP with
sparse activation) and replaces the learned router by the sparsity-aware router (Section 4.2):
each pre-activation ``h_ji = w_ji . x + b_ji`` is approximated as Gaussian over the coordinates of
``x``, ``h_ji ~ N(mu_x sum_k w_jik + b_ji, sigma_x^2 ||w_ji||^2)`` with ``mu_x, sigma_x`` the mean and
standard deviation of ``x``'s entries, so the expected number of active units of expert ``j`` is
``sum_i Phi(E[h_ji] / sd[h_ji])``; the gate logit is its negative (experts expected to be sparsest
win), followed by top-k and a softmax over the chosen experts (``sparsity_gate_logits``).

Baselines at equal active parameters (Table 1): dense GELU MLP (GPT-2), dense ReLU MLP, a top-k
Switch-style MoE (GELU experts, learned linear router, load-balancing loss of Fedus et al. 2022),
and a sparse autoencoder (``fit_sae``) trained post hoc on the dense GELU model's MLP hidden.

Interpretability (Section 5.1, after Karvonen et al. 2024): BSP coverage (``bsp_coverage``: per
board-state property, the best single hidden unit at a threshold, scored by F1) and board
reconstruction (``board_reconstruction``: the board predicted from high-precision units, scored by
F1 against the true board).

Assumed (the paper's full text could not be reached; the abstract, the paper's tables and figure
captions and the research notes were read): the Gaussian statistics ``mu_x, sigma_x`` are taken
per token over its ``d`` coordinates and include the encoder bias; the sparsity router has no
parameters of its own and no load-balancing loss; no expert capacity limit (no token dropping);
coverage thresholds are ``{0, 0.1, ..., 0.9} x`` the unit's maximum activation, the unit and
threshold of each property are chosen on one half of the probe positions and scored on the other
half, and a unit counts as a reconstruction unit for a property when its precision on the first
half is at least 0.95 with at least ``min_support`` activations.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ARCHS",
    "ArchConfig",
    "DenseMLP",
    "MoELayer",
    "sparsity_gate_logits",
    "build_model",
    "active_mlp_params",
    "train_lm",
    "val_loss",
    "collect_hidden",
    "SAE",
    "fit_sae",
    "sae_spliced_val_loss",
    "bsp_coverage",
    "board_reconstruction",
    "router_sparsity",
]

ARCHS = ("moe-x", "switch", "dense-gelu", "dense-relu")
_ACTS = {"relu": F.relu, "gelu": F.gelu}


@dataclass(frozen=True)
class ArchConfig:
    """Shape of the chess LM and its MLP.

    Attributes:
        arch: one of ``ARCHS``.
        vocab_size: character ids.
        d_model, n_layers, n_heads: the transformer (the substrate's ``TransformerLM``).
        hidden: the dense MLP's width ``H``; an MoE's experts have width ``H // top_k`` so that
            ``top_k`` active experts have the dense MLP's active parameters.
        n_experts, top_k: experts and experts per token.
        seq_len: the context length.
    """

    arch: str
    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    hidden: int = 256
    n_experts: int = 8
    top_k: int = 2
    seq_len: int = 128

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "hidden", "n_experts", "top_k", "seq_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
        if self.hidden % self.top_k:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by top_k ({self.top_k})")

    @property
    def expert_hidden(self) -> int:
        """Width ``D`` of one expert."""
        return self.hidden // self.top_k

    def to_dict(self) -> dict:
        """JSON-able dict."""
        return asdict(self)


class DenseMLP(nn.Module):
    """GPT-2 MLP ``W_out act(W_in x + b_in) + b_out``; ``record`` keeps the hidden of the last call."""

    def __init__(self, d: int, hidden: int, act: str):
        super().__init__()
        self.fc_in = nn.Linear(d, hidden)
        self.fc_out = nn.Linear(hidden, d)
        self.act = act
        self.record = False
        self.last_hidden: torch.Tensor | None = None
        self.aux_loss = torch.zeros(())
        self.override = None  # callable(hidden) -> hidden (an SAE's reconstruction)

    def forward(self, x):
        h = _ACTS[self.act](self.fc_in(x))
        if self.override is not None:
            h = self.override(h)
        if self.record:
            self.last_hidden = h.detach()
        return self.fc_out(h)


def sparsity_gate_logits(x: torch.Tensor, w_enc: torch.Tensor, b_enc: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """MoE-X's sparsity-aware gate logits (Section 4.2): ``-sum_i Phi(E[h_ji] / sd[h_ji])``.

    Args:
        x: (N, d) expert inputs.
        w_enc: (E, D, d) expert encoders; b_enc: (E, D) their biases.

    Returns:
        (N, E): minus each expert's expected number of positive pre-activations under the Gaussian
        approximation ``h_ji ~ N(mu_x sum_k w_jik + b_ji, sigma_x^2 ||w_ji||^2)``.
    """
    sd = x.std(-1, unbiased=False) + eps
    inv_norm = 1.0 / (w_enc.norm(dim=-1) + eps)  # (E, D)
    # E[h]/sd[h] = (mu_x / sigma_x) * sum_k w / ||w|| + (1 / sigma_x) * b / ||w||, in two broadcasts
    z = torch.addcmul((b_enc * inv_norm)[None] / sd[:, None, None], (x.mean(-1) / sd)[:, None, None],
                      (w_enc.sum(-1) * inv_norm)[None])
    p_active = torch.special.ndtr(z)
    return -p_active.sum(-1)


class MoELayer(nn.Module):
    """Top-k mixture of MLP experts: MoE-X (``router="sparsity"``, ReLU) or Switch (``"learned"``, GELU).

    ``forward`` dispatches each token to its chosen experts (the MoE layer);
    ``wide_hidden``/``sparse_mlp`` are the same layer written as one wide sparse MLP (Section 4.1).
    """

    def __init__(self, d: int, n_experts: int, expert_hidden: int, top_k: int, *, act: str, router: str):
        super().__init__()
        if router not in ("sparsity", "learned"):
            raise ValueError(f"router must be 'sparsity' or 'learned', got {router!r}")
        if act not in _ACTS:
            raise ValueError(f"act must be one of {sorted(_ACTS)}, got {act!r}")
        self.E, self.D, self.k, self.act, self.router = n_experts, expert_hidden, top_k, act, router
        self.w_enc = nn.Parameter(torch.empty(n_experts, expert_hidden, d))
        self.b_enc = nn.Parameter(torch.zeros(n_experts, expert_hidden))
        self.w_dec = nn.Parameter(torch.empty(n_experts, d, expert_hidden))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.w_gate = nn.Parameter(torch.empty(n_experts, d)) if router == "learned" else None
        self.record = False
        self.last_hidden: torch.Tensor | None = None
        self.aux_loss = torch.zeros(())
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Same scale as ``nn.Linear``'s default (uniform, ``1/sqrt(fan_in)``) per expert."""
        d = self.w_enc.shape[-1]
        with torch.no_grad():
            self.w_enc.copy_((torch.rand(self.w_enc.shape, generator=generator) * 2 - 1) / math.sqrt(d))
            self.w_dec.copy_((torch.rand(self.w_dec.shape, generator=generator) * 2 - 1) / math.sqrt(self.D))
            self.b_enc.zero_()
            self.b_dec.zero_()
            if self.w_gate is not None:
                self.w_gate.copy_((torch.rand(self.w_gate.shape, generator=generator) * 2 - 1) / math.sqrt(d))

    def gate_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(N, E) router logits of tokens ``x`` (N, d)."""
        if self.router == "sparsity":
            return sparsity_gate_logits(x, self.w_enc, self.b_enc)
        return x @ self.w_gate.T

    def route(self, x: torch.Tensor):
        """``(index (N, k), weight (N, k), logits (N, E))``: top-k experts, softmax over the chosen."""
        logits = self.gate_logits(x)
        top, idx = logits.topk(self.k, dim=-1)
        return idx, torch.softmax(top, dim=-1), logits

    def _expert_hidden(self, x: torch.Tensor, j: int) -> torch.Tensor:
        return _ACTS[self.act](x @ self.w_enc[j].T + self.b_enc[j])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        idx, w, logits = self.route(xf)
        out = torch.zeros_like(xf)
        for j in range(self.E):
            rows, slot = (idx == j).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            h = self._expert_hidden(xf[rows], j)
            out = out.index_add(0, rows, w[rows, slot][:, None] * (h @ self.w_dec[j].T))
        out = out + self.b_dec
        if self.router == "learned":  # Switch load balancing: E * sum_j f_j P_j
            frac = F.one_hot(idx, self.E).float().sum(1).mean(0) / self.k
            self.aux_loss = self.E * (frac * torch.softmax(logits, -1).mean(0)).sum()
        if self.record:
            self.last_hidden = self.wide_hidden(xf.detach(), idx, w).detach().reshape(*shape[:-1], -1)
        return out.reshape(shape)

    def wide_hidden(self, x: torch.Tensor, idx: torch.Tensor | None = None, w: torch.Tensor | None = None) -> torch.Tensor:
        """(N, E * D): ``[g_1 sigma(W_enc^1 x + b^1); ...; g_E sigma(W_enc^E x + b^E)]``, zero off the chosen experts."""
        if idx is None:
            idx, w, _ = self.route(x)
        gates = torch.zeros(x.shape[0], self.E, dtype=x.dtype, device=x.device).scatter(1, idx, w)
        pre = torch.einsum("nd,ehd->neh", x, self.w_enc) + self.b_enc[None]
        return (gates[:, :, None] * _ACTS[self.act](pre)).reshape(x.shape[0], self.E * self.D)

    def sparse_mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The layer as one wide MLP: ``W_dec wide_hidden(x) + b_dec`` with ``W_dec = [W_dec^1 ... W_dec^E]``."""
        w_dec = self.w_dec.permute(1, 0, 2).reshape(self.w_dec.shape[1], self.E * self.D)
        return self.wide_hidden(x) @ w_dec.T + self.b_dec

    def expert_l0(self, x: torch.Tensor) -> torch.Tensor:
        """(N, E) number of positive hidden units of every expert (chosen or not) for tokens ``x``."""
        pre = torch.einsum("nd,ehd->neh", x, self.w_enc) + self.b_enc[None]
        return (_ACTS[self.act](pre) > 0).sum(-1)


def _make_mlp(cfg: ArchConfig) -> nn.Module:
    if cfg.arch == "dense-gelu":
        return DenseMLP(cfg.d_model, cfg.hidden, "gelu")
    if cfg.arch == "dense-relu":
        return DenseMLP(cfg.d_model, cfg.hidden, "relu")
    if cfg.arch == "switch":
        return MoELayer(cfg.d_model, cfg.n_experts, cfg.expert_hidden, cfg.top_k, act="gelu", router="learned")
    return MoELayer(cfg.d_model, cfg.n_experts, cfg.expert_hidden, cfg.top_k, act="relu", router="sparsity")


def build_model(cfg: ArchConfig, seed: int):
    """The substrate's ``TransformerLM`` with every block's MLP replaced by ``cfg.arch``'s MLP."""
    from rayml.llm.model import ModelConfig, TransformerLM

    torch.manual_seed(int(seed) % (2**63))
    mcfg = ModelConfig(vocab_size=cfg.vocab_size, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                       n_kv_heads=cfg.n_heads, d_ff=cfg.hidden, max_seq_len=cfg.seq_len + 1)
    model = TransformerLM(mcfg)
    for block in model.layers:
        block.mlp = _make_mlp(cfg)
    return model


def active_mlp_params(cfg: ArchConfig) -> dict:
    """Parameters per MLP layer: total, and active per token (the equal budget of Table 1)."""
    d, H = cfg.d_model, cfg.hidden
    if cfg.arch.startswith("dense"):
        n = 2 * d * H + H + d
        return {"total": n, "active": n}
    D, E, k = cfg.expert_hidden, cfg.n_experts, cfg.top_k
    per = 2 * d * D + D
    router = E * d if cfg.arch == "switch" else 0
    return {"total": E * per + d + router, "active": k * per + d + router}


def _lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    from rayml.architectures.chess_data import PAD

    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), ignore_index=PAD)


def train_lm(cfg: ArchConfig, train_ids: np.ndarray, *, steps: int, batch: int, lr: float, seed: int,
             aux_coef: float = 0.01, warmup: int = 20) -> tuple[nn.Module, list[float]]:
    """Next-character training with AdamW (linear warm-up, cosine decay); batches from ``(seed, step)``.

    ``aux_coef`` weighs the Switch load-balancing loss (only the learned router has one).
    """
    if steps < 1 or batch < 1 or not lr > 0:
        raise ValueError(f"steps, batch must be >= 1 and lr > 0, got {steps}, {batch}, {lr}")
    model = build_model(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    data = torch.as_tensor(np.array(train_ids))
    losses = []
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr * max(scale, 0.05)
        rows = np.random.default_rng([int(seed) % (2**63), step]).integers(0, data.shape[0], batch)
        loss = _lm_loss(model, data[torch.as_tensor(rows)])
        aux = sum(b.mlp.aux_loss for b in model.layers) if cfg.arch == "switch" else 0.0
        opt.zero_grad()
        (loss + aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    return model, losses


@torch.no_grad()
def val_loss(model, ids: np.ndarray, batch: int = 64) -> float:
    """Mean next-character cross-entropy (nats) over the non-padding targets of ``ids``."""
    from rayml.architectures.chess_data import PAD

    data = torch.as_tensor(np.array(ids))
    total, count = 0.0, 0
    for s in range(0, data.shape[0], batch):
        chunk = data[s:s + batch]
        n = int((chunk[:, 1:] != PAD).sum())
        total += float(_lm_loss(model, chunk)) * n
        count += n
    return total / max(count, 1)


@torch.no_grad()
def collect_hidden(model, layer: int, ids: np.ndarray, games: np.ndarray | None = None,
                   positions: np.ndarray | None = None, batch: int = 64) -> np.ndarray:
    """The MLP hidden of block ``layer`` (an MoE's wide hidden) at the given (game, position) pairs.

    Without ``games``/``positions``: every non-padding position, as (n_tokens, width).
    """
    from rayml.architectures.chess_data import PAD

    if not 0 <= layer < len(model.layers):
        raise ValueError(f"layer must be in [0, {len(model.layers)}), got {layer}")
    mlp = model.layers[layer].mlp
    mlp.record = True
    data = torch.as_tensor(np.array(ids))[:, :-1]
    outs = []
    try:
        for s in range(0, data.shape[0], batch):
            model(data[s:s + batch])
            outs.append(mlp.last_hidden)
    finally:
        mlp.record = False
    hidden = torch.cat(outs)  # (games, seq, width)
    if games is None:
        return hidden[data != PAD].numpy()
    return hidden[torch.as_tensor(games), torch.as_tensor(positions)].numpy()


class SAE(nn.Module):
    """Sparse autoencoder ``f = ReLU(W_e (h - b_d) + b_e)``, ``h_hat = W_d f + b_d`` (unit-norm decoder columns)."""

    def __init__(self, d_in: int, width: int):
        super().__init__()
        self.enc = nn.Linear(d_in, width)
        self.dec = nn.Linear(width, d_in)

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """Feature activations (the SAE's units, probed like neurons)."""
        return F.relu(self.enc(h - self.dec.bias))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.dec(self.features(h))


def fit_sae(acts: np.ndarray, width: int, *, l1: float, steps: int, seed: int, batch: int = 256,
            lr: float = 1e-3) -> SAE:
    """Train an SAE on activations ``acts`` (n, d) with loss ``||h - h_hat||^2 + l1 ||f||_1`` (Bricken et al. 2023)."""
    if acts.ndim != 2 or acts.shape[0] < 2:
        raise ValueError(f"acts must have shape (n >= 2, d), got {acts.shape}")
    if width < 1 or steps < 1 or l1 < 0:
        raise ValueError(f"width, steps must be >= 1 and l1 >= 0, got {width}, {steps}, {l1}")
    torch.manual_seed(int(seed) % (2**63))
    h = torch.as_tensor(acts, dtype=torch.float32)
    sae = SAE(h.shape[1], width)
    with torch.no_grad():
        sae.dec.bias.copy_(h.mean(0))
        sae.dec.weight.div_(sae.dec.weight.norm(dim=0, keepdim=True))
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    for step in range(steps):
        rows = np.random.default_rng([int(seed) % (2**63), step]).integers(0, h.shape[0], batch)
        x = h[torch.as_tensor(rows)]
        f = sae.features(x)
        loss = (sae.dec(f) - x).pow(2).sum(-1).mean() + l1 * f.sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            sae.dec.weight.div_(sae.dec.weight.norm(dim=0, keepdim=True).clamp_min(1e-8))
    return sae


@torch.no_grad()
def sae_spliced_val_loss(model, layer: int, sae: SAE, ids: np.ndarray) -> float:
    """Validation loss with block ``layer``'s MLP hidden replaced by the SAE's reconstruction."""
    mlp = model.layers[layer].mlp
    mlp.override = sae
    try:
        return val_loss(model, ids)
    finally:
        mlp.override = None


THRESHOLDS = tuple(np.round(np.arange(0.0, 1.0, 0.1), 2))


def _binarize(acts: np.ndarray, scale: np.ndarray, t: float) -> np.ndarray:
    return (acts > t * scale[None]).astype(np.float32)


def bsp_coverage(acts_fit: np.ndarray, y_fit: np.ndarray, acts_test: np.ndarray, y_test: np.ndarray) -> np.ndarray:
    """Per-property coverage: the F1 on the test half of the unit and threshold best on the fit half.

    ``acts_*``: (n, units) activations at probe positions; ``y_*``: (n, properties) bool.
    Returns (properties,) F1 scores in [0, 1] (their mean is the BSP coverage score).
    """
    scale = np.maximum(acts_fit.max(0), 1e-12)
    yf, yt = y_fit.astype(np.float32), y_test.astype(np.float32)
    best_f1 = np.full(y_fit.shape[1], -1.0)
    pick_unit = np.zeros(y_fit.shape[1], dtype=np.int64)
    pick_t = np.zeros(y_fit.shape[1])
    for t in THRESHOLDS:
        z = _binarize(acts_fit, scale, t)
        tp = z.T @ yf  # (units, props)
        f1 = 2 * tp / (z.sum(0)[:, None] + yf.sum(0)[None] + 1e-12)
        u = f1.argmax(0)
        v = f1[u, np.arange(f1.shape[1])]
        better = v > best_f1
        best_f1[better], pick_unit[better], pick_t[better] = v[better], u[better], t
    zt = acts_test[:, pick_unit] > pick_t[None] * scale[pick_unit][None]
    tp = (zt & y_test).sum(0)
    return 2 * tp / (zt.sum(0) + y_test.sum(0) + 1e-12)


def board_reconstruction(acts_fit: np.ndarray, y_fit: np.ndarray, acts_test: np.ndarray, y_test: np.ndarray, *,
                         precision: float = 0.95, min_support: int = 5) -> tuple[np.ndarray, float]:
    """Board reconstruction from high-precision units (Karvonen et al. 2024, as used by MoE-X).

    At threshold ``t``, unit ``u`` predicts property ``p`` when, on the fit half, ``u`` fired at least
    ``min_support`` times and ``p`` held in at least ``precision`` of them. A position's predicted
    board is every property predicted by a firing unit; its score is the F1 of predicted against
    true properties. ``t`` is chosen on the fit half.

    Returns ``(per-position F1 on the test half, chosen threshold)``.
    """
    scale = np.maximum(acts_fit.max(0), 1e-12)
    yf = y_fit.astype(np.float32)

    def scores(acts, y, t, table):
        z = _binarize(acts, scale, t)
        pred = (z @ table) > 0
        tp = (pred & y).sum(1)
        denom = pred.sum(1) + y.sum(1)
        return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 1.0)  # an empty board read as empty: 1

    best, best_t, best_table = -1.0, 0.0, None
    for t in THRESHOLDS:
        z = _binarize(acts_fit, scale, t)
        fires = z.sum(0)
        prec = (z.T @ yf) / np.maximum(fires[:, None], 1)
        table = ((prec >= precision) & (fires[:, None] >= min_support)).astype(np.float32)
        s = float(scores(acts_fit, y_fit, t, table).mean())
        if s > best:
            best, best_t, best_table = s, float(t), table
    return scores(acts_test, y_test, best_t, best_table), best_t


@torch.no_grad()
def router_sparsity(model, layer: int, ids: np.ndarray, batch: int = 64) -> dict:
    """Figure 9: mean active units of the chosen experts vs of all experts (an MoE's ``layer``).

    Returns ``{"chosen_l0", "all_l0", "ratio", "gate_l0_corr"}`` over the non-padding tokens; the
    correlation is between gate logits and expert L0 over (token, expert) pairs.
    """
    from rayml.architectures.chess_data import PAD

    mlp = model.layers[layer].mlp
    if not isinstance(mlp, MoELayer):
        raise ValueError(f"layer {layer} is not an MoE layer")
    seen = []

    def grab(x):
        seen.append(x.detach().reshape(-1, x.shape[-1]))

    block = model.layers[layer]
    handle = block.post_attention_layernorm.register_forward_hook(lambda m, i, o: grab(o))
    data = torch.as_tensor(np.array(ids))[:, :-1]
    masks = []
    try:
        for s in range(0, data.shape[0], batch):
            model(data[s:s + batch])
            masks.append((data[s:s + batch] != PAD).reshape(-1))
    finally:
        handle.remove()
    x = torch.cat(seen)[torch.cat(masks)]
    l0 = mlp.expert_l0(x).float()
    idx, _, logits = mlp.route(x)
    chosen = l0.gather(1, idx).mean()
    corr = np.corrcoef(logits.reshape(-1).numpy(), l0.reshape(-1).numpy())[0, 1]
    return {"chosen_l0": float(chosen), "all_l0": float(l0.mean()), "ratio": float(chosen / l0.mean().clamp_min(1e-12)),
            "gate_l0_corr": float(corr)}
