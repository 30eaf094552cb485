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
from typing import Sequence

import torch
import torch.nn.functional as F

from rayml.llm.model import TransformerLM, rope_cos_sin

__all__ = ["PrefixStore", "FrozenPrefixLM", "full_model"]


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
