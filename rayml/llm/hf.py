"""Copying the embedded model into Hugging Face ``transformers.LlamaForCausalLM`` (and back).

The embedded model uses Llama's parameter names and rotate-half RoPE, so the weights copy one to
one: ``embed_tokens``, ``layers.*``, ``norm`` go under ``model.``; ``lm_head`` stays. Used by the
logits-match test and by ``rayml bench llm-substrate`` (same weights, same CPU).
``export_hf_dir`` writes a local directory that ``HFLM`` (or ``from_pretrained``) loads offline.
"""

from __future__ import annotations

import os


from rayml.llm.model import ModelConfig, TransformerLM

__all__ = ["llama_config", "to_hf_llama", "from_hf_llama", "export_hf_dir"]


def llama_config(cfg: ModelConfig, *, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0):
    """The ``transformers.LlamaConfig`` of the same shape."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                       num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                       num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                       max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps,
                       rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings, hidden_act="silu",
                       attention_bias=False, mlp_bias=False, bos_token_id=bos_id, eos_token_id=eos_id,
                       pad_token_id=pad_id, torch_dtype="float32")


def to_hf_llama(model: TransformerLM, **ids):
    """A ``LlamaForCausalLM`` (eval mode, float32) holding copies of ``model``'s weights."""
    from transformers import LlamaForCausalLM

    hf_cfg = llama_config(model.config, **ids)
    hf_cfg.rope_parameters = {"rope_type": "default", "rope_theta": model.config.rope_theta}
    hf = LlamaForCausalLM(hf_cfg)
    state = {}
    for k, v in model.state_dict().items():
        state[k if k.startswith("lm_head") else "model." + k] = v.detach().clone().float()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m and not (model.config.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"weight copy mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def from_hf_llama(hf) -> TransformerLM:
    """The embedded model with the weights of a Llama-architecture ``transformers`` model."""
    c = hf.config
    cfg = ModelConfig(vocab_size=c.vocab_size, d_model=c.hidden_size, n_layers=c.num_hidden_layers,
                      n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads, d_ff=c.intermediate_size,
                      max_seq_len=c.max_position_embeddings, rope_theta=float(getattr(c, "rope_theta", None) or
                      (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0)),
                      norm_eps=c.rms_norm_eps, tie_embeddings=bool(c.tie_word_embeddings))
    model = TransformerLM(cfg)
    state = {(k[len("model."):] if k.startswith("model.") else k): v for k, v in hf.state_dict().items()
             if "rotary_emb" not in k}
    model.load_state_dict(state)
    return model.eval()


def export_hf_dir(model: TransformerLM, tokenizer, path: str | os.PathLike) -> str:
    """Write ``model`` (as ``LlamaForCausalLM``) and its BPE tokenizer to a local HF directory."""
    from transformers import PreTrainedTokenizerFast

    hf = to_hf_llama(model, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
    hf.save_pretrained(str(path))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer._tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>")
    fast.save_pretrained(str(path))
    return str(path)
