"""Ray Serve app: DPSDP's multi-turn refinement (answer, critique, refine) of a trained policy, over HTTP.

``serve run rayml.actors.serve.refine:app`` serves the cached DPSDP policy of the substrate model
(Yuan & Xie, ICML 2025; ``rayml.alignment.dpsdp``, ``rayml.alignment.dpsdp_policy``): the actor
answers, the critic writes feedback on the last answer (``"ok"`` or ``"x<k>"``, the first wrong
digit), the actor refines, for ``turns`` answers, greedily; the majority vote over the answers
is DPSDP's inference rule (ties: the most recent answer). Sums are written least-significant
digit first, as the substrate learnt them (``"317+845="`` -> ``"2611"``). Two routes:

* ``POST /refine`` ``{"questions": ["317+845=", ...], "turns": 5}`` -> ``{"results": [{"question",
  "answers": [turn 1 .. turn T], "feedback": [after turn 1 .. T-1], "majority", "final"}, ...],
  "turns", "system"}``: ``rayml.alignment.dpsdp.refine`` on the batch of questions and
  ``majority_vote`` per question (``final`` is the last turn's answer).
* ``GET /policy``: the policy's metadata (system, recipe, beta, lr, seed, DPO steps, pairs per
  turn, the base checkpoint's sha256) and the request limits.

The deployment's ``policy`` is ``"dpsdp"`` (the default: ``cached_policy`` of ``size`` and
``seed``, with ``rayml.alignment.dpsdp_policy``'s ``DEFAULT_BETA`` and ``DEFAULT_LR``, the quick
record's choice, unless trained otherwise), ``"reference"`` (the SFT warm-up of
``size``'s recipe: DPSDP's reference system, one model in both roles) or the path of a ``.npz``
written by ``save_policy``. A replica never trains for minutes by default: a policy or warm-up
that is not cached fails the replica at startup with the command that makes it
(``python -m rayml.alignment.dpsdp_policy --size quick``, with ``--reference`` for the warm-up);
``train_if_missing=True`` trains it inside the replica instead (seconds at ``size="tiny"``).
Another policy from the command line: ``serve run rayml.actors.serve.refine:app_builder
policy=reference`` (``size=``, ``seed=``, ``train_if_missing=true``, or ``policy=/path/to/p.npz``).

Questions are the substrate's refinement questions: printable ASCII ending in ``=`` without
``|`` (which separates the fields of the refinement state), e.g. ``"317+845="``, ``"rev:1234="``,
``"sort:3141="``; 1 to ``MAX_QUESTIONS`` per request, ``turns`` 1 to ``MAX_TURNS``.

Errors (a FastAPI ingress; OpenAPI at ``/openapi.json``): a body that fails ``RefineRequest``
(an unknown field, too many or no questions, an empty or malformed question, bad ``turns``) ->
422 naming the field; a question over ``MAX_QUESTION_TOKENS`` tokens (its refinement state adds
the answer and the feedback within the model's context) or a body over 64 KiB -> 413. Work runs
off the event loop (one refinement at a time per replica, at most 8 requests in flight); the
replica stays up.
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
import threading

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator
from ray import serve

from rayml.actors.serve.http import SHUTDOWN_POLL_S, make_api

__all__ = ["RefineServer", "RefineRequest", "app", "api", "build", "app_builder", "check_question", "MAX_QUESTIONS",
           "MAX_TURNS", "MAX_QUESTION_CHARS", "MAX_QUESTION_TOKENS", "MAX_BODY"]

MAX_QUESTIONS = 32
MAX_TURNS = 8
MAX_QUESTION_CHARS = 1024  # a longer string fails the request model (422)
MAX_QUESTION_TOKENS = 128  # a longer question is a 413 (bounded work per request)
MAX_BODY = 64 * 1024
_SEPARATOR = "|"


def check_question(q: str) -> str:
    """``q`` if it has the substrate's refinement-question format (printable ASCII ending in
    ``=``, no ``|``), else ``ValueError`` saying what is wrong."""
    if not q:
        raise ValueError("a question must not be empty")
    if not all(" " <= c <= "~" for c in q):
        raise ValueError(f"a question must be printable ASCII (the substrate's format, e.g. '317+845='), "
                         f"got {q[:40]!r}")
    if _SEPARATOR in q:
        raise ValueError(f"a question must not contain {_SEPARATOR!r} (it separates the refinement state's fields)")
    if not q.endswith("="):
        raise ValueError(f"a question must end with '=' (the substrate's format, e.g. '317+845='), got {q[:40]!r}")
    return q


class RefineRequest(BaseModel):
    """Questions to refine and the number of answers (turns) per question."""

    model_config = ConfigDict(extra="forbid")
    questions: list[StrictStr] = Field(min_length=1, max_length=MAX_QUESTIONS,
                                       description="the substrate's questions, e.g. '317+845='")
    turns: StrictInt = Field(5, ge=1, le=MAX_TURNS, description="answers per question: 1 first answer + turns-1 "
                                                                 "refinements")

    @field_validator("questions")
    @classmethod
    def _questions(cls, v):
        for i, q in enumerate(v):
            if len(q) > MAX_QUESTION_CHARS:
                raise ValueError(f"question {i} has {len(q)} characters; at most {MAX_QUESTION_CHARS}")
            try:
                check_question(q)
            except ValueError as exc:
                raise ValueError(f"question {i}: {exc}") from None
        return v


class QuestionAnswer(BaseModel):
    question: str
    answers: list[str]
    feedback: list[str]
    majority: str
    final: str


class RefineAnswer(BaseModel):
    results: list[QuestionAnswer]
    turns: int
    system: str


api = make_api("rayml refine: DPSDP multi-turn refinement (actor answers, critic critiques, actor refines)",
               max_body_bytes=MAX_BODY)


def _load(policy: str, size: str, seed: int, train_if_missing: bool):
    from rayml.alignment import dpsdp_policy as P

    if policy == "dpsdp":
        return P.cached_policy(size=size, seed=seed, train_if_missing=train_if_missing), "dpsdp"
    if policy == "reference":
        return P.reference_policy(size=size, train_if_missing=train_if_missing), "reference"
    return P.load_policy(policy), policy


@serve.deployment(max_ongoing_requests=8, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class RefineServer:
    """The deployment: the policy's actor and critic loaded once; refinement of request batches.

    Args:
        policy: ``"dpsdp"`` (the cached trained policy), ``"reference"`` (the SFT warm-up) or the
            path of a saved policy ``.npz``.
        size, seed: which cached policy / warm-up (the dpsdp experiment's recipe); ignored for a path.
        train_if_missing: train an absent cached policy or warm-up in the replica (default: fail
            at startup with the command that makes it).
    """

    def __init__(self, policy: str = "dpsdp", size: str = "quick", seed: int = 0, train_if_missing: bool = False):
        from rayml import runtime
        from rayml.alignment import dpsdp as dp

        runtime.pin_threads(1)
        self.policy, self.source = _load(policy, size, seed, train_if_missing)
        self.actor, self.critic, self.tok = self.policy.models()
        self.fmt = dp.SUBSTRATE
        # the longest state a question goes into: <bos> question answer | feedback |r: , then an answer
        self.overhead = (1 + 2 * self.fmt.answer_tokens + self.fmt.feedback_tokens + len(self.tok.encode("||r:")))
        self.max_tokens = min(MAX_QUESTION_TOKENS, self.actor.config.max_seq_len - self.overhead)
        self.lock = threading.Lock()

    def _refine(self, req: dict) -> dict:
        from rayml.alignment import dpsdp as dp

        for i, q in enumerate(req["questions"]):
            n = len(self.tok.encode(q))
            if n > self.max_tokens:
                raise HTTPException(413, f"'questions.{i}' spans {n} tokens; a question may span at most "
                                         f"{self.max_tokens} (its refinement state adds up to {self.overhead} tokens "
                                         f"of answer and feedback within the {self.actor.config.max_seq_len}-token "
                                         f"context)")
        with self.lock:
            ro = dp.refine(self.actor, self.critic, self.tok, req["questions"], turns=req["turns"], fmt=self.fmt)
        results = [{"question": q, "answers": a, "feedback": f, "majority": dp.majority_vote(a), "final": a[-1]}
                   for q, a, f in zip(req["questions"], ro.answers, ro.feedback)]
        return {"results": results, "turns": req["turns"], "system": self.policy.system}

    @api.post("/refine", response_model=RefineAnswer)
    async def refine(self, request: RefineRequest) -> dict:
        return await asyncio.to_thread(self._refine, request.model_dump())  # HTTPException: 413

    @api.get("/policy")
    async def policy_info(self) -> dict:
        """The policy's metadata and the request limits."""
        m = self.policy.meta
        return {"source": self.source, "system": m["system"], "beta": m.get("beta"), "lr": m.get("lr"),
                "seed": m.get("seed"), "size": m.get("size"), "recipe": m.get("recipe"), "steps": m.get("steps"),
                "pairs": m.get("pairs"), "base_sha256": m.get("base_sha256"), "note": m.get("note"),
                "limits": {"max_questions": MAX_QUESTIONS, "max_turns": MAX_TURNS,
                           "max_question_tokens": self.max_tokens}}


def build(policy: str = "dpsdp", size: str = "quick", seed: int = 0, train_if_missing: bool = False):
    """The app serving ``policy`` (``"dpsdp"``, ``"reference"`` or a saved ``.npz`` path); arguments
    are checked here, the policy is loaded by the replica."""
    import os

    from rayml.alignment.dpsdp_pipeline import SIZES

    if not isinstance(policy, (str, os.PathLike)) or not str(policy):
        raise ValueError(f"policy must be 'dpsdp', 'reference' or the path of a saved .npz, got {policy!r}")
    policy = str(policy)
    if policy not in ("dpsdp", "reference") and not policy.endswith(".npz"):
        raise ValueError(f"policy must be 'dpsdp', 'reference' or the path of a saved .npz, got {policy!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {tuple(SIZES)}, got {size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not isinstance(train_if_missing, bool):
        raise ValueError(f"train_if_missing must be a bool, got {train_if_missing!r}")
    return RefineServer.bind(policy, size, seed, train_if_missing)


def app_builder(args: dict):
    """``build`` from ``serve run``'s ``key=value`` arguments (strings), e.g.
    ``serve run rayml.actors.serve.refine:app_builder policy=reference size=tiny``."""
    if not isinstance(args, dict):
        raise ValueError(f"args must be a dict of strings, got {type(args).__name__}")
    unknown = set(args) - {"policy", "size", "seed", "train_if_missing"}
    if unknown:
        raise ValueError(f"unknown arguments {sorted(unknown)}; known: policy, size, seed, train_if_missing")
    seed = str(args.get("seed", "0"))
    if not seed.isdigit():
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    flag = str(args.get("train_if_missing", "false")).lower()
    if flag not in ("true", "false"):
        raise ValueError(f"train_if_missing must be true or false, got {flag!r}")
    return build(policy=str(args.get("policy", "dpsdp")), size=str(args.get("size", "quick")), seed=int(seed),
                 train_if_missing=flag == "true")


app = build()
