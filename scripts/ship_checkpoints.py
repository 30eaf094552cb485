"""Train, in a fresh cache, the checkpoints that ship inside rayml so that a first ``--quick`` or
``--size full`` run does not train them, and write them with their cards:

- merge3's two endpoints (the base fine-tuned on ``task_a`` / ``task_b`` with the quick and full
  sizes' recipe) under ``rayml/merging/weights/merge3-endpoints/<key>/``;
- dpsdp's SFT warm-up (the quick and full sizes' recipe) under ``rayml/alignment/weights/``.

Each is keyed exactly as the cache is (the base weights' sha256, the recipe, the seed), so a changed
recipe or base is trained as before instead of using a stale file; tests check that the shipped
keys still match the sizes. Usage (from the repository root)::

    python scripts/ship_checkpoints.py [--cache DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

COMMAND = "python scripts/ship_checkpoints.py"


def _machine() -> dict:
    import torch

    return {"platform": platform.platform(), "cpu_threads": os.cpu_count(), "torch": torch.__version__,
            "python": sys.version.split()[0]}


def ship_merge3(machine: dict) -> list[Path]:
    """Fine-tune merge3's quick/full endpoints (Ray tasks, as the experiment does) and ship them."""
    from rayml import runtime
    from rayml.experiments import merge3 as M
    from rayml.llm import training
    from rayml.llm.checkpoint import file_sha256, load_checkpoint, read_blob

    config = M.SIZES["quick"]
    assert all(config[k] == M.SIZES["full"][k] for k in M._FT + ("base", "task_a", "task_b")), \
        "quick and full no longer share merge3's endpoint recipe: ship both"
    base = read_blob(M.base_dir(str(config["base"])))
    shared = {**{k: config[k] for k in M._FT}, "base": base}
    tasks = [config["task_a"], config["task_b"]]
    for task in tasks:  # a shipped endpoint would be found instead of trained
        shutil.rmtree(M.SHIPPED_ENDPOINTS / M.endpoint_key(base.digest, task, config), ignore_errors=True)
    start = time.time()
    runtime.pmap(M.finetune_endpoint, tasks, shared=shared, desc="merge3 endpoints")
    wall = time.time() - start
    out = []
    for task in tasks:
        src = M.endpoint_dir(base.digest, task, config)
        dst = M.SHIPPED_ENDPOINTS / src.name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
        model, tok, card = load_checkpoint(dst)
        card.update(command=COMMAND, seed=int(config["finetune_seed"]), machine=machine,
                    date=time.strftime("%Y-%m-%d %H:%M:%S"), wall_seconds_both_endpoints=round(wall, 1),
                    data={"mixture": M.finetune_mixture(task, config),
                          "source": "rayml.llm.tasks train split, generated in-process"},
                    scores=training.evaluate_tasks(model, tok, n_items=200, tasks=[task, "add"]),
                    scores_note="exact match on 200 held-out test items per task (greedy)")
        (dst / "card.json").write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
        assert file_sha256(dst / "model.safetensors") == card["sha256"]["model.safetensors"]
        out.append(dst)
    return out


def ship_dpsdp(machine: dict) -> list[Path]:
    """Train dpsdp's quick/full SFT warm-up (one Ray task, as the experiment does) and ship it."""
    from rayml.alignment import dpsdp_pipeline as D
    from rayml.llm.checkpoint import file_sha256

    config = D.SIZES["quick"]
    src = D._cache_path(config, D.WARMUP_SEED)
    assert src.name == D._cache_path(D.SIZES["full"], D.WARMUP_SEED).name, \
        "quick and full no longer share dpsdp's warm-up recipe: ship both"
    for old in D.SHIPPED_WARMUPS.glob(src.stem + ".*"):  # a shipped warm-up would be found instead of trained
        old.unlink()
    start = time.time()
    D.sft_state(config)
    wall = time.time() - start
    D.SHIPPED_WARMUPS.mkdir(parents=True, exist_ok=True)
    dst = D.SHIPPED_WARMUPS / src.name
    shutil.copyfile(src, dst)
    out = [dst]
    if src.with_suffix(".json").exists():
        shutil.copyfile(src.with_suffix(".json"), dst.with_suffix(".json"))
        out.append(dst.with_suffix(".json"))
    keys = ("train_digits", "sft_items", "sft_steps", "sft_lr") + D.OWN_WARMUP_KEYS
    card = {"name": "dpsdp-sft-warmup", "command": COMMAND, "seed": D.WARMUP_SEED, "machine": machine,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "training_seconds": round(wall, 1),
            "recipe": {k: config[k] for k in keys if k in config},
            "data": "the verifier's oracle on generated arithmetic questions (train split) and the stage-1 "
                    "policy's own answers; generated in-process (rayml.alignment.dpsdp_pipeline._own_warmup)",
            "scores": D.warmup_info(config),
            "scores_note": "the critic's warm-up data (own answers judged ok / wrong); the warm-up's turn-1 and "
                           "turn-2 accuracies are the `sft` baseline of docs/records/dpsdp.json",
            "sha256": {dst.name: file_sha256(dst)}}
    card_path = dst.with_name(dst.stem + ".card.json")
    card_path.write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
    return out + [card_path]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", help="the cache to train in (default: a fresh temporary directory)")
    args = ap.parse_args(argv)
    cache = args.cache or tempfile.mkdtemp(prefix="rayml-ship-")
    os.environ["RAYML_CACHE"] = cache  # before any rayml import reads it; Ray workers inherit it
    machine = _machine()
    for path in ship_merge3(machine) + ship_dpsdp(machine):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
