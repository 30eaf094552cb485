"""Ray Serve app: diffusion-based purification with SSNI of 8x8 digit images, over HTTP.

``serve run rayml.actors.serve.purify:app`` (or ``rayml serve purify``) exposes ``POST /``:

- a JSON body: either an image (a nested array of shape ``(8, 8)`` or ``(1, 8, 8)``, or a batch
  ``(N, 8, 8)`` / ``(N, 1, 8, 8)`` with ``N <= MAX_BATCH``; numbers in ``[0, 1]``) or an object
  ``{"image": <array>, "method": "diffpure" | "gdmp", "ssni": "N" | "L" | null, "seed": 0}``;
- or PNG bytes (``Content-Type: image/png``): an 8x8 8-bit grayscale image, scaled by 1/255.

It answers ``{"purified": <array like the input>, "t": t*, "label": class, "score_norm": ...,
"method": ..., "ssni": ...}`` (per image lists for a batch). Defaults: DiffPure + SSNI-N,
``t* = 100``, full DDPM sampler. A wrong shape, dtype, value range, body or image size gets a 400
with a message (a body over ``MAX_BODY`` bytes a 413, before it is read whole), never a 500, and
the replica stays up: deeply nested JSON, numbers past Python's digit limit and PNGs that declare
huge sizes (decompression bombs) are refused before any work. The body is parsed off the event
loop. Work per request is bounded (at most ``MAX_BATCH`` images) and a replica takes at most 4
requests at once. The app is a FastAPI ingress: its OpenAPI schema is at ``/openapi.json``.
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
import io
import json
from typing import Any, Optional, Union

import numpy as np
from fastapi import HTTPException, Request
from pydantic import BaseModel
from ray import serve

from rayml.actors.serve.http import make_api

__all__ = ["Purifier", "app", "api", "BadRequest", "parse_json", "parse_png", "parse_body", "MAX_BATCH", "MAX_BODY",
           "SIDE"]

SIDE = 8
MAX_BATCH = 16
MAX_BODY = 64 * 1024
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_OPTIONS = {"image", "method", "ssni", "seed"}


class BadRequest(ValueError):
    """The request's image or options are malformed."""


def _as_batch(arr: Any) -> tuple[np.ndarray, bool]:
    """A validated ``(N, 1, 8, 8)`` float32 batch and whether the input was a single image."""
    try:
        a = np.asarray(arr)
    except (ValueError, TypeError):
        raise BadRequest("'image' must be a rectangular nested array of numbers") from None
    if a.dtype == object or a.dtype.kind not in "iuf" or a.dtype == bool:
        raise BadRequest(f"'image' must hold numbers, got dtype {a.dtype} (a ragged or non-numeric array)")
    if a.shape in ((SIDE, SIDE), (1, SIDE, SIDE)):
        single, a = True, a.reshape(1, 1, SIDE, SIDE)
    elif a.ndim == 3 and a.shape[1:] == (SIDE, SIDE):
        single, a = False, a[:, None]
    elif a.ndim == 4 and a.shape[1:] == (1, SIDE, SIDE):
        single = False
    else:
        raise BadRequest(f"'image' must have shape (8, 8), (1, 8, 8), (N, 8, 8) or (N, 1, 8, 8), got {a.shape}")
    if not 1 <= a.shape[0] <= MAX_BATCH:
        raise BadRequest(f"a batch must hold 1 to {MAX_BATCH} images, got {a.shape[0]}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise BadRequest("'image' values must be finite")
    if a.min() < 0.0 or a.max() > 1.0:
        raise BadRequest(f"'image' values must lie in [0, 1], got {a.min():g} .. {a.max():g}")
    return a.astype(np.float32), single


def parse_json(body: Any) -> dict:
    """Validate a decoded JSON body; returns ``{"images", "single", "method", "ssni", "seed"}``."""
    if isinstance(body, dict):
        unknown = set(body) - _OPTIONS
        if unknown:
            raise BadRequest(f"unknown fields {sorted(unknown)}; known: {sorted(_OPTIONS)}")
        if "image" not in body:
            raise BadRequest("'image' is required")
        opts = dict(body)
    elif isinstance(body, list):
        opts = {"image": body}
    else:
        raise BadRequest("the body must be a JSON array (the image) or an object with 'image'")
    images, single = _as_batch(opts["image"])
    method = opts.get("method", "diffpure")
    if method not in ("diffpure", "gdmp"):
        raise BadRequest(f"'method' must be 'diffpure' or 'gdmp', got {method!r}")
    variant = opts.get("ssni", "N")
    if variant not in ("N", "L", None):
        raise BadRequest(f"'ssni' must be 'N', 'L' or null, got {variant!r}")
    seed = opts.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise BadRequest(f"'seed' must be an integer in [0, 2**63), got {seed!r}")
    return {"images": images, "single": single, "method": method, "ssni": variant, "seed": seed}


def parse_png(data: bytes) -> dict:
    """Decode PNG bytes (8x8, 8-bit grayscale) to a request with the default options."""
    from PIL import Image, UnidentifiedImageError

    if not data.startswith(PNG_MAGIC):
        raise BadRequest("the body is not a PNG image")
    try:
        img = Image.open(io.BytesIO(data))  # reads the header only: the size is known before decoding
        if img.size != (SIDE, SIDE):
            raise BadRequest(f"the PNG must be 8x8 pixels, got {img.size[0]}x{img.size[1]}")
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        if isinstance(exc, BadRequest):
            raise
        raise BadRequest(f"the PNG could not be decoded: {exc}") from None
    if img.mode != "L":
        raise BadRequest(f"the PNG must be 8-bit grayscale (mode 'L'), got mode {img.mode!r}")
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return {"images": arr.reshape(1, 1, SIDE, SIDE), "single": True, "method": "diffpure", "ssni": "N", "seed": 0}


def parse_body(data: bytes, content_type: str = "") -> dict:
    """A request from raw body bytes: PNG (by content type or magic) or JSON; ``BadRequest`` for
    anything malformed, including JSON nested past the parser's depth or numbers past Python's
    digit limit."""
    if content_type.startswith("image/png") or data.startswith(PNG_MAGIC):
        return parse_png(data)
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("the body is neither valid JSON nor a PNG image") from None
    except RecursionError:
        raise BadRequest("the JSON body is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past sys.get_int_max_str_digits()
        raise BadRequest(f"the JSON body holds an unreadable number: {exc}") from None
    return parse_json(body)


class PurifyAnswer(BaseModel):
    """The purified image(s), SSNI's noise level t*, the classifier's label and the score norm."""

    purified: list
    t: Union[float, list[float]]
    label: Union[int, list[int]]
    score_norm: Union[float, list[float]]
    method: str
    ssni: Optional[str]


_BODY_DOC = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"oneOf": [
        {"type": "array", "description": "an image (8, 8) / (1, 8, 8) or a batch (N, 8, 8) / (N, 1, 8, 8), values in [0, 1]"},
        {"type": "object", "required": ["image"], "additionalProperties": False, "properties": {
            "image": {"type": "array"}, "method": {"enum": ["diffpure", "gdmp"]},
            "ssni": {"enum": ["N", "L", None]}, "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}}}]}},
    "image/png": {"schema": {"type": "string", "format": "binary", "description": "8x8 8-bit grayscale"}}}}}

api = make_api("rayml purify: SSNI diffusion purification of digit images", max_body_bytes=MAX_BODY)


@serve.deployment(max_ongoing_requests=4, ray_actor_options={"num_cpus": 0.5})
@serve.ingress(api)
class Purifier:
    """The deployment: loads the score model, classifier and reference statistics once; purifies requests."""

    def __init__(self):
        from rayml import runtime
        from rayml.purify.pool import load_models

        runtime.pin_threads(1)
        self.models = load_models()
    def purify(self, req: dict) -> dict:
        """Purify a validated request; returns the JSON answer."""
        import torch

        from rayml.purify import ssni as S

        images = torch.from_numpy(req["images"])
        pcfg = S.PurifyConfig(method=req["method"], t_star=100.0, stride=1.0)
        scfg = S.SSNIConfig(variant=req["ssni"]) if req["ssni"] else None
        with torch.no_grad():
            out, t = S.purify(self.models["score"], images, pcfg, ssni=scfg, ref=self.models["ref"], seed=req["seed"])
            labels = self.models["classifier"](out).argmax(1)
            norms = S.score_norms(self.models["score"], images, seed=req["seed"])
        out_np = out.numpy()[:, 0]
        if req["single"]:
            return {"purified": out_np[0].tolist(), "t": float(t[0]), "label": int(labels[0]),
                    "score_norm": float(norms[0]), "method": req["method"], "ssni": req["ssni"]}
        return {"purified": out_np.tolist(), "t": t.tolist(), "label": labels.tolist(),
                "score_norm": norms.tolist(), "method": req["method"], "ssni": req["ssni"]}

    @api.post("/", response_model=PurifyAnswer, openapi_extra=_BODY_DOC)
    async def purify_request(self, request: Request) -> dict:
        data = await request.body()
        try:
            req = await asyncio.to_thread(parse_body, data, request.headers.get("content-type", ""))
            return await asyncio.to_thread(self.purify, req)
        except ValueError as exc:  # BadRequest, or a setting the purifier rejects
            raise HTTPException(status_code=400, detail=str(exc)) from None


app = Purifier.bind()
