"""Ray Serve app: diffusion-based purification with SSNI of grayscale images of any size the model takes, over HTTP.

``serve run rayml.actors.serve.purify:app`` (or ``rayml serve purify``) exposes ``POST /``:

- a JSON body: either an image (a nested array ``(H, W)`` or ``(1, H, W)``, or a batch
  ``(N, H, W)`` / ``(N, 1, H, W)`` with ``N <= MAX_BATCH``; numbers in ``[0, 1]``) or an object
  ``{"image": <array>, "method": "diffpure" | "gdmp", "ssni": "N" | "L" | null, "seed": 0}``;
- or PNG bytes (``Content-Type: image/png``): an ``H x W`` 8-bit grayscale image, scaled by 1/255.

Sizes: any ``H x W`` the score model takes (``sizes`` below; the shipped U-Net halves the image
once, so both sides must be even, between ``MIN_SIDE`` and ``MAX_SIDE``; a wrapped diffusers UNet
says what it takes through its ``accepts``), with at most ``MAX_PIXELS`` pixels per request.
Another size is a 400 naming the sizes it takes. SSNI's reference statistics are those of the
clean training digits at the request's size (computed once per size and kept: the native 8x8 from
500 images, other sizes from the first ``REF_IMAGES`` resized bilinearly), because a score norm
grows with the number of pixels. The classifier takes 8x8 only: ``label`` is ``null`` at other
sizes.

It answers ``{"purified": <array like the input>, "t": t*, "label": class or null,
"score_norm": ..., "method": ..., "ssni": ..., "size": [H, W]}`` (per image lists for a batch).
Defaults: DiffPure + SSNI-N, ``t* = 100``, full DDPM sampler. A wrong shape, size, dtype, value
range, body or image gets a 400 with a message (a body over ``MAX_BODY`` bytes a 413, before it is
read whole), never a 500, and the replica stays up: deeply nested JSON, numbers past Python's digit
limit and PNGs that declare huge sizes (decompression bombs) are refused before any work. The body
is parsed off the event loop. Work per request is bounded (at most ``MAX_BATCH`` images and
``MAX_PIXELS`` pixels) and a replica takes at most 4 requests at once. The app is a FastAPI
ingress: its OpenAPI schema is at ``/openapi.json``; ``GET /sizes`` lists the sizes it takes.
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

from rayml.actors.serve.http import SHUTDOWN_POLL_S, make_api

__all__ = ["Purifier", "app", "api", "BadRequest", "parse_json", "parse_png", "parse_body", "model_accepts",
           "MAX_BATCH", "MAX_BODY", "MAX_PIXELS", "SIDE", "MIN_SIDE", "MAX_SIDE", "REF_IMAGES"]

SIDE = 8  # the classifier's (and the shipped models' training) size
MIN_SIDE, MAX_SIDE = 2, 64
MAX_BATCH = 16
MAX_PIXELS = 4096  # per request: one 64x64 image, or 16 of 16x16
MAX_BODY = 64 * 1024
REF_IMAGES = 128
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_OPTIONS = {"image", "method", "ssni", "seed"}


class BadRequest(ValueError):
    """The request's image or options are malformed."""


def model_accepts(model, height: int, width: int) -> bool:
    """Whether the score ``model`` takes ``height x width`` images: its own ``accepts`` if it has one
    (a wrapped diffusers UNet), else rayml's ``ScoreNet`` rule (both sides even), within ``MIN_SIDE`` .. ``MAX_SIDE``."""
    if not (MIN_SIDE <= height <= MAX_SIDE and MIN_SIDE <= width <= MAX_SIDE):
        return False
    own = getattr(model, "accepts", None)
    if callable(own):
        return bool(own(height, width))
    return height % 2 == 0 and width % 2 == 0


def _size_rule(model) -> str:
    if model is not None and callable(getattr(model, "accepts", None)):
        return f"sizes the model's accepts() allows, sides {MIN_SIDE} to {MAX_SIDE}"
    return f"even height and width from {MIN_SIDE} to {MAX_SIDE}"


def _as_batch(arr: Any, model=None) -> tuple[np.ndarray, bool]:
    """A validated ``(N, 1, H, W)`` float32 batch and whether the input was a single image."""
    try:
        a = np.asarray(arr)
    except (ValueError, TypeError):
        raise BadRequest("'image' must be a rectangular nested array of numbers") from None
    if a.dtype == object or a.dtype.kind not in "iuf" or a.dtype == bool:
        raise BadRequest(f"'image' must hold numbers, got dtype {a.dtype} (a ragged or non-numeric array)")
    if a.ndim == 2:
        single, a = True, a[None, None]
    elif a.ndim == 3 and a.shape[0] == 1:
        single, a = True, a[None]
    elif a.ndim == 3:
        single, a = False, a[:, None]
    elif a.ndim == 4 and a.shape[1] == 1:
        single = False
    else:
        raise BadRequest(f"'image' must have shape (H, W), (1, H, W), (N, H, W) or (N, 1, H, W), got {a.shape}")
    if not 1 <= a.shape[0] <= MAX_BATCH:
        raise BadRequest(f"a batch must hold 1 to {MAX_BATCH} images, got {a.shape[0]}")
    h, w = a.shape[2], a.shape[3]
    if not model_accepts(model, h, w):
        raise BadRequest(f"the model does not take {h}x{w} images; it takes {_size_rule(model)}")
    if a.shape[0] * h * w > MAX_PIXELS:
        raise BadRequest(f"a request may hold at most {MAX_PIXELS} pixels, got {a.shape[0]} x {h}x{w}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise BadRequest("'image' values must be finite")
    if a.min() < 0.0 or a.max() > 1.0:
        raise BadRequest(f"'image' values must lie in [0, 1], got {a.min():g} .. {a.max():g}")
    return a.astype(np.float32), single


def parse_json(body: Any, model=None) -> dict:
    """Validate a decoded JSON body (sizes against ``model``); returns ``{"images", "single", "method", "ssni", "seed"}``."""
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
    images, single = _as_batch(opts["image"], model)
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


def parse_png(data: bytes, model=None) -> dict:
    """Decode PNG bytes (8-bit grayscale, a size ``model`` takes) to a request with the default options."""
    from PIL import Image, UnidentifiedImageError

    if not data.startswith(PNG_MAGIC):
        raise BadRequest("the body is not a PNG image")
    try:
        img = Image.open(io.BytesIO(data))  # reads the header only: the size is known before decoding
        w, h = img.size
        if not model_accepts(model, h, w):
            raise BadRequest(f"the model does not take {h}x{w} images; it takes {_size_rule(model)}")
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        if isinstance(exc, BadRequest):
            raise
        raise BadRequest(f"the PNG could not be decoded: {exc}") from None
    if img.mode != "L":
        raise BadRequest(f"the PNG must be 8-bit grayscale (mode 'L'), got mode {img.mode!r}")
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return {"images": arr.reshape(1, 1, h, w), "single": True, "method": "diffpure", "ssni": "N", "seed": 0}


def parse_body(data: bytes, content_type: str = "", model=None) -> dict:
    """A request from raw body bytes: PNG (by content type or magic) or JSON; ``BadRequest`` for
    anything malformed, including JSON nested past the parser's depth or numbers past Python's
    digit limit."""
    if content_type.startswith("image/png") or data.startswith(PNG_MAGIC):
        return parse_png(data, model)
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("the body is neither valid JSON nor a PNG image") from None
    except RecursionError:
        raise BadRequest("the JSON body is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past sys.get_int_max_str_digits()
        raise BadRequest(f"the JSON body holds an unreadable number: {exc}") from None
    return parse_json(body, model)


class PurifyAnswer(BaseModel):
    """The purified image(s), SSNI's noise level t*, the classifier's label (8x8 only) and the score norm."""

    purified: list
    t: Union[float, list[float]]
    label: Union[int, list[int], None]
    score_norm: Union[float, list[float]]
    method: str
    ssni: Optional[str]
    size: list[int]


_BODY_DOC = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"oneOf": [
        {"type": "array", "description": "an image (H, W) / (1, H, W) or a batch (N, H, W) / (N, 1, H, W), values in "
                                          "[0, 1], a size the model takes (GET /sizes)"},
        {"type": "object", "required": ["image"], "additionalProperties": False, "properties": {
            "image": {"type": "array"}, "method": {"enum": ["diffpure", "gdmp"]},
            "ssni": {"enum": ["N", "L", None]}, "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}}}]}},
    "image/png": {"schema": {"type": "string", "format": "binary", "description": "8-bit grayscale, a size the model takes"}}}}}

api = make_api("rayml purify: SSNI diffusion purification of grayscale images", max_body_bytes=MAX_BODY)


@serve.deployment(max_ongoing_requests=4, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class Purifier:
    """The deployment: loads the score model, classifier and reference statistics once; purifies requests."""

    def __init__(self):
        from rayml import runtime
        from rayml.purify.pool import load_models

        runtime.pin_threads(1)
        self.models = load_models()
        self.refs = {(SIDE, SIDE): self.models["ref"]}

    def reference(self, height: int, width: int):
        """SSNI's clean reference statistics at ``height x width`` (training digits resized; kept per size)."""
        if (height, width) not in self.refs:
            import torch
            import torch.nn.functional as F

            from rayml.purify import diffusion as D
            from rayml.purify import ssni as S

            xtr = D.digits_split()[0][:REF_IMAGES]
            resized = F.interpolate(xtr, size=(height, width), mode="bilinear", align_corners=False).clamp(0, 1)
            with torch.no_grad():
                self.refs[(height, width)] = S.reference_stats(self.models["score"], resized, seed=12345)
        return self.refs[(height, width)]

    def purify(self, req: dict) -> dict:
        """Purify a validated request; returns the JSON answer."""
        import torch

        from rayml.purify import ssni as S

        images = torch.from_numpy(req["images"])
        h, w = images.shape[2], images.shape[3]
        pcfg = S.PurifyConfig(method=req["method"], t_star=100.0, stride=1.0)
        scfg = S.SSNIConfig(variant=req["ssni"]) if req["ssni"] else None
        ref = self.reference(h, w) if scfg is not None else None
        with torch.no_grad():
            out, t = S.purify(self.models["score"], images, pcfg, ssni=scfg, ref=ref, seed=req["seed"])
            labels = self.models["classifier"](out).argmax(1).tolist() if (h, w) == (SIDE, SIDE) else None
            norms = S.score_norms(self.models["score"], images, seed=req["seed"])
        out_np = out.numpy()[:, 0]
        common = {"method": req["method"], "ssni": req["ssni"], "size": [int(h), int(w)]}
        if req["single"]:
            return {"purified": out_np[0].tolist(), "t": float(t[0]), "label": None if labels is None else labels[0],
                    "score_norm": float(norms[0]), **common}
        return {"purified": out_np.tolist(), "t": t.tolist(), "label": labels, "score_norm": norms.tolist(), **common}

    @api.get("/sizes")
    async def sizes(self) -> dict:
        """The image sizes the model takes and the request limits."""
        even = [s for s in range(MIN_SIDE, MAX_SIDE + 1) if model_accepts(self.models["score"], s, s)]
        return {"rule": _size_rule(self.models["score"]), "square_sides": even, "max_batch": MAX_BATCH,
                "max_pixels": MAX_PIXELS, "classifier_size": [SIDE, SIDE]}

    @api.post("/", response_model=PurifyAnswer, openapi_extra=_BODY_DOC)
    async def purify_request(self, request: Request) -> dict:
        data = await request.body()
        try:
            req = await asyncio.to_thread(parse_body, data, request.headers.get("content-type", ""),
                                          self.models["score"])
            return await asyncio.to_thread(self.purify, req)
        except ValueError as exc:  # BadRequest, or a setting the purifier rejects
            raise HTTPException(status_code=400, detail=str(exc)) from None


app = Purifier.bind()
