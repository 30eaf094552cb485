"""rayml.adversarial.poisonedeye and vlrag: retrieval, the reader, the poisons, the defences."""

import numpy as np
import pytest
import torch

from rayml.adversarial import poisonedeye as pe
from rayml.adversarial import vlrag as V
from rayml.data import image_text as it

Q = V.QUESTIONS[0]


@pytest.fixture(scope="module")
def enc():
    torch.set_num_threads(1)
    return it.load_or_train(0)


@pytest.fixture(scope="module")
def system(enc):
    xtr, ytr, xte, yte = it.digits_split()
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(xtr), 300, replace=False))
    kb = V.build_knowledge_base(enc, xtr[pick], V.knowledge_texts(ytr[pick], rng))
    return kb, xte, yte


def test_retrieve_ranks_against_brute_force():
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(50, 6))
    keys[7] = keys[3]  # a tie: the lower index first
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    for _ in range(20):
        q = rng.normal(size=6)
        q /= np.linalg.norm(q)
        sims = [float(sum(a * b for a, b in zip(row, q))) for row in keys]
        brute = sorted(range(50), key=lambda j: (-sims[j], j))
        for k in (1, 5, 50, 80):
            assert V.retrieve(keys, q, k).tolist() == brute[:k]
    q = keys[3].copy()
    assert V.retrieve(keys, q, 2).tolist() == [3, 7]


def test_retrieve_agrees_with_sklearn_cosine_neighbours(enc, system):
    from sklearn.neighbors import NearestNeighbors

    kb, xte, _ = system
    nn = NearestNeighbors(n_neighbors=10, metric="cosine", algorithm="brute").fit(kb.keys)
    for i in range(10):
        qk = V.query_key(enc, xte[i], V.QUESTIONS[i % 3])
        ref = nn.kneighbors(qk[None], return_distance=False)[0]
        assert V.retrieve(kb.keys, qk, 10).tolist() == ref.tolist()


def test_fused_keys_are_normalised_sums(enc):
    x = it.digits_split()[2][:4]
    texts = ["a handwritten digit one", "the digit 2", "seven", "what digit is shown in the image?"]
    ie, te = enc.encode_images(x), enc.encode_texts(texts)
    keys = V.fuse(ie, te)
    manual = (ie / np.linalg.norm(ie, axis=1, keepdims=True) + te / np.linalg.norm(te, axis=1, keepdims=True))
    manual /= np.linalg.norm(manual, axis=1, keepdims=True)
    np.testing.assert_allclose(keys, manual, atol=1e-6)
    kb = V.build_knowledge_base(enc, x, texts)
    np.testing.assert_allclose(kb.keys, keys, atol=1e-6)
    np.testing.assert_allclose(V.query_key(enc, x[3], texts[3]), keys[3], atol=1e-6)


def test_reader_votes():
    assert V.read(Q, ["a handwritten digit seven", "the digit 7", "a blurry one"]) == "seven"
    assert V.read(Q, ["a blurry one", "a handwritten digit seven"]) == "one"  # tie: the better-ranked text
    poison = pe.poison_text(Q, "three")
    assert V.read(Q, [poison, "the digit 7", "seven", "a seven"]) == "three"  # 5 assertions against 3
    assert V.read(Q, [poison] + ["seven"] * 6) == "seven"
    # the question-answer pairs count only for the question asked (the generation property needs it)
    other = pe.poison_text(V.QUESTIONS[1], "three").split("Question:")[1:]
    assert V.read(Q, ["Question:" + " Question:".join(other), "seven"]) == "seven"
    assert V.read(Q, ["what is this?"]) == ""
    assert V.read(Q, [pe.poison_text(Q, "I don't know")]) == "i don't know"


def test_poison_satisfies_the_retrieval_property(enc, system):
    kb, xte, yte = system
    cfg = pe.PoisonConfig(eps=32 / 255, step=0.16 * 32 / 255, steps=60)
    wins = 0
    for i in range(6):
        target = it.NUMBER_WORDS[(int(yte[i]) + 3) % 10]
        p = pe.sample_poison(enc, xte[i], Q, target, cfg)
        assert np.max(np.abs(p.image - xte[i])) <= cfg.eps + 1e-6
        assert p.image.min() >= 0 and p.image.max() <= 1
        assert p.similarity >= p.start_similarity
        kb_p = kb.extend(enc, p.image[None], [p.text])
        qk = V.query_key(enc, xte[i], Q)
        # the reported similarity is the cosine of the poison's fused key with the query key
        assert abs(float(kb_p.keys[-1] @ qk) - p.similarity) < 1e-4
        margin = pe.retrieval_margin(kb_p, kb_p.keys[-1], qk)
        top = V.retrieve(kb_p.keys, qk, 3)
        assert (margin > 0) == (top[0] == len(kb))
        if margin > 0:
            wins += 1
            assert V.read(Q, [kb_p.texts[j] for j in top]) == target
    assert wins >= 5


def test_class_poison_targets_the_mean_of_the_neighbours(enc, system):
    _, xte, _ = system
    pool = np.concatenate([xte[100:200], xte[150:151]])  # the last repeats entry 50: skipped
    idx = pe.aux_neighbours(enc, xte[0], pool, 8)
    sims = enc.encode_images(pool) @ enc.encode_images(xte[:1])[0]
    brute = [j for j in np.argsort(-sims.astype(np.float64), kind="stable") if j != 100][:8]
    assert idx.tolist() == brute
    v = pe.target_vector(enc, Q, pool[idx])
    ref = enc.encode_images(pool[idx]).mean(0) + enc.encode_texts([Q])[0]
    np.testing.assert_allclose(v, ref / np.linalg.norm(ref), atol=1e-6)


def test_baselines_are_unoptimised(enc, system):
    _, xte, _ = system
    p = pe.text_only_poison(enc, xte[0], Q, "three")
    np.testing.assert_array_equal(p.image, xte[0])
    assert p.similarity == p.start_similarity
    r = pe.random_poison(enc, xte[5], xte[0], Q, "three")
    np.testing.assert_array_equal(r.image, xte[5])


def test_defences(enc, system):
    kb, xte, _ = system
    dm = V.fit_defences(kb, false_positive=0.01)
    for d in ("similarity", "perplexity"):
        assert dm.allowed(kb, d).mean() >= 0.98
    p = pe.text_only_poison(enc, xte[0], Q, "three")
    kb_p = kb.extend(enc, np.stack([p.image, np.clip(p.image + 0.05, 0, 1)]), [p.text, p.text])
    assert not dm.allowed(kb_p, "perplexity")[-2:].any()
    qk = V.query_key(enc, xte[0], Q)
    plain = V.defended_ranking(kb_p, qk, 5, "none")
    dedup = V.defended_ranking(kb_p, qk, 5, "dedup")
    assert len(dedup) == 5
    assert sum(j >= len(kb) for j in dedup) <= 1 <= sum(j >= len(kb) for j in plain)
    # dedup keeps clean entries that share a caption but not an image
    assert len(set(kb.texts)) < len(kb)
    order = V.retrieve(kb.keys, qk, len(kb))
    assert V.defended_ranking(kb, qk, 10, "dedup").tolist() == order[:10].tolist()


def test_lm_prompt_and_answer_matching():
    system, user = V.lm_prompt(Q, ["a blurry seven", "the digit 7"])
    assert user.splitlines() == ["Information 1: a blurry seven", "Information 2: the digit 7", f"Question: {Q}"]
    assert V.mentions("The answer is: seven.", "seven") and V.mentions("It shows a 7", "seven")
    assert not V.mentions("seventeen apples", "seven") and not V.mentions("It is a three", "seven")
    assert V.mentions("I don't know.", "I don't know")


def test_determinism(enc, system):
    _, xte, _ = system
    cfg = pe.PoisonConfig(steps=10)
    a = pe.sample_poison(enc, xte[1], Q, "two", cfg, seed=5)
    b = pe.sample_poison(enc, xte[1], Q, "two", cfg, seed=5)
    c = pe.sample_poison(enc, xte[1], Q, "two", cfg, seed=6)
    np.testing.assert_array_equal(a.image, b.image)
    assert not np.array_equal(a.image, c.image)


def test_experiment_trial_is_deterministic(enc):
    from rayml.experiments import poisonedeye as E

    config = dict(E.SIZES["tiny"])
    shared = {"encoders": {0: enc}, "config": config}
    item = ("test", 0, 0, 123, 456, (E.PAPER_EPS, 2 * E.PAPER_EPS, E.PAPER_EPS))
    one, two = E.run_trial(item, shared), E.run_trial(item, shared)
    assert one == two
    assert set(one["single"]) >= set(E.METHODS)


def test_bad_input(enc, system):
    kb, xte, _ = system
    qk = V.query_key(enc, xte[0], Q)
    with pytest.raises(ValueError, match="k must"):
        V.retrieve(kb.keys, qk, 0)
    with pytest.raises(ValueError, match="query"):
        V.retrieve(kb.keys, qk[:5], 3)
    with pytest.raises(ValueError, match="defence"):
        V.defended_ranking(kb, qk, 3, "firewall")
    with pytest.raises(ValueError, match="DefenceModel"):
        V.defended_ranking(kb, qk, 3, "perplexity")
    with pytest.raises(ValueError, match="target_answer"):
        pe.poison_text(Q, 'say "hi"')
    with pytest.raises(ValueError, match="question"):
        pe.poison_text("", "three")
    with pytest.raises(ValueError, match="eps"):
        pe.PoisonConfig(eps=0)
    with pytest.raises(ValueError, match="steps"):
        pe.PoisonConfig(steps=0)
    with pytest.raises(ValueError, match="query_image"):
        pe.sample_poison(enc, np.zeros(0), Q, "three")
    with pytest.raises(ValueError, match="query_image"):
        pe.sample_poison(enc, np.full(64, 2.0), Q, "three")
    with pytest.raises(TypeError, match="config"):
        pe.craft_poison_image(enc, xte[0], "text", qk, config={"eps": 0.1})
    with pytest.raises(ValueError, match="target"):
        pe.craft_poison_image(enc, xte[0], "text", qk[:3])
    with pytest.raises(ValueError, match="n must"):
        pe.aux_neighbours(enc, xte[0], xte[:10], 0)
    with pytest.raises(ValueError, match="texts"):
        V.build_knowledge_base(enc, xte[:3], ["a", "b"])
    with pytest.raises(ValueError, match="false_positive"):
        V.fit_defences(kb, false_positive=1.5)


class _ConvEncoder(torch.nn.Module):
    """A small image-text encoder on (3, 12, 12) colour images (convolutional image tower, hashed
    bag-of-words text tower, random weights): any encoder with the four methods works."""

    def __init__(self, dim=16):
        super().__init__()
        torch.manual_seed(0)
        self.image_tower = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                               torch.nn.Linear(8 * 10 * 10, dim))
        self.words = torch.nn.EmbeddingBag(97, dim, mode="mean")

    def image_features(self, pixels):
        return torch.nn.functional.normalize(self.image_tower(pixels), dim=-1)

    def text_features(self, texts):
        ids = [torch.tensor([sum(map(ord, w)) % 97 for w in t.split()] or [0]) for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        return torch.nn.functional.normalize(self.words(torch.cat(ids), offsets), dim=-1)

    def encode_images(self, images):
        with torch.no_grad():
            return self.image_features(torch.as_tensor(np.asarray(images, np.float32))).numpy()

    def encode_texts(self, texts):
        with torch.no_grad():
            return self.text_features(list(texts)).numpy()


def test_attack_takes_any_image_shape_and_encoder():
    """Issue 43: the attack refused anything but 8x8 images (64 pixels hard-coded); here (3, 12, 12)
    colour images through a convolutional encoder, end to end through the VLRAG retriever."""
    enc = _ConvEncoder()
    rng = np.random.default_rng(0)
    images = rng.random((40, 3, 12, 12)).astype(np.float32)
    kb = V.build_knowledge_base(enc, images[:30], [f"a picture number {i}" for i in range(30)])
    query = images[35]
    cfg = pe.PoisonConfig(eps=16 / 255, step=0.01, steps=30)
    p = pe.sample_poison(enc, query, Q, "seven", cfg)
    assert p.image.shape == (3, 12, 12)
    assert p.similarity > p.start_similarity
    assert np.abs(p.image - query).max() <= 16 / 255 + 1e-6
    c = pe.class_poison(enc, query, Q, "seven", images[30:35], n_aux=3, config=cfg)
    assert c.image.shape == (3, 12, 12) and c.similarity >= c.start_similarity
    kb_p = kb.extend(enc, p.image[None], [p.text])
    qk = V.query_key(enc, query, Q)
    assert pe.retrieval_margin(kb_p, kb_p.keys[-1], qk) == pytest.approx(
        float(kb_p.keys[-1] @ qk - (kb.keys @ qk).max()), abs=1e-6)
    assert pe.random_poison(enc, images[0], query, Q, "seven").image.shape == (3, 12, 12)
    with pytest.raises(ValueError, match="aux_pool"):
        pe.class_poison(enc, query, Q, "seven", images[:3, :2], n_aux=2, config=cfg)


def test_experiment_rejects_bad_settings():
    from rayml.experiments import poisonedeye as E

    base = dict(E.SIZES["tiny"])
    for key, value, match in (("eps_grid", [0.1], "8/255"), ("k_main", 5, "k_main"), ("n_poisons", [2], "n_poisons"),
                              ("kb_size", 5000, "kb_size"), ("target", "sideways", "target"), ("trials", 0, "trials"),
                              ("generator", "gpt-9", "generator"), ("llm_queries", 99, "llm_queries")):
        with pytest.raises(ValueError, match=match):
            E._check({**base, key: value})
