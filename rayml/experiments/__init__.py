"""Reproductions: one module per method, each exposing ``EXPERIMENT`` (an ``Experiment``).

``run(name, ...)`` and ``bench(name, ...)`` are what ``rayml run`` / ``rayml bench`` call; they
return the result record of ``rayml.results`` (and write it where asked).

Examples:
    >>> from rayml import experiments
    >>> record = experiments.run("gs-poweropt", size="tiny", seed=0)   # doctest: +SKIP
    >>> record["claims"][0]["holds"]                                   # doctest: +SKIP
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from rayml import records, registry, results, runtime
from rayml.results import Claim, Control

__all__ = ["Claim", "Control", "Experiment", "ExperimentFailed", "last_seconds", "settable", "Outcome", "SIZES", "BENCH_ALIASES", "run", "bench", "resolve_config", "parse_overrides"]

SIZES = ("tiny", "quick", "full")
# `rayml bench FAMILY` for issues that ask for one benchmark of a family of methods.
BENCH_ALIASES = {"bandits": "kl-bandit"}


@dataclass(frozen=True)
class Outcome:
    """What an experiment's ``run``/``bench`` function measured.

    Attributes:
        metrics: the method's measured numbers (nested dicts of scalars).
        baselines: ``{baseline name: {metric: value}}``.
        tables: ``{table name: [row, ...]}``, tidy long format (``metric``/``value`` columns).
        budget: what every method was given (evaluations, steps ...), recorded in ``config``.

    Wall-clock measurements belong under a ``timings`` key (in ``metrics`` or a baseline) or in
    a table whose name starts with ``timing``: the contract suite checks that everything else is
    identical for 1 and 2 workers, and only those may differ.
    """

    metrics: Mapping[str, Any]
    baselines: Mapping[str, Any] = field(default_factory=dict)
    tables: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    budget: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A method's reproduction (``run``) and benchmark (``bench``).

    Attributes:
        name: the registered method name.
        paper: the paper's title and venue.
        ray: what of it runs on Ray (the README's method table shows it).
        checked_against: what the implementation was checked against (paper text, authors'
            code, abstract and secondary sources).
        sizes: configs for ``tiny`` (tests), ``quick`` (``--quick``) and ``full``.
        run: ``run(config, seed) -> Outcome``.
        claims: the paper's claims, evaluated against the ``run`` record.
        plots: ``plots(record) -> {name: matplotlib Figure}``.
        bench_sizes, bench, bench_claims: the same for ``rayml bench``.
        check: ``check(config)`` raises ``ValueError`` naming the key for a config ``run`` would
            refuse; it does no work, so ``rayml run`` calls it before Ray starts and the registry
            contract calls it on every declared size (a full size that its own checks refuse is
            found without running it).
    """

    name: str
    paper: str
    ray: str
    checked_against: str
    sizes: Mapping[str, Mapping[str, Any]]
    run: Callable[[Mapping[str, Any], int], Outcome]
    claims: Sequence[Claim] = ()
    plots: Callable[[Mapping], Mapping[str, Any]] | None = None
    bench_sizes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    bench: Callable[[Mapping[str, Any], int], Outcome] | None = None
    bench_claims: Sequence[Claim] = ()
    check: Callable[[Mapping[str, Any]], Any] | None = None

    def __post_init__(self):
        missing = [s for s in SIZES if s not in self.sizes]
        if missing:
            raise ValueError(f"experiment {self.name!r} lacks sizes {missing}")


class ExperimentFailed(RuntimeError):
    """The experiment raised after its work had started (Ray tasks were submitted); ``__cause__``
    is what it raised. A ``ValueError`` / ``TypeError`` raised before any task (a setting the
    experiment refuses) propagates as it is: that is bad input, not a failed run."""


# --set values: a count or scale can grow at most this much past its largest declared size.
MAX_GROWTH = 100


def parse_overrides(pairs: Sequence[str]) -> dict:
    """``["key=value", ...]`` to a dict; values are parsed as JSON when they parse, else strings."""
    import json

    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {pair!r}: expected key=value")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def _check_value(key: str, value: Any, old: Any, largest: Any) -> None:
    like = f"--set {key}={value!r}: expected a value like {old!r}"
    if isinstance(old, bool) or isinstance(value, bool):
        if not (isinstance(old, bool) and isinstance(value, bool)):
            raise ValueError(like)
        return
    if isinstance(old, int) and not isinstance(value, int):
        raise ValueError(f"--set {key}={value!r}: expected an integer, like {old!r}")
    if isinstance(old, (int, float)):
        if not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"--set {key}={value!r}: expected a finite number, like {old!r}")
        if old >= 0 and value < 0:
            raise ValueError(f"--set {key}={value!r}: must be >= 0 (like {old!r})")
        cap = MAX_GROWTH * max(abs(largest), 1)
        if abs(value) > cap:
            raise ValueError(f"--set {key}={value!r}: at most {cap:g} ({MAX_GROWTH}x the largest size's "
                             f"{largest!r}); use the Python API for more")
        return
    if isinstance(old, (list, str)) and not isinstance(value, type(old)):
        raise ValueError(like)
    if isinstance(old, list) and old and value:
        kinds = {type(v) for v in old}
        if any(type(v) not in kinds and not (isinstance(v, int) and float in kinds) for v in value):
            raise ValueError(f"--set {key}={value!r}: expected a list of {sorted(k.__name__ for k in kinds)}, "
                             f"like {old!r}")
        if len(value) > MAX_GROWTH * max(len(largest) if isinstance(largest, list) else 1, 1):
            raise ValueError(f"--set {key}: at most {MAX_GROWTH}x as many entries as the largest size's")


def with_real_settings(config: Mapping[str, Any], real_models: Sequence[str]) -> dict:
    """The config a run uses: when ``config["model"]`` is one of ``real_models`` (a real pretrained
    model), the settings in ``config["real"]`` replace the substrate's; ``real`` itself is dropped."""
    config = dict(config)
    real = config.pop("real", None) or {}
    return dict(config, **real) if config["model"] in real_models else config


def resolve_config(sizes: Mapping[str, Mapping], size: str, overrides: Mapping[str, Any] | None) -> dict:
    """The config of ``size`` with ``overrides`` applied. Unknown keys, wrong types (an integer
    setting takes integers only; a list keeps its elements' types), negative values of settings
    that are not negative, and values more than ``MAX_GROWTH`` times the largest size's are
    ``ValueError``s naming the key, raised before any work."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    config = dict(sizes[size])
    for key, value in (overrides or {}).items():
        if key not in config:
            raise ValueError(f"--set {key}: unknown setting; known: {', '.join(sorted(config))}")
        old = config[key]
        declared = [sz[key] for sz in sizes.values() if key in sz]
        numbers = [abs(v) for v in declared if isinstance(v, (int, float)) and not isinstance(v, bool)]
        lists = [v for v in declared if isinstance(v, list)]
        largest = max(numbers) if numbers else (max(lists, key=len) if lists else old)
        _check_value(key, value, old, largest)
        config[key] = value
    return config


def _timings_path():
    return runtime.cache_root() / "timings.json"


def _timing_key(name: str, kind: str, size: str, overrides: Mapping[str, Any] | None) -> str:
    """``kind/name/size``, and the ``--set`` settings after a ``?`` when there are any (a SmolLM2
    variant takes an hour where the default quick run takes seconds)."""
    import json

    key = f"{kind}/{name}/{size}"
    return key + ("?" + json.dumps(dict(sorted(overrides.items())), sort_keys=True) if overrides else "")


def last_seconds(name: str, kind: str, size: str, overrides: Mapping[str, Any] | None = None) -> float | None:
    """Wall seconds of the last ``kind`` run of ``name`` at ``size`` with these ``overrides`` on this
    machine, if any."""
    import json

    try:
        return float(json.loads(_timings_path().read_text())[_timing_key(name, kind, size, overrides)])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember_seconds(name: str, kind: str, size: str, seconds: float,
                      overrides: Mapping[str, Any] | None = None) -> None:
    import json

    path = _timings_path()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
        data[_timing_key(name, kind, size, overrides)] = round(float(seconds), 1)
        results.write_json(data, path)
    except (OSError, ValueError):
        pass  # a cache that cannot be written only loses the next estimate


def settable(name: str, kind: str = "run", size: str = "quick", overrides: Mapping[str, Any] | None = None) -> dict:
    """``{key: (type name, value)}`` of the settings ``--set`` accepts for ``name`` at ``size``
    (with ``overrides`` applied and checked as ``run`` would)."""
    experiment = registry.get(BENCH_ALIASES.get(name, name) if kind == "bench" else name).load_experiment()
    sizes = experiment.sizes if kind == "run" else experiment.bench_sizes
    config = resolve_config(sizes, size, overrides)
    return {k: (type(v).__name__, v) for k, v in config.items()}


def _resume_dir(kind: str, name: str, size: str, seed: int, config: Mapping[str, Any]):
    """Where ``--resume`` keeps a run's finished chunks: one folder per (kind, method, size, seed, config)."""
    import hashlib

    digest = hashlib.sha256(json.dumps(results.to_jsonable(dict(config)), sort_keys=True).encode()).hexdigest()[:16]
    return runtime.cache_root() / "resume" / f"{kind}-{name}-{size}-seed{seed}-{digest}"


def _execute(kind: str, name: str, *, size: str, seed: int, overrides, address, json_path, out_dir,
             workers: int | None, resume: bool = False) -> dict:
    method = registry.get(name)
    if method.status != registry.IMPLEMENTED:
        raise ValueError(f"method {name!r} is planned, not implemented yet")
    registry.check_extras(name, kind)
    experiment = method.load_experiment()
    if kind == "bench" and experiment.bench is None:
        raise ValueError(f"method {name!r} has no benchmark")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    sizes = experiment.sizes if kind == "run" else experiment.bench_sizes
    config = resolve_config(sizes, size, overrides)
    if kind == "run" and experiment.check is not None:
        experiment.check(config)
    if json_path is not None:
        results.check_writable(json_path, is_dir=False)
    if out_dir is not None:
        results.check_writable(out_dir, is_dir=True)
    runtime.connect(address)
    fn = experiment.run if kind == "run" else experiment.bench
    runtime.reset_stats()
    commit = results.git_commit()  # the code this run starts from, not whatever HEAD is when it ends
    t0 = time.perf_counter()
    resume_at = _resume_dir(kind, name, size, seed, config) if resume else None
    with runtime.max_workers(workers), runtime.resume_cache(resume_at):
        try:
            outcome = fn(config, seed)
        except Exception as exc:  # noqa: BLE001 - surfaced whole as the cause
            if isinstance(exc, (ValueError, TypeError)) and not runtime.stats().get("tasks"):
                raise
            raise ExperimentFailed(f"{kind} {name!r} failed: {type(exc).__name__}: {exc}") from exc
    seconds = time.perf_counter() - t0
    if resume_at is not None:
        shutil.rmtree(resume_at, ignore_errors=True)  # finished: the next --resume starts afresh
    _remember_seconds(name, kind, size, seconds, overrides)
    record = {
        "schema_version": results.SCHEMA_VERSION,
        "name": name,
        "kind": kind,
        "size": size,
        "seed": seed,
        "paper": experiment.paper,
        "config": {**config, **({"budget": dict(outcome.budget)} if outcome.budget else {})},
        "metrics": outcome.metrics,
        "baselines": outcome.baselines,
        "claims": [],
        "summary": {},
        "claims_fingerprint": "",
        "tables": {k: list(v) for k, v in outcome.tables.items()},
        "env": results.environment(seconds, runtime.stats(), git=commit),
    }
    record = results.to_jsonable(record)
    claims = experiment.claims if kind == "run" else experiment.bench_claims
    record["claims"] = results.evaluate_claims(record, claims)
    record["summary"] = results.summarize_claims(record["claims"])
    record["claims_fingerprint"] = results.claims_fingerprint(claims)
    results.validate_record(record)
    if json_path is not None:
        records.write_record(record, json_path)  # long tables go to Parquet beside it
    if out_dir is not None:
        figures = experiment.plots(record) if (experiment.plots and kind == "run") else {}
        results.write_outputs(record, out_dir, figures)
    return record


def run(name: str, *, size: str = "full", seed: int = 0, overrides: Mapping[str, Any] | None = None,
        address: str | None = None, json_path=None, out_dir=None, workers: int | None = None,
        resume: bool = False) -> dict:
    """Run method ``name``'s reproduction and return its result record.

    Args:
        name: a registered, implemented method.
        size: ``tiny``, ``quick`` or ``full``.
        seed: the root seed; every work item's seed is spawned from it.
        overrides: settings replacing the size's config (``--set key=value``).
        address: Ray address for ``rayml.runtime.connect``.
        json_path: also write the record here (atomically); its long tables go to Parquet files in
            ``<stem>.tables/`` beside it (``rayml.records``; ``records.load_record`` reads it back
            whole). The record returned always holds every table's rows.
        out_dir: also write ``record.json``, ``results.parquet`` and plots here.
        workers: at most this many Ray tasks at once (results do not depend on it).
        resume: keep every finished Ray task's results under ``$RAYML_CACHE/resume/`` and reuse
            them when the same run (same code, size, seed and settings) is started again after a
            kill (``runtime.resume_cache``); the folder is removed when the run finishes, and the
            record's ``env.resumed_items`` says how many items were reused.
    """
    return _execute("run", name, size=size, seed=seed, overrides=overrides, address=address,
                    json_path=json_path, out_dir=out_dir, workers=workers, resume=resume)


def bench(name: str, *, size: str = "full", seed: int = 0, overrides: Mapping[str, Any] | None = None,
          address: str | None = None, json_path=None, out_dir=None, workers: int | None = None) -> dict:
    """Run method ``name``'s benchmark and return its result record (``kind: "bench"``).

    ``name`` may also be a family alias of ``BENCH_ALIASES`` (``"bandits"`` -> ``kl-bandit``).
    """
    name = BENCH_ALIASES.get(name, name)
    return _execute("bench", name, size=size, seed=seed, overrides=overrides, address=address,
                    json_path=json_path, out_dir=out_dir, workers=workers)
