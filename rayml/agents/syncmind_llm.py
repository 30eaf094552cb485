"""A language-model agent for the SyncMind harness: the model picks the option each turn and the
function it holds out of sync.

In SyncMind (ICML 2025) the LLM agent chooses, at every turn, between (a) interacting with the
environment, (b) proposing a solution and (c) asking the collaborator, under the budget shown in
its prompt (the authors' ``recover_prompt.py``), and each proposal names the file and function it
takes to be out of sync (graded by localisation accuracy). Here the *decisions* are the model's:

* the option of each turn: the prompt (our paraphrase of the task, the options, the budget left,
  the failing log and the last result) is followed by ``Option (`` and the agent takes the allowed
  option letter with the highest next-token logit (greedy, constrained to the allowed letters);
* the location of each new proposal: when it needs a new function to repair, the traceback-ranked
  suspects among the files it has read (at most ``MAX_SUSPECTS``, listed in an order drawn per
  call) are offered as numbered choices after ``Answer: (`` and it takes the number with the
  highest logit. A location the collaborator gave is used as told.

A 135M model cannot write the repairs itself, so the *execution* (which file to read next, the
candidate edits of the chosen function, the question's wording) uses the scripted skills of
``syncmind_agents``. Assumed: this split; the paper's agents also write the code. What the agent
measures is the model's own collaboration willingness (ASR), resource awareness (whether its
asking moves with the prices shown in its prompt), localisation among the suspects, and its
balance of exploring and proposing. SmolLM2-135M prefers the option the question names last, so
the order of the options is drawn per episode (from the episode's seed) and the order of the
suspects per call.

``picker`` is the decision maker: ``SmolLMPicker`` (SmolLM2-135M-Instruct, ``rayml.llm.pretrained
("smollm2-135m")``; the chat template's shared system prefix is held in a KV cache) or
``UniformPicker`` (a uniform draw among the allowed choices, from the episode's seed: the
weights-free floor the experiment's default size runs in the model's place).
"""

from __future__ import annotations

import random

from rayml.agents import syncmind_agents as sa

__all__ = ["LLMOptionAgent", "LLMVagueAgent", "SmolLMPicker", "UniformPicker", "option_prompt", "location_prompt", "MAX_SUSPECTS",
           "USEFUL_QUESTIONS"]

MAX_SUSPECTS = 5
USEFUL_QUESTIONS = 2  # the location, then the fix: what LLMOptionAgent can usefully ask
_SYSTEM = (
    "You are a software engineer fixing a shared Python repository. A teammate changed the repository while you "
    "were away, and one piece of your local code still follows the old version, so the tests now fail. Each turn "
    "you pick one option: (a) look at the environment (read a file or run the tests) - free, but it uses a turn; "
    "(b) propose a fix for the function you think is responsible - it costs ${coding} and the tests are run on "
    "it;{ask_option} You have {turns} turns in all and the task fails when the budget or the turns run out.")
_ASK = " (c) ask your teammate, who knows the current code, one question - it costs ${asking};"
_LOG_CHARS = 700


def option_prompt(log: str, last: str, balance: float, turn: int, resources, order: str = "abc") -> str:
    """The user message of one turn (the chat template and ``Option (`` are added by the agent);
    ``order`` is the order in which the question lists the options."""
    letters = [k for k in order if resources.collaborative or k != "c"]
    options = ", ".join(f"({k})" for k in letters[:-1]) + f" or ({letters[-1]})"
    return (_log_part(log) + f"[Budget left: ${balance:g}; turn {turn + 1} of {resources.max_turns}]\n"
            f"Last result: {last}\n\nWhich option do you take now: {options}?")


def _log_part(log: str) -> str:
    """The start of every user message of an episode (its failing log does not change), so the
    model reads it once per episode (KV cache)."""
    tail = log if len(log) <= _LOG_CHARS else "..." + log[-_LOG_CHARS:]
    return f"Failing tests:\n{tail}\n\n"


def location_prompt(log: str, suspects) -> str:
    """The user message asking which of ``suspects`` [(path, qualname)] is out of sync (numbered
    from 1 in the order given)."""
    listed = "\n".join(f"({i + 1}) {q} in {p}" for i, (p, q) in enumerate(suspects))
    return (_log_part(log) + "You will now propose a fix. Which function still follows the old "
            f"version?\n{listed}\nAnswer with its number.")


def _system(resources) -> str:
    r = resources
    return _SYSTEM.format(coding=f"{r.coding_cost:g}", asking=f"{r.asking_cost:g}", turns=r.max_turns,
                          ask_option=_ASK.format(asking=f"{r.asking_cost:g}") if r.collaborative else "")


class UniformPicker:
    """Picks uniformly among the allowed choices (the episode's ``rng``): no knowledge at all."""

    name = "uniform"

    def pick(self, system: str, user: str, cue: str, choices, rng: random.Random, shared: str = "") -> str:
        return rng.choice(list(choices))


class SmolLMPicker:
    """Greedy choice among single-token answers: the allowed answer token with the highest logit
    after ``chat(user, system) + cue`` (constrained decoding of one token). The tokens of the chat
    template up to ``shared`` (the start of the user message common to the episode's prompts) are
    kept in a KV cache (the last few keys)."""

    name = "smollm2-135m"

    def __init__(self, lm):
        self.lm = lm
        self._prefix: dict = {}  # (system, shared) -> (prefix ids, cache)
        self._tok_ids: dict = {}

    def _token(self, answer: str) -> int:
        if answer not in self._tok_ids:
            self._tok_ids[answer] = self.lm.tokenizer.encode(answer)[-1]
        return self._tok_ids[answer]

    def _cached_prefix(self, system: str, shared: str = ""):
        import torch

        hit = self._prefix.get((system, shared))
        if hit is None:
            tok = self.lm.tokenizer
            a = tok.encode(tok.chat(shared + "X", system=system), bos=True)
            b = tok.encode(tok.chat(shared + "Y", system=system), bos=True)
            n = max(1, next(i for i, (u, v) in enumerate(zip(a, b)) if u != v) - 1)
            ids = a[:n]
            cache = self.lm.model.new_cache(batch=1, capacity=len(ids) + 512)
            with torch.no_grad():
                self.lm.model(torch.as_tensor([ids]), cache=cache)
            if len(self._prefix) >= 8:  # one episode at a time: keep the latest few
                self._prefix.pop(next(iter(self._prefix)))
            hit = self._prefix[(system, shared)] = (ids, cache)
        return hit

    def pick(self, system: str, user: str, cue: str, choices, rng: random.Random, shared: str = "") -> str:
        import torch

        tok = self.lm.tokenizer
        ids = tok.encode(tok.chat(user, system=system) + cue, bos=True)
        prefix, base = self._cached_prefix(system, shared)
        with torch.no_grad():
            if ids[:len(prefix)] == prefix and len(ids) > len(prefix):
                cache = base.select(torch.zeros(1, dtype=torch.long))
                cache.ensure_capacity(len(ids) + 1)
                logits = self.lm.model(torch.as_tensor([ids[len(prefix):]]), cache=cache, last_only=True)[0, -1]
            else:
                logits = self.lm.logits([ids[-(self.lm.max_seq_len - 1):]])[0, -1]
        logits = logits.float()
        return max(choices, key=lambda k: (float(logits[self._token(k)]), -list(choices).index(k)))


class LLMOptionAgent(sa.SkilledAgent):
    """The picker chooses (a) / (b) / (c) and the location of each new proposal; the scripted
    skills carry the choices out."""

    name = "lm"
    vague = False

    def __init__(self, picker, **params):
        super().__init__(**params)
        self.picker = picker

    def reset(self, view, resources, seed):
        super().reset(view, resources, seed)
        # a small model prefers the option named last: the order is drawn per episode
        self.order = "".join(self.rng.sample("abc", 3))
        self.turn = 0
        self.last = "none yet"
        self.choices: list = []
        self.system = _system(resources)

    def _observe(self, obs):
        super()._observe(obs)
        t = obs.get("type")
        if t == "file":
            self.last = f"you read {obs['path']}"
        elif t == "verdict":
            self.last = "your proposal passed the tests" if obs.get("ok") else "your proposal still fails the tests"
        elif t == "tests":
            self.last = "you ran the tests; they still fail"
        elif t == "answer":
            ans = obs["answer"]
            self.last = ("your teammate says the out-of-sync code is " + f"{ans['qualname']} in {ans['path']}"
                         if ans["kind"] == "location" else "your teammate sent the current version of the function"
                         if ans.get("source") else "your teammate answered: " + ans.get("text", ""))
        elif t == "refused":
            self.last = "that action was not possible"

    def _choose(self) -> str:
        r = self.res
        allowed = [k for k in self.order if r.collaborative or k != "c"]
        user = option_prompt(self.log, self.last, self.balance, self.turn, r, self.order)
        return self.picker.pick(self.system, user, "Option (", allowed, self.rng, shared=_log_part(self.log))

    def _refill(self):
        """The next suspect is the picker's choice among the traceback-ranked suspects not yet
        tried (a location from the collaborator is taken as told)."""
        ranked = sa.localise(self.log, self.files)
        if self.known and self.known not in self.exhausted:
            pick = self.known
        else:
            left = [s for s in ranked if s not in self.exhausted][:MAX_SUSPECTS]
            if not left:
                return False
            shown = self.rng.sample(left, len(left))
            if len(shown) == 1:
                pick = shown[0]
            else:
                k = self.picker.pick(self.system, location_prompt(self.log, shown), "Answer: (",
                                     [str(i + 1) for i in range(len(shown))], self.rng, shared=_log_part(self.log))
                pick = shown[int(k) - 1]
        self.exhausted.add(pick)
        p, q = pick
        cands, n_guided = sa.repair_candidates(p, q, self.files, self.log)
        limit = len(cands) if self.known == pick else self.params.get("per_suspect", 4)
        self.queue = [(p, q, c, i < n_guided) for i, c in enumerate(cands[:max(limit, n_guided)])]
        return bool(self.queue) or self._refill()

    def _question(self):
        """The question a (c) asks: the location, then the fix there; ``None`` once both are known
        (at most ``USEFUL_QUESTIONS`` questions an episode)."""
        if self.known is None:
            return {"kind": "location"}
        if self.fix is None:
            return {"kind": "fix", "path": self.known[0], "qualname": self.known[1]}
        return None

    def _policy(self):
        choice = self._choose()
        self.choices.append(choice)
        self.turn += 1
        r = self.res
        if choice == "c" and self._can_pay(r.asking_cost):
            question = self._question()
            if question is not None:
                return {"type": "ask", "question": question}
        # a (c) with nothing left worth asking is taken as a proposal
        if choice in ("b", "c") and self._can_pay(r.coding_cost):
            if self.fix is not None and self.known:
                fix, self.fix = self.fix, None
                return {"type": "propose", "path": self.known[0], "qualname": self.known[1], "source": fix}
            a = self._propose_next()
            if a:
                return a
        a = self._explore()
        return a if a else {"type": "run_tests"}


class LLMVagueAgent(LLMOptionAgent):
    """The control of the collaboration claims: the same picker makes the same decisions (the
    option of each turn, the suspect of each proposal), but every question it asks is vague, so the
    collaborator's answer carries no information (it cannot use what it is told).

    Its questions are capped at ``USEFUL_QUESTIONS`` (2) an episode, the most ``LLMOptionAgent``
    can usefully ask (the location, then the fix); once it has asked that many, a (c) is taken as a
    proposal, the branch ``LLMOptionAgent`` takes when it knows both. So the two agents pay for at
    most the same number of questions and differ only in what the answers tell them (without the
    cap every (c) of the vague agent would be a paid question, and it would fail by running out of
    money, not by lacking information). Without a collaborator it is ``LLMOptionAgent`` itself:
    option (c) is not offered, so with the same seed its episode is the same."""

    name = "lm-vague"
    vague = True

    def reset(self, view, resources, seed):
        super().reset(view, resources, seed)
        self.questions = 0

    def _question(self):
        if self.questions >= USEFUL_QUESTIONS:
            return None
        self.questions += 1
        return {"kind": "vague"}
