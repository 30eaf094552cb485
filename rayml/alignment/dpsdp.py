"""DPSDP: an actor and a critic refine answers turn by turn, trained by per-turn DPO on self-generated pairs.

Yuan & Xie, "Reinforce LLM Reasoning through Multi-Agent Reflection" (ICML 2025). Multi-turn
refinement is an MDP of horizon ``H = 2L + 1``: the actor answers (``a_0``), the critic gives
feedback (``a_1``), the actor refines (``a_2``), ... with reward 1[answer correct] at actor turns.
DPSDP (Direct Policy Search by Dynamic Programming, after PSDP) solves, for every turn ``h``,
the KL-regularised step ``pi_h = argmax E_{s_h ~ d^h_ref, a ~ pi}[Q(s_h, a)] - beta KL(pi || pi_ref)``
with the DPO loss on pairs of actions ranked by their Q estimate (paper Sec. 3-4; Algorithm 1):

* **Data** (``collect_pairs``): roll the *reference* system (the SFT actor and critic) out from
  each training question at temperature 1: ``(x, a_0, a_1)``. At each state ``s_0 = x``,
  ``s_1 = (x, a_0)``, ``s_2 = (x, a_0, a_1)`` draw ``n`` candidate actions from the reference
  ("restarts" from the reference's states), estimate each one's Q, and keep (highest, lowest)
  as (chosen, rejected) when they differ.
* **Q estimates** (practical version of the paper): ``a_0`` and ``a_2`` by their own correctness;
  the critic's feedback ``a_1`` by Monte-Carlo rollouts of the reference actor's refinement
  (``mc_rollouts`` samples; the paper uses one) scored by the verifier.
* **Markovian reduced state**: a turn sees only the question, the last answer and the feedback on
  it (``actor_prompt``/``critic_prompt``/``refine_prompt``), so a system trained on one
  refinement step runs any number of turns.
* **Training**: one DPO run for the actor on ``D_0 u D_2`` and one for the critic on ``D_1``
  (two agents); the single-agent ablation trains one model on ``D_0 u D_1 u D_2`` for both roles.
* **Inference** (``refine``): ``turns`` answers (first answer + ``turns - 1`` refinements),
  greedy; metrics pass@turn1, majority vote over the answers (maj@turn5), pass@turn5.

Feedback language on the substrate (assumed: the paper's critic writes free text): ``"ok"`` or
``"x<k>"``, the position of the first wrong digit of the (reversed) sum. The SFT warm-up (the
paper distils a stronger model's feedback and refinements) is taught here by an oracle built on
the verifier (``oracle_feedback``). Majority-vote ties go to the most recent answer (assumed).

A ``Format`` writes the three states for a kind of model: ``SUBSTRATE`` (the formats above) or
``TEXT`` (a pretrained chat model such as SmolLM2-135M on ``rayml.alignment.text_tasks`` questions:
the critic writes free-text feedback after ``"The proposed answer is"``; the answer carried into the
next state and voted on is the reply's first integer). Greedy ``refine`` generates each distinct
state once: with the Markovian state an answer repeated by a refinement is a fixed point.

Examples:
    >>> oracle_feedback("1234", "1244")
    'x2'
    >>> majority_vote(["12", "13", "13", "12"])    # tie: the most recent of the tied answers
    '12'
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from rayml.alignment.dpo import TokenPair
from rayml.llm import tasks as _tasks
from rayml.llm.generation import generate
from rayml.llm.model import TransformerLM

__all__ = ["Format", "SUBSTRATE", "actor_prompt", "critic_prompt", "refine_prompt", "oracle_feedback", "majority_vote",
           "Rollout",
           "refine", "refine_metrics", "collect_pairs", "sft_examples", "StatePairs", "ROLES"]

ROLES = ("actor", "critic")


def actor_prompt(question: str) -> str:
    """State ``s_0``: the question (``"317+845="``)."""
    return question


def critic_prompt(question: str, answer: str) -> str:
    """State of a critic turn: the question and the last answer."""
    return f"{question}{answer}|c:"


def refine_prompt(question: str, answer: str, feedback: str) -> str:
    """State of a refining actor turn: question, last answer, feedback (the Markovian reduced state)."""
    return f"{question}{answer}|{feedback}|r:"


def oracle_feedback(truth: str, answer: str) -> str:
    """The verifier's feedback: ``"ok"``, or ``"x<k>"`` with ``k`` the first position that differs."""
    if answer == truth:
        return "ok"
    k = next((i for i, (a, b) in enumerate(zip(answer, truth)) if a != b), min(len(answer), len(truth)))
    return f"x{k}"


def majority_vote(answers: Sequence[str]) -> str:
    """The most frequent answer; ties go to the most recent of the tied answers."""
    if not answers:
        raise ValueError("answers must not be empty")
    counts = Counter(answers)
    best = max(counts.values())
    return next(a for a in reversed(answers) if counts[a] == best)


@dataclass(frozen=True)
class Format:
    """How the roles' states are written for one kind of model and question (the MDP's observation).

    ``question(item)`` is what the prompts take (the substrate: the prompt string; plain text: the
    item); ``actor(q)``, ``critic(q, answer)``, ``refine(q, answer, feedback)`` are the states;
    ``extract(output)`` the answer carried into the next state and voted on; ``feedback(output)``
    the critic's text carried into the refinement state; ``score(item, answer)`` the verifier.
    """

    name: str
    question: Callable
    actor: Callable
    critic: Callable
    refine: Callable
    extract: Callable
    feedback: Callable
    score: Callable
    answer_tokens: int = 8
    feedback_tokens: int = 4


def _same(x: str) -> str:
    return x


SUBSTRATE = Format("substrate", lambda it: it.prompt, actor_prompt, critic_prompt, refine_prompt, _same, _same,
                   lambda it, a: _tasks.score(it, a), 8, 4)


def _gen(model: TransformerLM, tok, prompts: Sequence[str], max_new: int, temperature: float,
         seed: int | None, memo: dict | None = None) -> list[str]:
    """Generate for ``prompts``; greedy calls with a ``memo`` generate each distinct prompt once (a
    state seen before, in this batch or an earlier turn, gets the output it got then)."""
    if memo is None or temperature > 0:
        ids = [tok.encode(p, bos=True) for p in prompts]
        out = generate(model, ids, max_new_tokens=max_new, eos_id=tok.eos_id, pad_id=tok.pad_id,
                       temperature=temperature, seed=seed)
        return [tok.decode(o) for o in out.tokens]
    todo = list(dict.fromkeys(p for p in prompts if p not in memo))
    if todo:
        memo.update(zip(todo, _gen(model, tok, todo, max_new, temperature, seed)))
    return [memo[p] for p in prompts]


@dataclass
class Rollout:
    """A refinement episode per question: ``answers[i][t]`` and ``feedback[i][t]`` (after answer t)."""

    answers: list
    feedback: list


@torch.no_grad()
def refine(actor: TransformerLM, critic: TransformerLM, tok, questions: Sequence, *, turns: int = 5,
           max_answer: int | None = None, temperature: float = 0.0, seed: int | None = None,
           fmt: Format = SUBSTRATE) -> Rollout:
    """Run the MDP: first answer, then ``turns - 1`` rounds of feedback and refinement (batched).

    ``questions`` are what ``fmt`` takes (``fmt.question(item)``). Greedy runs generate each
    distinct state once: with the Markovian state, an answer repeated by a refinement is a fixed
    point, so the later turns cost nothing."""
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ValueError(f"turns must be a positive integer, got {turns!r}")
    if not questions:
        raise ValueError("questions must not be empty")
    if not isinstance(fmt, Format):
        raise TypeError(f"fmt must be a Format, got {type(fmt).__name__}")
    rng = np.random.default_rng(seed)
    n_ans = fmt.answer_tokens if max_answer is None else int(max_answer)
    memo_a: dict = {}
    memo_c: dict = {}

    def s():
        return None if seed is None else int(rng.integers(2**31))

    first = _gen(actor, tok, [fmt.actor(q) for q in questions], n_ans, temperature, s(), memo_a)
    answers = [[fmt.extract(a)] for a in first]
    feedback: list = [[] for _ in questions]
    for _ in range(turns - 1):
        last = [a[-1] for a in answers]
        fb = [fmt.feedback(f) for f in _gen(critic, tok, [fmt.critic(q, a) for q, a in zip(questions, last)],
                                            fmt.feedback_tokens, temperature, s(), memo_c)]
        new = _gen(actor, tok, [fmt.refine(q, a, f) for q, a, f in zip(questions, last, fb)], n_ans,
                   temperature, s(), memo_a)
        for i in range(len(questions)):
            feedback[i].append(fb[i])
            answers[i].append(fmt.extract(new[i]))
    return Rollout(answers, feedback)


def refine_metrics(rollout: Rollout, items: Sequence, fmt: Format = SUBSTRATE) -> dict:
    """pass@turn1, maj@turnT (majority vote over the T answers), pass@turnT, and accuracy per turn."""
    if len(rollout.answers) != len(items):
        raise ValueError("rollout and items must have the same length")
    correct = np.array([[fmt.score(it, a) for a in ans] for it, ans in zip(items, rollout.answers)])
    maj = np.array([fmt.score(it, majority_vote(ans)) for it, ans in zip(items, rollout.answers)])
    return {"pass1_turn1": float(correct[:, 0].mean()), "maj_turnT": float(maj.mean()),
            "pass1_turnT": float(correct.max(1).mean()), "per_turn": correct.mean(0).tolist(),
            "per_item_turn1": correct[:, 0].tolist(), "per_item_maj": maj.tolist()}


@dataclass
class StatePairs:
    """Preference pairs per turn (``d0``: first answers, ``d1``: feedback, ``d2``: refinements) as
    ``(state prompt, chosen, rejected)`` strings, and the mean Q of every state's candidates."""

    d0: list
    d1: list
    d2: list
    q_means: dict


@torch.no_grad()
def collect_pairs(actor: TransformerLM, critic: TransformerLM, tok, items: Sequence, *,
                  n_candidates: int = 4, mc_rollouts: int = 1, temperature: float = 1.0, max_answer: int | None = None,
                  seed: int = 0, fmt: Format = SUBSTRATE) -> StatePairs:
    """Algorithm 1's data collection under the reference system (``actor``, ``critic``) for ``items``.

    States come from one reference trajectory ``(x, a_0, a_1)`` per question; at each state
    ``n_candidates`` actions are drawn from the reference and ranked by their Q estimate. The
    actions in the pairs are the generated texts; the states carry ``fmt.extract``-ed answers.
    """
    for name, v in (("n_candidates", n_candidates), ("mc_rollouts", mc_rollouts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if n_candidates < 2:
        raise ValueError(f"n_candidates must be >= 2 to form a pair, got {n_candidates}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for sampling candidates, got {temperature!r}")
    if not isinstance(fmt, Format):
        raise TypeError(f"fmt must be a Format, got {type(fmt).__name__}")
    rng = np.random.default_rng(seed)
    n_ans, n_fb = (fmt.answer_tokens if max_answer is None else int(max_answer)), fmt.feedback_tokens

    def s():
        return int(rng.integers(2**31))

    def sc(i, out):
        return fmt.score(items[i], fmt.extract(out))

    qs = [fmt.question(it) for it in items]
    n = n_candidates
    # the reference trajectory (x, a_0, a_1)
    a0 = [fmt.extract(a) for a in _gen(actor, tok, [fmt.actor(q) for q in qs], n_ans, temperature, s())]
    a1 = [fmt.feedback(f) for f in _gen(critic, tok, [fmt.critic(q, a) for q, a in zip(qs, a0)], n_fb, temperature,
                                        s())]
    # s_0: candidate first answers, Q = correctness
    c0 = _gen(actor, tok, [fmt.actor(q) for q in qs for _ in range(n)], n_ans, temperature, s())
    q0 = np.array([sc(i // n, c) for i, c in enumerate(c0)]).reshape(-1, n)
    # s_1: candidate feedback, Q = MC estimate of the reference actor's refinement
    c1 = _gen(critic, tok, [fmt.critic(q, a) for q, a in zip(qs, a0) for _ in range(n)], n_fb, temperature, s())
    m = mc_rollouts
    ref_prompts = [fmt.refine(qs[i // n], a0[i // n], fmt.feedback(f)) for i, f in enumerate(c1) for _ in range(m)]
    refined = _gen(actor, tok, ref_prompts, n_ans, temperature, s())
    q1 = np.array([sc(j // (n * m), r) for j, r in enumerate(refined)]).reshape(-1, n, m).mean(2)
    # s_2: candidate refinements, Q = correctness
    c2 = _gen(actor, tok, [fmt.refine(q, a, f) for q, a, f in zip(qs, a0, a1) for _ in range(n)],
              n_ans, temperature, s())
    q2 = np.array([sc(i // n, c) for i, c in enumerate(c2)]).reshape(-1, n)

    def pairs(states, cands, q):
        out = []
        for i, st in enumerate(states):
            row = q[i]
            hi, lo = int(np.argmax(row)), int(np.argmin(row))
            if row[hi] > row[lo] and cands[i * n + hi] != cands[i * n + lo]:
                out.append((st, cands[i * n + hi], cands[i * n + lo]))
        return out

    d0 = pairs([fmt.actor(q) for q in qs], c0, q0)
    d1 = pairs([fmt.critic(q, a) for q, a in zip(qs, a0)], c1, q1)
    d2 = pairs([fmt.refine(q, a, f) for q, a, f in zip(qs, a0, a1)], c2, q2)
    return StatePairs(d0, d1, d2, {"q0": float(q0.mean()), "q1": float(q1.mean()), "q2": float(q2.mean())})


# ------------------------------------------------------------------------------------------
# plain-text questions for a pretrained chat model (SmolLM2-135M)

def text_critic_prompt(item, answer: str) -> str:
    """The critic's state for a plain-text question: the question, the proposed answer, and the
    start of a verdict that the critic's free-text feedback completes."""
    from rayml.alignment.text_tasks import chat_prompt

    return chat_prompt(f"{item.question} Proposed answer: {answer}. Is the proposed answer correct?") + \
        "The proposed answer is"


def text_refine_prompt(item, answer: str, feedback: str) -> str:
    """The refining actor's state: question, last answer, the critic's feedback, the answer's lead."""
    from rayml.alignment.text_tasks import chat_prompt

    return chat_prompt(f"{item.question} Proposed answer: {answer}. Feedback: the proposed answer is {feedback}. "
                       f"Answer again.") + item.lead


def text_extract(output: str) -> str:
    """The answer in a reply: its first integer, else the stripped first line (at most 24 characters)."""
    from rayml.alignment.text_tasks import _INT

    m = _INT.search(output)
    return m.group(0) if m else output.strip().split("\n")[0][:24]


def text_feedback(output: str) -> str:
    """The critic's feedback carried into the next state: the first line, stripped, without a final period."""
    return output.strip().split("\n")[0].rstrip(".").strip()


def _text_score(item, answer: str) -> float:
    from rayml.alignment.text_tasks import score

    return score(item, answer)


def _text_actor(item) -> str:
    from rayml.alignment.text_tasks import prompt_text

    return prompt_text(item)


TEXT = Format("text", _same, _text_actor, text_critic_prompt, text_refine_prompt, text_extract, text_feedback,
              _text_score, 6, 5)


def encode_state_pairs(pairs: Sequence[tuple], tok) -> list[TokenPair]:
    """``TokenPair``s of ``(state, chosen, rejected)`` strings (``<bos>`` state, response ``<eos>``)."""
    return [TokenPair(tok.encode(s, bos=True), tok.encode(c) + [tok.eos_id], tok.encode(r) + [tok.eos_id])
            for s, c, r in pairs]


def sft_examples(items: Sequence[_tasks.Item], rng: np.random.Generator) -> list[tuple[str, str]]:
    """The warm-up data (the paper distils a stronger model; here the verifier's oracle): per item
    a first answer, a critique of a correct or a near-miss answer, and a refinement of it."""
    from rayml.alignment.preference import near_miss

    out = []
    for it in items:
        out.append((actor_prompt(it.prompt), it.answer))
        shown = it.answer if rng.random() < 0.3 else near_miss(it, rng)
        fb = oracle_feedback(it.answer, shown)
        out.append((critic_prompt(it.prompt, shown), fb))
        out.append((refine_prompt(it.prompt, shown, fb), it.answer))
    return out


def train_agents(reference: TransformerLM, tok, pairs: StatePairs, *, beta: float = 0.5, lr: float = 1e-4,
                 steps: int = 30, batch_size: int = 16, seed: int = 0, single_agent: bool = False,
                 trainer: Callable | None = None) -> tuple[TransformerLM, TransformerLM, int]:
    """DPSDP's training step (Algorithm 1, practical version): per-turn DPO against ``reference``.

    Two agents (the default): the actor trained by DPO on ``D_0 u D_2``, the critic on ``D_1``,
    the ``steps`` optimizer steps split between them in proportion to their pairs (the actor with
    ``seed``, the critic with ``seed + 1``); ``single_agent=True``: the paper's ablation, one model
    on ``D_0 u D_1 u D_2`` for both roles for all ``steps``. A role without pairs (or without
    steps) stays at the reference. ``trainer(token_pairs, steps, seed)`` replaces the full
    fine-tuning DPO run (``rayml.alignment.dpo.train_dpo`` at ``beta``, ``lr``, ``batch_size``,
    length-grouped batches), e.g. by a LoRA one.

    Returns ``(actor, critic, steps_used)`` (the same model twice for the single agent).
    """
    from rayml.alignment import dpo

    if not isinstance(pairs, StatePairs):
        raise TypeError(f"pairs must be StatePairs (collect_pairs' result), got {type(pairs).__name__}")
    for name, v in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    for name, v in (("beta", beta), ("lr", lr)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a number > 0, got {v!r}")

    def full(tp, n, s):
        cfg = dpo.DPOConfig(beta=float(beta), lr=float(lr), steps=max(1, n), batch_size=int(batch_size),
                            length_grouped=True)
        return dpo.train_dpo(reference, tp, cfg, seed=s, reference=reference, pad_id=tok.pad_id).model

    train = trainer or full
    actor_pairs = encode_state_pairs(pairs.d0 + pairs.d2, tok)
    critic_pairs = encode_state_pairs(pairs.d1, tok)
    if single_agent:
        both = actor_pairs + critic_pairs
        if not both:
            return reference, reference, 0
        m = train(both, steps, seed)
        return m, m, steps
    n_a, n_c = len(actor_pairs), len(critic_pairs)
    if n_a + n_c == 0:
        return reference, reference, 0
    steps_a = int(round(steps * n_a / (n_a + n_c)))
    steps_c = steps - steps_a
    actor = train(actor_pairs, steps_a, seed) if n_a and steps_a else reference
    critic = train(critic_pairs, steps_c, seed + 1) if n_c and steps_c else reference
    return actor, critic, (steps_a if n_a and steps_a else 0) + (steps_c if n_c and steps_c else 0)


def own_answer_examples(items: Sequence[_tasks.Item], answers: Sequence[str],
                        rng: np.random.Generator) -> tuple[list[tuple[str, str]], dict]:
    """The critic's and the refining actor's warm-up on the policy's own answers (the paper
    distils a stronger model's critiques of the policy's answers; here the verifier's oracle).

    ``answers[i]`` is an answer the policy itself gave to ``items[i]`` (sampled). The correct and
    the wrong answers are balanced: the larger group is subsampled (without replacement) to the
    smaller's size, so the critic sees as many ``"ok"`` as ``"x<k>"`` targets; when one group is
    empty every answer is kept. Per kept answer: the critique ``(critic_prompt, oracle_feedback)``
    and the refinement ``(refine_prompt, truth)`` (after ``"ok"`` the truth is the answer itself).

    Returns ``(examples, counts)`` with ``counts = {"ok", "wrong", "kept_per_group"}``.

    Examples:
        >>> it = _tasks.make_items("add", 1, 0, digits=3)[0]
        >>> ex, n = own_answer_examples([it, it, it], [it.answer, "0", "1"], np.random.default_rng(0))
        >>> n, sorted(t for _, t in ex if not t.isdigit() or t == "ok")
        ({'ok': 1, 'wrong': 2, 'kept_per_group': 1}, ['ok', 'x0'])
    """
    if len(items) != len(answers):
        raise ValueError(f"items and answers must have the same length, got {len(items)} and {len(answers)}")
    ok = [(it, a) for it, a in zip(items, answers) if _tasks.score(it, a) == 1.0]
    wrong = [(it, a) for it, a in zip(items, answers) if _tasks.score(it, a) != 1.0]
    n = min(len(ok), len(wrong))
    counts = {"ok": len(ok), "wrong": len(wrong), "kept_per_group": n}
    if n:
        ok = [ok[i] for i in sorted(rng.choice(len(ok), n, replace=False))]
        wrong = [wrong[i] for i in sorted(rng.choice(len(wrong), n, replace=False))]
    out = []
    for it, a in ok + wrong:
        fb = oracle_feedback(it.answer, a)
        out += [(critic_prompt(it.prompt, a), fb), (refine_prompt(it.prompt, a, fb), it.answer)]
    return out, counts


__all__ += ["train_agents", "own_answer_examples", "encode_state_pairs", "TEXT", "text_critic_prompt", "text_refine_prompt", "text_extract",
            "text_feedback"]
