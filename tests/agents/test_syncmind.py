"""SyncMind: scenario construction, the harness's budgets and collaborator, the metrics, the agents."""

import textwrap

import pytest

from rayml.agents import syncmind as sm
from rayml.agents import syncmind_agents as sa
from rayml.agents import syncmind_bench as sb
from rayml.agents import syncmind_releases as rel
from rayml.agents import syncmind_repos as sr


@pytest.fixture(scope="module")
def scenarios():
    out = sb.construct_scenarios(sr.generated_repository(3, 2))
    out += sb.construct_scenarios(sr.stdlib_repository("colorsys", 0), max_per_repo=2)
    assert len(out) >= 4
    return out


# -- source text helpers ------------------------------------------------------------------------

SRC = '''import math


class A:
    @staticmethod
    def f(x):
        return x + 1

    def g(self):
        return 2


def h(y):
    return y * 2
'''


def test_function_spans_and_replace_roundtrip():
    spans = sb.function_spans(SRC)
    assert set(spans) == {"A.f", "A.g", "h"}
    assert spans["A.f"][0] == 5  # the decorator's line
    new = sb.replace_function(SRC, "A.g", "def g(self):\n    return 3\n")
    assert "return 3" in new and "return 2" not in new
    assert sb.function_spans(new)["A.g"][2].startswith("    def g")
    # replacing with the same text is the identity
    for q, (_, _, text) in spans.items():
        assert sb.replace_function(SRC, q, textwrap.dedent(text)) == SRC


def test_replace_function_rejects_bad_input():
    with pytest.raises(KeyError):
        sb.replace_function(SRC, "nope", "def nope():\n    pass\n")
    with pytest.raises(SyntaxError):
        sb.replace_function(SRC, "h", "def h(:\n")
    with pytest.raises(SyntaxError):
        sb.replace_function(SRC, "h", "x = 1\n")


def test_mutate_function_sites():
    src = "def f(a, b):\n    return a < b and a + 1 > 0\n"
    assert "a <= b" in sr.mutate_function(src, "compare", 0)
    assert "a + 1 >= 0" in sr.mutate_function(src, "compare", 1)
    assert sr.mutate_function(src, "compare", 2) is None
    assert " or " in sr.mutate_function(src, "boolop", 0)
    assert "a - 1" in sr.mutate_function(src, "binop", 0)
    with pytest.raises(ValueError, match="kind"):
        sr.mutate_function(src, "delete", 0)


# -- construction ------------------------------------------------------------------------------


def test_generated_repository_is_reproducible_and_ordered():
    a, b = sr.generated_repository(5, 3), sr.generated_repository(5, 3)
    assert a == b
    assert a != sr.generated_repository(6, 3)
    assert len(a["commits"]) == 1 + 3 * 2  # initial + two API changes per component
    with pytest.raises(ValueError, match="n_components"):
        sr.generated_repository(0, 99)
    with pytest.raises(ValueError, match="module"):
        sr.stdlib_repository("os", 0)


def test_git_history_is_traced(tmp_path):
    repo = sr.generated_repository(3, 2)
    hashes = sb.build_git_repo(repo, str(tmp_path))
    assert len(hashes) == len(repo["commits"])
    assert hashes == sb.build_git_repo(repo, str(tmp_path / "again"))  # fixed dates: same hashes
    hist = sb.trace_histories(str(tmp_path))
    assert hist
    for (path, qualname), versions in hist.items():
        head = textwrap.dedent(sb.function_spans(repo["commits"][-1]["files"][path])[qualname][2])
        assert all(text != head for _, text in versions)  # only versions that differ from HEAD
        assert len({text for _, text in versions}) == len(versions)


def test_scenarios_fail_before_and_pass_after_reference_fix(scenarios):
    for sc in scenarios:
        before = sb.run_tests(sc["files"], sc["test_paths"])
        fixed = dict(sc["files"])
        fixed[sc["path"]] = sb.replace_function(fixed[sc["path"]], sc["qualname"], sc["gold_source"])
        after = sb.run_tests(fixed, sc["test_paths"])
        assert not before["ok"] and after["ok"], sc["id"]
        assert before["failed"] >= 1 and after["failed"] == 0
        # only the out-of-sync function differs from the newest repository
        assert sc["stale_source"] != sc["gold_source"]
        assert sc["type"] in ("callee", "caller")


def test_construction_is_reproducible():
    repo = sr.generated_repository(3, 1)
    a = sb.construct_scenarios(repo)
    b = sb.construct_scenarios(repo)
    assert [s["id"] for s in a] == [s["id"] for s in b]
    assert a[0]["files"] == b[0]["files"] and a[0]["initial_log"] == b[0]["initial_log"]


def test_run_tests_timeout_and_crash():
    files = {"tests/test_slow.py": "def test_loop():\n    while True:\n        pass\n"}
    res = sb.run_tests(files, ["tests/test_slow.py"], timeout_s=1.0)
    assert not res["ok"] and "TIMEOUT" in res["log"]
    res = sb.run_tests({"tests/test_bad.py": "import nothing_here_xyz\n"}, ["tests/test_bad.py"])
    assert not res["ok"] and "ModuleNotFoundError" in res["log"]
    with pytest.raises(ValueError, match="test_paths"):
        sb.run_tests(files, [])


# -- harness -----------------------------------------------------------------------------------


class Scripted:
    """Plays a fixed list of actions."""

    def __init__(self, actions):
        self.actions = list(actions)

    def reset(self, view, resources, seed):
        self.view = view

    def act(self, obs):
        return self.actions.pop(0) if self.actions else {"type": "give_up"}


def test_budget_accounting_and_out_of_balance(scenarios):
    sc = scenarios[0]
    cache = sm.TestCache()
    wrong = {"type": "propose", "path": sc["path"], "qualname": sc["qualname"], "source": sc["stale_source"]}
    # independent mode: $300 pays three proposals; the episode ends when < $100 is left
    res = sm.Resources(budget=300.0, collaborative=False)
    ep = sm.run_episode(Scripted([wrong] * 10), sc, res, seed=0, cache=cache)
    assert (ep.proposals, ep.spent, ep.end, ep.success) == (3, 300.0, "out of balance", False)
    assert ep.la_file and ep.la_func  # the answer named the right function, even though it failed
    # questions are refused without a collaborator, and they still take a turn
    ep = sm.run_episode(Scripted([{"type": "ask", "question": {"kind": "location"}}] * 3), sc, res, seed=0,
                        cache=cache)
    assert ep.asks == 0 and ep.turns == 3 and ep.spent == 0
    # turn limit: environment actions are free but count
    ep = sm.run_episode(Scripted([{"type": "run_tests"}] * 40), sc, sm.Resources(max_turns=5), seed=0, cache=cache)
    assert (ep.turns, ep.env_actions, ep.spent, ep.end) == (5, 5, 0.0, "max turns")


def test_collaborator_answers_only_what_is_asked(scenarios):
    sc = scenarios[0]
    c = sm.Collaborator(sc)
    loc = c.answer({"kind": "location"})
    assert loc["path"] == sc["path"] and loc["qualname"] == sc["qualname"] and "source" not in loc
    assert c.answer({"kind": "fix", "path": sc["path"], "qualname": sc["qualname"]})["source"] == sc["gold_source"]
    other = c.answer({"kind": "fix", "path": sc["path"], "qualname": "not_it"})
    assert other["source"] is None and "in sync" in other["text"]
    vague = c.answer({"kind": "vague"})
    assert sc["path"] not in vague["text"] and sc["qualname"] not in vague["text"]


def test_asking_then_proposing_recovers_and_costs(scenarios):
    sc = scenarios[0]
    res = sm.Resources(asking_cost=50.0)
    ask = [{"type": "ask", "question": {"kind": "location"}},
           {"type": "ask", "question": {"kind": "fix", "path": sc["path"], "qualname": sc["qualname"]}},
           {"type": "propose", "path": sc["path"], "qualname": sc["qualname"], "source": sc["gold_source"]}]
    ep = sm.run_episode(Scripted(ask), sc, res, seed=0, cache=sm.TestCache())
    assert ep.success and ep.asks == 2 and ep.spent == 200.0 and ep.turns == 3


def test_localisation_grading(scenarios):
    sc = scenarios[0]
    cache = sm.TestCache()
    other_path = next(p for p in sc["files"] if p != sc["path"] and p.endswith(".py") and not p.startswith("tests"))
    ep = sm.run_episode(Scripted([{"type": "propose", "path": other_path, "qualname": "x", "source": "def x(): pass"}]),
                        sc, sm.Resources(), seed=0, cache=cache)
    assert not ep.la_file and not ep.la_func
    ep = sm.run_episode(Scripted([{"type": "propose", "path": sc["path"], "qualname": "zzz", "source": "bad("}]),
                        sc, sm.Resources(), seed=0, cache=cache)
    assert ep.la_file and not ep.la_func and not ep.success


def test_summary_metrics_against_hand_counts():
    rows = [dict(success=True, la_file=True, la_func=True, asks=1, turns=4, spent=300.0, balance=700.0, proposals=1),
            dict(success=False, la_file=True, la_func=False, asks=0, turns=6, spent=500.0, balance=500.0, proposals=5),
            dict(success=False, la_file=False, la_func=False, asks=2, turns=10, spent=1000.0, balance=0.0, proposals=8),
            dict(success=True, la_file=True, la_func=True, asks=0, turns=2, spent=100.0, balance=900.0, proposals=1)]
    s = sm.summarize_episodes(rows, budget=1000.0)
    assert s["sr"] == 0.5 and s["la_file"] == 0.75 and s["la_func"] == 0.5
    assert s["asr"] == pytest.approx(3 / 22)
    assert s["csr"] == 0.5 and s["sr_without_asking"] == 0.5
    assert s["eff"] == pytest.approx((0.7 + 0.9) / 4)
    assert s["asked_success_phi"] == pytest.approx(0.0)
    with pytest.raises(ValueError):
        sm.summarize_episodes([])


def test_phi_matches_numpy():
    np = pytest.importorskip("numpy")
    x = [1, 0, 1, 1, 0, 0, 1, 0]
    y = [1, 0, 0, 1, 0, 1, 1, 0]
    assert sm.phi_correlation(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert sm.phi_correlation([1, 1], [0, 1]) != sm.phi_correlation([1, 1], [0, 1])  # NaN: constant input


def test_resources_reject_bad_input():
    with pytest.raises(ValueError, match="max_turns"):
        sm.Resources(max_turns=0)
    with pytest.raises(ValueError, match="budget"):
        sm.Resources(budget=float("nan"))
    with pytest.raises(ValueError, match="coding_cost"):
        sm.Resources(coding_cost=0)
    with pytest.raises(TypeError, match="resources"):
        sm.run_episode(Scripted([]), {"files": {}}, {"max_turns": 3}, seed=0, cache=sm.TestCache())
    with pytest.raises(ValueError, match="agent"):
        sa.make_agent("gpt-9")


# -- agents ------------------------------------------------------------------------------------


def _run(name, sc, res, cache, **params):
    if name == "oracle":
        params["scenario"] = sc
    return sm.run_episode(sa.make_agent(name, **params), sc, res, seed=1, cache=cache, agent_name=name)


def test_agents_follow_their_strategies(scenarios):
    cache = sm.TestCache()
    default, solo = sm.Resources(), sm.Resources(collaborative=False)
    for sc in scenarios:
        assert _run("oracle", sc, default, cache).success
        ask = _run("always-ask", sc, default, cache)
        assert ask.success and ask.asks == 2
        nc = _run("no-collaboration", sc, default, cache)
        assert nc.asks == 0
        # without a collaborator the budget-aware agent is the no-collaboration agent
        ba = _run("budget-aware", sc, solo, cache)
        assert (ba.success, ba.proposals, ba.turns) == (nc.success, nc.proposals, nc.turns)
        # $200 questions: two questions and a proposal cost more than the proposals it expects to save
        assert _run("budget-aware", sc, sm.Resources(asking_cost=200.0), cache).asks == 0


def test_localise_ranks_the_traceback_frame_first():
    files = {"pkg/a.py": "def inner(x):\n    return x['k']\n\n\ndef outer(x):\n    return inner(x)\n",
             "tests/test_a.py": "from pkg.a import outer\n\n\ndef test_o():\n    assert outer({'j': 1})\n"}
    res = sb.run_tests(files, ["tests/test_a.py"])
    assert not res["ok"]
    ranked = sa.localise(res["log"], files)
    assert ranked[0] == ("pkg/a.py", "inner") and ("pkg/a.py", "outer") in ranked


def test_repair_candidates_are_error_guided():
    files = {"pkg/u.py": "def conv(value, unit):\n    return value * 2\n",
             "pkg/c.py": "from pkg.u import conv\n\n\ndef use(v):\n    return conv(v, from_unit='m')\n"}
    log = "TypeError: conv() got an unexpected keyword argument 'from_unit'"
    cands, n_guided = sa.repair_candidates("pkg/u.py", "conv", files, log)
    assert n_guided >= 1
    assert any("def conv(value, from_unit)" in c for c in cands[:n_guided])


def test_llm_option_prompt_lists_the_allowed_options_in_order():
    from rayml.agents.syncmind_llm import option_prompt

    collab, solo = sm.Resources(), sm.Resources(collaborative=False)
    assert option_prompt("log", "none", 1000.0, 0, collab, "cab").endswith("(c), (a) or (b)?")
    assert option_prompt("log", "none", 1000.0, 0, solo, "cab").endswith("(a) or (b)?")
    long = option_prompt("x" * 5000, "none", 900.0, 3, collab)
    assert "turn 4 of 30" in long and "$900" in long and len(long) < 1200


# -- the language-model agent ---------------------------------------------------------------------

class _Recorder:
    """A picker that records what it was offered and answers with a fixed preference."""

    name = "recorder"

    def __init__(self, prefer):
        self.prefer, self.offers = prefer, []

    def pick(self, system, user, cue, choices, rng, shared=""):
        self.offers.append((cue, list(choices), user, shared))
        return next((c for c in self.prefer if c in choices), list(choices)[0])


def test_lm_agent_takes_the_pickers_decisions(scenarios):
    from rayml.agents import syncmind_llm as sl

    sc = scenarios[0]
    cache = sm.TestCache()
    # a picker that always asks: location, then the fix, then proposes it -> recovered with two questions
    asker = _Recorder(["c", "1"])
    ep = sm.run_episode(sl.LLMOptionAgent(asker, per_suspect=4), sc, sm.Resources(), seed=3, cache=cache)
    assert ep.success and ep.asks == 2
    # options offered: a/b/c with a collaborator, a/b without; every prompt starts with the episode's log
    assert all(set(o[1]) == {"a", "b", "c"} for o in asker.offers if o[0] == "Option (")
    assert all(o[2].startswith(o[3]) and sc["initial_log"][-50:] in o[3] for o in asker.offers)
    solo = _Recorder(["b", "1"])
    ep = sm.run_episode(sl.LLMOptionAgent(solo, per_suspect=4), sc, sm.Resources(collaborative=False), seed=3,
                        cache=cache)
    assert ep.asks == 0 and all(set(o[1]) == {"a", "b"} for o in solo.offers if o[0] == "Option (")
    # the location question lists the traceback-ranked suspects (at most MAX_SUSPECTS), numbered
    loc = [o for o in solo.offers if o[0] == "Answer: ("]
    assert loc and all(1 < len(o[1]) <= sl.MAX_SUSPECTS for o in loc)


def test_lm_agent_localises_with_the_picked_suspect(scenarios):
    from rayml.agents import syncmind_llm as sl

    cache = sm.TestCache()
    for sc in scenarios:
        # picking the last listed suspect each time vs the first: different proposals, each graded
        eps = [sm.run_episode(sl.LLMOptionAgent(_Recorder(["b", k]), per_suspect=2), sc,
                              sm.Resources(collaborative=False), seed=5, cache=cache) for k in ("1", "5")]
        assert all(ep.la_func in (True, False) and ep.proposals >= 1 for ep in eps)


def test_uniform_picker_episodes_are_reproducible(scenarios):
    from rayml.agents import syncmind_llm as sl

    cache = sm.TestCache()
    rows = [[sm.run_episode(sl.LLMOptionAgent(sl.UniformPicker(), per_suspect=4), sc, sm.Resources(), seed=s,
                            cache=cache).row() for sc in scenarios[:2] for s in (1, 2)] for _ in range(2)]
    assert rows[0] == rows[1]


def test_vague_lm_control_asks_but_learns_nothing(scenarios):
    """The control of the collaboration claims: with the same seed and picker it is the lm agent
    without a collaborator; with one, the picker's (c) buys a vague answer, never the location or
    the fix."""
    from rayml.agents import syncmind_llm as sl

    cache = sm.TestCache()
    solo = sm.Resources(collaborative=False)
    for sc in scenarios[:3]:
        for seed in (1, 4):
            rows = [sm.run_episode(cls(sl.UniformPicker(), per_suspect=2), sc, solo, seed=seed, cache=cache).row()
                    for cls in (sl.LLMOptionAgent, sl.LLMVagueAgent)]
            assert rows[0] == rows[1]
    class Listening(sl.LLMVagueAgent):
        def _observe(self, obs):
            if obs.get("type") == "answer":
                self.heard.append(obs["answer"]["kind"])
            super()._observe(obs)

    sc = scenarios[0]
    agent = Listening(_Recorder(["c", "1"]), per_suspect=4)
    agent.heard = []
    ep = sm.run_episode(agent, sc, sm.Resources(), seed=3, cache=cache)
    # an always-(c) picker: two paid vague questions (the cap: what lm can usefully ask), then its
    # (c) turns are proposals, as lm's are once it knows the location and the fix
    assert ep.asks == sl.USEFUL_QUESTIONS == 2 and agent.heard == ["vague", "vague"]
    assert ep.proposals >= 1 and ep.spent == 2 * 100 + 100 * ep.proposals
    assert agent.known is None and agent.fix is None
    # the informative agent with the same always-ask picker asks as often and is handed the fix
    told = sm.run_episode(sl.LLMOptionAgent(_Recorder(["c", "1"]), per_suspect=4), sc, sm.Resources(), seed=3,
                          cache=cache)
    assert told.success and told.asks == 2


def test_smollm_picker_cached_prefix_matches_a_plain_forward():
    """SmolLM2-135M (skipped where it is not installed): the choice read from the KV-cached
    prefix equals the one from a full forward of the same prompt."""
    import random

    import torch

    from rayml import llm
    from rayml.agents import syncmind_llm as sl
    from rayml.llm.smollm2 import ModelUnavailable

    try:
        lm = llm.pretrained("smollm2-135m", train_if_missing=False)
    except (ModelUnavailable, FileNotFoundError, ImportError) as exc:
        pytest.skip(f"SmolLM2-135M is not available: {exc}")
    torch.set_num_threads(1)
    picker = sl.SmolLMPicker(lm)
    r = sm.Resources()
    system, log = sl._system(r), "FAILED tests/test_a.py::test_x\nAssertionError: 3 != 4"
    user = sl.option_prompt(log, "none yet", 1000.0, 0, r, "bca")
    tok = lm.tokenizer
    ids = tok.encode(tok.chat(user, system=system) + "Option (", bos=True)
    full = lm.logits([ids])[0, -1].float()
    want = max("abc", key=lambda k: float(full[tok.encode(k)[-1]]))
    assert picker.pick(system, user, "Option (", list("abc"), random.Random(0), shared=sl._log_part(log)) == want
    prefix, _ = picker._cached_prefix(system, sl._log_part(log))
    assert ids[:len(prefix)] == prefix and len(prefix) > 20


# ------------------------------------------------------------------ real release histories (issue 43)

_TC_TEST = """import unittest
from tinypkg.core import scale


class ScaleTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(scale(2), 4)

    def test_zero(self):
        self.assertEqual(scale(0), 0)


def test_plain():
    assert scale(1) == 2
"""


def test_runner_runs_unittest_testcases():
    """Real packages' tests are unittest classes: the runner runs each method (it ran only
    module-level test functions before)."""
    files = {"tinypkg/__init__.py": "", "tinypkg/core.py": "def scale(x):\n    return x + 2\n",
             "tests/__init__.py": "", "tests/test_core.py": _TC_TEST}
    res = sb.run_tests(files, ["tests/test_core.py"])
    assert res["results"] == {"tests/test_core.py::ScaleTest.test_double": "passed",
                              "tests/test_core.py::ScaleTest.test_zero": "failed",
                              "tests/test_core.py::test_plain": "failed"}
    assert "ScaleTest.test_zero" in res["log"] and "AssertionError" in res["log"]


def _sdist(root, version, body):
    import io
    import tarfile

    path = root / f"tinypkg-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in {"tinypkg/__init__.py": "", "tinypkg/core.py": body, "tests/__init__.py": "",
                           "tests/test_core.py": _TC_TEST.replace("def test_plain():\n    assert scale(1) == 2\n", ""),
                           "setup.py": "raise SystemExit"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"tinypkg-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_release_repository_from_cached_sdists_gives_fail_to_pass_scenarios(tmp_path):
    """Consecutive releases (cached sdists: nothing is downloaded) become one commit each; the
    older release's version of a changed function fails the newest tests: a scenario."""
    _sdist(tmp_path, "1.0", "def scale(x):\n    return x + x + 1\n")
    _sdist(tmp_path, "1.1", "def scale(x):\n    return 2 * x\n")
    spec = {"module": "tinypkg", "tests": "tests", "exclude": []}
    repo = rel.release_repository("tinypkg", ["1.0", "1.1"], spec=spec, cache_dir=tmp_path)
    assert repo["kind"] == "release" and [c["message"] for c in repo["commits"]] == [
        "tinypkg 1.0 (release)", "tinypkg 1.1 (release)"]
    assert "setup.py" not in repo["commits"][0]["files"]
    (sc,) = sb.construct_scenarios(repo)
    assert sc["qualname"] == "scale" and sc["source_kind"] == "release" and "x + x + 1" in sc["stale_source"]
    with pytest.raises(ValueError, match="versions"):
        rel.release_repository("tinypkg", ["1.0"], spec=spec, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="package"):
        rel.release_repository("not a name", ["1.0", "1.1"], spec=spec, cache_dir=tmp_path)
