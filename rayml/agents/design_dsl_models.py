"""The language models that drive the design interface, and one episode of targeted control.

Three pipelines turn a designer's instruction into a changed prototype, all decoded by the same
*model* with the same budget (at most ``max_statements`` statements, each a fixed sequence of
slots, every slot a choice among the options the grammar allows there):

* ``direct``: the model writes modelling commands (``SET part.param = number``, ``ADD cut cyl``);
  numbers are chosen among candidates derived from the instruction's numbers, the current values
  and generic relative changes (the grammar of a number literal restricted to plausible values);
* ``interface_generic``: the model writes DSL statements over the generic specification;
* ``interface_ads``: the model writes DSL statements over the automated domain specification.

Models (``chooser``):

* ``SmolLMChooser``: SmolLM2-135M-Instruct (``rayml.llm.pretrained("smollm2-135m")``), prompted
  through its chat template with the language reference, the current model and the instruction;
  at each slot it takes the option with the highest (length-normalised) log-likelihood as a
  continuation, i.e. greedy decoding constrained to the grammar at slot granularity (assumed:
  slot-level rather than token-level constraint; every option is scored in one padded batch).
* ``RetrievalChooser``: a deterministic retrieval / template parser: lexical scores of targets
  from the specification's lexicon, values from the instruction's numbers, percentages, degree
  and direction words. It needs no weights, so the comparison also runs in the tests.

The tuning knob of each model (``alpha``, the length normalisation of the language model; ``multi``,
whether the parser keeps emitting statements for targets tied with its first one) is chosen per
pipeline on tuning instructions drawn from seeds kept apart from the test instructions.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from rayml.agents import design_dsl as dd
from rayml.agents.design_dsl_domains import DOMAINS, Instruction, target_model
from rayml.agents.design_dsl_kernel import PLACEMENT, apply_program, format_part, model_params

__all__ = ["PIPELINES", "MODELS", "RetrievalChooser", "SmolLMChooser", "direct_statements", "interface_statements",
           "run_episode", "oracle_statements", "KNOB_GRID"]

PIPELINES = ("direct", "interface_generic", "interface_ads")
MODELS = ("retrieval", "smollm2")
KNOB_GRID = {"retrieval": (0, 1), "smollm2": (0, 1)}
GENERIC_FACTORS = (0.05, 0.1, 0.2, 0.3, 0.5)


def _n(v: float) -> str:
    return f"{v:.4g}"


class RetrievalChooser:
    """The deterministic parser (see the module docstring); ``knob`` is ``multi`` (0 or 1)."""

    name = "retrieval"

    def __init__(self, knob: int = 1):
        self.multi = bool(knob)
        self.calls = 0

    def reset(self, context: Mapping):
        self.ctx = context
        self.first_score = None

    def _intended(self, old: float, spec) -> float | None:
        text = self.ctx["text"]
        low = text.lower()
        nums = dd.numbers(text)
        sign = 1.0 if sum(spec.direction.get(w, 0.0) for w in dd._grams(text)) >= 0 else -1.0
        if nums and ("%" in text or "percent" in low):
            return old * (1 + sign * nums[0] / 100)
        for w, mag in sorted(spec.degree.items(), key=lambda kv: -len(kv[0])):
            if f" {w} " in f" {' '.join(dd.tokens(low))} ":
                return old * (1 + sign * mag)
        return nums[0] if nums else None

    def choose(self, slot: str, options: Sequence[str], state: Mapping) -> str:
        self.calls += 1
        spec = state["score_spec"]
        text = self.ctx["text"]
        if slot == "op":
            hole = any(w in dd.tokens(text) for w in dd.HOLE_WORDS)
            if not state["done"]:
                return next(o for o in options if o in (("HOLE", "ADD") if hole else ("ADJUST", "SET")))
            if hole or not self.multi:
                return "END"
            scores = dd.label_scores(spec, text)
            rest = [scores.get(t, -1e9) for t in state["targets"] if t not in state["used"]]
            cont = rest and max(rest) >= self.first_score - 1e-9 and self.first_score > 0
            return state["done_op"] if cont else "END"
        if slot == "target":
            scores = dd.label_scores(spec, text)
            key = (lambda t: scores.get(f"HOLE:{t}", -1e9)) if state["op"] in ("HOLE", "ADD") else \
                (lambda t: scores.get(t, -1e9))
            pool = [o for o in options if o not in state["used"]] or list(options)
            best = max(pool, key=key)
            if self.first_score is None:
                self.first_score = key(best)
            return best
        # value slot
        if state["op"] in ("HOLE", "ADD"):
            nums = dd.numbers(text)
            if not nums:
                return options[0]
            radius = nums[0] / 2 if any(w in dd.tokens(text) for w in ("diameter", "wide")) else nums[0]
            factor = state.get("hole_factor") or 1.0
            want = radius / factor
            return min(options, key=lambda o: abs(float(o.replace("r=", "")) - want))
        old = state["old"]
        if state["pipeline"] != "direct":
            low = text.lower()
            nums = dd.numbers(text)
            sign = "+" if sum(spec.direction.get(w, 0.0) for w in dd._grams(text)) >= 0 else "-"
            if nums and ("%" in text or "percent" in low) and f"BY {sign}{_n(nums[0])}%" in options:
                return f"BY {sign}{_n(nums[0])}%"
            for o in sorted(options, key=len, reverse=True):
                if o[0] in "+-" and o[0] == sign and f" {o[1:]} " in f" {' '.join(dd.tokens(low))} ":
                    return o
            if nums and f"TO {_n(nums[0])}" in options:
                return f"TO {_n(nums[0])}"
            return options[0]
        want = self._intended(old, spec)
        if want is None:
            return options[0]
        return min(options, key=lambda o: abs(float(o) - want))


class SmolLMChooser:
    """SmolLM2-135M as the slot decoder (see the module docstring); ``knob`` is ``alpha``."""

    name = "smollm2"

    def __init__(self, lm, knob: float = 1.0, max_prompt_tokens: int = 1400):
        self.lm = lm
        self.alpha = float(knob)
        self.max_prompt = int(max_prompt_tokens)
        self.calls = 0
        self.scored = 0

    def reset(self, context: Mapping):
        system = ("You translate a product designer's instruction into " + context["language"] +
                  " statements, one per line, and write END when the instruction is carried out.")
        user = f"{context['reference']}\n\nCurrent model:\n{context['model']}\n\nInstruction: {context['text']}"
        chat = getattr(self.lm.tokenizer, "chat", None)
        self.prompt = (chat(user, system=system) if chat else f"{system}\n{user}\n") + "Statements:\n"
        self._prompt_ids = self.lm.tokenizer.encode(self.prompt, bos=True)[-self.max_prompt:]
        self._cache = None

    def _option_ids(self, state, options):
        tok = self.lm.tokenizer
        sep = " " if state["partial"] else ""
        return [tok.encode(sep + o) for o in options]

    def _prefix_ids(self, state) -> list[int]:
        tail = "".join(line + "\n" for line in state["lines"]) + state["partial"]
        return self._prompt_ids + (self.lm.tokenizer.encode(tail) if tail else [])

    def _scores_plain(self, pre, opts) -> list[float]:
        """Log-likelihoods of the options after ``pre``, one padded batch, no cache."""
        import torch

        width = len(pre) + max(len(o) for o in opts)
        batch = [pre + o + [0] * (width - len(pre) - len(o)) for o in opts]
        with torch.no_grad():
            logp = self.lm.logits(batch).float().log_softmax(-1)
        return [float(logp[i, torch.arange(len(pre) - 1, len(pre) - 1 + len(o)), torch.as_tensor(o)].sum())
                for i, o in enumerate(opts)]

    def _scores_cached(self, pre, opts) -> list[float]:
        """The same with the prefix in a KV cache (fed incrementally across the episode's slots)."""
        import torch

        model = self.lm.model
        with torch.no_grad():
            if self._cache is None or self._fed != pre[:len(self._fed)]:
                self._cache = model.new_cache(batch=1, capacity=len(pre) + 512)
                self._fed, self._last = [], None
            new = pre[len(self._fed):]
            if new:
                self._cache.ensure_capacity(len(pre) + 64)
                self._last = model(torch.as_tensor([new]), cache=self._cache)[0, -1].float().log_softmax(-1)
                self._fed = list(pre)
            out = []
            for i in range(0, len(opts), 16):
                chunk = opts[i:i + 16]
                width = max(len(o) for o in chunk)
                ids = torch.as_tensor([o + [0] * (width - len(o)) for o in chunk])
                valid = torch.as_tensor([[j < len(o) for j in range(width)] for o in chunk])
                cache = self._cache.select(torch.zeros(len(chunk), dtype=torch.long))
                cache.ensure_capacity(self._cache.length + width)
                logp = model(ids, cache=cache, valid=valid).float().log_softmax(-1)
                for b, o in enumerate(chunk):
                    s = float(self._last[o[0]])
                    s += sum(float(logp[b, j - 1, o[j]]) for j in range(1, len(o)))
                    out.append(s)
        return out

    def choose(self, slot: str, options: Sequence[str], state: Mapping) -> str:
        if len(options) == 1:
            return options[0]
        self.calls += 1
        self.scored += len(options)
        pre = self._prefix_ids(state)
        opts = self._option_ids(state, options)
        raw = self._scores_cached(pre, opts) if hasattr(self.lm, "model") else self._scores_plain(pre, opts)
        scores = [r / (len(o) ** self.alpha) for r, o in zip(raw, opts)]
        return options[max(range(len(options)), key=lambda i: (scores[i], -i))]


def _value_forms(spec, text: str) -> list[str]:
    nums = dd.numbers(text)
    forms = [f"TO {_n(v)}" for v in nums]
    forms += [f"BY {s}{_n(v)}%" for v in nums for s in "+-"]
    forms += [f"{s}{w}" for w in sorted(spec.degree) for s in "+-"]
    return forms or ["TO 1"]


def _hole_values(text: str) -> list[str]:
    nums = dd.numbers(text) or [1.0]
    out = []
    for v in nums:
        for x in (v, v / 2):
            if _n(x) not in out:
                out.append(_n(x))
    return out


def interface_statements(chooser, spec, model, ins: Instruction, max_statements: int) -> list[tuple]:
    """Decode DSL statements for ``ins`` with ``chooser`` over ``spec`` (at most ``max_statements``)."""
    chooser.reset({"text": ins.text, "language": "design-interface",
                   "reference": spec.prompt_reference(), "model": "\n".join(format_part(p) for p in model)})
    values = model_params(model)
    out: list[tuple] = []
    lines: list[str] = []
    used: set = set()
    done_op = None
    for _ in range(max_statements):
        ops = ["ADJUST"] + (["HOLE"] if spec.holeable else []) + (["END"] if out else [])
        state = {"score_spec": spec, "done": bool(out), "targets": list(spec.quantities), "used": used,
                 "done_op": done_op, "lines": lines, "partial": "", "pipeline": "interface",
                 "hole_factor": spec.hole_factor}
        op = chooser.choose("op", ops, state)
        if op == "END":
            break
        targets = list(spec.quantities) if op == "ADJUST" else list(spec.holeable)
        state.update(op=op, targets=targets, partial=op)
        target = chooser.choose("target", targets, state)
        opts = _value_forms(spec, ins.text) if op == "ADJUST" else _hole_values(ins.text)
        old = values.get(spec.quantities[target][0], 1.0) if op == "ADJUST" else 1.0
        state.update(partial=f"{op} {target}", old=old)
        value = chooser.choose("value", opts, state)
        out.append((op, target, value))
        lines.append(dd.format_statement(out[-1]))
        used.add(target)
        done_op = op
    return out


def _direct_values(old: float, text: str, deltas: Sequence[float]) -> list[str]:
    nums = dd.numbers(text)
    cands = list(nums)
    cands += [old * (1 + s * p / 100) for p in nums for s in (1, -1)]
    cands += [old * (1 + s * f) for f in GENERIC_FACTORS for s in (1, -1)]
    cands += [old + s * d * k for d in deltas for s in (1, -1) for k in (1, 0.5)]
    out = []
    for c in cands:
        t = _n(c)
        if t not in out:
            out.append(t)
    return out


def direct_statements(chooser, model, ins: Instruction, max_statements: int) -> list[str]:
    """Decode modelling commands for ``ins`` directly (at most ``max_statements``)."""
    generic = dd.generic_spec(model)
    ref = ("Commands: SET <part>.<param> = <number> | ADD cut cyl <id> r=<number> h=<number> AT <x> <y> <z> | END\n"
           "params: box w (x size) d (y size) h (z size); cyl r (radius) h (height); x y z = centre")
    chooser.reset({"text": ins.text, "language": "modelling-command", "reference": ref,
                   "model": "\n".join(format_part(p) for p in model)})
    values = model_params(model)
    parts = {p.id: p for p in model}
    keys = list(values)
    cmds: list[str] = []
    used: set = set()
    deltas: list = []
    done_op = None
    holes = sum(1 for p in model if p.role == "cut" and p.id.startswith("hole_"))
    for _ in range(max_statements):
        ops = ["SET", "ADD"] + (["END"] if cmds else [])
        state = {"score_spec": generic, "done": bool(cmds), "targets": keys, "used": used, "done_op": done_op,
                 "lines": cmds, "partial": "", "pipeline": "direct", "hole_factor": None}
        op = chooser.choose("op", ops, state)
        if op == "END":
            break
        if op == "SET":
            state.update(op=op, targets=keys, partial="SET")
            target = chooser.choose("target", keys, state)
            old = values[target]
            state.update(partial=f"SET {target} =", old=old)
            value = float(chooser.choose("value", _direct_values(old, ins.text, deltas), state))
            if target.split(".")[1] not in PLACEMENT and value <= 0:
                value = old
            cmds.append(f"SET {target} = {_n(value)}")
            deltas.append(abs(value - old))
            values[target] = value
        else:
            hosts = [p.id for p in model if p.role == "add"]
            state.update(op=op, targets=hosts, partial="ADD cut cyl")
            host = parts[chooser.choose("target", hosts, state)]
            holes += 1
            state.update(partial=f"ADD cut cyl hole_{holes}")
            r = chooser.choose("value", [f"r={v}" for v in _hole_values(ins.text)], state)
            cmds.append(f"ADD cut cyl hole_{holes} {r} h={_n(2 * host.params['h'])} AT {_n(host.x)} {_n(host.y)} "
                        f"{_n(host.z)}")
            target = host.id
        used.add(target)
        done_op = op
    return cmds


def oracle_statements(spec, ins: Instruction) -> list[tuple]:
    """The DSL statement that carries ``ins`` out exactly (the compiler's sanity reference)."""
    before = DOMAINS[ins.domain].build(ins.params)
    if "hole" in ins.intent:
        return [("HOLE", ins.intent["hole"], _n(ins.intent["diameter"] / 2 / (spec.hole_factor or 1.0)))]
    pt, pb = model_params(target_model(ins)), model_params(before)
    for q, cols in spec.quantities.items():
        if abs(pt[cols[0]] - ins.intent["value"]) < 1e-9 and abs(pb[cols[0]] - pt[cols[0]]) > 1e-9:
            return [("ADJUST", q, f"TO {ins.intent['value']:.10g}")]
    return []


def run_episode(chooser, pipeline: str, ins: Instruction, spec, max_statements: int) -> dict:
    """One episode: decode, compile (interface) or apply (direct), and score the checkable targets."""
    if pipeline not in PIPELINES + ("oracle",):
        raise ValueError(f"pipeline must be one of {PIPELINES + ('oracle',)}, got {pipeline!r}")
    before = DOMAINS[ins.domain].build(ins.params)
    if pipeline == "direct":
        cmds = direct_statements(chooser, before, ins, max_statements)
        statements = cmds
        result, failed = apply_program(before, cmds)
    else:
        sp = dd.generic_spec(before) if pipeline == "interface_generic" else spec
        statements = (oracle_statements(sp, ins) if pipeline == "oracle"
                      else interface_statements(chooser, sp, before, ins, max_statements))
        result, cmds, failed = dd.apply_statements(sp, before, statements)
        statements = [dd.format_statement(s) for s in statements]
    scores = dd.evaluate(result, target_model(ins), before, ins.intent)
    return {**scores, "statements": list(statements), "commands": len(cmds), "failed_commands": failed}
