"""HTTP pieces shared by rayml's Serve apps: the FastAPI ingress factory (OpenAPI, body cap,
uniform JSON errors), batched generation with per-request failure isolation, the completion answer."""

from __future__ import annotations

import asyncio
from typing import Callable, Sequence

from starlette.responses import JSONResponse

__all__ = ["generate_grouped", "completion_answer", "make_api", "BodyLimit", "free_port", "serve_port",
           "SHUTDOWN_POLL_S"]

# How often a stopping replica checks for requests still in flight (``graceful_shutdown_wait_loop_s``):
# Serve's default of 2 s makes every replica stop take about 3 s even when idle; at 0.25 s an idle
# replica stops in about 1 s (measured), and one with requests in flight still waits for them, up to
# the unchanged graceful_shutdown_timeout_s.
SHUTDOWN_POLL_S = 0.25


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve_port(host: str = "127.0.0.1") -> int:
    """The HTTP port of Serve on the connected Ray: the running Serve's port, or, with none
    running, a free port on ``host`` that a newly started Serve listens on. (``serve.start`` on a
    running Serve ignores new HTTP options, so a caller that picked its own port would post to a
    port nobody serves.)"""
    from ray import serve
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is not None:
        return int(client.http_config.port)
    port = free_port(host)
    serve.start(http_options={"host": host, "port": port})
    return port


async def generate_grouped(reqs: Sequence[dict], generate: Callable[[list], list], *,
                           keys: tuple = ("temperature", "top_p", "seed"), catch: bool = True) -> list:
    """Answers to a ``@serve.batch`` of requests, in order: requests that share the sampling
    settings ``keys`` go to ``generate`` (run in a thread) together.

    With ``catch`` (the default), a group whose ``generate`` raises is generated again one request
    at a time, so only the requests that fail alone get their exception as the answer (the caller
    answers those with a 503); one poison request never fails the innocent requests batched with it.
    """
    groups: dict = {}
    for i, r in enumerate(reqs):
        groups.setdefault(tuple(r[k] for k in keys), []).append(i)
    results: list = [None] * len(reqs)
    for idx in groups.values():
        try:
            outs = await asyncio.to_thread(generate, [reqs[i] for i in idx])
        except Exception as exc:  # noqa: BLE001 - isolate the failing request; the replica stays up
            if not catch:
                raise
            if len(idx) == 1:
                outs = [exc]
            else:
                outs = [(await generate_grouped([reqs[i]], generate, keys=keys, catch=True))[0] for i in idx]
        for i, o in zip(idx, outs):
            results[i] = o
    return results


def completion_answer(model: str, tokenizer, req: dict, choices: list) -> dict:
    """The OpenAI-style ``text_completion`` body for one request's ``(tokens, stopped)`` choices."""
    import time
    import uuid

    n_prompt = sum(len(i) for i in req["ids"])
    n_out = sum(len(t) for t, _ in choices)
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "text": tokenizer.decode(t), "finish_reason": "stop" if stopped else "length",
                     "logprobs": None} for i, (t, stopped) in enumerate(choices)],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
    }


# --- FastAPI ingress shared by every app -------------------------------------------------------------

class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 before it is read whole
    (the declared ``Content-Length`` is checked first, a chunked body is counted as it streams)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, int(max_bytes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        too_big = JSONResponse({"error": f"the body is over {self.max_bytes} bytes"}, status_code=413)
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await too_big(scope, receive, send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        try:
            return await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            return await too_big(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


def _where(loc) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def make_api(title: str, *, max_body_bytes: int = 1 << 20, description: str = ""):
    """A FastAPI app for a Serve ingress: OpenAPI at ``/openapi.json`` and ``/docs``, bodies capped
    at ``max_body_bytes`` (413), and every error as JSON ``{"error": ...}``: 422 naming the field
    for a request that fails its pydantic model, the ``HTTPException``'s status for those, and 503
    (never 500) for anything unexpected inside a request's own work."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from rayml import __version__

    api = FastAPI(title=title, version=__version__, description=description)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @api.exception_handler(RequestValidationError)
    async def _invalid(request, exc):  # noqa: ANN001
        errors = [{"field": _where(e.get("loc", ())), "message": e.get("msg", "")} for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "message": "invalid"}
        return JSONResponse({"error": f"'{first['field']}': {first['message']}", "errors": errors},
                            status_code=422)

    @api.exception_handler(StarletteHTTPException)
    async def _http(request, exc):  # noqa: ANN001
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @api.exception_handler(Exception)
    async def _unexpected(request, exc):  # noqa: ANN001
        return JSONResponse({"error": f"the request could not be served ({type(exc).__name__})"}, status_code=503)

    return api
