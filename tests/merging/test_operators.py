"""rayml.merging.operators: each operator against hand-computed cases, its definition, and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from rayml.merging import operators as M


def t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_linear_hand_computed():
    a, b = {"w": t(1.0, 2.0)}, {"w": t(3.0, 6.0)}
    assert torch.allclose(M.linear([a, b], [1.0, 3.0])["w"], t(2.5, 5.0))
    assert torch.allclose(M.linear([a, b], [1.0, 3.0], normalize=False)["w"], t(10.0, 20.0))


def test_task_arithmetic_hand_computed():
    base = {"w": t(1.0, 1.0)}
    a, b = {"w": t(2.0, 3.0)}, {"w": t(4.0, 0.0)}  # task vectors (1, 2) and (3, -1)
    out = M.task_arithmetic(base, [a, b], [0.5, 1.0], scale=2.0)["w"]
    assert torch.allclose(out, t(1.0 + 2 * (0.5 + 3.0), 1.0 + 2 * (1.0 - 1.0)))


def test_ties_elects_sign_and_averages_agreeing_entries():
    base = {"w": t(0.0, 0.0)}
    a, b = {"w": t(2.0, -1.0)}, {"w": t(-1.0, -3.0)}
    # sum (1, -4): entry 0 keeps only a's +2; entry 1 averages -1 and -3
    assert torch.allclose(M.ties(base, [a, b], [1.0, 1.0], 1.0)["w"], t(2.0, -2.0))
    # weighted (2, 1): deltas (4, -2), (-1, -3); entry 0: 4 / 2; entry 1: -5 / 3
    assert torch.allclose(M.ties(base, [a, b], [2.0, 1.0], 1.0)["w"], t(2.0, -5.0 / 3.0))


def test_ties_trims_by_magnitude_before_electing():
    base = {"w": t(0.0, 0.0, 0.0, 0.0)}
    a = {"w": t(3.0, -1.0, 0.5, 2.0)}   # keeps 3 and 2
    b = {"w": t(-1.0, -2.0, 1.5, 0.5)}  # keeps -2 and 1.5
    out = M.ties(base, [a, b], [1.0, 1.0], 0.5)["w"]
    assert torch.allclose(out, t(3.0, -2.0, 1.5, 2.0))


def test_magnitude_sparsify_and_sign_mask():
    x = t(0.1, -5.0, 2.0, -0.3)
    assert torch.equal(M.magnitude_sparsify(x, 0.5), t(0.0, -5.0, 2.0, 0.0))
    mask = M.elect_sign_mask(torch.stack([t(1.0, -1.0, 0.0), t(-3.0, -1.0, 1.0)]))
    assert mask.tolist() == [[False, True, False], [True, True, True]]


def test_dare_drops_and_rescales():
    base = {"w": torch.zeros(200_000, dtype=torch.float64)}
    a = {"w": torch.ones(200_000, dtype=torch.float64)}
    out = M.dare(base, [a], [1.0], 0.25, ties=False, seed=3)["w"]
    assert set(torch.unique(out).tolist()) == {0.0, 4.0}            # dropped or rescaled by 1/density
    assert abs(float((out != 0).double().mean()) - 0.25) < 0.01      # kept with probability density
    assert abs(float(out.mean()) - 1.0) < 0.03                       # unbiased
    again = M.dare(base, [a], [1.0], 0.25, ties=False, seed=3)["w"]
    other = M.dare(base, [a], [1.0], 0.25, ties=False, seed=4)["w"]
    assert torch.equal(out, again) and not torch.equal(out, other)


def test_dare_at_full_density_is_task_arithmetic_or_ties():
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(5, 7, generator=g)}
    eps = [{"w": base["w"] + torch.randn(5, 7, generator=g)} for _ in range(3)]
    w = [0.3, 0.5, 0.9]
    assert torch.allclose(M.dare(base, eps, w, 1.0, ties=False)["w"], M.task_arithmetic(base, eps, w)["w"])
    assert torch.allclose(M.dare(base, eps, w, 1.0, ties=True)["w"], M.ties(base, eps, w, 1.0, normalize=False)["w"])


def test_slerp_hand_computed():
    a, b = {"w": t(2.0, 0.0)}, {"w": t(0.0, 1.0)}
    s = math.sqrt(0.5)
    assert torch.allclose(M.slerp(a, b, 0.5)["w"], t(2 * s, s))
    assert torch.allclose(M.slerp(a, b, 0.0)["w"], a["w"]) and torch.allclose(M.slerp(a, b, 1.0)["w"], b["w"])
    # colinear: linear interpolation
    assert torch.allclose(M.slerp({"w": t(1.0, 1.0)}, {"w": t(2.0, 2.0)}, 0.25)["w"], t(1.25, 1.25))


def test_slerp_matches_float64_formula():
    g = torch.Generator().manual_seed(1)
    v0, v1 = torch.randn(40, generator=g, dtype=torch.float64), torch.randn(40, generator=g, dtype=torch.float64)
    omega = math.acos(float(v0 @ v1 / (v0.norm() * v1.norm())))
    want = math.sin(0.3 * omega) / math.sin(omega) * v1 + math.sin(0.7 * omega) / math.sin(omega) * v0
    assert torch.allclose(M.slerp_tensor(0.3, v0, v1), want)


def test_layer_gradient_and_groups():
    assert M.layer_gradient([0.0, 1.0], 3) == [0.0, 0.5, 1.0]
    g = M.layer_gradient([0.0, 0.4, 0.8, 0.2, 1.0], 4)  # layers at anchor positions 0, 4/3, 8/3, 4
    assert g[0] == 0.0 and g[3] == 1.0
    assert abs(g[1] - (0.4 + (0.8 - 0.4) / 3)) < 1e-12 and abs(g[2] - (0.8 + 2 / 3 * (0.2 - 0.8))) < 1e-12
    assert M.param_group("layers.2.self_attn.q_proj.weight") == ("self_attn", 2)
    assert M.param_group("layers.0.mlp.up_proj.weight") == ("mlp", 0)
    assert M.param_group("layers.1.input_layernorm.weight") == ("other", 1)
    assert M.param_group("embed_tokens.weight") == ("other", None)


def test_slerp_schedule_on_a_transformer_state_dict():
    from rayml.llm.model import ModelConfig, TransformerLM

    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64)
    a, b = TransformerLM(cfg), TransformerLM(cfg)
    a.reset_parameters(torch.Generator().manual_seed(0))
    b.reset_parameters(torch.Generator().manual_seed(1))
    sa, sb = a.state_dict(), b.state_dict()
    out = M.slerp(sa, sb, M.slerp_t_schedule([0.0] * 5, [1.0] * 5, 0.0, 2))
    for k in sa:
        group, _ = M.param_group(k)
        assert torch.allclose(out[k], sb[k] if group == "mlp" else sa[k]), k
    merged = TransformerLM(cfg)
    merged.load_state_dict(M.ties(sa, [sa, sb], [0.5, 0.5], 0.5))
    assert merged(torch.tensor([[1, 2, 3]])).shape == (1, 3, 50)


def test_bad_input():
    a, b = {"w": t(1.0)}, {"v": t(1.0)}
    with pytest.raises(ValueError, match="keys"):
        M.linear([a, b])
    with pytest.raises(ValueError, match="shape"):
        M.linear([a, {"w": t(1.0, 2.0)}])
    with pytest.raises(ValueError, match="weights"):
        M.linear([a, a], [1.0])
    with pytest.raises(ValueError, match="density"):
        M.ties(a, [a], [1.0], 0.0)
    with pytest.raises(ValueError, match="t must"):
        M.slerp(a, a, 1.5)
    with pytest.raises(ValueError, match="n_layers"):
        M.layer_gradient([0.5], 0)
    with pytest.raises(ValueError, match="seed"):
        M.dare(a, [a], 1.0, 0.5, seed=1.5)
