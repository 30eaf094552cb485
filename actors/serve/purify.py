"""Ray Serve app: diffusion-based purification with SSNI of 8x8 digit images, over HTTP.

``serve run rayml.actors.serve.purify:app`` (or ``rayml serve purify``) exposes ``POST /``:

- a JSON body: either an image (a nested array of shape ``(8, 8)`` or ``(1, 8, 8)``, or a batch
  ``(N, 8, 8)`` / ``(N, 1, 8, 8)`` with ``N <= MAX_BATCH``; numbers in ``[0, 1]``) or an object
  ``{"image": <array>, "method": "diffpure" | "gdmp", "ssni": "N" | "L" | null, "seed": 0}``;
- or PNG bytes (``Content-Type: image/png``): an 8x8 8-bit grayscale image, scaled by 1/255.

It answers ``{"purified": <array like the input>, "t": t*, "label": class, "score_norm": ...,
"method": ..., "ssni": ...}`` (per image lists for a batch). Defaults: DiffPure + SSNI-N,
``t* = 100``, full DDPM sampler. A wrong shape, dtype, value range, body or image size gets a 400
with a message, never a 500, and the replica stays up. Work per request is bounded (at most
``MAX_BATCH`` images, ``MAX_BODY`` bytes) and a replica takes at most 4 requests at once.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["Purifier", "app", "BadRequest", "parse_json", "parse_png", "MAX_BATCH", "MAX_BODY", "SIDE"]

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
        img = Image.open(io.BytesIO(data))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise BadRequest(f"the PNG could not be decoded: {exc}") from None
    if img.size != (SIDE, SIDE):
        raise BadRequest(f"the PNG must be 8x8 pixels, got {img.size[0]}x{img.size[1]}")
    if img.mode != "L":
        raise BadRequest(f"the PNG must be 8-bit grayscale (mode 'L'), got mode {img.mode!r}")
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return {"images": arr.reshape(1, 1, SIDE, SIDE), "single": True, "method": "diffpure", "ssni": "N", "seed": 0}


@serve.deployment(max_ongoing_requests=4, ray_actor_options={"num_cpus": 0.5})
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

    async def __call__(self, request: Request) -> JSONResponse:
        if request.method != "POST":
            return JSONResponse({"error": "use POST with a JSON image or PNG bytes"}, status_code=405)
        data = await request.body()
        if len(data) > MAX_BODY:
            return JSONResponse({"error": f"the body is {len(data)} bytes; at most {MAX_BODY} are accepted"},
                                status_code=400)
        try:
            if request.headers.get("content-type", "").startswith("image/png") or data.startswith(PNG_MAGIC):
                req = parse_png(data)
            else:
                try:
                    body = json.loads(data)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise BadRequest("the body is neither valid JSON nor a PNG image") from None
                req = parse_json(body)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            answer = await asyncio.to_thread(self.purify, req)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(answer)


app = Purifier.bind()
