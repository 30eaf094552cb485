"""A text classification set built from shipped texts, and its all-MiniLM-L6-v2 embeddings.

``stdlib_docstrings()``: every docstring (module, class, function; at least ``MIN_CHARS``
characters) of the running Python's standard library source, labelled by the *family* of the
top-level module it is in: twelve topical families (``FAMILIES``: GUI, packaging and imports,
concurrency, web, mail, code tools, files and archives, testing and debugging, numbers, text
processing, logging, XML). Test suites are left out; a text found in two families is dropped, a
repeated text within a family kept once; texts are sorted within each family, so the set depends on
the Python version only (its sha256 fingerprint is returned with it). The majority families have
hundreds to over a thousand texts (GUI about 1470 on CPython 3.11), the smallest about 220.

``docstring_embeddings()``: their all-MiniLM-L6-v2 sentence embeddings (``rayml.data.minilm``),
computed once and cached under ``<cache_root>/embeddings/`` keyed by the corpus fingerprint and the
encoder's ``model.safetensors`` sha256. With a Ray worker pool the batches run as ``pmap`` tasks
that rebuild the encoder from its weights sent through the object store.

``imbalanced_text(E, y, seed, ...)``: the active-learning pool and test set, made like
``rayml.data.active_learning.imbalanced_digits``: per seed, ``TEST_PER_CLASS`` texts of every
family form the clean, balanced test set; ``n_majority`` majority families (drawn among those with
at least ``MAJORITY_SIZE + TEST_PER_CLASS`` texts) keep ``MAJORITY_SIZE`` pool texts each, every
other family keeps ``round(minority_fraction * MAJORITY_SIZE)`` (1:20 at 5%); a ``noise`` share of
the pool's labels is replaced by a uniformly drawn other family, fixed per text.

Assumed (this reproduction's choices, not the paper's data): docstrings labelled by stdlib family
as the text classification task; the sizes above.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["FAMILIES", "MIN_CHARS", "MAJORITY_SIZE", "TEST_PER_CLASS", "MAX_MAJORITY", "TextSet",
           "stdlib_docstrings", "embeddings_path", "docstring_embeddings", "available", "imbalanced_text",
           "rare_vs_others_text"]

FAMILIES: dict[str, tuple[str, ...]] = {
    "gui": ("tkinter", "idlelib", "turtle", "turtledemo"),
    "packaging": ("importlib", "distutils", "pkgutil", "zipimport", "ensurepip", "venv", "site", "modulefinder",
                  "runpy", "sysconfig"),
    "concurrency": ("asyncio", "multiprocessing", "concurrent", "threading", "queue", "selectors", "sched",
                    "_threading_local"),
    "web": ("http", "urllib", "wsgiref", "xmlrpc", "html", "cgi", "cgitb", "webbrowser", "socketserver", "ftplib",
            "telnetlib", "ssl", "socket"),
    "mail": ("email", "mailbox", "smtplib", "imaplib", "poplib", "nntplib", "mailcap", "smtpd"),
    "code": ("lib2to3", "ast", "tokenize", "dis", "inspect", "symtable", "pyclbr", "compileall", "py_compile", "code",
             "codeop", "token", "keyword", "opcode", "pydoc"),
    "files": ("tarfile", "zipfile", "gzip", "bz2", "lzma", "shutil", "pathlib", "glob", "fnmatch", "tempfile",
              "filecmp", "fileinput", "os", "ntpath", "posixpath", "genericpath", "stat", "_compression", "zipapp"),
    "testing": ("unittest", "doctest", "pdb", "bdb", "trace", "timeit", "cProfile", "profile", "pstats",
                "tracemalloc"),
    "numeric": ("_pydecimal", "fractions", "statistics", "numbers", "random", "decimal", "colorsys", "cmath"),
    "text": ("string", "re", "textwrap", "difflib", "codecs", "encodings", "locale", "gettext", "unicodedata",
             "stringprep", "sre_parse", "sre_compile", "sre_constants", "_markupbase"),
    "logging": ("logging",),
    "xml": ("xml", "pyexpat"),
}
MIN_CHARS = 30
MAJORITY_SIZE = 500
TEST_PER_CLASS = 30
MAX_MAJORITY = 3  # the "one or two majority classes", and one more
_SKIP_PARTS = {"test", "tests", "idle_test", "site-packages"}


class TextSet(NamedTuple):
    """The texts, their family labels, the family names and the set's sha256 fingerprint."""

    texts: tuple[str, ...]
    labels: np.ndarray
    families: tuple[str, ...]
    fingerprint: str


def _module_family() -> dict[str, int]:
    return {m: i for i, ms in enumerate(FAMILIES.values()) for m in ms}


def _docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc.strip()) >= MIN_CHARS:
                out.append(doc.strip())
    return out


@functools.lru_cache(maxsize=2)
def stdlib_docstrings(stdlib: str | None = None) -> TextSet:
    """The docstrings of the standard library at ``stdlib`` (default: the running Python's),
    labelled by family index into ``FAMILIES`` (see the module docstring)."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise ValueError(f"stdlib must be a directory of Python sources, got {str(root)!r}")
    fam = _module_family()
    found: dict[str, set[int]] = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if _SKIP_PARTS.intersection(rel.parts):
            continue
        top = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if top not in fam:
            continue
        for doc in _docstrings(p):
            found.setdefault(doc, set()).add(fam[top])
    texts, labels = [], []
    for k in range(len(FAMILIES)):
        mine = sorted(t for t, fs in found.items() if fs == {k})
        texts += mine
        labels += [k] * len(mine)
    if not texts:
        raise ValueError(f"no docstrings found under {str(root)!r}")
    h = hashlib.sha256()
    for t, y in zip(texts, labels):
        h.update(f"{y}\x00{t}\x01".encode())
    return TextSet(tuple(texts), np.asarray(labels, dtype=np.int64), tuple(FAMILIES), h.hexdigest())


def embeddings_path(fingerprint: str) -> Path:
    """``<cache_root>/embeddings/stdlib-docstrings-<corpus[:16]>-minilm-<safetensors[:16]>.npy``."""
    from rayml.data import minilm
    from rayml.runtime import cache_root

    name = f"stdlib-docstrings-{fingerprint[:16]}-minilm-{minilm.SAFETENSORS_SHA256[:16]}.npy"
    return cache_root() / "embeddings" / name


def available() -> None:
    """Raise ``minilm.EncoderUnavailable`` (one line, what to install) unless the embeddings are
    cached or the encoder can be loaded; cheap, for checking before any work."""
    from rayml.data import minilm

    if embeddings_path(stdlib_docstrings().fingerprint).exists():
        return
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise minilm.EncoderUnavailable(f"dataset 'docstrings' needs transformers (missing): {minilm.INSTALL_HINT}")
    if not minilm._complete(minilm.cache_dir()) and minilm.installed_zip() is None:
        raise minilm.EncoderUnavailable(f"dataset 'docstrings' needs the {minilm.NAME} encoder: {minilm.INSTALL_HINT}")


def _encode_task(batch: list[str], bundle: dict) -> np.ndarray:
    import torch

    torch.set_num_threads(1)  # the same reduction order in every worker and in the driver
    from rayml.data import minilm

    key = bundle["sha256"]
    cache = _encode_task.__dict__.setdefault("model", {})
    if key not in cache:
        cache.clear()
        cache[key] = minilm.model_from_bundle(bundle)
    tok, model = cache[key]
    return minilm.encode_batch(tok, model, batch)


def docstring_embeddings(stdlib: str | None = None, *, batch_size: int = 64,
                         on_ray: bool | None = None) -> tuple[np.ndarray, np.ndarray, TextSet]:
    """``(E, y, textset)``: unit-norm float32 all-MiniLM-L6-v2 embeddings of ``stdlib_docstrings(stdlib)``
    (default: the running Python's standard library; any directory of Python sources laid out like it),
    from the cache or computed once (fixed batches, longest texts first, one torch thread; on Ray
    when ``on_ray`` or, by default, when Ray is connected) and cached atomically, keyed by the set's
    fingerprint."""
    from rayml.data import minilm

    ts = stdlib_docstrings(stdlib)
    path = embeddings_path(ts.fingerprint)
    if path.exists():
        E = np.load(path)
        if E.shape == (len(ts.texts), minilm.DIM):
            return E, ts.labels, ts
    available()
    texts = list(ts.texts)
    batches = minilm.length_batches(texts, batch_size)
    if on_ray is None:
        on_ray = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    if on_ray:
        from rayml import runtime

        parts = runtime.pmap(_encode_task, [[texts[i] for i in idx] for idx in batches],
                             shared=minilm.weights_bundle(), desc="minilm embeddings", progress=False)
    else:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            tok, model = minilm.load()
            parts = [minilm.encode_batch(tok, model, [texts[i] for i in idx]) for idx in batches]
        finally:
            torch.set_num_threads(threads)
    E = np.zeros((len(texts), minilm.DIM), dtype=np.float32)
    for idx, part in zip(batches, parts):
        E[idx] = part
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".npy", dir=path.parent)
    os.close(fd)
    np.save(tmp, E)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return E, ts.labels, ts


def imbalanced_text(E: np.ndarray, y: np.ndarray, seed: int, *, n_majority: int = 2, minority_fraction: float = 0.05,
                    noise: float = 0.0, majority_size: int = MAJORITY_SIZE, test_per_class: int = TEST_PER_CLASS):
    """The imbalanced, noisy pool and clean balanced test set of this reproduction (module docstring),
    as ``rayml.data.active_learning.ActiveData``."""
    from rayml.data.active_learning import ActiveData

    E, y = np.asarray(E), np.asarray(y)
    if E.ndim != 2 or y.ndim != 1 or E.shape[0] != y.size:
        raise ValueError(f"E must be (n, d) and y (n,), got {E.shape} and {y.shape}")
    C = int(y.max()) + 1
    counts = np.bincount(y, minlength=C)
    for name, v in (("majority_size", majority_size), ("test_per_class", test_per_class)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    eligible = np.flatnonzero(counts >= majority_size + test_per_class)
    most = min(MAX_MAJORITY, eligible.size)
    if isinstance(n_majority, bool) or not isinstance(n_majority, int) or not 1 <= n_majority <= most:
        raise ValueError(f"n_majority must be an integer in [1, {most}], got {n_majority!r}")
    if not 0 < minority_fraction <= 1:
        raise ValueError(f"minority_fraction must be in (0, 1], got {minority_fraction!r}")
    if not 0 <= noise < 0.9:
        raise ValueError(f"noise must be in [0, 0.9), got {noise!r}")
    n_minor = max(1, int(round(minority_fraction * majority_size)))
    if counts.min() < test_per_class + n_minor:
        raise ValueError(f"every class needs {test_per_class + n_minor} texts, the smallest has {counts.min()}")
    rng = np.random.default_rng(seed)
    majority = np.sort(rng.choice(eligible, size=n_majority, replace=False))
    test, pool = [], []
    for c in range(C):
        idx = rng.permutation(np.flatnonzero(y == c))
        test.append(idx[:test_per_class])
        pool.append(idx[test_per_class:test_per_class + (majority_size if c in majority else n_minor)])
    test, pool = np.sort(np.concatenate(test)), np.sort(np.concatenate(pool))
    y_pool = y[pool]
    flip = rng.random(y_pool.size) < noise
    other = (y_pool + rng.integers(1, C, size=y_pool.size)) % C
    return ActiveData(X_pool=np.asarray(E[pool], dtype=np.float64), y_true=y_pool,
                      y_noisy=np.where(flip, other, y_pool), X_test=np.asarray(E[test], dtype=np.float64),
                      y_test=y[test], n_classes=C,
                      minority=tuple(int(c) for c in range(C) if c not in majority))


def rare_vs_others_text(E: np.ndarray, y: np.ndarray, seed: int, *, n_rare: int = 3, rare_size: int = 100,
                        noise: float = 0.0, test_per_class: int = TEST_PER_CLASS):
    """LabelBench's kind of imbalance: a few rare classes and one large merged "others" class.

    Per seed, ``n_rare`` families (drawn among those with at least ``rare_size + test_per_class``
    texts) are the rare classes ``0 .. n_rare - 1`` with ``rare_size`` pool texts each; every text of
    every other family is merged into class ``n_rare`` ("others"). The test set holds
    ``test_per_class`` texts of each of the ``n_rare + 1`` classes (clean, balanced; the "others"
    ones drawn from the merged families), kept out of the pool. With the stdlib docstrings (6366
    texts) the pool has about 5800 texts, about 1:55 per rare class.

    ``noise``: a class-conditional flip, fixed per text: ``round(noise * rare_size)`` texts of each
    rare class are labelled "others" and as many "others" texts are labelled that rare class, so
    every rare class's observed labels are ``noise`` wrong and a flipped "others" text never
    outnumbers the true members of a rare class (a uniform flip of the large class would: at 10%
    about 180 wrong labels per rare class against 100 true ones).
    """
    from rayml.data.active_learning import ActiveData

    E, y = np.asarray(E), np.asarray(y)
    if E.ndim != 2 or y.ndim != 1 or E.shape[0] != y.size:
        raise ValueError(f"E must be (n, d) and y (n,), got {E.shape} and {y.shape}")
    for name, v in (("n_rare", n_rare), ("rare_size", rare_size), ("test_per_class", test_per_class)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not 0 <= noise < 0.5:
        raise ValueError(f"noise must be in [0, 0.5), got {noise!r}")
    counts = np.bincount(y)
    eligible = np.flatnonzero(counts >= rare_size + test_per_class)
    if n_rare >= counts.size or eligible.size < n_rare:
        raise ValueError(f"n_rare must leave at least one family to merge and have {n_rare} families with "
                         f"{rare_size + test_per_class} texts, got n_rare={n_rare} ({eligible.size} eligible)")
    rng = np.random.default_rng(seed)
    rare = np.sort(rng.choice(eligible, size=n_rare, replace=False))
    test, pool, labels = [], [], []
    for k, fam in enumerate(rare):
        idx = rng.permutation(np.flatnonzero(y == fam))
        test.append(idx[:test_per_class])
        pool.append(idx[test_per_class:test_per_class + rare_size])
        labels.append(np.full(rare_size, k))
    rest = rng.permutation(np.flatnonzero(~np.isin(y, rare)))
    test.append(rest[:test_per_class])
    pool.append(rest[test_per_class:])
    labels.append(np.full(rest.size - test_per_class, n_rare))
    pool, y_pool = np.concatenate(pool), np.concatenate(labels)
    y_test = np.concatenate([np.full(t.size, k) for k, t in enumerate(test)])
    test = np.concatenate(test)
    y_noisy = y_pool.copy()
    m = int(round(noise * rare_size))
    if m:
        others = rng.permutation(np.flatnonzero(y_pool == n_rare))
        for k in range(n_rare):
            members = rng.choice(np.flatnonzero(y_pool == k), size=m, replace=False)
            y_noisy[members] = n_rare
            y_noisy[others[k * m:(k + 1) * m]] = k
    order = np.argsort(pool, kind="stable")
    return ActiveData(X_pool=np.asarray(E[pool[order]], dtype=np.float64), y_true=y_pool[order].astype(np.int64),
                      y_noisy=y_noisy[order].astype(np.int64), X_test=np.asarray(E[test], dtype=np.float64),
                      y_test=y_test.astype(np.int64), n_classes=n_rare + 1, minority=tuple(range(n_rare)))
