"""EPIC's KV store actor: the LRU byte budget (in process, against a brute-force replay), get /
build through the Ray actor, restart after a kill (requests still answer correctly), and bad
input."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
import torch

from _timing import limit
from rayml.actors.kvstore import (KVStore, KVStoreClient, check_epic_payload, check_plain_payload, epic_layout,
                                  get_or_create_store, payload_nbytes)


def test_lru_eviction_respects_the_budget_and_matches_a_brute_force_replay():
    rng = np.random.default_rng(0)
    budget = 1000
    store = KVStore(budget)
    ref_order: list = []  # brute force: (key, nbytes) least -> most recent
    for step in range(300):
        key = f"k{int(rng.integers(0, 12))}"
        if rng.random() < 0.4:
            got = store.get(key)
            hit = [e for e in ref_order if e[0] == key]
            assert (got is not None) == bool(hit)
            if hit:
                assert got == [f"ref-{key}"]
                ref_order.remove(hit[0])
                ref_order.append(hit[0])
        else:
            nb = int(rng.integers(1, 400))
            assert store.put(key, [f"ref-{key}"], nb)
            ref_order = [e for e in ref_order if e[0] != key]
            while ref_order and sum(b for _, b in ref_order) + nb > budget:
                ref_order.pop(0)
            ref_order.append((key, nb))
        s = store.stats()
        assert s["bytes"] <= budget
        assert store.keys() == [k for k, _ in ref_order]
        assert s["bytes"] == sum(b for _, b in ref_order)
    assert store.stats()["evictions"] > 0


def test_oversized_entries_are_rejected_and_replacing_a_key_frees_its_bytes():
    store = KVStore(100)
    assert not store.put("big", ["r"], 101)
    assert store.stats()["rejected"] == 1 and store.get("big") is None
    assert store.put("a", ["r1"], 60) and store.put("a", ["r2"], 70)
    assert store.stats()["bytes"] == 70 and store.get("a") == ["r2"]
    assert store.delete("a") and not store.delete("a") and store.stats()["bytes"] == 0
    assert payload_nbytes({"x": np.zeros(3), "y": [np.zeros((2, 2), np.float32)], "z": 1.0}) == 24 + 16


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="budget_bytes"):
        KVStore(0)
    with pytest.raises(ValueError, match="model_id"):
        KVStoreClient(None, "")
    with pytest.raises(ValueError, match="ref_box"):
        KVStore(10).put("k", "not a list", 1)


def _tiny_model(seed=0, n_kv_heads=2):
    from rayml.llm.model import ModelConfig, TransformerLM

    torch.manual_seed(seed)
    return TransformerLM(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, d_ff=48,
                                     max_seq_len=128)).eval()


def test_payloads_are_checked_against_the_models_layout_and_served_only_to_that_model():
    import ray  # noqa: F401 - put_value puts into the object store of the session Ray or a local one

    from rayml.kvcache import epic

    model, other = _tiny_model(), _tiny_model(n_kv_heads=4)
    layout, good = epic_layout(model), epic.cache_to_arrays(epic.precompute_chunk(model, [5, 6, 7]))
    check_epic_payload(good, layout)
    bad = {
        "another model's chunk": epic.cache_to_arrays(epic.precompute_chunk(other, [5, 6, 7])),
        "float64": {**good, "keys": good["keys"].astype(np.float64)},
        "non-finite": {**good, "values": np.where(good["values"] > 0, np.nan, good["values"]).astype(np.float32)},
        "shifted positions": {**good, "positions": good["positions"] + 3},
        "missing values": {k: v for k, v in good.items() if k != "values"},
        "other rope": {**good, "rope_theta": 1.0},
        "mismatched": {**good, "values": good["values"][:, :, :2]},
    }
    for what, payload in bad.items():
        with pytest.raises(ValueError):
            check_epic_payload(payload, layout)
        store = KVStore(1 << 20)
        assert store.register_model("m", layout) is None
        assert not store.put_value("k", payload, "m"), what
        assert store.stats()["invalid"] == 1 and store.stats()["entries"] == 0
    store = KVStore(1 << 20)
    assert store.put_value("k0", good, "m")  # no model registered yet: the plain-data check only
    assert store.put_value("k", good, "m", layout)  # a layout registers the model: checked from now on
    assert not store.put_value("k2", good, "unregistered-model")
    assert store.get("k", "m") is not None and store.get("k", "other") is None
    with pytest.raises(ValueError, match="another layout"):
        store.register_model("m", epic_layout(other))


def test_plain_payload_check_and_the_bounded_document_mirror():
    check_plain_payload({"data": np.zeros(3, np.int16), "dtype": "bfloat16", "n": [1, 2.0]})
    for bad in ({"x": object()}, {1: np.zeros(1)}, {"x": np.array(["a"])}, [[[[[[1]]]]]]):
        with pytest.raises(ValueError):
            check_plain_payload(bad)
    store = KVStore(1 << 20, doc_budget_bytes=10)
    assert store.put_doc("a", "aaaa") and store.put_doc("b", "bbbb") and store.get_doc("a") == "aaaa"
    assert store.put_doc("c", "cccc")  # evicts b, the least recently used
    assert store.get_doc("b") is None and store.get_doc("a") == "aaaa" and store.stats()["doc_bytes"] == 8
    assert not store.put_doc("big", "x" * 11)
    with pytest.raises(ValueError, match="doc_budget_bytes"):
        KVStore(10, doc_budget_bytes=0)


def test_local_only_client_builds_every_time():
    c = KVStoreClient(None, "m")
    calls = []
    assert c.get_or_build([1, 2], lambda ids: calls.append(ids) or {"a": np.ones(2)})["a"].sum() == 2
    c.get_or_build([1, 2], lambda ids: calls.append(ids) or {"a": np.ones(2)})
    assert calls == [[1, 2], [1, 2]] and c.stats()["builds"] == 2


def _wait_restarted(store, started_before: float, timeout=60.0):
    import ray

    t0, timeout = time.time(), limit(timeout)
    while time.time() - t0 < timeout:
        try:
            if ray.get(store.stats.remote(), timeout=limit(5))["started"] != started_before:
                return
        except Exception:  # noqa: BLE001 - still down or restarting
            pass
        time.sleep(0.2)
    raise TimeoutError("store did not come back")


def _fetch_elsewhere_fn(name, model_id, ids):
    client = KVStoreClient(get_or_create_store(name), model_id)
    payload = client.get_or_build(ids, lambda _ids: None)
    return {"stats": client.stats(), "keys": np.array(payload["keys"])}


def test_store_actor_serves_hits_and_survives_a_kill_with_correct_answers(ray_session):
    import ray

    from rayml.kvcache import epic

    model = _tiny_model()
    name = f"test-kv-{uuid.uuid4().hex[:8]}"
    store = get_or_create_store(name, budget_bytes=1 << 20)
    try:
        client = KVStoreClient(store, epic.model_fingerprint(model))
        docs, query = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]], [20, 21]

        def build(ids):
            return epic.cache_to_arrays(epic.precompute_chunk(model, ids))

        def ask():
            chunks = [epic.cache_from_arrays(client.get_or_build(d, build)) for d in docs]
            return epic.answer(model, docs, query, method="legolink", k=2, chunks=chunks, bos_id=1,
                               max_new_tokens=4)

        local = epic.answer(model, docs, query, method="legolink", k=2, bos_id=1, max_new_tokens=4)
        first = ask()
        assert client.stats()["builds"] == 3
        second = ask()
        assert client.stats()["hits"] == 3 and client.stats()["builds"] == 3
        assert first.tokens == second.tokens == local.tokens
        assert torch.allclose(second.logits, local.logits, atol=1e-6)
        # another process (a replica elsewhere on the cluster) finds the store by name and reuses
        # the entries without compiling
        assert ray.get(get_or_create_store(name).stats.remote())["entries"] == 3
        fetch = ray.remote(num_cpus=0)(_fetch_elsewhere_fn)
        remote = ray.get(fetch.remote(name, client.model_id, docs[0]))
        assert remote["stats"]["hits"] == 1 and remote["stats"]["builds"] == 0
        assert np.array_equal(remote["keys"], build(docs[0])["keys"])

        started = ray.get(store.stats.remote())["started"]
        ray.kill(store, no_restart=False)  # crash: Ray restarts it, empty
        after_kill = ask()  # answered whatever the store's state (down, restarting, back)
        assert after_kill.tokens == local.tokens
        _wait_restarted(store, started)
        again = ask()
        assert again.tokens == local.tokens
        s = ray.get(store.stats.remote())
        assert s["entries"] == 3  # repopulated after the restart
        assert client.stats()["builds"] >= 6  # everything was rebuilt once the cache was lost
    finally:
        ray.kill(store, no_restart=True)
