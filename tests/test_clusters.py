"""clusters/: every file parses, carries the fields Ray/KubeRay need, and names things that exist."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path

import pytest
import yaml

from rayml import registry

CLUSTERS = Path(__file__).resolve().parent.parent / "clusters"


def _load(name):
    return yaml.safe_load((CLUSTERS / name).read_text())


def _check_import_path(path: str):
    from ray.serve import Application

    module, _, attr = path.partition(":")
    assert module.startswith("rayml.") and attr, path
    app = getattr(importlib.import_module(module), attr)
    assert isinstance(app, Application), path


def _check_entrypoint(entrypoint: str):
    from rayml.cli import _build_parser

    argv = shlex.split(entrypoint)
    if argv[:3] == ["python", "-m", "rayml"]:
        argv = argv[3:]
    else:
        assert argv[0] == "rayml", entrypoint
        argv = argv[1:]
    args = _build_parser().parse_args(argv)
    if args.command in ("run", "bench") and args.name != "all":
        assert registry.get(args.name).status == "implemented"


def test_every_cluster_file_is_covered():
    files = {str(p.relative_to(CLUSTERS)) for p in CLUSTERS.rglob("*") if p.is_file()}
    assert files == {"Dockerfile", "cluster-aws.yaml", "cluster-local.yaml", "serve.yaml", "job-runtime-env.yaml",
                     "kuberay/raycluster.yaml", "kuberay/rayjob.yaml", "kuberay/rayservice.yaml"}


@pytest.mark.parametrize("name", ["cluster-aws.yaml", "cluster-local.yaml"])
def test_launcher_configs_validate_against_rays_schema(name):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _load(name)
    validate_config(prepare_config(config))  # Ray's own JSON schema for `ray up`
    assert any("rayml" in cmd for cmd in config["setup_commands"])
    if name == "cluster-local.yaml":
        assert config["provider"]["type"] == "local"
        assert config["provider"]["head_ip"] and config["provider"]["worker_ips"]


def _check_serve_config(config: dict):
    apps = config["applications"]
    assert apps and config["http_options"]["request_timeout_s"] > 0
    for app in apps:
        assert app["name"] and app["route_prefix"].startswith("/")
        _check_import_path(app["import_path"])
        for dep in app.get("deployments", []):
            assert dep["max_ongoing_requests"] >= 1


def test_serve_config_names_importable_apps():
    _check_serve_config(_load("serve.yaml"))


def test_serve_config_deploys_every_app_of_rayml_serve():
    from rayml.cli import OPTIONAL_APPS, SERVE_APPS

    config = _load("serve.yaml")
    deployed = {path for name, path in SERVE_APPS.items() if name not in OPTIONAL_APPS}
    assert {a["import_path"] for a in config["applications"]} == deployed
    assert len({a["route_prefix"] for a in config["applications"]}) == len(config["applications"])


def _check_ray_cluster_spec(spec: dict):
    head = spec["headGroupSpec"]
    assert "rayStartParams" in head
    assert head["template"]["spec"]["containers"][0]["image"]
    for group in spec["workerGroupSpecs"]:
        assert group["groupName"] and "rayStartParams" in group
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert group["template"]["spec"]["containers"][0]["image"]


SCHEMAS = Path(__file__).resolve().parent / "data" / "kuberay"


@pytest.mark.parametrize("name", ["raycluster.yaml", "rayjob.yaml", "rayservice.yaml"])
def test_kuberay_manifests_validate_against_the_crd_schemas(name):
    import json

    import jsonschema

    doc = _load(f"kuberay/{name}")
    schema = json.loads((SCHEMAS / f"{doc['kind']}.v1.schema.json").read_text())
    jsonschema.validate(doc, schema)
    # the schema has teeth: a string where the CRD wants an integer is refused
    bad = yaml.safe_load((CLUSTERS / "kuberay" / name).read_text())
    spec = bad["spec"].get("rayClusterSpec") or bad["spec"].get("rayClusterConfig") or bad["spec"]
    spec["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def _containers(spec: dict) -> list:
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


@pytest.mark.parametrize("name", ["raycluster.yaml", "rayjob.yaml", "rayservice.yaml"])
def test_kuberay_containers_request_and_limit_resources(name):
    doc = _load(f"kuberay/{name}")
    spec = doc["spec"].get("rayClusterSpec") or doc["spec"].get("rayClusterConfig") or doc["spec"]
    for container in _containers(spec):
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), container["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), container["name"]


def test_kuberay_rayservice_serves_every_app_of_serve_yaml():
    doc = _load("kuberay/rayservice.yaml")
    apps = yaml.safe_load(doc["spec"]["serveConfigV2"])["applications"]
    assert apps == _load("serve.yaml")["applications"]


def test_kuberay_rayjob_keeps_its_results_on_a_volume():
    doc = _load("kuberay/rayjob.yaml")
    entry = doc["spec"]["entrypoint"]
    head = doc["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in head["containers"][0]["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in head["volumes"]}
    out = entry.split("--out ")[1].split()[0]
    assert any(out.startswith(path + "/") and mounts[path] in claims for path in mounts)


def test_kuberay_raycluster():
    doc = _load("kuberay/raycluster.yaml")
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayCluster" and doc["metadata"]["name"]
    _check_ray_cluster_spec(doc["spec"])


def test_kuberay_rayjob_entrypoint_is_a_valid_rayml_command():
    doc = _load("kuberay/rayjob.yaml")
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayJob"
    _check_entrypoint(doc["spec"]["entrypoint"])
    _check_ray_cluster_spec(doc["spec"]["rayClusterSpec"])


def test_kuberay_rayservice_serves_importable_apps():
    doc = _load("kuberay/rayservice.yaml")
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayService"
    _check_serve_config(yaml.safe_load(doc["spec"]["serveConfigV2"]))
    _check_ray_cluster_spec(doc["spec"]["rayClusterConfig"])


def test_job_runtime_env_ships_the_packaged_rayml():
    env = _load("job-runtime-env.yaml")
    assert env["py_modules"] == ["build/rayml-pkg/rayml"]


def test_readme_commands_name_real_things():
    readme = (CLUSTERS.parent / "README.md").read_text()
    for line in readme.splitlines():
        line = line.strip()
        if line.startswith("-- ") or " -- rayml " in line or " -- python -m rayml " in line:
            _check_entrypoint(line.split(" -- ", 1)[-1].rstrip("\\ ").removeprefix("-- "))
        if "import_path" in line or line.startswith("serve run rayml."):
            _check_import_path(line.split()[-1])
