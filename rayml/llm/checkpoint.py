"""Saving and loading checkpoints: ``model.safetensors`` + ``tokenizer.json`` + ``card.json``.

The card records the model config, the training recipe (command, seed, data mixture), the
training time and the per-task scores; ``sha256`` of the weight file lets tests check that the
shipped weights are the ones the card describes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch

from rayml.llm.model import ModelConfig, TransformerLM
from rayml.llm.tokenizer import BPETokenizer

__all__ = ["save_checkpoint", "load_checkpoint", "read_card", "CheckpointBlob", "read_blob", "file_sha256", "WEIGHTS_FILE", "CARD_FILE",
           "TOKENIZER_FILE"]

WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "card.json"
TOKENIZER_FILE = "tokenizer.json"


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def record_sha256(value: str) -> str:
    """A wheel RECORD's ``sha256=<urlsafe base64>`` (or the bare base64 part) as hex."""
    raw = value.split("=", 1)[1] if value.startswith("sha256=") else value
    import base64

    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()


def publish_dir(tmp: Path, final: Path, complete) -> Path:
    """Move the finished directory ``tmp`` to ``final`` in one rename (readable by others, not
    mkdtemp's 0700); if another process published ``final`` meanwhile (``complete(final)``), keep
    theirs and drop ``tmp``. ``tmp`` is removed on any failure."""
    import shutil

    try:
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            if not complete(final):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def save_checkpoint(directory: str | os.PathLike, model: TransformerLM, tokenizer: BPETokenizer, card: dict,
                    *, dtype: torch.dtype = torch.float32) -> dict:
    """Write weights (``dtype``), tokenizer and card (completed with config, dtype, sha256)."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)
    tmp = d / (WEIGHTS_FILE + ".tmp")
    save_file(state, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, d / WEIGHTS_FILE)
    tokenizer.save(d / TOKENIZER_FILE)
    card = dict(card)
    card["model_config"] = model.config.to_dict()
    card["dtype"] = str(dtype).replace("torch.", "")
    card["n_params"] = model.num_parameters()
    card["sha256"] = {WEIGHTS_FILE: file_sha256(d / WEIGHTS_FILE), TOKENIZER_FILE: file_sha256(d / TOKENIZER_FILE)}
    tmp = d / (CARD_FILE + ".tmp")
    tmp.write_text(json.dumps(card, indent=1, sort_keys=True))
    os.replace(tmp, d / CARD_FILE)
    return card


def read_card(directory: str | os.PathLike) -> dict:
    """The card of a checkpoint directory."""
    return json.loads((Path(directory) / CARD_FILE).read_text())


@dataclass(frozen=True)
class CheckpointBlob:
    """A checkpoint's files as bytes: what travels to Ray tasks and actors on other nodes in place of
    a node-local directory (whose path means nothing there). ``load_checkpoint`` takes either."""

    files: Mapping[str, bytes]

    @property
    def digest(self) -> str:
        """Hex sha256 of the weights file (a cache key that is the same on every node)."""
        return hashlib.sha256(self.files[WEIGHTS_FILE]).hexdigest()

    @property
    def card(self) -> dict:
        """The checkpoint's card."""
        return json.loads(self.files[CARD_FILE])


def read_blob(directory: str | os.PathLike) -> CheckpointBlob:
    """The weights, tokenizer and card of a checkpoint directory as a ``CheckpointBlob``."""
    d = Path(directory)
    return CheckpointBlob({name: (d / name).read_bytes() for name in (WEIGHTS_FILE, TOKENIZER_FILE, CARD_FILE)})


def load_checkpoint(directory: str | os.PathLike | CheckpointBlob, *, device: str = "cpu"
                    ) -> tuple[TransformerLM, BPETokenizer, dict]:
    """``(model in float32, eval mode; tokenizer; card)`` from a checkpoint directory or blob."""
    from safetensors.torch import load_file

    if isinstance(directory, CheckpointBlob):
        with tempfile.TemporaryDirectory(prefix="rayml-ckpt-") as tmp:
            for name, data in directory.files.items():
                (Path(tmp) / name).write_bytes(data)
            return load_checkpoint(tmp, device=device)
    d = Path(directory)
    card = read_card(d)
    model = TransformerLM(ModelConfig(**card["model_config"]))
    state = {k: v.float() for k, v in load_file(str(d / WEIGHTS_FILE)).items()}
    if model.config.tie_embeddings:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    model.load_state_dict(state)
    model.to(device).eval()
    return model, BPETokenizer.load(d / TOKENIZER_FILE), card
