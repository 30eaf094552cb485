"""Grammar-constrained decoding in generation loops: transformers, the embedded engine, vLLM.

The ZapFormat engine ("Earley-Driven Dynamic Pruning for Efficient Structured Decoding", ICML 2025;
``rayml.decoding``) computes, per sequence, the int32 bitmask ``[batch, ceil(V/32)]`` of the
tokens that keep the text a prefix of a sentence. This module plugs it into decoding loops; it uses
only the matcher's public API (``fill_next_token_bitmask``, ``accept_token``, ``rollback``,
``is_terminated``, ``reset``):

* **Specs** (one format everywhere: the Serve app's ``response_format`` and vLLM's
  ``SamplingParams(extra_args={"zapformat": spec})``): ``{"type": "json_schema", "json_schema":
  SCHEMA}`` (or OpenAI's ``{"name": ..., "schema": SCHEMA}`` wrapper), ``{"type": "json_object"}``
  (any JSON), ``{"type": "regex", "regex": PATTERN}``, ``{"type": "grammar", "grammar": EBNF}``;
  ``normalize_spec`` validates the shape, ``build_grammar`` runs the front-end under
  ``GrammarLimits`` (size, rules, DFA states), ``GrammarCache`` keeps compiled grammars (LRU) and
  can compile in a child process with a time and memory limit (``compile_worker``).
* ``BatchGrammarState``: one matcher per batch row (``None``: unconstrained), advanced by the
  tokens generated since the last step, and ``mask_logits`` setting disallowed logits to ``-inf``
  (rows that have accepted EOS allow EOS only, so samplers never see an all ``-inf`` row).
* ``HFGrammarLogitsProcessor``: a ``transformers.LogitsProcessor`` for ``model.generate``.
* ``EmbeddedGrammarProcessor`` and ``constrained_generate``: the hook ``fn(tokens, logits)`` of
  ``rayml.llm.generation.generate`` (no change to the loop is needed) and a convenience wrapper.
* ``ZapFormatLogitsProcessor``: a vLLM custom logits processor (optional, imported lazily),
  registered through the ``vllm.logits_processors`` entry point. vLLM has two interfaces: the V1
  model runner's ``vllm.v1.sample.logits_processor.LogitsProcessor`` (``__init__(vllm_config,
  device, is_pin_memory)``, ``update_state(BatchUpdate)``, ``apply(logits)``,
  ``is_argmax_invariant``; vLLM <= 0.33) and Model Runner V2's
  ``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor`` (``__init__(vllm_config,
  req_states)``, ``add_request(slot, params)``, ``apply(logits, ctx)``; vLLM >= 0.32, the only one
  in 0.34). Both loaders read the same entry-point group and each rejects classes that do not
  subclass its own base, so the class is built at import time as a subclass of every base the
  installed vLLM has and dispatches on the call signature.

Examples:
    >>> from rayml.decoding import byte_vocabulary
    >>> cache = GrammarCache(byte_vocabulary())
    >>> st = BatchGrammarState([cache.get({"type": "regex", "regex": "[ab]c"})])
    >>> st.advance([[ord("a")]]); st.allowed(0).tolist()
    [99]

Assumed: constrained JSON is compact (no optional whitespace), as ``compile_json_schema``'s
default; a sequence cut by the token budget is an incomplete prefix (``finished`` is False), as in
vLLM and xgrammar.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rayml.decoding import native
from rayml.decoding.matcher import (CompiledGrammar, GrammarMatcher, MatcherConfig, TokenIndex,
                                       allocate_token_bitmask, bitmask_to_bool)
from rayml.decoding.spec import (GrammarCompileFailed, GrammarError, GrammarLimits, GrammarSpec, GrammarTooComplex,
                                 build_grammar, normalize_spec)
from rayml.decoding.vocab import Vocabulary

__all__ = ["GrammarError", "GrammarTooComplex", "GrammarCompileFailed", "GrammarLimits", "GrammarSpec",
           "normalize_spec", "build_grammar", "GrammarCache", "compiled_nbytes", "vocabulary_from_tokenizer", "vocabulary_from_hf", "BatchGrammarState",
           "apply_bitmask_", "EmbeddedGrammarProcessor", "ConstrainedOutput", "constrained_generate",
           "make_vllm_logits_processor", "EXTRA_ARGS_KEY"]
# Also (lazy, module ``__getattr__``; not in ``__all__`` so that ``import *`` needs neither package):
# ``HFGrammarLogitsProcessor`` (transformers) and ``ZapFormatLogitsProcessor`` (vLLM).

EXTRA_ARGS_KEY = "zapformat"
@dataclass(frozen=True)
class _Failure:
    kind: type
    message: str


_FAILURE_BYTES = 256  # what a cached error is charged against the byte cap


def compiled_nbytes(compiled: CompiledGrammar) -> int:
    """Estimated memory of a compiled grammar: the bytes of the numpy arrays it holds (the
    terminals' DFAs, the Earley engine's tables, the mask / terminal caches filled so far), each array
    counted once, plus what the compiled Earley engine reports it holds; the shared ``TokenIndex`` is not counted (every grammar of the cache shares it).
    Python objects other than arrays (production tuples, dict slots) are charged 64 bytes each."""
    seen: set = set()
    skip = (TokenIndex, MatcherConfig, type, str, bytes, int, float, bool, type(None))
    total = 0
    stack = [(compiled, 0)]
    while stack:
        obj, depth = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            base = obj.base if isinstance(obj.base, np.ndarray) else None
            if base is not None:
                stack.append((base, depth))
            else:
                total += obj.nbytes
            continue
        total += 64
        if hasattr(obj, "native_nbytes"):  # the compiled Earley engine's memory, invisible to Python
            total += obj.native_nbytes()
        if depth >= 8:
            continue
        if isinstance(obj, dict):
            children = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children = list(obj)
        else:
            children = list(getattr(obj, "__dict__", {}).values())
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    children.append(getattr(obj, slot))
        stack.extend((c, depth + 1) for c in children)
    return total


class GrammarCache:
    """Compiled grammars for one vocabulary, kept across requests (LRU, thread-safe).

    Args:
        vocab: a ``Vocabulary`` or a ``TokenIndex`` (then its ``vocab_size`` is the logits width).
        vocab_size: the logits width when it exceeds the vocabulary (padded embedding tables).
        limits: ``GrammarLimits``.
        capacity: compiled grammars kept.
        max_bytes: cap on the estimated bytes of the grammars kept (``compiled_nbytes``, re-estimated
            at each insertion since the grammars' own caches grow with use); least recently used
            grammars are evicted past it (the newest is always kept). ``None``: no cap.
        isolate: compile in child processes (``IsolatedCompiler``: time and memory limits enforced; a
            crash or a timeout kills the child, never the caller).
        compile_workers: compiling child processes when ``isolate``.
        config: the engine switches (``MatcherConfig``).
    """

    def __init__(self, vocab, *, vocab_size: int | None = None, limits: GrammarLimits = GrammarLimits(),
                 capacity: int = 64, max_bytes: int | None = 512 * 2**20, isolate: bool = False,
                 compile_workers: int = 2, config: MatcherConfig = MatcherConfig()):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
            raise ValueError(f"max_bytes must be an int >= 1 or None, got {max_bytes!r}")
        if not isinstance(limits, GrammarLimits):
            raise TypeError(f"limits must be a GrammarLimits, got {type(limits).__name__}")
        self.index = vocab if isinstance(vocab, TokenIndex) else TokenIndex(vocab, vocab_size)
        self.limits, self.capacity, self.max_bytes, self.config = limits, capacity, max_bytes, config
        self._lru: OrderedDict = OrderedDict()
        self._sizes: dict = {}
        self._lock = threading.Lock()
        self._building: dict = {}
        self._compiler = None
        if isolate:
            from rayml.decoding.compile_worker import IsolatedCompiler

            self._compiler = IsolatedCompiler(compile_workers)
            self._compiler.start()
        self.stats = {"hits": 0, "misses": 0, "errors": 0, "evicted": 0}

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        """Estimated bytes of the grammars kept (as of their last estimate)."""
        with self._lock:
            return sum(self._sizes.values())

    def get(self, spec) -> CompiledGrammar | None:
        """The compiled grammar of ``spec`` (a spec dict or ``GrammarSpec``; ``None`` stays
        unconstrained), from the cache or compiled now. Concurrent misses on one spec compile once;
        a spec that is invalid or over a size limit (``GrammarError`` / ``GrammarTooComplex``) is cached
        as its error, so a repeated over-limit grammar is refused without compiling it again; a
        ``GrammarCompileFailed`` (time or memory limit, crash, busy compiler) is not cached."""
        spec = normalize_spec(spec) if spec is not None else None
        if spec is None:
            return None
        while True:
            with self._lock:
                hit = self._lru.get(spec)
                if hit is not None:
                    self._lru.move_to_end(spec)
                    self.stats["hits"] += 1
                    if isinstance(hit, _Failure):
                        raise hit.kind(hit.message)
                    return hit
                pending = self._building.get(spec)
                if pending is None:
                    pending = self._building[spec] = threading.Event()
                    self.stats["misses"] += 1
                    break
            pending.wait()
        entry = None
        try:
            grammar = self._compiler.compile(spec, self.limits) if self._compiler else build_grammar(spec, self.limits)
            entry = CompiledGrammar(grammar, self.index, self.config)
            return entry
        except GrammarCompileFailed:
            raise
        except (GrammarError, GrammarTooComplex) as exc:
            entry = _Failure(type(exc), str(exc))
            raise
        finally:
            sizes = {}
            if self.max_bytes is not None and entry is not None:  # estimated outside the lock
                with self._lock:
                    kept = list(self._lru.items())
                sizes = {k: (_FAILURE_BYTES if isinstance(v, _Failure) else compiled_nbytes(v)) for k, v in kept}
                sizes[spec] = _FAILURE_BYTES if isinstance(entry, _Failure) else compiled_nbytes(entry)
            with self._lock:
                if entry is None or isinstance(entry, _Failure):
                    self.stats["errors"] += 1
                if entry is not None:
                    self._lru[spec] = entry
                    for k in self._lru:
                        self._sizes[k] = sizes.get(k, self._sizes.get(k, _FAILURE_BYTES))
                    self._evict(spec)
                self._building.pop(spec).set()

    def _evict(self, newest) -> None:
        """Drop least recently used entries past ``capacity`` or ``max_bytes`` (under the lock)."""
        total = sum(self._sizes.values())
        while len(self._lru) > 1 and (len(self._lru) > self.capacity
                                      or (self.max_bytes is not None and total > self.max_bytes)):
            key = next(iter(self._lru))
            if key == newest:
                self._lru.move_to_end(key)
                continue
            self._lru.pop(key)
            total -= self._sizes.pop(key, 0)
            self.stats["evicted"] += 1

    def close(self) -> None:
        """Stop the compiling child processes (if any)."""
        if self._compiler is not None:
            self._compiler.close()


# ------------------------------------------------------------------------------------------------
# vocabularies of tokenizers


def vocabulary_from_tokenizer(tok, name: str | None = None) -> Vocabulary:
    """The ``Vocabulary`` of a ``rayml.llm.tokenizer.Tokenizer`` (exact ``token_bytes``): tokens with
    no bytes and the BOS / PAD / EOS ids are special, EOS ends a sentence."""
    table = [bytes(b) for b in tok.byte_table()]
    special = {i for i, b in enumerate(table) if not b}
    special |= {int(i) for i in (tok.bos_id, tok.pad_id, tok.eos_id) if i is not None and 0 <= i < len(table)}
    return Vocabulary(tuple(table), (int(tok.eos_id),), frozenset(special), name or type(tok).__name__)


def vocabulary_from_hf(hf_tok, name: str | None = None) -> Vocabulary:
    """The ``Vocabulary`` of a ``transformers`` tokenizer: byte-level BPE pieces (GPT-2 alphabet) are
    mapped back to bytes; SentencePiece pieces have ``\\u2581`` as a space and ``<0xNN>`` byte
    fallbacks. Special / added control tokens are special.

    Assumed: the kind is read from the fast tokenizer's decoder (``ByteLevel`` -> byte-level, else
    SentencePiece conventions), as xgrammar's ``TokenizerInfo.from_huggingface`` does.
    """
    from rayml.llm.tokenizer import _byte_decoder

    n = len(hf_tok)
    pieces = hf_tok.convert_ids_to_tokens(list(range(n)))
    byte_level = False
    backend = getattr(hf_tok, "backend_tokenizer", None)
    if backend is not None:
        dec = json.loads(backend.to_str()).get("decoder") or {}
        kinds = [dec.get("type")] + [d.get("type") for d in dec.get("decoders", []) or []]
        byte_level = "ByteLevel" in kinds
    special = set(int(i) for i in getattr(hf_tok, "all_special_ids", []) or [])
    for tid, added in (getattr(hf_tok, "added_tokens_decoder", {}) or {}).items():
        if getattr(added, "special", False):
            special.add(int(tid))
    bd = _byte_decoder()
    table = []
    for i, p in enumerate(pieces):
        if p is None or i in special:
            table.append(b"")
        elif byte_level and all(c in bd for c in p):
            table.append(bytes(bd[c] for c in p))
        elif not byte_level and len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            table.append(bytes([int(p[3:5], 16)]))
        else:
            table.append(p.replace("\u2581", " ").encode("utf-8"))
    eos = hf_tok.eos_token_id
    eos_ids = (int(eos),) if eos is not None else ()
    special |= set(eos_ids)
    return Vocabulary(tuple(table), eos_ids, frozenset(special), name or getattr(hf_tok, "name_or_path", "hf"))


# ------------------------------------------------------------------------------------------------
# the per-batch state and the mask on torch logits


def apply_bitmask_(logits, bitmask, rows=None):
    """Set ``logits[r, t] = -inf`` where bit ``t`` of ``bitmask[r]`` is 0, in place (torch).

    ``bitmask`` is int32 ``[batch, W]`` (numpy or torch); tokens ``>= 32 W`` are disallowed;
    ``rows`` restricts the update to those row indices of ``logits`` (then ``bitmask`` has one row per
    entry of ``rows``)."""
    import torch

    if (logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.dim() == 2
            and logits.is_contiguous() and native.AVAILABLE):
        # one pass in C over the rows (vLLM-CPU's per-step path): the torch bit expansion below
        # allocates [batch, W, 32] int32 and costs about 2 ms a step at batch 8 on a 49k vocabulary
        bits = np.ascontiguousarray(bitmask.cpu().numpy() if isinstance(bitmask, torch.Tensor) else bitmask,
                                    dtype=np.int32)
        idx = np.arange(bits.shape[0], dtype=np.int64) if rows is None else np.asarray(list(rows), np.int64)
        native.core.mask_logits(logits.detach().numpy(), bits, idx)
        return logits
    bm = torch.as_tensor(np.ascontiguousarray(bitmask) if isinstance(bitmask, np.ndarray) else bitmask)
    bm = bm.to(device=logits.device)
    shifts = torch.arange(32, device=logits.device, dtype=torch.int32)
    allowed = ((bm.unsqueeze(-1) >> shifts) & 1).bool().reshape(bm.shape[0], -1)
    v = logits.shape[-1]
    if allowed.shape[1] < v:
        allowed = torch.cat([allowed, allowed.new_zeros((allowed.shape[0], v - allowed.shape[1]))], dim=1)
    allowed = allowed[:, :v]
    if rows is None:
        logits.masked_fill_(~allowed, float("-inf"))
    else:
        idx = torch.as_tensor(list(rows), dtype=torch.long, device=logits.device)
        sub = logits.index_select(0, idx).masked_fill_(~allowed, float("-inf"))
        logits.index_copy_(0, idx, sub)
    return logits


class BatchGrammarState:
    """One matcher per batch row (``None``: the row is not constrained).

    ``advance(new_tokens)`` accepts each row's newly generated tokens (tokens after the row accepted
    EOS are ignored: loops pad finished rows); ``fill()`` returns the int32 bitmask of the next
    token (all ones for unconstrained rows, EOS only for finished rows); ``mask_logits`` applies it.
    A token the grammar rejects raises ``ValueError`` naming the row, unless ``on_reject="finish"``
    (then the row is treated as finished and ``rejected[row]`` is set).
    """

    def __init__(self, compiled: Sequence[CompiledGrammar | None], *, on_reject: str = "raise"):
        if on_reject not in ("raise", "finish"):
            raise ValueError(f"on_reject must be 'raise' or 'finish', got {on_reject!r}")
        compiled = list(compiled)
        if not compiled:
            raise ValueError("compiled must hold at least one row")
        sizes = {c.index.vocab_size for c in compiled if c is not None}
        if len(sizes) > 1:
            raise ValueError(f"all grammars must share one vocabulary size, got {sorted(sizes)}")
        self.vocab_size = sizes.pop() if sizes else None
        self.matchers = [GrammarMatcher(c) if c is not None else None for c in compiled]
        self.eos = [tuple(c.index.vocab.eos_ids) if c is not None else () for c in compiled]
        self.on_reject = on_reject
        self.rejected = [False] * len(compiled)
        self.n_words = (self.vocab_size + 31) // 32 if self.vocab_size else 1
        self.bitmask = allocate_token_bitmask(len(compiled), self.vocab_size or 32)

    def __len__(self) -> int:
        return len(self.matchers)

    @property
    def constrained(self) -> list[bool]:
        return [m is not None for m in self.matchers]

    def finished(self, row: int) -> bool:
        """The row accepted EOS (or was rejected with ``on_reject="finish"``)."""
        m = self.matchers[row]
        return m is not None and (self.rejected[row] or m.is_terminated())

    def advance(self, new_tokens: Sequence[Sequence[int]]) -> None:
        """Accept each row's new tokens."""
        if len(new_tokens) != len(self.matchers):
            raise ValueError(f"new_tokens must have {len(self.matchers)} rows, got {len(new_tokens)}")
        for i, (m, toks) in enumerate(zip(self.matchers, new_tokens)):
            if m is None:
                continue
            for t in toks:
                if self.finished(i):
                    break
                if not m.accept_token(int(t)):
                    if self.on_reject == "finish":
                        self.rejected[i] = True
                        break
                    raise ValueError(f"row {i}: token {int(t)} is not allowed by the grammar")

    def fill(self) -> np.ndarray:
        """The int32 bitmask ``[batch, W]`` of the next token."""
        bm = self.bitmask
        for i, m in enumerate(self.matchers):
            if m is None:
                bm[i] = -1
            elif self.finished(i):
                bm[i] = 0 if self.eos[i] else -1  # without an EOS id the row is left free (its tokens are cut)
                for e in self.eos[i]:
                    bm[i, e >> 5] |= np.array(1 << (e & 31), np.uint32).view(np.int32)
            else:
                m.fill_next_token_bitmask(bm, i)
        return bm

    def allowed(self, row: int) -> np.ndarray:
        """Token ids allowed next in ``row`` (convenience)."""
        return np.flatnonzero(bitmask_to_bool(self.fill()[row:row + 1], self.vocab_size or 32)[0])

    def mask_logits(self, logits):
        """Mask a torch ``[batch, V]`` logits tensor in place with ``fill()`` and return it."""
        if logits.shape[0] != len(self.matchers):
            raise ValueError(f"logits must have {len(self.matchers)} rows, got {logits.shape[0]}")
        if self.vocab_size is not None and logits.shape[-1] < self.vocab_size:
            raise ValueError(f"logits have {logits.shape[-1]} columns, the vocabulary {self.vocab_size}")
        rows = [i for i, m in enumerate(self.matchers) if m is not None]
        if rows:
            apply_bitmask_(logits, self.fill()[rows], rows)
        return logits


# ------------------------------------------------------------------------------------------------
# the embedded engine (rayml.llm.generation) and transformers


class EmbeddedGrammarProcessor:
    """The ``fn(tokens, logits) -> logits`` hook of ``rayml.llm.generation.generate``: ``tokens`` are
    the ids generated so far ``(batch, n)``, ``logits`` the next-token logits ``(batch, V)``.

    Args:
        compiled: one ``CompiledGrammar`` (or ``None``) per sequence of the batch.
        deadline: a ``time.monotonic()`` after which every unfinished row is forced to EOS
            (``timed_out`` lists them); ``None`` for no deadline.
        on_reject: see ``BatchGrammarState``.
    """

    def __init__(self, compiled: Sequence[CompiledGrammar | None], *, deadline: float | None = None,
                 on_reject: str = "raise"):
        self.state = BatchGrammarState(compiled, on_reject=on_reject)
        self.seen = 0
        self.deadline = deadline
        self.timed_out: list[int] = []

    def __call__(self, tokens, logits):
        import time

        n = tokens.shape[1]
        new = tokens[:, self.seen:n].tolist()
        self.seen = n
        self.state.advance(new)
        if self.deadline is not None and time.monotonic() > self.deadline:
            for i, m in enumerate(self.state.matchers):
                if m is not None and not self.state.finished(i):
                    self.state.rejected[i] = True
                    self.timed_out.append(i)
        return self.state.mask_logits(logits)


@dataclass
class ConstrainedOutput:
    """One constrained completion: ``text``, ``tokens`` (without EOS), ``finished`` (EOS was emitted,
    so the text is a complete sentence of the grammar unless ``timed_out``)."""

    text: str
    tokens: list
    finished: bool
    timed_out: bool = False


def constrained_generate(lm, prompts: Sequence[str], constraints, *, cache: GrammarCache | None = None,
                         max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
                         seed: int | None = None, deadline: float | None = None) -> list[ConstrainedOutput]:
    """Constrained generation with the embedded engine (KV-cache loop of ``rayml.llm.generation``).

    Args:
        lm: an ``EmbeddedLM`` (``rayml.llm.pretrained(...)``).
        prompts: the prompts (BOS is prepended).
        constraints: one spec / ``GrammarSpec`` / ``CompiledGrammar`` / ``None`` per prompt, or one
            for all.
        cache: the ``GrammarCache`` for ``lm``'s tokenizer (built when ``None``).
        max_new_tokens, temperature, top_p, seed: as ``rayml.llm.generation.generate``.
        deadline: ``time.monotonic()`` after which unfinished rows stop (``timed_out``).
    """
    from rayml.llm.generation import generate

    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must be non-empty")
    if not isinstance(constraints, (list, tuple)):
        constraints = [constraints] * len(prompts)
    if len(constraints) != len(prompts):
        raise ValueError(f"constraints must have one entry per prompt ({len(prompts)}), got {len(constraints)}")
    if cache is None:
        cache = GrammarCache(vocabulary_from_tokenizer(lm.tokenizer), vocab_size=lm.model.config.vocab_size)
    compiled = [c if (c is None or isinstance(c, CompiledGrammar)) else cache.get(c) for c in constraints]
    proc = EmbeddedGrammarProcessor(compiled, deadline=deadline)
    tok = lm.tokenizer
    ids = [tok.encode(p, bos=True) for p in prompts]
    res = generate(lm.model, ids, max_new_tokens=max_new_tokens, eos_id=tok.eos_id, pad_id=tok.pad_id,
                   temperature=temperature, top_p=top_p, seed=seed, logits_processors=[proc])
    timed, cut = set(proc.timed_out), proc.state.rejected
    return [ConstrainedOutput(tok.decode(t), list(t), bool(f) and not cut[i], i in timed)
            for i, (t, f) in enumerate(zip(res.tokens, res.finished))]


class _HFGrammarLogic:
    """``transformers`` ``LogitsProcessor`` for ``model.generate(logits_processor=[...])``.

    Args:
        compiled: one ``CompiledGrammar`` (or ``None``) per batch row, or a single one for every row
            (the batch size is then read at the first call).

    The first call records the prompt width (``input_ids.shape[1]``); later calls accept the
    columns after it. Rows must stay in place (greedy or sampling; not beam search, which reorders
    rows).
    """

    def __init__(self, compiled):
        self._compiled = compiled
        self.state: BatchGrammarState | None = None
        self.prompt_len: int | None = None
        self.seen = 0

    def __call__(self, input_ids, scores):
        if self.state is None:
            c = self._compiled
            rows = list(c) if isinstance(c, (list, tuple)) else [c] * int(input_ids.shape[0])
            self.state = BatchGrammarState(rows)
            self.prompt_len = self.seen = int(input_ids.shape[1])
        n = int(input_ids.shape[1])
        if n < self.seen:
            raise ValueError("input_ids got shorter: a processor instance serves one generate() call")
        self.state.advance(input_ids[:, self.seen:n].tolist())
        self.seen = n
        return self.state.mask_logits(scores)


# ------------------------------------------------------------------------------------------------
# vLLM


class _VLLMGrammarLogic:
    """vLLM custom logits processor (see the module docstring). Per request,
    ``SamplingParams(extra_args={"zapformat": spec})``; requests without it are left alone.

    The vocabulary is read from the engine's tokenizer (``vllm_config.model_config.tokenizer``, a
    local ``transformers`` tokenizer) unless the class sets ``vocabulary``
    (``make_vllm_logits_processor``).

    V1 interface: ``update_state`` applies removed, added, moved (the documented order); an added
    request's ``output_tok_ids`` is a live list, read at every ``apply``. V2 interface: the tokens up
    to each logits row's position are the matcher's history, the row's ``input_ids`` token (the
    newest) and, when the history is behind (resumption after preemption), the request's committed
    tokens in ``req_states.all_token_ids``; a longer history (speculative drafts) is rolled back.
    A sampled token the grammar rejects (another processor overrode the mask) ends the row with EOS
    only.
    """

    vocabulary: Vocabulary | None = None
    limits: GrammarLimits = GrammarLimits()

    # -- shared ---------------------------------------------------------------------------
    def __init__(self, vllm_config, *args):
        if len(args) == 2:  # V1: (device, is_pin_memory)
            self.interface = "v1"
            self.req_states = None
            vocab_size = None
            try:
                vocab_size = int(vllm_config.model_config.get_vocab_size())
            except Exception:  # noqa: BLE001 - config without a model (tests)
                pass
        elif len(args) == 1:  # V2: (req_states)
            self.interface = "v2"
            self.req_states = args[0]
            vocab_size = int(self.req_states.vocab_size)
        else:
            raise TypeError("expected (vllm_config, device, is_pin_memory) or (vllm_config, req_states)")
        self._vllm_config = vllm_config
        self._vocab_size = vocab_size
        self._cache: GrammarCache | None = None
        self.rows: dict = {}  # V1: batch index -> _Row; V2: request slot -> _Row

    @property
    def cache(self) -> GrammarCache:
        """The compiled grammars; the vocabulary is read on first use (the first constrained request),
        so an engine that never gets one never loads it."""
        if self._cache is None:
            vocab = self.vocabulary if self.vocabulary is not None else self._load_vocabulary(self._vllm_config)
            self._cache = GrammarCache(vocab, vocab_size=max(self._vocab_size or 0, vocab.size), limits=self.limits)
        return self._cache

    @staticmethod
    def _load_vocabulary(vllm_config) -> Vocabulary:
        import transformers

        mc = vllm_config.model_config
        tok = transformers.AutoTokenizer.from_pretrained(
            mc.tokenizer, revision=getattr(mc, "tokenizer_revision", None),
            trust_remote_code=bool(getattr(mc, "trust_remote_code", False)))
        return vocabulary_from_hf(tok)

    @classmethod
    def _spec_of(cls, params) -> GrammarSpec | None:
        extra = getattr(params, "extra_args", None) or {}
        if EXTRA_ARGS_KEY not in extra:
            return None
        return normalize_spec(extra[EXTRA_ARGS_KEY])

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Reject a bad ``extra_args["zapformat"]`` at admission (ValueError -> HTTP 400)."""
        spec = cls._spec_of(sampling_params)
        if spec is not None:
            build_grammar(spec, cls.limits)

    def is_argmax_invariant(self) -> bool:
        return False

    def _new_row(self, params, output_ids=None):
        spec = self._spec_of(params)
        if spec is None:
            return None
        return _Row(GrammarMatcher(self.cache.get(spec)), output_ids if output_ids is not None else [])

    def _mask_rows(self, logits, rows_and_states):
        """Fill and apply the masks of ``[(logits row, matcher, dead)]``."""
        if not rows_and_states:
            return logits
        bm = allocate_token_bitmask(len(rows_and_states), self.cache.vocab_size)
        for k, (_, m, dead) in enumerate(rows_and_states):
            self._fill_row(bm, k, m, dead)
        return apply_bitmask_(logits, bm, [r for r, _, _ in rows_and_states])

    # -- V1 -------------------------------------------------------------------------------
    def update_state(self, batch_update) -> None:
        if not batch_update:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for added in batch_update.added:
            index, params, output_ids = added[0], added[1], added[-1]  # (i, params, [prompt], output)
            st = self._new_row(params, output_ids)
            if st is None:
                self.rows.pop(index, None)
            else:
                self.rows[index] = st
        for a, b, direction in batch_update.moved:
            sa, sb = self.rows.pop(a, None), self.rows.pop(b, None)
            if sa is not None:
                self.rows[b] = sa
            if sb is not None and getattr(direction, "name", str(direction)).endswith("SWAP"):
                self.rows[a] = sb

    # -- V2 -------------------------------------------------------------------------------
    def add_request(self, req_idx: int, sampling_params) -> bool:
        st = self._new_row(sampling_params)
        if st is None:
            self.rows.pop(req_idx, None)
            return False
        self.rows[req_idx] = st
        return True

    def apply_staged_writes(self) -> None:
        return None

    def _sync_v2(self, st: "_Row", slot: int, pos: int, newest: int) -> None:
        """Make ``st.tokens`` the request's output tokens at positions ``[prompt_len, pos]``."""
        prompt_len = int(self.req_states.prompt_len.np[slot])
        keep = max(pos - prompt_len, 0)  # output tokens before this row's newest one
        st.truncate(keep)
        if len(st.tokens) < keep:
            lo, hi = prompt_len + len(st.tokens), prompt_len + keep
            st.extend(self.req_states.all_token_ids.gpu[slot, lo:hi].tolist())
        if pos >= prompt_len:
            st.extend([newest])

    # -- apply ----------------------------------------------------------------------------
    def apply(self, logits, ctx=None):
        if not self.rows:
            return logits
        if ctx is None:  # V1: row index == batch index; output lists are live
            todo = []
            for index, st in self.rows.items():
                if st.seen < len(st.live):
                    st.extend(st.live[st.seen:])
                    st.seen = len(st.live)
                todo.append((index, st.matcher, st.dead))
            return self._mask_rows(logits, todo)
        slots = ctx.expanded_idx_mapping.tolist()
        order = [i for i, s in enumerate(slots) if s in self.rows]
        if not order:
            return logits
        pos = ctx.pos.tolist()
        ids = ctx.input_ids.tolist()
        # rows of one request (speculative drafts) in position order, each masked at its own position
        order.sort(key=lambda i: (slots[i], pos[i]))
        bm = allocate_token_bitmask(len(order), self.cache.vocab_size)
        for k, r in enumerate(order):
            st = self.rows[slots[r]]
            self._sync_v2(st, slots[r], int(pos[r]), int(ids[r]))
            self._fill_row(bm, k, st.matcher, st.dead)
        return apply_bitmask_(logits, bm, order)

    def _fill_row(self, bm, k, m, dead):
        if dead or m.is_terminated():
            bm[k] = 0 if self.cache.index.vocab.eos_ids else -1
            for e in self.cache.index.vocab.eos_ids:
                bm[k, e >> 5] |= np.array(1 << (e & 31), np.uint32).view(np.int32)
        else:
            m.fill_next_token_bitmask(bm, k)


class _Row:
    """One constrained request in vLLM: its matcher, the output tokens fed to it (``tokens``; the
    first ``n_acc`` accepted, the next one, if ``dead``, rejected), and for V1 the live output list
    and how much of it was read."""

    __slots__ = ("matcher", "tokens", "n_acc", "dead", "live", "seen")

    def __init__(self, matcher: GrammarMatcher, live: list):
        self.matcher, self.live, self.seen = matcher, live, 0
        self.tokens: list[int] = []
        self.n_acc = 0
        self.dead = False

    def extend(self, toks) -> None:
        for t in toks:
            self.tokens.append(int(t))
            if self.dead or self.matcher.is_terminated():
                self.dead = True
                continue
            if self.matcher.accept_token(int(t)):
                self.n_acc += 1
            else:
                self.dead = True

    def truncate(self, keep: int) -> None:
        if len(self.tokens) <= keep:
            return
        if keep < self.n_acc:
            self.matcher.rollback(self.n_acc - keep)
            self.n_acc = keep
        del self.tokens[keep:]
        self.dead = len(self.tokens) > self.n_acc


def make_vllm_logits_processor(vocabulary: Vocabulary | None = None, limits: GrammarLimits | None = None,
                               name: str = "ZapFormatLogitsProcessor"):
    """A vLLM logits-processor class (subclass of every vLLM interface installed, module docstring)
    bound to ``vocabulary`` (``None``: read from the engine's tokenizer) and ``limits``. Raises
    ``ImportError`` when vLLM is not installed."""
    bases = []
    try:
        from vllm.v1.sample.logits_processor import LogitsProcessor as V1

        bases.append(V1)
    except ImportError:
        pass
    try:
        from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2

        bases.append(V2)
    except ImportError:
        pass
    if not bases:
        raise ImportError("vLLM is not installed (pip install 'rayml[vllm]'); neither "
                          "vllm.v1.sample.logits_processor nor vllm.v1.worker.gpu.sample.logits_processor imports")
    attrs = {"__module__": __name__, "__qualname__": name, "vocabulary": vocabulary,
             "limits": limits or GrammarLimits(), "__doc__": _VLLMGrammarLogic.__doc__}
    return type(bases[0])(name, (_VLLMGrammarLogic, *bases), attrs)


def __getattr__(name):  # lazy: transformers and vllm are optional
    if name == "HFGrammarLogitsProcessor":
        import transformers

        cls = type(name, (_HFGrammarLogic, transformers.LogitsProcessor),
                   {"__module__": __name__, "__qualname__": name, "__doc__": _HFGrammarLogic.__doc__})
    elif name == "ZapFormatLogitsProcessor":
        cls = make_vllm_logits_processor()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = cls
    return cls
