"""rayml.alignment.frozen_prefix: top-layer DPO on cached bottom hidden states gives the numbers of the
whole model (before and after training), trains only the top adapters, does not depend on the batch
or the call order, and rejects bad input; on SmolLM2-135M too when it is installed."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rayml.alignment import dpo
from rayml.alignment.frozen_prefix import FrozenPrefixLM, PrefixStore, full_model
from rayml.llm.model import ModelConfig, TransformerLM

torch.set_num_threads(1)
PAD = 2  # also the end of every response, as in SmolLM2's tokenizer


def _model(seed=0, n_layers=4):
    cfg = ModelConfig(vocab_size=24, d_model=16, n_layers=n_layers, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=32)
    m = TransformerLM(cfg)
    m.reset_parameters(torch.Generator().manual_seed(seed))
    return m.eval()


def _pairs(n=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        prompt = [1] + rng.integers(3, 23, size=int(rng.integers(2, 7))).tolist()
        c = rng.integers(3, 23, size=int(rng.integers(1, 4))).tolist()
        r = rng.integers(3, 23, size=int(rng.integers(1, 4))).tolist()
        out.append(dpo.TokenPair(prompt, c + [PAD], r + [PAD]))
    return out


def _reference_logps(base, top, pairs):
    """The same policy as a plain TransformerLM run end to end (an independent forward pass)."""
    return dpo.pair_logps(full_model(top), pairs, pad_id=PAD)


@pytest.mark.parametrize("register", [True, False])
def test_log_probs_equal_the_whole_model_before_and_after_training(register):
    base, pairs = _model(), _pairs()
    top = FrozenPrefixLM(base, 2, pad_id=PAD)
    if register:
        top.store.register(pairs)
    policy = dpo.add_lora(top, 2, seed=1)
    for got, want in zip(dpo.pair_logps(policy, pairs, pad_id=PAD), _reference_logps(base, policy, pairs)):
        assert torch.allclose(got, want, atol=1e-5)
    trained = dpo.train_dpo(policy, pairs, dpo.DPOConfig(beta=0.5, lr=5e-2, steps=4, batch_size=4), seed=0,
                            pad_id=PAD).model
    got, want = dpo.pair_logps(trained, pairs, pad_id=PAD), _reference_logps(base, trained, pairs)
    assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))
    # training moved the top adapters, so the numbers differ from the start
    assert not torch.allclose(got[0], dpo.pair_logps(policy, pairs, pad_id=PAD)[0], atol=1e-4)


def test_only_the_top_adapters_train_and_the_base_is_untouched():
    base, pairs = _model(), _pairs()
    before = copy.deepcopy(base.state_dict())
    policy = dpo.add_lora(FrozenPrefixLM(base, 1, pad_id=PAD), 2, seed=0)
    names = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert names and all(n.startswith("layers.0.") and "lora_" in n for n in names)
    res = dpo.train_dpo(policy, pairs, dpo.DPOConfig(beta=0.5, lr=5e-2, steps=3, batch_size=4), seed=0, pad_id=PAD)
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert res.model.store is policy.store  # copies share one cache
    view = full_model(res.model)
    assert len(view.layers) == 4 and all(a is b for a, b in zip(view.layers[:3], base.layers[:3]))
    assert len(base.layers) == 4 and view.layers[3] is res.model.layers[0]


def test_hidden_states_do_not_depend_on_the_batch_or_the_call_order():
    base, pairs = _model(), _pairs()
    a = FrozenPrefixLM(base, 2, pad_id=PAD)
    b = FrozenPrefixLM(base, 2, pad_id=PAD)
    a.store.register(pairs)
    b.store.register(pairs)
    whole = dpo.pair_logps(a, pairs, pad_id=PAD)
    parts = [dpo.pair_logps(b, pairs[i:i + 1], pad_id=PAD) for i in reversed(range(len(pairs)))][::-1]
    assert torch.equal(whole[0], torch.cat([p[0] for p in parts])) and torch.equal(whole[1], torch.cat([p[1] for p in parts]))


def test_bad_input_is_rejected():
    base = _model()
    with pytest.raises(ValueError, match="n_top"):
        FrozenPrefixLM(base, 0, pad_id=PAD)
    with pytest.raises(ValueError, match="n_top"):
        FrozenPrefixLM(base, 5, pad_id=PAD)
    with pytest.raises(ValueError, match="store"):
        FrozenPrefixLM(base, 2, pad_id=PAD, store=PrefixStore(_model(1), 2, PAD))
    top = FrozenPrefixLM(base, 2, pad_id=PAD)
    with pytest.raises(ValueError, match="pad-valued"):
        top.store.register([dpo.TokenPair([1, 5], [7, PAD, PAD], [8, PAD])])


def test_smollm2_top_layers_match_the_whole_model():
    pytest.importorskip("transformers")
    import rayml.llm
    from rayml.alignment import text_tasks as tt

    try:
        lm = rayml.llm.pretrained("smollm2-135m", train_if_missing=False)
    except Exception as exc:  # pragma: no cover - the model is not installed or cached here
        pytest.skip(f"SmolLM2-135M unavailable: {exc}")
    tok = lm.tokenizer
    pairs = tt.encode_pairs(tt.make_pairs(3, kind="lookup", levels=(2, 4), noise=0.0, seed=0), tok)
    top = FrozenPrefixLM(lm.model, 2, pad_id=tok.pad_id)
    top.store.register(pairs)
    policy = dpo.add_lora(top, 2, seed=0)
    for lora in (m for m in policy.modules() if isinstance(m, dpo.LoRALinear)):
        torch.nn.init.normal_(lora.lora_B, std=0.01, generator=torch.Generator().manual_seed(0))
    got, want = dpo.pair_logps(policy, pairs, pad_id=tok.pad_id), dpo.pair_logps(full_model(policy), pairs,
                                                                                  pad_id=tok.pad_id)
    assert all(torch.allclose(g, w, atol=2e-3, rtol=1e-4) for g, w in zip(got, want))
