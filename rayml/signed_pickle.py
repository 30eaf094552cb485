"""Pickled state that is verified before anything is unpickled.

Some resumable state cannot be stored without pickle (pymoo's algorithm objects hold functions).
Unpickling a file runs whatever code it names, so a checkpoint in an output folder that someone
else can write would be code execution. ``dump`` writes a JSON header (format, the caller's
fingerprint) and an HMAC-SHA256 of header and payload under this user's key
(``$RAYML_CACHE/signing.key``, created with mode 0600); ``load`` checks the header's fingerprint
and the MAC first, and unpickles only a file this user's key signed for this fingerprint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

__all__ = ["dump", "load", "InvalidCheckpoint"]

MAGIC = b"RAYML-SIGNED-PICKLE-1\n"


class InvalidCheckpoint(ValueError):
    """The file is not a checkpoint this user signed for this fingerprint."""


def _key() -> bytes:
    from rayml.runtime import cache_root

    path = cache_root() / "signing.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            return path.read_bytes()
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
        return key


def dump(obj: Any, path: str | os.PathLike, fingerprint: str) -> None:
    """Pickle ``obj`` (cloudpickle) to ``path`` atomically, signed for ``fingerprint``."""
    import cloudpickle

    payload = cloudpickle.dumps(obj)
    header = json.dumps({"fingerprint": fingerprint, "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    mac = hmac.new(_key(), header + b"\n" + payload, hashlib.sha256).hexdigest().encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(MAGIC + header + b"\n" + mac + b"\n" + payload)
    os.replace(tmp, path)


def load(path: str | os.PathLike, fingerprint: str) -> Any:
    """The object ``dump`` wrote to ``path`` for ``fingerprint``; ``InvalidCheckpoint`` (before
    unpickling anything) for another fingerprint, a foreign or altered file."""
    import pickle

    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise InvalidCheckpoint(f"{path}: not a rayml signed checkpoint")
    try:
        header, mac, payload = data[len(MAGIC):].split(b"\n", 2)
        meta = json.loads(header)
    except ValueError:
        raise InvalidCheckpoint(f"{path}: malformed header") from None
    if meta.get("fingerprint") != fingerprint:
        raise InvalidCheckpoint(f"{path}: made for another run (fingerprint {meta.get('fingerprint')!r})")
    want = hmac.new(_key(), header + b"\n" + payload, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, want):
        raise InvalidCheckpoint(f"{path}: signature does not match this user's key (altered or foreign)")
    return pickle.loads(payload)
