"""rayml.experiments.dpsdp: every declared claim is wired to a number its run measures; the tuning
tie rule; the LoRA view shares the frozen weights; bad configs are rejected before any work."""

import pytest
import torch

from rayml.alignment import dpo
from rayml.experiments import dpsdp as E
from rayml.llm.model import ModelConfig, TransformerLM


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("dpsdp") == []


def test_ties_go_to_the_middle_of_the_tied_settings():
    flat = {(b, 1e-4): 0.5 for b in (0.001, 0.003, 0.01, 0.03, 0.1)}
    assert E._choose(flat) == (0.01, 1e-4)
    assert E._choose({**flat, (0.5, 1e-4): 0.6}) == (0.5, 1e-4)  # a strict best wins, edge or not
    assert E._choose({(0.1, 1e-4): 0.4, (0.3, 1e-4): 0.7, (1.0, 1e-4): 0.7}) == (0.3, 1e-4)  # lower middle


def test_edge_and_flat_flags():
    cfg = {"beta_grid": [0.01, 0.1, 1.0], "lr_grid": [1e-4]}
    tuned = [{"system": "dpsdp", "beta": b, "lr": 1e-4, "id": {"maj_turnT": v}} for b, v in
             ((0.01, 0.5), (0.1, 0.5), (1.0, 0.5))]
    f = E._tuning_flags(cfg, tuned, {"dpsdp": (0.1, 1e-4)})["dpsdp"]
    assert f == {"beta_at_edge": False, "lr_at_edge": False, "flat_grid": True, "flat_beta_at_chosen_lr": True,
                 "tied_best": 3}
    assert E._tuning_flags(cfg, tuned, {"dpsdp": (0.01, 1e-4)})["dpsdp"]["beta_at_edge"]


def test_the_lora_view_shares_the_frozen_weights_and_matches_add_lora():
    cfg = ModelConfig(vocab_size=20, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=32)
    m = TransformerLM(cfg)
    m.reset_parameters(torch.Generator().manual_seed(0))
    m.eval()
    v, ref = E.lora_view(m, 2, 3), dpo.add_lora(m, 2, seed=3)
    x = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(v(x), ref(x))
    assert v.layers[1].mlp.up_proj.base.weight is m.layers[1].mlp.up_proj.weight
    assert {n for n, p in v.named_parameters() if p.requires_grad} == {n for n, p in ref.named_parameters()
                                                                       if p.requires_grad}
    with torch.no_grad():
        ref.layers[0].self_attn.q_proj.lora_B.add_(0.5)
    w = E.lora_view(m, 2, 0, adapters=ref)  # adapters copied in: the same function as the trained model
    assert torch.allclose(w(x), ref(x))


@pytest.mark.parametrize("key,value,match", [
    ("model", "gpt2", "model"), ("ood_tasks", ["add"], "ood_tasks"), ("ood_tasks", [], "ood_tasks"),
    ("id_kind", "poem", "id_kind"), ("ood_kind", "lookup", "ood_kind"), ("id_levels", [0], "id_levels"),
    ("seeds", 0, "seeds"), ("n_candidates", 1, "n_candidates"), ("beta_grid", [0.1, 0.1], "beta_grid"),
    ("lr_grid", [-1.0], "lr_grid"), ("lora_rank", -1, "lora_rank"), ("collect_temperature", 0, "collect_temperature"),
    ("real", {"nope": 1}, "real"), ("train_digits", [0], "digits"),
])
def test_bad_configs_are_rejected_naming_the_key(key, value, match):
    config = dict(E.SIZES["tiny"], **{key: value})
    with pytest.raises(ValueError, match=match):
        E._check(config)


def test_a_real_model_needs_lora():
    config = dict(E.SIZES["tiny"], model="smollm2-135m", real=dict(E.SIZES["tiny"]["real"], lora_rank=0))
    with pytest.raises(ValueError, match="lora_rank"):
        E._check(config)
    E._check(dict(E.SIZES["quick"], model="smollm2-135m"))
