"""Tokenizers (BPE fitted on the task corpus, mistral_common vocabularies) and the task suite."""

from __future__ import annotations

import json

import pytest

from rayml.llm import tasks
from rayml.llm.tokenizer import BPETokenizer, MistralTokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(tasks.corpus(60, seed=0), vocab_size=400)


def test_bpe_roundtrip_digits_and_exact_byte_table(tok):
    for text in ["317+845=", "[bako:123;tuli:456]\n?tuli:", '{"name":"zu","age":7,"ok":true}', "héllo ✓"]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert [tok.token_bytes(i) for i in tok.encode("90210")] == [b"9", b"0", b"2", b"1", b"0"]
    ids = tok.encode("12", bos=True, eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and tok.token_bytes(tok.eos_id) == b""
    assert len(tok.byte_table()) == tok.vocab_size
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train(["a"], vocab_size=100)


def test_bpe_is_deterministic(tok, tmp_path):
    again = BPETokenizer.train(tasks.corpus(60, seed=0), vocab_size=400)
    assert again.to_json() == tok.to_json()
    tok.save(tmp_path / "tokenizer.json")
    assert load_tokenizer(tmp_path).encode("sort:9913=") == tok.encode("sort:9913=")


@pytest.mark.parametrize("name, size", [("spm32k", 32768), ("tekken131k", 131072)])
def test_mistral_vocabularies_load_offline_through_the_same_interface(name, size):
    pytest.importorskip("mistral_common")
    t = MistralTokenizer(name)
    assert t.vocab_size == size
    text = "The quick brown fox: 12+34=46."
    ids = t.encode(text)
    assert t.decode(ids).strip() == text
    assert b"".join(t.token_bytes(i) for i in ids).decode().strip() == text
    assert t.token_bytes(t.bos_id) == b""
    with pytest.raises(ValueError, match="name"):
        MistralTokenizer("gpt2")


def test_items_are_seeded_and_answers_are_correct():
    a = tasks.make_items("add", 50, 7)
    assert a == tasks.make_items("add", 50, 7) and a != tasks.make_items("add", 50, 8)
    for it in a:
        x, y = it.meta["a"], it.meta["b"]
        assert 100 <= x <= 999 and 100 <= y <= 999 and it.prompt == f"{x}+{y}="
        assert int(it.answer[::-1]) == x + y
    for it in tasks.make_items("sort", 20, 0):
        assert it.answer == "".join(sorted(it.prompt[5:-1]))
    for it in tasks.make_items("reverse", 20, 0):
        assert it.answer == it.prompt[4:-1][::-1]
    for it in tasks.make_items("json", 20, 0):
        rec = json.loads(it.answer)
        assert list(rec) == ["name", "age", "ok"] and rec == it.meta["record"]


def test_addition_test_pairs_are_held_out_of_training():
    test = {(i.meta["a"], i.meta["b"]) for i in tasks.make_items("add", 300, 1, split="test")}
    train = {(i.meta["a"], i.meta["b"]) for i in tasks.make_items("add", 3000, 2, split="train")}
    assert test and train and not test & train


def test_retrieval_item_answer_is_in_its_document():
    for it in tasks.make_items("retrieve", 30, 3):
        docs = it.meta["documents"]
        assert len(docs) == 8
        assert it.prompt.startswith("".join(docs)) and it.prompt.endswith(f"?{it.meta['key']}:")
        assert f"{it.meta['key']}:{it.answer}" in docs[it.meta["doc_index"]]
        assert sum(d.count(it.meta["key"] + ":") for d in docs) == 1
    tr = tasks.make_items("retrieve", 5, 3, split="train")
    n_keys = [i.prompt.count(":") - 1 for i in tr]  # one ':' per pair plus the question's
    assert [len(i.extra) for i in tr] == [min(8, n) - 1 for n in n_keys]
    assert {len(i.meta["documents"]) for i in tasks.make_items("retrieve", 200, 4, split="train")} == set(range(1, 17))


def test_score_and_correctness_matrix():
    items = tasks.make_items("add", 6, 0) + tasks.make_items("json", 4, 0)

    class Oracle:
        def generate(self, prompts, **_):
            return [next(i.answer for i in items if i.prompt == p) for p in prompts]

    class Wrong:
        def generate(self, prompts, **_):
            return ["0"] * len(prompts)

    mat = tasks.evaluate({"oracle": Oracle(), "wrong": Wrong()}, items, batch_size=3)
    assert mat.shape == (2, 10) and mat[0].all() and not mat[1].any()
    j = tasks.make_items("json", 1, 0)[0]
    assert tasks.score(j, j.answer) == 1.0
    assert tasks.score(j, j.answer.replace("\"age\":", "\"age\":\"").replace(",\"ok\"", "\",\"ok\"")) == 0.0
    with pytest.raises(ValueError, match="task"):
        tasks.make_items("nope", 1, 0)
    with pytest.raises(ValueError, match="split"):
        tasks.make_items("add", 1, 0, split="dev")
