"""The EMLoC Serve app over real HTTP: a task's demonstrations are compressed once and the memory
is reused from the app's Ray KV store (the second request is a store hit, no rebuild), answers
equal the local engine's, a killed store costs a rebuild only, and bad requests get 4xx JSON
naming the field while the replica stays up."""

from __future__ import annotations

import dataclasses
import time

import pytest
import requests

from _timing import limit
from rayml.actors.serve import emloc as app_module
from rayml.llm import training
from rayml.llm.checkpoint import save_checkpoint

pytestmark = pytest.mark.slow  # starts Serve over HTTP

PAIRS = [("bako", "123"), ("tuli", "456"), ("mosu", "054"), ("kadu", "598"), ("lani", "637"), ("boge", "865")]
DEMOS = [{"prompt": f"[{k}:", "answer": v, "end": "]\n"} for k, v in PAIRS]
QUERIES = ["?tuli:", "?lani:"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cfg = dataclasses.replace(training.CONFIGS["tiny"], steps=4, lr=1e-2, max_seq_len=128, row_len=64)
    res = training.train_model(cfg, seed=0, evaluate=False)
    path = tmp_path_factory.mktemp("ckpt")
    save_checkpoint(path, res.model, res.tokenizer, {"name": "tiny-test"})
    return str(path)


@pytest.fixture(scope="module")
def base(serve_app, checkpoint):
    with serve_app(app_module.build(checkpoint, budget_bytes=8 << 20), "emloc", "/emloc") as url:
        yield url


def _local(checkpoint, delta, queries, max_tokens):
    import rayml.llm
    from rayml.kvcache import emloc

    lm = rayml.llm.pretrained(checkpoint)
    tok = lm.tokenizer
    demos = [emloc.Demo(tok.encode(d["prompt"]), tok.encode(d["answer"]), tok.encode(d["end"])) for d in DEMOS]
    mem = emloc.compress(lm.model, demos, emloc.EMLoCConfig(delta=delta), bos_id=tok.bos_id).memory
    outs = [emloc.answer(lm.model, mem, tok.encode(q), max_new_tokens=max_tokens, eos_id=tok.eos_id) for q in queries]
    return mem, [tok.decode(o) for o in outs]


def _post(url, body):
    return requests.post(url, json=body, timeout=limit(120))


def test_the_second_request_reuses_the_stored_memory(base, checkpoint):
    body = {"demonstrations": DEMOS, "delta": 0.05}
    first = _post(f"{base}/memories", body)
    assert first.status_code == 200, first.text
    first = first.json()
    assert first["cache"]["builds"] == 1 and first["cache"]["misses"] == 1 and first["cache"]["hits"] == 0
    second = _post(f"{base}/memories", body).json()
    assert second["id"] == first["id"]
    assert second["cache"]["hits"] == 1 and second["cache"]["builds"] == 0  # served from the store
    mem, answers = _local(checkpoint, 0.05, QUERIES, 4)
    assert first["tokens_per_layer"] == mem.tokens_per_layer() == second["tokens_per_layer"]
    assert first["n_tokens"] == mem.n_tokens and first["kept_fraction"] < 1.0  # delta 0.05 prunes
    for _ in range(2):  # every ask reads the memory from the store
        r = _post(f"{base}/ask", {"memory": first["id"], "queries": QUERIES, "max_tokens": 4})
        assert r.status_code == 200, r.text
        assert r.json()["answers"] == answers
        assert r.json()["cache"]["hits"] == 1 and r.json()["cache"]["builds"] == 0

    exact = _post(f"{base}/memories", {"demonstrations": DEMOS, "delta": 0.0}).json()  # other settings, other memory
    assert exact["id"] != first["id"] and exact["cache"]["builds"] == 1 and exact["kept_fraction"] == 1.0

    from ray import serve

    stats = serve.get_deployment_handle("EmlocKVStore", app_name="emloc").stats.remote().result(timeout_s=limit(30))
    assert stats["entries"] == 2 and stats["invalid"] == 0 and stats["hits"] >= 3


def test_a_lost_store_costs_a_rebuild_only(base, checkpoint):
    import ray

    body = {"demonstrations": DEMOS[:4], "delta": 0.05}
    mid = _post(f"{base}/memories", body).json()["id"]
    (replica,) = [a for a in ray.util.list_named_actors(all_namespaces=True) if "emloc#EmlocKVStore" in a["name"]]
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
    deadline, r = time.time() + limit(60), None
    while time.time() < deadline:
        r = _post(f"{base}/ask", {"memory": mid, "queries": QUERIES[:1]})
        if r.status_code == 404:
            break
        time.sleep(0.5)
    assert r.status_code == 404 and "post its demonstrations" in r.json()["error"]
    again = _post(f"{base}/memories", body)
    assert again.status_code == 200 and again.json()["id"] == mid and again.json()["cache"]["builds"] == 1
    assert _post(f"{base}/ask", {"memory": mid, "queries": QUERIES[:1]}).status_code == 200


@pytest.mark.parametrize("route, payload, status, needle", [
    ("memories", {"demonstrations": []}, 422, "'demonstrations'"),
    ("memories", {"demonstrations": [{"prompt": "[a:", "answer": ""}]}, 422, "'demonstrations.0.answer'"),
    ("memories", {"demonstrations": [{"prompt": "[a:", "answer": "1", "label": 2}]}, 422, "'demonstrations.0.label'"),
    ("memories", {"demonstrations": DEMOS, "pool": 4}, 422, "'pool'"),
    ("memories", {"demonstrations": DEMOS, "delta": -0.1}, 422, "'delta'"),
    ("memories", {"demonstrations": DEMOS, "chunk_size": 0}, 422, "'chunk_size'"),
    ("memories", {"demonstrations": [{"prompt": "\ud800", "answer": "1"}]}, 422, "'demonstrations.0.prompt'"),
    ("memories", {"demonstrations": DEMOS * 20}, 413, "context length"),
    ("memories", ["not", "an", "object"], 422, "'body'"),
    ("ask", {"memory": "0" * 64, "queries": ["?a:"]}, 404, "unknown memory"),
    ("ask", {"memory": "not-an-id", "queries": ["?a:"]}, 422, "'memory'"),
    ("ask", {"memory": "0" * 64, "queries": []}, 422, "'queries'"),
    ("ask", {"memory": "0" * 64, "queries": [""]}, 422, "'queries'"),
    ("ask", {"memory": "0" * 64, "queries": ["?a:"], "max_tokens": 0}, 422, "'max_tokens'"),
    ("nowhere", {}, 404, "Not Found"),
])
def test_bad_requests_get_4xx_and_the_replica_stays_up(base, route, payload, status, needle):
    r = requests.post(f"{base}/{route}", json=payload, timeout=limit(60))
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
    assert _post(f"{base}/memories", {"demonstrations": DEMOS[:2]}).status_code == 200


def test_over_length_ask_malformed_json_get_and_schema(base):
    made = _post(f"{base}/memories", {"demonstrations": DEMOS * 2})  # 122 of the checkpoint's 128 positions
    assert made.status_code == 200, made.text
    r = _post(f"{base}/ask", {"memory": made.json()["id"], "queries": ["?tuli:"], "max_tokens": 8})
    assert r.status_code == 413 and "context length" in r.json()["error"]
    r = requests.post(f"{base}/ask", data=b"{not json", headers={"content-type": "application/json"}, timeout=limit(60))
    assert r.status_code == 422 and "JSON" in r.json()["error"]
    assert requests.get(f"{base}/ask", timeout=limit(60)).status_code == 405
    schema = requests.get(f"{base}/openapi.json", timeout=limit(60)).json()
    assert {"/memories", "/ask"} <= set(schema["paths"])
