"""A job submitted the way the README documents reaches workers that import the shipped rayml.

README: ``rayml package build/rayml-pkg`` then ``ray job submit --runtime-env
clusters/job-runtime-env.yaml -- python -m rayml ...``. Here the same runtime_env goes through
the Python ``JobSubmissionClient`` to a local cluster with a dashboard.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from _timing import limit
from conftest import free_port, start_cluster
from rayml import runtime

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent



def _submit(client, **kwargs):
    deadline = time.monotonic() + limit(90)
    while True:  # the dashboard's job agent needs a few seconds after the head is up
        try:
            return client.submit_job(**kwargs)
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def _wait(client, job_id, timeout_s=240):
    from ray.job_submission import JobStatus

    timeout_s = limit(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return status
        time.sleep(0.25)
    raise TimeoutError(f"job {job_id} did not finish in {timeout_s:.0f} s")


def test_submitted_job_workers_import_the_packaged_rayml(isolated_ray, tmp_path, monkeypatch):
    from ray.job_submission import JobStatus, JobSubmissionClient

    monkeypatch.chdir(tmp_path)  # the runtime_env's relative path is resolved from here
    # the job's ``python`` is the one running these tests, activated venv or not
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    packaged = runtime.package_for_cluster(tmp_path / "build" / "rayml-pkg")
    env = yaml.safe_load((ROOT / "clusters" / "job-runtime-env.yaml").read_text())
    assert Path(env["py_modules"][0]).resolve() == Path(packaged).resolve()

    port = free_port()
    # the job agent's HTTP port too is a free one: Ray's fixed default (52365) is taken whenever
    # another Ray on this machine (a second test run, a colleague's cluster) has an agent up
    cluster, _ = start_cluster(
        {"num_cpus": 2, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port,
         "dashboard_agent_listen_port": free_port()}, [])
    try:
        client = JobSubmissionClient(f"http://127.0.0.1:{port}")
        job = _submit(client, entrypoint="python -m rayml doctor --tasks 2 && "
                                         "python -m rayml run gs-poweropt --size tiny", runtime_env=env)
        status = _wait(client, job)
        logs = client.get_job_logs(job)
        assert status == JobStatus.SUCCEEDED, logs[-3000:]
        report = json.loads(logs[logs.index("{"): logs.index("\n}\n") + 2])
        places = [report["driver"], *report["workers"]]
        for where in places:
            for key in ("rayml", "actors", "kernels"):
                assert "runtime_resources" in where[key] and "py_modules" in where[key], where[key]
        assert len({w["pid"] for w in report["workers"]}) >= 1
        assert "gs-poweropt (run, size=tiny" in logs
    finally:
        cluster.shutdown()
