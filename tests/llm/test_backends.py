"""The LM interface over the embedded model and over a local Hugging Face directory."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rayml.llm import tasks, training
from rayml.llm.backends import EmbeddedLM, HFLM


@pytest.fixture(scope="module")
def lm():
    cfg = dataclasses.replace(training.CONFIGS["tiny"], steps=20, lr=1e-2)
    res = training.train_model(cfg, seed=0, evaluate=False)
    return EmbeddedLM(res.model, res.tokenizer)


def test_embedded_generate_and_loglik(lm):
    prompts = [it.prompt for it in tasks.make_items("add", 3, 0)] + ["copy:12="]
    a = lm.generate(prompts, max_new_tokens=5)
    assert len(a) == 4 and all(isinstance(x, str) for x in a)
    assert lm.generate(prompts, max_new_tokens=5, temperature=0.8, seed=1) == \
        lm.generate(prompts, max_new_tokens=5, temperature=0.8, seed=1)
    ll = lm.loglik(["copy:12=", "copy:12="], ["12", "99"])
    ids = lm.tokenizer.encode("copy:12=", bos=True)
    logp = lm.logits([ids])[0, -1].log_softmax(-1)
    first = lm.tokenizer.encode("12")[0]
    assert ll[0] <= float(logp[first]) + 1e-5 and all(v < 0 for v in ll)


def test_hf_backend_on_an_exported_local_directory_agrees(lm, tmp_path):
    pytest.importorskip("transformers")
    from rayml.llm.hf import export_hf_dir

    export_hf_dir(lm.model, lm.tokenizer, tmp_path / "hf")
    hf = HFLM(tmp_path / "hf")
    ids = [lm.tokenizer.encode(p, bos=True) for p in ["317+845=", "sort:5413="]]
    assert hf.tokenizer.encode("317+845=") == lm.tokenizer.encode("317+845=")
    same_len = [ids[0], ids[0]]
    assert torch.allclose(hf.logits(same_len), lm.logits(same_len), atol=1e-4)
    ours = lm.generate_ids(ids, max_new_tokens=6)
    theirs = hf.generate_ids(ids, max_new_tokens=6)
    assert ours == theirs
    assert hf.generate(["317+845="], max_new_tokens=6) == lm.generate(["317+845="], max_new_tokens=6)
    with pytest.raises(ValueError, match="path"):
        HFLM(tmp_path / "missing")
