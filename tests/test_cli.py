"""The ``rayml`` command: list, run/bench contract, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _timing import limit
from rayml import registry
from rayml.cli import main


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rayml: error:") and "\n" not in err, err
    return err


def test_list_shows_all_38_methods_honestly(capsys):
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 38 and len({r["name"] for r in rows}) == 38
    for r in rows:
        assert r["status"] in ("implemented", "planned")
        # implemented exactly when the experiment module exists
        exists = os.path.exists(os.path.join(os.path.dirname(registry.__file__), "experiments",
                                             r["name"].replace("-", "_") + ".py"))
        assert (r["status"] == "implemented") == exists, r["name"]
        if r["status"] == "implemented":
            assert r["ray"] and r["checked_against"]
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "38 methods" in out and "gs-poweropt" in out


def test_unknown_method(capsys):
    assert "unknown method 'nope'" in _one_line_error(capsys, ["run", "nope", "--size", "tiny"])


def test_planned_method_is_not_run(capsys, monkeypatch):
    # every listed method is implemented now: register a planned one for the duration of the test
    planned = registry.Method("planned-x", "P0.0", "a planned method", "optim", "rayml.optim.planned_x")
    monkeypatch.setitem(registry._BY_NAME, planned.name, planned)
    assert "planned" in _one_line_error(capsys, ["run", planned.name])


def test_bad_flag(capsys):
    _one_line_error(capsys, ["run", "gs-poweropt", "--bogus"])
    _one_line_error(capsys, ["run", "gs-poweropt", "--size", "huge"])
    _one_line_error(capsys, ["frobnicate"])


def test_bad_set(capsys, tmp_path):
    assert "unknown setting" in _one_line_error(capsys, ["run", "gs-poweropt", "--size", "tiny", "--set", "nope=1"])
    assert "expected key=value" in _one_line_error(capsys, ["run", "gs-poweropt", "--size", "tiny", "--set", "x"])
    assert "expected an integer" in _one_line_error(
        capsys, ["run", "gs-poweropt", "--size", "tiny", "--set", "seeds=many"])


def test_unwritable_out_and_json_write_nothing(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "--out" in _one_line_error(capsys, ["run", "gs-poweropt", "--size", "tiny", "--out", str(blocker / "d")])
    assert "--json" in _one_line_error(capsys, ["run", "gs-poweropt", "--size", "tiny", "--json", str(blocker / "r.json")])
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_unreachable_address_in_a_fresh_process(tmp_path):
    # A fresh process (no Ray yet): the address check answers in seconds, exit 2, one line, no file.
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rayml", "run", "gs-poweropt", "--size", "tiny", "--address", "127.0.0.1:1",
         "--json", str(out)],
        capture_output=True, text=True, timeout=limit(120), env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("rayml:")]
    assert lines and "nothing answers" in lines[0]
    assert not out.exists()


def test_run_and_bench_write_the_contract(ray_session, tmp_path, capsys):
    from rayml import results

    rj, bj, od = tmp_path / "r.json", tmp_path / "b.json", tmp_path / "out"
    assert main(["run", "gs-poweropt", "--size", "tiny", "--seed", "3", "--json", str(rj), "--out", str(od)]) == 0
    printed = capsys.readouterr().out
    rec = json.loads(rj.read_text())
    results.validate_record(rec)
    assert rec["kind"] == "run" and rec["seed"] == 3 and rec["size"] == "tiny"
    assert rec["claims"] and all(c["text"] in printed for c in rec["claims"])
    assert "gs-poweropt: run at size tiny; estimated time" in printed
    assert f"wrote {rj}" in printed and f"wrote {od / 'record.json'}" in printed
    assert {p.name for p in od.iterdir()} == {"record.json", "results.parquet", "convergence.png"}
    assert main(["bench", "gs-poweropt", "--size", "tiny", "--json", str(bj)]) == 0
    bench = json.loads(bj.read_text())
    results.validate_record(bench)
    assert bench["kind"] == "bench" and bench["metrics"]["speedup_2_workers"] > 0


def test_python_api_equals_the_cli(ray_session, tmp_path):
    from rayml import experiments

    rec = experiments.run("gs-poweropt", size="tiny", seed=3)
    assert main(["run", "gs-poweropt", "--size", "tiny", "--seed", "3", "--json", str(tmp_path / "r.json")]) == 0
    cli = json.loads((tmp_path / "r.json").read_text())
    assert cli["metrics"] == rec["metrics"] and cli["baselines"] == rec["baselines"]


def test_resume_gives_the_same_record_and_removes_its_cache_when_the_run_finishes(ray_session, tmp_path,
                                                                                     monkeypatch, capsys):
    from rayml import experiments

    monkeypatch.setenv("RAYML_CACHE", str(tmp_path / "cache"))
    rec = experiments.run("gs-poweropt", size="tiny", seed=3)
    assert main(["run", "gs-poweropt", "--size", "tiny", "--seed", "3", "--resume",
                 "--json", str(tmp_path / "r.json")]) == 0
    resumed = json.loads((tmp_path / "r.json").read_text())
    assert resumed["metrics"] == rec["metrics"] and resumed["claims"] == rec["claims"]
    assert resumed["env"]["tasks"] > 0 and "resumed_items" not in resumed["env"]  # ran through the cache, reused nothing
    assert not list((tmp_path / "cache" / "resume").iterdir())  # finished: its folder is gone


def test_bench_bandits_is_the_kl_bandit_benchmark(ray_session, tmp_path):
    assert main(["bench", "bandits", "--size", "tiny", "--json", str(tmp_path / "b.json")]) == 0
    rec = json.loads((tmp_path / "b.json").read_text())
    assert rec["name"] == "kl-bandit" and rec["kind"] == "bench"


def _start_serve_optimize():
    """``rayml serve optimize`` on a free port: (process, port). A port picked free can be taken by
    one of Ray's own agents before Serve binds it (CI, session 11: a 405 from that agent, then the
    refusal); the command then refuses with exit 2 and a line naming --port, and we pick again."""
    import time

    import requests

    from rayml.actors.serve.http import free_port

    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "rayml", "serve", "optimize", "--port", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline, answer = time.monotonic() + limit(150), None
        while time.monotonic() < deadline and proc.poll() is None:
            try:  # the proxy may answer 404/503 until the app's route is ready
                answer = requests.post(f"http://127.0.0.1:{port}/", timeout=limit(10),
                                       json={"function": "ackley", "dim": 2, "iterations": 10, "samples": 4})
                if answer.status_code == 200:
                    return proc, answer
            except requests.ConnectionError:
                pass
            time.sleep(0.25)
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate()[0]
        if proc.returncode == 2 and f"--port {port}: another program already listens" in out:
            continue
        status = None if answer is None else (answer.status_code, answer.text[:200])
        raise AssertionError((status, proc.returncode, out[-2000:]))
    raise AssertionError("three free ports in a row were taken before Serve bound them")


@pytest.mark.slow
def test_rayml_serve_answers_over_http_and_stops_on_interrupt():
    import signal

    proc, answer = _start_serve_optimize()
    try:
        assert answer.json()["evals"] == 10 * 5 + 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=limit(60)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_is_free_sees_a_listener():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        from rayml.cli import _port_is_free

        assert not _port_is_free("127.0.0.1", port)
    assert _port_is_free("127.0.0.1", port)


def test_serve_rejects_an_unknown_app(capsys):
    assert "cannot import" in _one_line_error(capsys, ["serve", "nope.module:app"])
    assert "expected one of" in _one_line_error(capsys, ["serve", "nope"])


def test_show_config_prints_the_settable_keys_and_does_no_work(capsys):
    assert main(["run", "gs-poweropt", "--quick", "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "gs-poweropt (run, size=quick)" in out
    assert any(line.split()[:2] == ["seeds", "int"] for line in out.splitlines())


def test_run_all_refuses_set(capsys):
    assert "not to 'run all'" in _one_line_error(capsys, ["run", "all", "--size", "tiny", "--set", "seeds=2"])


def test_a_missing_extra_stops_before_any_work():
    # cvxpy made unimportable: eig-augment (family optim) needs the [optim] extra
    code = ("import sys; sys.modules['cvxpy'] = None\n"
            "from rayml.cli import main\n"
            "code = main(['run', 'eig-augment', '--size', 'tiny'])\n"
            "import ray\n"
            "print('exit', code, 'ray started', ray.is_initialized())\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit(120))
    assert "exit 2 ray started False" in res.stdout
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "needs the [optim] extra (missing: cvxpy)" in err[0], res.stderr


def test_progress_is_plain_lines_when_stderr_is_not_a_terminal():
    code = ("import os; os.environ.pop('TQDM_DISABLE', None)\n"
            "from rayml.runtime import progress_bar\n"
            "bar = progress_bar(20, 'work')\n"
            "for _ in range(20): bar.update(1)\n"
            "bar.close()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit(60),
                         env={k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"})
    assert "\r" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("work: 2/20") and lines[-1].startswith("work: 20/20") and len(lines) == 10


@pytest.mark.parametrize("setting, needle", [
    ("iterations=1.5", "expected an integer"),
    ("sigma=-1", "must be >= 0"),
    ("iterations=-5", "must be >= 0"),
    ("cases=[1,2]", "expected a list of ['str']"),
    ("seeds=100000000", "at most"),
    ("sigma=NaN", "expected a finite number"),
])
def test_set_values_are_checked_against_the_sizes_before_any_work(capsys, setting, needle):
    err = _one_line_error(capsys, ["run", "gs-poweropt", "--size", "tiny", "--set", setting])
    assert needle in err and setting.split("=")[0] in err


def test_a_setting_refused_by_the_experiment_itself_is_bad_input(capsys):
    # merge3 checks its endpoint tasks before any Ray task: one line, exit 2
    err = _one_line_error(capsys, ["run", "merge3", "--size", "tiny", "--set", 'task_a="nope"'])
    assert "task must be one of" in err and "nope" in err


def _submits_then_crashes(config, seed):
    from rayml import runtime

    runtime.pmap(abs, [-1, -2], progress=False)
    raise KeyError("a bug in the middle of the run")


def test_a_run_that_fails_after_work_started_is_exit_1_and_debug_shows_the_traceback(ray_session, monkeypatch, capsys):
    import dataclasses

    from rayml import experiments

    real = registry.get("gs-poweropt")
    broken = dataclasses.replace(real.load_experiment(), run=_submits_then_crashes)
    monkeypatch.setattr(type(real), "load_experiment", lambda self: broken)
    assert main(["run", "gs-poweropt", "--size", "tiny"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rayml: run 'gs-poweropt' failed: KeyError") and "--debug" in err[-1]
    assert main(["run", "gs-poweropt", "--size", "tiny", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err
    with pytest.raises(experiments.ExperimentFailed) as info:
        experiments.run("gs-poweropt", size="tiny")
    assert isinstance(info.value.__cause__, KeyError)


def test_a_list_of_methods_goes_on_after_a_failure_and_reports_it(ray_session, monkeypatch, capsys):
    # `run all` (here a list of two) reports a failing method in its table and runs the rest.
    import dataclasses

    load = type(registry.get("equal-share")).load_experiment
    broken = dataclasses.replace(registry.get("equal-share").load_experiment(), run=_submits_then_crashes)
    monkeypatch.setattr(type(registry.get("equal-share")), "load_experiment",
                        lambda self: broken if self.name == "equal-share" else load(self))
    assert main(["run", "equal-share,gdro-sparsity", "--size", "tiny"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("running 2 methods at size tiny; estimated time")
    assert any(line.startswith("[1/2] equal-share: FAILED (") and "KeyError" in line for line in lines)
    assert any(line.startswith("[2/2] gdro-sparsity: done in ") and "ETA" in line for line in lines)
    assert "1 of 2 methods ran" in captured.out
    table = captured.out[captured.out.index("summary"):]
    assert "equal-share" in table and "FAILED: " in table and "gdro-sparsity" in table
    assert captured.err.strip().splitlines()[-1] == "rayml: 1 of 2 methods failed: equal-share"


def test_a_method_named_twice_or_planned_in_a_list_is_bad_input(capsys):
    assert "named twice" in _one_line_error(capsys, ["run", "kl-bandit,kl-bandit", "--size", "tiny"])
    assert "unknown method 'nope'" in _one_line_error(capsys, ["run", "kl-bandit,nope", "--size", "tiny"])


@pytest.mark.slow
def test_on_a_cluster_methods_run_side_by_side_as_tasks(isolated_ray, tmp_path, capsys):
    # With --address, each method's driver is a Ray task: a cluster runs them at once, and the
    # records come back in the order asked.
    from conftest import start_cluster
    from rayml import runtime

    cluster, _ = start_cluster({"num_cpus": 0}, [{"num_cpus": 2}] * 2)
    try:
        out = tmp_path / "all.json"
        assert main(["run", "gdro-sparsity,equal-share", "--size", "tiny", "--address", cluster.address,
                     "--json", str(out)]) == 0
        records = json.loads(out.read_text())["records"]
        assert [r["name"] for r in records] == ["gdro-sparsity", "equal-share"]
        assert all(r["summary"]["sanity"]["total"] > 0 and r["env"]["tasks"] > 0 for r in records)
        text = capsys.readouterr().out
        assert "[2/2]" in text and "2 of 2 methods ran" in text
    finally:
        runtime.shutdown()
        cluster.shutdown()


def test_the_record_names_the_commit_the_run_started_from(ray_session, monkeypatch):
    """Helper C's finding (session 7): a long run whose neighbours commit meanwhile recorded the
    commit checked out when it ended; the record now names the one it started from."""
    from rayml import experiments, results

    commits = iter(["start00"])
    monkeypatch.setattr(results, "git_commit", lambda: next(commits, "moved11"))
    rec = experiments.run("gs-poweropt", size="tiny", seed=3)
    assert rec["env"]["git"] == "start00"


def test_the_time_estimate_of_a_variant_is_the_variants_own(tmp_path, monkeypatch):
    # session 11: `--set model=smollm2-135m` was promised quick's 5 s for a run of 55 minutes
    from rayml import experiments
    from rayml.cli import recorded_seconds

    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    from pathlib import Path

    records = Path(__file__).resolve().parents[1] / "docs" / "records"
    quick = json.loads((records / "emloc.json").read_text())["env"]["seconds"]
    smol = json.loads((records / "emloc@model=smollm2-135m.json").read_text())["env"]["seconds"]
    assert recorded_seconds("emloc", "run", "quick") == quick
    assert recorded_seconds("emloc", "run", "quick", {"model": "smollm2-135m"}) == smol != quick
    assert recorded_seconds("emloc", "run", "quick", {"items": 3}) is None
    assert recorded_seconds("emloc", "run", "quick", {"model": "smollm2-135m", "items": 3}) is None
    # this machine's own timing is kept per setting too
    experiments._remember_seconds("emloc", "run", "quick", 7.0, {"items": 3})
    assert experiments.last_seconds("emloc", "run", "quick", {"items": 3}) == 7.0
    assert experiments.last_seconds("emloc", "run", "quick") is None
    assert recorded_seconds("emloc", "run", "quick", {"items": 3}) == 7.0
