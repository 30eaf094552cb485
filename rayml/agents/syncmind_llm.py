"""A SmolLM2-135M agent for the SyncMind harness: the language model picks the option each turn.

In SyncMind (ICML 2025) the LLM agent chooses, at every turn, between (a) interacting with the
environment, (b) proposing a solution and (c) asking the collaborator, under the budget shown in
its prompt (the authors' ``recover_prompt.py``). Here SmolLM2-135M-Instruct (``rayml.llm.pretrained
("smollm2-135m")``) makes exactly that choice: the prompt (our paraphrase of the task, the options,
the budget left, the failing log and the last result) is followed by ``Option (`` and the agent
takes the option whose letter has the highest next-token logit (greedy, so episodes are
deterministic). A 135M model cannot write the repairs itself, so the *execution* of the chosen
option uses the scripted skills of ``syncmind_agents`` (reading the next file or running the tests
for (a), the next localised candidate or the collaborator's fix for (b), a location or fix
question for (c)). Assumed: this split; the paper's agents also write the code. What it measures
is the model's own collaboration willingness (ASR) and its balance of exploring and proposing.
SmolLM2-135M prefers the option the question names last, so the order in which the question lists
the options is drawn per episode (from the episode's seed).
"""

from __future__ import annotations

from rayml.agents import syncmind_agents as sa

__all__ = ["LLMOptionAgent", "option_prompt"]

_SYSTEM = (
    "You are a software engineer fixing a shared Python repository. A teammate changed the repository while you "
    "were away, and one piece of your local code still follows the old version, so the tests now fail. Each turn "
    "you pick one option: (a) look at the environment (read a file or run the tests) - free, but it uses a turn; "
    "(b) propose a fix for the function you think is responsible - it costs ${coding} and the tests are run on "
    "it;{ask_option} You have {turns} turns in all and the task fails when the budget or the turns run out.")
_ASK = " (c) ask your teammate, who knows the current code, one question - it costs ${asking};"


def option_prompt(log: str, last: str, balance: float, turn: int, resources, order: str = "abc") -> str:
    """The user message of one turn (the chat template and ``Option (`` are added by the agent);
    ``order`` is the order in which the question lists the options."""
    tail = log if len(log) <= 900 else "..." + log[-900:]
    letters = [k for k in order if resources.collaborative or k != "c"]
    options = ", ".join(f"({k})" for k in letters[:-1]) + f" or ({letters[-1]})"
    return (f"[Budget left: ${balance:g}; turn {turn + 1} of {resources.max_turns}]\n"
            f"Failing tests:\n{tail}\n\nLast result: {last}\n\nWhich option do you take now: {options}?")


class LLMOptionAgent(sa.SkilledAgent):
    """The language model picks (a) / (b) / (c); the scripted skills carry the option out."""

    name = "smollm2"

    def __init__(self, lm, **params):
        super().__init__(**params)
        self.lm = lm
        tok = lm.tokenizer
        self._letters = {k: tok.encode(k)[-1] for k in ("a", "b", "c")}

    def reset(self, view, resources, seed):
        super().reset(view, resources, seed)
        # the question lists the options in an order drawn per episode: a small model prefers
        # the option named last, and this spreads that position bias over the options
        self.order = "".join(self.rng.sample("abc", 3))
        self.turn = 0
        self.last = "none yet"
        self.choices: list = []

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
        import torch

        r = self.res
        system = _SYSTEM.format(coding=f"{r.coding_cost:g}", asking=f"{r.asking_cost:g}", turns=r.max_turns,
                                ask_option=_ASK.format(asking=f"{r.asking_cost:g}") if r.collaborative else "")
        text = self.lm.tokenizer.chat(option_prompt(self.log, self.last, self.balance, self.turn, r, self.order), system=system)
        ids = self.lm.tokenizer.encode(text + "Option (", bos=True)[-(self.lm.max_seq_len - 1):]
        with torch.no_grad():
            logits = self.lm.logits([ids])[0, -1].float()
        allowed = ("a", "b", "c") if r.collaborative else ("a", "b")
        return max(allowed, key=lambda k: (float(logits[self._letters[k]]), k == "a"))

    def _policy(self):
        choice = self._choose()
        self.choices.append(choice)
        self.turn += 1
        r = self.res
        if choice == "c" and self._can_pay(r.asking_cost):
            if self.known is None:
                return {"type": "ask", "question": {"kind": "location"}}
            if self.fix is None:
                return {"type": "ask", "question": {"kind": "fix", "path": self.known[0], "qualname": self.known[1]}}
        if choice in ("b", "c") and self._can_pay(r.coding_cost):
            if self.fix is not None and self.known:
                fix, self.fix = self.fix, None
                return {"type": "propose", "path": self.known[0], "qualname": self.known[1], "source": fix}
            a = self._propose_next()
            if a:
                return a
        a = self._explore()
        return a if a else {"type": "run_tests"}
