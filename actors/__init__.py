"""``rayml.actors``: installed from this top-level folder (see setup.py).

Imported under the bare name ``actors`` (the repository root on ``sys.path``), it hands the import to
an installed package of that name, so the folder never shadows one (``rayml._shadow``).
"""

if __name__ != "rayml.actors":
    from rayml._shadow import hand_over

    hand_over(__name__, __file__)
