"""rayml.quant.corpus: English calibration / held-out text from installed packages."""

import numpy as np
import pytest

from rayml.quant import corpus


class _CharTok:
    """A stand-in tokenizer (one id per character) so the windows can be checked by hand."""

    def encode(self, text):
        return [ord(c) for c in text]


def test_splits_are_disjoint_english_documents():
    cal, held = corpus.documents("calibration"), corpus.documents("heldout")
    assert len(cal) > 50 and len(held) > 20
    assert not {n for n, _ in cal} & {n for n, _ in held}
    assert not set(corpus.CALIBRATION_MODULES) & set(corpus.HELDOUT_MODULES)
    assert any(n.startswith("sklearn.datasets.descr.") for n, _ in held)
    text = " ".join(t for _, t in cal)
    for word in (" the ", " of ", " and ", " is "):  # prose, not code
        assert text.count(word) > 200
    assert corpus.corpus_fingerprint("heldout") == corpus.corpus_fingerprint("heldout")
    assert corpus.corpus_fingerprint("heldout") != corpus.corpus_fingerprint("calibration")


def test_token_windows_are_distinct_seeded_slices_of_the_text():
    tok = _CharTok()
    stream = np.asarray(tok.encode("\n\n".join(t for _, t in corpus.documents("heldout"))))
    w = corpus.token_windows(tok, "heldout", 5, 40, seed=3)
    assert w.shape == (5, 40) and w.dtype == np.int64
    starts = []
    for row in w:  # every window is a slice of the stream at a multiple of its length
        hits = [i for i in range(0, len(stream) - 39, 40) if np.array_equal(stream[i:i + 40], row)]
        assert hits
        starts.append(hits[0])
    assert starts == sorted(set(starts))
    assert np.array_equal(w, corpus.token_windows(tok, "heldout", 5, 40, seed=3))
    assert not np.array_equal(w, corpus.token_windows(tok, "heldout", 5, 40, seed=4))


def test_bad_input():
    with pytest.raises(ValueError, match="split"):
        corpus.documents("train")
    with pytest.raises(ValueError, match="length"):
        corpus.token_windows(_CharTok(), "heldout", 2, 0, seed=0)
    with pytest.raises(ValueError, match="n:"):
        corpus.token_windows(_CharTok(), "heldout", 10 ** 7, 64, seed=0)
