"""Reliability of the five Serve apps over real HTTP (issue 21): a fuzzer-style malformed-body sweep
over every endpoint (4xx, never 5xx), validation-passing requests that fail in the app's own work
answered alone, a small request not starved by near-maximal prompts in flight, and a replica killed
under load (the failed-request count is printed; only recovery is asserted).

All five apps run in one Serve instance on a loopback port under their own route prefixes (the
deployment code is ``scripts/serve_load.py``'s ``deploy_all``, which the load script also uses).
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from _timing import limit, wait_for

pytestmark = pytest.mark.slow  # five Serve apps over HTTP


def _load_script():
    path = Path(__file__).resolve().parents[3] / "scripts" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("rayml_serve_load", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


load = _load_script()


@pytest.fixture(scope="module")
def apps(serve_app):
    """``(endpoint urls, registered epic document ids)`` with all five apps running."""
    from rayml.actors.serve import optimize

    first = optimize.Optimizer.options(ray_actor_options={"num_cpus": 0.25}).bind()
    with serve_app(first, "optimize", "/optimize") as base:
        root = base.rsplit("/optimize", 1)[0]
        bases = load.deploy_all(root, skip=("optimize",))
        urls = load.endpoints(bases)
        yield urls, load.register_docs(urls)


def _post(url, body, timeout=120):
    return requests.post(url, json=body, timeout=limit(timeout))


def _assert_valid_answers(urls, doc_ids):
    for ep, body in load.valid_bodies(doc_ids).items():
        r = _post(urls[ep], body)
        assert r.status_code == 200, (ep, r.status_code, r.text[:300])


def test_malformed_body_sweep_gets_4xx_on_every_endpoint(apps):
    urls, doc_ids = apps
    valid = load.valid_bodies(doc_ids)
    bad, lenient = [], []
    sent = 0
    with requests.Session() as s:
        for i, (ep, url) in enumerate(urls.items()):
            for label, raw, ctype in load.malformed_bodies(valid[ep], seed=i):
                r = s.post(url, data=raw, headers={"content-type": ctype}, timeout=limit(120))
                sent += 1
                if label in load.LENIENT and r.status_code < 500:
                    lenient.append((ep, label, r.status_code))  # a valid body under a wrong type
                elif not 400 <= r.status_code < 500:
                    bad.append((ep, label, r.status_code, r.text[:200]))
    print(f"malformed sweep: {sent} requests over {len(urls)} endpoints, {len(bad)} not 4xx; "
          f"valid JSON under a wrong content type: {lenient}")
    assert sent > 300 and not bad, bad
    _assert_valid_answers(urls, doc_ids)  # every app still answers after the sweep


def test_requests_failing_in_their_own_work_fail_alone(apps):
    """Poison requests (they pass the request model, then fail in the app's work: a prompt over the
    context length, a regex that does not compile, unknown documents, a wrong image shape) sent
    concurrently with valid ones: each poison gets its own 4xx, every valid request a 200.

    A request that passes validation and then fails *inside a generation batch* could not be
    constructed over HTTP (extreme ``top_p`` / ``temperature`` / ``seed`` values within the model's
    bounds all generate); the batch-isolation mechanism itself is tested in ``test_http.py``."""
    urls, doc_ids = apps
    valid, poison = load.valid_bodies(doc_ids), load.poison_bodies(doc_ids)
    plan = []
    for ep in urls:
        plan += [(ep, valid[ep], True)] * 3 + [(ep, p, False) for p in poison[ep]]
    with ThreadPoolExecutor(max_workers=12) as ex:
        got = list(ex.map(lambda item: (item, _post(urls[item[0]], item[1], timeout=300)), plan))
    wrong = [(ep, ok, r.status_code, r.text[:200]) for (ep, _, ok), r in got
             if ((r.status_code != 200) if ok else not 400 <= r.status_code < 500)]
    assert not wrong, wrong


def _latency(url, body) -> float:
    t0 = time.perf_counter()
    r = _post(url, body)
    assert r.status_code == 200, r.text
    return time.perf_counter() - t0


def test_a_small_request_is_not_starved_by_slow_prompts(apps):
    """Eight clients sending prompts just under the 256 KiB body cap (~360,000 tokens each: seconds
    of tokenizing, which holds the GIL) to the generate app; a small request's median latency stays
    within ``FACTOR`` times its median latency alone. The app refuses such a prompt by its byte
    length before tokenizing (it cannot fit the context), which is what keeps the replica
    responsive: with tokenizing first, the ratio measured 66-70x.

    FACTOR = 15 is generous on purpose: the big prompts are tokenized off the event loop, but they
    still take the replica's CPU share (a quarter CPU here, on a machine whose 2 cores are shared
    with other work), so the small request's own tokenizing and decoding run several times slower
    under fair CPU sharing; before the fix it waited for every big prompt in turn (32.6 s against
    well under a second alone in the issue, a ratio far above 15)."""
    FACTOR = 15
    urls, _ = apps
    url = urls["generate"]
    small = {"prompt": "317+845=", "max_tokens": 2, "temperature": 0}
    _latency(url, small)  # warm
    alone = statistics.median(_latency(url, small) for _ in range(5))
    big = {"prompt": "12+34= " * 36_000, "max_tokens": 1}  # ~252 KB of JSON
    from rayml.actors.serve.generate import MAX_BODY

    assert len(load._raw(big)) < MAX_BODY  # a valid body: read, parsed and tokenized
    codes: list = []

    def send_big():
        for _ in range(4):  # keep the replica busy with big bodies while the small ones are timed
            codes.append(_post(url, big, timeout=300).status_code)

    threads = [threading.Thread(target=send_big) for _ in range(8)]
    for t in threads:
        t.start()
    loaded = [_latency(url, small) for _ in range(5)]  # while the big bodies are being sent
    for t in threads:
        t.join(timeout=limit(300))
    print(f"small request alone {alone * 1e3:.0f} ms, under 8 slow prompts {[round(x * 1e3) for x in loaded]} ms; "
          f"big prompts answered {codes}")
    assert codes == [400] * 32  # over the context length, refused by their byte length before tokenizing
    assert statistics.median(loaded) <= FACTOR * alone, (alone, loaded)


def _replica_actor(app: str):
    """A live replica actor of ``app`` (found through the GCS actor table, no dashboard needed)."""
    import ray

    for info in ray._private.state.state.actor_table(None).values():
        name = info.get("Name", "")
        if info.get("State") == "ALIVE" and name.startswith(f"SERVE_REPLICA::{app}#"):
            return ray.get_actor(name, namespace="serve")
    raise LookupError(f"no live replica of {app}")


def test_replica_kill_under_load_recovers(apps):
    import ray

    urls, _ = apps
    url = urls["generate"]
    body = {"prompt": "317+845=", "max_tokens": 2, "temperature": 0}
    replica = _replica_actor("generate")
    outcomes: list = []
    stop = threading.Event()

    def client():
        for _ in range(60):  # bounded
            if stop.is_set():
                return
            try:
                r = _post(url, body, timeout=60)
                outcomes.append(r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:120]}")
            except requests.RequestException as exc:
                outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    # the kill lands under load: wait for answers to come back (not a fixed sleep a busy machine outruns)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: len(outcomes) >= 4, 60, what="answers before the kill")
    before = len(outcomes)
    ray.kill(replica, no_restart=False)
    killed_at = time.perf_counter()
    with contextlib.suppress(TimeoutError):  # and the load goes on across the kill
        wait_for(lambda: len(outcomes) >= before + 4 or not any(t.is_alive() for t in threads), 30,
                 what="answers after the kill")
    stop.set()
    for t in threads:
        t.join(timeout=limit(120))
    recovered = None
    deadline = time.monotonic() + limit(120)  # bounded: about 2 minutes on an idle machine
    while recovered is None and time.monotonic() < deadline:
        try:
            if _post(url, body, timeout=30).status_code == 200:
                recovered = time.perf_counter() - killed_at
                break
        except requests.RequestException:
            pass
        time.sleep(1.0)
    failed = [o for o in outcomes if o != 200]
    print(f"replica kill under load (generate): {len(outcomes)} requests ({before} before the kill), "
          f"{len(failed)} failed {sorted(set(map(str, failed)))}; answering again {recovered} s after the kill")
    assert recovered is not None, "the generate app did not answer again after its replica was killed"
