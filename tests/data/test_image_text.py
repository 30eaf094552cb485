"""rayml.data.image_text: the project's CLIP-style digits encoder."""

import numpy as np
import pytest
import torch

from rayml.data import image_text as it


SMALL = it.EncoderConfig(epochs=2)


@pytest.fixture(scope="module")
def encoder():
    return it.train_encoder(seed=0)


def test_zero_shot_accuracy_on_held_out_digits_far_above_chance(encoder):
    _, _, x, y = it.digits_split()
    acc = float((encoder.zero_shot_predict(x) == y).mean())
    assert acc > 0.8, acc  # chance is 0.1


def test_image_to_caption_retrieval_and_caption_to_image(encoder):
    _, _, x, y = it.digits_split()
    img = encoder.encode_images(x[:200])
    txt = encoder.encode_texts([it.caption(k, 0) for k in range(10)])
    # text -> image: the nearest held-out image of each class caption has that class
    nearest = np.argmax(txt @ img.T, axis=1)
    assert (y[:200][nearest] == np.arange(10)).mean() >= 0.9
    # embeddings are unit norm
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1.0, atol=1e-5)


def test_training_is_deterministic_from_the_seed():
    one, again = it.train_encoder(seed=0, config=SMALL), it.train_encoder(seed=0, config=SMALL)
    for (k, a), (_, b) in zip(one.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
    other = it.train_encoder(seed=1, config=SMALL)
    assert not torch.equal(one.state_dict()["text_tower.0.weight"], other.state_dict()["text_tower.0.weight"])


def test_load_or_train_caches_under_rayml_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    first = it.load_or_train(seed=0, config=SMALL)
    files = list((tmp_path / "image_text").glob("clip-digits-*.pt"))
    assert len(files) == 1
    second = it.load_or_train(seed=0, config=SMALL)  # loaded from the file
    x = it.digits_split()[2][:20]
    np.testing.assert_array_equal(first.encode_images(x), second.encode_images(x))
    np.testing.assert_array_equal(first.encode_images(x), it.train_encoder(0, SMALL).encode_images(x))
    # another seed or config is another file
    it.load_or_train(seed=1, config=SMALL)
    assert len(list((tmp_path / "image_text").glob("clip-digits-*.pt"))) == 2
    # a corrupt file is retrained over
    files[0].write_bytes(b"not a checkpoint")
    third = it.load_or_train(seed=0, config=SMALL)
    np.testing.assert_array_equal(third.encode_images(x), first.encode_images(x))


def test_contrastive_loss_against_a_loop():
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(5, 4, generator=g), dim=-1)
    txt = torch.nn.functional.normalize(torch.randn(5, 4, generator=g), dim=-1)
    scale = torch.tensor(np.log(10.0))
    s = 10.0 * (img @ txt.T).double()
    ref = 0.0
    for i in range(5):
        ref -= 0.5 * (s[i, i] - torch.logsumexp(s[i], 0)) / 5
        ref -= 0.5 * (s[i, i] - torch.logsumexp(s[:, i], 0)) / 5
    assert abs(float(it.contrastive_loss(img, txt, scale)) - float(ref)) < 1e-5


def test_tokenize_unknown_words_and_empty_text():
    ids, offsets = it.tokenize(["A handwritten digit 7", "", "zxqv seven"])
    assert offsets.tolist() == [0, 4, 5]
    assert ids[4].item() == 0  # <pad>
    assert ids[5].item() == 1  # <unk>
    assert it.VOCAB[ids[6].item()] == "seven"
    assert it.VOCAB[ids[3].item()] == "7"


def test_image_features_are_differentiable(encoder):
    x = torch.tensor(it.digits_split()[2][:3], requires_grad=True)
    encoder.image_features(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_bad_input(encoder):
    with pytest.raises(ValueError, match="images"):
        encoder.encode_images(np.zeros((3, 63)))
    with pytest.raises(ValueError, match="images"):
        encoder.encode_images(np.full((1, 64), np.nan))
    with pytest.raises(TypeError, match="texts"):
        encoder.encode_texts("a single string")
    with pytest.raises(TypeError, match="texts"):
        encoder.encode_texts(["ok", 3])
    with pytest.raises(ValueError, match="seed"):
        it.load_or_train(seed=-1)
    with pytest.raises(TypeError, match="config"):
        it.train_encoder(0, config={"dim": 8})
    with pytest.raises(ValueError, match="dim"):
        it.EncoderConfig(dim=0)
    with pytest.raises(ValueError, match="label"):
        it.caption(10)
    with pytest.raises(ValueError, match="template"):
        it.caption(3, template=99)


def test_encoder_pickles_for_ray_tasks(encoder):
    import pickle

    x = it.digits_split()[2][:5]
    clone = pickle.loads(pickle.dumps(encoder))
    np.testing.assert_array_equal(clone.encode_images(x), encoder.encode_images(x))
    np.testing.assert_array_equal(clone.encode_texts(["seven"]), encoder.encode_texts(["seven"]))


def test_a_question_without_class_words_is_near_neutral(encoder):
    """The neutral term: a question's similarity to the classes' images varies far less than a caption's."""
    xtr, ytr, _, _ = it.digits_split()
    means = lambda t: np.array([(encoder.encode_images(xtr[ytr == c]) @ t).mean() for c in range(10)])  # noqa: E731
    q = means(encoder.encode_texts(["what digit is shown in the image?"])[0])
    c = means(encoder.encode_texts(["a handwritten digit seven"])[0])
    assert np.ptp(q) < 0.5 * np.ptp(c), (np.ptp(q), np.ptp(c))
