"""Real English text that ships with installed packages, for calibrating and evaluating quantized LMs.

Nothing is downloaded. Two disjoint sources:

* ``calibration``: docstrings (module, public top-level classes and functions, read from the
  source files) of the standard-library modules in ``CALIBRATION_MODULES`` - the counterpart of GPTQ's / GANQ's C4 calibration
  sequences;
* ``heldout``: the dataset descriptions that ship with scikit-learn (``sklearn/datasets/descr/*.rst``)
  and the docstrings of the standard-library modules in ``HELDOUT_MODULES`` (no module in both
  lists) - the counterpart of the paper's WikiText-2 evaluation text.

The text depends on the installed Python and scikit-learn versions; ``corpus_fingerprint`` hashes
it so a record can say which text it measured. ``token_windows`` cuts a split's text (documents
joined by a blank line) into non-overlapping windows of a fixed number of tokens and draws some of
them with a seeded generator.

Examples:
    >>> docs = documents("heldout")
    >>> len(docs) > 10 and all(len(text) >= MIN_CHARS for _, text in docs)
    True
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["CALIBRATION_MODULES", "HELDOUT_MODULES", "SPLITS", "MIN_CHARS", "documents", "corpus_fingerprint",
           "token_windows"]

CALIBRATION_MODULES = ("argparse", "asyncio", "collections", "configparser", "contextlib", "csv", "dataclasses",
                       "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "heapq",
                       "inspect", "ipaddress", "json", "logging", "pathlib", "pickle", "random", "re", "shutil",
                       "socket", "subprocess", "tarfile", "threading", "typing", "unittest")
HELDOUT_MODULES = ("bisect", "calendar", "mailbox", "statistics", "string", "textwrap", "tempfile", "zipfile",
                   "urllib.parse", "smtplib", "shlex", "imaplib", "sqlite3", "uuid", "warnings", "pprint")
SPLITS = ("calibration", "heldout")
MIN_CHARS = 200  # shorter docstrings are mostly signatures, not prose


def _docstrings(module_name: str) -> list[tuple[str, str]]:
    """The module's docstring and those of its public top-level classes and functions, read from its
    source file with ``ast`` (nothing is imported, so what other code patches at run time - Ray
    replaces ``inspect.isgenerator``, for one - cannot change the text)."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    out = []
    doc = ast.get_docstring(tree, clean=True)
    if doc:
        out.append((module_name, doc))
    for node in sorted((n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))),
                       key=lambda n: n.name):
        doc = ast.get_docstring(node, clean=True)
        if doc and not node.name.startswith("_"):
            out.append((f"{module_name}.{node.name}", doc))
    return out


def _sklearn_descriptions() -> list[tuple[str, str]]:
    import sklearn

    folder = Path(sklearn.__file__).parent / "datasets" / "descr"
    return [(f"sklearn.datasets.descr.{p.stem}", p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.rst"))]


@lru_cache(maxsize=None)
def _documents(split: str) -> tuple[tuple[str, str], ...]:
    if split == "calibration":
        docs = [d for m in CALIBRATION_MODULES for d in _docstrings(m)]
    else:
        docs = _sklearn_descriptions() + [d for m in HELDOUT_MODULES for d in _docstrings(m)]
    return tuple((name, text.strip()) for name, text in docs if len(text.strip()) >= MIN_CHARS)


def documents(split: str) -> list[tuple[str, str]]:
    """``[(source, text)]`` of a split (``"calibration"`` or ``"heldout"``), in a fixed order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return list(_documents(split))


def corpus_fingerprint(split: str) -> str:
    """sha256[:16] of a split's text (it changes with the Python / scikit-learn version)."""
    h = hashlib.sha256()
    for name, text in documents(split):
        h.update(name.encode())
        h.update(text.encode())
    return h.hexdigest()[:16]


def token_windows(tokenizer, split: str, n: int, length: int, seed) -> np.ndarray:
    """``(n, length)`` token ids: ``n`` distinct non-overlapping windows of a split's text.

    The split's documents are joined by a blank line and tokenized once (no special tokens); the
    token stream is cut into consecutive windows of ``length`` tokens and ``n`` of them are drawn
    without replacement by ``numpy.random.default_rng(seed)`` (an int or a sequence of ints), kept in
    text order.
    """
    for arg, v in (("n", n), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be an integer >= 1, got {v!r}")
    ids = _token_stream(tokenizer, split)
    count = len(ids) // int(length)
    if count < n:
        raise ValueError(f"n: the {split} text holds {count} windows of {length} tokens, asked for {n}")
    pick = np.sort(np.random.default_rng(seed).choice(count, size=int(n), replace=False))
    return np.stack([ids[i * length:(i + 1) * length] for i in pick]).astype(np.int64)


_STREAMS: dict = {}


def _token_stream(tokenizer, split: str) -> np.ndarray:
    key = (id(tokenizer), split)
    if key not in _STREAMS:
        text = "\n\n".join(t for _, t in documents(split))
        _STREAMS[key] = np.asarray(tokenizer.encode(text), dtype=np.int64)
    return _STREAMS[key]
