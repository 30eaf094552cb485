"""The EPIC Serve app over real HTTP: register documents, ask with LegoLink and the baselines
(answers equal the local engine's), the app's own KV store deployment checks payloads, is
replaced after a kill with answers unchanged and goes away with the app, and bad requests get
404 / 405 / 413 / 422 while the replica stays up."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import requests

from _timing import limit
from rayml.actors.serve import epic as app_module
from rayml.llm import training
from rayml.llm.checkpoint import save_checkpoint

pytestmark = pytest.mark.slow  # starts Serve over HTTP (about 50 s here)

DOCS = ["[bako:123;tuli:456]\n", "[mosu:054;kadu:598]\n", "[lani:637;boge:865]\n"]


def _store_replicas(app_name: str) -> list:
    """The live replica actors of an app's ``EpicKVStore`` deployment."""
    import ray

    return [a for a in ray.util.list_named_actors(all_namespaces=True)
            if f"{app_name}#EpicKVStore" in a["name"]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cfg = dataclasses.replace(training.CONFIGS["tiny"], steps=4, lr=1e-2, max_seq_len=128, row_len=64)
    res = training.train_model(cfg, seed=0, evaluate=False)
    path = tmp_path_factory.mktemp("ckpt")
    save_checkpoint(path, res.model, res.tokenizer, {"name": "tiny-test"})
    return str(path)


@pytest.fixture(scope="module")
def base(serve_app, checkpoint):
    with serve_app(app_module.build(checkpoint, k=2, budget_bytes=1 << 20), "epic", "/epic") as url:
        yield url


def _local(checkpoint, docs, query, method, k, max_tokens):
    import rayml.llm
    from rayml.kvcache import epic

    lm = rayml.llm.pretrained(checkpoint)
    tok = lm.tokenizer
    out = epic.answer(lm.model, [tok.encode(d) for d in docs], tok.encode(query), method=method, k=k,
                      bos_id=tok.bos_id, eos_id=tok.eos_id, max_new_tokens=max_tokens)
    return tok.decode(out.tokens)


def test_register_ask_and_survive_a_store_kill(base, checkpoint):
    import ray

    ids = []
    for d in DOCS:
        r = requests.post(f"{base}/documents", json={"text": d}, timeout=limit(60))
        assert r.status_code == 200, r.text
        ids.append(r.json()["id"])
    assert requests.post(f"{base}/documents", json={"text": DOCS[0]}, timeout=limit(60)).json()["id"] == ids[0]
    order = [ids[2], ids[0], ids[1]]
    docs = [DOCS[2], DOCS[0], DOCS[1]]
    body = {"documents": order, "query": "?tuli:", "max_tokens": 4}
    r = requests.post(f"{base}/ask", json=body, timeout=limit(60))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["text"] == _local(checkpoint, docs, "?tuli:", "legolink", 2, 4)
    assert got["cache"]["hits"] == 3 and got["cache"]["builds"] == 0  # compiled at registration
    recomputed = {}
    for method in ("full", "naive", "cacheblend", "prefix", "prefix"):  # prefix twice: a miss, then a hit
        r = requests.post(f"{base}/ask", json={**body, "method": method}, timeout=limit(60))
        assert r.status_code == 200 and r.json()["text"] == _local(checkpoint, docs, "?tuli:", method, 2, 4)
        recomputed.setdefault(method, []).append(r.json()["recomputed_tokens"])
    # exact-prefix caching: a miss recomputes everything, a hit on the same documents only the query
    assert recomputed["prefix"] == [recomputed["full"][0], recomputed["naive"][0]]

    from ray import serve

    handle = serve.get_deployment_handle("EpicKVStore", app_name="epic")
    stats = handle.stats.remote().result(timeout_s=limit(30))
    assert stats["entries"] == 3 and len(stats["models"]) == 1 and stats["invalid"] == 0
    bogus = {"keys": np.zeros((1, 1, 2, 1), np.float32), "values": np.zeros((1, 1, 2, 1), np.float32),
             "positions": np.arange(2), "rope_theta": 10000.0}
    assert not handle.put_value.remote("k", bogus, stats["models"][0]).result(timeout_s=limit(30))  # wrong shape
    assert not handle.put_value.remote("k", bogus, "some-other-model").result(timeout_s=limit(30))  # not registered
    assert handle.stats.remote().result(timeout_s=limit(30))["invalid"] == 2
    (replica,) = _store_replicas("epic")
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)  # cache lost
    texts = []
    for _ in range(2):
        r = requests.post(f"{base}/ask", json=body, timeout=limit(60))
        assert r.status_code == 200, r.text
        texts.append(r.json()["text"])
        time.sleep(0.5)
    assert texts == [got["text"]] * 2


@pytest.mark.parametrize("route, payload, status, needle", [
    ("ask", {"documents": ["doc-0000000000000000"], "query": "?a:"}, 404, "unknown document ids"),
    ("ask", {"documents": [], "query": "?a:"}, 422, "'documents'"),
    ("ask", {"documents": ["x"], "query": 3}, 422, "'query'"),
    ("ask", {"documents": ["x"], "query": "?a:", "max_tokens": 0}, 422, "'max_tokens'"),
    ("ask", {"documents": ["x"], "query": "?a:", "method": "magic"}, 422, "'method'"),
    ("ask", {"documents": ["x"], "query": "?a:", "k": -1}, 422, "'k'"),
    ("ask", {"documents": ["x"], "query": "?a:", "extra": 1}, 422, "'extra': Extra inputs are not permitted"),
    ("documents", {"text": ""}, 422, "'text'"),
    ("documents", ["not", "an", "object"], 422, "'body'"),
    # the reproducers of the hardening issue (each was a 500)
    ("documents", {"text": "\ud800"}, 422, "'text'"),
    ("ask", {"documents": ["x"], "query": "\ud800"}, 422, "'query'"),
    ("documents", {"text": "[bako:123]" * 200}, 413, "context length"),
    ("nowhere", {}, 404, "Not Found"),
])
def test_bad_requests_get_4xx_and_the_replica_stays_up(base, route, payload, status, needle):
    r = requests.post(f"{base}/{route}", json=payload, timeout=limit(60))
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
    ok = requests.post(f"{base}/documents", json={"text": DOCS[0]}, timeout=limit(60))
    assert ok.status_code == 200


def test_over_length_prompt_malformed_json_and_get(base):
    ids = [requests.post(f"{base}/documents", json={"text": t}, timeout=limit(60)).json()["id"]
           for t in ("[bako:123;tuli:456;mosu:054]" * 3, "[kadu:598;lani:637;boge:865]" * 3)]
    r = requests.post(f"{base}/ask", json={"documents": ids * 4, "query": "?tuli:", "max_tokens": 8}, timeout=limit(60))
    assert r.status_code == 413 and "context length" in r.json()["error"]
    r = requests.post(f"{base}/ask", data=b"{not json", headers={"content-type": "application/json"}, timeout=limit(60))
    assert r.status_code == 422 and "JSON" in r.json()["error"]
    assert requests.get(f"{base}/ask", timeout=limit(60)).status_code == 405
    r = requests.post(f"{base}/ask", json={"documents": ids[:1], "query": "?tuli:", "max_tokens": 2}, timeout=limit(60))
    assert r.status_code == 200


def test_the_document_registry_is_bounded(base, checkpoint):
    import ray
    from ray import serve

    from rayml.actors.serve import epic

    def named_rayml():
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "rayml"}

    before = named_rayml()
    serve.run(epic.build(checkpoint, k=2, max_registered=2), name="epic-bounded", route_prefix="/epicb")
    other = base.rsplit("/epic", 1)[0] + "/epicb"
    try:
        ids = [requests.post(f"{other}/documents", json={"text": t}, timeout=limit(60)).json()["id"] for t in DOCS[:3]]
        # the replica forgot the oldest, but the store's mirror brings it back on use
        r = requests.post(f"{other}/ask", json={"documents": ids[:1], "query": "?tuli:", "max_tokens": 2},
                          timeout=limit(60))
        assert r.status_code == 200, r.text
        assert len(_store_replicas("epic-bounded")) == 1
    finally:
        serve.delete("epic-bounded")
    deadline = time.time() + limit(60)
    while _store_replicas("epic-bounded") and time.time() < deadline:
        time.sleep(0.5)
    assert not _store_replicas("epic-bounded")  # the store is the app's: deleted with it
    assert named_rayml() <= before  # and no cluster-wide named store was made


def test_the_app_publishes_its_openapi_schema(base):
    schema = requests.get(f"{base}/openapi.json", timeout=limit(60)).json()
    assert {"/documents", "/ask"} <= set(schema["paths"])
