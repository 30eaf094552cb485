"""The top-level ``actors/`` and ``kernels/`` folders are ``rayml.actors`` and ``rayml.kernels`` only.

Run from the repository root (``python -m pytest``, ``rayml run``, Ray workers started from there),
the root is on ``sys.path`` and ``import kernels`` would find the source folder before an installed
package of that name (PyPI's ``kernels``, which transformers imports). Each folder's ``__init__``
calls ``hand_over`` when it is imported under its bare name: the import is answered with the
installed package found on the rest of ``sys.path``, or fails as if the folder were not there.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["hand_over"]


def hand_over(name: str, init_file: str) -> None:
    """Replace the module ``name`` (a top-level source folder) by the installed package ``name``.

    Args:
        name: the bare module name under which the folder was imported (``"kernels"``).
        init_file: that folder's ``__init__.py``; the folder's parent is left off the search path.

    Where no installed package of that name exists, the module stays the folder's empty one (no
    public names): a failed import here would break code that, like transformers' availability
    checks, imports any module ``find_spec`` reports and does not expect the import to fail.
    """
    root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(init_file))))
    path = [p for p in sys.path if isinstance(p, str) and os.path.realpath(p or os.getcwd()) != root]
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the import statement returns what sys.modules holds after this file runs
    spec.loader.exec_module(module)
