"""Scripted out-of-sync recovery agents for the SyncMind harness (ICML 2025).

The paper evaluates LLM agents (OpenHands CodeAct). These scripted agents stand in for them with
explicit strategies, so that the harness's metrics and the effect of collaboration and budgets can
be measured without a language model. They all use the same two skills:

* localisation from the error log: the repository frames of each failing test's traceback
  (deepest first), then the repository functions the failing test calls, then those functions'
  callees in the repository (reading a file costs a turn);
* generate-and-validate repair: candidate versions of a suspect function, error-guided first
  (a parameter renamed to the keyword the callers pass, a missing name replaced by a defined one,
  integer subscripts replaced by the keys the callee returns) and then single edits of the kinds
  histories contain (a comparison's boundary, and/or, an arithmetic operator, a constant).

Strategies (``AGENTS``):

* ``no-collaboration``: localise, then propose up to ``per_suspect`` candidates per suspect.
* ``always-ask``: ask where the out-of-sync code is, then ask for its current version, propose it.
* ``budget-aware``: like ``no-collaboration`` while its candidates are error-guided; asks when it
  runs out of those or after ``patience`` failed proposals, and only if a question is worth it at
  the current prices (a question plus one proposal against the proposals it expects to need).
* ``reluctant``: ``no-collaboration`` that asks (a good question) with probability ``p_ask`` per
  turn: low collaboration willingness, as the paper measures for LLM agents (ASR <= 4.86%).
* ``vague-asker``: ``reluctant`` whose questions are uninformative (a control: asking without
  information).
* ``random-localiser``: proposes edits of randomly chosen functions (a control for localisation).
* ``oracle``: proposes the reference fix at once (a harness check: SR must be 1).
"""

from __future__ import annotations

import ast
import difflib
import functools
import random
import re
import textwrap
from typing import Mapping

from rayml.agents import syncmind_bench as bench
from rayml.agents import syncmind_repos as repos

__all__ = ["AGENTS", "TUNABLE", "SkilledAgent", "make_agent", "localise", "repair_candidates"]

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_KWARG = re.compile(r"got an unexpected keyword argument '(\w+)'")
_MISSING = re.compile(r"(?:has no attribute|cannot import name|name) '(\w+)'")


def _is_test(path: str) -> bool:
    return path.split("/")[-1].startswith("test_")


def _qualname_at(text: str, line: int) -> str | None:
    try:
        for q, (a, b, _) in bench.function_spans(text).items():
            if a <= line <= b:
                return q
    except SyntaxError:
        return None
    return None


def _module_path(module: str, paths) -> str | None:
    cand = module.replace(".", "/") + ".py"
    return cand if cand in paths else None


def _called_names(node) -> list[str]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            out.append(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None)
    return [x for x in out if x]


def _definitions(files: Mapping[str, str]) -> dict:
    """``{function name: [(path, qualname)]}`` over the non-test files read so far."""
    out: dict = {}
    for path, text in files.items():
        if _is_test(path) or not path.endswith(".py"):
            continue
        try:
            spans = bench.function_spans(text)
        except SyntaxError:
            continue
        for q in spans:
            out.setdefault(q.split(".")[-1], []).append((path, q))
    return out


@functools.lru_cache(maxsize=256)
def _module_tree(text: str) -> ast.Module:
    """``ast.parse(text)``, memoised: localisation re-reads the same test file once per failing test
    and again at every refill (a real release breaks dozens of tests in one file). Read-only use."""
    return ast.parse(text)


def localise(log: str, files: Mapping[str, str]) -> list[tuple[str, str]]:
    """Suspects ``(path, qualname)`` ranked from the failing tests' tracebacks and the test code.

    Ranking: repository frames of the tracebacks (deepest first, by frequency over the failing
    tests), then the repository functions the failing test functions call, then their callees.
    Uses only the files in ``files`` (the agent's reads)."""
    scores: dict = {}
    defs = _definitions(files)
    failing_tests = []
    for block in log.split("FAILED ")[1:] + log.split("ERROR ")[1:]:
        head = block.split("\n", 1)[0].strip()
        if "::" in head:
            failing_tests.append(tuple(head.split("::", 1)))
        frames = [(p, int(ln), fn) for p, ln, fn in _FRAME.findall(block)]
        repo_frames = [f for f in frames if f[0] in files and not _is_test(f[0])]
        for depth, (p, ln, _) in enumerate(reversed(repo_frames)):
            q = _qualname_at(files[p], ln)
            if q:
                scores[(p, q)] = scores.get((p, q), 0.0) + 10.0 / (1 + depth)
    direct = []
    for tpath, tname in failing_tests:
        text = files.get(tpath)
        if not text:
            continue
        try:
            tree = _module_tree(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == tname:
                for name in _called_names(node):
                    for pq in defs.get(name, []):
                        scores[pq] = scores.get(pq, 0.0) + 3.0
                        direct.append(pq)
    for p, q in dict.fromkeys(direct):
        try:
            node = ast.parse(textwrap.dedent(bench.function_spans(files[p])[q][2]))
        except (SyntaxError, KeyError):
            continue
        for name in _called_names(node):
            for pq in defs.get(name, []):
                if pq != (p, q):
                    scores[pq] = scores.get(pq, 0.0) + 1.0
    return [pq for pq, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def _rename_param(src: str, old: str, new: str) -> str | None:
    tree = ast.parse(src)
    fn = tree.body[0]
    names = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    if old not in names or new in names:
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.arg) and n.arg == old:
            n.arg = new
        elif isinstance(n, ast.Name) and n.id == old:
            n.id = new
    return ast.unparse(tree)


def _replace_name(src: str, old: str, new: str) -> str | None:
    tree = ast.parse(src)
    hit = False
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == old:
            n.id, hit = new, True
        elif isinstance(n, ast.Attribute) and n.attr == old:
            n.attr, hit = new, True
    return ast.unparse(tree) if hit else None


def _returned_keys(files: Mapping[str, str], names) -> list[str]:
    keys = []
    defs = _definitions(files)
    for name in names:
        for p, q in defs.get(name, []):
            try:
                node = ast.parse(textwrap.dedent(bench.function_spans(files[p])[q][2]))
            except (SyntaxError, KeyError):
                continue
            for n in ast.walk(node):
                if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict):
                    keys += [k.value for k in n.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return list(dict.fromkeys(keys))


def _int_subscripts_to_keys(src: str, keys: list[str]) -> str | None:
    tree = ast.parse(src)
    hit = False
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int) \
                and 0 <= n.slice.value < len(keys):
            n.slice = ast.Constant(keys[n.slice.value])
            hit = True
    return ast.unparse(tree) if hit else None


@functools.lru_cache(maxsize=4096)
def _inverse_edits(src: str) -> tuple:
    out = []
    for kind in ("compare", "boolop", "binop", "constant"):
        for site in range(12):
            edited = repos.mutate_function(src, kind, site)
            if edited is None:
                break
            out.append(edited)
            if kind == "constant":  # also the other direction of a changed number
                tree = ast.parse(src)
                seen = 0
                for n in ast.walk(tree):
                    if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) \
                            and not isinstance(n.value, bool):
                        if seen == site:
                            n.value = n.value - 1 if isinstance(n.value, int) else n.value / 2
                            out.append(ast.unparse(tree))
                            break
                        seen += 1
    return tuple(out)


def repair_candidates(path: str, qualname: str, files: Mapping[str, str], log: str) -> tuple[list[str], int]:
    """Candidate versions of function ``qualname`` of ``path``: ``(candidates, n_guided)`` with the
    first ``n_guided`` error-guided (see the module docstring) and then single edits."""
    cands, n_guided = _repair_cached(path, qualname, tuple(sorted(files.items())), log)
    return list(cands), n_guided


@functools.lru_cache(maxsize=4096)
def _repair_cached(path: str, qualname: str, items: tuple, log: str) -> tuple:
    files = dict(items)
    try:
        src = textwrap.dedent(bench.function_spans(files[path])[qualname][2])
        tree = ast.parse(src)
    except (KeyError, SyntaxError):
        return (), 0
    fn = tree.body[0]
    name = qualname.split(".")[-1]
    guided = []
    params = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    for kw in dict.fromkeys(_KWARG.findall(log)):
        for p in params:
            c = _rename_param(src, p, kw)
            if c:
                guided.append(c)
    module_names = sorted({q.split(".")[-1] for q in _definitions(files)} - {name})
    for missing in dict.fromkeys(_MISSING.findall(log)):
        if missing in src:
            for cand in difflib.get_close_matches(missing, module_names, n=3, cutoff=0.0):
                c = _replace_name(src, missing, cand)
                if c:
                    guided.append(c)
    if re.search(r"KeyError: \d|tuple indices must be integers|not subscriptable", log):
        keys = _returned_keys(files, _called_names(fn))
        if keys:
            c = _int_subscripts_to_keys(src, keys)
            if c:
                guided.append(c)
    generic = list(_inverse_edits(src))
    cands = tuple(dict.fromkeys(guided + generic))
    n_guided = len(dict.fromkeys(guided))
    return cands, n_guided


class SkilledAgent:
    """The no-collaboration strategy and the skills every agent shares (reading the files the
    failing tests lead to, localising, proposing candidates); subclasses change ``_policy``.

    Implements the agent side of ``syncmind.run_episode``: ``reset(view, resources, seed)`` and
    ``act(observation) -> action``."""

    name = "base"

    def __init__(self, **params):
        self.params = params

    def reset(self, view, resources, seed):
        self.view, self.res = view, resources
        self.rng = random.Random(seed)
        self.files: dict = {}
        self.log = view["initial_log"]
        self.to_read = list(view["test_paths"])
        self.suspects: list = []
        self.queue: list = []  # (path, qualname, source, guided)
        self.tried: dict = {}
        self.balance = float(resources.budget)
        self.failed_proposals = 0
        self.known = None  # (path, qualname) from the collaborator
        self.fix = None
        self.exhausted: set = set()
        self.pending_reads: list = []

    # -- exploration -------------------------------------------------------------------------
    def _next_read(self):
        """The next file worth reading: the failing tests, the traceback's files, the modules the
        tests import, then the modules those import."""
        while self.to_read:
            p = self.to_read.pop(0)
            if p not in self.files and p in self.view["paths"]:
                return p
        return None

    def _after_read(self, path, text):
        self.files[path] = text or ""
        paths = self.view["paths"]
        more = [p for p, _, _ in _FRAME.findall(self.log) if p in paths]
        try:
            tree = ast.parse(text or "")
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module:
                for target in [n.module] + [f"{n.module}.{a.name}" for a in n.names]:
                    mp = _module_path(target, paths)
                    if mp:
                        more.append(mp)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    mp = _module_path(a.name, paths)
                    if mp:
                        more.append(mp)
        for p in more:
            if p not in self.files and p not in self.to_read:
                self.to_read.append(p)

    def _observe(self, obs):
        self.balance = obs.get("balance", self.balance)
        if obs.get("type") == "file":
            self._after_read(obs["path"], obs["text"])
        elif obs.get("type") in ("verdict", "tests") and obs.get("log"):
            if obs.get("type") == "verdict" and not obs.get("ok"):
                self.failed_proposals += 1
        elif obs.get("type") == "answer":
            ans = obs["answer"]
            if ans["kind"] == "location":
                self.known = (ans["path"], ans["qualname"])
                if ans["path"] not in self.files and ans["path"] not in self.to_read:
                    self.to_read.insert(0, ans["path"])
            elif ans["kind"] == "fix" and ans.get("source"):
                self.fix = ans["source"]

    def _explore(self):
        p = self._next_read()
        return {"type": "read", "path": p} if p else None

    def _refill(self):
        """Candidates of the next suspect not yet exhausted (localisation from the initial log)."""
        self.suspects = localise(self.log, self.files)
        if self.known:
            self.suspects = [self.known] + [s for s in self.suspects if s != self.known]
        for p, q in self.suspects:
            if (p, q) in self.exhausted:
                continue
            self.exhausted.add((p, q))
            cands, n_guided = repair_candidates(p, q, self.files, self.log)
            limit = self.params.get("per_suspect", 4)
            if self.known == (p, q):
                limit = len(cands)
            self.queue = [(p, q, c, i < n_guided) for i, c in enumerate(cands[:max(limit, n_guided)])]
            if self.queue:
                return True
        return False

    def _propose_next(self):
        while self.queue or self._refill():
            p, q, c, _ = self.queue.pop(0)
            key = (p, q, c)
            if key in self.tried:
                continue
            self.tried[key] = True
            return {"type": "propose", "path": p, "qualname": q, "source": c}
        return None

    def _can_pay(self, cost):
        return self.balance >= cost

    def act(self, obs):
        self._observe(obs)
        return self._policy()

    def _policy(self):  # no-collaboration
        if self.fix is not None and self.known and self._can_pay(self.res.coding_cost):
            fix, self.fix = self.fix, None
            return {"type": "propose", "path": self.known[0], "qualname": self.known[1], "source": fix}
        a = self._explore()
        if a:
            return a
        if self._can_pay(self.res.coding_cost):
            a = self._propose_next()
            if a:
                return a
        return {"type": "give_up"}


class NoCollaboration(SkilledAgent):
    name = "no-collaboration"


class AlwaysAsk(SkilledAgent):
    name = "always-ask"

    def _policy(self):
        if self.res.collaborative:
            if self.known is None and self._can_pay(self.res.asking_cost + self.res.coding_cost):
                return {"type": "ask", "question": {"kind": "location"}}
            if self.known and self.fix is None and not self.tried and \
                    self._can_pay(self.res.asking_cost + self.res.coding_cost):
                return {"type": "ask", "question": {"kind": "fix", "path": self.known[0], "qualname": self.known[1]}}
        return super()._policy()


class BudgetAware(SkilledAgent):
    """Asks when its error-guided candidates are used up or after ``patience`` failures, if a
    question (plus the proposal it enables) costs less than the proposals it expects to need."""

    name = "budget-aware"

    def _plan_cost(self):
        """Questions needed: the fix of a located function, or location then fix."""
        return self.res.asking_cost * (1 if self.known else 2)

    def _worth_asking(self):
        r = self.res
        if not r.collaborative or not self._can_pay(self._plan_cost() + r.coding_cost):
            return False
        guided_left = any(g for *_, g in self.queue)
        stuck = (self.failed_proposals >= self.params.get("patience", 1) or (bool(self.tried) and not guided_left)
                 or not (self.queue or self._refill()))
        if not stuck:
            return False
        # without help it expects to need half of the proposals its balance would still pay for
        expected = max(1.0, ((self.balance - self._plan_cost()) // r.coding_cost) / 2)
        return self._plan_cost() + r.coding_cost <= expected * r.coding_cost

    def _policy(self):
        if self.fix is None and self.res.collaborative and not self.to_read_pending() and self._worth_asking():
            if self.known is None:
                return {"type": "ask", "question": {"kind": "location"}}
            return {"type": "ask", "question": {"kind": "fix", "path": self.known[0], "qualname": self.known[1]}}
        return super()._policy()

    def to_read_pending(self):
        return any(p not in self.files and p in self.view["paths"] for p in self.to_read)


class Reluctant(SkilledAgent):
    """Asks a good question with probability ``p_ask`` per turn."""

    name = "reluctant"
    vague = False

    def _policy(self):
        r = self.res
        if r.collaborative and self.fix is None and self.rng.random() < self.params.get("p_ask", 0.05) \
                and self._can_pay(r.asking_cost + r.coding_cost):
            if self.vague:
                return {"type": "ask", "question": {"kind": "vague"}}
            if self.known is None:
                return {"type": "ask", "question": {"kind": "location"}}
            return {"type": "ask", "question": {"kind": "fix", "path": self.known[0], "qualname": self.known[1]}}
        return super()._policy()


class VagueAsker(Reluctant):
    name = "vague-asker"
    vague = True


class RandomLocaliser(SkilledAgent):
    """Reads every file, then edits functions drawn at random (the localisation control)."""

    name = "random-localiser"

    def reset(self, view, resources, seed):
        super().reset(view, resources, seed)
        self.to_read = [p for p in view["paths"] if p.endswith(".py") and not _is_test(p)]

    def _refill(self):
        pool = sorted({pq for pqs in _definitions(self.files).values() for pq in pqs} - self.exhausted)
        if not pool:
            return False
        p, q = self.rng.choice(pool)
        self.exhausted.add((p, q))
        cands, _ = repair_candidates(p, q, self.files, self.log)
        self.queue = [(p, q, c, False) for c in cands[: self.params.get("per_suspect", 4)]]
        return bool(self.queue) or self._refill()


class Oracle(SkilledAgent):
    """Knows the reference fix (given at construction): a harness check."""

    name = "oracle"

    def act(self, obs):
        s = self.params["scenario"]
        return {"type": "propose", "path": s["path"], "qualname": s["qualname"], "source": s["gold_source"]}


AGENTS = {c.name: c for c in (NoCollaboration, AlwaysAsk, BudgetAware, Reluctant, VagueAsker, RandomLocaliser, Oracle)}
# Each agent's knob and the grid it is tuned on (held-out scenarios, the paper's default budgets).
TUNABLE = {"no-collaboration": ("per_suspect", [2, 4, 8]), "budget-aware": ("patience", [0, 1, 2, 4]),
           "reluctant": ("per_suspect", [2, 4, 8]), "vague-asker": ("per_suspect", [2, 4, 8]),
           "random-localiser": ("per_suspect", [2, 4, 8])}


def make_agent(name: str, **params):
    """A fresh agent of strategy ``name`` (``AGENTS``) with its parameters."""
    if name not in AGENTS:
        raise ValueError(f"agent must be one of {sorted(AGENTS)}, got {name!r}")
    return AGENTS[name](**params)
