"""L2D: a flow (diffusion) path beside a frozen causal LM, trained with the flow-matching
cross-entropy objective and sampled with fixed-step or adaptive ODE solvers.

Cetin, Zhao & Tang (Sakana AI), "Large Language Models to Diffusion Finetuning", ICML 2025
(authors' code: SakanaAI/L2D, read for the structure below; none of it is copied).

The base LM (``rayml.llm``'s ``TransformerLM``) is frozen. For the token ``y`` that follows position
``i`` the flow path reads a noisy representation ``x_t = (1 - t) sigma_0 eps + t x_1(y)`` (Section 3,
linear interpolation path, ``eps ~ N(0, I)``), where ``x_1(y) = sqrt(m) normalize(W_map e(y))`` is a
learned ``m``-dimensional map of the base embedding of ``y`` (``flow_representation`` in the code;
``sigma_0 = noise_scale``). ``x_t`` is divided by its standard deviation at ``t`` and mapped into the
model width by a two-layer MLP; it then runs through every layer beside the frozen main path:

* attention: the flow path's own queries (``q + LoRA``) attend causally to the MAIN path's keys and
  values of that layer, and its own output projection (``o + LoRA``) writes to the flow stream;
* MLP: the layer's SwiGLU with LoRA on its three projections;
* DiT-style modulation of both sub-blocks (shift, scale, gate from the timestep embedding;
  ``full_dit_modulation``), zero-initialised.

The output is ``h = h_main + h_flow * (m(t) - m(0))`` before the final norm and the LM head, with
``m`` a conditioning head on the timestep (and class) embedding: at ``t = 0`` the second term is
exactly zero, so the base model's logits are reproduced bit for bit (``preserve_behavior_at_flow_start``).
Training minimises the cross-entropy of the next token at ``t ~ U(0, 1)`` per token (Eq. 4).

Inference integrates ``dx/dt = (x_1_hat(x_t, t) - x_t) / (1 - t)`` from ``t = 0`` (``x_0 = sigma_0 eps``)
to ``t = 1``, where ``x_1_hat`` is the representation of the model's argmax token (temperature 0, as in
the authors' configs), with Euler, midpoint (fixed steps) or an adaptive embedded Heun-Euler solver
(``adaptive_heun``) whose accepted/rejected evaluations per problem are counted; the next token is the
argmax of the logits at the end of the path. Classifier-free guidance: a class label embedding is
added to the conditioning and dropped with probability ``guidance_dropout`` in training; at
inference ``v = w v(c) + (1 - w) v(null)``.

Assumed (the paper's full text was not read; the authors' code and configs were): the LoRA variant
of the flow path (``separate_flow_params_with_lora``) on q, o, gate, up and down; the main path's
layer norms are shared (frozen) and modulated by the flow's DiT modulation; noise scale 64 and the
"mult" representation rescaling of the authors' LoRA configs; the flow path does not attend to
other flow positions (as in the authors' memory-efficient implementation).
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "L2DConfig",
    "LoRALinear",
    "FlowLM",
    "LoRALM",
    "trainable_parameters",
    "flow_budget",
    "lora_rank_for_budget",
    "l2d_loss",
    "lm_loss",
    "integrate",
    "solve",
    "SOLVERS",
]

SOLVERS = ("euler", "midpoint", "adaptive_heun")


@dataclass(frozen=True)
class L2DConfig:
    """The flow path's shape and the flow-matching constants.

    Attributes:
        lora_rank, lora_alpha: LoRA of the flow path's q, o, gate, up, down (scale alpha / rank).
        flow_dim: dimension ``m`` of the token flow representation.
        noise_scale: ``sigma_0``, the standard deviation of the noise at ``t = 0``.
        cond_dim: width of the timestep / class conditioning.
        freq_dim: sinusoidal timestep features.
        n_classes: classes for classifier-free guidance (0: no guidance).
        guidance_dropout: probability of dropping the class label in training.
    """

    lora_rank: int = 8
    lora_alpha: float = 8.0
    flow_dim: int = 64
    noise_scale: float = 64.0
    cond_dim: int = 32
    freq_dim: int = 64
    n_classes: int = 0
    guidance_dropout: float = 0.2

    def __post_init__(self):
        for name in ("lora_rank", "flow_dim", "cond_dim", "freq_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.freq_dim % 2:
            raise ValueError(f"freq_dim must be even, got {self.freq_dim}")
        if isinstance(self.n_classes, bool) or not isinstance(self.n_classes, int) or self.n_classes < 0:
            raise ValueError(f"n_classes must be an integer >= 0, got {self.n_classes!r}")
        if not self.noise_scale > 0 or not self.lora_alpha > 0:
            raise ValueError(f"noise_scale and lora_alpha must be > 0, got {self.noise_scale}, {self.lora_alpha}")
        if not 0 <= self.guidance_dropout < 1:
            raise ValueError(f"guidance_dropout must be in [0, 1), got {self.guidance_dropout!r}")

    def to_dict(self) -> dict:
        """JSON-able dict."""
        return asdict(self)


class LoRALinear(nn.Module):
    """``W x + (alpha / r) B A x`` around a frozen ``nn.Linear`` (``B`` zero-initialised; Hu et al. 2022)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.A.T) @ self.B.T)


def _freeze(model: nn.Module) -> None:
    for p in model.parameters():
        p.requires_grad_(False)


def _timestep_features(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t[..., None].float() * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class _FlowLayer(nn.Module):
    """The flow path of one block: LoRA copies of q, o and the MLP, and DiT modulation."""

    def __init__(self, block, cfg: L2DConfig):
        super().__init__()
        attn, mlp = block.self_attn, block.mlp
        self.block = block  # frozen, shared with the main path
        self.q = LoRALinear(attn.q_proj, cfg.lora_rank, cfg.lora_alpha)
        self.o = LoRALinear(attn.o_proj, cfg.lora_rank, cfg.lora_alpha)
        self.gate = LoRALinear(mlp.gate_proj, cfg.lora_rank, cfg.lora_alpha)
        self.up = LoRALinear(mlp.up_proj, cfg.lora_rank, cfg.lora_alpha)
        self.down = LoRALinear(mlp.down_proj, cfg.lora_rank, cfg.lora_alpha)
        d = attn.q_proj.in_features
        self.ada = nn.Linear(cfg.cond_dim, 6 * d)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, f, cond, k, v, cos, sin, mcfg, causal: bool):
        from rayml.llm.model import apply_rope

        b, s, d = f.shape
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(F.silu(cond)).chunk(6, dim=-1)
        a = self.block.input_layernorm(f) * (1 + sc1) + sh1
        q = self.q(a).view(b, s, mcfg.n_heads, mcfg.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        rep = mcfg.n_heads // mcfg.n_kv_heads
        att = F.scaled_dot_product_attention(q, k, v, is_causal=causal and s > 1, enable_gqa=rep > 1)
        f = f + g1 * self.o(att.transpose(1, 2).reshape(b, s, d))
        m = self.block.post_attention_layernorm(f) * (1 + sc2) + sh2
        return f + g2 * self.down(F.silu(self.gate(m)) * self.up(m))


class FlowLM(nn.Module):
    """A frozen ``TransformerLM`` with the L2D flow path beside it (see the module docstring)."""

    def __init__(self, base, cfg: L2DConfig = L2DConfig()):
        super().__init__()
        if not isinstance(cfg, L2DConfig):
            raise TypeError(f"cfg must be an L2DConfig, got {type(cfg).__name__}")
        _freeze(base)
        self.base, self.cfg = base, cfg
        d = base.config.d_model
        self.flow_map = nn.Linear(d, cfg.flow_dim)
        self.flow_in = nn.Sequential(nn.Linear(cfg.flow_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.t_embed = nn.Sequential(nn.Linear(cfg.freq_dim, cfg.cond_dim), nn.SiLU(), nn.Linear(cfg.cond_dim, cfg.cond_dim))
        self.class_embed = nn.Embedding(cfg.n_classes + 1, cfg.cond_dim) if cfg.n_classes else None
        self.head = nn.Sequential(nn.Linear(cfg.cond_dim, cfg.cond_dim), nn.SiLU(), nn.Linear(cfg.cond_dim, d))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)
        self.layers = nn.ModuleList([_FlowLayer(block, cfg) for block in base.layers])

    # --- representations ----------------------------------------------------------------------
    def flow_table(self) -> torch.Tensor:
        """(vocab, m): ``x_1`` of every token, ``sqrt(m) normalize(W_map e(y))``."""
        return F.normalize(self.flow_map(self.base.embed_tokens.weight), dim=-1) * math.sqrt(self.cfg.flow_dim)

    def _cond(self, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        c = self.t_embed(_timestep_features(t, self.cfg.freq_dim))
        if self.class_embed is not None:
            if labels is None:
                labels = torch.full(t.shape, self.cfg.n_classes, dtype=torch.long)
            elif labels.dim() == 1:
                labels = labels[:, None]
            c = c + self.class_embed(labels.expand(t.shape))
        return c

    # --- the main path ------------------------------------------------------------------------
    @torch.no_grad()
    def main_path(self, ids: torch.Tensor, cache=None):
        """Run the frozen base on ``ids``: ``(h_main before the final norm, cache with every layer's K/V)``."""
        grabbed = []
        handle = self.base.norm.register_forward_pre_hook(lambda mod, args: grabbed.append(args[0]))
        try:
            if cache is None:
                cache = self.base.new_cache(ids.shape[0], capacity=ids.shape[1] + 16)
            self.base(ids, cache=cache)
        finally:
            handle.remove()
        return grabbed[0], cache

    def base_logits(self, h_main: torch.Tensor) -> torch.Tensor:
        """The base LM's logits from its pre-norm hidden."""
        return self.base.lm_head(self.base.norm(h_main))

    # --- the flow path ------------------------------------------------------------------------
    def flow_logits(self, h_main: torch.Tensor, cache, x_t: torch.Tensor, t: torch.Tensor,
                    labels: torch.Tensor | None = None, at: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the L2D model at ``s = x_t.shape[1]`` positions of the cached sequence.

        ``h_main``: (b, s, d) main hidden of those positions; ``x_t``: (b, s, m); ``t``: (b, s) in [0, 1];
        ``at``: (b, s) indices of those positions in the cache (default: the last ``s``). The flow stream
        of a position reads only the main path's keys and values at or before it (never other flow
        positions), so any subset of positions gives the same logits as the full sequence.
        """
        from rayml.llm.model import rope_cos_sin

        b, s, _ = x_t.shape
        mcfg = self.base.config
        T = cache.length
        if at is None:
            positions = cache.positions[:, T - s:T]
        else:
            if at.shape != (b, s):
                raise ValueError(f"at must have shape {(b, s)}, got {tuple(at.shape)}")
            positions = torch.gather(cache.positions[:, :T], 1, at)
        cos, sin = rope_cos_sin(positions, mcfg.head_dim, mcfg.rope_theta, x_t.dtype)
        var = (1 - t) ** 2 * self.cfg.noise_scale ** 2 + t ** 2
        f = self.flow_in(x_t / var.sqrt()[..., None])
        cond = self._cond(t, labels)
        if at is not None:  # (b, 1, s, T): each position sees the cached entries up to itself
            mask = (torch.arange(T)[None, None, :] <= at[:, :, None])[:, None]
        elif s < T:  # the last s positions attend to every cached entry at or before them
            mask = torch.ones(s, T, dtype=torch.bool).tril(diagonal=T - s)
        for layer, fl in enumerate(self.layers):
            k, v = cache.read(layer)
            if at is None and s == T:
                f = fl(f, cond, k, v, cos, sin, mcfg, causal=True)
            else:
                f = _masked_layer(fl, f, cond, k, v, cos, sin, mcfg, mask)
        scale = self.head(cond) - self.head(self._cond(torch.zeros_like(t), labels))
        return self.base_logits(h_main + f * scale)

    def forward(self, ids: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor, labels=None) -> torch.Tensor:
        """Logits (b, s, vocab) of ``ids`` with flow inputs ``x_t`` (b, s, m) at times ``t`` (b, s)."""
        h, cache = self.main_path(ids)
        return self.flow_logits(h, cache, x_t, t, labels)

    def velocity(self, h_main, cache, x, t: float, labels=None, guidance: float = 1.0,
                 table: torch.Tensor | None = None) -> torch.Tensor:
        """``(x_1_hat - x) / (1 - t)`` with ``x_1_hat`` the representation of the argmax token; CFG mixes
        the conditional and the unconditional velocities with weight ``guidance``. ``table``: the
        precomputed ``flow_table()`` (it is the same for every evaluation of one solve)."""
        tt = torch.full(x.shape[:2], float(t))
        table = self.flow_table() if table is None else table

        def v(lab):
            logits = self.flow_logits(h_main, cache, x, tt, lab)
            x1 = table[logits.argmax(-1)]
            return (x1 - x) / (1.0 - float(t))

        if labels is None or self.class_embed is None or guidance == 1.0:
            return v(labels)
        return guidance * v(labels) + (1 - guidance) * v(None)


def _masked_layer(fl, f, cond, k, v, cos, sin, mcfg, mask):
    from rayml.llm.model import apply_rope

    b, s, d = f.shape
    sh1, sc1, g1, sh2, sc2, g2 = fl.ada(F.silu(cond)).chunk(6, dim=-1)
    a = fl.block.input_layernorm(f) * (1 + sc1) + sh1
    q = apply_rope(fl.q(a).view(b, s, mcfg.n_heads, mcfg.head_dim).transpose(1, 2), cos, sin)
    rep = mcfg.n_heads // mcfg.n_kv_heads
    att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=rep > 1)
    f = f + g1 * fl.o(att.transpose(1, 2).reshape(b, s, d))
    m = fl.block.post_attention_layernorm(f) * (1 + sc2) + sh2
    return f + g2 * fl.down(F.silu(fl.gate(m)) * fl.up(m))


class LoRALM(nn.Module):
    """The LoRA finetuning baseline: LoRA on every projection of the frozen base (q, k, v, o, gate, up, down).

    ``base`` is not modified: the adapters wrap the projections of a copy that shares its weights."""

    def __init__(self, base, rank: int, alpha: float | None = None):
        super().__init__()
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive integer, got {rank!r}")
        _freeze(base)
        # the adapters go into a copy of the module tree that shares the (frozen) weight tensors, so
        # ``base`` itself is left as it was (a worker may keep one loaded base for many runs)
        base = copy.deepcopy(base, memo={id(p): p for p in base.parameters()})
        alpha = float(rank) if alpha is None else alpha
        for block in base.layers:
            for parent, names in ((block.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                  (block.mlp, ("gate_proj", "up_proj", "down_proj"))):
                for name in names:
                    setattr(parent, name, LoRALinear(getattr(parent, name), rank, alpha))
        self.base = base

    def forward(self, ids):
        return self.base(ids)


def trainable_parameters(module: nn.Module) -> int:
    """Number of parameters with ``requires_grad`` (the finetuning budget)."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters() if p.requires_grad}.values())


def flow_budget(base_config, cfg: L2DConfig = L2DConfig()) -> int:
    """Trainable parameters of the L2D flow path on a base of shape ``base_config`` (a ``ModelConfig``).

    Counted on a model built on the ``meta`` device: no weights are loaded or allocated and the global
    torch random stream is not touched (loading a base draws from it: ``TransformerLM.reset_parameters``),
    so calling this anywhere leaves the caller's later random draws unchanged.
    """
    from rayml.llm.model import TransformerLM

    if not isinstance(cfg, L2DConfig):
        raise TypeError(f"cfg must be an L2DConfig, got {type(cfg).__name__}")
    with torch.device("meta"):
        return trainable_parameters(FlowLM(TransformerLM(base_config), cfg))


def lora_rank_for_budget(base_config, budget: int) -> int:
    """The LoRA rank (on all seven projections per layer) whose trainable count is closest to ``budget``."""
    c = base_config
    kv = c.n_kv_heads * c.head_dim
    per_rank = c.n_layers * ((c.d_model * 2) * 2 + (c.d_model + kv) * 2 + (c.d_model + c.d_ff) * 3)
    return max(1, int(round(budget / per_rank)))


def l2d_loss(flow: FlowLM, ids: torch.Tensor, targets: torch.Tensor, generator: torch.Generator,
             labels: torch.Tensor | None = None, ignore_index: int = -100, only_targets: bool = False,
             t: float | None = None) -> torch.Tensor:
    """Eq. 4: cross-entropy of the next token given ``x_t`` of that token, ``t ~ U(0, 1)`` per token.

    ``only_targets``: run the flow path only at the positions whose target is not ``ignore_index``
    (the same loss, since a flow position reads only the main path; the random draws are made for
    every position either way, so both give the same ``t`` and noise per position).
    ``t``: evaluate at this fixed time for every token instead of drawing it (a diagnostic: at ``t = 1``
    the flow input is the target's own representation, at ``t = 0`` the loss is the base's); the
    noise is drawn from ``generator`` as in training.
    """
    b, s = ids.shape
    if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool) and 0.0 <= t <= 1.0):
        raise ValueError(f"t must be a number in [0, 1] or None, got {t!r}")
    draw = torch.rand(b, s, generator=generator)
    t = draw if t is None else torch.full((b, s), float(t))
    tgt = targets.clamp_min(0)
    x1 = flow.flow_table()[tgt]
    eps = torch.randn(x1.shape, generator=generator)
    x_t = (1 - t)[..., None] * flow.cfg.noise_scale * eps + t[..., None] * x1
    if labels is not None and flow.class_embed is not None:
        drop = torch.rand(labels.shape, generator=generator) < flow.cfg.guidance_dropout
        labels = torch.where(drop, flow.cfg.n_classes, labels)[:, None].expand(b, s)
    if not only_targets:
        logits = flow(ids, x_t, t, labels)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)
    keep = targets != ignore_index
    k = max(1, int(keep.sum(1).max()))
    # per row, the target positions first (in order), padded with ignored positions
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :k]
    h, cache = flow.main_path(ids)
    g = lambda x: torch.gather(x, 1, order if x.dim() == 2 else order[..., None].expand(-1, -1, x.shape[-1]))
    lab = g(labels) if labels is not None and labels.dim() == 2 else labels
    logits = flow.flow_logits(g(h), cache, g(x_t), g(t), lab, at=order)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), g(targets).reshape(-1), ignore_index=ignore_index)


def lm_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Next-token cross-entropy of an ordinary LM (the LoRA baseline)."""
    logits = model(ids)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


def integrate(vel, x0: torch.Tensor, *, method: str = "euler", steps: int = 8, rtol: float = 1e-2,
              atol: float = 1e-2, max_evals: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Integrate ``dx/dt = vel(x, t, rows)`` from ``t = 0`` to 1; return ``(x(1), evaluations per row)``.

    ``euler`` / ``midpoint``: ``steps`` equal steps (``steps`` / ``2 steps`` evaluations), all rows at once.
    ``adaptive_heun``: an embedded Heun (2nd order) / Euler (1st order) pair per row (``rows`` is the
    row index tensor passed to ``vel``), step accepted when ``max |err| / (atol + rtol |x|) <= 1``, step
    size ``h <- h min(5, max(0.2, 0.9 / sqrt(err)))``, at most ``max_evals`` evaluations per row.
    """
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {SOLVERS}, got {method!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not (rtol > 0 and atol > 0):
        raise ValueError(f"rtol and atol must be > 0, got {rtol}, {atol}")
    if isinstance(max_evals, bool) or not isinstance(max_evals, int) or max_evals < 2:
        raise ValueError(f"max_evals must be an integer >= 2, got {max_evals!r}")
    b = x0.shape[0]
    x = x0.clone()
    evals = torch.zeros(b, dtype=torch.long)
    if method in ("euler", "midpoint"):
        h = 1.0 / steps
        for i in range(steps):
            t = i * h
            if method == "euler":
                x = x + h * vel(x, t, None)
                evals += 1
            else:
                xm = x + 0.5 * h * vel(x, t, None)
                x = x + h * vel(xm, t + 0.5 * h, None)
                evals += 2
        return x, evals
    for r in range(b):  # each problem chooses its own steps
        rows = torch.tensor([r])
        xr, t, h = x[rows], 0.0, 0.25
        k1 = vel(xr, t, rows)
        n = 1
        while t < 1.0 and n < max_evals:
            h = min(h, 1.0 - t)
            k2 = vel(xr + h * k1, t + h, rows)
            n += 1
            high = xr + 0.5 * h * (k1 + k2)
            err = float(((0.5 * h * (k2 - k1)).abs() / (atol + rtol * torch.maximum(xr.abs(), high.abs()))).max())
            if err <= 1.0 or h < 1e-4:
                t, xr = t + h, high
                if t < 1.0 and n < max_evals:
                    k1 = vel(xr, t, rows)
                    n += 1
            h = h * min(5.0, max(0.2, 0.9 / math.sqrt(max(err, 1e-12))))
        if t < 1.0:  # out of evaluations: finish with one Euler step (no further evaluation)
            xr = xr + (1.0 - t) * k1
        x[r] = xr[0]
        evals[r] = n
    return x, evals


@torch.no_grad()
def solve(flow: FlowLM, h_main, cache, x0: torch.Tensor, *, method: str = "euler", steps: int = 8,
          rtol: float = 1e-2, atol: float = 1e-2, max_evals: int = 256, labels=None,
          guidance: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the L2D ODE (``integrate`` on ``FlowLM.velocity``) and return ``(logits at t = 1, evaluations per row)``.

    The velocity at ``t >= 1`` is taken as zero (the path has arrived), as in the authors' adaptive solvers.
    """

    table = flow.flow_table()

    def vel(xx, t, rows):
        if t >= 1.0:
            return torch.zeros_like(xx)
        if rows is None:
            return flow.velocity(h_main, cache, xx, t, labels, guidance, table)
        lab = labels[rows] if labels is not None else None
        return flow.velocity(h_main[rows], cache.select(rows), xx, t, lab, guidance, table)

    x, evals = integrate(vel, x0, method=method, steps=steps, rtol=rtol, atol=atol, max_evals=max_evals)
    logits = flow.flow_logits(h_main, cache, x, torch.ones(x.shape[:2]), labels)
    return logits, evals
