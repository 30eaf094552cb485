"""Training the embedded LM on the task mixture: named configs, the loop, fine-tuning, ``rayml train``.

* ``CONFIGS``: named ``TrainConfig``s (``"base"``: the shipped checkpoint; ``"tiny"``: tests).
* ``train_model(config, seed)``: the pure loop (no Ray): fits the tokenizer on the task corpus,
  builds the model, trains with AdamW (linear warm-up, cosine decay), checkpoints every
  ``checkpoint_every`` steps to ``out`` and resumes from there, and evaluates every task on
  held-out items. Deterministic for a seed (data of step ``s`` depends only on ``(seed, s)``).
* ``fine_tune(model, tokenizer, weights, ...)``: the same loop from existing weights on another
  task mixture (task-specific variants of a base, e.g. MERGE^3's endpoints).
* ``train(name, seed=, out=, overrides=)``: what ``rayml train NAME`` calls: runs ``train_model``
  as one Ray task (``num_gpus=1`` when the cluster has GPUs) with a progress bar on the driver,
  writes the checkpoint and its card to ``out`` and returns the card.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from rayml.llm import tasks as _tasks
from rayml.llm.checkpoint import save_checkpoint
from rayml.llm.data import IGNORE, pack_batch
from rayml.llm.model import ModelConfig, TransformerLM, check_int_fields
from rayml.llm.tokenizer import BPETokenizer

__all__ = ["TrainConfig", "CONFIGS", "get_config", "config_hash", "train_model", "fine_tune", "evaluate_tasks",
           "train", "cache_dir", "TrainResult", "build_tokenizer", "make_card"]


def _default_weights() -> dict:
    return {name: t.weight for name, t in _tasks.TASKS.items()}


@dataclass(frozen=True)
class TrainConfig:
    """A training recipe.

    Attributes:
        d_model, n_layers, n_heads, n_kv_heads, d_ff, max_seq_len: the model's shape.
        vocab_size: BPE vocabulary fitted on the task corpus (``tokenizer_corpus`` items per task).
        steps: optimizer steps.
        rows, row_len: a batch is ``rows`` packed rows of ``row_len`` tokens.
        lr, warmup, min_lr_ratio, weight_decay, grad_clip, betas: AdamW with linear warm-up and
            cosine decay to ``lr * min_lr_ratio``.
        task_weights: the task mixture (task -> share).
        eval_items: held-out items per task for the card's scores.
        checkpoint_every: steps between resumable checkpoints (0: never).
        threads: torch intra-op threads on CPU (0: leave torch's default).
        init_from: name of another config whose trained checkpoint (same seed) this one starts
            from: a continued-training stage with its own mixture and learning-rate schedule and
            a fresh optimizer, on the parent's tokenizer, with the data stream continuing after
            the parent's steps. The parent is trained first when it is not cached, and the
            card's training time is the sum over stages. ``None``: train from random weights.
    """

    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 384
    max_seq_len: int = 2048
    vocab_size: int = 512
    tokenizer_corpus: int = 300
    steps: int = 1000
    rows: int = 16
    row_len: int = 512
    lr: float = 3e-3
    warmup: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    betas: tuple = (0.9, 0.98)
    task_weights: Mapping[str, float] = field(default_factory=_default_weights)
    eval_items: int = 200
    checkpoint_every: int = 50
    threads: int = 0
    init_from: str | None = None

    def __post_init__(self):
        check_int_fields(self, ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len", "vocab_size",
                                "tokenizer_corpus", "steps", "rows", "row_len", "eval_items"))
        check_int_fields(self, ("warmup", "checkpoint_every", "threads"), minimum=0)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.row_len > self.max_seq_len:
            raise ValueError(f"row_len ({self.row_len}) must be <= max_seq_len ({self.max_seq_len})")
        unknown = set(self.task_weights) - set(_tasks.TASKS) - set(_tasks.VARIANTS)
        if unknown or not self.task_weights or any(w < 0 for w in self.task_weights.values()) \
                or sum(self.task_weights.values()) <= 0:
            known = sorted(_tasks.TASKS) + sorted(_tasks.VARIANTS)
            raise ValueError(f"task_weights must map tasks of {known} to weights >= 0 "
                             f"(positive sum), got {dict(self.task_weights)!r}")
        if self.init_from is not None and not isinstance(self.init_from, str):
            raise ValueError(f"init_from must be a config name or None, got {self.init_from!r}")
        object.__setattr__(self, "betas", tuple(self.betas))
        object.__setattr__(self, "task_weights", dict(self.task_weights))
        self.model_config(self.vocab_size)  # validates the shape

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The ``ModelConfig`` for a tokenizer of ``vocab_size`` ids."""
        return ModelConfig(vocab_size=vocab_size, d_model=self.d_model, n_layers=self.n_layers,
                           n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, d_ff=self.d_ff,
                           max_seq_len=self.max_seq_len)

    def to_dict(self) -> dict:
        """JSON-able dict."""
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d


CONFIGS: dict[str, TrainConfig] = {
    # The shipped base checkpoint: ~1M parameters (8 heads of 16, 4 KV heads), 6400 steps of
    # 8 x 512 tokens on two threads. Retrieval items hold 1-16 documents (log-uniform), which is
    # what lets recall emerge at all (with 8-16 documents only, a probe stayed at chance for 2000+
    # steps); 8 heads of 16 learn addition where 4 heads of 32 stalled on the units digit.
    "base": TrainConfig(n_heads=8, n_kv_heads=4, vocab_size=768, steps=6400, rows=8, lr=2e-3, warmup=100, threads=2,
                        task_weights={"add": 0.3, "retrieve": 0.45, "copy": 0.05, "reverse": 0.06, "sort": 0.06,
                                      "json": 0.08}),
    # Unit tests: trains in seconds.
    "tiny": TrainConfig(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=256,
                        vocab_size=300, tokenizer_corpus=40, steps=8, rows=4, row_len=128, lr=3e-3,
                        warmup=2, eval_items=4, checkpoint_every=0, threads=1,
                        task_weights={"add": 1.0, "copy": 1.0, "reverse": 0.5, "sort": 0.5, "json": 0.5}),
}


def get_config(name: str, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """The named config with ``overrides`` (``--set key=value``) applied."""
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; known: {', '.join(sorted(CONFIGS))}")
    base = CONFIGS[name]
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for k in overrides or {}:
        if k not in fields:
            raise ValueError(f"--set {k}: unknown setting; known: {', '.join(sorted(fields))}")
    return dataclasses.replace(base, **dict(overrides or {}))


def config_hash(config: TrainConfig, seed: int) -> str:
    """Short hash of a recipe and seed (the cache key)."""
    blob = json.dumps({"config": config.to_dict(), "seed": int(seed)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_dir(config: TrainConfig, seed: int) -> Path:
    """``~/.cache/rayml/models/<config-hash>/`` (``RAYML_CACHE`` overrides ``~/.cache/rayml``)."""
    from rayml.runtime import cache_root

    return cache_root() / "models" / config_hash(config, seed)


def _lr_at(step: int, cfg: TrainConfig, total: int) -> float:
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


@dataclass
class TrainResult:
    """Output of ``train_model`` / ``fine_tune``: the model, its tokenizer and the history."""

    model: TransformerLM
    tokenizer: BPETokenizer
    losses: list
    seconds: float
    scores: dict
    steps: int
    stages: list = field(default_factory=list)


def build_tokenizer(config: TrainConfig) -> BPETokenizer:
    """The BPE fitted on ``config.tokenizer_corpus`` training items per task (seed 0)."""
    return BPETokenizer.train(_tasks.corpus(config.tokenizer_corpus, seed=0), vocab_size=config.vocab_size)


def _loop(model: TransformerLM, tok: BPETokenizer, cfg: TrainConfig, seed: int, *, weights, out: Path | None,
          progress: Callable[[int, float], None] | None, start_step: int = 0, opt_state=None,
          seconds_before: float = 0.0, losses_before: list | None = None, data_offset: int = 0) -> tuple[list, int]:
    t0 = time.perf_counter()
    device = model.embed_tokens.weight.device
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.betas)
    if opt_state is not None:
        opt.load_state_dict(opt_state)
    losses = []
    model.train()
    for step in range(start_step, cfg.steps):
        x, y = pack_batch(tok, seed=seed, step=data_offset + step, rows=cfg.rows, row_len=cfg.row_len, weights=weights)
        x, y = x.to(device), y.to(device)
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg, cfg.steps)
        logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1), ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, losses[-1])
        if out is not None and cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            _save_resume(out, model, opt, step + 1, list(losses_before or []) + losses, seed, cfg,
                         seconds_before + time.perf_counter() - t0)
    model.eval()
    return losses, cfg.steps


def _save_resume(out: Path, model, opt, step, losses, seed, cfg, seconds):
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "resume.pt.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "losses": losses,
                "seed": seed, "config": cfg.to_dict(), "seconds": seconds}, tmp)
    os.replace(tmp, out / "resume.pt")


def evaluate_tasks(model: TransformerLM, tok: BPETokenizer, *, n_items: int = 200, seed: int = 12345,
                   tasks: list[str] | None = None, batch_size: int = 50) -> dict:
    """Exact-match accuracy per task on held-out items (greedy, KV-cache generation)."""
    from rayml.llm.backends import EmbeddedLM

    lm = EmbeddedLM(model, tok)
    scores = {}
    for i, name in enumerate(tasks or list(_tasks.TASKS)):
        items = _tasks.make_items(name, n_items, np.random.default_rng([seed, i]), split="test")
        scores[name] = float(_tasks.evaluate([lm], items, batch_size=batch_size).mean())
    return scores


def train_model(config: TrainConfig, seed: int = 0, *, out: str | os.PathLike | None = None,
                progress: Callable[[int, float], None] | None = None, device: str | None = None,
                evaluate: bool = True) -> TrainResult:
    """Train a model from scratch on the task mixture (see the module docstring).

    Args:
        config: the recipe.
        seed: the seed of the initialisation and of the data.
        out: directory for resumable checkpoints (``resume.pt``); an existing one with the same
            config and seed is resumed.
        progress: called as ``progress(step, loss)`` after every step.
        device: torch device (default: cuda when available, else cpu).
        evaluate: score every task on ``config.eval_items`` held-out items at the end.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if config.threads and device == "cpu":
        torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    stages: list = []
    data_offset, parent_seconds = 0, 0.0
    if config.init_from is not None:
        model, tok, parent_card = trained_stage(config.init_from, seed, device=device)
        if model.config != config.model_config(tok.vocab_size):
            raise ValueError(f"init_from: {config.init_from!r} has model shape {model.config}, "
                             f"this config wants {config.model_config(tok.vocab_size)}")
        stages = list(parent_card.get("stages", [])) + [_stage_summary(parent_card)]
        data_offset = sum(int(st["steps"]) for st in stages)
        parent_seconds = float(parent_card["training_seconds"])  # a card's time covers all its stages
        t0 = time.perf_counter()
    else:
        tok = build_tokenizer(config)
        torch.manual_seed(seed)
        model = TransformerLM(config.model_config(tok.vocab_size))
        model.reset_parameters(torch.Generator().manual_seed(seed))
    model.to(device)
    start, opt_state, prev_losses, prev_seconds = 0, None, [], 0.0
    out = Path(out) if out is not None else None
    if out is not None and (out / "resume.pt").exists():
        # weights_only: tensors and plain containers, nothing that runs code when it is loaded
        state = torch.load(out / "resume.pt", map_location=device, weights_only=True)
        if state.get("config") == config.to_dict() and state.get("seed") == seed:
            model.load_state_dict(state["model"])
            start, opt_state, prev_losses = state["step"], state["opt"], state["losses"]
            prev_seconds = float(state.get("seconds", 0.0))
    losses, steps = _loop(model, tok, config, seed, weights=config.task_weights, out=out, progress=progress,
                          start_step=start, opt_state=opt_state, seconds_before=prev_seconds,
                          losses_before=prev_losses, data_offset=data_offset)
    seconds = time.perf_counter() - t0 + prev_seconds + parent_seconds
    scores = evaluate_tasks(model, tok, n_items=config.eval_items) if evaluate else {}
    if out is not None and (out / "resume.pt").exists():
        (out / "resume.pt").unlink()
    return TrainResult(model.cpu(), tok, prev_losses + losses, seconds, scores, steps, stages)


def _stage_summary(card: dict) -> dict:
    keep = ("name", "command", "train_config", "steps", "training_seconds", "final_loss", "loss_curve", "scores",
            "date")
    return {k: card.get(k) for k in keep}


def trained_stage(name: str, seed: int, *, device: str = "cpu") -> tuple[TransformerLM, BPETokenizer, dict]:
    """``(model, tokenizer, card)`` of config ``name`` for ``seed``: cached, else trained
    now and cached (a parent stage of an ``init_from`` config)."""
    from rayml.llm.checkpoint import CARD_FILE, load_checkpoint, save_checkpoint

    config = get_config(name)
    d = cache_dir(config, seed)
    if not (d / CARD_FILE).exists():
        res = train_model(config, seed, out=d, device=device)
        save_checkpoint(d, res.model, res.tokenizer, make_card(name, config, seed, res))
    return load_checkpoint(d, device=device)


def fine_tune(model: TransformerLM, tokenizer: BPETokenizer, task_weights: Mapping[str, float], *, steps: int = 200,
              lr: float = 1e-3, seed: int = 0, rows: int = 16, row_len: int = 512, warmup: int = 10,
              progress: Callable[[int, float], None] | None = None) -> TrainResult:
    """Fine-tune a copy of ``model`` on another task mixture (a task-specific variant of a base).

    ``task_weights`` maps names of ``tasks.TASKS`` or ``tasks.VARIANTS`` (e.g. MERGE^3's specialist
    endpoints: ``{"add_long": 1.0}``) to their shares.

    Returns a ``TrainResult`` whose ``model`` is a new model; the input model is left unchanged.
    """
    import copy

    cfg = TrainConfig(d_model=model.config.d_model, n_layers=model.config.n_layers, n_heads=model.config.n_heads,
                      n_kv_heads=model.config.n_kv_heads, d_ff=model.config.d_ff,
                      max_seq_len=model.config.max_seq_len, vocab_size=model.config.vocab_size, steps=steps,
                      rows=rows, row_len=min(row_len, model.config.max_seq_len), lr=lr, warmup=warmup,
                      task_weights=dict(task_weights), checkpoint_every=0)
    tuned = copy.deepcopy(model)
    t0 = time.perf_counter()
    losses, _ = _loop(tuned, tokenizer, cfg, seed, weights=cfg.task_weights, out=None, progress=progress)
    return TrainResult(tuned.cpu(), tokenizer, losses, time.perf_counter() - t0, {}, steps)


# --- rayml train NAME: a Ray task with a progress bar -------------------------------------------

def _set_priority(niceness: int) -> None:
    """Give this process the niceness of the ``rayml train`` process that launched it.

    Ray starts task workers at nice 15; a training task is one long computation the user asked
    for, and at nice 15 it runs several times slower on a machine shared with other work. Without
    the permission to raise priority (not root, no CAP_SYS_NICE) it keeps Ray's niceness.
    """
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > niceness:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except (OSError, AttributeError):
        pass


def _remote_train(name: str, config_dict: dict, seed: int, out: str | None, reporter, niceness: int = 0) -> dict:
    import io

    from safetensors.torch import save as st_save

    config = TrainConfig(**{**config_dict, "betas": tuple(config_dict["betas"])})
    _set_priority(niceness)
    last = [0.0]

    def progress(step, loss):
        now = time.time()
        if reporter is not None and (now - last[0] > 1.0 or step == config.steps):
            last[0] = now
            reporter.update.remote(step, loss)

    res = train_model(config, seed, out=out, progress=progress)
    card = make_card(name, config, seed, res)
    if out is not None:  # the checkpoint is written where the task runs
        card = save_checkpoint(out, res.model, res.tokenizer, card)
    buf = io.BytesIO()
    buf.write(st_save({k: v.contiguous() for k, v in res.model.state_dict().items()}))
    return {"card": card, "weights": buf.getvalue(), "tokenizer": res.tokenizer.to_json()}


def make_card(name: str, config: TrainConfig, seed: int, res: TrainResult) -> dict:
    """The card of a finished run: command, seed, recipe, data mixture, time, loss curve, scores."""
    import platform

    tail = res.losses[-20:]
    return {
        "name": name,
        "command": f"rayml train {name} --seed {seed}",
        "seed": seed,
        "train_config": config.to_dict(),
        "data_recipe": {
            "tasks": {k: _tasks.get_task(k).description for k in config.task_weights},
            "mixture": config.task_weights,
            "packing": f"{config.rows} rows x {config.row_len} tokens per step, loss on answer tokens only",
            "held_out": "evaluation items use the test split (held-out addition pairs, 8-document retrieval)",
        },
        "training_seconds": round(res.seconds, 1),
        "steps": res.steps,
        "stages": res.stages,
        "final_loss": float(np.mean(tail)) if tail else None,
        "loss_curve": [round(float(np.mean(res.losses[i:i + 25])), 4) for i in range(0, len(res.losses), 25)],
        "scores": res.scores,
        "eval_items_per_task": config.eval_items,
        "machine": {"torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
                    "device": "cuda" if torch.cuda.is_available() else "cpu", "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def train(name: str, *, seed: int = 0, out: str | None = None, overrides: Mapping[str, Any] | None = None) -> dict:
    """Train config ``name`` as one Ray task and return its card (``rayml train NAME``).

    Args:
        name: a key of ``CONFIGS``.
        seed: initialisation and data seed.
        out: checkpoint directory (default: the cache ``~/.cache/rayml/models/<config-hash>/``).
            Resumable checkpoints are written there during training and an interrupted run resumes.
        overrides: ``TrainConfig`` fields to change.

    The task asks ``num_gpus=1`` when the connected cluster has GPUs (then trains on CUDA), else
    all the CPUs of one node up to ``max(1, config.threads)``, and runs at the niceness of the
    calling process where permitted (Ray's workers otherwise run at nice 15). Ray must be
    connected (``rayml.runtime.connect``).
    """
    import ray

    from rayml import runtime

    config = get_config(name, overrides)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    out = str(Path(out).resolve()) if out is not None else str(cache_dir(config, seed))
    info = runtime.cluster_info() if runtime.is_connected() else runtime.connect()
    opts = {"num_gpus": 1} if info.get("gpus", 0) > 0 else {"num_cpus": max(1, min(info.get("cpus", 1), config.threads or 1))}

    @ray.remote(num_cpus=0)
    class _Reporter:
        def __init__(self):
            self.step, self.loss = 0, float("nan")

        def update(self, step, loss):
            self.step, self.loss = step, loss

        def get(self):
            return self.step, self.loss

    reporter = _Reporter.remote()
    task = ray.remote(max_retries=0, **opts)(_remote_train)
    niceness = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0
    ref = task.remote(name, config.to_dict(), seed, out, reporter, niceness)
    bar = runtime.progress_bar(config.steps, f"train {name}")
    while True:
        ready, _ = ray.wait([ref], timeout=2.0)
        step, loss = ray.get(reporter.get.remote())
        bar.set_postfix(loss=f"{loss:.3f}")
        bar.update(step - bar.n)
        if ready:
            break
    bar.close()
    result = ray.get(ref)
    ray.kill(reporter)
    card = result["card"]
    if not (Path(out) / "card.json").exists():  # trained on another node: write the returned files here
        from safetensors.torch import load as st_load
        from tokenizers import Tokenizer as HFTokenizer

        cfg = config.model_config(card["model_config"]["vocab_size"] if "model_config" in card else config.vocab_size)
        model = TransformerLM(cfg)
        model.load_state_dict(st_load(result["weights"]))
        card = save_checkpoint(out, model, BPETokenizer(HFTokenizer.from_str(result["tokenizer"])), card)
    card["path"] = out
    return card
