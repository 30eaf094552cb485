"""MERGE^3: Extract, Estimate, Evolve, with populations evaluated on a resilient Ray actor pool.

"MERGE^3: Efficient Evolutionary Merging on Consumer-grade GPUs" (Mencattini et al., ICML 2025;
the authors' library ``tommasomncttn/mergenetic``):

1. **Extract** (``extract``): a reduced evaluation set of ``n`` items out of a task's ``N``. The
   paper's runs draw them uniformly at random and weight each by ``1/n``
   (``method="random"``); ``method="irt-clustering"`` is tinyBenchmarks' anchor alternative
   (k-means on the items' IRT parameters ``[a_j, b_j]``, the item nearest each centroid, weighted
   by its cluster's share of the items).
2. **Estimate** (``Merge3Estimator``, ``rayml.merging.irt``): item parameters from a 2PL fitted on a
   population of models, the endpoints' abilities on the full data, and a merged model's accuracy
   from its answers on the extracted items by mp-IRT or gmp-IRT, per task.
3. **Evolve** (``evolve``): pymoo's GA (single objective; ``IntegerRandomSampling``, ``SBX``,
   ``PM``, duplicate elimination, as in the authors' configs) or NSGA-II (multi-objective, one
   objective per task), fitness ``-estimated accuracy``. Genomes (``GenomeSpace``):
   ``"slerp"``: 11 genes in ``0..10`` read as ``t = x / 10`` (5 self-attention anchors, 5 MLP
   anchors spread over the layers, 1 for the rest) interpolating endpoint 0 (``t = 0``) to
   endpoint 1; ``"dare_ties"``: a (weight, density) pair per endpoint (all weights first, then all
   densities) for DARE-TIES on the base model; ``"task_arithmetic"``: a weight per endpoint,
   ``base + sum_i w_i tau_i`` (the task-arithmetic baseline with ``w_i = lam``). A merge built on
   the base (DARE-TIES, task arithmetic) has its ability fitted over the base's ability too
   (``Merge3Estimator.base_theta``).

The Ray part: ``MergeEvaluator`` actors load the base and endpoint checkpoints once; a generation is
``ResilientActorPool.map`` over genomes only (each actor merges, answers the requested item set and
returns the correctness vector), so an actor that dies mid-generation is restarted in place by Ray
(a new one only once its restart budget is spent) and its genomes rerun with no result lost. ``evolve`` writes a checkpoint (the pickled pymoo algorithm with its
random state, every scored genome's answers, the history) after every generation; a stopped run
resumes from it and re-evaluates nothing it already scored (a genome proposed again, in any
generation, is answered from that cache too).

Assumed: a "forward pass" is one item answered by one model (prompt prefill plus a greedy decode
of a few tokens), the unit of the paper's fitness-cost ratio; DARE's random masks are seeded from
the run seed and the genome, so one genome is one model on any worker; DARE-TIES densities are
clipped to ``[0.01, 1]``; the single-objective fitness over several tasks is the item-weighted
mean of the per-task estimates.

Examples:
    >>> space = GenomeSpace("slerp", n_endpoints=2, n_layers=4)
    >>> space.n_var, space.bounds
    (11, (0.0, 10.0))
    >>> a = extract(100, 10, seed=0)
    >>> a.indices.shape, float(a.weights.sum())
    ((10,), 1.0)
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from rayml import signed_pickle
from rayml.merging import irt as _irt

__all__ = [
    "Anchors",
    "extract",
    "Merge3Estimator",
    "GenomeSpace",
    "KINDS",
    "merge_genome",
    "genome_key",
    "MergeEvaluator",
    "make_pool",
    "pool_evaluate",
    "EvolveConfig",
    "EvolveResult",
    "evolve",
]


# --- Extract ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Anchors:
    """An extracted item set: ``indices`` into the full set and the ``weights`` of their answers."""

    indices: np.ndarray
    weights: np.ndarray


def extract(n_items: int, n: int, seed: int | np.random.Generator = 0, *, method: str = "random",
            A: np.ndarray | None = None, b: np.ndarray | None = None) -> Anchors:
    """The reduced set: ``n`` of ``n_items`` items (see the module docstring for ``method``)."""
    if isinstance(n_items, bool) or not isinstance(n_items, (int, np.integer)) or n_items < 1:
        raise ValueError(f"n_items must be a positive integer, got {n_items!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= n_items:
        raise ValueError(f"n must be an integer in [1, n_items={n_items}], got {n!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if method == "random":
        idx = np.sort(rng.choice(int(n_items), int(n), replace=False))
        return Anchors(idx, np.full(int(n), 1.0 / n))
    if method == "irt-clustering":
        if A is None or b is None or np.asarray(A).shape[0] != n_items:
            raise ValueError("method='irt-clustering' needs the item parameters A (n_items x D) and b")
        from scipy.cluster.vq import kmeans2

        emb = np.column_stack([np.asarray(A, float), np.asarray(b, float)])
        cent, lab = kmeans2(emb, int(n), seed=rng, minit="++")
        chosen, weights = [], []
        for c in range(int(n)):
            members = np.flatnonzero(lab == c)
            if members.size == 0:
                continue
            d = np.linalg.norm(emb[members] - cent[c], axis=1)
            chosen.append(int(members[np.argmin(d)]))
            weights.append(members.size / n_items)
        order = np.argsort(chosen)
        return Anchors(np.asarray(chosen)[order], np.asarray(weights)[order])
    raise ValueError(f"method must be 'random' or 'irt-clustering', got {method!r}")


# --- Estimate --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Merge3Estimator:
    """MERGE^3's fitness estimator over tasks (groups of items of the full set).

    Attributes:
        A, b: fitted item parameters of the full set (``(N, D)``, ``(N,)``).
        thetas: the endpoints' abilities (``(k, D)``).
        groups: task -> indices of its items in the full set.
        anchors: task -> its extracted ``Anchors`` (indices into the full set).
        mode: ``"gmp_irt"``, ``"mp_irt"`` or ``"mean"``.
        delta: gmp-IRT's blend.
        base_theta: the base model's ability (``(D,)``), for merges built on a base (DARE-TIES,
            task arithmetic): such a merge is the base plus weighted task vectors, so its ability is
            fitted as ``lambda_0 theta_base + sum_i lambda_i theta_i`` (``None``: endpoints only, as
            for SLERP, which has no base). Assumed: the issue's reading of the paper's
            ``theta_merge = sum_i lambda_i theta_i`` over "the models being merged".
    """

    A: np.ndarray
    b: np.ndarray
    thetas: np.ndarray
    groups: Mapping[str, np.ndarray]
    anchors: Mapping[str, Anchors]
    mode: str = "gmp_irt"
    delta: float = 0.5
    base_theta: np.ndarray | None = None

    def __post_init__(self):
        dims = np.asarray(self.A).shape[1]
        if self.base_theta is not None and np.asarray(self.base_theta).reshape(-1).shape[0] != dims:
            raise ValueError(f"base_theta must have dimension {np.asarray(self.A).shape[1]}")
        if self.mode not in ("gmp_irt", "mp_irt", "mean"):
            raise ValueError(f"mode must be 'gmp_irt', 'mp_irt' or 'mean', got {self.mode!r}")
        if set(self.groups) != set(self.anchors):
            raise ValueError("anchors must have one entry per group")
        for g, a in self.anchors.items():
            if not set(np.asarray(a.indices).tolist()) <= set(np.asarray(self.groups[g]).tolist()):
                raise ValueError(f"anchors of {g!r} must be items of that group")

    @property
    def items(self) -> np.ndarray:
        """The reduced set: every group's anchors, concatenated in group order (full-set indices)."""
        return np.concatenate([np.asarray(self.anchors[g].indices) for g in self.groups])

    @property
    def mix(self) -> list:
        """The abilities the merged ability is a combination of (base first when set)."""
        ts = [np.asarray(t, float).reshape(-1) for t in self.thetas]
        return ts if self.base_theta is None else [np.asarray(self.base_theta, float).reshape(-1), *ts]

    def estimate(self, y) -> dict[str, float]:
        """Per-task estimates and their item-weighted mean (``"all"``) from the answers ``y`` to
        ``self.items`` (in that order)."""
        y = np.asarray(y, float).reshape(-1)
        if y.shape[0] != self.items.shape[0]:
            raise ValueError(f"y must have one answer per extracted item ({self.items.shape[0]}), got {y.shape[0]}")
        out, start = {}, 0
        for g in self.groups:
            a = self.anchors[g]
            yg = y[start:start + len(a.indices)]
            start += len(a.indices)
            est = _irt.estimates(yg, self.A, self.b, a.indices, self.mix, weights=a.weights,
                                 population=self.groups[g], delta=self.delta)
            out[g] = est[self.mode]
        sizes = np.array([len(self.groups[g]) for g in self.groups], float)
        out["all"] = float(np.dot([out[g] for g in self.groups], sizes / sizes.sum()))
        return out


# --- Genomes ---------------------------------------------------------------------------------------

KINDS = ("slerp", "dare_ties", "task_arithmetic")

@dataclass(frozen=True)
class GenomeSpace:
    """A genome encoding (see the module docstring)."""

    kind: str
    n_endpoints: int
    n_layers: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "slerp" and self.n_endpoints != 2:
            raise ValueError(f"n_endpoints must be 2 for slerp, got {self.n_endpoints!r}")
        if isinstance(self.n_endpoints, bool) or not isinstance(self.n_endpoints, int) or self.n_endpoints < 1:
            raise ValueError(f"n_endpoints must be a positive integer, got {self.n_endpoints!r}")
        if isinstance(self.n_layers, bool) or not isinstance(self.n_layers, int) or self.n_layers < 1:
            raise ValueError(f"n_layers must be a positive integer, got {self.n_layers!r}")

    @property
    def n_var(self) -> int:
        """Number of genes."""
        if self.kind == "slerp":
            return 11
        return self.n_endpoints if self.kind == "task_arithmetic" else 2 * self.n_endpoints

    @property
    def bounds(self) -> tuple[float, float]:
        """Lower and upper bound of every gene."""
        return (0.0, 10.0) if self.kind == "slerp" else (0.0, 1.0)

    def random(self, n: int, seed: int | np.random.Generator) -> np.ndarray:
        """``n`` random genomes (integers for slerp, uniform for dare_ties)."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        if self.kind == "slerp":
            return rng.integers(0, 11, size=(n, self.n_var)).astype(float)
        return rng.random((n, self.n_var))

    def describe(self, x) -> dict:
        """The merge parameters a genome encodes."""
        x = np.asarray(x, float).reshape(-1)
        if x.shape[0] != self.n_var:
            raise ValueError(f"genome must have {self.n_var} genes, got {x.shape[0]}")
        if self.kind == "slerp":
            t = np.clip(x / 10.0, 0.0, 1.0)
            return {"attn": t[0:5].tolist(), "mlp": t[5:10].tolist(), "other": float(t[10])}
        k = self.n_endpoints
        if self.kind == "task_arithmetic":
            return {"weights": x[:k].tolist()}
        return {"weights": x[:k].tolist(), "densities": np.clip(x[k:], 0.01, 1.0).tolist()}


def genome_key(x) -> str:
    """A stable key of a genome (its float64 bytes)."""
    return hashlib.sha256(np.asarray(x, dtype=np.float64).reshape(-1).tobytes()).hexdigest()[:24]


def merge_genome(space: GenomeSpace, base: Mapping, endpoints: Sequence[Mapping], x, *, seed: int = 0) -> dict:
    """The merged state dict a genome encodes (SLERP of the two endpoints, DARE-TIES on ``base``, or
    task arithmetic ``base + sum_i w_i tau_i``)."""
    from rayml.merging import operators as merging

    if len(endpoints) != space.n_endpoints:
        raise ValueError(f"endpoints must have {space.n_endpoints} state dicts, got {len(endpoints)}")
    p = space.describe(x)
    if space.kind == "slerp":
        sched = merging.slerp_t_schedule(p["attn"], p["mlp"], p["other"], space.n_layers)
        return merging.slerp(endpoints[0], endpoints[1], sched)
    if space.kind == "task_arithmetic":
        return merging.task_arithmetic(base, endpoints, p["weights"])
    gseed = int(genome_key(x)[:12], 16) ^ int(seed)
    return merging.dare(base, endpoints, p["weights"], p["densities"], ties=True, seed=gseed)


# --- The Ray part: evaluator actors ----------------------------------------------------------------

class MergeEvaluator:
    """Holds the base and endpoint models (loaded once) and the item sets; answers genomes.

    Args:
        base: the base model's checkpoint, a ``rayml.llm.checkpoint.CheckpointBlob``, a Hugging Face
            Llama-family directory as ``rayml.merging.hf_endpoints.HFBlob`` (or a rayml checkpoint
            directory, on a single node: a path is node-local).
        endpoints: the endpoint models: full checkpoints likewise, or
            ``rayml.merging.hf_endpoints.LoraEndpoint`` adapters of the base.
        item_sets: name -> list of ``rayml.llm.tasks.Item`` or of text items
            (``rayml.alignment.text_tasks.TextItem``, asked in the chat format).
        seed: the run seed (DARE masks).
        threads: torch intra-op threads.
        batch_size: generation batch.
        device: torch device of the models and merges (default: cuda when this actor sees a GPU,
            i.e. when the pool gave it ``num_gpus``; else cpu).
    """

    def __init__(self, base, endpoints: Sequence, item_sets: Mapping[str, list], *,
                 seed: int = 0, threads: int = 1, batch_size: int = 64, device: str | None = None):
        import torch

        from rayml import runtime
        from rayml.llm.backends import EmbeddedLM
        from rayml.merging import hf_endpoints

        runtime.pin_threads(threads)
        torch.set_num_threads(max(1, int(threads)))
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, tok = hf_endpoints.load_model(base, device=device)
        self.base = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.endpoints = [hf_endpoints.endpoint_state(p, self.base, device=device) for p in endpoints]
        self.n_layers = int(model.config.n_layers)
        self.item_sets = {k: list(v) for k, v in item_sets.items()}
        self.seed, self.batch_size = int(seed), int(batch_size)
        self.model = model.eval()
        self.lm = EmbeddedLM(self.model, tok)

    def answer(self, job) -> np.ndarray:
        """``job = (genome kind, genome, item-set name)``: merge, answer the set greedily, return
        the correctness vector. Kind ``"base"`` (genome ignored) answers with the base, kind
        ``"endpoint"`` with endpoint ``int(genome)``."""
        import torch

        from rayml.merging import hf_endpoints

        kind, genome, set_name = job
        if set_name not in self.item_sets:
            raise ValueError(f"unknown item set {set_name!r}; known: {sorted(self.item_sets)}")
        if kind == "base":
            merged = self.base
        elif kind == "endpoint":
            merged = self.endpoints[int(genome)]
        else:
            space = GenomeSpace(kind, len(self.endpoints), self.n_layers)
            merged = merge_genome(space, self.base, self.endpoints, genome, seed=self.seed)
        with torch.no_grad():
            self.model.load_state_dict(merged)
            y = hf_endpoints.evaluate_items(self.lm, self.item_sets[set_name], batch_size=self.batch_size)
        return y

    def ping(self) -> int:
        """Liveness check; returns the process id."""
        return os.getpid()


def make_pool(base, endpoints: Sequence, item_sets: Mapping[str, list], *, actors: int = 2,
              seed: int = 0, num_cpus: float = 1, num_gpus: float = 0, actor_cls=None, **kwargs):
    """A ``ResilientActorPool`` of ``actors`` ``MergeEvaluator``s (``actor_cls``: a subclass;
    ``kwargs`` go to its constructor); ``num_gpus`` per actor (a fraction shares a GPU), each
    actor then merges and generates on its GPU."""
    import ray

    from rayml.actors.pool import ResilientActorPool

    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, float)) or num_gpus < 0:
        raise ValueError(f"num_gpus must be a number >= 0, got {num_gpus!r}")
    cls = actor_cls or MergeEvaluator
    # The models and item sets go into the object store once, as top-level references the pool keeps:
    # Ray resolves them for every constructor call, and a restarted actor (one killed for memory, say)
    # finds them still there (passed by value, Ray may free them after the first construction).
    return ResilientActorPool(cls, size=int(actors), num_cpus=num_cpus, num_gpus=num_gpus,
                              kwargs=dict(base=ray.put(base), endpoints=ray.put(list(endpoints)),
                                          item_sets=ray.put(dict(item_sets)), seed=seed,
                                          threads=max(1, int(num_cpus)), **kwargs))


def pool_evaluate(pool, kind: str, set_name: str) -> Callable[[np.ndarray], list]:
    """An ``evaluate`` for ``evolve``: genomes of ``kind`` -> correctness vectors on ``set_name``,
    one pool item per genome (only the genome travels)."""

    def evaluate(X: np.ndarray) -> list:
        return pool.map("answer", [(kind, np.asarray(x, float), set_name) for x in X])

    return evaluate


# --- Evolve ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EvolveConfig:
    """The search: ``algorithm`` ``"ga"`` (single objective) or ``"nsga2"`` (one objective per
    task), ``pop_size`` individuals, ``generations`` generations (the initial population is
    generation 1), ``seed``."""

    algorithm: str = "ga"
    pop_size: int = 8
    generations: int = 5
    seed: int = 0

    def __post_init__(self):
        if self.algorithm not in ("ga", "nsga2"):
            raise ValueError(f"algorithm must be 'ga' or 'nsga2', got {self.algorithm!r}")
        for name in ("pop_size", "generations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


@dataclass
class EvolveResult:
    """What ``evolve`` found.

    Attributes:
        X, F: the best genome(s) and their fitness (GA: one row; NSGA-II: the Pareto set).
        pop_X, pop_F: the final population and its fitness.
        history: one dict per generation (``generation``, ``best``, ``new_evaluations``).
        evaluations: genomes scored (each cost one model's answers to the item set).
        answers: genome key -> correctness vector (every scored genome).
        finished: False when the run stopped early (``stop_after``).
        resumed_from: the generation a checkpoint was resumed at (0: a fresh start).
    """

    X: np.ndarray
    F: np.ndarray
    pop_X: np.ndarray
    pop_F: np.ndarray
    history: list = field(default_factory=list)
    evaluations: int = 0
    answers: dict = field(default_factory=dict)
    finished: bool = True
    resumed_from: int = 0


def _algorithm(config: EvolveConfig, space: GenomeSpace):
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.sampling.rnd import FloatRandomSampling, IntegerRandomSampling

    sampling = IntegerRandomSampling() if space.kind == "slerp" else FloatRandomSampling()
    if config.algorithm == "ga":
        from pymoo.algorithms.soo.nonconvex.ga import GA

        return GA(pop_size=config.pop_size, sampling=sampling, crossover=SBX(), mutation=PM(),
                  eliminate_duplicates=True)
    from pymoo.algorithms.moo.nsga2 import NSGA2

    return NSGA2(pop_size=config.pop_size, sampling=sampling, eliminate_duplicates=True)


def _problem(space: GenomeSpace, n_obj: int):
    from pymoo.core.problem import Problem

    lo, hi = space.bounds
    return Problem(n_var=space.n_var, n_obj=n_obj, xl=lo, xu=hi)


def _fingerprint(config: EvolveConfig, space: GenomeSpace, n_obj: int, tag: str) -> str:
    return f"{config!r}|{space!r}|{n_obj}|{tag}"


def evolve(space: GenomeSpace, evaluate: Callable[[np.ndarray], Sequence[np.ndarray]],
           fitness: Callable[[np.ndarray], Sequence[float]], config: EvolveConfig, *, n_obj: int = 1,
           checkpoint: str | os.PathLike | None = None, stop_after: int | None = None,
           tag: str = "") -> EvolveResult:
    """Evolve merges (MERGE^3's "Evolve" step).

    Args:
        space: the genome encoding.
        evaluate: genomes ``(P, n_var)`` -> their correctness vectors (e.g. ``pool_evaluate``);
            called only for genomes not scored before.
        fitness: a correctness vector -> ``n_obj`` objectives to MINIMISE (e.g. ``-estimate``).
        config: the search.
        n_obj: objectives (1 for ``"ga"``).
        checkpoint: a file; written after every generation, resumed from when it exists and
            matches ``config``, ``space``, ``n_obj`` and ``tag``.
        stop_after: stop (as if interrupted) after this many generations of this call.
        tag: anything else the run depends on (e.g. the fitness set), part of the match.
    """
    from pymoo.core.evaluator import Evaluator
    from pymoo.problems.static import StaticProblem

    if config.algorithm == "ga" and n_obj != 1:
        raise ValueError(f"n_obj must be 1 for algorithm 'ga', got {n_obj!r}")
    if config.algorithm == "nsga2" and n_obj < 2:
        raise ValueError(f"n_obj must be >= 2 for algorithm 'nsga2', got {n_obj!r}")
    if stop_after is not None and (not isinstance(stop_after, int) or stop_after < 1):
        raise ValueError(f"stop_after must be a positive integer or None, got {stop_after!r}")
    problem = _problem(space, n_obj)
    fp = _fingerprint(config, space, n_obj, tag)
    path = Path(checkpoint) if checkpoint is not None else None
    state = None
    if path is not None and path.exists():
        try:  # checked (fingerprint, this user's signature) before anything is unpickled
            state = signed_pickle.load(path, fp)
        except signed_pickle.InvalidCheckpoint:
            state = None
    if state is None:
        algo = _algorithm(config, space)
        algo.setup(problem, termination=("n_gen", config.generations), seed=config.seed, verbose=False)
        state = {"fingerprint": fp, "algorithm": algo, "generation": 0, "answers": {}, "history": [],
                 "evaluations": 0}
        resumed_from = 0
    else:
        algo = state["algorithm"]
        resumed_from = state["generation"]
    answers: dict = state["answers"]
    done_here = 0
    while algo.has_next():
        if stop_after is not None and done_here >= stop_after:
            break
        pop = algo.ask()
        X = np.asarray(pop.get("X"), float)
        keys = [genome_key(x) for x in X]
        todo = [i for i, k in enumerate(keys) if k not in answers]
        todo = [i for j, i in enumerate(todo) if keys[i] not in {keys[t] for t in todo[:j]}]
        if todo:
            ys = evaluate(X[todo])
            for i, y in zip(todo, ys):
                answers[keys[i]] = np.asarray(y, float)
        F = np.array([np.asarray(fitness(answers[k]), float).reshape(n_obj) for k in keys])
        Evaluator().eval(StaticProblem(problem, F=F), pop)
        algo.tell(infills=pop)
        state["generation"] += 1
        state["evaluations"] += len(todo)
        done_here += 1
        state["history"].append({"generation": state["generation"], "new_evaluations": len(todo),
                                 "best": float(np.min(F.sum(axis=1))) if n_obj == 1 else
                                 [float(v) for v in F.min(axis=0)]})
        if path is not None:
            signed_pickle.dump(state, path, fp)  # cloudpickle: pymoo's algorithm holds local functions
    res = algo.result()
    finished = not algo.has_next()
    popX = np.asarray(algo.pop.get("X"), float) if algo.pop is not None else np.zeros((0, space.n_var))
    popF = np.asarray(algo.pop.get("F"), float) if algo.pop is not None else np.zeros((0, n_obj))
    X = np.atleast_2d(np.asarray(res.X, float)) if res.X is not None else popX[:0]
    F = np.atleast_2d(np.asarray(res.F, float)) if res.F is not None else popF[:0]
    return EvolveResult(X=X, F=F, pop_X=popX, pop_F=popF, history=list(state["history"]),
                        evaluations=int(state["evaluations"]), answers=dict(answers), finished=finished,
                        resumed_from=resumed_from)
