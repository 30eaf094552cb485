"""The purify Serve app over real HTTP: JSON and PNG images, batches, 4xx for bad input, replica survives."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from rayml.actors.serve import purify



def _png(arr: np.ndarray, mode: str = "L") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr, mode=mode).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def digit():
    from rayml.purify.diffusion import digits_split

    _, _, x, y = digits_split()
    return x[0, 0].numpy(), int(y[0])


@pytest.fixture(scope="module")
def url(serve_app):
    with serve_app(purify.app, "purify", "/purify") as base:
        yield base


def test_parse_json_shapes_and_defaults():
    req = purify.parse_json(np.zeros((8, 8)).tolist())
    assert req["images"].shape == (1, 1, 8, 8) and req["single"] and req["ssni"] == "N"
    req = purify.parse_json({"image": np.zeros((3, 1, 8, 8)).tolist(), "ssni": None, "method": "gdmp"})
    assert req["images"].shape == (3, 1, 8, 8) and not req["single"] and req["ssni"] is None


def test_purifies_a_json_image(url, digit):
    image, label = digit
    r = requests.post(url, json={"image": image.tolist(), "seed": 1}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    out = np.array(body["purified"])
    assert out.shape == (8, 8) and out.min() >= 0 and out.max() <= 1
    assert 0 <= body["t"] <= 105 and body["t"] == round(body["t"]) and body["label"] == label
    again = requests.post(url, json={"image": image.tolist(), "seed": 1}, timeout=60).json()
    assert again == body  # a fixed seed gives the same answer


def test_purifies_png_bytes_and_batches(url, digit):
    image, _ = digit
    png = _png(np.round(image * 255).astype(np.uint8))
    r = requests.post(url, data=png, headers={"Content-Type": "image/png"}, timeout=60)
    assert r.status_code == 200, r.text
    assert np.array(r.json()["purified"]).shape == (8, 8)
    batch = np.stack([image, np.clip(image + 0.3, 0, 1)])
    r = requests.post(url, json={"image": batch.tolist(), "method": "gdmp", "ssni": "L"}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert np.array(body["purified"]).shape == (2, 8, 8) and len(body["t"]) == 2 and body["t"][1] > body["t"][0]


def test_concurrent_requests_complete(url, digit):
    image, _ = digit
    with ThreadPoolExecutor(max_workers=6) as ex:
        codes = list(ex.map(lambda s: requests.post(url, json={"image": image.tolist(), "seed": s},
                                                     timeout=120).status_code, range(6)))
    assert codes == [200] * 6


@pytest.mark.parametrize(
    "payload, needle",
    [
        (np.zeros((7, 8)).tolist(), "must have shape"),
        (np.zeros((8, 8, 3)).tolist(), "must have shape"),
        (np.zeros((17, 8, 8)).tolist(), "1 to 16 images"),
        ([[0.0] * 8] * 7 + [[0.0] * 7], "rectangular"),
        ([["a"] * 8] * 8, "must hold numbers"),
        ([[True] * 8] * 8, "must hold numbers"),
        ((np.ones((8, 8)) * 2).tolist(), "lie in [0, 1]"),
        ((-np.ones((8, 8))).tolist(), "lie in [0, 1]"),
        ({"image": np.zeros((8, 8)).tolist(), "method": "sde"}, "'method'"),
        ({"image": np.zeros((8, 8)).tolist(), "ssni": "Q"}, "'ssni'"),
        ({"image": np.zeros((8, 8)).tolist(), "seed": -1}, "'seed'"),
        ({"image": np.zeros((8, 8)).tolist(), "extra": 1}, "unknown fields"),
        ({"method": "gdmp"}, "'image' is required"),
        ("an image", "JSON array"),
    ],
)
def test_bad_json_gets_400_and_the_replica_survives(url, digit, payload, needle):
    r = requests.post(url, json=payload, timeout=30)
    assert r.status_code == 400 and needle in r.json()["error"], r.text
    ok = requests.post(url, json=digit[0].tolist(), timeout=60)
    assert ok.status_code == 200


def _png_header_declaring(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares ``width x height`` (a decompression bomb's header) and no pixels."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))


def test_bad_bodies_and_pngs_get_4xx(url):
    cases = [
        (_png(np.zeros((16, 16), np.uint8)), 400, "8x8 pixels"),
        (_png(np.zeros((8, 8, 3), np.uint8), "RGB"), 400, "grayscale"),
        (b"\x89PNG\r\n\x1a\n" + b"garbage", 400, "could not be decoded"),
        (b"{not json", 400, "neither valid JSON"),
        (b"[" + b"0.0," * 30000 + b"0.0]", 413, "bytes"),
        # the reproducers of the hardening issue: each was a 500
        (b"[" * 30000 + b"]" * 30000, 400, "nested too deeply"),
        (b"[" * 5000 + b"]" * 5000, 400, "nested too deeply"),
        (b"[" + b"9" * 5000 + b"]", 400, "unreadable number"),
        (_png_header_declaring(20000, 20000), 400, "PNG"),
    ]
    for data, status, needle in cases:
        r = requests.post(url, data=data, timeout=30)
        assert r.status_code == status and needle in r.json()["error"], (needle, r.text)
    assert requests.get(url, timeout=30).status_code == 405
    assert requests.post(url, json=np.zeros((8, 8)).tolist(), timeout=60).status_code == 200


def test_the_app_publishes_its_openapi_schema(url):
    schema = requests.get(url.rstrip("/") + "/openapi.json", timeout=30).json()
    body = schema["paths"]["/"]["post"]["requestBody"]["content"]
    assert {"application/json", "image/png"} <= set(body)
