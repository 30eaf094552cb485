"""Grammar specs and their compilation: what a request asks for (``GrammarSpec``), the limits a
server sets (``GrammarLimits``), and ``build_grammar``, which turns a spec into a ``Grammar`` or
raises ``GrammarError`` (invalid: an HTTP 400) / ``GrammarTooComplex`` (over a limit: a 422).

Shared by the logits processors (``rayml.decoding.logits``) and the isolated compile worker
(``rayml.decoding.compile_worker``), which imports nothing else of the front-ends' callers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rayml.decoding.grammar import Grammar, parse_ebnf
from rayml.decoding.json_schema import json_grammar, schema_grammar
from rayml.decoding.regex import EngineSizeLimit, compile_regex

__all__ = ["GrammarError", "GrammarTooComplex", "GrammarCompileFailed", "GrammarCompileLimitExceeded", "GrammarLimits", "GrammarSpec", "normalize_spec", "build_grammar",
           "SPEC_KINDS", "canonical_schema"]

SPEC_KINDS = ("json_schema", "json_object", "regex", "grammar")


class GrammarError(ValueError):
    """The spec, schema, regex or grammar is invalid (an HTTP 400)."""


class GrammarTooComplex(ValueError):
    """The grammar is over a size / complexity / compile-time / memory limit (an HTTP 422)."""


class GrammarCompileFailed(GrammarTooComplex):
    """The compilation hit the time or memory limit, crashed its process, or the compiler was busy:
    a failure that depends on the load and the compiler's state, not on the grammar alone, so it is
    never cached (``GrammarCache``); the same request may succeed later."""


class GrammarCompileLimitExceeded(GrammarCompileFailed):
    """The compilation ran past the compile time limit, or raised ``MemoryError`` under the compile
    memory limit: the request is over a limit (an HTTP 422, as for the other limits: a retry of
    the same grammar cannot be expected to succeed). Still never cached, since how long a compile
    takes depends on the machine's load."""


@dataclass(frozen=True)
class GrammarLimits:
    """What a grammar may cost (all checked before or while compiling).

    Attributes:
        max_source_chars: length of the schema (as compact JSON), regex or EBNF text.
        max_rules: productions of the normalised grammar.
        max_dfa_states: states summed over the terminals' DFAs.
        compile_timeout_s: wall-clock limit of one compilation (enforced when compiling in a child
            process, ``GrammarCache(isolate=True)``).
        compile_memory_mb: address-space limit of the compiling child process.
    """

    max_source_chars: int = 32_768
    max_rules: int = 20_000
    max_dfa_states: int = 50_000
    compile_timeout_s: float = 10.0
    compile_memory_mb: int = 3072

    def __post_init__(self):
        for name in ("max_source_chars", "max_rules", "max_dfa_states", "compile_memory_mb"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not (isinstance(self.compile_timeout_s, (int, float)) and self.compile_timeout_s > 0):
            raise ValueError(f"compile_timeout_s must be a number > 0, got {self.compile_timeout_s!r}")


@dataclass(frozen=True)
class GrammarSpec:
    """A validated constraint: ``kind`` (one of ``SPEC_KINDS``) and ``source`` (the schema as
    compact canonical JSON, see ``canonical_schema``; the regex; the EBNF text; or ``""`` for any
    JSON). Hashable: the cache key."""

    kind: str
    source: str

    def __post_init__(self):
        if self.kind not in SPEC_KINDS:
            raise GrammarError(f"kind must be one of {SPEC_KINDS}, got {self.kind!r}")
        if not isinstance(self.source, str):
            raise GrammarError(f"source must be a str, got {type(self.source).__name__}")


def canonical_schema(schema: Any, _ordered: bool = False) -> Any:
    """``schema`` with the keys of every object sorted except the names of a ``properties`` map,
    which keep the schema's order (generation emits properties in that order, so two schemas that
    list them differently are different grammars; any other key order is irrelevant and sorted
    so that it shares the cache entry). A property named like a keyword only costs a cache miss."""
    if isinstance(schema, dict):
        items = schema.items() if _ordered else sorted(schema.items(), key=lambda kv: str(kv[0]))
        return {k: canonical_schema(v, _ordered=(k == "properties" and not _ordered)) for k, v in items}
    if isinstance(schema, list):
        return [canonical_schema(v) for v in schema]
    return schema


def normalize_spec(spec: Any) -> GrammarSpec | None:
    """Validate a spec dict (module docstring) and return its ``GrammarSpec`` (``None`` for
    ``{"type": "text"}``: unconstrained). Raises ``GrammarError`` naming the bad field."""
    if isinstance(spec, GrammarSpec):
        return spec
    if not isinstance(spec, dict):
        raise GrammarError(f"the constraint must be an object with a 'type', got {type(spec).__name__}")
    kind = spec.get("type")
    if kind == "text":
        return None
    if kind not in SPEC_KINDS:
        raise GrammarError(f"'type' must be one of {('text',) + SPEC_KINDS}, got {kind!r}")
    extra = set(spec) - {"type", kind}
    if extra:
        raise GrammarError(f"unknown fields {sorted(extra)} in a {kind!r} constraint")
    if kind == "json_object":
        return GrammarSpec(kind, "")
    if kind not in spec:
        raise GrammarError(f"a {kind!r} constraint needs the field {kind!r}")
    value = spec[kind]
    if kind == "json_schema":
        if isinstance(value, dict) and isinstance(value.get("schema"), (dict, bool)) and "type" not in value:
            value = value["schema"]  # OpenAI's {"name", "schema", "strict"} wrapper
        if not isinstance(value, (dict, bool)):
            raise GrammarError(f"'json_schema' must be an object (a JSON Schema), got {type(value).__name__}")
        try:
            source = json.dumps(canonical_schema(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise GrammarError(f"'json_schema' is not JSON: {exc}") from None
        return GrammarSpec(kind, source)
    if not isinstance(value, str) or not value:
        raise GrammarError(f"'{kind}' must be a non-empty string, got {value!r:.80}")
    return GrammarSpec(kind, value)


def _regex_grammar(pattern: str) -> Grammar:
    from rayml.decoding.grammar import GrammarBuilder

    b = GrammarBuilder()
    root = b.nonterminal("root")
    b.add(root, [b.terminal(compile_regex(pattern), f"/{pattern}/")])
    return b.build(root)


def build_grammar(spec: GrammarSpec, limits: GrammarLimits = GrammarLimits()) -> Grammar:
    """Run the front-end of ``spec`` and check the result against ``limits``.

    Raises:
        GrammarError: the schema / regex / grammar is invalid (the front-end's message).
        GrammarTooComplex: over ``max_source_chars``, ``max_rules`` or ``max_dfa_states``.
    """
    if len(spec.source) > limits.max_source_chars:
        raise GrammarTooComplex(f"the {spec.kind} has {len(spec.source)} characters, over the limit of "
                                f"{limits.max_source_chars}")
    try:
        if spec.kind == "json_schema":
            g = schema_grammar(json.loads(spec.source))
        elif spec.kind == "json_object":
            g = json_grammar()
        elif spec.kind == "regex":
            g = _regex_grammar(spec.source)
        else:
            g = parse_ebnf(spec.source)
    except RecursionError:
        raise GrammarTooComplex(f"the {spec.kind} is nested too deeply") from None
    except EngineSizeLimit as exc:  # the front-ends' own hard caps are size limits, not invalid input
        raise GrammarTooComplex(f"the {spec.kind} is over the engine's size limit: {exc}") from None
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise GrammarError(f"invalid {spec.kind}: {exc}") from None
    n_rules = len(g.productions)
    if n_rules > limits.max_rules:
        raise GrammarTooComplex(f"the {spec.kind} compiles to {n_rules} rules, over the limit of {limits.max_rules}")
    n_states = sum(t.n_states for t in g.terminals)
    if n_states > limits.max_dfa_states:
        raise GrammarTooComplex(f"the {spec.kind} compiles to {n_states} DFA states, over the limit of "
                                f"{limits.max_dfa_states}")
    return g
