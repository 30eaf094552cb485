"""rayml: Ray-native implementations of ICML 2025 methods.

Pure cores live in family subpackages (``rayml.optim``, ``rayml.decoding``, ``rayml.kvcache``
...), the language-model substrate in ``rayml.llm``, the Ray layer in ``rayml.runtime`` and
``rayml.actors``, reproductions in ``rayml.experiments``.
"""

from rayml import _compat

__version__ = "0.2.0"
__all__ = ["__version__"]

_compat.install()  # old paths of modules that moved (rayml.llm.grammar ...) warn and still work
