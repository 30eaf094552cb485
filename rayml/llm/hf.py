"""Copying the embedded model into Hugging Face ``transformers.LlamaForCausalLM`` (and back).

The embedded model uses Llama's parameter names and rotate-half RoPE, so the weights copy one to
one: ``embed_tokens``, ``layers.*``, ``norm`` go under ``model.``; ``lm_head`` stays. Used by the
logits-match test and by ``rayml bench llm-substrate`` (same weights, same CPU).
``export_hf_dir`` writes a local directory that ``HFLM`` (or ``from_pretrained``) loads offline.

Pretrained Llama-family directories (SmolLM2 converted by ``rayml.llm.smollm2``, or a user's own):
``load_embedded(dir)`` loads one into the embedded engine (``from_hf_llama``, an ``EmbeddedLM``),
``load_hf(dir)`` into ``transformers`` (an ``HFLM``); both use the directory's own tokenizer through
``rayml.llm.tokenizer.PretrainedTokenizer``. ``check_llama_config`` rejects, before any weights are
read, the variants the embedded engine does not implement (biases, scaled RoPE, other activations).
"""

from __future__ import annotations

import os

import torch

from rayml.llm.model import ModelConfig, TransformerLM

__all__ = ["llama_config", "to_hf_llama", "from_hf_llama", "export_hf_dir", "check_llama_config", "load_embedded",
           "load_hf", "load_pretrained_tokenizer"]


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


def check_llama_config(c) -> None:
    """Raise ``ValueError`` unless the ``transformers`` config ``c`` is a Llama the embedded engine
    computes exactly: model type ``llama``, SiLU, no attention / MLP biases, default RoPE, and
    ``head_dim == hidden_size / num_attention_heads``."""
    if getattr(c, "model_type", None) != "llama":
        raise ValueError(f"model_type must be 'llama' (Llama-family), got {getattr(c, 'model_type', None)!r}")
    if getattr(c, "hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act must be 'silu', got {c.hidden_act!r}")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(c, flag, False):
            raise ValueError(f"{flag}=True is not supported by the embedded engine")
    rope = dict(getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {})
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"rope type must be 'default' (no scaling), got {rope.get('rope_type', rope.get('type'))!r}")
    hd = getattr(c, "head_dim", None)
    if hd is not None and hd * c.num_attention_heads != c.hidden_size:
        raise ValueError(f"head_dim ({hd}) * num_attention_heads ({c.num_attention_heads}) must equal "
                         f"hidden_size ({c.hidden_size})")


def from_hf_llama(hf) -> TransformerLM:
    """The embedded model with the weights of a Llama-architecture ``transformers`` model."""
    c = hf.config
    check_llama_config(c)
    cfg = ModelConfig(vocab_size=c.vocab_size, d_model=c.hidden_size, n_layers=c.num_hidden_layers,
                      n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads, d_ff=c.intermediate_size,
                      max_seq_len=c.max_position_embeddings, rope_theta=float(getattr(c, "rope_theta", None) or
                      (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0)),
                      norm_eps=c.rms_norm_eps, tie_embeddings=bool(c.tie_word_embeddings))
    with torch.device("meta"):  # no random initialisation of weights that are overwritten next
        model = TransformerLM(cfg)
    # copies (not views): methods that edit the embedded weights in place leave ``hf`` unchanged
    state = {(k[len("model."):] if k.startswith("model.") else k): v.detach().to(dtype=torch.float32, copy=True)
             for k, v in hf.state_dict().items()
             if "rotary_emb" not in k}
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
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


def _hf_dir(path) -> str:
    p = os.fspath(path)
    if not os.path.isdir(p) or not os.path.exists(os.path.join(p, "config.json")):
        raise ValueError(f"path must be a local Hugging Face model directory (with config.json), got {path!r}")
    return p


def load_pretrained_tokenizer(path: str | os.PathLike):
    """The directory's ``transformers`` tokenizer as a ``PretrainedTokenizer`` (offline)."""
    from transformers import AutoTokenizer

    from rayml.llm.tokenizer import PretrainedTokenizer

    return PretrainedTokenizer(AutoTokenizer.from_pretrained(_hf_dir(path), local_files_only=True))


def load_hf(path: str | os.PathLike, *, dtype=None):
    """A local Llama-family HF directory (or ``"smollm2-135m"``) in ``transformers``: an ``HFLM``
    whose ``.model`` is the ``LlamaForCausalLM`` (float32 unless ``dtype``) and whose tokenizer is a
    ``PretrainedTokenizer``. Nothing is downloaded from a model hub (``local_files_only``)."""
    from rayml.llm.backends import HFLM

    if str(path) in _named():
        from rayml.llm import smollm2

        path = smollm2.ensure()
    return HFLM(_hf_dir(path), tokenizer=load_pretrained_tokenizer(path), dtype=dtype or torch.float32)


def load_embedded(path: str | os.PathLike, *, device: str = "cpu", card: dict | None = None):
    """A local Llama-family HF directory in the embedded engine: an ``EmbeddedLM`` over
    ``from_hf_llama`` of the directory's weights (float32), with a ``PretrainedTokenizer``. The card
    is the directory's ``card.json`` when present (``rayml.llm.smollm2`` writes one)."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    from rayml.llm.backends import EmbeddedLM

    p = _hf_dir(path)
    check_llama_config(AutoConfig.from_pretrained(p, local_files_only=True))  # before reading weights
    hf = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=torch.float32)
    model = from_hf_llama(hf).to(device)
    del hf
    if card is None and os.path.exists(os.path.join(p, "card.json")):
        with open(os.path.join(p, "card.json")) as f:
            card = json.load(f)
    return EmbeddedLM(model, load_pretrained_tokenizer(p), card=card or {"source": p})


def _named() -> tuple[str, ...]:
    from rayml.llm import smollm2

    return smollm2.NAMES
