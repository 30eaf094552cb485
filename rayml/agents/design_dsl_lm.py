"""Grammar-constrained generation of the design pipelines by one language model, with and without
the interface (the paper's comparison for Large Language Models).

"Targeted control of fast prototyping through domain-specific interface" (Shi et al., ICML 2025)
puts an interface between designers' language and modelling commands and shows it helps LLMs
control prototypes "precisely and effectively". Here one model writes, for each instruction, a
whole program in one of three languages, every pipeline with the same decoding aid and budget:

* ``direct``: modelling commands (``SET part.param = number``, ``ADD cut cyl hole_k r= h= AT x y z``);
* ``interface_generic``: interface statements (``ADJUST q TO v | BY +p% | +word``, ``HOLE part v``)
  over the generic geometry-level specification;
* ``interface_ads``: the same statements over the automated domain specification.

Decoding: greedy, token by token, constrained by the pipeline's grammar with rayml's ZapFormat
engine (``rayml.decoding``: an EBNF grammar of at most ``max_statements`` lines followed by
``END``, the part / quantity / degree-word names of the pipeline as alternatives, numbers as
``-?[0-9]{1,4}(.[0-9]{1,3})?``), so every program parses; at most ``max_new_tokens`` tokens (a
program cut there keeps its complete lines). Prompt (the model's chat template): the language
reference of the pipeline in the system message, ``shots`` worked examples as earlier chat turns
(instructions of the same domain drawn from seeds apart from the test and tuning seeds, the same
instructions for every pipeline: the user turn gives the model and the instruction, the assistant
turn the exact program in that pipeline's language), then the current model and the instruction. The shared part of the prompt is prefilled once into a KV cache per (pipeline,
domain, shots). Assumed: this prompt, the example programs (``example_program``) and the number
syntax; the paper's prompts and LLMs are not public.

``UniformGenerator`` is the weights-free stand-in the experiment's default size runs in the
model's place: at every slot of the same programs (statement type, target, value form) a uniform
draw among the options the slot-level decoder offers (``design_dsl_models``), from a seed per
episode.
"""

from __future__ import annotations

import math
import random
from typing import Mapping, Sequence

from rayml.agents import design_dsl as dd
from rayml.agents.design_dsl_domains import DOMAINS, Instruction, target_model
from rayml.agents.design_dsl_kernel import PLACEMENT, apply_program, format_part, model_params

__all__ = ["program_grammar", "example_program", "parse_program", "build_prompt", "SmolLMGenerator",
           "UniformGenerator", "lm_episode"]

_NUM = '[0-9]{1,4} ("." [0-9]{1,3})?'
_SYSTEM = ("You translate a product designer's instruction into {language}. Write one line per {unit} and END "
           "on the last line. Copy the designer's numbers exactly as the language allows.")
_DIRECT_REF = ("Modelling commands: SET <part>.<param> = <number> | ADD cut cyl hole_<k> r=<radius> h=<height> AT "
               "<x> <y> <z> | END\nParameters: box w (x size), d (y size), h (z size); cyl r (radius), h (height); "
               "x y z = the part's centre. Every part that has to change needs its own SET.")


def _n(v: float) -> str:
    s = f"{v:.3f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _lit(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _alts(words) -> str:
    return "(" + " | ".join(_lit(w) for w in words) + ")"


def program_grammar(pipeline: str, spec, model, max_statements: int) -> str:
    """The EBNF grammar (``rayml.decoding`` format) of the programs of ``pipeline`` for ``model``:
    1..``max_statements`` lines, then ``END``."""
    if pipeline == "direct":
        keys = sorted(model_params(model))
        line = (f'"SET " {_alts(keys)} " = " snum | "ADD cut cyl hole_" [1-9] " r=" num " h=" num " AT " snum " " '
                f'snum " " snum')
    else:
        words = sorted(spec.degree)
        val = '"TO " snum | "BY " [+-] num "%"' + (f' | [+-] {_alts(words)}' if words else "")
        line = f'"ADJUST " {_alts(list(spec.quantities))} " " value'
        if spec.holeable:
            line += f' | "HOLE " {_alts(spec.holeable)} " " num'
    rules = [f'root ::= line ("\\n" line){{0,{max_statements - 1}}} "\\nEND"', f"line ::= {line}",
             f"num ::= {_NUM}", 'snum ::= "-"? num']
    if pipeline != "direct":
        rules.append(f"value ::= {val}")
    return "\n".join(rules)


def _value_form(spec, ins: Instruction, old: float, new: float) -> str:
    """The designer's value form of an attribute edit, as the interface over ``spec`` can say it."""
    nums = dd.numbers(ins.text)
    up = new > old
    if ins.kind == "percent" and nums and abs(abs(new / old - 1) - nums[0] / 100) < 1e-6:
        return f"BY {'+' if up else '-'}{_n(nums[0])}%"
    if ins.kind == "degree":
        text = f" {' '.join(dd.tokens(ins.text))} "
        words = [w for w, m in spec.degree.items() if f" {w} " in text and abs(m - abs(new / old - 1)) < 1e-6]
        if words:
            # a single word before a bigram ("little" rather than a spurious "be a"), then the longer
            return f"{'+' if up else '-'}{min(words, key=lambda w: (' ' in w, -len(w), w))}"
        return f"TO {_n(new)}"
    return f"TO {_n(new)}"


def example_program(pipeline: str, spec, ins: Instruction) -> list[str]:
    """The exact program of ``ins`` in ``pipeline``'s language (the worked examples of the prompt):
    ``direct``: a SET per changed parameter (or the ADD of the hole); the interface: one statement
    per changed quantity of ``spec``, in the designer's value form where the specification can say
    it exactly (``BY p%``, a degree word with the right magnitude), else ``TO``."""
    before = DOMAINS[ins.domain].build(ins.params)
    after = target_model(ins)
    pb, pa = model_params(before), model_params(after)
    if "hole" in ins.intent:
        hole = next(p for p in after if p.id.startswith("hole_") and p.id not in {q.id for q in before})
        if pipeline == "direct":
            return [f"ADD cut cyl {hole.id} r={_n(hole.params['r'])} h={_n(hole.params['h'])} AT {_n(hole.x)} "
                    f"{_n(hole.y)} {_n(hole.z)}"]
        factor = spec.hole_factor or 1.0
        return [f"HOLE {ins.intent['hole']} {_n(hole.params['r'] / factor)}"]
    changed = [k for k in pa if abs(pa[k] - pb[k]) > 1e-9]
    if pipeline == "direct":
        return [f"SET {k} = {_n(pa[k])}" for k in changed]
    out = []
    for q, cols in spec.quantities.items():
        c = cols[0]
        if c in changed:
            form = (_value_form(spec, ins, pb[c], pa[c]) if c.split(".")[1] not in PLACEMENT else f"TO {_n(pa[c])}")
            out.append(f"ADJUST {q} {form}")
    return out


def parse_program(pipeline: str, text: str) -> list:
    """The lines of a generated program before ``END``: command strings (``direct``) or statement
    tuples ``(op, target, value)`` (the interface); an incomplete last line is dropped."""
    lines = text.split("\n")
    if not text.rstrip().endswith("END"):
        lines = lines[:-1]  # cut by the token budget: the last line may be incomplete
    out = []
    for ln in lines:
        ln = ln.strip()
        if not ln or ln == "END":
            break
        if pipeline == "direct":
            out.append(ln)
        else:
            parts = ln.split(" ", 2)
            if len(parts) == 3:
                out.append(tuple(parts))
    return out


def _describe(model) -> str:
    return "\n".join(format_part(p) for p in model)


def build_prompt(pipeline: str, spec, examples: Sequence[Instruction]) -> list[dict]:
    """The shared chat messages of ``pipeline``: the system message (task and language reference)
    and each worked example as a user turn (model, instruction) answered by an assistant turn (its
    program); the current model and instruction follow as the last user turn (``_query``)."""
    if pipeline == "direct":
        system = _SYSTEM.format(language="modelling commands", unit="command") + "\n\n" + _DIRECT_REF
    else:
        system = (_SYSTEM.format(language="statements of the design interface", unit="statement") + "\n\n"
                  + spec.prompt_reference() + "\nADJUST changes a quantity and everything that depends on it.")
    messages = [{"role": "system", "content": system}]
    for ex in examples:
        before = DOMAINS[ex.domain].build(ex.params)
        messages += [{"role": "user", "content": _query(before, ex)},
                     {"role": "assistant", "content": "\n".join(example_program(pipeline, spec, ex) + ["END"])}]
    return messages


def _query(model, ins: Instruction) -> str:
    return f"Model:\n{_describe(model)}\nInstruction: {ins.text}"


class SmolLMGenerator:
    """Greedy grammar-constrained generation with an embedded LM (``rayml.llm.pretrained``), the
    shared prompt prefix held in a KV cache per key."""

    name = "smollm2-135m"

    def __init__(self, lm):
        from rayml.decoding.logits import GrammarCache, vocabulary_from_tokenizer

        self.lm = lm
        self.grammars = GrammarCache(vocabulary_from_tokenizer(lm.tokenizer), vocab_size=lm.model.config.vocab_size)
        self._prefix: dict = {}

    def _cached(self, key, messages):
        import torch

        hit = self._prefix.get(key)
        if hit is None:
            tok = self.lm.tokenizer
            a = tok.encode(tok.chat(messages + [{"role": "user", "content": "Model:\nX"}]), bos=True)
            b = tok.encode(tok.chat(messages + [{"role": "user", "content": "Model:\nY"}]), bos=True)
            n = next(i for i, (u, v) in enumerate(zip(a, b)) if u != v) - 2  # stay clear of a merge at the seam
            ids = a[:n]
            cache = self.lm.model.new_cache(batch=1, capacity=len(ids) + 512)
            with torch.no_grad():
                self.lm.model(torch.as_tensor([ids]), cache=cache)
            hit = self._prefix[key] = (ids, cache)
        return hit

    def generate(self, key, messages, query: str, grammar: str, max_new_tokens: int) -> str:
        import torch

        from rayml.decoding.logits import EmbeddedGrammarProcessor
        from rayml.llm.generation import generate

        tok = self.lm.tokenizer
        prefix, base = self._cached(key, messages)
        ids = tok.encode(tok.chat(messages + [{"role": "user", "content": query}]), bos=True)
        proc = EmbeddedGrammarProcessor([self.grammars.get({"type": "grammar", "grammar": grammar})])
        if ids[:len(prefix)] == prefix:
            cache = base.select(torch.zeros(1, dtype=torch.long))
            res = generate(self.lm.model, [ids[len(prefix):]], max_new_tokens=max_new_tokens, eos_id=tok.eos_id,
                           pad_id=tok.pad_id, logits_processors=[proc], cache=cache)
        else:  # the seam tokenised differently: no cache
            res = generate(self.lm.model, [ids], max_new_tokens=max_new_tokens, eos_id=tok.eos_id,
                           pad_id=tok.pad_id, logits_processors=[proc])
        return tok.decode(res.tokens[0])


class UniformGenerator:
    """Uniform draws at the slots of the same programs (``design_dsl_models``' slot decoder)."""

    name = "uniform"

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.calls = 0

    def reset(self, context: Mapping):
        pass

    def choose(self, slot: str, options: Sequence[str], state: Mapping) -> str:
        self.calls += 1
        return self.rng.choice(list(options))


def lm_episode(generator, pipeline: str, ins: Instruction, spec, examples: Sequence[Instruction],
               max_statements: int, max_new_tokens: int, key=None) -> dict:
    """One episode of ``pipeline`` decoded by ``generator`` (``SmolLMGenerator`` or
    ``UniformGenerator``): the program, the resulting model and the checkable targets."""
    from rayml.agents import design_dsl_models as dm

    if pipeline not in dm.PIPELINES:
        raise ValueError(f"pipeline must be one of {dm.PIPELINES}, got {pipeline!r}")
    before = DOMAINS[ins.domain].build(ins.params)
    sp = dd.generic_spec(before) if pipeline == "interface_generic" else spec
    if isinstance(generator, UniformGenerator):
        if pipeline == "direct":
            prog = dm.direct_statements(generator, before, ins, max_statements)
            text = "\n".join(prog + ["END"])
        else:
            prog = dm.interface_statements(generator, sp, before, ins, max_statements)
            text = "\n".join([dd.format_statement(st) for st in prog] + ["END"])
        return _score(pipeline, sp, before, ins, prog, text, 0)
    messages = build_prompt(pipeline, sp, examples)
    grammar = program_grammar(pipeline, sp, before, max_statements)
    text = generator.generate((pipeline, ins.domain, key, len(examples)), messages, _query(before, ins), grammar,
                              max_new_tokens)
    return _score(pipeline, sp, before, ins, parse_program(pipeline, text), text,
                  len(generator.lm.tokenizer.encode(text)))


def _score(pipeline, sp, before, ins, prog, text, tokens) -> dict:
    if pipeline == "direct":
        result, failed = apply_program(before, prog)
        n_cmds = len(prog)
    else:
        result, cmds, failed = dd.apply_statements(sp, before, prog)
        n_cmds = len(cmds)
    scores = dd.evaluate(result, target_model(ins), before, ins.intent, geometry=False)
    return {**scores, "text": text.replace("\n", " | "), "commands": n_cmds, "failed_commands": failed,
            "tokens": tokens}

