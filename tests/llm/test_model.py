"""The embedded transformer: shapes, KV cache against full recompute, re-rotation, per-token
recompute, padding, and logits against Hugging Face LlamaForCausalLM with copied weights."""

from __future__ import annotations

import pytest
import torch

from rayml.llm.generation import generate, generate_recompute
from rayml.llm.model import KVCache, ModelConfig, TransformerLM


def _model(seed=0, **kw) -> TransformerLM:
    cfg = dict(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=128)
    cfg.update(kw)
    torch.manual_seed(seed)
    m = TransformerLM(ModelConfig(**cfg)).eval()
    with torch.no_grad():  # larger weights than the init, so logits are far from uniform
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(6.0)
    return m.double()


def test_config_validation_names_the_argument():
    with pytest.raises(ValueError, match="d_model"):
        ModelConfig(vocab_size=10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(vocab_size=10, d_model=32, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="vocab_size"):
        ModelConfig(vocab_size=0)


def test_parameter_count_and_plain_linears():
    m = _model()
    assert m.num_parameters() == m.config.n_params()
    linears = [n for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)]
    assert len(linears) == 2 * 7 + 1  # q k v o gate up down per layer + lm_head


def test_cached_prefill_and_decode_equal_the_full_forward():
    m = _model()
    x = torch.randint(0, 40, (2, 11))
    full = m(x)
    cache = m.new_cache(2, capacity=4)  # grows on demand
    a = m(x[:, :7], cache=cache)
    b = [m(x[:, i:i + 1], cache=cache) for i in range(7, 11)]
    got = torch.cat([a] + b, dim=1)
    assert torch.allclose(got, full, atol=1e-10)
    assert cache.length == 11 and cache.positions[0].tolist()[:11] == list(range(11))


def test_kv_cache_generation_equals_full_recompute_with_padding_and_hooks():
    m = _model(1)
    prompts = [[1, 5, 6, 7, 8], [1, 9], [1, 3, 3, 3, 3, 3, 3, 8, 2]]
    ban = lambda toks, logits: logits.index_fill(-1, torch.tensor([7, 11]), float("-inf"))  # noqa: E731
    a = generate(m, prompts, max_new_tokens=12, eos_id=2, logits_processors=[ban])
    b = generate_recompute(m, prompts, max_new_tokens=12, eos_id=2, logits_processors=[ban])
    assert a.tokens == b.tokens
    assert all(7 not in t and 11 not in t for t in a.tokens)
    # a prompt batched with longer (left-padded) ones gives what it gives alone
    alone = generate(m, [prompts[1]], max_new_tokens=12, eos_id=2, logits_processors=[ban])
    assert alone.tokens[0] == a.tokens[1]


def test_sampling_is_seeded_and_top_p_small_is_greedy():
    m = _model(2)
    p = [[1, 4, 5], [1, 6]]
    s1 = generate(m, p, max_new_tokens=10, temperature=1.0, seed=3).tokens
    s2 = generate(m, p, max_new_tokens=10, temperature=1.0, seed=3).tokens
    assert s1 == s2
    greedy = generate(m, p, max_new_tokens=10).tokens
    assert generate(m, p, max_new_tokens=10, temperature=0.7, top_p=1e-9, seed=5).tokens == greedy
    with pytest.raises(ValueError, match="top_p"):
        generate(m, p, top_p=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(m, p, max_new_tokens=-1)


def test_rerotated_chunk_equals_chunk_computed_at_that_position():
    m = _model(3)
    chunk = torch.randint(0, 40, (1, 9))
    at0 = m.new_cache(1)
    m(chunk, torch.arange(9), cache=at0)
    offset = 37
    direct = m.new_cache(1)
    m(chunk, torch.arange(offset, offset + 9), cache=direct)  # nothing precedes it
    at0.rerotate(torch.arange(offset, offset + 9))
    for layer in range(m.config.n_layers):
        k0, v0 = at0.read(layer)
        k1, v1 = direct.read(layer)
        assert torch.allclose(k0, k1, atol=1e-9) and torch.allclose(v0, v1, atol=1e-9)
    assert at0.positions[0, :9].tolist() == list(range(offset, offset + 9))


def test_link_chunks_then_recompute_every_token_equals_full_prefill():
    m = _model(4)
    a, b = torch.randint(0, 40, (1, 6)), torch.randint(0, 40, (1, 5))
    ca, cb = m.new_cache(1), m.new_cache(1)
    m(a, cache=ca)
    m(b, cache=cb)  # both prefilled independently from position 0
    linked = KVCache.concat([ca, cb])
    linked.rerotate(torch.arange(11))
    full = m.new_cache(1)
    m(torch.cat([a, b], 1), cache=full)
    # chunk b's keys differ from the true prefix cache (it never attended to a) ...
    assert not torch.allclose(linked.read(1)[1][:, :, 6:], full.read(1)[1][:, :, 6:], atol=1e-6)
    # ... until its tokens are recomputed in place (attending to everything before them)
    m(b, torch.arange(6, 11), cache=linked, slots=torch.arange(6, 11))
    for layer in range(m.config.n_layers):
        assert torch.allclose(linked.read(layer)[0], full.read(layer)[0], atol=1e-9)
        assert torch.allclose(linked.read(layer)[1], full.read(layer)[1], atol=1e-9)
    assert linked.length == 11


def test_cache_slice_select_and_write_roundtrip():
    m = _model(5)
    c = m.new_cache(2)
    with torch.no_grad():
        m(torch.randint(0, 40, (2, 8)), cache=c)
    s = c.slice(2, 5)
    assert s.length == 3 and torch.equal(s.read(0)[0], c.read(0)[0][:, :, 2:5])
    one = c.select([1])
    assert one.batch == 1 and torch.equal(one.read(1)[1], c.read(1)[1][1:])
    k, v = c.read(0)
    c.write(0, torch.tensor([0]), torch.zeros_like(k[:, :, :1]), torch.ones_like(v[:, :, :1]))
    assert float(c.read(0)[0][:, :, 0].abs().sum()) == 0 and float(c.read(0)[1][:, :, 0].mean()) == 1
    with pytest.raises(ValueError, match="new_positions"):
        c.rerotate(torch.arange(3))


def test_logits_match_hf_llama_with_copied_weights():
    pytest.importorskip("transformers")
    from rayml.llm.hf import from_hf_llama, to_hf_llama

    m = _model(6, n_layers=3).float()
    hf = to_hf_llama(m)
    x = torch.randint(0, 40, (2, 17))
    with torch.no_grad():
        ours, theirs = m(x), hf(input_ids=x).logits
    assert torch.allclose(ours, theirs, atol=1e-5), float((ours - theirs).abs().max())
    back = from_hf_llama(hf)
    assert torch.allclose(back(x), ours, atol=1e-6)


def test_prefill_into_an_empty_cache_equals_the_cacheless_forward_and_the_masked_path():
    """An empty cache filled in order takes plain causal attention; it must equal both the forward
    without a cache and the general masked path (a cache that already holds a token)."""
    m = _model(3)
    ids = torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(5, 14)  # shifted positions: RoPE is relative, causality is by order
    with torch.no_grad():
        ref = m(ids, pos)
        fast = m(ids, pos, cache=m.new_cache(2, 32))
        general = m.new_cache(2, 32)
        m(ids[:, :1], pos[:1], cache=general)
        rest = m(ids[:, 1:], pos[1:], cache=general)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rest, ref[:, 1:], atol=1e-5, rtol=1e-5)
