"""rayml.architectures.l2d: t = 0 reproduces the frozen base exactly, the base stays frozen, the ODE
solvers against a closed form, classifier-free guidance, the LoRA budget, bad input, determinism."""

from __future__ import annotations

import math

import pytest
import torch

from rayml.architectures import l2d
from rayml.llm.model import ModelConfig, TransformerLM


def _base(seed=0):
    torch.manual_seed(seed)
    model = TransformerLM(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                                      max_seq_len=64))
    model.eval()
    return model


def _perturbed(flow, seed=1, scale=0.2):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in flow.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * scale)
    return flow


def test_t_zero_reproduces_the_base_logits_exactly_and_t_positive_does_not():
    base = _base()
    ids = torch.randint(0, 40, (3, 11), generator=torch.Generator().manual_seed(2))
    ref = base(ids)
    flow = _perturbed(l2d.FlowLM(base, l2d.L2DConfig(flow_dim=16, cond_dim=8, n_classes=2)))
    x = torch.randn(3, 11, 16) * 64
    out0 = flow(ids, x, torch.zeros(3, 11))
    assert torch.equal(out0, ref)
    out0_cls = flow(ids, x, torch.zeros(3, 11), torch.tensor([0, 1, 2]))
    assert torch.equal(out0_cls, ref)
    assert (flow(ids, x, torch.full((3, 11), 0.7)) - ref).abs().max() > 1e-3
    # the cached last-position path (generation) agrees with the full forward
    h, cache = flow.main_path(ids)
    t = torch.full((3, 1), 0.4)
    last = flow.flow_logits(h[:, -1:], cache, x[:, -1:], t)
    full = flow(ids, x, torch.full((3, 11), 0.4))
    torch.testing.assert_close(last[:, 0], full[:, -1], rtol=1e-5, atol=1e-5)


def test_the_shipped_base_is_reproduced_exactly_at_t_zero():
    import rayml.llm as L

    lm = L.pretrained("base")
    ids = torch.tensor([[lm.tokenizer.bos_id] + lm.tokenizer.encode("1234+5678=")])
    ref = lm.model(ids)
    flow = _perturbed(l2d.FlowLM(lm.model, l2d.L2DConfig()))
    out = flow(ids, torch.randn(1, ids.shape[1], 64) * 64, torch.zeros(1, ids.shape[1]))
    assert torch.equal(out, ref)


def test_training_moves_only_the_flow_path_and_is_deterministic():
    base = _base()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    ids = torch.randint(1, 40, (4, 9), generator=torch.Generator().manual_seed(3))
    tgt = torch.roll(ids, -1, 1)
    tgt[:, -1] = -100
    flow = l2d.FlowLM(base, l2d.L2DConfig(flow_dim=16, cond_dim=8))
    opt = torch.optim.Adam([p for p in flow.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(3):
        loss = l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(5))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert losses[-1] < losses[0]
    l1 = l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(9))
    l2 = l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(9))
    assert float(l1) == float(l2)


def test_the_loss_on_target_positions_only_equals_the_full_sequence_loss():
    """``only_targets`` runs the flow path at the answer positions alone (what makes SmolLM2 training
    affordable); the loss and its gradients are those of the full-sequence forward."""
    base = _base()
    flow = _perturbed(l2d.FlowLM(base, l2d.L2DConfig(flow_dim=16, cond_dim=8, n_classes=2)))
    ids = torch.randint(1, 40, (3, 10), generator=torch.Generator().manual_seed(6))
    tgt = torch.full((3, 10), -100)
    tgt[0, 4:7], tgt[1, 8:10], tgt[2, 2] = ids[0, 5:8], ids[1, 1:3], 7  # different counts per row
    lab = torch.tensor([0, 1, 2])
    losses, grads = [], []
    for only in (False, True):
        flow.zero_grad()
        loss = l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(8), lab, only_targets=only)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in flow.parameters() if p.requires_grad])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="at"):
        h, cache = flow.main_path(ids)
        flow.flow_logits(h[:, :2], cache, torch.zeros(3, 2, 16), torch.zeros(3, 2), at=torch.zeros(3, 3, dtype=torch.long))


def test_lora_baseline_leaves_its_base_unchanged():
    base = _base()
    ids = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(1))
    ref = base(ids)
    lora = _perturbed(l2d.LoRALM(base, 2))
    assert not torch.equal(lora(ids), ref)
    assert torch.equal(base(ids), ref)  # the base's modules were not replaced
    assert all(isinstance(m, torch.nn.Linear) for m in (base.layers[0].self_attn.q_proj, base.layers[0].mlp.down_proj))


def test_integrators_against_the_closed_form_of_dx_dt_equals_minus_x():
    x0 = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
    exact = x0 * math.exp(-1.0)

    def vel(x, t, rows):
        return -x

    e8, n8 = l2d.integrate(vel, x0, method="euler", steps=8)
    e16, _ = l2d.integrate(vel, x0, method="euler", steps=16)
    torch.testing.assert_close(e8, x0 * (1 - 1 / 8) ** 8)  # Euler's closed form
    assert (e16 - exact).abs().max() < (e8 - exact).abs().max() * 0.6  # first order
    m8, nm = l2d.integrate(vel, x0, method="midpoint", steps=8)
    assert (m8 - exact).abs().max() < (e8 - exact).abs().max() / 10  # second order
    assert n8.tolist() == [8, 8] and nm.tolist() == [16, 16]
    a, na = l2d.integrate(vel, x0, method="adaptive_heun", rtol=1e-6, atol=1e-6, max_evals=10_000)
    torch.testing.assert_close(a, exact, rtol=1e-4, atol=1e-4)
    a_loose, na_loose = l2d.integrate(vel, x0, method="adaptive_heun", rtol=1e-2, atol=1e-2)
    assert (na_loose < na).all()


def test_adaptive_steps_differ_per_problem():
    """A stiff row needs more evaluations than a flat one: each problem chooses its own compute."""
    x0 = torch.tensor([[1.0], [1.0]], dtype=torch.float64)
    rate = torch.tensor([[0.1], [30.0]], dtype=torch.float64)

    def vel(x, t, rows):
        return -(rate if rows is None else rate[rows]) * x

    _, n = l2d.integrate(vel, x0, method="adaptive_heun", rtol=1e-3, atol=1e-3)
    assert n[1] > 2 * n[0]


def test_classifier_free_guidance_mixes_conditional_and_unconditional_velocities():
    base = _base()
    flow = _perturbed(l2d.FlowLM(base, l2d.L2DConfig(flow_dim=16, cond_dim=8, n_classes=3)), scale=0.5)
    ids = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(4))
    h, cache = flow.main_path(ids)
    x = torch.randn(2, 1, 16) * 10
    lab = torch.tensor([0, 2])
    with torch.no_grad():
        cond = flow.velocity(h[:, -1:], cache, x, 0.3, lab, 1.0)
        unc = flow.velocity(h[:, -1:], cache, x, 0.3, None, 1.0)
        mix = flow.velocity(h[:, -1:], cache, x, 0.3, lab, 2.5)
    torch.testing.assert_close(mix, 2.5 * cond - 1.5 * unc)


def test_lora_baseline_matches_the_budget():
    base = _base()
    flow = l2d.FlowLM(base, l2d.L2DConfig(flow_dim=16, cond_dim=8))
    budget = l2d.trainable_parameters(flow)
    rank = l2d.lora_rank_for_budget(base.config, budget)
    lora = l2d.LoRALM(_base(), rank)
    per_rank = l2d.trainable_parameters(l2d.LoRALM(_base(), 1))
    assert l2d.trainable_parameters(lora) == rank * per_rank
    assert abs(l2d.trainable_parameters(lora) - budget) <= per_rank / 2 + 1
    ids = torch.randint(0, 40, (2, 5))
    assert torch.equal(lora(ids), _base()(ids))  # B = 0 at initialisation


def test_flow_budget_counts_the_flow_path_without_drawing_random_numbers():
    base = _base()
    cfg = l2d.L2DConfig(flow_dim=16, cond_dim=8, lora_rank=3)
    torch.manual_seed(11)
    state = torch.get_rng_state()
    assert l2d.flow_budget(base.config, cfg) == l2d.trainable_parameters(l2d.FlowLM(_base(), cfg))
    torch.manual_seed(11)
    l2d.flow_budget(base.config, cfg)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's next draw is unchanged
    with pytest.raises(TypeError, match="cfg"):
        l2d.flow_budget(base.config, {"flow_dim": 16})


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="flow_dim"):
        l2d.L2DConfig(flow_dim=0)
    with pytest.raises(ValueError, match="noise_scale"):
        l2d.L2DConfig(noise_scale=-1.0)
    with pytest.raises(ValueError, match="guidance_dropout"):
        l2d.L2DConfig(guidance_dropout=1.0)
    with pytest.raises(TypeError, match="cfg"):
        l2d.FlowLM(_base(), cfg={"flow_dim": 8})
    with pytest.raises(ValueError, match="rank"):
        l2d.LoRALM(_base(), 0)
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="method"):
        l2d.integrate(lambda x, t, r: x, x, method="rk4")
    with pytest.raises(ValueError, match="steps"):
        l2d.integrate(lambda x, t, r: x, x, steps=0)
    with pytest.raises(ValueError, match="rtol"):
        l2d.integrate(lambda x, t, r: x, x, method="adaptive_heun", rtol=0.0)


def test_smollm2_is_reproduced_exactly_at_t_zero():
    """The flow path beside the frozen SmolLM2-135M (30 layers, GQA 9/3 heads, tied embeddings):
    at t = 0 the logits are the base model's bit for bit, with the flow path's weights perturbed
    away from their zero-initialised start; a positive t moves them."""
    from rayml.llm import smollm2
    from rayml.registry import MissingExtra

    torch.set_num_threads(1)
    try:
        smollm2.require_hf()
        smollm2.ensure()
    except MissingExtra as e:
        pytest.skip(f"SmolLM2 needs the [hf] extra here: {e}")
    except smollm2.ModelUnavailable as e:
        pytest.skip(f"SmolLM2-135M cannot be fetched here: {e}")
    import rayml.llm as L

    lm = L.pretrained("smollm2-135m")
    ids = torch.tensor([lm.tokenizer.encode("<|im_start|>user\nWhat is 23+45?<|im_end|>\n", bos=True)])
    with torch.no_grad():
        ref = lm.model(ids)
        flow = _perturbed(l2d.FlowLM(lm.model, l2d.L2DConfig(flow_dim=16, cond_dim=8, lora_rank=2)), scale=0.05)
        x = torch.randn(1, ids.shape[1], 16) * 64
        assert torch.equal(flow(ids, x, torch.zeros(1, ids.shape[1])), ref)
        assert (flow(ids, x, torch.full((1, ids.shape[1]), 0.7)) - ref).abs().max() > 1e-3
    assert all(not p.requires_grad for p in lm.model.parameters())  # the base stays frozen


def test_the_loss_at_a_fixed_time_is_the_base_loss_at_zero_and_rejects_bad_times():
    """``l2d_loss(t=...)`` (issue 42's diagnostics): at ``t = 0`` the L2D model is the base, so its loss is the
    base's next-token cross-entropy exactly; other times differ; a time outside [0, 1] is refused by name."""
    base = _base()
    flow = _perturbed(l2d.FlowLM(base, l2d.L2DConfig(flow_dim=16, cond_dim=8)))
    ids = torch.randint(1, 40, (3, 9), generator=torch.Generator().manual_seed(4))
    tgt = torch.roll(ids, -1, 1)
    tgt[:, -1] = -100
    at0 = l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(1), t=0.0, only_targets=True)
    assert float(at0) == pytest.approx(float(l2d.lm_loss(base, ids, tgt)), abs=1e-6)
    assert abs(float(l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(1), t=1.0)) - float(at0)) > 1e-4
    for bad in (-0.1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="t must"):
            l2d.l2d_loss(flow, ids, tgt, torch.Generator().manual_seed(1), t=bad)
