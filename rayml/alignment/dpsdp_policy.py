"""A trained DPSDP policy outside the experiment: train it, save and load it, cache it.

Yuan & Xie, "Reinforce LLM Reasoning through Multi-Agent Reflection" (ICML 2025). A
``RefinementPolicy`` is the pair (actor, critic) that ``rayml.alignment.dpsdp.refine`` runs:
first answer, then feedback and refinement turn by turn (the MDP of Sec. 3, Markovian reduced
state). ``train_policy`` makes DPSDP's two agents exactly as ``rayml.experiments.dpsdp`` makes
one replicate's: the reference system is the substrate's SFT warm-up (``sft_state``, cached);
Algorithm 1's data collection runs under it (``collect``: reference rollouts, ``n_candidates``
restarts per state, Q by correctness for answers and by Monte-Carlo refinements for feedback);
then the actor is trained by DPO on ``D_0 u D_2`` and the critic on ``D_1`` (``_train_system``,
the same total DPO steps split by pair counts). Every step runs as Ray tasks through
``rayml.runtime.pmap``; the weights come back through the object store.

Only the substrate model (``model="base"``, full fine-tuning, ``lora_rank=0``) is supported:
SmolLM2 LoRA policies are not saved or served (their frozen 135M weights would be stored twice
per file; the experiment keeps them in memory only).

The policy file is a single ``.npz``: ``actor/<name>`` and ``critic/<name>`` arrays (the models'
state dicts) and ``__meta__`` (JSON: format, system, recipe, beta, lr, seed, the base checkpoint's
sha256, pair counts). ``save_policy`` writes it atomically (a temporary file in the same folder,
then ``os.replace``), so an error never leaves a half-written policy behind.

Command line (trains and caches the default policy, or the reference warm-up only)::

    python -m rayml.alignment.dpsdp_policy --size quick             # DPSDP, beta 0.5, lr 3e-5
    python -m rayml.alignment.dpsdp_policy --size quick --reference # the SFT warm-up only
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rayml.results import atomic_write

__all__ = ["RefinementPolicy", "train_policy", "reference_policy", "save_policy", "load_policy", "cached_policy",
           "policy_path", "DEFAULT_BETA", "DEFAULT_LR", "RECIPE_KEYS", "FORMAT"]

FORMAT = "rayml.dpsdp-policy/1"
# the quick record's tuned setting for DPSDP on the substrate (docs/records/dpsdp.json: metrics.beta,
# metrics.lr; chosen by maj@turn5 on the tuning replicate over beta 0.03-2.0 x lr 3e-6-3e-5 since session 8, lr
# extended to 9e-5: inside the grid; sessions 5-7: beta 8.0, lr 1e-4)
DEFAULT_BETA = 0.5
DEFAULT_LR = 3e-5
# the settings a policy depends on (the cache key); grids, test sizes and seeds count do not enter
RECIPE_KEYS = ("model", "train_digits", "sft_items", "sft_steps", "sft_lr", "sft_replay", "answer_digits",
               "critic_items", "critic_samples", "critic_steps", "train_questions", "chunk", "n_candidates",
               "mc_rollouts", "dpo_steps", "batch_size", "collect_temperature", "lora_rank")
_SFT_KEYS = ("model", "train_digits", "sft_items", "sft_steps", "sft_lr", "sft_replay", "answer_digits",
             "critic_items", "critic_samples", "critic_steps")  # the warm-up's recipe
_SYSTEMS = ("dpsdp", "reference")


@dataclass(frozen=True, eq=False)
class RefinementPolicy:
    """DPSDP's actor and critic of the substrate model, as state dicts of numpy arrays.

    ``meta`` holds ``system`` ("dpsdp" or "reference"), ``recipe`` (the settings of
    ``RECIPE_KEYS``), ``beta``, ``lr``, ``seed``, ``size``, ``base_sha256`` and, for DPSDP, the
    number of DPO steps used and of pairs per turn. The reference system has one model in both
    roles (``actor is critic``).
    """

    actor: dict
    critic: dict
    meta: dict = field(default_factory=dict)

    @property
    def system(self) -> str:
        return self.meta["system"]

    def models(self):
        """``(actor, critic, tokenizer)``: the substrate model loaded with each state (one model
        when both roles share a state), in eval mode, ready for ``rayml.alignment.dpsdp.refine``."""
        from rayml.alignment import dpsdp_pipeline as E

        actor = E._load(self.actor)
        critic = actor if self.critic is self.actor else E._load(self.critic)
        return actor, critic, E._base()[1]


# ------------------------------------------------------------------------------------------
# arguments

def _recipe(config: Mapping[str, Any] | None, size: str) -> dict:
    """The effective experiment config of ``size`` with ``config``'s overrides, checked."""
    from rayml.alignment import dpsdp_pipeline as E

    if not isinstance(size, str) or size not in E.SIZES:
        raise ValueError(f"size must be one of {tuple(E.SIZES)}, got {size!r}")
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping of settings or None, got {type(config).__name__}")
    base = E.SIZES[size]
    unknown = set(config or {}) - set(base)
    if unknown:
        raise ValueError(f"config: unknown settings {sorted(unknown)}; known: {sorted(base)}")
    merged = dict(base, **dict(config or {}))
    if merged.get("model") != "base":
        raise ValueError(f"config: model must be 'base' (SmolLM2 LoRA policies are not supported), "
                         f"got {merged.get('model')!r}")
    if merged.get("lora_rank") != 0:
        raise ValueError(f"config: lora_rank must be 0 (full fine-tuning of the substrate), "
                         f"got {merged.get('lora_rank')!r}")
    try:
        E._check(merged)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"config: {exc}") from None
    return E._effective(merged)


def _positive(name: str, v, default: float) -> float:
    if v is None:
        return float(default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0 or None, got {v!r}")
    return float(v)


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    return int(seed)


def _base_sha() -> str:
    from rayml.llm import WEIGHTS_DIR
    from rayml.llm.checkpoint import file_sha256

    return file_sha256(WEIGHTS_DIR / "base" / "model.safetensors")


def _recipe_of(config: Mapping[str, Any]) -> dict:
    return {k: config[k] for k in RECIPE_KEYS if k in config}


# ------------------------------------------------------------------------------------------
# training (Ray tasks)

def _train_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """DPSDP's two agents on the collected pairs (``rayml.alignment.dpsdp_pipeline._train_system``)."""
    from rayml.alignment import dpsdp_pipeline as E

    beta, lr, seed = item
    actor, critic, steps = E._train_system("dpsdp", shared["pairs"], shared["config"], shared["sft"], beta, lr, seed)
    return {"actor": E._state(actor), "critic": E._state(critic), "steps": int(steps)}


def reference_policy(config: Mapping[str, Any] | None = None, *, size: str = "quick",
                     train_if_missing: bool = True) -> RefinementPolicy:
    """The reference system of DPSDP (its ``pi_ref``): the substrate's SFT warm-up for ``size``'s
    recipe, one model as actor and critic. Read from the warm-up shipped inside rayml (the quick and full
    recipes') or the experiment's cache (``~/.cache/rayml/alignment/dpsdp-sft-*.npz``, ``RAYML_CACHE``);
    when neither has it, it is trained
    as one Ray task (``sft_state``) if ``train_if_missing``, else ``FileNotFoundError`` says how to
    make it."""
    from rayml.alignment import dpsdp_pipeline as E

    config = _recipe(config, size)
    if not isinstance(train_if_missing, bool):
        raise TypeError(f"train_if_missing must be a bool, got {type(train_if_missing).__name__}")
    path = E._warmup_file(config, E.WARMUP_SEED)  # the warm-up shipped inside rayml, else the cache's
    if not train_if_missing and not path.exists():
        raise FileNotFoundError(f"the SFT warm-up of size {size!r} is not cached ({path}); make it with "
                                f"`python -m rayml.alignment.dpsdp_policy --size {size} --reference`")
    sft = E.sft_state(config)
    recipe = {k: v for k, v in _recipe_of(config).items() if k in _SFT_KEYS}
    meta = {"format": FORMAT, "system": "reference", "size": size, "recipe": recipe, "beta": None,
            "lr": None, "seed": E.WARMUP_SEED, "base_sha256": _base_sha(),
            "note": "the SFT warm-up of the base checkpoint (DPSDP's reference system), one model in both roles"}
    return RefinementPolicy(sft, sft, meta)


def train_policy(config: Mapping[str, Any] | None = None, *, size: str = "quick", seed: int = 0,
                 beta: float | None = None, lr: float | None = None) -> RefinementPolicy:
    """Train DPSDP's actor and critic (Algorithm 1, practical version) on the substrate, as Ray tasks.

    Steps: the SFT warm-up of ``size``'s recipe (the reference system, cached under
    ``~/.cache/rayml/alignment``); ``train_questions`` in-distribution training questions of the
    seed, collected in chunks under the reference (one ``pmap`` task per chunk); the actor trained
    by DPO on ``D_0 u D_2`` and the critic on ``D_1`` at ``beta`` and ``lr`` (one task).

    Args:
        config: settings overriding ``rayml.alignment.dpsdp_pipeline.SIZES[size]`` (e.g.
            ``{"dpo_steps": 60}``); None: the size as it is. ``model`` must stay ``"base"`` and
            ``lora_rank`` 0 (SmolLM2 LoRA policies are not supported).
        size: ``"tiny"``, ``"quick"`` or ``"full"``: the experiment's recipe.
        seed: the policy's seed (training questions, collection, DPO order).
        beta, lr: DPO's KL weight and learning rate; None: the quick record's tuned values for
            DPSDP (``docs/records/dpsdp.json``: beta 0.5, lr 3e-5, substrate, full fine-tuning,
            30 DPO steps), used at every size.

    Returns:
        The ``RefinementPolicy`` (``system="dpsdp"``); its ``meta`` records the recipe, beta, lr,
        seed, the base checkpoint's sha256, the DPO steps used and the pairs per turn. A recipe
        that yields no pairs leaves both agents at the reference (``meta["steps"] == 0``).
    """
    from rayml import runtime
    from rayml.alignment import dpsdp_pipeline as E

    config = _recipe(config, size)
    seed = _seed(seed)
    beta = _positive("beta", beta, DEFAULT_BETA)
    lr = _positive("lr", lr, DEFAULT_LR)
    sft = E.sft_state(config)
    s_questions, s_collect, s_train = runtime.seeds(seed, 3)
    chunk = int(config["chunk"])
    qs = E._train_items(config, int(config["train_questions"]), "train", s_questions % 2**31)
    pairs = E.collect(config, sft, {"policy": [qs[i:i + chunk] for i in range(0, len(qs), chunk)]}, s_collect)["policy"]
    shared = {"config": dict(config), "sft": sft, "pairs": pairs}
    out = runtime.pmap(_train_task, [(beta, lr, s_train % 2**31)], shared=shared, chunk_size=1, desc="DPSDP")[0]
    meta = {"format": FORMAT, "system": "dpsdp", "size": size, "recipe": _recipe_of(config), "beta": beta, "lr": lr,
            "seed": seed, "base_sha256": _base_sha(), "steps": out["steps"],
            "pairs": {k: len(pairs[k]) for k in ("d0", "d1", "d2")},
            "q_means": {k: float(np.mean([q[k] for q in pairs["q"]])) for k in ("q0", "q1", "q2")},
            "note": "DPSDP: actor by DPO on D0 u D2, critic on D1, against the SFT warm-up (reference)"}
    return RefinementPolicy(out["actor"], out["critic"], meta)


# ------------------------------------------------------------------------------------------
# files

def save_policy(policy: RefinementPolicy, path: str | os.PathLike) -> Path:
    """Write ``policy`` to ``path`` (a ``.npz``) atomically; returns the path."""
    if not isinstance(policy, RefinementPolicy):
        raise TypeError(f"policy must be a RefinementPolicy, got {type(policy).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"path must end in .npz, got {str(path)!r}")
    arrays = {f"actor/{k}": np.asarray(v) for k, v in policy.actor.items()}
    arrays.update({f"critic/{k}": np.asarray(v) for k, v in policy.critic.items()})
    arrays["__meta__"] = np.array(json.dumps(policy.meta, sort_keys=True))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would add ".npz" to a name
            np.savez(f, **arrays)

    atomic_write(path, write)
    return path


def load_policy(path: str | os.PathLike) -> RefinementPolicy:
    """Read a policy written by ``save_policy``, checked against the substrate model (every
    tensor's name, shape and dtype, finite values). A missing file is ``FileNotFoundError``; a
    file that is not a readable policy is ``ValueError``, both naming the path."""
    from rayml.alignment import dpsdp_pipeline as E

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no policy file at {str(path)!r} (write one with save_policy, or train the "
                                f"cached one with `python -m rayml.alignment.dpsdp_policy --size quick`)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays.pop("__meta__")))
    except (zipfile.BadZipFile, ValueError, OSError, KeyError, EOFError, TypeError) as exc:
        raise ValueError(f"{str(path)!r} is not a readable policy file ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("system") not in _SYSTEMS:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(f"{str(path)!r} is not a {FORMAT} file (format {got!r})")
    want = {k: (tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in E._base()[0].state_dict().items()}
    roles = {}
    for role in ("actor", "critic"):
        state = {k[len(role) + 1:]: v for k, v in arrays.items() if k.startswith(role + "/")}
        got = {k: (tuple(v.shape), str(v.dtype)) for k, v in state.items()}
        if got != want:
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            bad = sorted(k for k in set(want) & set(got) if want[k] != got[k])
            raise ValueError(f"{str(path)!r}: the {role}'s tensors do not fit the substrate model "
                             f"(missing {missing[:3]}, unexpected {extra[:3]}, wrong shape or dtype {bad[:3]})")
        if not all(np.isfinite(v).all() for v in state.values()):
            raise ValueError(f"{str(path)!r}: the {role} holds non-finite weights")
        roles[role] = state
    if meta["system"] == "reference" and all(np.array_equal(roles["actor"][k], roles["critic"][k]) for k in want):
        roles["critic"] = roles["actor"]
    return RefinementPolicy(roles["actor"], roles["critic"], meta)


def policy_path(config: Mapping[str, Any] | None = None, *, size: str = "quick", seed: int = 0,
                beta: float | None = None, lr: float | None = None) -> Path:
    """Where ``cached_policy`` keeps this policy: ``<cache>/alignment/dpsdp-policy-<key>.npz``, the
    key a hash of the recipe, beta, lr, seed and the base checkpoint's sha256 (``RAYML_CACHE``)."""
    from rayml import runtime

    config = _recipe(config, size)
    blob = json.dumps({"format": FORMAT, "recipe": _recipe_of(config), "beta": _positive("beta", beta, DEFAULT_BETA),
                       "lr": _positive("lr", lr, DEFAULT_LR), "seed": _seed(seed), "base": _base_sha()},
                      sort_keys=True)
    return runtime.cache_root() / "alignment" / f"dpsdp-policy-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.npz"


def cached_policy(config: Mapping[str, Any] | None = None, *, size: str = "quick", seed: int = 0,
                  beta: float | None = None, lr: float | None = None,
                  train_if_missing: bool = True) -> RefinementPolicy:
    """``train_policy``'s policy, read from the cache (``policy_path``) or trained and cached there.
    With ``train_if_missing=False`` an absent policy is ``FileNotFoundError`` with the command that
    trains it."""
    if not isinstance(train_if_missing, bool):
        raise TypeError(f"train_if_missing must be a bool, got {type(train_if_missing).__name__}")
    path = policy_path(config, size=size, seed=seed, beta=beta, lr=lr)
    if path.is_file():
        return load_policy(path)
    if not train_if_missing:
        cmd = f"python -m rayml.alignment.dpsdp_policy --size {size} --seed {seed}"
        cmd += (f" --beta {beta}" if beta is not None else "") + (f" --lr {lr}" if lr is not None else "")
        raise FileNotFoundError(f"the DPSDP policy of size {size!r} (seed {seed}) is not cached at {path}; "
                                f"train it with `{cmd}`" + (" (and the same config overrides)" if config else ""))
    policy = train_policy(config, size=size, seed=seed, beta=beta, lr=lr)
    save_policy(policy, path)
    return policy


def main(argv=None) -> int:
    """``python -m rayml.alignment.dpsdp_policy``: train and cache a policy (or the warm-up only)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m rayml.alignment.dpsdp_policy",
                                description="Train and cache a DPSDP refinement policy of the substrate model.")
    p.add_argument("--size", default="quick", help="tiny, quick or full (the dpsdp experiment's recipe)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--beta", type=float, default=None, help=f"default {DEFAULT_BETA} (the quick record's)")
    p.add_argument("--lr", type=float, default=None, help=f"default {DEFAULT_LR} (the quick record's)")
    p.add_argument("--reference", action="store_true", help="only make sure the SFT warm-up is cached")
    p.add_argument("--out", default=None, help="also save the policy to this .npz")
    args = p.parse_args(argv)
    try:
        if args.reference:
            policy = reference_policy(size=args.size)
            where = None
        else:
            where = policy_path(size=args.size, seed=args.seed, beta=args.beta, lr=args.lr)
            policy = cached_policy(size=args.size, seed=args.seed, beta=args.beta, lr=args.lr)
        if args.out:
            save_policy(policy, args.out)
    except (ValueError, TypeError) as exc:
        p.error(str(exc))
    print(json.dumps({"cached": str(where) if where else None, "out": args.out, **policy.meta}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
