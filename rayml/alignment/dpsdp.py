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

Examples:
    >>> oracle_feedback("1234", "1244")
    'x2'
    >>> majority_vote(["12", "13", "13", "12"])    # tie: the most recent of the tied answers
    '12'
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from rayml.alignment.dpo import TokenPair
from rayml.llm import tasks as _tasks
from rayml.llm.generation import generate
from rayml.llm.model import TransformerLM

__all__ = ["actor_prompt", "critic_prompt", "refine_prompt", "oracle_feedback", "majority_vote", "Rollout",
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


def _gen(model: TransformerLM, tok, prompts: Sequence[str], max_new: int, temperature: float,
         seed: int | None) -> list[str]:
    ids = [tok.encode(p, bos=True) for p in prompts]
    out = generate(model, ids, max_new_tokens=max_new, eos_id=tok.eos_id, pad_id=tok.pad_id,
                   temperature=temperature, seed=seed)
    return [tok.decode(o) for o in out.tokens]


@dataclass
class Rollout:
    """A refinement episode per question: ``answers[i][t]`` and ``feedback[i][t]`` (after answer t)."""

    answers: list
    feedback: list


@torch.no_grad()
def refine(actor: TransformerLM, critic: TransformerLM, tok, questions: Sequence[str], *, turns: int = 5,
           max_answer: int = 8, temperature: float = 0.0, seed: int | None = None) -> Rollout:
    """Run the MDP: first answer, then ``turns - 1`` rounds of feedback and refinement (batched)."""
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ValueError(f"turns must be a positive integer, got {turns!r}")
    if not questions:
        raise ValueError("questions must not be empty")
    rng = np.random.default_rng(seed)

    def s():
        return None if seed is None else int(rng.integers(2**31))

    answers = [[a] for a in _gen(actor, tok, [actor_prompt(q) for q in questions], max_answer, temperature, s())]
    feedback: list = [[] for _ in questions]
    for _ in range(turns - 1):
        last = [a[-1] for a in answers]
        fb = _gen(critic, tok, [critic_prompt(q, a) for q, a in zip(questions, last)], 4, temperature, s())
        new = _gen(actor, tok, [refine_prompt(q, a, f) for q, a, f in zip(questions, last, fb)], max_answer,
                   temperature, s())
        for i in range(len(questions)):
            feedback[i].append(fb[i])
            answers[i].append(new[i])
    return Rollout(answers, feedback)


def refine_metrics(rollout: Rollout, items: Sequence[_tasks.Item]) -> dict:
    """pass@turn1, maj@turnT (majority vote over the T answers), pass@turnT, and accuracy per turn."""
    if len(rollout.answers) != len(items):
        raise ValueError("rollout and items must have the same length")
    correct = np.array([[_tasks.score(it, a) for a in ans] for it, ans in zip(items, rollout.answers)])
    maj = np.array([_tasks.score(it, majority_vote(ans)) for it, ans in zip(items, rollout.answers)])
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
def collect_pairs(actor: TransformerLM, critic: TransformerLM, tok, items: Sequence[_tasks.Item], *,
                  n_candidates: int = 4, mc_rollouts: int = 1, temperature: float = 1.0, max_answer: int = 8,
                  seed: int = 0) -> StatePairs:
    """Algorithm 1's data collection under the reference system (``actor``, ``critic``) for ``items``.

    States come from one reference trajectory ``(x, a_0, a_1)`` per question; at each state
    ``n_candidates`` actions are drawn from the reference and ranked by their Q estimate.
    """
    for name, v in (("n_candidates", n_candidates), ("mc_rollouts", mc_rollouts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if n_candidates < 2:
        raise ValueError(f"n_candidates must be >= 2 to form a pair, got {n_candidates}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for sampling candidates, got {temperature!r}")
    rng = np.random.default_rng(seed)

    def s():
        return int(rng.integers(2**31))

    qs = [it.prompt for it in items]
    n = n_candidates
    # the reference trajectory (x, a_0, a_1)
    a0 = _gen(actor, tok, [actor_prompt(q) for q in qs], max_answer, temperature, s())
    a1 = _gen(critic, tok, [critic_prompt(q, a) for q, a in zip(qs, a0)], 4, temperature, s())
    # s_0: candidate first answers, Q = correctness
    c0 = _gen(actor, tok, [actor_prompt(q) for q in qs for _ in range(n)], max_answer, temperature, s())
    q0 = np.array([_tasks.score(items[i // n], c) for i, c in enumerate(c0)]).reshape(-1, n)
    # s_1: candidate feedback, Q = MC estimate of the reference actor's refinement
    c1 = _gen(critic, tok, [critic_prompt(q, a) for q, a in zip(qs, a0) for _ in range(n)], 4, temperature, s())
    m = mc_rollouts
    ref_prompts = [refine_prompt(qs[i // n], a0[i // n], f) for i, f in enumerate(c1) for _ in range(m)]
    refined = _gen(actor, tok, ref_prompts, max_answer, temperature, s())
    q1 = np.array([_tasks.score(items[j // (n * m)], r) for j, r in enumerate(refined)]).reshape(-1, n, m).mean(2)
    # s_2: candidate refinements, Q = correctness
    c2 = _gen(actor, tok, [refine_prompt(q, a, f) for q, a, f in zip(qs, a0, a1) for _ in range(n)],
              max_answer, temperature, s())
    q2 = np.array([_tasks.score(items[i // n], c) for i, c in enumerate(c2)]).reshape(-1, n)

    def pairs(states, cands, q):
        out = []
        for i, st in enumerate(states):
            row = q[i]
            hi, lo = int(np.argmax(row)), int(np.argmin(row))
            if row[hi] > row[lo] and cands[i * n + hi] != cands[i * n + lo]:
                out.append((st, cands[i * n + hi], cands[i * n + lo]))
        return out

    d0 = pairs([actor_prompt(q) for q in qs], c0, q0)
    d1 = pairs([critic_prompt(q, a) for q, a in zip(qs, a0)], c1, q1)
    d2 = pairs([refine_prompt(q, a, f) for q, a, f in zip(qs, a0, a1)], c2, q2)
    return StatePairs(d0, d1, d2, {"q0": float(q0.mean()), "q1": float(q1.mean()), "q2": float(q2.mean())})


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


__all__ += ["encode_state_pairs"]
