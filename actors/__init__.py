"""``rayml.actors``: installed from this top-level folder (see setup.py).

Imported under the bare name ``actors`` (the repository root on ``sys.path``), it hands the import to
an installed package of that name, so the folder never shadows one; without one it stays an
empty module (``rayml._shadow``).
"""

if __name__ != "rayml.actors":
    import rayml._shadow as _shadow

    _shadow.hand_over(__name__, __file__)
