"""``rayml list | run | bench | serve | package | doctor``: the command line.

Bad input (an unknown method, a bad flag, an unreachable ``--address``, an unwritable ``--out``)
prints one line ``rayml: error: ...`` and exits with code 2, before any work or output.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Mapping, Sequence

from rayml import registry

__all__ = ["main", "SERVE_APPS", "OPTIONAL_APPS"]

# Short names of the Serve apps, for ``rayml serve NAME``; values are import paths.
SERVE_APPS = {
    "optimize": "rayml.actors.serve.optimize:app",
    "purify": "rayml.actors.serve.purify:app",
    "generate": "rayml.actors.serve.generate:app",
    "constrained": "rayml.actors.serve.constrained:app",
    "epic": "rayml.actors.serve.epic:app",
    "emloc": "rayml.actors.serve.emloc:app",
    "generate-smollm2": "rayml.actors.serve.generate:smollm2_app",
    "constrained-smollm2": "rayml.actors.serve.constrained:smollm2_app",
    "vllm": "rayml.actors.serve.vllm_app:app",
    "refine": "rayml.actors.serve.refine:app",
}
# Apps that ``clusters/serve.yaml`` does not deploy: they need the [hf] extra and the SmolLM2
# wheel, or vLLM (a virtual environment of its own), or a trained policy in the node's cache (refine:
# ``python -m rayml.alignment.dpsdp_policy --size quick``); a cluster serves them by adding them there.
OPTIONAL_APPS = frozenset({"generate-smollm2", "constrained-smollm2", "vllm", "refine"})


class UsageError(Exception):
    """Bad input on the command line (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the whole usage otherwise)
        raise UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rayml", description="Ray-native implementations of ICML 2025 methods. "
                                          "--debug (anywhere) prints tracebacks.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ls = sub.add_parser("list", help="the registered methods and their status")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.add_argument("--markdown", action="store_true", help="print the README's method table")

    for name, what in (("run", "the method's reproduction"), ("bench", "the method's benchmark")):
        r = sub.add_parser(name, help=f"run {what} and print/write its result record")
        r.add_argument("name", help="a method name, a comma-separated list of them, or 'all'")
        size = r.add_mutually_exclusive_group()
        size.add_argument("--quick", action="store_const", const="quick", dest="size",
                          help="the quick size (well under a minute on 2 cores)")
        size.add_argument("--size", choices=("tiny", "quick", "full"), dest="size")
        r.add_argument("--seed", type=int, default=0)
        r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one setting of the config (repeatable)")
        r.add_argument("--json", dest="json_path", metavar="PATH", help="write the record here")
        r.add_argument("--out", dest="out_dir", metavar="DIR",
                       help="write record.json, results.parquet and plots here")
        r.add_argument("--address", default=None, help="Ray address: 'auto', 'host:port', 'ray://...'")
        r.add_argument("--workers", type=int, default=None, help="at most this many Ray tasks at once")
        r.add_argument("--show-config", action="store_true",
                       help="print the size's settable keys, their types and values, and exit")
        if name == "run":
            r.add_argument("--resume", action="store_true",
                           help="keep finished Ray tasks' results and reuse them when the same run is started "
                                "again after a kill (same code, size, seed and settings)")

    tr = sub.add_parser("train", help="train a named model config of rayml (e.g. the LLM substrate's)")
    tr.add_argument("name", help="a config name (rayml.llm.training.CONFIGS)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--out", default=None, help="write the checkpoint and its card here")
    tr.add_argument("--address", default=None)
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")

    pk = sub.add_parser("package", help="assemble rayml as one folder for a job's runtime_env py_modules")
    pk.add_argument("dest", help="the folder to write; prints the path to pass in py_modules")

    dr = sub.add_parser("doctor", help="where the driver and Ray workers import rayml from")
    dr.add_argument("--address", default=None)
    dr.add_argument("--tasks", type=int, default=4)

    s = sub.add_parser("serve", help="run a Serve app on the connected Ray (blocks)")
    s.add_argument("app", help=f"one of {sorted(SERVE_APPS)} or an import path 'module:app'")
    s.add_argument("--address", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; Serve has no authentication: see docs/serving.md)")
    s.add_argument("--request-timeout-s", type=float, default=60.0, dest="request_timeout_s",
                   help="Serve's per-request timeout, as in clusters/serve.yaml")
    return p


def markdown_table() -> str:
    """The README's method table, from the registry (a test keeps the README in sync)."""
    lines = ["| method | paper (ICML 2025) | family | status | what runs on Ray | checked against |",
             "|---|---|---|---|---|---|"]
    for m in registry.METHODS:
        row = registry.details(m)
        title = m.title.removesuffix(" (ICML 2025)")
        lines.append(f"| {m.name} | {title} | {m.family} | {m.status} | {row.get('ray', '')} | "
                     f"{row.get('checked_against', '')} |")
    return "\n".join(lines)


def _print_list(as_json: bool, as_markdown: bool = False) -> None:
    rows = registry.METHODS
    if as_markdown:
        print(markdown_table())
        return
    if as_json:
        print(json.dumps([registry.details(m) for m in rows], indent=1))
        return
    print(f"{'name':20} {'status':12} {'family':12} paper")
    for m in rows:
        print(f"{m.name:20} {m.status:12} {m.family:12} {m.title}")
    n = len(registry.implemented())
    print(f"\n{len(rows)} methods: {n} implemented, {len(rows) - n} planned")
    for m in registry.SUBSTRATES:
        print(f"substrate: {m.name} ({m.status}): {m.title}")


def _print_record(record: dict) -> None:
    print(f"{record['name']} ({record['kind']}, size={record['size']}, seed={record['seed']})")
    print(f"  paper: {record['paper']}")

    def flat(prefix, obj):
        for k, v in obj.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                if k == "cases":
                    continue
                yield from flat(f"{key}.", v)
            else:
                yield key, v

    base = record["baselines"]
    print("  metrics:")
    for k, v in flat("", record["metrics"]):
        print(f"    {k:38} {_fmt(v)}")
    if base:
        print("  baselines:")
        for b, vals in base.items():
            print(f"    {b}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in flat("", vals)))
    _print_claims([record])
    p, sn = record["summary"]["paper"], record["summary"]["sanity"]
    print(f"  paper claims held: {p['held']} / {p['total']} (not discriminating {p['not_discriminating']}, "
          f"incomplete {p['incomplete']}); sanity checks passed: {sn['passed']} / {sn['total']}")
    env = record["env"]
    print(f"  env: {env['seconds']} s, {env['ray_nodes']} node(s), {env['cpus']} CPUs, "
          f"{env['tasks']} Ray tasks on {env['worker_pids']} worker process(es)"
          + (f"; {env['resumed_items']} items reused from an earlier, killed run (--resume)"
             if env.get("resumed_items") else ""))


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _print_claims(records: Sequence[dict]) -> None:
    print(f"  {'method':16} {'kind':6} {'status':18} claim  [measured; controls]")
    for rec in records:
        for c in rec["claims"]:
            ctl = "; ".join(f"{x['name']} {'passes' if x['holds'] else 'fails'} [{x['measured']}]"
                            for x in c.get("controls", ()))
            source = f" ({c['source']})" if c.get("source") else ""
            print(f"  {rec['name']:16} {c['kind']:6} {c['status']:18} {c['text']}{source}  "
                  f"[{c['measured']}{'; controls: ' + ctl if ctl else ''}]")


def summary_table(records: Sequence[dict]) -> str:
    """One line per record: paper claims held / total, discriminating, sanity checks passed."""
    lines = [f"  {'method':20} {'paper held':>10} {'discrim.':>9} {'not discr.':>10} {'incompl.':>9} {'sanity':>7}"]
    for rec in records:
        if "failed" in rec:
            lines.append(f"  {rec['name']:20} FAILED: {rec['failed']}")
            continue
        p, s = rec["summary"]["paper"], rec["summary"]["sanity"]
        discriminating = sum(1 for c in rec["claims"] if c["kind"] == "paper" and c["discriminating"])
        lines.append(f"  {rec['name']:20} {p['held']:>4} / {p['total']:<3} {discriminating:>9} "
                     f"{p['not_discriminating']:>10} {p['incomplete']:>9} {s['passed']:>3} / {s['total']:<3}")
    return "\n".join(lines)


def _method_names(args) -> list[str]:
    """``all``, one method, or a comma-separated list of methods (``a,b``)."""
    from rayml import experiments

    if args.name == "all":
        names = [m.name for m in registry.runnable()]
        if args.command == "bench":
            names = [n for n in names if registry.get(n).load_experiment().bench is not None]
        return names
    names = []
    for name in args.name.split(","):
        name = name.strip()
        if args.command == "bench" and name in experiments.BENCH_ALIASES:
            names.append(experiments.BENCH_ALIASES[name])
            continue
        m = registry.get(name)
        if m.status != registry.IMPLEMENTED:
            raise UsageError(f"method {name!r} is planned, not implemented yet")
        names.append(name)
    if len(set(names)) != len(names):
        raise UsageError(f"name: a method is named twice in {args.name!r}")
    return names


def recorded_seconds(name: str, kind: str, size: str, overrides: Mapping | None = None) -> float | None:
    """Seconds of ``name``'s last run at ``size`` with these ``--set`` ``overrides``: this machine's
    own, else its committed record's (with one override ``KEY=VALUE``, the variant record
    ``NAME[@SIZE]@KEY=VALUE.json``; with several, none is known)."""
    from pathlib import Path

    from rayml import experiments

    last = experiments.last_seconds(name, kind, size, overrides)
    if last is not None or kind != "run" or len(overrides or {}) > 1:
        return last
    records = Path(__file__).resolve().parents[1] / "docs" / "records"
    stem = name if size == "quick" else f"{name}@{size}"
    for key, value in (overrides or {}).items():
        stem += f"@{key}={value if isinstance(value, str) else json.dumps(value)}"
    path = records / f"{stem}.json"
    try:
        return float(json.loads(path.read_text())["env"]["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


class _Progress:
    """One line per finished method: its time, the elapsed total and an ETA from recorded seconds."""

    def __init__(self, names: Sequence[str], kind: str, size: str):
        import time

        self._time = time.perf_counter
        self.t0 = self._time()
        self.estimates = {n: recorded_seconds(n, kind, size) for n in names}
        self.left = dict(self.estimates)
        self.n, self.done = len(names), 0
        known = [v for v in self.estimates.values() if v is not None]
        total = f"about {_clock(sum(known))}" if known else "not measured here yet"
        unknown = len(names) - len(known)
        print(f"{'running' if kind == 'run' else 'benchmarking'} {len(names)} methods at size {size}; estimated time {total}"
              f"{f' ({unknown} without a recorded time)' if unknown and known else ''}", flush=True)

    def finished(self, name: str, seconds: float, failed: str | None) -> None:
        self.done += 1
        self.left.pop(name, None)
        known = [v for v in self.left.values() if v is not None]
        eta = f"ETA {_clock(sum(known))}" if known or not self.left else "ETA unknown"
        status = f"FAILED ({failed})" if failed else "done"
        print(f"[{self.done}/{self.n}] {name}: {status} in {_clock(seconds)}; "
              f"elapsed {_clock(self._time() - self.t0)}, {eta}", flush=True)


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries the user's exception
    text = f"{type(cause).__name__}: {cause}".strip().splitlines()
    return text[0][:300] if text else type(cause).__name__


def _failed_record(name: str, kind: str, size: str, seed: int, error: str, seconds: float) -> dict:
    return {"name": name, "kind": kind, "size": size, "seed": seed, "failed": error,
            "env": {"seconds": round(seconds, 1)}}


def _run_side_by_side(kind: str, names: Sequence[str], args, size: str, progress: _Progress) -> list[dict]:
    """Each method's driver as a Ray task of its own, so that a cluster runs methods side by side."""
    import time

    import ray

    from rayml import runtime

    runtime.connect(args.address)

    @ray.remote(num_cpus=1, max_retries=0)
    def one(name: str) -> dict:
        from rayml import experiments

        fn = experiments.run if kind == "run" else experiments.bench
        return fn(name, size=size, seed=args.seed, workers=args.workers)

    started = {one.remote(n): (n, time.perf_counter()) for n in names}
    by_name, pending = {}, list(started)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        name, t0 = started[ready[0]]
        try:
            rec, failed = ray.get(ready[0]), None
        except Exception as exc:  # noqa: BLE001 - reported in the table; the others go on
            failed = _one_line(exc)
            rec = _failed_record(name, kind, size, args.seed, failed, time.perf_counter() - t0)
        progress.finished(name, time.perf_counter() - t0, failed)
        by_name[name] = rec
    return [by_name[n] for n in names]


def _run_or_bench(args) -> int:
    import time

    from rayml import experiments

    fn = experiments.run if args.command == "run" else experiments.bench
    size = args.size or "full"
    overrides = experiments.parse_overrides(args.set)
    names = _method_names(args)
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if len(names) > 1 and args.set:
        raise UsageError(f"--set applies to one method's config, not to '{args.command} {args.name}'")
    if args.show_config:
        for name in names:
            print(f"{name} ({args.command}, size={size}): settable with --set KEY=VALUE")
            for key, (typ, value) in experiments.settable(name, args.command, size, overrides).items():
                print(f"  {key:24} {typ:6} {json.dumps(value)}")
        return 0
    if len(names) > 1 and args.json_path:
        from rayml import results

        results.check_writable(args.json_path, is_dir=False)  # before any work, not after an hour
    if len(names) > 1 and args.out_dir:
        from rayml import results

        results.check_writable(args.out_dir, is_dir=True)
    if len(names) == 1:
        last = recorded_seconds(names[0], args.command, size, overrides)
        estimate = (f"about {last:.0f} s (its last recorded run{' with these settings' if overrides else ''})"
                    if last is not None else
                    "not measured with these settings yet" if overrides else "not measured here yet")
        print(f"{names[0]}: {args.command} at size {size}; estimated time {estimate}", flush=True)
        extra = {"resume": True} if getattr(args, "resume", False) else {}
        rec = fn(names[0], size=size, seed=args.seed, overrides=overrides, address=args.address,
                 json_path=args.json_path, out_dir=args.out_dir, workers=args.workers, **extra)
        _print_record(rec)
        _print_written(args.json_path, args.out_dir)
        return 0

    progress = _Progress(names, args.command, size)
    if args.address is not None and not args.out_dir:
        records = _run_side_by_side(args.command, names, args, size, progress)
        for rec in records:
            if "failed" not in rec:
                _print_record(rec)
                print()
    else:
        records = []
        for name in names:
            out_dir = f"{args.out_dir}/{name}" if args.out_dir else None
            t0 = time.perf_counter()
            try:
                extra = {"resume": True} if getattr(args, "resume", False) else {}
                rec, failed = fn(name, size=size, seed=args.seed, address=args.address, out_dir=out_dir,
                                 workers=args.workers, **extra), None
            except Exception as exc:  # noqa: BLE001 - reported in the table; the others go on
                failed = _one_line(exc)
                rec = _failed_record(name, args.command, size, args.seed, failed, time.perf_counter() - t0)
            else:
                _print_record(rec)
                _print_written(None, out_dir)
                print()
            records.append(rec)
            progress.finished(name, time.perf_counter() - t0, failed)
    failed = [r for r in records if "failed" in r]
    print(f"summary (paper claims held / total; discriminating = with controls that all fail it), "
          f"{len(records) - len(failed)} of {len(records)} methods ran in {_clock(time.perf_counter() - progress.t0)}:")
    print(summary_table(records))
    if args.json_path:
        from rayml import results

        results.write_json({"schema_version": results.SCHEMA_VERSION, "kind": f"{args.command}-all", "records": records},
                           args.json_path)
        print(f"wrote {args.json_path}")
    if failed:
        print(f"rayml: {len(failed)} of {len(records)} methods failed: " + ", ".join(r["name"] for r in failed),
              file=sys.stderr)
        return 1
    return 0


def _print_written(json_path, out_dir) -> None:
    if json_path:
        print(f"  wrote {json_path}")
    if out_dir:
        from rayml import results

        for path in results.list_outputs(out_dir):
            print(f"  wrote {path}")


def _train(args) -> int:
    import importlib.util

    from rayml import experiments, runtime

    if importlib.util.find_spec("rayml.llm.training") is None:
        raise UsageError("training is not available in this version of rayml")
    from rayml.llm import training

    overrides = experiments.parse_overrides(args.set)
    runtime.connect(args.address)
    card = training.train(args.name, seed=args.seed, out=args.out, overrides=overrides)
    print(json.dumps(card, indent=1))
    return 0


def _port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now. Checked after Ray has started, because
    Ray's own agents take ports of their own at start-up and one of them may be the asked one."""
    import socket

    if host not in ("127.0.0.1", "localhost", "0.0.0.0", "::", "::1"):
        return True  # a remote or interface address: leave the verdict to Serve
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine; a listener is not
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _serve(args) -> int:
    from ray import serve

    from rayml import runtime

    target = SERVE_APPS.get(args.app, args.app)
    if ":" not in target:
        raise UsageError(f"app {args.app!r}: expected one of {sorted(SERVE_APPS)} or 'module:app'")
    import importlib

    module, _, attr = target.partition(":")
    try:
        app = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"app {args.app!r}: cannot import {target} ({exc})") from None
    import signal
    import threading

    # Installed before start-up, so Ctrl-C during it also ends in a clean shutdown, not a traceback.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    runtime.connect(args.address)
    if args.request_timeout_s <= 0:
        raise UsageError(f"--request-timeout-s must be > 0, got {args.request_timeout_s}")
    from ray.serve.context import _get_global_client

    running = _get_global_client(raise_if_no_controller_running=False) is not None
    if not running and not _port_is_free(args.host, args.port):
        raise UsageError(f"--port {args.port}: another program already listens on {args.host}:{args.port}; "
                         "pick another port")
    serve.start(http_options={"host": args.host, "port": args.port, "request_timeout_s": args.request_timeout_s})
    serve.run(app, name=args.app.replace(":", "-").replace(".", "-"), route_prefix="/")
    print(f"serving {target} on http://{args.host}:{args.port}/ (Ctrl-C to stop)", flush=True)
    while not stop.wait(1.0):
        pass
    serve.shutdown()
    print("stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rayml`` command; returns the exit code: 0, 2 for bad input (one line,
    before any work), 1 when a run fails (one line; ``--debug`` prints the traceback)."""
    from rayml.experiments import ExperimentFailed
    from rayml.runtime import ConnectError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        args = _build_parser().parse_args(argv)
        if args.command == "list":
            _print_list(args.json, args.markdown)
            return 0
        if args.command in ("run", "bench"):
            return _run_or_bench(args)
        if args.command == "train":
            return _train(args)
        if args.command == "package":
            from rayml import runtime

            print(runtime.package_for_cluster(args.dest))
            return 0
        if args.command == "doctor":
            from rayml import runtime

            runtime.connect(args.address)
            print(json.dumps(runtime.doctor(args.tasks), indent=1))
            return 0
        return _serve(args)
    except ExperimentFailed as exc:
        if debug:
            import traceback

            traceback.print_exception(exc.__cause__ or exc, file=sys.stderr)
        print(f"rayml: {exc}".splitlines()[0] + ("" if debug else " (--debug prints the traceback)"),
              file=sys.stderr)
        return 1
    except (UsageError, ConnectError, ValueError, KeyError) as exc:
        if debug:
            import traceback

            traceback.print_exc(file=sys.stderr)
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"rayml: error: {msg}".splitlines()[0], file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
