"""Train only the top layers of a pretrained LM on cached hidden states of its frozen bottom layers.

An exact speed-up for DPO with LoRA adapters on the top ``n_top`` blocks only (what the Selective DPO
experiment does on SmolLM2-135M on a CPU): the frozen bottom blocks compute the same hidden states
for a sequence at every step, so they are computed once per sequence (``PrefixStore``, no gradient)
and only the top blocks, the final norm and the LM head run in each training step.
``FrozenPrefixLM`` is a drop-in ``TransformerLM`` for ``rayml.alignment.dpo`` (``train_dpo``,
``per_example_loss``, ``add_lora`` and ``merge_lora`` work on it unchanged); ``full_model`` gives
the whole model (the shared bottom blocks and these top blocks) for generation.

How a row is found. The trainer calls the model on right-padded rows ``prompt + response`` (the last
column dropped). A row's key is the row without its trailing pad tokens; its bottom hidden states
are computed alone (batch of one, causal attention: positions never see the padding) and cached,
so a row's values depend on its tokens only, never on the batch or the order of earlier calls
(records are identical for 1 and 2 workers). Positions past the key get zero hidden states: they
are padding, or (when the pad token is also the end-of-turn token that ends every response) the
last response token, whose output predicts nothing the DPO loss reads. ``register`` records each
pair's prompt length; for a registered row the LM head runs only on the positions that predict
response tokens (the others' logits are 0: the trainer masks them out).

Examples:
    >>> import torch
    >>> from rayml.llm.model import ModelConfig, TransformerLM
    >>> torch.manual_seed(0) and None
    >>> lm = TransformerLM(ModelConfig(vocab_size=32, d_model=16, n_layers=3, n_heads=2, n_kv_heads=2,
    ...                                d_ff=32, max_seq_len=64))
    >>> top = FrozenPrefixLM(lm, 1, pad_id=0)
    >>> ids = torch.tensor([[3, 4, 5, 6]])
    >>> bool(torch.allclose(top(ids), lm(ids), atol=1e-5))
    True
"""

from __future__ import annotations

import copy
import weakref
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rayml.llm.generation import generate
from rayml.llm.model import KVCache, TransformerLM, apply_rope, rope_cos_sin

__all__ = ["PrefixStore", "FrozenPrefixLM", "full_model", "TopBlocksLM", "shared_prompt_logps", "generate_top",
           "bottom_states", "install_states"]


class PrefixStore:
    """The frozen base model and the cache of its bottom blocks' hidden states, one per key.

    Shared by every copy of a ``FrozenPrefixLM`` (``copy.deepcopy`` returns the store itself), so the
    policy, its frozen reference and every trained copy read one cache.
    """

    def __init__(self, model: TransformerLM, split: int, pad_id: int):
        self.model, self.split, self.pad_id = model, int(split), int(pad_id)
        self.hidden: dict[tuple, torch.Tensor] = {}
        self.prompt_len: dict[tuple, int] = {}

    def __deepcopy__(self, memo):
        return self

    def key(self, row: Sequence[int]) -> tuple:
        """The row without its trailing pad tokens."""
        row = [int(t) for t in row]
        end = len(row)
        while end > 0 and row[end - 1] == self.pad_id:
            end -= 1
        return tuple(row[:end])

    def register(self, pairs) -> None:
        """Record the prompt length of each pair's two rows (``TokenPair``s), so that the LM head runs
        only where a response token is predicted. A row may end with at most one pad-valued token."""
        for p in pairs:
            for resp in (p.chosen, p.rejected):
                seq = tuple(p.prompt) + tuple(resp)
                k = self.key(seq)
                if len(k) < len(seq) - 1 or len(k) < len(p.prompt):
                    raise ValueError("a response may end with at most one pad-valued token, and a prompt with none")
                self.prompt_len[k] = min(self.prompt_len.get(k, len(p.prompt)), len(p.prompt))

    @torch.no_grad()
    def states(self, key: tuple) -> torch.Tensor:
        """(len(key), d) hidden states after the bottom ``split`` blocks (computed once per key)."""
        h = self.hidden.get(key)
        if h is None:
            m = self.model
            ids = torch.as_tensor([list(key)], dtype=torch.long, device=m.embed_tokens.weight.device)
            x = m.embed_tokens(ids)
            cos, sin = rope_cos_sin(torch.arange(len(key), device=ids.device)[None], m.config.head_dim,
                                    m.config.rope_theta, x.dtype)
            for layer in m.layers[: self.split]:
                x = layer(x, cos, sin, None, None, None)
            h = self.hidden[key] = x[0]
        return h


class FrozenPrefixLM(torch.nn.Module):
    """The top ``n_top`` blocks of ``model`` (copies, trainable), its final norm and LM head, reading
    the bottom blocks' hidden states from a ``PrefixStore``."""

    def __init__(self, model: TransformerLM, n_top: int, *, pad_id: int, store: PrefixStore | None = None):
        super().__init__()
        n = len(model.layers)
        if isinstance(n_top, bool) or not isinstance(n_top, int) or not 1 <= n_top <= n:
            raise ValueError(f"n_top must be an integer in 1..{n}, got {n_top!r}")
        self.config = model.config
        self.store = store or PrefixStore(model, n - n_top, pad_id)
        if self.store.model is not model or self.store.split != n - n_top:
            raise ValueError("store belongs to another model or split")
        self.layers = torch.nn.ModuleList(copy.deepcopy(list(model.layers[n - n_top:])))
        self.norm = copy.deepcopy(model.norm)

    @property
    def embed_tokens(self):
        """The base model's (frozen, shared) token embedding: also the tied LM head."""
        return self.store.model.embed_tokens

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.store.model.lm_head(self.norm(x))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab) of right-padded rows (no cache, positions 0..seq-1)."""
        b, s = input_ids.shape
        keys = [self.store.key(r) for r in input_ids.tolist()]
        d = self.config.d_model
        dev = input_ids.device
        x = torch.zeros(b, s, d, dtype=self.embed_tokens.weight.dtype, device=dev)
        for i, k in enumerate(keys):
            if k:
                x[i, : len(k)] = self.store.states(k)
        cos, sin = rope_cos_sin(torch.arange(s, device=dev)[None].expand(b, -1), self.config.head_dim,
                                self.config.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, None, None, None)
        if not all(k in self.store.prompt_len for k in keys):
            return self.head(x)
        need = torch.zeros(b, s, dtype=torch.bool, device=dev)
        for i, k in enumerate(keys):  # outputs that predict a response token: prompt_len - 1 .. len(key) - 1
            need[i, self.store.prompt_len[k] - 1: len(k)] = True
        out = torch.zeros(b, s, self.config.vocab_size, dtype=x.dtype, device=dev)
        out[need] = self.head(x[need])
        return out


    def response_logps(self, prompts, responses, *, pad_id: int) -> torch.Tensor:
        """``sum_t log p(response_t | prompt, response_<t)`` per row (what ``dpo.sequence_logps`` asks
        for): the top blocks on the padded rows, the LM head and the softmax only where a response
        token is predicted."""
        rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
        b, s = len(rows), max(len(r) for r in rows)
        dev = self.embed_tokens.weight.device
        x = torch.zeros(b, s, self.config.d_model, dtype=self.embed_tokens.weight.dtype, device=dev)
        at, nxt, owner = [], [], []
        for i, (p, r) in enumerate(zip(prompts, responses)):
            k = self.store.key(rows[i])
            if len(k) < len(rows[i]) - 1:
                raise ValueError("a response may end with at most one pad-valued token")
            x[i, : len(k)] = self.store.states(k)
            for t in range(len(p) - 1, len(p) + len(r) - 1):
                at.append(i * s + t)
                nxt.append(rows[i][t + 1])
                owner.append(i)
        cos, sin = rope_cos_sin(torch.arange(s, device=dev)[None].expand(b, -1), self.config.head_dim,
                                self.config.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, None, None, None)
        h = x.reshape(b * s, -1)[torch.as_tensor(at, device=dev)]
        logp = torch.log_softmax(self.head(h).float(), dim=-1).gather(-1, torch.as_tensor(nxt, device=dev)[:, None])
        return torch.zeros(b, dtype=logp.dtype, device=dev).index_add(0, torch.as_tensor(owner, device=dev), logp[:, 0])


def full_model(top: FrozenPrefixLM) -> TransformerLM:
    """A ``TransformerLM`` view for generation: the store's bottom blocks, then ``top``'s blocks (LoRA
    adapters included). It shares every tensor with both; nothing is copied."""
    base = top.store.model
    out = copy.copy(base)
    out._modules = dict(base._modules)
    out.layers = torch.nn.ModuleList(list(base.layers[: top.store.split]) + list(top.layers))
    out.norm = top.norm
    out.hooks = []
    return out.eval()


# --- the same numbers with less work: the Selective DPO experiment's SmolLM2 path ---------------

_START_LOGPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per PrefixStore: (prompt, response) -> log p


class TopBlocksLM(FrozenPrefixLM):
    """The top-blocks policy of the SmolLM2 runs, computing ``response_logps`` with less work and
    the same numbers (up to float rounding):

    * the unchanged starting policy (every parameter frozen, LoRA ``B`` still 0, the other top
      weights equal to the start's: DPO's frozen reference in every run) computes each row once
      per worker, alone (so the value does not depend on the batch that asked first), and reads
      it back in every later step and run;
    * otherwise a batch's distinct prompts run through the top blocks once (their keys and values
      kept in a ``KVCache``, gradients flowing through it), and each response (chosen and
      rejected) attends to its prompt's entries: the prompt, most of every row, is not computed
      twice per pair.
    """
    def _is_start(self) -> bool:
        if any(p.requires_grad for p in self.parameters()):  # first: a model being trained is never the start
            return False
        if getattr(self, "_start_ok", None) == id(self):
            return True
        mine = {n.replace(".base.", "."): p for n, p in self.named_parameters() if ".lora_" not in n}
        ref = {f"layers.{n}": p for n, p in torch.nn.ModuleList(
            self.store.model.layers[self.store.split:]).named_parameters()}
        ref.update({f"norm.{n}": p for n, p in self.store.model.norm.named_parameters()})
        lora_zero = all(not bool(p.any()) for n, p in self.named_parameters() if n.endswith("lora_B"))
        ok = lora_zero and mine.keys() == ref.keys() and all(torch.equal(mine[k], ref[k]) for k in mine)
        if ok:
            self._start_ok = id(self)
        return ok

    def response_logps(self, prompts, responses, *, pad_id: int):
        if not self._is_start():
            return shared_prompt_logps(self, prompts, responses)
        cache = _START_LOGPS.setdefault(self.store, {})
        out = []
        for p, r in zip(prompts, responses):
            key = (tuple(p), tuple(r))
            if key not in cache:
                with torch.no_grad():
                    cache[key] = FrozenPrefixLM.response_logps(self, [p], [r], pad_id=pad_id)[0]
            out.append(cache[key])
        return torch.stack(out)


def _run_top(layers, x, positions, valid, slots, cache, last=None):
    """``layers`` (the top blocks) on ``x`` with ``cache`` (keys and values written at ``slots``). With
    ``last`` (one position per row), the final block computes its keys and values everywhere (the
    cache needs them) but its attention output and MLP only at ``last``: the other positions' outputs
    predict nothing that is read. Returns (rows, seq or 1, d)."""
    cfg = layers[0].self_attn.cfg
    cache.positions[:, slots], cache.valid[:, slots] = positions, valid
    cache.length = int(slots[-1]) + 1
    mask = TransformerLM._cache_mask(cache.positions[:, : cache.length], cache.valid[:, : cache.length], positions,
                                     slots, valid, cache.length)
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, x.dtype)
    for layer in (layers if last is None else layers[:-1]):
        x = layer(x, cos, sin, cache, slots, mask)
    if last is None:
        return x
    layer, rows = layers[-1], torch.arange(x.shape[0], device=x.device)
    attn, hd = layer.self_attn, cfg.head_dim
    b, s, _ = x.shape
    h = layer.input_layernorm(x)
    k = apply_rope(attn.k_proj(h).view(b, s, cfg.n_kv_heads, hd).transpose(1, 2), cos, sin)
    v = attn.v_proj(h).view(b, s, cfg.n_kv_heads, hd).transpose(1, 2)
    cache.write(attn.layer, slots, k, v)
    k, v = cache.read(attn.layer)
    q = attn.q_proj(h[rows, last][:, None]).view(b, 1, cfg.n_heads, hd).transpose(1, 2)
    q = apply_rope(q, cos[rows, last][:, None], sin[rows, last][:, None])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[rows, :, last][:, :, None],
                                         enable_gqa=cfg.n_heads > cfg.n_kv_heads)
    y = x[rows, last][:, None] + attn.o_proj(out.transpose(1, 2).reshape(b, 1, cfg.n_heads * hd))
    return y + layer.mlp(layer.post_attention_layernorm(y))


def shared_prompt_logps(model, prompts, responses):
    """``sum_t log p(response_t | prompt, response_<t)`` per row on a top-blocks model, each distinct
    prompt through the top blocks once: pass 1 runs the prompts (right-padded) and keeps every top
    block's keys and values (the final block's output only at the prompt's last position, which
    predicts the first response token); pass 2 runs the responses' tokens (all but the last, whose
    output predicts nothing), attending to their prompt's entries and to themselves. The bottom blocks'
    states come from the store (each row's own, as ``FrozenPrefixLM.response_logps`` reads them)."""
    store, cfg = model.store, model.config
    dev, dtype = model.embed_tokens.weight.device, model.embed_tokens.weight.dtype
    rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
    keys = [store.key(row) for row in rows]
    if any(len(k) < len(row) - 1 for k, row in zip(keys, rows)) or any(len(p) == 0 for p in prompts):
        raise ValueError("a response may end with at most one pad-valued token, and a prompt must not be empty")
    uniq: dict = {}
    owner = [uniq.setdefault(tuple(p), len(uniq)) for p in prompts]
    first: dict = {}
    for i, u in enumerate(owner):
        first.setdefault(u, i)
    plen = [len(p) for p in uniq]
    n_u, lp = len(uniq), max(plen)
    lr = max(len(r) - 1 for r in responses)  # response inputs: every response token but the last
    cache = KVCache.empty(cfg, n_u, lp + max(lr, 1), dtype=dtype, device=dev)
    xp = torch.zeros(n_u, lp, cfg.d_model, dtype=dtype, device=dev)
    for u, i in first.items():  # a prompt's bottom states: those of its first row (bottom blocks are causal)
        xp[u, : plen[u]] = store.states(keys[i])[: plen[u]]
    pos_p = torch.arange(lp, device=dev)[None].expand(n_u, -1)
    valid_p = pos_p < torch.as_tensor(plen, device=dev)[:, None]
    h = [_run_top(model.layers, xp, pos_p, valid_p, torch.arange(lp, device=dev), cache,
                  last=torch.as_tensor(plen, device=dev) - 1)[:, 0]]  # predicts each row's response token 0
    at = list(owner)  # the row of ``h`` that predicts each token
    nxt, who = [row[len(p)] for row, p in zip(rows, prompts)], list(range(len(rows)))
    if lr > 0:
        b = len(rows)
        xr = torch.zeros(b, lr, cfg.d_model, dtype=dtype, device=dev)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            if len(r) > 1:
                xr[i, : len(r) - 1] = store.states(keys[i])[len(p): len(p) + len(r) - 1]
        t = torch.arange(lr, device=dev)[None]
        pos_r = torch.as_tensor([len(p) for p in prompts], device=dev)[:, None] + t
        valid_r = t < torch.as_tensor([len(r) - 1 for r in responses], device=dev)[:, None]
        hr = _run_top(model.layers, xr, pos_r, valid_r, torch.arange(lp, lp + lr, device=dev),
                      cache.select(torch.as_tensor(owner, device=dev)))
        sel = [i * lr + j for i, r in enumerate(responses) for j in range(len(r) - 1)]
        h.append(hr.reshape(b * lr, -1)[torch.as_tensor(sel, dtype=torch.long, device=dev)])
        at += [n_u + k for k in range(len(sel))]
        nxt += [rows[i][len(p) + 1 + j] for i, (p, r) in enumerate(zip(prompts, responses)) for j in range(len(r) - 1)]
        who += [i for i, r in enumerate(responses) for _ in range(len(r) - 1)]
    logp = torch.log_softmax(model.head(torch.cat(h)).float(), dim=-1)[
        torch.as_tensor(at, device=dev), torch.as_tensor(nxt, device=dev)]
    return torch.zeros(len(rows), dtype=logp.dtype, device=dev).index_add(0, torch.as_tensor(who, device=dev), logp)


_PREFILL: dict = {}


def generate_top(policy, prompts, width: int, tok) -> list:
    """Greedy generation by a top-blocks policy (``FrozenPrefixLM``), the same tokens as ``generate`` on
    its whole model: the frozen bottom blocks' cache of the prompts is computed once per worker and
    prompt set (every run evaluates the same questions), each run computes its top blocks on those rows
    (the final block's output at the last position only), takes the first token from it, and
    ``generate`` continues from that cache."""
    store = policy.store
    key = (store, tuple(tuple(p) for p in prompts), int(width))
    if key not in _PREFILL:
        base = store.model
        b, w = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((b, w), tok.pad_id, dtype=torch.long)
        valid = torch.zeros((b, w), dtype=torch.bool)
        for i, p in enumerate(prompts):  # left padding, positions from 0 in every row (as ``generate``)
            ids[i, w - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            valid[i, w - len(p):] = True
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        slots = torch.arange(w)
        with torch.no_grad():
            cache = base.new_cache(b, capacity=w + int(width))
            cache.positions[:, :w], cache.valid[:, :w], cache.length = positions, valid, w
            mask = TransformerLM._cache_mask(positions, valid, positions, slots, valid, w)
            x = base.embed_tokens(ids)
            cos, sin = rope_cos_sin(positions, base.config.head_dim, base.config.rope_theta, x.dtype)
            for layer in base.layers[: store.split]:
                x = layer(x, cos, sin, cache, slots, mask)
        if len(_PREFILL) >= 4:
            _PREFILL.clear()
        _PREFILL[key] = (cache, x, positions, valid, slots)
    cache, x, positions, valid, slots = _PREFILL[key]
    cache = cache.clone()
    with torch.no_grad():
        h = _run_top(policy.layers, x, positions, valid, slots, cache, last=torch.full((len(prompts),), x.shape[1] - 1))
        first = policy.head(h)[:, -1].argmax(-1).tolist()
    rest = generate(full_model(policy), [[t] for t in first], max_new_tokens=int(width) - 1, eos_id=tok.eos_id,
                    pad_id=tok.pad_id, cache=cache).tokens if width > 1 else [[] for _ in first]
    return [[] if t == tok.eos_id else [t] + r for t, r in zip(first, rest)]


def bottom_states(store: PrefixStore, pairs) -> dict:
    """The frozen bottom blocks' hidden states of every training row (``PrefixStore`` keys), computed
    once on the driver and sent to the workers through the object store: each pair's prompt alone,
    then its two responses in one batch attending to the prompt's cache (the same numbers as each row
    alone, up to float rounding, with the prompt computed once instead of once per row and worker)."""
    bottom = copy.copy(store.model)  # the bottom blocks alone, no final norm (shares every tensor)
    bottom._modules = dict(store.model._modules)
    bottom.layers = torch.nn.ModuleList(list(store.model.layers[: store.split]))
    bottom.norm, bottom.hooks = torch.nn.Identity(), []
    out = {}
    with torch.no_grad():
        for p in pairs:
            keys = [store.key(tuple(p.prompt) + tuple(r)) for r in (p.chosen, p.rejected)]
            if all(k in out for k in keys):
                continue
            tails = [list(k[len(p.prompt):]) for k in keys]
            cache = bottom.new_cache(1, capacity=len(p.prompt) + max(len(t) for t in tails) + 1)
            hp = bottom(torch.as_tensor([list(p.prompt)]), cache=cache, return_hidden=True)[0]
            wt = max(len(t) for t in tails)
            ht = None
            if wt:
                ids = torch.as_tensor([t + [store.pad_id] * (wt - len(t)) for t in tails])
                valid = torch.as_tensor([[j < len(t) for j in range(wt)] for t in tails])
                ht = bottom(ids, cache=cache.select(torch.tensor([0, 0])), valid=valid, return_hidden=True)
            for i, (k, t) in enumerate(zip(keys, tails)):
                out[k] = (torch.cat([hp, ht[i, : len(t)]]) if t else hp).numpy()
    return out


def install_states(store: PrefixStore, states: dict) -> None:
    """Put ``states`` (``bottom_states`` of a run, computed on the driver) into ``store``: a run's
    states win over ones a worker computed earlier, and the cached start log-probabilities of the
    store are dropped when a state they were computed from changes, so what a worker ran before
    cannot change a record."""
    changed = False
    for k, h in states.items():
        old = store.hidden.get(k)
        if old is None or not np.array_equal(old.numpy(), h):
            store.hidden[k] = torch.from_numpy(np.array(h))
            changed = changed or old is not None
    if changed:
        _START_LOGPS.pop(store, None)
