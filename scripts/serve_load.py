"""Mixed load against rayml's five Serve apps: valid, poison and malformed requests, per-app counts.

Usage::

    python scripts/serve_load.py [--requests N] [--concurrency C] [--seed S]

It starts a local Ray (2 CPUs, no dashboard) and Serve bound to 127.0.0.1 on a free port, deploys
the five apps of ``rayml.actors.serve`` in that one Serve instance under their own route prefixes
(``/optimize``, ``/purify``, ``/generate``, ``/constrained``, ``/epic``; generate, constrained and
epic serve the shipped ``base`` checkpoint, each replica with a quarter CPU so all five fit), then
sends each app ``N`` requests (default 60) from ``C`` client threads (default 8), drawn with a
seeded RNG from three kinds:

* ``valid``: small, cheap requests that must answer 2xx;
* ``poison``: requests that pass the request model but fail in the app's own work (a prompt over
  the context length, an unknown document id, a regex that does not compile, an image of the wrong
  shape); each must get its own 4xx without failing the valid requests around it;
* ``malformed``: bodies that must be refused by parsing / validation (truncated JSON, wrong types,
  401-digit integers, NaN / Infinity, lone surrogates, deep nesting, wrong content types, an empty
  body, seeded random bytes): each must get a 4xx.

It prints, per app: requests sent, 2xx, 4xx, 5xx (and transport errors), and the p50 / p99
latency of the valid requests, then every 5xx it saw (app, kind, body prefix, status, error) and
exits 1 if there was any. The latencies are wall-clock on whatever machine runs it: on a shared
machine they measure the load as much as the apps. The helpers (``deploy_all``,
``valid_bodies``, ``poison_bodies``, ``malformed_bodies``) are reused by
``tests/actors/serve/test_reliability.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

JSON = "application/json"
DOCS = ["[bako:123;tuli:456]\n", "[mosu:054;kadu:598]\n"]
# a valid JSON body under a wrong content type: answered as JSON (FastAPI reads the body as JSON
# whatever its declared type) or refused; either is fine, a 5xx is not
LENIENT = ("valid JSON as text/plain", "valid JSON as image/png")
GEN_LIMITS = {"compile_timeout_s": 3.0, "max_source_chars": 2000}

# --- the apps -----------------------------------------------------------------------------------------


def deploy_all(root: str = "", *, skip: tuple = ()) -> dict:
    """Deploy the five apps (each under its route prefix) on the running Serve in one ``serve.run_many``,
    so their replicas start side by side rather than one app after another, and wait until every one runs;
    returns ``{app: base url}`` given ``root`` (``http://127.0.0.1:port``). ``skip`` names apps
    already running. The epic app's KV store is its own deployment (deleted with the app)."""
    from ray import serve

    try:
        from ray.serve.api import RunTarget
    except ImportError:  # Ray without run_many: a stand-in with the same fields
        from collections import namedtuple

        RunTarget = namedtuple("RunTarget", "target name route_prefix")

    from rayml.actors.serve import constrained, epic, generate, optimize, purify

    opts = {"ray_actor_options": {"num_cpus": 0.25}}
    apps = {
        "optimize": lambda: optimize.Optimizer.options(**opts).bind(),
        "purify": lambda: purify.Purifier.options(**opts).bind(),
        "generate": lambda: generate.Generator.options(**opts).bind("base"),
        "constrained": lambda: constrained.ConstrainedGenerator.options(**opts).bind("base", GEN_LIMITS, 16, 30.0),
        "epic": lambda: epic.EpicServer.options(**opts).bind("base", 2, epic.EpicKVStore.bind(8 << 20), 256),
    }
    targets = [RunTarget(make(), name=name, route_prefix=f"/{name}") for name, make in apps.items() if name not in skip]
    if not targets:
        pass
    elif hasattr(serve, "run_many"):  # a developer API of newer Rays than the oldest rayml takes (2.40)
        serve.run_many(targets, wait_for_applications_running=True)
    else:
        for t in targets:
            serve.run(t.target, name=t.name, route_prefix=t.route_prefix)
    return {name: f"{root}/{name}" for name in apps}


def endpoints(bases: dict) -> dict:
    """``{endpoint name: url}`` for the six endpoints of the five apps."""
    return {"optimize": f"{bases['optimize']}/", "purify": f"{bases['purify']}/",
            "generate": f"{bases['generate']}/v1/completions",
            "constrained": f"{bases['constrained']}/v1/completions",
            "epic/documents": f"{bases['epic']}/documents", "epic/ask": f"{bases['epic']}/ask"}


def register_docs(urls: dict, session=None) -> list[str]:
    """Register ``DOCS`` with the epic app; their ids (needed by valid ``/ask`` bodies)."""
    import requests

    s = session or requests
    ids = []
    for d in DOCS:
        r = s.post(urls["epic/documents"], json={"text": d}, timeout=120)
        r.raise_for_status()
        ids.append(r.json()["id"])
    return ids


# --- the bodies -----------------------------------------------------------------------------------------


def valid_bodies(doc_ids: list[str]) -> dict:
    """``{endpoint: a small valid JSON body}``."""
    return {
        "optimize": {"function": "ackley", "dim": 2, "iterations": 5, "samples": 4, "seed": 1},
        "purify": {"image": [[0.5] * 8 for _ in range(8)], "seed": 0, "method": "gdmp", "ssni": None},
        "generate": {"prompt": "317+845=", "max_tokens": 2, "temperature": 0},
        "constrained": {"prompt": "code:", "max_tokens": 4, "temperature": 0, "regex": "[0-9]{2}"},
        "epic/documents": {"text": DOCS[0]},
        "epic/ask": {"documents": doc_ids[:2], "query": "?tuli:", "max_tokens": 2},
    }


def poison_bodies(doc_ids: list[str]) -> dict:
    """``{endpoint: [bodies that pass the request model but fail in the app's own work]}``."""
    long_text = "12+34=" * 800  # ~2,400 tokens: over the base checkpoint's 2,048 context
    return {
        "optimize": [{"function": "ackley", "dim": 3, "x0": [1.0, 2.0]}],  # x0 of the wrong length
        "purify": [{"image": [[0.5] * 8] * 7}, {"image": [[2.0] * 8] * 8}],  # wrong shape, out of [0, 1]
        "generate": [{"prompt": long_text, "max_tokens": 4}],
        "constrained": [{"prompt": "a", "regex": "[0-9"}, {"prompt": "a", "grammar": "root ::= nothing_here"},
                        {"prompt": long_text, "regex": "[0-9]"}],
        "epic/documents": [{"text": "[bako:123]" * 400}],
        "epic/ask": [{"documents": ["doc-0000000000000000"], "query": "?a:"},
                     {"documents": doc_ids[:1] * 200, "query": "?tuli:"}],
    }


def _raw(obj) -> bytes:
    return json.dumps(obj).encode()


def malformed_bodies(valid: dict, seed: int = 0) -> list[tuple[str, bytes, str]]:
    """``[(label, body bytes, content type)]``: malformed variants of the valid body ``valid``
    that every endpoint must refuse with a 4xx."""
    rng = random.Random(seed)
    text = _raw(valid)
    out = [(f"truncated@{k}", text[:k], JSON) for k in sorted({1, 2, len(text) // 3, len(text) // 2, len(text) - 1})]
    for label, raw in [("array", b"[]"), ("string", b'"x"'), ("number", b"1"), ("null", b"null"), ("true", b"true"),
                       ("list", b"[1, 2]"), ("nested-object", b'{"a": {"b": {}}}')]:
        out.append((f"top-level {label}", raw, JSON))
    huge = "1" + "0" * 400
    out += [("top-level huge int", huge.encode(), JSON), ("top-level NaN", b"NaN", JSON),
            ("top-level Infinity", b"Infinity", JSON), ("top-level 1e400", b"1e400", JSON),
            ("top-level lone surrogate", b'"\\ud800"', JSON), ("raw surrogate bytes", b'{"a": "\xed\xa0\x80"}', JSON),
            ("deep arrays 30000", b"[" * 30000 + b"]" * 30000, JSON), ("deep arrays 2000", b"[" * 2000 + b"]" * 2000, JSON),
            ("deep objects 3000", b'{"a":' * 3000 + b"1" + b"}" * 3000, JSON),
            ("empty body", b"", JSON), ("whitespace body", b"   ", JSON),
            (LENIENT[0], text, "text/plain"), (LENIENT[1], text, "image/png"),
            ("text/plain, not JSON", b"hello", "text/plain"), ("form", b"a=1&b=2", "application/x-www-form-urlencoded"),
            ("multipart", b"--x\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--x--\r\n",
             "multipart/form-data; boundary=x"),
            ("png magic, garbage", b"\x89PNG\r\n\x1a\n" + b"\0" * 64, JSON),
            ("bad utf-8", b'{"a": "\xff\xfe"}', JSON)]
    out += [(f"random bytes #{i}", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 512))), JSON)
            for i in range(6)]
    # field-wise: every field of the valid body replaced by a value no field accepts
    bad_values = {"401-digit int": huge, "-401-digit int": "-" + huge, "NaN": "NaN", "Infinity": "Infinity",
                  "-Infinity": "-Infinity", "1e400": "1e400", "lone surrogate": '"\\ud800"',
                  "deep arrays": "[" * 3000 + "]" * 3000, "object": '{"x": 1}', "5000-digit float": "9" * 5000 + ".5"}
    for field in valid:
        for label, value in bad_values.items():
            body = {k: ("@@" if k == field else v) for k, v in valid.items()}
            raw = json.dumps(body).replace('"@@"', value).encode()
            out.append((f"{field}={label}", raw, JSON))
    return out


# --- the load -----------------------------------------------------------------------------------------


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def run_load(urls: dict, doc_ids: list[str], *, n: int, concurrency: int, seed: int = 0) -> tuple[dict, list]:
    """Send ``n`` mixed requests per app (``epic`` splits its share over its two endpoints);
    returns ``({app: counts and latencies}, [5xx records])``."""
    import requests

    valid, poison = valid_bodies(doc_ids), poison_bodies(doc_ids)
    rng = random.Random(seed)
    plan = []  # (app, endpoint, kind, body bytes, content type)
    for ep in urls:
        app = ep.split("/")[0]
        bad = malformed_bodies(valid[ep], seed=rng.randrange(1 << 30))
        for _ in range(n // 2 if app == "epic" else n):
            u = rng.random()
            if u < 0.6:
                plan.append((app, ep, "valid", _raw(valid[ep]), JSON))
            elif u < 0.8:
                plan.append((app, ep, "poison", _raw(rng.choice(poison[ep])), JSON))
            else:
                label, raw, ctype = rng.choice(bad)
                kind = "lenient" if label in LENIENT else "malformed"
                plan.append((app, ep, f"{kind}: {label}", raw, ctype))
    rng.shuffle(plan)

    def send(item):
        app, ep, kind, raw, ctype = item
        t0 = time.perf_counter()
        try:
            r = requests.post(urls[ep], data=raw, headers={"content-type": ctype}, timeout=300)
            status, text = r.status_code, r.text[:300]
        except requests.RequestException as exc:
            status, text = None, f"{type(exc).__name__}: {exc}"[:300]
        return app, ep, kind, raw, status, text, time.perf_counter() - t0

    with ThreadPoolExecutor(max_workers=concurrency) as ex:
        results = list(ex.map(send, plan))
    stats: dict = {}
    errors = []
    for app, ep, kind, raw, status, text, dt in results:
        s = stats.setdefault(app, {"sent": 0, "2xx": 0, "4xx": 0, "5xx": 0, "no answer": 0, "valid_lat": [],
                                   "valid not 2xx": 0, "invalid 2xx": 0})
        s["sent"] += 1
        if status is None:
            s["no answer"] += 1
        else:
            s[f"{status // 100}xx"] = s.get(f"{status // 100}xx", 0) + 1
        if kind == "valid":
            s["valid_lat"].append(dt)
            s["valid not 2xx"] += status is None or status // 100 != 2
        elif status is not None and status // 100 == 2 and not kind.startswith("lenient"):
            s["invalid 2xx"] += 1
        if status is None or status >= 500:
            errors.append({"app": app, "endpoint": ep, "kind": kind, "body": raw[:120], "status": status,
                           "error": text})
    return stats, errors


def print_table(stats: dict, out=sys.stdout) -> None:
    head = f"{'app':<12}{'sent':>6}{'2xx':>6}{'4xx':>6}{'5xx':>6}{'no ans':>8}{'valid!2xx':>11}" \
           f"{'bad 2xx':>9}{'p50 ms':>9}{'p99 ms':>9}"
    print(head, file=out)
    for app, s in stats.items():
        lat = s["valid_lat"]
        print(f"{app:<12}{s['sent']:>6}{s['2xx']:>6}{s['4xx']:>6}{s['5xx']:>6}{s['no answer']:>8}"
              f"{s['valid not 2xx']:>11}{s['invalid 2xx']:>9}{1e3 * percentile(lat, 50):>9.0f}"
              f"{1e3 * percentile(lat, 99):>9.0f}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=60, help="requests per app (default 60)")
    ap.add_argument("--concurrency", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 1 <= args.requests <= 100_000 or not 1 <= args.concurrency <= 256:
        ap.error("--requests must be in [1, 100000] and --concurrency in [1, 256]")

    import ray
    from ray import serve

    from rayml.actors.serve.http import serve_port

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 << 20, log_to_driver=False)
    port = serve_port()
    bases = deploy_all(f"http://127.0.0.1:{port}")
    try:
        urls = endpoints(bases)
        doc_ids = register_docs(urls)
        t0 = time.perf_counter()
        stats, errors = run_load(urls, doc_ids, n=args.requests, concurrency=args.concurrency, seed=args.seed)
        print(f"{sum(s['sent'] for s in stats.values())} requests in {time.perf_counter() - t0:.1f} s, "
              f"concurrency {args.concurrency}, seed {args.seed}")
        print_table(stats)
        for e in errors:
            print(f"5xx / no answer: {e}")
    finally:
        serve.shutdown()
        ray.shutdown()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
