"""The purify Serve app over real HTTP: JSON and PNG images of any size the model takes, batches, 4xx for bad
input and unsupported sizes, replica survives."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from _timing import limit
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
    r = requests.post(url, json={"image": image.tolist(), "seed": 1}, timeout=limit(60))
    assert r.status_code == 200, r.text
    body = r.json()
    out = np.array(body["purified"])
    assert out.shape == (8, 8) and out.min() >= 0 and out.max() <= 1
    assert 0 <= body["t"] <= 105 and body["t"] == round(body["t"]) and body["label"] == label
    assert body["size"] == [8, 8]
    again = requests.post(url, json={"image": image.tolist(), "seed": 1}, timeout=limit(60)).json()
    assert again == body  # a fixed seed gives the same answer


def test_purifies_png_bytes_and_batches(url, digit):
    image, _ = digit
    png = _png(np.round(image * 255).astype(np.uint8))
    r = requests.post(url, data=png, headers={"Content-Type": "image/png"}, timeout=limit(60))
    assert r.status_code == 200, r.text
    assert np.array(r.json()["purified"]).shape == (8, 8)
    batch = np.stack([image, np.clip(image + 0.3, 0, 1)])
    r = requests.post(url, json={"image": batch.tolist(), "method": "gdmp", "ssni": "L"}, timeout=limit(60))
    assert r.status_code == 200, r.text
    body = r.json()
    assert np.array(body["purified"]).shape == (2, 8, 8) and len(body["t"]) == 2 and body["t"][1] > body["t"][0]


def test_other_sizes_the_model_takes_are_purified(url, digit):
    import torch
    import torch.nn.functional as F

    image, _ = digit
    big = F.interpolate(torch.as_tensor(image)[None, None], size=(16, 16), mode="bilinear").clamp(0, 1)[0, 0].numpy()
    r = requests.post(url, json={"image": big.tolist(), "seed": 2}, timeout=limit(120))
    assert r.status_code == 200, r.text
    body = r.json()
    out = np.array(body["purified"])
    assert out.shape == (16, 16) and body["size"] == [16, 16] and body["label"] is None  # the classifier takes 8x8
    assert 0 <= body["t"] <= 105 and out.min() >= 0 and out.max() <= 1
    # a clean digit at its size sits near the middle of SSNI-N's range; heavy noise gets more
    noisy = np.clip(big + np.random.default_rng(0).normal(0, 0.3, big.shape), 0, 1)
    t_noisy = requests.post(url, json={"image": noisy.tolist(), "seed": 2}, timeout=limit(120)).json()["t"]
    assert t_noisy > body["t"]
    # a non-square batch and a PNG of another supported size
    batch = np.random.default_rng(1).uniform(0, 1, (3, 6, 12))
    r = requests.post(url, json={"image": batch.tolist(), "ssni": None}, timeout=limit(120))
    assert r.status_code == 200, r.text
    assert np.array(r.json()["purified"]).shape == (3, 6, 12) and r.json()["t"] == [100.0] * 3
    r = requests.post(url, data=_png(np.round(big * 255).astype(np.uint8)), headers={"Content-Type": "image/png"},
                      timeout=limit(120))
    assert r.status_code == 200 and np.array(r.json()["purified"]).shape == (16, 16), r.text


def test_the_app_lists_the_sizes_it_takes(url):
    body = requests.get(url.rstrip("/") + "/sizes", timeout=limit(30)).json()
    assert body["square_sides"] == list(range(2, 65, 2)) and body["max_pixels"] == purify.MAX_PIXELS
    assert body["classifier_size"] == [8, 8]


def test_model_accepts_follows_the_model():
    class Picky:
        def accepts(self, h, w):
            return (h, w) == (32, 32)

    assert purify.model_accepts(None, 8, 6) and not purify.model_accepts(None, 7, 8)
    assert not purify.model_accepts(None, 66, 66) and not purify.model_accepts(None, 0, 0)
    assert purify.model_accepts(Picky(), 32, 32) and not purify.model_accepts(Picky(), 8, 8)
    with pytest.raises(purify.BadRequest, match="does not take 8x8"):
        purify.parse_json(np.zeros((8, 8)).tolist(), model=Picky())


def test_concurrent_requests_complete(url, digit):
    image, _ = digit
    with ThreadPoolExecutor(max_workers=6) as ex:
        codes = list(ex.map(lambda s: requests.post(url, json={"image": image.tolist(), "seed": s},
                                                     timeout=limit(120)).status_code, range(6)))
    assert codes == [200] * 6


@pytest.mark.parametrize(
    "payload, needle",
    [
        (np.zeros((7, 8)).tolist(), "does not take 7x8"),
        (np.zeros((8, 8, 3)).tolist(), "does not take 8x3"),
        (np.zeros((2, 3, 8, 8)).tolist(), "must have shape"),
        (np.zeros((66, 66)).tolist(), "does not take 66x66"),
        (np.zeros((2, 64, 64)).tolist(), "at most 4096 pixels"),
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
    r = requests.post(url, json=payload, timeout=limit(30))
    assert r.status_code == 400 and needle in r.json()["error"], r.text
    ok = requests.post(url, json=digit[0].tolist(), timeout=limit(60))
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
        (_png(np.zeros((7, 7), np.uint8)), 400, "does not take 7x7"),
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
        r = requests.post(url, data=data, timeout=limit(30))
        assert r.status_code == status and needle in r.json()["error"], (needle, r.text)
    assert requests.get(url, timeout=limit(30)).status_code == 405
    assert requests.post(url, json=np.zeros((8, 8)).tolist(), timeout=limit(60)).status_code == 200


def test_the_app_publishes_its_openapi_schema(url):
    schema = requests.get(url.rstrip("/") + "/openapi.json", timeout=limit(30)).json()
    body = schema["paths"]["/"]["post"]["requestBody"]["content"]
    assert {"application/json", "image/png"} <= set(body)
