"""rayml.alignment.dpo: the DPO loss against hand-computed values, log-probabilities against a float64
re-derivation, the frozen reference, batching, LoRA, determinism and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayml.alignment import dpo
from rayml.llm.model import ModelConfig, TransformerLM

torch.set_num_threads(1)


def _model(seed=0, vocab=24):
    cfg = ModelConfig(vocab_size=vocab, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=64)
    m = TransformerLM(cfg)
    m.reset_parameters(torch.Generator().manual_seed(seed))
    return m.eval()


def _pairs(n=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = [1] + rng.integers(3, 24, size=int(rng.integers(2, 6))).tolist()
        c = rng.integers(3, 24, size=int(rng.integers(1, 5))).tolist() + [2]
        r = rng.integers(3, 24, size=int(rng.integers(1, 5))).tolist() + [2]
        out.append(dpo.TokenPair(p, c, r))
    return out


def test_loss_matches_a_hand_computed_case():
    # h = (-1 - -2) - (-3 - -2) = 2; beta h = 1
    args = (torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]))
    loss, rc, rr = dpo.dpo_loss(*args, beta=0.5)
    assert float(loss[0]) == pytest.approx(math.log(1 + math.exp(-1.0)), abs=1e-6)
    assert float(rc[0]) == pytest.approx(0.5) and float(rr[0]) == pytest.approx(-0.5)
    # conservative DPO: (1 - eps) softplus(-1) + eps softplus(1)
    loss, _, _ = dpo.dpo_loss(*args, beta=0.5, label_smoothing=0.2)
    want = 0.8 * math.log(1 + math.exp(-1.0)) + 0.2 * math.log(1 + math.exp(1.0))
    assert float(loss[0]) == pytest.approx(want, abs=1e-6)


def test_loss_gradient_is_the_closed_form():
    h = torch.tensor([0.7, -1.3, 2.0], dtype=torch.float64, requires_grad=True)
    zero = torch.zeros(3, dtype=torch.float64)
    beta, eps = 0.3, 0.1
    loss, _, _ = dpo.dpo_loss(h, zero, zero, zero, beta=beta, label_smoothing=eps)
    loss.sum().backward()
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    hv = h.detach().numpy()
    want = -(1 - eps) * beta * sig(-beta * hv) + eps * beta * sig(beta * hv)
    np.testing.assert_allclose(h.grad.numpy(), want, rtol=1e-10)


def _logp_float64(model, prompt, response):
    m = _model()
    m.load_state_dict(model.state_dict())
    m = m.double()
    seq = list(prompt) + list(response)
    total = 0.0
    for t in range(len(prompt), len(seq)):
        logits = m(torch.tensor([seq[:t]]))[0, -1].double()
        z = logits - logits.max()
        total += float(z[seq[t]] - torch.log(torch.exp(z).sum()))
    return total


def test_sequence_logps_match_a_float64_rederivation_one_prefix_at_a_time():
    model = _model(3)
    pairs = _pairs(5, seed=1)
    pc, pr = dpo.pair_logps(model, pairs)
    for i, p in enumerate(pairs):
        assert float(pc[i]) == pytest.approx(_logp_float64(model, p.prompt, p.chosen), abs=1e-4)
        assert float(pr[i]) == pytest.approx(_logp_float64(model, p.prompt, p.rejected), abs=1e-4)


def test_padding_in_a_batch_does_not_change_a_row():
    model = _model(4)
    pairs = _pairs(8, seed=2)
    pc, _ = dpo.pair_logps(model, pairs)
    for i in (0, 5):
        alone, _ = dpo.pair_logps(model, [pairs[i]])
        assert float(alone[0]) == pytest.approx(float(pc[i]), abs=1e-5)


def test_untrained_policy_has_loss_log2_and_training_lowers_it_with_a_frozen_reference():
    model = _model(5)
    pairs = _pairs(16, seed=3)
    ref = dpo.frozen_copy(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    start = dpo.per_example_loss(model, ref, pairs, beta=0.5, label_smoothing=0.1)
    np.testing.assert_allclose(start, math.log(2), atol=1e-6)
    res = dpo.train_dpo(model, pairs, dpo.DPOConfig(beta=0.5, lr=1e-2, steps=30, batch_size=8), seed=0,
                        reference=ref)
    for k, v in model.state_dict().items():  # the input policy and the reference stay unchanged
        assert torch.equal(v, before[k]) and torch.equal(ref.state_dict()[k], before[k])
    assert all(not p.requires_grad for p in ref.parameters())
    end = dpo.per_example_loss(res.model, ref, pairs, beta=0.5)
    assert end.mean() < 0.6 * math.log(2)
    assert res.reward_accuracy[-1] > 0.5


def test_training_is_deterministic_for_a_seed_and_weights_of_one_change_nothing():
    model = _model(6)
    pairs = _pairs(10, seed=4)
    cfg = dpo.DPOConfig(beta=0.2, lr=5e-3, steps=5, batch_size=4, length_grouped=True)
    a = dpo.train_dpo(model, pairs, cfg, seed=7)
    b = dpo.train_dpo(model, pairs, cfg, seed=7)
    c = dpo.train_dpo(model, pairs, cfg, seed=7, weights=np.ones(len(pairs)))
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k])
        torch.testing.assert_close(v, c.model.state_dict()[k])
    assert a.losses == b.losses


def test_length_batches_cover_an_epoch_and_group_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 50, size=101)
    batches = dpo.length_batches(lengths, 8, rng, mega=4)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(101))
    spread = np.mean([np.ptp(lengths[b]) for b in batches if len(b) > 1])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.array_split(rng.permutation(101), 13)])
    assert spread < random_spread


def test_sequential_schedule_follows_the_order_and_repeats_it():
    cfg = dpo.DPOConfig(steps=4, batch_size=3, order="sequential")
    sched = dpo.batch_schedule(5, cfg, np.random.default_rng(0), order=[4, 2, 0, 1, 3])
    assert [s.tolist() for s in sched] == [[4, 2, 0], [1, 3, 4], [2, 0, 1], [3, 4, 2]]
    with pytest.raises(ValueError, match="permutation"):
        dpo.batch_schedule(5, cfg, np.random.default_rng(0), order=[0, 0, 1, 2, 3])


def test_lora_starts_at_the_base_trains_only_adapters_and_merges_exactly():
    model = _model(8)
    lora = dpo.add_lora(model, 2, seed=1)
    x = torch.tensor([[1, 5, 7, 9]])
    torch.testing.assert_close(lora(x), model(x))
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    res = dpo.train_dpo(lora, _pairs(8, seed=5), dpo.DPOConfig(lr=1e-2, steps=5, batch_size=4), seed=0)
    assert not torch.allclose(res.model(x), model(x))
    merged = dpo.merge_lora(res.model)
    assert not any(isinstance(m, dpo.LoRALinear) for m in merged.modules())
    torch.testing.assert_close(merged(x), res.model(x), atol=1e-5, rtol=1e-5)


def test_bad_input_is_rejected_with_the_argument_named():
    with pytest.raises(ValueError, match="beta"):
        dpo.DPOConfig(beta=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo.DPOConfig(label_smoothing=0.5)
    with pytest.raises(ValueError, match="order"):
        dpo.DPOConfig(order="shuffled")
    with pytest.raises(ValueError, match="steps"):
        dpo.DPOConfig(steps=0)
    with pytest.raises(ValueError, match="beta"):
        dpo.dpo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1), beta=-1.0)
    with pytest.raises(ValueError, match="prompt"):
        dpo.TokenPair([], [1], [2])
    model = _model()
    with pytest.raises(ValueError, match="weights"):
        dpo.train_dpo(model, _pairs(4), dpo.DPOConfig(steps=1), weights=[1.0, 2.0])
    with pytest.raises(TypeError, match="config"):
        dpo.train_dpo(model, _pairs(4), {"beta": 0.1})
    with pytest.raises(ValueError, match="rank"):
        dpo.add_lora(model, 0)


def test_the_nll_anchor_adds_the_chosen_per_token_nll_and_raises_the_chosen_log_prob():
    model = _model(8)
    pairs = _pairs(8, seed=6)
    pc = [_logp_float64(model, p.prompt, p.chosen) for p in pairs]
    # first step's loss: DPO's log 2 (policy = reference) plus alpha times the mean per-token NLL of chosen
    cfg = dpo.DPOConfig(beta=0.5, lr=1e-2, steps=1, batch_size=8, nll_weight=0.7)
    res = dpo.train_dpo(model, pairs, cfg, seed=0)
    want = math.log(2) - 0.7 * np.mean([lp / len(p.chosen) for lp, p in zip(pc, pairs)])
    assert res.losses[0] == pytest.approx(want, rel=1e-5)
    plain = dpo.train_dpo(model, pairs, dpo.DPOConfig(beta=0.5, lr=1e-2, steps=20, batch_size=8), seed=0)
    anchored = dpo.train_dpo(model, pairs, dpo.DPOConfig(beta=0.5, lr=1e-2, steps=20, batch_size=8, nll_weight=1.0),
                             seed=0)
    chosen = lambda m: float(dpo.pair_logps(m, pairs)[0].sum())  # noqa: E731
    assert chosen(anchored.model) > chosen(plain.model)
    with pytest.raises(ValueError, match="nll_weight"):
        dpo.DPOConfig(nll_weight=-1.0)
