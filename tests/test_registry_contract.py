"""The shared contract suite: every implemented method's experiment, at its ``tiny`` size.

Like optax's ``_common_test.py``: one parametrised suite over the registry. Each experiment
writes a valid result record, evaluates its declared claims (never its own verdict), and rejects
bad input with a clear error before any work. That the numbers do not depend on how many Ray
workers ran them is checked where the same tiny run is repeated anyway:
``tests/test_scaleout_cache.py`` runs every method on a two-node cluster (at least two worker
processes) and compares with this suite's one-worker record (``tiny_record``).
"""

from __future__ import annotations

import pytest

from conftest import record_numbers
from rayml import experiments, records, registry, results

IMPLEMENTED = [m.name for m in registry.runnable()]
BENCHED = [n for n in IMPLEMENTED if registry.get(n).load_experiment().bench is not None]



def test_the_registry_matches_methods_md():
    assert len(registry.METHODS) == 38
    assert len(set(registry.names())) == 38
    assert "gs-poweropt" in IMPLEMENTED
    for m in registry.METHODS:
        assert m.title.endswith("(ICML 2025)") and m.family and m.module.startswith("rayml.")


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_experiment_declares_sizes_claims_and_provenance(name):
    exp = registry.get(name).load_experiment()
    assert exp.name == name
    assert set(exp.sizes) == {"tiny", "quick", "full"}
    assert exp.claims, "a reproduction states the paper's claims"
    assert exp.ray and exp.checked_against
    assert "ICML 2025" in exp.paper or registry.get(name) in registry.SUBSTRATES
    if exp.bench is not None:
        assert set(exp.bench_sizes) == {"tiny", "quick", "full"}


def _incomplete(claims) -> list[str]:
    return [c.text for c in claims if c.kind == "paper" and (
        not c.source.strip() or (results.is_threshold(c) and not c.controls))]


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_paper_claims_name_their_source_and_threshold_claims_a_control(name):
    exp = registry.get(name).load_experiment()
    incomplete = _incomplete(list(exp.claims) + list(exp.bench_claims))
    assert incomplete == [], "paper claims without a source, or threshold claims without a control"


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_tiny_run_writes_the_contract(name, tiny_record):
    rec = tiny_record(name)  # workers=1, shared with tests/experiments' claim-wiring test and the cluster test
    results.validate_record(rec)
    assert rec["kind"] == "run" and rec["size"] == "tiny" and rec["name"] == name
    assert len(rec["claims"]) == len(registry.get(name).load_experiment().claims)
    assert rec["env"]["tasks"] >= 2


def test_a_run_writes_its_record_where_json_path_says(ray_session, tmp_path):
    rec = experiments.run("eig-augment", size="tiny", seed=1, json_path=tmp_path / "r.json")
    assert (tmp_path / "r.json").exists()
    assert record_numbers(rec) == record_numbers(records.load_record(tmp_path / "r.json"))


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_bad_input_is_rejected_before_work(name, tmp_path):
    with pytest.raises(ValueError, match="unknown setting"):
        experiments.run(name, size="tiny", overrides={"no_such_setting": 1})
    with pytest.raises(ValueError, match="size"):
        experiments.run(name, size="enormous")
    with pytest.raises(ValueError, match="seed"):
        experiments.run(name, size="tiny", seed=-1)
    blocker = tmp_path / "f"
    blocker.write_text("")
    with pytest.raises(ValueError, match="--json"):
        experiments.run(name, size="tiny", json_path=blocker / "r.json")


# these three check their settings inside ``run`` (no separate check function yet)
UNCHECKED = {"parallel-sampling", "llm-substrate", "zapformat"}


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_every_declared_size_passes_the_methods_own_check(name):
    # A full size its own checks refuse was once found only by running it for minutes (diffadvmap).
    experiment = registry.get(name).load_experiment()
    if name in UNCHECKED:
        assert experiment.check is None
        return
    assert experiment.check is not None, f"{name}: Experiment(check=...) is not set"
    for size, config in experiment.sizes.items():
        experiment.check(dict(config))  # raises ValueError naming the key


def test_a_setting_the_check_refuses_fails_before_ray_starts(monkeypatch):
    from rayml import runtime

    monkeypatch.setattr(runtime, "connect", lambda *a, **k: pytest.fail("Ray started for a refused setting"))
    with pytest.raises(ValueError, match="eta_grid"):
        experiments.run("gdro-sparsity", size="tiny", overrides={"eta_grid": [0.5, 2.0]})


def test_unknown_and_planned_methods_are_errors(monkeypatch):
    with pytest.raises(KeyError, match="unknown method"):
        experiments.run("no-such-method", size="tiny")
    # every listed method is implemented now: register a planned one for the duration of the test
    planned = registry.Method("planned-x", "P0.0", "a planned method", "optim", "rayml.optim.planned_x")
    monkeypatch.setitem(registry._BY_NAME, planned.name, planned)
    with pytest.raises(ValueError, match="planned"):
        experiments.run(planned.name, size="tiny")


@pytest.mark.parametrize("name", BENCHED)
def test_every_bench_runs_at_tiny_size_and_its_claim_paths_exist(name, ray_session):
    rec = experiments.bench(name, size="tiny", seed=1)
    results.validate_record(rec)
    assert rec["kind"] == "bench" and len(rec["claims"]) == len(registry.get(name).load_experiment().bench_claims)
