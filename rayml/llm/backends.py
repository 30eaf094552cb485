"""One ``LM`` interface over the embedded model and over local Hugging Face causal LMs.

``LM`` is what methods program against:

* ``tokenizer`` (``rayml.llm.tokenizer.Tokenizer``), ``max_seq_len``;
* ``logits(ids)`` -> (batch, seq, vocab) next-token logits of a batch of equal-length id lists;
* ``generate(prompts, max_new_tokens=, temperature=, top_p=, seed=, logits_processors=)`` ->
  completions (text), stopping at end-of-sequence;
* ``loglik(prompts, continuations)`` -> summed log-probabilities of continuations.

``EmbeddedLM`` wraps ``TransformerLM`` (KV-cache batched generation of
``rayml.llm.generation``); ``HFLM`` wraps any local ``transformers`` causal LM directory (never
downloads: ``local_files_only``).

Examples:
    >>> lm = rayml.llm.pretrained("base")                        # doctest: +SKIP
    >>> lm.generate(["317+845="], max_new_tokens=6)               # doctest: +SKIP
    ['2611']
"""

from __future__ import annotations

import os
from typing import Sequence

import torch

from rayml.llm.generation import LogitsProcessor, generate
from rayml.llm.model import TransformerLM
from rayml.llm.tokenizer import Tokenizer

__all__ = ["LM", "EmbeddedLM", "HFLM", "HFTokenizer"]


class LM:
    """The interface shared by the backends (see the module docstring)."""

    tokenizer: Tokenizer
    max_seq_len: int

    def logits(self, ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """Next-token logits (batch, seq, vocab) of equal-length id lists."""
        raise NotImplementedError

    def generate_ids(self, prompts: Sequence[Sequence[int]], **kwargs) -> list[list[int]]:
        """Generated ids per prompt (without end-of-sequence)."""
        raise NotImplementedError

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 32, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None,
                 logits_processors: Sequence[LogitsProcessor] = ()) -> list[str]:
        """Completions of text ``prompts`` (BOS prepended), decoded to text."""
        ids = [self.tokenizer.encode(p, bos=True) for p in prompts]
        out = self.generate_ids(ids, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                seed=seed, logits_processors=logits_processors)
        return [self.tokenizer.decode(o) for o in out]

    @torch.no_grad()
    def loglik(self, prompts: Sequence[str], continuations: Sequence[str]) -> list[float]:
        """Sum of log p(continuation tokens | prompt) per pair (one sequence at a time)."""
        res = []
        for p, c in zip(prompts, continuations, strict=True):
            pi, ci = self.tokenizer.encode(p, bos=True), self.tokenizer.encode(c)
            lg = self.logits([pi + ci])[0].float().log_softmax(-1)
            idx = torch.arange(len(pi) - 1, len(pi) + len(ci) - 1)
            res.append(float(lg[idx, torch.as_tensor(ci)].sum()))
        return res


class EmbeddedLM(LM):
    """The embedded ``TransformerLM`` with its tokenizer."""

    def __init__(self, model: TransformerLM, tokenizer: Tokenizer, card: dict | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.card = card or {}
        self.max_seq_len = model.config.max_seq_len

    @torch.no_grad()
    def logits(self, ids: Sequence[Sequence[int]]) -> torch.Tensor:
        return self.model(torch.as_tensor([list(i) for i in ids], dtype=torch.long))

    def generate_ids(self, prompts, *, max_new_tokens=32, temperature=0.0, top_p=1.0, seed=None,
                     logits_processors=()) -> list[list[int]]:
        res = generate(self.model, prompts, max_new_tokens=max_new_tokens, eos_id=self.tokenizer.eos_id,
                       pad_id=self.tokenizer.pad_id, temperature=temperature, top_p=top_p, seed=seed,
                       logits_processors=logits_processors)
        return res.tokens


class HFTokenizer(Tokenizer):
    """A ``transformers`` tokenizer behind the ``Tokenizer`` interface."""

    def __init__(self, hf_tok):
        self._tok = hf_tok
        self.vocab_size = len(hf_tok)
        self.bos_id = hf_tok.bos_token_id if hf_tok.bos_token_id is not None else 0
        self.eos_id = hf_tok.eos_token_id if hf_tok.eos_token_id is not None else 0
        self.pad_id = hf_tok.pad_token_id if hf_tok.pad_token_id is not None else self.eos_id

    def encode(self, text, *, bos=False, eos=False):
        ids = self._tok.encode(text, add_special_tokens=False)
        return ([self.bos_id] if bos else []) + list(ids) + ([self.eos_id] if eos else [])

    def decode(self, ids):
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def token_bytes(self, token_id):
        return self._tok.convert_tokens_to_string([self._tok.convert_ids_to_tokens(int(token_id))]).encode("utf-8")


class HFLM(LM):
    """A local Hugging Face causal LM directory (``transformers``; nothing is downloaded).

    Args:
        path: a directory with ``config.json`` and weights (and a tokenizer, unless ``tokenizer``).
        tokenizer: a ``rayml`` ``Tokenizer`` to use instead of the directory's.
        model: an already built ``transformers`` model (``path`` then unused).
        dtype: torch dtype to load with.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, tokenizer: Tokenizer | None = None, model=None,
                 dtype=torch.float32):
        import transformers

        if model is None:
            if path is None or not os.path.isdir(path):
                raise ValueError(f"path must be an existing local model directory, got {path!r}")
            model = transformers.AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype)
        self.model = model.eval()
        if tokenizer is None:
            tokenizer = HFTokenizer(transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        self.tokenizer = tokenizer
        self.max_seq_len = int(getattr(model.config, "max_position_embeddings", 2048))

    @torch.no_grad()
    def logits(self, ids):
        return self.model(input_ids=torch.as_tensor([list(i) for i in ids], dtype=torch.long)).logits

    @torch.no_grad()
    def generate_ids(self, prompts, *, max_new_tokens=32, temperature=0.0, top_p=1.0, seed=None,
                     logits_processors=()) -> list[list[int]]:
        import transformers

        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_id
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        procs = transformers.LogitsProcessorList()
        for fn in logits_processors:
            procs.append(_HFProc(fn, width))
        if seed is not None:
            torch.manual_seed(int(seed))
        kwargs = dict(do_sample=temperature > 0, max_new_tokens=max_new_tokens, pad_token_id=pad,
                      eos_token_id=self.tokenizer.eos_id, logits_processor=procs)
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        out = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)[:, width:].tolist()
        eos = self.tokenizer.eos_id
        return [row[: row.index(eos)] if eos in row else row for row in out]


class _HFProc:
    def __init__(self, fn, width):
        self.fn, self.width = fn, width

    def __call__(self, input_ids, scores):
        return self.fn(input_ids[:, self.width:], scores)
