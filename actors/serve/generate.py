"""Ray Serve app: OpenAI-style ``/v1/completions`` on the embedded LM, batched with ``@serve.batch``.

``serve run rayml.actors.serve.generate:app`` (or ``rayml serve generate``) serves the shipped
``base`` checkpoint. ``POST <route>/v1/completions`` with a JSON body::

    {"prompt": "317+845=", "max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "seed": 0}

answers ``{"id", "object": "text_completion", "created", "model", "choices": [{"index": 0,
"text": "2611", "finish_reason": "stop" | "length", "logprobs": null}], "usage": {...}}``.
``prompt`` may also be a list of strings (one choice each). Concurrent requests are gathered by
``@serve.batch`` and generated together (one KV-cache batch per group of equal sampling
settings). Bad requests (missing prompt, wrong types, ``max_tokens`` out of ``[1, MAX_TOKENS]``,
prompt plus ``max_tokens`` over the context length, unknown fields) get a 400 naming the field;
the replica stays up. ``build(checkpoint)`` serves another checkpoint (a name or a directory).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from rayml.actors.serve.http import generate_grouped, json_body

__all__ = ["Generator", "app", "build", "parse_request", "BadRequest", "MAX_TOKENS", "MAX_PROMPTS"]

MAX_TOKENS = 512
MAX_PROMPTS = 16
_KNOWN = {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "n", "stream", "user"}


class BadRequest(ValueError):
    """A request field is missing, of the wrong type, or out of range."""


def _num(body, name, default, lo, hi, *, integer=False, lo_open=False):
    v = body.get(name, default)
    if integer:
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadRequest(f"'{name}' must be an integer, got {v!r}")
    elif isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise BadRequest(f"'{name}' must be a number, got {v!r}")
    if (v <= lo if lo_open else v < lo) or v > hi:
        raise BadRequest(f"'{name}' must be in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}")
    return v


def parse_request(body: Any, tokenizer, max_seq_len: int) -> dict:
    """Validate a completions body; returns the settings with the encoded prompts, or raises
    ``BadRequest`` naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = set(body) - _KNOWN
    if unknown:
        raise BadRequest(f"unknown fields {sorted(unknown)}")
    if "prompt" not in body:
        raise BadRequest("'prompt' is required")
    prompt = body["prompt"]
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise BadRequest("'prompt' must be a string or a non-empty list of strings")
    if len(prompts) > MAX_PROMPTS:
        raise BadRequest(f"'prompt' may hold at most {MAX_PROMPTS} strings, got {len(prompts)}")
    req = {
        "max_tokens": _num(body, "max_tokens", 16, 1, MAX_TOKENS, integer=True),
        "temperature": float(_num(body, "temperature", 1.0, 0.0, 2.0)),
        "top_p": float(_num(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)),
        "seed": body.get("seed"),
    }
    if req["seed"] is not None and (isinstance(req["seed"], bool) or not isinstance(req["seed"], int) or req["seed"] < 0):
        raise BadRequest(f"'seed' must be an integer >= 0, got {req['seed']!r}")
    if body.get("n", 1) != 1:
        raise BadRequest("'n' must be 1")
    if body.get("stream", False) is not False:
        raise BadRequest("'stream' is not supported (must be false)")
    ids = [tokenizer.encode(p, bos=True) for p in prompts]
    for i, p in enumerate(ids):
        if len(p) + req["max_tokens"] > max_seq_len:
            raise BadRequest(f"'prompt'[{i}] has {len(p)} tokens; with max_tokens {req['max_tokens']} it exceeds "
                             f"the context length {max_seq_len}")
    req["ids"] = ids
    return req


@serve.deployment(max_ongoing_requests=32, ray_actor_options={"num_cpus": 0.5})
class Generator:
    """The deployment: validates requests, batches them, generates with the KV cache."""

    def __init__(self, checkpoint: str = "base"):
        import torch

        import rayml.llm

        torch.set_num_threads(1)
        self.name = str(checkpoint)
        self.lm = rayml.llm.pretrained(checkpoint, train_if_missing=False)

    def _generate(self, group: list[dict]) -> list[list[tuple[list[int], bool]]]:
        from rayml.llm.generation import generate

        s = group[0]
        flat = [ids for r in group for ids in r["ids"]]
        n_new = max(r["max_tokens"] for r in group)
        res = generate(self.lm.model, flat, max_new_tokens=n_new, eos_id=self.lm.tokenizer.eos_id,
                       pad_id=self.lm.tokenizer.pad_id, temperature=s["temperature"], top_p=s["top_p"], seed=s["seed"])
        out, k = [], 0
        for r in group:
            choices = []
            for _ in r["ids"]:
                toks, fin = res.tokens[k], res.finished[k]
                k += 1
                stopped = fin and len(toks) < r["max_tokens"]
                choices.append((toks[: r["max_tokens"]], stopped))
            out.append(choices)
        return out

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.02)
    async def _batched(self, reqs: list[dict]) -> list[list]:
        return await generate_grouped(reqs, self._generate)

    async def __call__(self, request: Request) -> JSONResponse:
        body, error = await json_body(request, "/v1/completions")
        if error is not None:
            return error
        try:
            req = parse_request(body, self.lm.tokenizer, self.lm.max_seq_len)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        choices = await self._batched(req)
        tok = self.lm.tokenizer
        n_prompt = sum(len(i) for i in req["ids"])
        n_out = sum(len(t) for t, _ in choices)
        return JSONResponse({
            "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": i, "text": tok.decode(t), "finish_reason": "stop" if stopped else "length",
                         "logprobs": None} for i, (t, stopped) in enumerate(choices)],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
        })


def build(checkpoint: str = "base"):
    """The app serving ``checkpoint`` (a config name with a shipped/cached checkpoint, or a directory)."""
    return Generator.bind(checkpoint)


app = build()
