"""Direct Preference Optimization on the embedded LM: the loss, a frozen reference, the trainer.

Rafailov et al., "Direct Preference Optimization: Your Language Model is Secretly a Reward
Model" (NeurIPS 2023), Eq. 7: for a prompt ``x`` with a chosen response ``y_w`` and a rejected
``y_l``,

    h = [log pi(y_w|x) - log pi_ref(y_w|x)] - [log pi(y_l|x) - log pi_ref(y_l|x)]
    L = -log sigmoid(beta * h)

with label smoothing ``eps`` as TRL's ``sigmoid`` loss had it (the conservative DPO of Mitchell,
"A note on DPO with noisy preferences", 2023: the label is flipped with probability ``eps``):

    L = -(1 - eps) log sigmoid(beta * h) - eps log sigmoid(-beta * h).

(TRL 1.x keeps this form in its ``aot`` losses; its ``sigmoid`` loss dropped ``label_smoothing``,
which equals ``eps = 0`` here.) ``log pi(y|x)`` is the sum of the response tokens' log
probabilities, the response followed by ``<eos>`` (the generation stops there). The implicit
rewards are ``beta * (log pi - log pi_ref)``.

The trainer (``train_dpo``) freezes a copy of the starting policy as the reference (or takes
one), draws batches of pairs in random order (optionally grouped by length so that a batch pads
little: ``length_grouped``) or in a given order (``order="sequential"``: Selective DPO's
easy-to-hard curriculum), optionally weights each pair's loss, and trains with AdamW. Everything
is deterministic for a seed on the CPU. ``sft`` is the supervised warm-up (cross-entropy on the
responses) that gives DPO its starting policy, as an SFT checkpoint does in the papers.

Examples:
    >>> import torch
    >>> losses, rc, rr = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]),
    ...                           torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5)
    >>> round(float(losses[0]), 4)  # -log sigmoid(0.5 * 2)
    0.3133
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rayml.llm.model import TransformerLM

__all__ = ["TokenPair", "DPOConfig", "DPOResult", "dpo_loss", "sequence_logps", "pair_logps", "per_example_loss",
           "length_batches", "batch_schedule", "train_dpo", "sft", "frozen_copy", "LoRALinear", "add_lora",
           "merge_lora", "LORA_TARGETS"]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

ORDERS = ("random", "sequential")


@dataclass(frozen=True)
class TokenPair:
    """A preference pair in token ids.

    Attributes:
        prompt: prompt ids (``<bos>`` first).
        chosen: preferred response ids (``<eos>`` last).
        rejected: dispreferred response ids (``<eos>`` last).
    """

    prompt: tuple
    chosen: tuple
    rejected: tuple

    def __post_init__(self):
        for name in ("prompt", "chosen", "rejected"):
            v = getattr(self, name)
            if len(v) == 0:
                raise ValueError(f"TokenPair.{name} must not be empty")
            object.__setattr__(self, name, tuple(int(t) for t in v))

    @property
    def length(self) -> int:
        """Tokens of the longer of the two sequences (prompt + response)."""
        return len(self.prompt) + max(len(self.chosen), len(self.rejected))


@dataclass(frozen=True)
class DPOConfig:
    """DPO training settings.

    Attributes:
        beta: the KL strength of Eq. 7 (TRL's default 0.1; Selective DPO used 0.01 at 7B).
        label_smoothing: ``eps`` in [0, 0.5) (conservative DPO); 0 is plain DPO.
        lr: AdamW learning rate (constant after ``warmup`` linear steps).
        steps: optimizer steps.
        batch_size: pairs per step.
        weight_decay, grad_clip: AdamW decay and global-norm clipping (0: none).
        warmup: linear warm-up steps.
        order: ``"random"`` (a fresh permutation per epoch) or ``"sequential"`` (the given order,
            repeated: a curriculum).
        length_grouped: in random order, batch pairs of similar length together.
        nll_weight: weight ``alpha`` of a chosen-response NLL anchor added to the DPO loss, after RPO (Pang
            et al., "Iterative Reasoning Preference Optimization", NeurIPS 2024): ``L_DPO + alpha * NLL(chosen) /
            |chosen|`` (assumed: normalised by the chosen response's tokens); 0 (the default) is plain DPO.
    """

    beta: float = 0.1
    label_smoothing: float = 0.0
    lr: float = 1e-3
    steps: int = 100
    batch_size: int = 16
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    warmup: int = 0
    order: str = "random"
    length_grouped: bool = False
    nll_weight: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.beta, (int, float)) and self.beta > 0 and math.isfinite(self.beta)):
            raise ValueError(f"beta must be a finite number > 0, got {self.beta!r}")
        if not (isinstance(self.label_smoothing, (int, float)) and 0 <= self.label_smoothing < 0.5):
            raise ValueError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        for name in ("steps", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay and grad_clip must be >= 0")
        if not (isinstance(self.nll_weight, (int, float)) and math.isfinite(self.nll_weight) and self.nll_weight >= 0):
            raise ValueError(f"nll_weight must be a finite number >= 0, got {self.nll_weight!r}")

    def to_dict(self) -> dict:
        """Plain dict (JSON-able)."""
        return asdict(self)


@dataclass
class DPOResult:
    """Output of ``train_dpo``: the trained policy, the loss per step and the evaluations."""

    model: TransformerLM
    losses: list
    reward_accuracy: list
    evals: list = field(default_factory=list)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, *, beta: float = 0.1, label_smoothing: float = 0.0):
    """Per-pair DPO loss (Rafailov et al. 2023, Eq. 7) with conservative label smoothing.

    Args:
        policy_chosen, policy_rejected: summed log-probabilities of the responses under the policy.
        ref_chosen, ref_rejected: the same under the frozen reference.
        beta: KL strength.
        label_smoothing: probability ``eps`` that a label is flipped (cDPO); 0 is plain DPO.

    Returns:
        ``(losses, chosen_rewards, rejected_rewards)``, each of shape (batch,); the rewards are
        ``beta * (log pi - log pi_ref)`` and carry no gradient.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing!r}")
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    return losses, (beta * (policy_chosen - ref_chosen)).detach(), (beta * (policy_rejected - ref_rejected)).detach()


def sequence_logps(model: TransformerLM, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                   *, pad_id: int = 0) -> torch.Tensor:
    """``sum_t log p(response_t | prompt, response_<t)`` per row, in one right-padded forward pass.

    Right padding never changes the earlier tokens' logits under causal attention, so each row's
    value equals the one computed alone. A model with its own ``response_logps(prompts, responses,
    pad_id=...)`` (``rayml.alignment.frozen_prefix``) computes them itself.
    """
    if len(prompts) != len(responses) or not prompts:
        raise ValueError("prompts and responses must be non-empty and of equal length")
    if hasattr(model, "response_logps"):
        return model.response_logps(prompts, responses, pad_id=pad_id)
    rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(r) for r in rows)
    device = model.embed_tokens.weight.device
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)  # mask[i, t]: token t is a response token
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(rows[i])] = torch.as_tensor(rows[i])
        mask[i, len(p): len(p) + len(r)] = True
    ids, mask = ids.to(device), mask.to(device)
    logits = model(ids[:, :-1]).float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return (logp * mask[:, 1:]).sum(-1)


def pair_logps(model: TransformerLM, pairs: Sequence[TokenPair], *, pad_id: int = 0):
    """``(log pi(chosen), log pi(rejected))`` of a batch of pairs (chosen and rejected in one pass)."""
    prompts = [p.prompt for p in pairs] * 2
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    lp = sequence_logps(model, prompts, responses, pad_id=pad_id)
    return lp[: len(pairs)], lp[len(pairs):]


def frozen_copy(model: TransformerLM) -> TransformerLM:
    """A deep copy in eval mode with gradients off: DPO's reference policy."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


@torch.no_grad()
def per_example_loss(policy: TransformerLM, reference: TransformerLM, pairs: Sequence[TokenPair], *,
                     beta: float = 0.1, label_smoothing: float = 0.0, batch_size: int = 64,
                     pad_id: int = 0) -> np.ndarray:
    """The DPO loss of every pair (no gradient): Selective DPO's validation loss of held-out pairs."""
    was = policy.training
    policy.eval()
    out = []
    for s in range(0, len(pairs), batch_size):
        chunk = pairs[s:s + batch_size]
        pc, pr = pair_logps(policy, chunk, pad_id=pad_id)
        rc, rr = pair_logps(reference, chunk, pad_id=pad_id)
        out.append(dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=label_smoothing)[0].cpu().numpy())
    policy.train(was)
    return np.concatenate(out) if out else np.zeros(0)


def length_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator, *,
                   mega: int = 8) -> list[np.ndarray]:
    """One epoch of batches grouped by length: a random permutation is cut into blocks of
    ``mega * batch_size``; each block is sorted by length and cut into batches; the batches are
    shuffled (the ``group_by_length`` sampler of ``transformers``, in spirit)."""
    perm = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    batches = []
    block = mega * batch_size
    for s in range(0, len(perm), block):
        idx = perm[s:s + block]
        idx = idx[np.argsort(-lengths[idx], kind="stable")]
        batches += [idx[b:b + batch_size] for b in range(0, len(idx), batch_size)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def batch_schedule(n: int, config: DPOConfig, rng: np.random.Generator, *,
                   order: Sequence[int] | None = None, lengths: Sequence[int] | None = None) -> list[np.ndarray]:
    """The indices of the pairs of every step.

    ``order="sequential"``: consecutive batches of ``order`` (default ``0..n-1``), repeated when
    the steps outnumber one pass (each pass easy to hard again). ``"random"``: a fresh
    permutation per epoch, grouped by length when ``config.length_grouped`` and ``lengths``.
    """
    if n < 1:
        raise ValueError("there must be at least one pair to train on")
    out: list[np.ndarray] = []
    if config.order == "sequential":
        seq = np.arange(n) if order is None else np.asarray(order, dtype=int)
        if sorted(seq.tolist()) != list(range(n)):
            raise ValueError(f"order must be a permutation of range({n})")
        pos = 0
        while len(out) < config.steps:
            idx = np.take(seq, np.arange(pos, pos + min(config.batch_size, n)), mode="wrap")
            out.append(idx)
            pos = (pos + config.batch_size) % n
        return out
    while len(out) < config.steps:
        if config.length_grouped and lengths is not None:
            out += length_batches(lengths, min(config.batch_size, n), rng)
        else:
            perm = rng.permutation(n)
            out += [perm[b:b + config.batch_size] for b in range(0, n, config.batch_size)]
    return out[: config.steps]


class LoRALinear(torch.nn.Module):
    """``W x + (alpha / r) B A x`` with ``W`` frozen (Hu et al., "LoRA", ICLR 2022, Eq. 3).

    ``A`` starts Gaussian (std ``1/r``), ``B`` at zero, so the wrapped layer starts equal to the
    base layer. ``weight`` is the base weight (read by code that walks ``nn.Linear`` weights).
    """

    def __init__(self, base: torch.nn.Linear, rank: int, alpha: float, generator: torch.Generator | None = None):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.rank, self.scale = int(rank), float(alpha) / int(rank)
        self.lora_A = torch.nn.Parameter(torch.randn(rank, base.in_features, generator=generator) / rank)
        self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, rank))

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale


def add_lora(model: TransformerLM, rank: int, *, alpha: float | None = None, targets: Sequence[str] = LORA_TARGETS,
             seed: int = 0) -> TransformerLM:
    """A copy of ``model`` whose ``targets`` projections are ``LoRALinear`` of ``rank``; only the
    adapters train (every other parameter is frozen). ``alpha`` defaults to ``rank`` (scale 1)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    unknown = set(targets) - set(LORA_TARGETS)
    if unknown or not targets:
        raise ValueError(f"targets must be a non-empty subset of {LORA_TARGETS}, got {tuple(targets)!r}")
    out = copy.deepcopy(model)
    for p in out.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(int(seed))
    for block in out.layers:
        for parent in (block.self_attn, block.mlp):
            for name in targets:
                lin = getattr(parent, name, None)
                if isinstance(lin, torch.nn.Linear):
                    setattr(parent, name, LoRALinear(lin, rank, float(alpha or rank), gen))
    return out


@torch.no_grad()
def merge_lora(model: TransformerLM) -> TransformerLM:
    """A copy with every ``LoRALinear`` folded into a plain ``nn.Linear`` (``W + scale B A``)."""
    out = copy.deepcopy(model)
    for block in out.layers:
        for parent in (block.self_attn, block.mlp):
            for name, mod in list(parent.named_children()):
                if isinstance(mod, LoRALinear):
                    lin = mod.base
                    lin.weight += mod.scale * mod.lora_B @ mod.lora_A
                    lin.weight.requires_grad_(True)
                    setattr(parent, name, lin)
    return out.eval()


def _optimizer(model, lr, weight_decay):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.98))


def train_dpo(policy: TransformerLM, pairs: Sequence[TokenPair], config: DPOConfig, *, seed: int = 0,
              reference: TransformerLM | None = None, order: Sequence[int] | None = None,
              weights: Sequence[float] | None = None, pad_id: int = 0, eval_every: int = 0,
              evaluate: Callable[[TransformerLM, TransformerLM, int], object] | None = None) -> DPOResult:
    """Train a copy of ``policy`` with the DPO loss on ``pairs`` against a frozen reference.

    Args:
        policy: the starting policy (left unchanged; a copy is trained).
        pairs: the preference pairs.
        config: the settings.
        seed: seeds the batch order.
        reference: the frozen reference (default: a frozen copy of ``policy``).
        order: the curriculum for ``config.order == "sequential"`` (indices into ``pairs``).
        weights: per-pair loss weights (a reweighting variant); default 1.
        pad_id: padding id.
        eval_every: call ``evaluate(model, reference, step)`` every this many steps (0: never).
        evaluate: the callback; its return values are collected in ``DPOResult.evals``.
    """
    if not isinstance(config, DPOConfig):
        raise TypeError(f"config must be a DPOConfig, got {type(config).__name__}")
    if len(pairs) == 0:
        raise ValueError("pairs must not be empty")
    if weights is not None:
        weights = np.asarray(weights, dtype=float)
        if weights.shape != (len(pairs),) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError(f"weights must be {len(pairs)} finite numbers >= 0")
    if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
        raise ValueError(f"eval_every must be an integer >= 0, got {eval_every!r}")
    rng = np.random.default_rng(seed)
    reference = frozen_copy(policy) if reference is None else reference.eval()
    model = copy.deepcopy(policy).train()
    if not any(isinstance(m, LoRALinear) for m in model.modules()):
        for p in model.parameters():
            p.requires_grad_(True)
    opt = _optimizer(model, config.lr, config.weight_decay)
    schedule = batch_schedule(len(pairs), config, rng, order=order, lengths=[p.length for p in pairs])
    losses, accs, evals = [], [], []
    for step, idx in enumerate(schedule):
        for g in opt.param_groups:
            g["lr"] = config.lr * min(1.0, (step + 1) / config.warmup) if config.warmup else config.lr
        batch = [pairs[i] for i in idx]
        pc, pr = pair_logps(model, batch, pad_id=pad_id)
        with torch.no_grad():
            rc, rr = pair_logps(reference, batch, pad_id=pad_id)
        per, cr, rj = dpo_loss(pc, pr, rc, rr, beta=config.beta, label_smoothing=config.label_smoothing)
        if config.nll_weight:  # RPO's anchor: the chosen response's per-token NLL
            n_tok = torch.as_tensor([len(p.chosen) for p in batch], dtype=pc.dtype)
            per = per - config.nll_weight * pc / n_tok
        if weights is not None:
            w = torch.as_tensor(weights[idx], dtype=per.dtype)
            loss = (per * w).sum() / len(batch)
        else:
            loss = per.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], config.grad_clip)
        opt.step()
        losses.append(float(per.mean().detach()))
        accs.append(float((cr > rj).float().mean()))
        if evaluate is not None and eval_every and (step + 1) % eval_every == 0:
            model.eval()
            evals.append(evaluate(model, reference, step + 1))
            model.train()
    model.eval()
    return DPOResult(model, losses, accs, evals)


def sft(model: TransformerLM, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *,
        steps: int = 200, batch_size: int = 32, lr: float = 3e-3, seed: int = 0, pad_id: int = 0) -> TransformerLM:
    """Supervised warm-up: minimise ``-log p(response | prompt)`` (summed over response tokens,
    averaged over rows) on random batches; returns the trained ``model`` (in place, eval mode)."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError("prompts and responses must be non-empty and of equal length")
    for name, v in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    rng = np.random.default_rng(seed)
    opt = _optimizer(model, lr, 0.01)
    model.train()
    n = len(prompts)
    for step in range(steps):
        idx = rng.integers(0, n, size=min(batch_size, n))
        g_lr = lr * min(1.0, (step + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = g_lr
        lp = sequence_logps(model, [prompts[i] for i in idx], [responses[i] for i in idx], pad_id=pad_id)
        loss = -lp.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model.eval()
