"""rayml: Ray-native implementations of ICML 2025 methods.

Pure cores live in family subpackages (``rayml.optim`` ...), the Ray layer in
``rayml.runtime`` and ``rayml.actors``, reproductions in ``rayml.experiments``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
