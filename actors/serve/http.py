"""Small HTTP helpers shared by rayml's Serve apps."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["json_body", "generate_grouped"]


async def json_body(request: Request, path: str | None = None) -> tuple[Any, JSONResponse | None]:
    """``(body, None)`` for a POST with a JSON body, else ``(None, the 404 / 405 / 400 response to
    send)``; with ``path``, a request whose URL path does not end with it is a 404."""
    if path is not None and not request.url.path.rstrip("/").endswith(path):
        return None, JSONResponse({"error": f"not found: use POST {path}"}, status_code=404)
    if request.method != "POST":
        return None, JSONResponse({"error": "use POST with a JSON body"}, status_code=405)
    try:
        return await request.json(), None
    except Exception:  # noqa: BLE001 - any malformed body is the client's error
        return None, JSONResponse({"error": "the body is not valid JSON"}, status_code=400)


async def generate_grouped(reqs: Sequence[dict], generate: Callable[[list], list], *,
                           keys: tuple = ("temperature", "top_p", "seed"), catch: bool = False) -> list:
    """Answers to a ``@serve.batch`` of requests, in order: requests that share the sampling
    settings ``keys`` go to ``generate`` (run in a thread) together.

    With ``catch``, a group whose ``generate`` raises gets the exception as each of its answers
    (the caller turns it into a 500 for those requests only); the other groups are unaffected.
    """
    groups: dict = {}
    for i, r in enumerate(reqs):
        groups.setdefault(tuple(r[k] for k in keys), []).append(i)
    results: list = [None] * len(reqs)
    for idx in groups.values():
        try:
            outs = await asyncio.to_thread(generate, [reqs[i] for i in idx])
        except Exception as exc:  # noqa: BLE001 - a failed group answers 500; the replica stays up
            if not catch:
                raise
            outs = [exc] * len(idx)
        for i, o in zip(idx, outs):
            results[i] = o
    return results
