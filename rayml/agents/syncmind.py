"""SyncMind: out-of-sync recovery with budgets and a collaborator, and its metrics (ICML 2025).

"SyncMind: Measuring Agent Out-of-Sync Recovery in Collaborative Software Engineering" (Guo, Wang,
Chen, Li, Han, Li, Ji; ICML 2025). An agent works in a repository in which one function is still
an older version while the rest moved on (a SyncBench scenario, ``syncmind_bench``). It starts from
the failing test log and may, at each turn (the authors' ``run_infer.py`` / ``recover_prompt.py``):

* (a) interact with the environment (run the tests, read a file): free, but it uses a turn;
* (b) propose a solution: a revised function plus its answer (file path and function name); each
  proposal costs ``coding_cost`` and is verified by the scenario's tests;
* (c) ask the collaborator (collaborative mode only): costs ``asking_cost``. The collaborator
  knows the ground truth and answers only the piece of information asked (the authors'
  ``know_agent.py``): where the out-of-sync code is, or, for a named function, its current version
  (or that the named function is not the out-of-sync one); a vague question gets a vague answer.

An episode ends when a proposal passes the tests, after ``max_turns`` turns, or when the balance
cannot pay for another costly action (``< coding_cost`` alone, ``< min(coding, asking)`` in
collaborative mode; the authors' ``check_if_out_of_balance``). The paper's defaults: 30 turns,
$1000, $100 per proposal, $100 per question; its resource-aware runs use 50 turns, $3000, and
$50 / $200 questions.

Metrics (``summarize_episodes``):

* SR, success rate: proposals verified by the tests (the authors' ``adapt_grade``: the test summary
  equals the reference fix's, which here means every verifier test passes).
* LA_file / LA_func, localisation accuracy (the authors' ``run_eval.py``): 1 for both when
  recovered; otherwise the final answer's file path (LA_file) and file path plus function name
  (LA_func, ``react_eval.py``) against the ground truth.
* ASR, assistance-seeking rate (collaboration willingness): questions asked / turns taken.
  Assumed: per turn, pooled over episodes (the paper's definition was not reachable; the project
  site names the metric only).
* CSR, conditional success rate: SR of the episodes in which the agent asked at least once.
  Assumed (as above); with ``sr_without_asking`` it measures collaboration usefulness.
* Eff, recovery efficiency: mean over episodes of success x the fraction of the budget left.
  Assumed (as above).
* resource awareness (``resource_awareness``): how an agent's SR and ASR move across the
  resource settings (the SR spread, and ASR with cheap minus ASR with dear questions).

Assumed: the agent's workspace has no git history of the collaborator's commits (``git diff``
would show the fix); a proposal is graded as the authors grade it, by taking the agent's version
of the out-of-sync function into the current repository (``align_agent_context``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from rayml.agents import syncmind_bench as bench

__all__ = ["Resources", "PAPER_RESOURCES", "RESOURCE_SETTINGS", "Collaborator", "Episode", "TestCache",
           "run_episode", "summarize_episodes", "resource_awareness", "phi_correlation"]


@dataclass(frozen=True)
class Resources:
    """An episode's budgets: turns (time) and money, the two action costs, and whether the
    collaborator may be asked."""

    max_turns: int = 30
    budget: float = 1000.0
    coding_cost: float = 100.0
    asking_cost: float = 100.0
    collaborative: bool = True

    def __post_init__(self):
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) or self.max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {self.max_turns!r}")
        for name in ("budget", "coding_cost", "asking_cost"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.coding_cost <= 0:
            raise ValueError(f"coding_cost must be > 0, got {self.coding_cost!r}")

    def out_of_balance(self, balance: float) -> bool:
        """The authors' ``check_if_out_of_balance``."""
        if self.collaborative:
            return balance < min(self.coding_cost, self.asking_cost)
        return balance < self.coding_cost


PAPER_RESOURCES = Resources()
# The paper's resource-aware settings (project site, "Resource-aware out-of-sync recovery").
RESOURCE_SETTINGS = {
    "default": Resources(),
    "turns50": Resources(max_turns=50),
    "budget3000": Resources(budget=3000.0),
    "ask50": Resources(asking_cost=50.0),
    "ask200": Resources(asking_cost=200.0),
}


class Collaborator:
    """The know-everything collaborator: answers only the piece of information asked, never a
    misleading one (the authors' ``KnowPrompter.know_everything_answerer``)."""

    def __init__(self, scenario: Mapping):
        self._path = scenario["path"]
        self._qualname = scenario["qualname"]
        self._gold = scenario["gold_source"]

    def answer(self, question: Mapping) -> dict:
        kind = question.get("kind")
        if kind == "location":
            return {"kind": "location", "path": self._path, "function": self._qualname.split(".")[-1],
                    "qualname": self._qualname}
        if kind == "fix":
            if question.get("path") == self._path and question.get("qualname") == self._qualname:
                return {"kind": "fix", "source": self._gold}
            return {"kind": "fix", "source": None,
                    "text": f"{question.get('qualname')} in {question.get('path')} is in sync with the repository"}
        return {"kind": "vague", "text": "a collaborator updated the repository; part of your local code follows "
                                         "an older version"}


class TestCache:
    """Verifier results keyed by the candidate function's text (deterministic, so caching changes
    only the time taken)."""

    __test__ = False  # not a pytest class

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = float(timeout_s)
        self._cache: dict = {}
        self.runs = 0
        self.hits = 0

    def verify(self, scenario: Mapping, function_text: str | None) -> dict:
        """The scenario's tests with the out-of-sync function replaced by ``function_text``
        (``None``: left as it is); a text that does not parse fails without running."""
        key = hashlib.sha256(f"{scenario['id']}\0{function_text}".encode()).hexdigest()
        if key in self._cache:
            self.hits += 1
            return self._cache[key]
        files = dict(scenario["files"])
        out = None
        if function_text is not None:
            try:
                files[scenario["path"]] = bench.replace_function(files[scenario["path"]], scenario["qualname"],
                                                                 function_text)
            except (SyntaxError, ValueError, KeyError) as exc:
                out = {"ok": False, "passed": 0, "failed": len(scenario["test_paths"]),
                       "log": f"the proposal does not parse: {type(exc).__name__}: {exc}"}
        if out is None:
            self.runs += 1
            res = bench.run_tests(files, scenario["test_paths"], self.timeout_s)
            out = {"ok": res["ok"], "passed": res["passed"], "failed": res["failed"], "log": res["log"]}
        self._cache[key] = out
        return out


@dataclass
class Episode:
    """One agent's recovery attempt; ``trace`` lists ``(turn, action type)``."""

    scenario: str
    agent: str
    setting: str
    success: bool = False
    la_file: bool = False
    la_func: bool = False
    turns: int = 0
    asks: int = 0
    proposals: int = 0
    env_actions: int = 0
    spent: float = 0.0
    balance: float = 0.0
    end: str = ""
    trace: tuple = ()

    def row(self) -> dict:
        d = asdict(self)
        d["trace"] = list(d["trace"])
        return d


def _view(scenario: Mapping) -> dict:
    """What the agent sees at the start: the repository's files and the initial error log."""
    return {"paths": sorted(scenario["files"]), "initial_log": scenario["initial_log"],
            "test_paths": list(scenario["test_paths"])}


def _extract(files: Mapping[str, str], path: str, qualname: str) -> str | None:
    try:
        spans = bench.function_spans(files[path])
    except (KeyError, SyntaxError):
        return None
    return spans[qualname][2] if qualname in spans else None


def run_episode(agent, scenario: Mapping, resources: Resources, *, seed: int, cache: TestCache,
                agent_name: str = "agent", setting: str = "default") -> Episode:
    """Run one out-of-sync recovery episode (the module docstring's protocol).

    Args:
        agent: an object with ``reset(view, resources, seed)`` and ``act(observation) -> action``;
            actions are dicts: ``{"type": "run_tests"}``, ``{"type": "read", "path"}``,
            ``{"type": "ask", "question": {...}}``, ``{"type": "propose", "path", "qualname",
            "source"}``, ``{"type": "give_up"}``.
        scenario: a SyncBench scenario (``syncmind_bench.construct_scenarios``).
        resources: the budgets.
        seed: the episode's seed (given to the agent).
        cache: the verifier (``TestCache``).

    Returns:
        the ``Episode`` with its outcome and the resources used.
    """
    if not isinstance(resources, Resources):
        raise TypeError(f"resources must be a Resources, got {type(resources).__name__}")
    files = dict(scenario["files"])  # the agent's working copy
    balance = float(resources.budget)
    ep = Episode(scenario=scenario["id"], agent=agent_name, setting=setting, balance=balance)
    collaborator = Collaborator(scenario)
    agent.reset(_view(scenario), resources, int(seed))
    obs: dict = {"type": "start", "log": scenario["initial_log"], "balance": balance}
    trace = []
    answer = None
    while ep.turns < resources.max_turns:
        action = agent.act(obs)
        kind = action.get("type") if isinstance(action, Mapping) else None
        if kind == "give_up":
            ep.end = "gave up"
            break
        ep.turns += 1
        trace.append((ep.turns, kind))
        if kind == "run_tests":
            ep.env_actions += 1
            res = cache.verify(scenario, _extract(files, scenario["path"], scenario["qualname"]))
            obs = {"type": "tests", "log": res["log"], "ok": res["ok"], "balance": balance}
        elif kind == "read":
            ep.env_actions += 1
            path = action.get("path")
            obs = {"type": "file", "path": path, "text": files.get(path), "balance": balance}
        elif kind == "ask" and resources.collaborative and balance >= resources.asking_cost:
            ep.asks += 1
            balance -= resources.asking_cost
            obs = {"type": "answer", "answer": collaborator.answer(action.get("question") or {}), "balance": balance}
        elif kind == "propose" and balance >= resources.coding_cost:
            ep.proposals += 1
            balance -= resources.coding_cost
            path, qualname, source = action.get("path"), action.get("qualname"), action.get("source")
            answer = (path, qualname)
            if path in files and isinstance(source, str):
                try:
                    files[path] = bench.replace_function(files[path], qualname, source)
                except (SyntaxError, ValueError, KeyError):
                    pass  # an edit that does not apply leaves the working copy unchanged
            res = cache.verify(scenario, _extract(files, scenario["path"], scenario["qualname"]))
            obs = {"type": "verdict", "ok": res["ok"], "log": res["log"], "balance": balance}
            if res["ok"]:
                ep.success = True
                ep.end = "success"
                break
        else:
            # a question in solo mode, an action the balance cannot pay, or an unknown action
            obs = {"type": "refused", "action": kind, "balance": balance}
        if (kind in ("ask", "propose")) and resources.out_of_balance(balance):
            ep.end = "out of balance"
            break
    if not ep.end:
        ep.end = "max turns"
    ep.balance = balance
    ep.spent = float(resources.budget) - balance
    if ep.success:
        ep.la_file = ep.la_func = True
    elif answer is not None:
        ep.la_file = answer[0] == scenario["path"]
        ep.la_func = ep.la_file and str(answer[1]).split(".")[-1] == scenario["qualname"].split(".")[-1]
    ep.trace = tuple(trace)
    return ep


def phi_correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of two 0/1 sequences (the phi coefficient); NaN if either is constant."""
    n = len(x)
    if n == 0 or n != len(y):
        return float("nan")
    mx, my = sum(x) / n, sum(y) / n
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    if sx == 0 or sy == 0:
        return float("nan")
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / (sx * sy)


def summarize_episodes(episodes: Sequence[Mapping], budget: float | None = None) -> dict:
    """SR, LA_file, LA_func, ASR, CSR, Eff and resource use of ``episodes`` (rows of
    ``Episode.row()``); see the module docstring for the definitions. ``budget`` (for Eff)
    defaults to each episode's ``spent + balance``."""
    n = len(episodes)
    if n == 0:
        raise ValueError("episodes must not be empty")
    asked = [e for e in episodes if e["asks"] > 0]
    solo = [e for e in episodes if e["asks"] == 0]
    turns = sum(e["turns"] for e in episodes)

    def rate(rows, key):
        return sum(bool(r[key]) for r in rows) / len(rows) if rows else float("nan")

    eff = sum((1.0 - e["spent"] / (budget if budget else (e["spent"] + e["balance"]) or 1.0)) * e["success"]
              for e in episodes) / n
    return {
        "n": n, "sr": rate(episodes, "success"), "la_file": rate(episodes, "la_file"),
        "la_func": rate(episodes, "la_func"),
        "asr": sum(e["asks"] for e in episodes) / turns if turns else 0.0,
        "ask_episode_rate": len(asked) / n, "csr": rate(asked, "success"), "sr_without_asking": rate(solo, "success"),
        "collaboration_usefulness": (rate(asked, "success") - rate(solo, "success")) if asked and solo else float("nan"),
        "asked_success_phi": phi_correlation([float(e["asks"] > 0) for e in episodes],
                                             [float(e["success"]) for e in episodes]),
        "eff": eff, "mean_turns": turns / n, "mean_spent": sum(e["spent"] for e in episodes) / n,
        "mean_proposals": sum(e["proposals"] for e in episodes) / n,
    }


def resource_awareness(by_setting: Mapping[str, Mapping]) -> dict:
    """How an agent's results move across the resource settings (``{setting: summary}`` with at
    least ``default``): the SR spread (max - min), SR gains from more time / budget, and the
    cost adaptation of its asking, ASR($50 questions) - ASR($200 questions). A resource-aware agent
    asks more when questions are cheap; the paper finds minimal differences for LLM agents."""
    if "default" not in by_setting:
        raise ValueError("by_setting must hold the 'default' setting")
    srs = {k: v["sr"] for k, v in by_setting.items()}
    get = lambda k, m: by_setting[k][m] if k in by_setting else float("nan")  # noqa: E731
    return {
        "sr_spread": max(srs.values()) - min(srs.values()),
        "sr_gain_turns": get("turns50", "sr") - srs["default"],
        "sr_gain_budget": get("budget3000", "sr") - srs["default"],
        "ask_adaptation": get("ask50", "asr") - get("ask200", "asr"),
        "sr_cheap_minus_dear_asking": get("ask50", "sr") - get("ask200", "sr"),
    }
