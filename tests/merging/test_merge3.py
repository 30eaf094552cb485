"""rayml.merging.merge3: Extract, the estimator, genomes, evolution with checkpoints (resume gives the
uninterrupted run's final population), and the evaluator pool losing nothing to a killed actor."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from rayml.llm import tasks
from rayml.merging import irt, merge3
from rayml.merging import operators as merging


# --- Extract, estimator, genomes -------------------------------------------------------------------

def test_extract_random_and_clustering():
    a = merge3.extract(50, 10, seed=3)
    assert len(set(a.indices.tolist())) == 10 and a.indices.min() >= 0 and a.indices.max() < 50
    assert np.allclose(a.weights, 0.1) and np.array_equal(a.indices, np.sort(a.indices))
    assert np.array_equal(merge3.extract(50, 10, seed=3).indices, a.indices)
    rng = np.random.default_rng(0)
    A, b = rng.normal(1, 0.3, (60, 2)), rng.normal(0, 1, 60)
    c = merge3.extract(60, 6, seed=0, method="irt-clustering", A=A, b=b)
    assert np.isclose(c.weights.sum(), 1.0) and len(set(c.indices.tolist())) == len(c.indices)
    with pytest.raises(ValueError, match="n must"):
        merge3.extract(5, 6)
    with pytest.raises(ValueError, match="method"):
        merge3.extract(5, 2, method="best")


def test_estimator_per_task_and_overall():
    rng = np.random.default_rng(1)
    A, b = rng.uniform(0.5, 2, (40, 2)), rng.normal(0, 1, 40)
    thetas = np.array([[1.0, 0.0], [0.0, 1.0]])
    groups = {"x": np.arange(0, 20), "y": np.arange(20, 40)}
    anchors = {"x": merge3.Anchors(np.array([1, 5, 9]), np.full(3, 1 / 3)),
               "y": merge3.Anchors(np.array([22, 30]), np.full(2, 0.5))}
    y = np.array([1.0, 0.0, 1.0, 1.0, 1.0])
    mean = merge3.Merge3Estimator(A, b, thetas, groups, anchors, mode="mean").estimate(y)
    assert np.isclose(mean["x"], 2 / 3) and np.isclose(mean["y"], 1.0) and np.isclose(mean["all"], (2 / 3 + 1) / 2)
    gmp = merge3.Merge3Estimator(A, b, thetas, groups, anchors).estimate(y)
    want = irt.gmp_irt(y[:3], A, b, [1, 5, 9], list(thetas), population=groups["x"])
    assert np.isclose(gmp["x"], want)
    with pytest.raises(ValueError, match="mode"):
        merge3.Merge3Estimator(A, b, thetas, groups, anchors, mode="max")
    with pytest.raises(ValueError, match="anchors of"):
        merge3.Merge3Estimator(A, b, thetas, groups, {"x": anchors["y"], "y": anchors["x"]})


def _states(seed, n=3):
    from rayml.llm.model import ModelConfig, TransformerLM

    cfg = ModelConfig(vocab_size=40, d_model=16, n_layers=3, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=32)
    out = []
    for i in range(n):
        m = TransformerLM(cfg)
        m.reset_parameters(torch.Generator().manual_seed(seed + i))
        out.append(m.state_dict())
    return out


def test_genomes_decode_to_their_merges():
    base, e0, e1 = _states(0)
    slerp = merge3.GenomeSpace("slerp", 2, 3)
    assert slerp.n_var == 11 and slerp.describe(np.full(11, 5.0))["other"] == 0.5
    m0 = merge3.merge_genome(slerp, base, [e0, e1], np.zeros(11))
    m1 = merge3.merge_genome(slerp, base, [e0, e1], np.full(11, 10.0))
    assert all(torch.allclose(m0[k], e0[k]) and torch.allclose(m1[k], e1[k]) for k in base)
    x = np.array([0, 0, 0, 0, 0, 10, 10, 10, 10, 10, 3], float)  # attention from e0, MLP from e1
    m = merge3.merge_genome(slerp, base, [e0, e1], x)
    want = merging.slerp(e0, e1, merging.slerp_t_schedule([0] * 5, [1] * 5, 0.3, 3))
    assert all(torch.equal(m[k], want[k]) for k in base)
    dt = merge3.GenomeSpace("dare_ties", 2, 3)
    assert dt.n_var == 4 and dt.describe([0.2, 0.4, 0.0, 0.5]) == {"weights": [0.2, 0.4], "densities": [0.01, 0.5]}
    zero = merge3.merge_genome(dt, base, [e0, e1], [0.0, 0.0, 0.5, 0.5])
    assert all(torch.allclose(zero[k], base[k]) for k in base)
    g = [0.5, 0.7, 0.3, 0.6]
    a, b = merge3.merge_genome(dt, base, [e0, e1], g, seed=1), merge3.merge_genome(dt, base, [e0, e1], g, seed=1)
    assert all(torch.equal(a[k], b[k]) for k in base)  # the same genome is the same model anywhere
    with pytest.raises(ValueError, match="kind"):
        merge3.GenomeSpace("soup", 2, 3)
    with pytest.raises(ValueError, match="genes"):
        slerp.describe(np.zeros(4))


# --- Evolve: checkpoint and resume (no Ray) ---------------------------------------------------------

class CountingEvaluate:
    """A deterministic stand-in for the pool: answers 'items' j correctly when gene j is near a target."""

    def __init__(self):
        self.seen = []

    def __call__(self, X):
        self.seen += [merge3.genome_key(x) for x in X]
        target = np.linspace(0, 10, X.shape[1])
        return [(np.abs(x - target) < 3).astype(float) for x in X]


@pytest.mark.parametrize("algorithm", ["ga", "nsga2"])
def test_resume_after_a_stop_gives_the_uninterrupted_population(tmp_path, algorithm):
    n_obj = 1 if algorithm == "ga" else 2
    space = merge3.GenomeSpace("slerp" if algorithm == "ga" else "dare_ties", 2, 4)
    fit = (lambda y: [-y.mean()]) if n_obj == 1 else (lambda y: [-y[: len(y) // 2].mean(), -y[len(y) // 2:].mean()])
    cfg = merge3.EvolveConfig(algorithm, pop_size=6, generations=5, seed=7)
    full_eval = CountingEvaluate()
    full = merge3.evolve(space, full_eval, fit, cfg, n_obj=n_obj, checkpoint=tmp_path / "a.pkl")
    ev1 = CountingEvaluate()
    part = merge3.evolve(space, ev1, fit, cfg, n_obj=n_obj, checkpoint=tmp_path / "b.pkl", stop_after=2)
    assert not part.finished and len(part.history) == 2
    ev2 = CountingEvaluate()
    rest = merge3.evolve(space, ev2, fit, cfg, n_obj=n_obj, checkpoint=tmp_path / "b.pkl")
    assert rest.finished and rest.resumed_from == 2
    assert np.array_equal(rest.pop_X, full.pop_X) and np.array_equal(rest.pop_F, full.pop_F)
    assert np.array_equal(rest.X, full.X)
    assert not set(ev1.seen) & set(ev2.seen)            # nothing scored before the stop is scored again
    assert len(ev1.seen) + len(ev2.seen) == len(full_eval.seen) == full.evaluations == rest.evaluations
    assert len(set(full_eval.seen)) == len(full_eval.seen)  # no genome is ever scored twice


def test_evolve_bad_input():
    space = merge3.GenomeSpace("slerp", 2, 4)
    with pytest.raises(ValueError, match="n_obj"):
        merge3.evolve(space, CountingEvaluate(), lambda y: [0.0, 0.0], merge3.EvolveConfig("ga"), n_obj=2)
    with pytest.raises(ValueError, match="pop_size"):
        merge3.EvolveConfig(pop_size=0)
    with pytest.raises(ValueError, match="algorithm"):
        merge3.EvolveConfig("cmaes")


# --- the Ray pool: tiny checkpoints, a resume and a killed actor -------------------------------------

@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """A CONFIGS['tiny']-shaped base and two perturbed endpoints, saved as checkpoints."""
    from rayml.llm import training
    from rayml.llm.checkpoint import save_checkpoint
    from rayml.llm.model import TransformerLM

    cfg = training.CONFIGS["tiny"]
    tok = training.build_tokenizer(cfg)
    root = tmp_path_factory.mktemp("merge3")
    dirs = []
    for i in range(3):
        m = TransformerLM(cfg.model_config(tok.vocab_size))
        m.reset_parameters(torch.Generator().manual_seed(0))
        if i:
            g = torch.Generator().manual_seed(i)
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=g))
        save_checkpoint(root / f"m{i}", m, tok, {"name": f"m{i}"})
        dirs.append(str(root / f"m{i}"))
    items = tasks.make_items("copy", 4, 0) + tasks.make_items("sort", 4, 1)
    return dirs[0], dirs[1:], {"full": items}


class DiesOnce(merge3.MergeEvaluator):
    """A MergeEvaluator whose process exits (a real crash) on its first genome with gene 0 == 3."""

    def __init__(self, *args, marker=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.marker = marker

    def answer(self, job):
        if float(job[1][0]) == 3.0 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().answer(job)


def _local_answers(base, endpoints, sets, genomes):
    from rayml.llm.backends import EmbeddedLM
    from rayml.llm.checkpoint import load_checkpoint

    model, tok, _ = load_checkpoint(base)
    base_state = {k: v.clone() for k, v in model.state_dict().items()}
    states = [load_checkpoint(p)[0].state_dict() for p in endpoints]
    out = []
    for x in genomes:
        model.load_state_dict(merge3.merge_genome(merge3.GenomeSpace("slerp", 2, 2), base_state, states, x))
        out.append(tasks.evaluate([EmbeddedLM(model, tok)], sets["full"])[0])
    return out


def test_pool_answers_match_local_merges(ray_session, tiny_checkpoints):
    from rayml.llm.checkpoint import read_blob

    base, endpoints, sets = tiny_checkpoints
    genomes = merge3.GenomeSpace("slerp", 2, 2).random(3, 0)
    # the actors get the checkpoints as bytes (what works across nodes), the local reference paths
    pool = merge3.make_pool(read_blob(base), [read_blob(p) for p in endpoints], sets, actors=2, num_cpus=0.5)
    try:
        got = merge3.pool_evaluate(pool, "slerp", "full")(genomes)
    finally:
        pool.shutdown()
    want = _local_answers(base, endpoints, sets, genomes)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.slow
def test_killing_an_evaluator_mid_generation_loses_nothing(ray_session, tiny_checkpoints, tmp_path):
    base, endpoints, sets = tiny_checkpoints
    genomes = merge3.GenomeSpace("slerp", 2, 2).random(6, 1)
    genomes[:4, 0] = 1.0
    genomes[4, 0] = 3.0  # the genome whose evaluation kills its actor (once)
    genomes[5, 0] = 2.0
    marker = str(tmp_path / "died")
    crashy = merge3.make_pool(base, endpoints, sets, actors=2, num_cpus=0.5, actor_cls=DiesOnce, marker=marker)
    try:
        got = merge3.pool_evaluate(crashy, "slerp", "full")(genomes)
        assert os.path.exists(marker) and crashy.replaced == 1   # an actor really died mid-generation
    finally:
        crashy.shutdown()
    want = _local_answers(base, endpoints, sets, genomes)
    assert len(got) == len(genomes) and all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.slow
def test_resume_on_the_pool_gives_the_uninterrupted_population(ray_session, tiny_checkpoints, tmp_path):
    base, endpoints, sets = tiny_checkpoints
    space = merge3.GenomeSpace("slerp", 2, 2)
    cfg = merge3.EvolveConfig("ga", pop_size=4, generations=3, seed=11)
    pool = merge3.make_pool(base, endpoints, sets, actors=2, num_cpus=0.5)
    try:
        ev = merge3.pool_evaluate(pool, "slerp", "full")
        fit = lambda y: [-float(np.mean(y))]  # noqa: E731
        full = merge3.evolve(space, ev, fit, cfg, checkpoint=tmp_path / "a.pkl")
        merge3.evolve(space, ev, fit, cfg, checkpoint=tmp_path / "b.pkl", stop_after=1)
        rest = merge3.evolve(space, ev, fit, cfg, checkpoint=tmp_path / "b.pkl")
    finally:
        pool.shutdown()
    assert rest.resumed_from == 1 and rest.evaluations == full.evaluations
    assert np.array_equal(rest.pop_X, full.pop_X) and np.array_equal(rest.pop_F, full.pop_F)


# --- additions of issue 20: the base in the ability mix, task arithmetic genomes, num_gpus -----------

def test_estimator_mixes_the_base_ability_when_a_base_is_set():
    rng = np.random.default_rng(11)
    A, b = rng.uniform(0.5, 2, (60, 2)), rng.normal(0, 1, 60)
    thetas, base = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([-1.0, -1.0])
    groups = {"t": np.arange(60)}
    anchors = {"t": merge3.Anchors(np.arange(0, 60, 6), np.full(10, 0.1))}
    y = (rng.random(10) < 0.5).astype(float)
    with_base = merge3.Merge3Estimator(A, b, thetas, groups, anchors, base_theta=base)
    assert len(with_base.mix) == 3 and np.array_equal(with_base.mix[0], base)
    want = irt.gmp_irt(y, A, b, anchors["t"].indices, [base, *thetas], population=groups["t"])
    assert np.isclose(with_base.estimate(y)["t"], want)
    without = merge3.Merge3Estimator(A, b, thetas, groups, anchors)
    assert np.isclose(without.estimate(y)["t"],
                      irt.gmp_irt(y, A, b, anchors["t"].indices, list(thetas), population=groups["t"]))
    with pytest.raises(ValueError, match="base_theta"):
        merge3.Merge3Estimator(A, b, thetas, groups, anchors, base_theta=np.zeros(3))


def test_task_arithmetic_genome_is_base_plus_weighted_task_vectors():
    base, e0, e1 = _states(20)
    space = merge3.GenomeSpace("task_arithmetic", 2, 3)
    assert space.n_var == 2 and space.bounds == (0.0, 1.0)
    got = merge3.merge_genome(space, base, [e0, e1], np.array([0.3, 0.6]))
    for k in base:
        if torch.is_floating_point(base[k]):
            b0 = base[k].double()
            want = b0 + 0.3 * (e0[k].double() - b0) + 0.6 * (e1[k].double() - b0)
            assert torch.allclose(got[k].double(), want, atol=1e-6)
    with pytest.raises(ValueError, match="kind"):
        merge3.GenomeSpace("linear", 2, 3)


def test_make_pool_rejects_bad_num_gpus():
    with pytest.raises(ValueError, match="num_gpus"):
        merge3.make_pool(None, [], {}, num_gpus=-1)

