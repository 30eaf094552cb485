"""rayml.agents.design_dsl*: the CAD kernel, the suite, the automated domain specification, the
interface's compiler, the slot-level models (the retrieval parser, the slot-scoring chooser) and the
language-model pipelines (grammars, worked examples, the uniform stand-in; SmolLM2 itself runs in
the experiment's @model=smollm2-135m record)."""

import math

import numpy as np
import pytest

from rayml.agents import design_dsl as dd
from rayml.agents import design_dsl_domains as dom
from rayml.agents import design_dsl_kernel as k
from rayml.agents import design_dsl_models as dm


@pytest.fixture(scope="module")
def specs():
    return {d: dd.derive_spec(dom.corpus(d, 20, 300, 11)) for d in dom.DOMAINS}


# --- kernel -------------------------------------------------------------------------------------

@pytest.mark.parametrize("part", [k.Part("b", "box", {"w": 3.0, "d": 2.0, "h": 5.0}, 0.3, -1.0, 2.0),
                                  k.Part("c", "cyl", {"r": 1.7, "h": 4.0}, 1.0, 0.0, 0.0)])
def test_voxel_volume_matches_closed_form(part):
    assert k.volume((part,), res=96) == pytest.approx(k.analytic_volume(part), rel=0.03)


def test_thin_parts_are_resolved_by_the_adaptive_grid():
    board = k.Part("b", "box", {"w": 90.0, "d": 30.0, "h": 2.2}, 0, 0, 150)
    side = k.Part("s", "box", {"w": 2.2, "d": 30.0, "h": 190.0}, -44, 0, 95)
    assert k.volume((board, side)) == pytest.approx(90 * 30 * 2.2 + 2.2 * 30 * 190 - 2.2 * 30 * 2.2 * 0, rel=0.08)
    assert k.volume((board,)) == pytest.approx(k.analytic_volume(board), rel=0.02)


def test_boolean_subtract_and_union_volumes():
    box = k.Part("b", "box", {"w": 10.0, "d": 10.0, "h": 2.0})
    hole = k.Part("h", "cyl", {"r": 2.0, "h": 4.0}, role="cut")
    other = k.Part("o", "box", {"w": 10.0, "d": 10.0, "h": 2.0}, 20.0, 0.0, 0.0)
    assert k.volume((box, hole), res=96) == pytest.approx(200 - math.pi * 8, rel=0.03)
    assert k.volume((box, other), res=96) == pytest.approx(400, rel=0.03)
    assert k.hole_count((box, hole)) == 1
    assert k.hole_count((box, k.Part("h", "cyl", {"r": 1.0, "h": 1.0}, 50, 0, 0, "cut"))) == 0


def test_commands_parse_apply_and_reject():
    m = (k.Part("top", "box", {"w": 4.0, "d": 2.0, "h": 1.0}, 1.0),)
    m2 = k.apply_command(m, "SET top.w = 6")
    assert m2[0].params["w"] == 6.0 and m[0].params["w"] == 4.0
    m3 = k.apply_command(m2, "ADD cut cyl hole_1 r=0.5 h=2 AT 1 0 0")
    assert k.hole_count(m3) == 1
    m4 = k.apply_command(m3, "MIRROR top top_m X")
    assert m4[-1].x == -1.0
    assert k.mirror_symmetry(m4[:1] + m4[-1:]) == pytest.approx(1.0)
    assert k.mirror_symmetry(m) < 0.9
    assert k.apply_command(m4, "DELETE top_m") == m3
    for bad in ("SET nope.w = 1", "SET top.r = 1", "SET top.w = -1", "FLY top", "ADD add box top w=1 d=1 h=1 AT 0 0 0"):
        with pytest.raises(k.CommandError):
            k.apply_command(m, bad)
    out, failed = k.apply_program(m, ["SET top.w = 5", "SET top.q = 1"])
    assert failed == 1 and out[0].params["w"] == 5.0
    assert k.parse_command(k.format_part(m3[1]))[0] == "ADD"


def test_part_rejects_bad_input():
    with pytest.raises(ValueError, match="kind"):
        k.Part("a", "cone", {"r": 1.0, "h": 1.0})
    with pytest.raises(ValueError, match="params"):
        k.Part("a", "box", {"r": 1.0})
    with pytest.raises(ValueError, match="> 0"):
        k.Part("a", "cyl", {"r": 0.0, "h": 1.0})
    with pytest.raises(ValueError, match="res"):
        k.voxelize((k.Part("a", "cyl", {"r": 1.0, "h": 1.0}),), np.array([[0, 0, 0], [1, 1, 1]]), res=1)


# --- suite and specification --------------------------------------------------------------------

def test_suite_is_reproducible_and_targets_change_the_model():
    a = dom.instruction_suite(2, 5)
    b = dom.instruction_suite(2, 5)
    assert [i.text for i in a] == [i.text for i in b]
    assert [i.text for i in dom.instruction_suite(2, 6)] != [i.text for i in a]
    assert {i.kind for i in a} == set(dom.KINDS_OF_INSTRUCTION)
    for ins in a:
        before = dom.DOMAINS[ins.domain].build(ins.params)
        target = dom.target_model(ins)
        assert k.model_params(before) != k.model_params(target) or k.hole_count(target) == 1
    with pytest.raises(ValueError, match="domains"):
        dom.instruction_suite(1, 0, domains=["boat"])
    with pytest.raises(ValueError, match="kinds"):
        dom.instruction_suite(1, 0, kinds=["rotate"])
    with pytest.raises(ValueError, match="n_per_cell"):
        dom.instruction_suite(0, 0)


def test_derived_spec_recovers_dependencies_and_conventions(specs):
    for d, spec in specs.items():
        assert len(spec.basis) == len(dom.DOMAINS[d].attrs)
        assert all(abs(spec.degree.get(w, -1) - m) < 1e-9 for w, m in dom.DEGREES.items() if " " not in w)
        # the affine dependency model reproduces every variant exactly
        for v in dom.corpus(d, 5, 0, 99)["variants"]:
            vals = k.model_params(v)
            basis = np.array([1.0] + [vals[spec.quantities[b][0]] for b in spec.basis])
            np.testing.assert_allclose(basis @ spec.coef, [vals[c] for c in spec.columns], atol=1e-6)
    table = specs["table"]
    legs = next(q for q, cols in table.quantities.items() if q.endswith(".r"))
    assert len(table.quantities[legs]) == 4          # the four leg radii are one quantity
    assert table.hole_factor == pytest.approx(0.5)   # holes are given by diameter
    assert table.direction["thinner"] < 0 < table.direction["thicker"]
    with pytest.raises(ValueError, match="variants"):
        dd.derive_spec({"variants": [], "edits": []})


def test_compiler_propagates_and_oracle_solves_every_instruction(specs):
    ins = dom.instruction_suite(3, 21)
    for i in ins:
        r = dm.run_episode(None, "oracle", i, specs[i.domain], 6)
        assert r["success"] == 1.0 and r["precise"] == 1.0 and r["iou"] == pytest.approx(1.0), i.text
    # leg height: four legs and the tabletop's elevation change together
    table = dom.DOMAINS["table"].build({"length": 120, "width": 70, "top_t": 4, "leg_h": 70, "leg_r": 3})
    q = next(q for q, cols in specs["table"].quantities.items() if cols[0].startswith("leg") and q.endswith(".h"))
    cmds = dd.compile_statements(specs["table"], table, [("ADJUST", q, "BY +10%")])
    assert sorted(c.split()[1] for c in cmds) == ["leg_bl.h", "leg_bl.z", "leg_br.h", "leg_br.z", "leg_fl.h",
                                                 "leg_fl.z", "leg_fr.h", "leg_fr.z", "top.z"]
    out, _ = k.apply_program(table, cmds)
    assert k.bbox(out)[1, 2] == pytest.approx(77 + 4)
    # the generic interface changes one parameter only
    gen = dd.generic_spec(table)
    assert dd.compile_statements(gen, table, [("ADJUST", "leg_fl.h", "TO 77")]) == ["SET leg_fl.h = 77"]
    assert dd.compile_statements(gen, table, [("ADJUST", "nope", "TO 1"), ("ADJUST", "top.w", "+bogus")]) == []


def _leg_height_edit():
    ins = dom.Instruction("u", "table", "absolute", "Set the height of the legs to 77.",
                          {"length": 120, "width": 70, "top_t": 4, "leg_h": 70, "leg_r": 3},
                          {"attr": "leg_h", "value": 77.0})
    return ins, dom.DOMAINS["table"].build(ins.params), dom.target_model(ins)


def test_evaluate_scores_partial_edits():
    ins, before, target = _leg_height_edit()
    one_leg, _ = k.apply_program(before, ["SET leg_fl.h = 77"])
    s = dd.evaluate(one_leg, target, before, ins.intent)
    assert s["success"] == 0.0 and 0 < s["param_error"] < 0.1 and s["iou"] < 1
    s = dd.evaluate(target, target, before, ins.intent)
    assert s["success"] == s["precise"] == s["holes_ok"] == s["symmetry_ok"] == 1.0


def test_collateral_edits_count_the_parameters_left_alone_that_changed():
    ins, before, target = _leg_height_edit()
    assert dd.collateral(target, target, before) == 0.0 == dd.evaluate(target, target, before, ins.intent,
                                                                        geometry=False)["collateral"]
    fixed = [c for c, v in k.model_params(before).items() if abs(v - k.model_params(target)[c]) < 1e-9]
    stray, _ = k.apply_program(target, ["SET top.w = 90"])  # the width was not asked for
    assert dd.collateral(stray, target, before) == pytest.approx(1 / len(fixed))
    assert dd.evaluate(stray, target, before, ins.intent)["collateral"] == pytest.approx(1 / len(fixed))


def test_corpus_is_phrased_in_frames_held_out_from_the_test_instructions():
    import re

    frames = [t for ts in (dom._ABS, dom._PCT, dom._DEG, dom._HOLE) for t in ts]
    patterns = [re.compile("^" + re.sub(r"\\\{[A-Za-z]+\\\}", ".+", re.escape(t)) + "$") for t in frames]
    assert all(any(p.match(i.text) for p in patterns) for i in dom.instruction_suite(1, 3))
    edits = dom.corpus("table", 4, 40, 5)["edits"]
    assert edits and not any(p.match(e["text"]) for e in edits for p in patterns)
    with pytest.raises(ValueError, match="phrasing"):
        dom.instruction_suite(1, 0, phrasing="paraphrase")


# --- models --------------------------------------------------------------------------------------

def test_retrieval_parser_is_deterministic_and_uses_the_specification(specs):
    suite = dom.instruction_suite(2, 31)
    res = {p: [dm.run_episode(dm.RetrievalChooser(1), p, i, specs[i.domain], 6) for i in suite] for p in dm.PIPELINES}
    again = [dm.run_episode(dm.RetrievalChooser(1), "interface_ads", i, specs[i.domain], 6) for i in suite]
    assert [r["statements"] for r in again] == [r["statements"] for r in res["interface_ads"]]
    ads = np.mean([r["success"] for r in res["interface_ads"]])
    assert ads > np.mean([r["success"] for r in res["direct"]])
    assert ads > np.mean([r["success"] for r in res["interface_generic"]])
    assert all(len(r["statements"]) <= 6 for rs in res.values() for r in rs)


def test_budget_caps_statements(specs):
    ins = next(i for i in dom.instruction_suite(1, 3, domains=["table"], kinds=["absolute"]))
    r = dm.run_episode(dm.RetrievalChooser(1), "direct", ins, specs["table"], 1)
    assert len(r["statements"]) <= 1
    with pytest.raises(ValueError, match="pipeline"):
        dm.run_episode(dm.RetrievalChooser(1), "telepathy", ins, specs["table"], 1)


class _FakeTok:
    eos_id = 0

    def chat(self, user, system=None):
        return (system or "") + user

    def encode(self, text, bos=False):
        return ([1] if bos else []) + [2 + (ord(c) % 50) for c in text]


class _ScriptedLM:
    """A stand-in with the EmbeddedLM interface whose logits favour one token id."""

    tokenizer = _FakeTok()

    def __init__(self, favourite):
        self.fav = favourite

    def logits(self, batch):
        import torch

        out = torch.zeros(len(batch), len(batch[0]), 64)
        out[:, :, self.fav] = 5.0
        return out


def test_smollm_chooser_scores_options_by_likelihood():
    # options made of the favoured character win; alpha normalises by length
    fav = 2 + (ord("a") % 50)
    ch = dm.SmolLMChooser(_ScriptedLM(fav), knob=1.0)
    ch.reset({"text": "t", "language": "x", "reference": "r", "model": "m"})
    state = {"lines": [], "partial": ""}
    assert ch.choose("op", ["bbb", "aaa", "b"], state) == "aaa"
    ch0 = dm.SmolLMChooser(_ScriptedLM(fav), knob=0.0)
    ch0.reset({"text": "t", "language": "x", "reference": "r", "model": "m"})
    assert ch0.choose("op", ["aaaa", "a", "b"], state) in ("a", "aaaa")
    assert ch.calls == 1 and ch.scored == 3


def test_cached_option_scoring_matches_a_plain_forward():
    # the shipped embedded model stands in for SmolLM2 (same TransformerLM engine and KV cache)
    import rayml.llm

    ch = dm.SmolLMChooser(rayml.llm.pretrained("base"), knob=1.0)
    ch.reset({"text": "Make the legs 20% thicker.", "language": "x", "reference": "ref", "model": "m"})
    for state, options in (({"lines": ["SET top.w = 3"], "partial": "SET"}, ["top.w", "leg_fl.r", "END", "a b c"]),
                           ({"lines": ["SET top.w = 3"], "partial": "SET top.w ="}, ["3", "4.5", "12"])):
        pre, opts = ch._prefix_ids(state), ch._option_ids(state, options)
        np.testing.assert_allclose(ch._scores_cached(pre, opts), ch._scores_plain(pre, opts), rtol=1e-4, atol=1e-3)


# --- the language-model pipelines (design_dsl_lm) ------------------------------------------------

def _matches(grammar_text: str, text: str) -> bool:
    from rayml.decoding import GrammarMatcher, byte_vocabulary, compile_ebnf

    m = GrammarMatcher(compile_ebnf(grammar_text, byte_vocabulary()))
    return m.accept_bytes(text.encode()) and m.can_terminate()


def test_worked_examples_are_exact_and_in_their_grammar(specs):
    """Every pipeline's example program reproduces its instruction's target model exactly, and the
    pipeline's grammar accepts it (so the model is shown programs it can write)."""
    from rayml.agents import design_dsl_lm as dl

    for ins in dom.instruction_suite(2, 21):
        before = dom.DOMAINS[ins.domain].build(ins.params)
        for pipe in dm.PIPELINES:
            sp = dd.generic_spec(before) if pipe == "interface_generic" else specs[ins.domain]
            lines = dl.example_program(pipe, sp, ins)
            text = "\n".join(lines + ["END"])
            assert _matches(dl.program_grammar(pipe, sp, before, 12), text), (pipe, text)
            prog = dl.parse_program(pipe, text)
            result = k.apply_program(before, prog)[0] if pipe == "direct" else dd.apply_statements(sp, before, prog)[0]
            assert dd.evaluate(result, dom.target_model(ins), before, ins.intent, geometry=False)["success"] == 1.0
        if ins.kind in ("percent", "degree"):  # the derived interface keeps the designer's value form
            form = dl.example_program("interface_ads", specs[ins.domain], ins)[0]
            assert ("%" in form) if ins.kind == "percent" else (form.split()[-1][0] in "+-")


def test_program_grammar_rejects_what_the_language_cannot_say(specs):
    from rayml.agents import design_dsl_lm as dl

    ins = dom.instruction_suite(1, 3, domains=["table"])[0]
    before = dom.DOMAINS["table"].build(ins.params)
    ads = dl.program_grammar("interface_ads", specs["table"], before, 2)
    assert _matches(ads, "ADJUST top.w BY +20%\nEND")
    assert not _matches(ads, "SET top.w = 3\nEND")               # a modelling command
    assert not _matches(ads, "ADJUST top.w +hugely\nEND")         # not a derived degree word
    assert not _matches(ads, "ADJUST top.w TO 1\n" * 3 + "END")   # over the line budget
    direct = dl.program_grammar("direct", None, before, 3)
    assert _matches(direct, "SET leg_fl.h = 70.5\nSET top.z = -3\nEND")
    assert not _matches(direct, "SET leg_xx.h = 70\nEND")          # not a part of the model


def test_parse_program_drops_a_line_cut_by_the_token_budget():
    from rayml.agents import design_dsl_lm as dl

    assert dl.parse_program("interface_ads", "ADJUST a TO 3\nADJUST b BY +5%\nEND") == [
        ("ADJUST", "a", "TO 3"), ("ADJUST", "b", "BY +5%")]
    assert dl.parse_program("direct", "SET a.w = 3\nSET b.w = 4") == ["SET a.w = 3"]


def test_uniform_generator_episodes_are_reproducible(specs):
    from rayml.agents import design_dsl_lm as dl

    ins = dom.instruction_suite(1, 4, domains=["shelf"])
    runs = [[dl.lm_episode(dl.UniformGenerator(7), p, x, specs["shelf"], [], 12, 160)["text"]
             for x in ins for p in dm.PIPELINES] for _ in range(2)]
    assert runs[0] == runs[1]
    with pytest.raises(ValueError, match="pipeline"):
        dl.lm_episode(dl.UniformGenerator(0), "oracle", ins[0], specs["shelf"], [], 12, 160)
