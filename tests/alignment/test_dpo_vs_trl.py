"""rayml's DPO loss against TRL's ``DPOTrainer`` on the same batch: a tiny random Llama as the
policy and another as the frozen reference, a word-level tokenizer built in-process, TRL's own
dataset processing, collator and ``compute_loss``; the same token ids through rayml's
``pair_logps`` + ``dpo_loss`` on the same weights (``from_hf_llama``). Skips when TRL (with its
``datasets`` / ``accelerate`` dependencies) is not installed."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl", reason="TRL is not installed (pip install trl)")
transformers = pytest.importorskip("transformers")

from rayml.alignment.dpo import TokenPair, dpo_loss, pair_logps  # noqa: E402
from rayml.llm.hf import from_hf_llama  # noqa: E402

WORDS = [f"w{i}" for i in range(40)]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                                bos_token="<s>", eos_token="</s>")
    return fast


def _llama(seed: int, vocab: int):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_equals_trls_on_the_same_batch(tmp_path, beta):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    tok = _tokenizer()
    policy, reference = _llama(0, len(tok)), _llama(1, len(tok))
    rows = [{"prompt": "w1 w2 w3", "chosen": " w4 w5", "rejected": " w6"},
            {"prompt": "w7 w8", "chosen": " w9", "rejected": " w10 w11 w12"},
            {"prompt": "w13", "chosen": " w14 w15 w16", "rejected": " w17 w18"},
            {"prompt": "w19 w20 w21 w22", "chosen": " w23", "rejected": " w24"}]
    args = DPOConfig(output_dir=str(tmp_path), beta=beta, loss_type=["sigmoid"], per_device_train_batch_size=4,
                     report_to=[], use_cpu=True, max_length=None, dataset_num_proc=None, seed=0)
    trainer = DPOTrainer(model=policy, ref_model=reference, args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tok)
    processed = list(trainer.train_dataset)
    batch = trainer.data_collator(processed)
    with torch.no_grad():
        trl_loss = float(trainer.compute_loss(trainer.model, batch))

    pairs = [TokenPair(prompt=r["prompt_ids"], chosen=r["chosen_ids"], rejected=r["rejected_ids"]) for r in processed]
    assert all(p.chosen[-1] == tok.eos_token_id for p in pairs)  # TRL appended EOS; the same ids go to rayml
    ours_policy, ours_ref = from_hf_llama(policy), from_hf_llama(reference)
    with torch.no_grad():
        pc, pr = pair_logps(ours_policy, pairs, pad_id=tok.pad_token_id)
        rc, rr = pair_logps(ours_ref, pairs, pad_id=tok.pad_token_id)
        losses, _, _ = dpo_loss(pc, pr, rc, rr, beta=beta)
    assert abs(float(losses.mean()) - trl_loss) < 1e-5, (float(losses.mean()), trl_loss)
    assert abs(trl_loss - float(torch.log(torch.tensor(2.0)))) > 1e-3  # the two models differ: not the trivial log 2
