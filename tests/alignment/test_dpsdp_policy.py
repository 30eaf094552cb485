"""rayml.alignment.dpsdp_policy: a DPSDP policy trained at the tiny recipe is deterministic for a seed and
differs from its reference; save/load round-trips bit-exactly and atomically; missing or corrupt files
and bad arguments are clear errors; the cache is keyed by the recipe and the seed."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rayml.alignment import dpsdp_policy as P

# the tiny recipe collects no pair at temperature 1 (its 2-step warm-up answers every 3-digit sum and
# no 4-digit one, so candidates tie); at temperature 2 first answers differ and D0 has pairs
TINY = {"collect_temperature": 2.0}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained(ray_kwargs):
    from rayml import runtime

    runtime.connect(**ray_kwargs)
    return P.train_policy(TINY, size="tiny", seed=0)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def test_training_is_deterministic_for_a_seed_and_moves_the_actor(trained, ray_kwargs):
    again = P.train_policy(TINY, size="tiny", seed=0)
    assert _same(trained.actor, again.actor) and _same(trained.critic, again.critic)
    assert trained.meta == again.meta
    m = trained.meta
    assert m["system"] == "dpsdp" and m["beta"] == P.DEFAULT_BETA and m["lr"] == P.DEFAULT_LR
    assert m["recipe"]["collect_temperature"] == 2.0 and m["recipe"]["dpo_steps"] == 2
    assert m["pairs"]["d0"] > 0 and m["steps"] == 2  # D0 pairs, so the actor took DPO steps
    ref = P.reference_policy(size="tiny")
    assert ref.actor is ref.critic and ref.system == "reference"
    assert trained.actor.keys() == ref.actor.keys()
    assert not _same(trained.actor, ref.actor)  # DPO moved the actor away from the reference
    assert m["pairs"]["d1"] == 0 and _same(trained.critic, ref.actor)  # no D1 pairs: the critic stays the reference
    assert ref.meta["recipe"] == {k: m["recipe"][k] for k in ref.meta["recipe"]}
    assert "dpo_steps" not in ref.meta["recipe"]  # the warm-up's own recipe
    other = P.train_policy(TINY, size="tiny", seed=1)
    assert other.meta["seed"] == 1 and not _same(other.actor, trained.actor)


def test_the_default_beta_and_lr_are_the_quick_records_tuned_values():
    record = json.loads((ROOT / "docs" / "records" / "dpsdp.json").read_text())
    assert (P.DEFAULT_BETA, P.DEFAULT_LR) == (record["metrics"]["beta"], record["metrics"]["lr"])


def test_save_and_load_round_trip_bit_exactly(trained, tmp_path):
    path = P.save_policy(trained, tmp_path / "p.npz")
    back = P.load_policy(path)
    assert _same(back.actor, trained.actor) and _same(back.critic, trained.critic)
    assert back.meta == trained.meta
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]  # no temporary file left
    ref = P.load_policy(P.save_policy(P.reference_policy(size="tiny"), tmp_path / "ref.npz"))
    assert ref.actor is ref.critic  # one model in both roles again
    a, c, tok = back.models()
    assert a is not c and tok.encode("1+1=")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(trained, tmp_path, monkeypatch):
    path = P.save_policy(trained, tmp_path / "p.npz")
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        P.save_policy(P.reference_policy(size="tiny"), path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["p.npz"]


def test_missing_and_corrupt_files_are_clear_errors(trained, tmp_path):
    with pytest.raises(FileNotFoundError, match="no policy file"):
        P.load_policy(tmp_path / "absent.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="not a readable policy"):
        P.load_policy(junk)
    good = P.save_policy(trained, tmp_path / "good.npz").read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="not a readable policy"):
        P.load_policy(cut)
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=np.zeros(3))
    with pytest.raises(ValueError, match="not a readable policy"):
        P.load_policy(plain)  # no metadata
    with zipfile.ZipFile(tmp_path / "good.npz") as z:
        names = z.namelist()
    arrays = dict(np.load(tmp_path / "good.npz"))
    arrays[names[0][:-4]] = np.zeros(3, np.float32)  # one tensor of the wrong shape
    shaped = tmp_path / "shaped.npz"
    np.savez(shaped, **arrays)
    with pytest.raises(ValueError, match="do not fit the substrate model"):
        P.load_policy(shaped)
    meta = json.loads(str(arrays["__meta__"]))
    arrays = dict(np.load(tmp_path / "good.npz"))
    arrays["__meta__"] = np.array(json.dumps(dict(meta, format="other/9")))
    np.savez(tmp_path / "other.npz", **arrays)
    with pytest.raises(ValueError, match="not a rayml.dpsdp-policy/1 file"):
        P.load_policy(tmp_path / "other.npz")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(size="huge"), ValueError, "size"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.5), ValueError, "seed"),
    (dict(beta=0.0), ValueError, "beta"),
    (dict(beta=float("nan")), ValueError, "beta"),
    (dict(lr=-1e-4), ValueError, "lr"),
    (dict(lr="1e-4"), ValueError, "lr"),
    (dict(config={"nope": 1}), ValueError, "nope"),
    (dict(config={"model": "smollm2-135m"}), ValueError, "model"),
    (dict(config={"lora_rank": 2}), ValueError, "lora_rank"),
    (dict(config={"dpo_steps": 0}), ValueError, "dpo_steps"),
    (dict(config=[("dpo_steps", 1)]), TypeError, "config"),
])
def test_bad_arguments_are_rejected_before_any_work(kwargs, error, match):
    with pytest.raises(error, match=match):
        P.train_policy(**{"size": "tiny", **kwargs})
    with pytest.raises(error, match=match):
        P.policy_path(**{"size": "tiny", **kwargs})


def test_save_rejects_bad_arguments(trained, tmp_path):
    with pytest.raises(TypeError, match="policy"):
        P.save_policy({"actor": {}}, tmp_path / "x.npz")
    with pytest.raises(ValueError, match="path"):
        P.save_policy(trained, tmp_path / "x.bin")
    with pytest.raises(TypeError, match="path"):
        P.load_policy(3)


def test_the_cache_is_keyed_by_recipe_and_seed_and_says_how_to_fill_it(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    path = P.policy_path(TINY, size="tiny", seed=0)
    assert path.parent == tmp_path / "alignment" and path.name.startswith("dpsdp-policy-")
    assert P.policy_path(TINY, size="tiny", seed=1) != path
    assert P.policy_path(TINY, size="tiny", seed=0, beta=1.0) != path
    assert P.policy_path(size="tiny", seed=0) != path
    with pytest.raises(FileNotFoundError, match="python -m rayml.alignment.dpsdp_policy --size tiny --seed 0"):
        P.cached_policy(TINY, size="tiny", seed=0, train_if_missing=False)
    with pytest.raises(FileNotFoundError, match="--reference"):  # an empty cache has no warm-up either
        P.reference_policy(size="tiny", train_if_missing=False)
    # ... but the quick recipe's warm-up ships inside rayml: an empty cache loads it, training nothing
    ref = P.reference_policy(size="quick", train_if_missing=False)
    assert ref.meta["system"] == "reference" and not list(tmp_path.rglob("dpsdp-sft-*"))
    P.save_policy(trained, path)  # what cached_policy would write after training
    got = P.cached_policy(TINY, size="tiny", seed=0, train_if_missing=False)
    assert _same(got.actor, trained.actor) and got.meta == trained.meta
