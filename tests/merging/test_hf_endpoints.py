"""rayml.merging.hf_endpoints: HF directories as bytes, LoRA endpoints equal to the folded adapters,
text cross tasks, and the evaluator pool on an HF base with LoRA endpoints matching local merges."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayml.llm.tasks import LETTER_DIGITS
from rayml.merging import hf_endpoints as H
from rayml.merging import merge3


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny Llama written as a local Hugging Face directory (random weights, the substrate's BPE)."""
    from rayml.llm import training
    from rayml.llm.hf import export_hf_dir
    from rayml.llm.model import TransformerLM

    cfg = training.CONFIGS["tiny"]
    tok = training.build_tokenizer(cfg)
    m = TransformerLM(cfg.model_config(tok.vocab_size))
    m.reset_parameters(torch.Generator().manual_seed(0))
    return export_hf_dir(m, tok, tmp_path_factory.mktemp("hf") / "tiny")


@pytest.mark.parametrize("task", sorted(H.TEXT_TASKS))
def test_text_items_are_correct_sums_in_their_language(task):
    digits, letters = H.TEXT_TASKS[task]
    decode = str.maketrans(LETTER_DIGITS, "0123456789")
    for split in ("train", "test"):
        items = H.make_text_items(task, 20, np.random.default_rng(0), split)
        assert len(items) == 20
        for it in items:
            a, b = it.lead[:-1].split("+")
            assert it.question == f"What is {a}+{b}?"
            assert (a + b).isalpha() == letters and (a + b).isdigit() == (not letters)
            a, b = a.translate(decode), b.translate(decode)
            assert len(a) == len(b) == digits and int(a) + int(b) == int(it.answer)
    test_q = {it.question for it in H.make_text_items(task, 30, np.random.default_rng(1), "test")}
    train_q = {it.question for it in H.make_text_items(task, 30, np.random.default_rng(1), "train")}
    assert not test_q & train_q
    with pytest.raises(ValueError, match="task"):
        H.make_text_items("add9", 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="split"):
        H.make_text_items("add1", 2, np.random.default_rng(0), "val")


def test_hf_blob_loads_the_directory_weights(hf_dir, tmp_path):
    from rayml.llm.hf import load_embedded

    blob = H.read_hf_blob(hf_dir)
    model, tok = H.load_model(blob)
    want = load_embedded(hf_dir).model.state_dict()
    assert set(model.state_dict()) == set(want)
    assert all(torch.equal(v, want[k]) for k, v in model.state_dict().items())
    assert blob.digest == H.read_hf_blob(hf_dir).digest and H.n_layers(blob) == model.config.n_layers
    with pytest.raises(ValueError, match="config.json"):
        H.read_hf_blob(tmp_path)
    with pytest.raises(TypeError, match="CheckpointBlob"):
        H.digest(hf_dir)


def test_lora_endpoint_equals_the_folded_adapters(hf_dir):
    from rayml.alignment import dpo
    from rayml.alignment import text_tasks as tt

    model, tok = H.load_model(H.read_hf_blob(hf_dir))
    items = H.make_text_items("add1", 16, np.random.default_rng(0), "train")
    ep = H.lora_finetune(model, tok, items, rank=2, steps=3, lr=1e-2, batch_size=4, seed=5, base_digest="x")
    assert ep.factors and all(k.endswith(".weight") for k in ep.factors)
    # reference: the same training, folded by rayml.alignment.dpo.merge_lora
    ref = dpo.add_lora(model, 2, seed=5)
    torch.manual_seed(5)
    dpo.sft(ref, [tok.encode(tt.prompt_text(it), bos=True) for it in items],
            [tok.encode(it.answer) + [tok.eos_id] for it in items], steps=3, batch_size=4, lr=1e-2, seed=5,
            pad_id=tok.pad_id)
    want = dpo.merge_lora(ref).state_dict()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    got = H.endpoint_state(ep, base)
    assert set(got) == set(want)
    assert max(float((got[k] - want[k]).abs().max()) for k in want) < 1e-5
    assert any(float((got[k] - base[k]).abs().max()) > 0 for k in ep.factors)  # training moved the weights
    back = H.LoraEndpoint.from_bytes(ep.to_bytes())
    assert back.digest == ep.digest and back.card == ep.card
    with pytest.raises(ValueError, match="text items"):
        H.lora_finetune(model, tok, [], steps=1)


def test_pool_on_an_hf_base_with_lora_endpoints_matches_local_merges(ray_session, hf_dir):
    from rayml.llm.backends import EmbeddedLM

    blob = H.read_hf_blob(hf_dir)
    model, tok = H.load_model(blob)
    train = H.make_text_items("add1", 8, np.random.default_rng(0), "train")
    eps = [H.lora_finetune(model, tok, train, rank=2, steps=2, lr=5e-2, batch_size=4, seed=s, base_digest=blob.digest)
           for s in (1, 2)]
    sets = {"t": H.make_text_items("add1_letters", 6, np.random.default_rng(3), "test")}
    space = merge3.GenomeSpace("slerp", 2, H.n_layers(blob))
    genomes = space.random(2, 0)
    pool = merge3.make_pool(blob, eps, sets, actors=2, num_cpus=0.5)
    try:
        got = merge3.pool_evaluate(pool, "slerp", "t")(genomes)
        got_ep = pool.map("answer", [("endpoint", 1, "t")])[0]
    finally:
        pool.shutdown()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    states = [H.endpoint_state(e, base) for e in eps]
    lm = EmbeddedLM(model, tok)
    want = []
    for x in genomes:
        model.load_state_dict(merge3.merge_genome(space, base, states, x))
        want.append(H.evaluate_items(lm, sets["t"]))
    model.load_state_dict(dict(states[1]))
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert np.array_equal(got_ep, H.evaluate_items(lm, sets["t"]))
