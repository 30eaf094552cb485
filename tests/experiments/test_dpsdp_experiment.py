"""rayml.experiments.dpsdp: every declared claim is wired to a number its run measures; the tuning
tie rule; the LoRA view shares the frozen weights; bad configs are rejected before any work."""

import pytest
import torch

from rayml.alignment import dpo
from rayml.experiments import dpsdp as E
from rayml.llm.model import ModelConfig, TransformerLM


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims, tiny_record):
    assert unmeasured_claims("dpsdp") == []
    # session 7: the tuning record holds the (assumed) paper beta and the reference's own tuning score
    tuning = tiny_record("dpsdp")["config"]["budget"]["tuning"]
    assert tuning["paper_setting"]["beta"] == E.PAPER_BETA and 0.0 <= tuning["sft_score"] <= 1.0


def _tune(scores):
    """evidence.tune as the experiment calls it, on a fixed score table (no model involved)."""
    from rayml import evidence

    betas = sorted({b for b, _ in scores})
    lrs = sorted({lr for _, lr in scores})
    return evidence.tune(lambda items: [scores[(st["beta"], st["lr"])] for _, st in items],
                         {"dpsdp": {"beta": betas, "lr": lrs}}, lower_is_better=False,
                         tie_break=E.STRONGER_REGULARISATION)["dpsdp"]


def test_ties_go_to_the_stronger_regularisation_for_both_systems():
    flat = {(b, 1e-4): 0.5 for b in (0.001, 0.003, 0.01, 0.03, 0.1)}
    assert _tune(flat).setting == {"beta": 0.1, "lr": 1e-4}  # the largest beta of the tie
    assert _tune({**flat, (0.5, 1e-4): 0.6}).setting == {"beta": 0.5, "lr": 1e-4}  # a strict best wins, edge or not
    # the session-4 review's full-size tie: (2, 3e-5), (2, 1e-4), (8, 1e-4) at 0.633 went to (2, 1e-4) under
    # tie_break="middle"; now to beta 8, and among equal betas to the smaller lr
    review = {(b, lr): 0.6 for b in (0.1, 0.5, 2.0, 8.0) for lr in (3e-5, 1e-4)}
    review.update({(2.0, 3e-5): 0.633, (2.0, 1e-4): 0.633, (8.0, 1e-4): 0.633})
    assert _tune(review).setting == {"beta": 8.0, "lr": 1e-4}
    review[(8.0, 1e-4)] = 0.6
    assert _tune(review).setting == {"beta": 2.0, "lr": 3e-5}


def test_the_single_agent_at_dpsdps_setting_is_its_own_run_or_the_tuned_one():
    out = [{"system": "dpsdp", "phase": 0}, {"system": "single_agent", "phase": 0, "beta": 2.0}]
    rows = E.equal_setting_rows(out, None)  # tuning gave both systems one setting: the same run
    assert rows[-1] == {"system": "single_agent_eq", "phase": 0, "beta": 2.0, "same_as_tuned": True}
    rows = E.equal_setting_rows(out, [{"system": "single_agent", "phase": 0, "beta": 8.0}])
    assert rows[:2] == out and rows[-1] == {"system": "single_agent_eq", "phase": 0, "beta": 8.0,
                                            "same_as_tuned": False}


def test_edge_and_flat_flags():
    f = E._tuning_flags({"dpsdp": _tune({(0.01, 1e-4): 0.5, (0.1, 1e-4): 0.5, (1.0, 1e-4): 0.5})})["dpsdp"]
    assert f == {"edges": {"beta": "high"}, "extended": {}, "flat_grid": True, "tied_best": 3}  # the strongest beta
    f = E._tuning_flags({"dpsdp": _tune({(0.01, 1e-4): 0.6, (0.1, 1e-4): 0.5, (1.0, 1e-4): 0.5})})["dpsdp"]
    assert f["edges"] == {"beta": "low"} and not f["flat_grid"] and f["tied_best"] == 1


def test_the_paper_claims_are_gated_on_the_reference_loop_keeping_its_answers():
    from rayml.results import evaluate_claims

    gate, *rest = E.CLAIMS
    paper = [c for c in rest if c.kind == "paper"]
    assert [c for c in rest if c.kind == "sanity"] == [E.GATE_MOVES, E.GATE_NULL, E.GATE_OOD, E.GATE_MOVES_SINGLE,
                                                        E.GATE_NULL_SINGLE, E.GATE_MOVES_SINGLE_EQ,
                                                        E.GATE_NULL_SINGLE_EQ] and len(paper) == 5
    assert gate.kind == "sanity" and "turn-2" in gate.text and gate.compare == -0.02
    assert all(c.gates[0] == gate.text for c in paper)  # the out-of-distribution claim has GATE_OOD too
    # the single agent is the paper's ablation: a comparison claim, never a control
    assert not any(ctl.name == "single_agent" for c in paper for ctl in c.controls)
    ablations = [c for c in paper if str(c.compare).startswith("baselines.single_agent")]
    assert [c.compare for c in ablations] == ["baselines.single_agent.id.maj_turnT",
                                              "baselines.single_agent_eq.id.maj_turnT"]
    assert all([ctl.name for ctl in c.controls] == ["sft"] for c in ablations)
    # a reference loop that loses 3 points at turn 2 makes every paper claim incomplete
    record = _moved_record()
    blk = record["baselines"]["sft"]
    blk["id"]["turn2_minus_turn1"] = -0.03
    out = evaluate_claims(record, E.CLAIMS)
    assert out[0]["holds"] is False
    assert [c["status"] for c in out if c["kind"] == "paper"] == ["incomplete"] * 5
    blk["id"]["turn2_minus_turn1"] = -0.01
    assert [c["status"] for c in evaluate_claims(record, E.CLAIMS) if c["kind"] == "paper"] == ["holds"] * 5


def test_an_untrained_reference_that_beats_the_single_agent_too_makes_the_ablation_not_discriminating():
    from rayml.results import evaluate_claims

    # the review's full record: SFT 0.646 and DPSDP 0.639 both above the single agent's 0.612
    val = {"dpsdp": 0.64, "sft": 0.65, "single_agent": 0.61, "single_agent_eq": 0.61}
    rows = [{"system": s, "split": "id", "seed": k, "metric": "maj", "value": v + 0.001 * k}
            for k in range(8) for s, v in val.items()]
    rows += _null_rows(8, moved=0.1)
    blk = {s: {"id": {"maj_turnT": v, "turn2_minus_turn1": 0.0, "maj_flipped": 0.1}} for s, v in val.items()}
    blk.update({s + E.NULL: {"id": {"maj_flipped": 0.02}} for s in MOVED})
    record = {"metrics": {"id": {"maj_turnT": 0.64, "maj_flipped": 0.1}}, "baselines": blk, "tables": {"seeds": rows}}
    ablations = [c for c in E.CLAIMS if c.kind == "paper" and str(c.compare).startswith("baselines.single_agent")]
    gates = [E.GATE, E.GATE_MOVES, E.GATE_NULL, E.GATE_MOVES_SINGLE, E.GATE_NULL_SINGLE, E.GATE_MOVES_SINGLE_EQ,
             E.GATE_NULL_SINGLE_EQ]
    out = evaluate_claims(record, [*gates, *ablations])
    assert [c["status"] for c in out[len(gates):]] == ["not discriminating"] * 2
    for r in rows:  # a reference below the single agent: the same comparison now discriminates
        r["value"] -= 0.1 * (r["system"] == "sft")
    blk["sft"]["id"]["maj_turnT"] = 0.55
    assert [c["status"] for c in evaluate_claims(record, [*gates, *ablations])[len(gates):]] == ["holds"] * 2


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
    ("model", "gpt2", "model"), ("ood_digits", [3], "ood_digits"), ("ood_digits", [], "ood_digits"),
    ("answer_digits", [3, 4], "answer_digits"), ("critic_steps", -1, "critic_steps"), ("critic_items", 0, "critic_items"),
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


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_quick_and_full_warm_up_ships_with_a_card_that_matches_its_state(size):
    import json

    from rayml.alignment import dpsdp_pipeline as D
    from rayml.llm.checkpoint import file_sha256

    path = D._warmup_file(D.SIZES[size], D.WARMUP_SEED)
    assert path.parent == D.SHIPPED_WARMUPS, f"no shipped warm-up for {size}: run scripts/ship_checkpoints.py"
    card = json.loads(path.with_name(path.stem + ".card.json").read_text())
    assert card["sha256"][path.name] == file_sha256(path)
    assert {"command", "seed", "data", "training_seconds", "scores"} <= set(card)
    assert D.warmup_info(D.SIZES[size]) == card["scores"]


def test_a_changed_warm_up_recipe_does_not_use_the_shipped_file(tmp_path, monkeypatch):
    from rayml.alignment import dpsdp_pipeline as D

    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    changed = dict(D.SIZES["quick"], sft_steps=D.SIZES["quick"]["sft_steps"] + 1)
    assert D._warmup_file(changed, D.WARMUP_SEED).parent == tmp_path / "alignment"
    assert D.warmup_info(changed) == {}


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_tuned_beta_grids_hold_the_assumed_paper_beta_strictly_inside_and_extend(size):
    # session 7: the quick choice sat on the grid's top edge after one extension; the grid must hold the
    # (assumed) paper beta off both edges and extend more than once past an edge that holds the choice
    cfg = E.SIZES[size]
    assert min(cfg["beta_grid"]) < E.PAPER_BETA < max(cfg["beta_grid"]) and E.PAPER_BETA in cfg["beta_grid"]
    assert cfg["tune_extend"] >= 2
    real = E._effective(dict(cfg, model="smollm2-135m"))
    assert min(real["beta_grid"]) < E.PAPER_BETA < max(real["beta_grid"])


@pytest.mark.parametrize("grid", [[0.1, 0.5, 2.0], [0.01, 0.05]])
def test_a_beta_grid_without_the_paper_beta_strictly_inside_is_rejected(grid):
    with pytest.raises(ValueError, match="beta_grid"):
        E._check(dict(E.SIZES["quick"], beta_grid=grid))
    E._check(dict(E.SIZES["tiny"], beta_grid=[8.0]))  # one value: a fixed setting, nothing tuned


def test_the_out_of_distribution_claim_is_gated_on_the_reference_keeping_its_answers_out_of_distribution():
    """Session-7 review: refinement halved out-of-distribution accuracy for every system, the untrained
    reference included; the out-of-distribution claim is then incomplete, the in-distribution ones are not."""
    import copy

    from rayml import records, results
    from rayml.experiments import dpsdp as exp

    record = records.load_record("docs/records/dpsdp.json")
    ood = [c for c in exp.CLAIMS if c.metric == "metrics.ood.maj_turnT"]
    assert len(ood) == 1 and exp.GATE_OOD.text in ood[0].gates and exp.GATE.text in ood[0].gates
    for drop, incomplete in ((-0.25, True), (0.0, False)):
        rec = copy.deepcopy(record)
        rec["baselines"]["sft"]["ood"]["turn2_minus_turn1"] = drop
        rec["baselines"]["sft"]["id"]["turn2_minus_turn1"] = 0.0
        for blk in (rec["metrics"], rec["baselines"]["single_agent"], rec["baselines"]["single_agent_eq"]):
            blk["id"]["maj_flipped"] = 0.2  # the session-8 gate (DPO moves the systems) passes
        rows = [r for r in rec["tables"]["seeds"] if not (r["metric"] == "maj_flipped" and r["split"] == "id")]
        rec["tables"]["seeds"] = rows + _null_rows(5, moved=0.2)  # and the session-11 one (more than the null)
        rec["baselines"].update({s + E.NULL: {"id": {"maj_flipped": 0.02}} for s in MOVED})
        by_metric = {c["metric"]: c for c in results.evaluate_claims(rec, exp.CLAIMS) if c["kind"] == "paper"}
        assert (by_metric["metrics.ood.maj_turnT"]["status"] == "incomplete") is incomplete
        assert by_metric["metrics.id.maj_turnT"]["status"] != "incomplete"


MOVED = ("dpsdp", "single_agent", "single_agent_eq")  # the trained systems, each with its noise null


def _null_rows(n, moved, null=(0.02, 0.0, 0.04, 0.02, 0.0, 0.02, 0.04, 0.0), systems=MOVED):
    """Per-seed maj_flipped rows: each trained system ``moved`` (a number or one per seed), its null ``null``."""
    moved = [moved] * n if isinstance(moved, (int, float)) else list(moved)
    return [{"system": s + suffix, "split": "id", "seed": k, "metric": "maj_flipped", "value": float(v)}
            for s in systems for k in range(n) for suffix, v in (("", moved[k]), (E.NULL, null[k]))]


def _moved_record():
    """A record in which DPSDP beats everything (every paper claim holds when the gates pass)."""
    rows = [{"system": s, "split": sp, "seed": k, "metric": m, "value": v} for k in range(5)
            for s in ("dpsdp", "sft", "single_agent", "single_agent_eq", "none") for sp in ("id", "ood")
            for m, v in (("maj", 0.5 + 0.1 * (s == "dpsdp")), ("maj_gain", 0.1 * (s == "dpsdp")))]
    rows += _null_rows(5, moved=0.2)
    blk = {"id": {"maj_turnT": 0.5, "turn2_minus_turn1": 0.0, "maj_flipped": 0.2},
           "ood": {"maj_turnT": 0.5, "turn2_minus_turn1": 0.0}, "maj_gain_id": 0.0}
    import copy
    return {"metrics": {"id": {"maj_turnT": 0.6, "maj_flipped": 0.2}, "ood": {"maj_turnT": 0.6}, "maj_gain_id": 0.1},
            "baselines": {**{s: copy.deepcopy(blk) for s in ("sft", "single_agent", "single_agent_eq")},
                          **{s + E.NULL: {"id": {"maj_flipped": 0.016}} for s in MOVED}},
            "tables": {"seeds": rows}}


def _set_flips(rec, system, moved, null):
    """``system``'s per-seed maj_flipped and its null's in ``rec`` (means in the blocks too)."""
    import numpy as np

    rows = rec["tables"]["seeds"]
    rows[:] = [r for r in rows if not (r["metric"] == "maj_flipped" and r["system"] in (system, system + E.NULL))]
    rows += _null_rows(len(moved), moved, null, systems=(system,))
    blk = rec["metrics"] if system == "dpsdp" else rec["baselines"][system]
    blk["id"]["maj_flipped"] = float(np.mean(moved))
    rec["baselines"][system + E.NULL]["id"]["maj_flipped"] = float(np.mean(null))


def test_a_system_that_moves_the_verdicts_no_more_than_its_noise_null_makes_the_paper_claims_incomplete():
    """Session 10, review R6: Gaussian noise on the SFT weights (5% of each tensor's std) changed 7.2% of the quick
    verdicts, so the ">= 5% of verdicts" gate alone was passed by a random perturbation. On today's main's quick
    numbers (DPSDP's per-seed share of changed verdicts 0.04, 0.14, 0.08, 0.10, 0.12: mean 0.096, the 5% gate
    holds) the null-calibrated gate fails when the null changes as many verdicts, and when it changes R6's
    noise numbers (0.08, 0.02, 0.06, 0.10, 0.10); it holds only when DPSDP beats its null on every replicate."""
    from rayml.results import evaluate_claims

    main = [0.04, 0.14, 0.08, 0.10, 0.12]  # docs/records/dpsdp.json at 6c1124f, dpsdp's id maj_flipped per seed

    def run(null):
        rec = _moved_record()
        _set_flips(rec, "dpsdp", main, null)
        out = evaluate_claims(rec, E.CLAIMS)
        by_text = {c["text"]: c for c in out}
        return by_text[E.GATE_MOVES.text]["holds"], by_text[E.GATE_NULL.text], [
            c["status"] for c in out if c["kind"] == "paper"]

    for null in (main, [0.08, 0.02, 0.06, 0.10, 0.10]):  # the null equals DPSDP; R6's weight-noise null
        moves, gate, paper = run(null)
        assert moves is True  # the old gate passes on these numbers
        assert gate["holds"] is False and paper == ["incomplete"] * 5
    moves, gate, paper = run([0.0, 0.02, 0.0, 0.04, 0.02])  # a null below DPSDP on every replicate
    assert gate["holds"] is True and gate["pairs"]["wins"] == 5 and paper == ["holds"] * 5
    # the ablations also need the single agent to beat its own null
    rec = _moved_record()
    _set_flips(rec, "single_agent", [0.2] * 5, [0.2] * 5)
    assert [c["status"] for c in evaluate_claims(rec, E.CLAIMS) if c["kind"] == "paper"] == \
        ["holds"] * 3 + ["incomplete", "holds"]


def test_the_noise_null_matches_the_update_norm_tensor_by_tensor():
    import copy

    from rayml.alignment import dpsdp_pipeline as D

    cfg = ModelConfig(vocab_size=20, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=32)
    ref = TransformerLM(cfg)
    ref.reset_parameters(torch.Generator().manual_seed(0))
    ref.eval()
    trained = copy.deepcopy(ref)
    with torch.no_grad():  # an "update" of two tensors only
        trained.layers[0].mlp.up_proj.weight.add_(0.3)
        trained.layers[1].self_attn.q_proj.weight.mul_(1.5)
    null, norms = D.matched_noise(trained, ref, seed=5)
    r, t, n = (dict(m.named_parameters()) for m in (ref, trained, null))
    moved = 0
    for k in r:
        d_t, d_n = float(torch.linalg.norm(t[k] - r[k])), float(torch.linalg.norm(n[k] - r[k]))
        assert d_n == pytest.approx(d_t, rel=1e-5, abs=1e-7) and norms[k] == pytest.approx(d_t, rel=1e-6)
        if d_t > 0:
            moved += 1  # a random direction, not the update's
            cos = float(torch.sum((t[k] - r[k]) * (n[k] - r[k]))) / (d_t * d_n)
            assert abs(cos) < 0.5
    assert moved == 2
    again, _ = D.matched_noise(trained, ref, seed=5)  # deterministic in the seed, another seed another direction
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), null.parameters()))
    other, _ = D.matched_noise(trained, ref, seed=6)
    assert not torch.equal(dict(other.named_parameters())["layers.0.mlp.up_proj.weight"],
                           n["layers.0.mlp.up_proj.weight"])
    assert D.matched_noise(ref, ref, seed=5)[0] is ref  # an untrained role stays the reference
    # LoRA: a random rank-r update with the trained adapter's norm, on the shared frozen weights
    lt = E.lora_view(ref, 2, 3)
    with torch.no_grad():
        lt.layers[0].self_attn.q_proj.lora_B.add_(0.5)
    ln, lnorms = D.matched_noise(lt, ref, seed=1, rank=2)
    for name, m in ln.named_modules():
        if isinstance(m, dpo.LoRALinear):
            src = dict(lt.named_modules())[name]
            want = float(torch.linalg.norm(src.scale * src.lora_B @ src.lora_A))
            assert float(torch.linalg.norm(m.scale * m.lora_B @ m.lora_A)) == pytest.approx(want, rel=1e-5, abs=1e-7)
            assert m.base.weight is dict(ref.named_modules())[name].weight
    assert sum(v > 0 for v in lnorms.values()) == 1


def test_a_dpo_that_does_not_move_the_policy_makes_the_paper_claims_incomplete():
    """Session 8: at the tuned beta 8 DPO barely moved the systems; a claim on a system that changes fewer
    majority-vote answers than the paper's gain (5 points) is incomplete, with the gate's number."""
    from rayml.results import evaluate_claims

    def status(rec):
        return [c["status"] for c in evaluate_claims(rec, E.CLAIMS) if c["kind"] == "paper"]

    rec = _moved_record()
    assert status(rec) == ["holds"] * 5
    rec["metrics"]["id"]["maj_flipped"] = 0.04  # DPSDP flips 4% of the verdicts: every claim
    assert status(rec) == ["incomplete"] * 5
    gate = [c for c in evaluate_claims(rec, E.CLAIMS) if c["text"] == E.GATE_MOVES.text][0]
    assert gate["holds"] is False and "0.04" in gate["measured"]
    rec = _moved_record()
    rec["baselines"]["single_agent"]["id"]["maj_flipped"] = 0.0  # an unmoved single agent: its ablation only
    assert status(rec) == ["holds"] * 3 + ["incomplete", "holds"]
    rec["baselines"]["single_agent_eq"]["id"]["maj_flipped"] = 0.01
    assert status(rec) == ["holds"] * 3 + ["incomplete"] * 2


def test_changes_against_the_reference_are_counted_per_replicate_and_question():
    def row(system, phase, answers, right=(1, 0, 0, 1)):
        return {"system": system, "phase": phase, "id": {"answers": answers, "per_item_maj": list(right)},
                "ood": {"answers": answers[:1], "per_item_maj": list(right[:1])}}

    sft = [["1", "1", "1"], ["2", "3", "3"], ["4", "4", "5"], ["7", "7", "7"]]
    dps = [["1", "1", "1"], ["2", "3", "2"], ["4", "5", "5"], ["7", "8", "8"]]
    out = E.changed_vs_reference([row("sft", 0, sft), row("dpsdp", 0, dps, (1, 1, 0, 0)), row("dpsdp", 1, dps),
                                  row("sft", 1, dps)])
    assert out[0]["id"]["maj_changed"] == 0.0 and out[0]["id"]["answers_changed"] == 0.0
    # majority votes: sft 1, 3, 4, 7; dpsdp 1, 2, 5, 8 -> 3 of 4 differ; answers differ on 3 of 4 questions
    assert out[1]["id"]["maj_changed"] == 0.75 and out[1]["id"]["answers_changed"] == 0.75
    # verdicts: sft right on 1 and 4, dpsdp on 1 and 2 -> 2 of 4 flipped (the 3rd: one wrong answer for another)
    assert out[1]["id"]["maj_flipped"] == 0.5 and out[0]["id"]["maj_flipped"] == 0.0
    # the flips split by direction (session 10, R3): question 2 fixed (helped), question 4 broken (hurt)
    assert out[1]["id"]["maj_helped"] == 0.25 and out[1]["id"]["maj_hurt"] == 0.25
    assert out[0]["id"]["maj_helped"] == 0.0 and out[0]["id"]["maj_hurt"] == 0.0
    worse = E.changed_vs_reference([row("sft", 0, sft), row("dpsdp", 0, dps, (0, 0, 0, 1))])[1]["id"]
    assert (worse["maj_helped"], worse["maj_hurt"], worse["maj_flipped"]) == (0.0, 0.25, 0.25)
    assert out[1]["ood"]["maj_changed"] == 0.0
    assert out[2]["id"]["maj_changed"] == 0.0 and out[2]["id"]["maj_flipped"] == 0.0  # replicate 1: compared with replicate 1's reference, the same answers
    with pytest.raises(ValueError, match="answered"):
        E.changed_vs_reference([row("sft", 0, sft), row("dpsdp", 0, dps[:2])])
