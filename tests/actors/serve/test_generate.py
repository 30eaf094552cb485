"""The generate Serve app over real HTTP: OpenAI-style completions, concurrent (batched) requests,
4xx for bad requests, and the replica survives them."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from _timing import limit
from rayml.actors.serve import generate as app_module
from rayml.llm import training
from rayml.llm.checkpoint import save_checkpoint



@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cfg = dataclasses.replace(training.CONFIGS["tiny"], steps=10, lr=1e-2, max_seq_len=64, row_len=64)
    res = training.train_model(cfg, seed=0, evaluate=False)
    path = tmp_path_factory.mktemp("ckpt")
    save_checkpoint(path, res.model, res.tokenizer, {"name": "tiny-test"})
    return str(path)


@pytest.fixture(scope="module")
def url(serve_app, checkpoint):
    with serve_app(app_module.build(checkpoint), "generate", "/generate") as base:
        yield f"{base}/v1/completions"


def test_parse_request_defaults_and_bounds(checkpoint):
    from rayml.llm.checkpoint import load_checkpoint

    model, tok, _ = load_checkpoint(checkpoint)
    req = app_module.parse_request({"prompt": "12+34="}, tok, 64)
    assert req["max_tokens"] == 16 and req["temperature"] == 1.0 and len(req["ids"]) == 1
    with pytest.raises(app_module.BadRequest, match="'max_tokens'"):
        app_module.parse_request({"prompt": "1", "max_tokens": 0}, tok, 64)
    with pytest.raises(app_module.BadRequest, match="context length"):
        app_module.parse_request({"prompt": "1" * 60, "max_tokens": 10}, tok, 64)


def test_completion_matches_local_greedy_generation(url, checkpoint):
    import rayml.llm

    lm = rayml.llm.pretrained(checkpoint)
    r = requests.post(url, json={"prompt": "317+845=", "max_tokens": 6, "temperature": 0}, timeout=limit(60))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and len(body["choices"]) == 1
    assert body["choices"][0]["text"] == lm.generate(["317+845="], max_new_tokens=6)[0]
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]


def test_concurrent_requests_complete_and_agree_with_alone(url):
    prompts = [f"{100 + 37 * i}+{200 + 11 * i}=" for i in range(12)]
    alone = [requests.post(url, json={"prompt": p, "max_tokens": 5, "temperature": 0}, timeout=limit(60)).json()
             for p in prompts[:3]]
    with ThreadPoolExecutor(max_workers=len(prompts)) as ex:
        rs = list(ex.map(lambda p: requests.post(url, json={"prompt": p, "max_tokens": 5, "temperature": 0},
                                                 timeout=limit(120)), prompts))
    assert [r.status_code for r in rs] == [200] * len(prompts)
    assert [r.json()["choices"][0]["text"] for r in rs[:3]] == [a["choices"][0]["text"] for a in alone]
    multi = requests.post(url, json={"prompt": prompts[:3], "max_tokens": 5, "temperature": 0}, timeout=limit(60)).json()
    assert [c["text"] for c in multi["choices"]] == [a["choices"][0]["text"] for a in alone]


@pytest.mark.parametrize(
    "payload, status, needle",
    [
        ({"max_tokens": 4}, 422, "'prompt': Field required"),
        ({"prompt": 12}, 422, "'prompt"),
        ({"prompt": "1+1=", "max_tokens": 0}, 422, "'max_tokens': Input should be greater than or equal to 1"),
        ({"prompt": "1+1=", "max_tokens": 100000}, 422, "'max_tokens': Input should be less than or equal"),
        ({"prompt": "1+1=", "max_tokens": "4"}, 422, "'max_tokens': Input should be a valid integer"),
        ({"prompt": "1" * 80, "max_tokens": 4}, 400, "context length"),
        ({"prompt": "1+1=", "temperature": "hot"}, 422, "'temperature'"),
        ({"prompt": "1+1=", "top_p": 0}, 422, "'top_p': Input should be greater than 0"),
        ({"prompt": "1+1=", "frequency": 1}, 422, "'frequency': Extra inputs are not permitted"),
        ([1, 2], 422, "'body'"),
        # the reproducers of the hardening issue (each was a 500)
        ({"prompt": "\ud800"}, 422, "lone surrogate"),
        ({"prompt": "1+1=", "seed": 2**64}, 422, "'seed': Input should be less than or equal"),
        ({"prompt": "1+1=", "temperature": 1e-300}, 422, "'temperature': Value error, must be 0 (greedy)"),
        ({"prompt": "1+1=", "max_tokens": 10**400}, 422, "'max_tokens'"),
    ],
)
def test_bad_requests_get_4xx_naming_the_field_and_the_replica_survives(url, payload, status, needle):
    r = requests.post(url, json=payload, timeout=limit(30))
    assert r.status_code == status and needle in r.json()["error"], r.text
    ok = requests.post(url, json={"prompt": "1+1=", "max_tokens": 2}, timeout=limit(30))
    assert ok.status_code == 200


def test_a_huge_prompt_is_refused_before_it_is_read_or_tokenized(url):
    r = requests.post(url, json={"prompt": "x" * (2 * app_module.MAX_BODY)}, timeout=limit(30))
    assert r.status_code == 413


def test_the_app_publishes_its_openapi_schema(url):
    schema = requests.get(url.replace("/v1/completions", "/openapi.json"), timeout=limit(30)).json()
    assert "/v1/completions" in schema["paths"] and "CompletionRequest" in schema["components"]["schemas"]


def test_wrong_route_and_method_are_4xx(url):
    assert requests.get(url, timeout=limit(30)).status_code == 405
    assert requests.post(url.replace("/v1/completions", "/v1/chat"), json={}, timeout=limit(30)).status_code == 404
    assert requests.post(url, data="not json", headers={"content-type": "application/json"},
                         timeout=limit(30)).status_code == 422
