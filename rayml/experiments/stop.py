"""STOP reproduction: forecasting MAE out of distribution (a rewired graph, shifted demand) and on unseen nodes.

Per seed (``rayml.graphs.stop_data``): a road-like kNN graph and a traffic flow along it with a
travel time (what reaches a node in the next steps is on its upstream neighbours now), so the data
carries a spatial signal: the sanity gate checks that a ridge forecaster's MAE falls by more than
10% when its neighbours' history is added. After ``shift_day`` the graph is rewired (30% of the
roads closed, as many opened) and the demand peaks grow and move later. The sensors are split as in
the authors' LargeST code: ``N / (1 + max_increase)`` train (the graph restricted to them) over the
first ``train_days`` and stop early on the following ``val_days``; ``add_at_test`` of that many new
sensors appear only at test time (inductive error) and ``drop_at_test`` of the training sensors are
gone after the shift; the other nodes carry flow but are never observed. ID test on the days before
the shift, OOD test on the days after it. The
paper's test setting (``test_graph="stale"``): the flow runs on the rewired roads but the graph
models are given the road graph known at training time (the authors load one static adjacency);
the control setting (``"true"``) gives them the rewired graph. Both are measured in every run; a
gate checks that the stale graph costs the node-to-node baseline accuracy. Methods: STOP (backbone + Context-Aware Units + message perturbation + worst-environment
DRO), STOP without the DRO (ablation), STID (the backbone with node embeddings), a
Graph-WaveNet-like diffusion forecaster with an adaptive adjacency, and two linear ridge forecasters
(own history + time of day; with the given graph's neighbour mean added), their penalty tuned on the
tuning seeds. A second gate asks the shift to be large: the stale graph must cost GWNet-like more than
``STALE_COST`` of its MAE on the true graph. Equal budget: the same epochs,
batch size, regularisers and optimizer steps; the learning rate of each method tuned on the same
grid (holding the authors' 2e-3, ``lrate`` in ``experiments/stop/main.py``) by validation MAE
averaged over ``tune_seeds`` tuning seeds kept apart from the test seeds (``evidence.split_seeds``).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Robust spatio-temporal centralized interaction for OOD learning (STOP), ICML 2025"
NAME = "stop"
LEARNED = ("stop", "stop-nodro", "stid", "gwnet-like")
# the linear forecasters (issue 39, outside review R8): a node's own history and time of day ("ridge"),
# and with the given graph's neighbour mean history added ("ridge-graph"); their ridge penalty is tuned
RIDGES = ("ridge", "ridge-graph")
METHODS = LEARNED + RIDGES
# the graph a model is given at the out-of-distribution test: "stale" (the paper's setting: the road graph
# known at training time, restricted to the sensors present, while the flow runs on the rewired roads) or
# "true" (the control setting: the rewired graph itself, which describes the shift to the model)
TEST_GRAPHS = ("stale", "true")
BASELINES = METHODS[2:]
GRAPH_MODELS = ("gwnet-like", "ridge-graph")  # the methods given a graph
# the gate on the shift's size: the stale graph must raise GWNet-like's OOD MAE by more than this share of its
# MAE on the true rewired graph (see the page: the paper's premise is that relying on the given graph costs a
# node-to-node model accuracy after the shift; 0.10 is ours, stated before the runs of issue 39's gate)
STALE_COST = 0.10
# the ridge penalty grid (every ridge, standardised values), extended past an edge by evidence.tune
RIDGE_GRID = [1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0]
SPLITS = ("id", "ood", "inductive", "inductive_id", "ood_stale", "ood_true", "inductive_stale", "inductive_true")
# the authors' LargeST node split (experiments/stop/main.py, src/utils/args.py): N / (1 + max_increase_ratio)
# sensors in training, test_increase_ratio of that many new sensors added at test, test_decrease_ratio of the
# training sensors gone; the other sensors are never observed
SPLIT = dict(max_increase=0.3, add_at_test=0.1, drop_at_test=0.1)
# the per-node linear reference rows (session 14, R12; descriptive, neither a claim baseline nor a control): one ridge
# per training sensor on its own history (hops 0), and with its 1- and 2-hop neighbour means on the given graph
# (hops 2); the penalty is fixed (R12's, on raw values), not tuned
PERNODE = {"pernode_ridge": 0, "pernode_ridge_2hop": 2}
PERNODE_PENALTY = 1.0

SIZES = {
    "tiny": dict(nodes=12, steps_per_day=12, days=10, train_days=5, val_days=1, shift_day=8, seq=6, horizon=6,
                 epochs=1, batch=32, dim=16, lr_grid=[2e-3], seeds=1, envs=2, tune_seeds=1, rewire=0.3,
                 test_graph="stale", **SPLIT),
    # seeds: a quick pilot (seed 1000, this setting) gave paired-difference sds 0.0138 (OOD) and 0.0185 (inductive)
    # against the strongest baseline; the paper's effect (17.01% / 18.44% of the baseline's MAE) then needs 9 pairs
    # for the one-sided Wilcoxon at power 0.8 (evidence.power_from_pilot, Noether), as does the old full record's
    # spread (sd 0.0062 / 0.0080): quick 9 seeds, full 10 (each record carries its own estimate, metrics.power)
    # val_days 3 (session 14, R12: days 12-13 were both weekend days, the ID days weekdays and the OOD days two of
    # each): validation on days 12-14, two weekend days and a weekday; the ID test on days 15-16
    "quick": dict(nodes=40, steps_per_day=24, days=21, train_days=12, val_days=3, shift_day=17, seq=12, horizon=12,
                  epochs=8, batch=32, dim=16, lr_grid=[1e-3, 2e-3, 4e-3, 8e-3], seeds=9, envs=3,
                  tune_seeds=1, rewire=0.3, test_graph="stale", **SPLIT),
    # full: validation on days 21-24, all weekdays (R12); its records predate session 14 and are kept: the next full
    # run should validate on a mix of day types (e.g. train_days 19: days 19-22, two weekend days, two weekdays)
    # full: estimated from quick's per-step cost (STOP's step ~ batch x envs x nodes x width^2) to about 15 min
    # on 2 idle cores; not yet measured
    "full": dict(nodes=80, steps_per_day=24, days=35, train_days=21, val_days=4, shift_day=28, seq=12, horizon=12,
                 epochs=40, batch=32, dim=16, lr_grid=[5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2], seeds=10,
                 envs=3, tune_seeds=2, rewire=0.3, test_graph="stale", **SPLIT),
}


def _check(c: Mapping[str, Any]) -> None:
    for key in ("nodes", "steps_per_day", "days", "train_days", "val_days", "shift_day", "seq", "horizon", "epochs",
                "batch", "dim", "seeds", "envs", "tune_seeds"):
        v = c[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    if c["nodes"] < 8:
        raise ValueError(f"nodes must be >= 8, got {c['nodes']}")
    if not c["train_days"] + c["val_days"] < c["shift_day"] < c["days"]:
        raise ValueError("need train_days + val_days < shift_day < days")
    if c["dim"] % 4:
        raise ValueError(f"dim must be divisible by 4 (the CAU heads), got {c['dim']}")
    if not 0 <= c["rewire"] <= 1:
        raise ValueError(f"rewire must lie in [0, 1], got {c['rewire']!r}")
    if c["test_graph"] not in TEST_GRAPHS:
        raise ValueError(f"test_graph must be one of {TEST_GRAPHS}, got {c['test_graph']!r}")
    for key in ("max_increase", "add_at_test", "drop_at_test"):
        if isinstance(c[key], bool) or not isinstance(c[key], (int, float)) or not 0 <= c[key] < 1:
            raise ValueError(f"{key} must lie in [0, 1), got {c[key]!r}")
    n_train, n_new, _ = _split_sizes(c)
    if n_train < 4 or n_new > c["nodes"] - n_train:
        raise ValueError(f"max_increase / add_at_test: {c['nodes']} nodes give {n_train} training sensors and "
                         f"{n_new} new ones (need >= 4 training sensors and no more new ones than unseen sensors)")
    if not c["lr_grid"] or any(not isinstance(v, (int, float)) or v <= 0 for v in c["lr_grid"]):
        raise ValueError(f"lr_grid must hold learning rates > 0, got {c['lr_grid']!r}")


def _split_sizes(c: Mapping[str, Any]) -> tuple[int, int, int]:
    """Training, new and gone sensors: the authors' ``int(N / (1 + max_increase_ratio))``, ``int(that x
    test_increase_ratio)`` (at least 1, so a tiny run still has an inductive error) and ``int(that x
    test_decrease_ratio)``."""
    n_train = int(int(c["nodes"]) / (1.0 + float(c["max_increase"])) + 1e-9)
    return (n_train, max(1, int(n_train * float(c["add_at_test"]) + 1e-9)),
            int(n_train * float(c["drop_at_test"]) + 1e-9))


def _restrict(edges: np.ndarray, nodes: np.ndarray, n: int) -> np.ndarray:
    """The edges of ``edges`` (over ``n`` nodes) between ``nodes``, renumbered to ``0 .. len(nodes)-1``."""
    remap = -np.ones(n, dtype=np.int64)
    remap[nodes] = np.arange(len(nodes))
    keep = (remap[edges[0]] >= 0) & (remap[edges[1]] >= 0)
    return remap[edges[:, keep]]


def _data(c: Mapping[str, Any], data_seed: int) -> dict:
    """One seed's graph, its rewired graph, the flow, and the split of the sensors (the authors' LargeST
    split, ``_split_sizes``): training sensors, new sensors seen only at test, training sensors missing
    after the shift; the other nodes carry flow but no sensor (never observed)."""
    from rayml.graphs import stop_data as sd

    rng = np.random.default_rng(data_seed)
    n, spd = int(c["nodes"]), int(c["steps_per_day"])
    pos, edges = sd.road_graph(rng, n)
    after = sd.rewire(rng, pos, edges, float(c["rewire"]))
    x = sd.simulate_traffic(rng, pos, edges, days=int(c["days"]), steps_per_day=spd, shift_day=int(c["shift_day"]),
                            edges_after=after)
    perm = rng.permutation(n)
    n_train, n_new, n_gone = _split_sizes(c)
    train_nodes, new_nodes = np.sort(perm[:n_train]), np.sort(perm[n_train:n_train + n_new])
    observed = np.union1d(train_nodes, new_nodes)  # the in-distribution test's sensors
    # sensors of the training set missing after the shift (the authors' test_decrease_ratio)
    gone = rng.choice(train_nodes, size=n_gone, replace=False)
    kept = np.setdiff1d(train_nodes, gone)
    present = np.union1d(kept, new_nodes)  # the OOD test's sensors, sorted
    return {"x": x, "edges": edges, "after": after, "train_nodes": train_nodes, "new_nodes": new_nodes,
            "observed": observed, "id_graph": _restrict(edges, observed, n),
            "kept": kept, "present": present, "sub": _restrict(edges, train_nodes, n),
            # the graphs a model can be given at the OOD test, over the present sensors
            "ood_graph": {"stale": _restrict(edges, present, n), "true": _restrict(after, present, n)}}


def run_task(item: tuple, c: Mapping[str, Any]) -> dict:
    """Simulate one seed's data, train one method, and score it per node (ID, OOD, inductive)."""
    from rayml.graphs import stop as st

    phase, method, hyper, seed_idx, data_seed, train_seed = item  # hyper: the lr, or a ridge's penalty
    d = _data(c, data_seed)
    x, tn, spd = d["x"], d["train_nodes"], int(c["steps_per_day"])
    seq, hor = int(c["seq"]), int(c["horizon"])
    tr_end, va_end, sh = int(c["train_days"]) * spd, (int(c["train_days"]) + int(c["val_days"])) * spd, int(c["shift_day"]) * spd
    Xtr, Ytr = st.windows(x[:, tn], spd, 0, tr_end - hor + 1, seq, hor, nodes=tn)
    Xv, Yv = st.windows(x[:, tn], spd, tr_end, va_end - hor + 1, seq, hor, nodes=tn)
    scale = (float(x[:tr_end, tn].mean()), float(x[:tr_end, tn].std() + 1e-8))
    if method in RIDGES:
        model = st.fit_ridge(Xtr, Ytr, d["sub"], penalty=float(hyper), neighbours=st.RIDGES[method], tod_size=spd,
                             scale=scale)
    else:
        cfg = st.STConfig(method=method, dim=int(c["dim"]), epochs=int(c["epochs"]), batch=int(c["batch"]),
                          lr=float(hyper), envs=int(c["envs"]))
        model = st.train_forecaster(Xtr, Ytr, d["sub"], cfg, train_seed, tod_size=spd, scale=scale,
                                    n_nodes=int(c["nodes"]), val=(Xv, Yv))
    out = {"phase": phase, "method": method, "lr": float(hyper), "seed": seed_idx}
    if phase == "tune":
        out["val_mae"] = float(np.abs(st.predict(model, Xv, d["sub"], scale) - Yv).mean())
        return out
    obs = d["observed"]  # ID test: the training and new sensors on the pre-shift graph
    Xid, Yid = st.windows(x[:, obs], spd, va_end, sh - hor + 1, seq, hor, nodes=obs)
    e_id = np.abs(st.predict(model, Xid, d["id_graph"], scale) - Yid).mean(axis=(0, 1))
    out["id"] = e_id[np.isin(obs, tn)].tolist()
    out["inductive_id"] = e_id[np.isin(obs, d["new_nodes"])].tolist()
    # OOD: the present sensors only (kept training sensors and the new ones), on either test graph
    pres = d["present"]
    Xood, Yood = st.windows(x[:, pres], spd, sh + seq, x.shape[0], seq, hor, nodes=pres)
    is_kept, is_new = np.isin(pres, d["kept"]), np.isin(pres, d["new_nodes"])
    for g in TEST_GRAPHS:
        e_ood = np.abs(st.predict(model, Xood, d["ood_graph"][g], scale) - Yood).mean(axis=(0, 1))
        out[f"ood_{g}"], out[f"inductive_{g}"] = e_ood[is_kept].tolist(), e_ood[is_new].tolist()
    out["ood"], out["inductive"] = out[f"ood_{c['test_graph']}"], out[f"inductive_{c['test_graph']}"]
    if method in LEARNED:
        out["kept_epoch"] = int(model.kept_epoch)  # the epoch early stopping kept (R12)
    if method == LEARNED[0]:  # the data's spatial signal, once per seed: ridge without / with neighbour history
        out["ridge_own"], out["ridge_nbr"] = st.neighbour_gain(x, d["edges"], spd, tr_end, va_end, sh, seq=seq,
                                                               horizon=hor)
        out |= _pernode(c, d, tr_end, va_end, sh)
    return out


def _pernode(c: Mapping[str, Any], d: dict, tr_end: int, va_end: int, sh: int) -> dict:
    """The per-node linear reference rows (``PERNODE``), scored as the record's ``id`` (training sensors, the
    ID test's graph over the observed sensors) and ``ood`` columns (kept sensors, the configured test graph)."""
    from rayml.graphs import stop_data as sd

    spd, seq, hor = int(c["steps_per_day"]), int(c["seq"]), int(c["horizon"])
    x = d["x"]
    out = {}
    for name, hops in PERNODE.items():
        e_id, e_ood = sd.pernode_ridge(
            x, spd, (d["train_nodes"], d["sub"], tr_end),
            [(d["train_nodes"], d["observed"], d["id_graph"], va_end, sh - hor + 1),
             (d["kept"], d["present"], d["ood_graph"][c["test_graph"]], sh + seq, x.shape[0])],
            seq=seq, horizon=hor, hops=hops, penalty=PERNODE_PENALTY)
        out[f"{name}_id"], out[f"{name}_ood"] = float(e_id.mean()), float(e_ood.mean())
    return out


def _model_view_gain(out: list) -> dict:
    """The spatial-signal gate's quantity on what the models see (R12): 1 - ridge-graph's / ridge's ID MAE, both
    fitted on the training sensors with the graph restricted to them and their tuned penalties, scored on the
    training sensors (the record's ``id`` split). Mean over seeds of each MAE, then the ratio (as the gate)."""
    per = {m: {o["seed"]: float(np.mean(o["id"])) for o in out if o["method"] == m} for m in RIDGES}
    seeds = sorted(per["ridge"])
    own, nbr = np.array([per["ridge"][k] for k in seeds]), np.array([per["ridge-graph"][k] for k in seeds])
    gains = 1.0 - nbr / own
    return {"neighbour_gain_model_view": 1.0 - float(nbr.mean()) / float(own.mean()),
            "neighbour_gain_model_view_min_seed": float(gains.min()),
            "neighbour_gain_model_view_seeds_above_gate": int((gains > 0.10).sum()),
            "neighbour_gain_seeds": len(seeds)}


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tuning (method x lr x tuning seed), then (method x seed) runs as Ray tasks."""
    _check(config)
    n_tune = int(config["tune_seeds"])
    ss, ts = evidence.split_seeds(seed, 2 * int(config["seeds"]), 2 * n_tune)
    grid = [float(v) for v in config["lr_grid"]]

    def evaluate(items):
        """The validation MAE of each (method, {lr}) averaged over the tuning seeds (pmap tasks)."""
        tuned = runtime.pmap(run_task, [("tune", m, s.get("lr", s.get("penalty")), k, ts[2 * k], ts[2 * k + 1])
                                        for m, s in items
                                        for k in range(n_tune)], shared=dict(config), chunk_size=1, desc="stop tuning")
        return [float(np.mean([o["val_mae"] for o in tuned[i * n_tune:(i + 1) * n_tune]])) for i in range(len(items))]

    # the lowest mean validation MAE; ties: the smaller lr (the first in grid order)
    # learned models: the lr on one grid holding the authors' lrate 2e-3; ridges: the penalty on RIDGE_GRID
    grids = {m: {"lr": grid} for m in LEARNED} | {m: {"penalty": list(RIDGE_GRID)} for m in RIDGES}
    choices = evidence.tune(evaluate, grids, paper={m: {"lr": 2e-3} for m in LEARNED}, extend=2)
    best = {m: choices[m].setting["lr" if m in LEARNED else "penalty"] for m in METHODS}
    items = [("main", m, best[m], k, ss[2 * k], ss[2 * k + 1]) for k in range(int(config["seeds"])) for m in METHODS]
    out = runtime.pmap(run_task, items, shared=dict(config), chunk_size=1, desc="stop runs")
    rows, model_rows = [], []
    for o in out:
        for split in SPLITS:
            # the claims' unit: one value per trained model (its nodes share one training run)
            model_rows.append({"method": o["method"], "seed": o["seed"], "split": split, "metric": "mae",
                               "value": float(np.mean(o[split]))})
            if split in SPLITS[:4]:  # per node: the configured test graph only
                for node, v in enumerate(o[split]):
                    rows.append({"method": o["method"], "seed": o["seed"], "node": node, "split": split,
                                 "metric": "mae", "value": float(v)})

    # the baselines ranked by tuning validation MAE (chosen before any test number is seen; ties: METHODS order):
    # the strongest is the claims' comparison, the others their controls (the strongest is never its own control)
    ranked = sorted(BASELINES, key=lambda m: (choices[m].score, BASELINES.index(m)))
    strongest = ranked[0]
    roles = {"best-baseline": strongest} | {f"baseline-{k}": m for k, m in enumerate(ranked[1:], start=2)}
    model_rows += [dict(r, method=role) for role, m in roles.items() for r in model_rows if r["method"] == m]
    # the gate's reference: GWNet-like's MAE on the true rewired graph raised by STALE_COST, per seed
    model_rows += [dict(r, split="ood_true_plus_gate", value=(1.0 + STALE_COST) * r["value"]) for r in model_rows
                   if r["method"] == "gwnet-like" and r["split"] == "ood_true"]

    def block(m):
        sel = [o for o in out if o["method"] == m]
        hyper = {"lr": best[m]} if m in LEARNED else {"penalty": best[m]}
        return {f"{s}_mae": float(np.mean([np.mean(o[s]) for o in sel])) for s in SPLITS} | hyper

    metrics = block("stop")
    own = [o["ridge_own"] for o in out if "ridge_own" in o]
    nbr = [o["ridge_nbr"] for o in out if "ridge_nbr" in o]
    metrics["ridge_mae_own_history"], metrics["ridge_mae_with_neighbours"] = float(np.mean(own)), float(np.mean(nbr))
    metrics["neighbour_gain"] = 1.0 - float(np.mean(nbr)) / float(np.mean(own))
    metrics["neighbour_gain_min_seed"] = float(min(1.0 - b / a for a, b in zip(own, nbr)))
    metrics["neighbour_gain_seeds_above_gate"] = int(sum(1.0 - b / a > 0.10 for a, b in zip(own, nbr)))
    metrics |= _model_view_gain(out)
    # descriptive reference rows (R12), not claim baselines or controls: per-node ridges, ID and OOD
    metrics["reference"] = {name: {split: float(np.mean([o[f"{name}_{split}"] for o in out if f"{name}_id" in o]))
                                   for split in ("id", "ood")} for name in PERNODE}
    metrics["kept_epoch_mean"] = {m: float(np.mean([o["kept_epoch"] for o in out if o["method"] == m]))
                                  for m in LEARNED}
    baselines = {m.replace("-", "_"): block(m) for m in METHODS[1:]}
    for role, m in roles.items():
        baselines[role.replace("-", "_")] = block(m) | {"name": m}
    gw = baselines["gwnet_like"]
    gw["ood_true_plus_gate_mae"] = (1.0 + STALE_COST) * gw["ood_true_mae"]
    gw["stale_graph_cost"] = gw["ood_stale_mae"] / gw["ood_true_mae"] - 1.0  # mean over seeds, then the ratio
    metrics["power"] = _power(model_rows, config)
    n_win = len(_train_windows(config))
    budget = {"epochs": int(config["epochs"]), "batch": int(config["batch"]), "width": int(config["dim"]),
              "training_windows": n_win,
              "optimizer_steps": int(config["epochs"]) * -(-n_win // int(config["batch"])),
              "tuning": f"lr per method on the same grid {grid} (holds the authors' 2e-3) by validation MAE "
                        f"averaged over {n_tune} tuning seed(s) apart from the test seeds",
              "ridge_tuning": f"ridge penalty per ridge forecaster on {RIDGE_GRID} (standardised values), same seeds",
              "tuned_lr": {m: best[m] for m in LEARNED}, "tuned_penalty": {m: best[m] for m in RIDGES},
              "strongest_baseline": strongest, "baselines_ranked": ranked,
              "test_graph": str(config["test_graph"]), "tuned_on_grid_edge": {m: bool(choices[m].edges) for m in METHODS},
              "sensors": dict(zip(("training", "new_at_test", "gone_at_test"), _split_sizes(config)),
                              observed_never=int(config["nodes"]) - sum(_split_sizes(config)[:2])),
              "authors_lr_inside_grid": choices[METHODS[0]].paper_inside,
              "stop_environments_per_step": int(config["envs"]),
              "regularisers": "every method: dropout 0.1 in the feed-forward layers, gradient-norm clipping at 5, "
                              "early stopping on the validation MAE (best epoch kept, patience 10)",
              "note": "equal epochs, batches, training windows and optimizer steps for every learned method; STOP's "
                      "step evaluates envs perturbed copies (envs x the forward passes per step); the ridges fit "
                      "the same training windows in closed form"}
    tables = {"per_model": model_rows, "errors": rows,
              "tuning": evidence.tuning_rows(choices, keys=("method",), metric="val_mae")}
    return Outcome(metrics=metrics, baselines=baselines, tables=tables, budget=budget)


def _power(model_rows: list, config: Mapping[str, Any]) -> dict:
    """This run as a pilot of the two paired claims against the strongest baseline: the seeds the
    claim's one-sided Wilcoxon needs (power 0.8, alpha 0.05) for the effect this run measured, and for
    the paper's effect (STOP's MAE 17.01% (OOD) / 18.44% (inductive) below the baseline's, the abstract)
    with the spread of this run's paired differences."""
    out = {"seeds": int(config["seeds"])}
    for split, rel in (("ood", 0.1701), ("inductive", 0.1844)):
        val = {(r["method"], r["seed"]): r["value"] for r in model_rows if r["split"] == split}
        seeds = sorted(k for m, k in val if m == "stop")
        diffs = np.array([val[("best-baseline", k)] - val[("stop", k)] for k in seeds])  # > 0 favours STOP
        if diffs.size < 2:
            out[split] = None
            continue
        sd = float(diffs.std(ddof=1))
        base = float(np.mean([val[("best-baseline", k)] for k in seeds]))
        out[split] = {"pilot": evidence.power_from_pilot(diffs, test="wilcoxon"),
                      "paper_effect": (evidence.power_from_pilot(effect=rel * base, sd=sd, test="wilcoxon")
                                       if sd > 0 else None),
                      "paper_relative_effect": rel, "paired_difference_sd": sd,
                      "measured_relative_effect": float(diffs.mean()) / base}
    return out


def _train_windows(c: Mapping[str, Any]) -> range:
    """The training windows' start indices (the same for every method: ``windows`` over the training days)."""
    spd, hor, seq = int(c["steps_per_day"]), int(c["horizon"]), int(c["seq"])
    return range(seq, int(c["train_days"]) * spd - hor + 1)


def _vs(split: str, source: str) -> Claim:
    what = {"ood": "out-of-distribution MAE (after the shift: rewired roads, shifted demand, 10% of the sensors "
                   "gone; on the training sensors still present; graph models given the config's test_graph, "
                   "the paper's: the graph known at training time)",
            "inductive": "inductive MAE (sensors unseen in training, after the shift, same test graph)"}[split]
    return Claim(text=f"STOP's {what} is below the strongest baseline's (the baseline with the lowest tuning "
                      "validation MAE; paired over test seeds, one mean MAE per trained model)",
                 metric=f"metrics.{split}_mae", compare=f"baselines.best_baseline.{split}_mae", op="<",
                 test="wilcoxon signed-rank over seeds", table="per_model",
                 a={"method": "stop", "split": split}, b={"method": "best-baseline", "split": split},
                 pair_on=("seed",), kind="paper", source=source,
                 controls=tuple(Control(f"baseline ranked {k} (tuning validation MAE)",
                                        f"baselines.baseline_{k}.{split}_mae", a={"method": f"baseline-{k}", "split": split})
                                for k in range(2, len(BASELINES) + 1)))


_GEN = "abstract: 'STOP achieves up to 17.01% improvement in generalization performance'"
_IND = "abstract: '... and 18.44% improvement in inductive learning performance'"
_DRO = ("abstract: 'we customize a spatiotemporal distributionally robust optimization approach that exposes the "
        "model to challenging environments, thereby further enhancing its generalization capabilities'")
_SIGNAL = ("sanity: the data carries a spatial signal: neighbour history cuts a ridge forecaster's in-distribution "
           "MAE by more than 10% (mean over test seeds)")

_STALE = ("sanity (gate on the shift's size): relying on the given graph costs a node-to-node model more than "
          f"{STALE_COST:.0%} out of distribution: GWNet-like's MAE given the graph known at training time is above "
          f"{1 + STALE_COST:.2f} x its MAE given the true rewired graph (paired over test seeds)")

_SIGNAL_GATE, _OOD, _INDUCTIVE, _ABLATION = evidence.gate(
    Claim(text=_SIGNAL, metric="metrics.neighbour_gain", compare=0.10, op=">", kind="sanity"),
    _vs("ood", _GEN),
    _vs("inductive", _IND),
    Claim(text="ablation: STOP's out-of-distribution MAE is below the same model's trained without the "
               "perturbed environments and DRO (paired over test seeds)",
          metric="metrics.ood_mae", compare="baselines.stop_nodro.ood_mae", op="<",
          test="wilcoxon signed-rank over seeds", table="per_model", a={"method": "stop", "split": "ood"},
          b={"method": "stop-nodro", "split": "ood"}, pair_on=("seed",), kind="paper", source=_DRO),
)

CLAIMS = (
    _SIGNAL_GATE,
    # the paper's premise in this setting: node-to-node messaging over a graph that no longer describes the flow
    *evidence.gate(
        Claim(text=_STALE, metric="baselines.gwnet_like.ood_stale_mae",
              compare="baselines.gwnet_like.ood_true_plus_gate_mae", op=">", test="wilcoxon signed-rank over seeds",
              table="per_model", a={"method": "gwnet-like", "split": "ood_stale"},
              b={"method": "gwnet-like", "split": "ood_true_plus_gate"},
              pair_on=("seed",), kind="sanity"),
        _OOD, _INDUCTIVE),
    _ABLATION,
    Claim(text="sanity: the shift is real: STID's MAE is higher after the shift than before",
          metric="baselines.stid.ood_mae", compare="baselines.stid.id_mae", op=">", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """MAE per method on ID, OOD and inductive (unseen nodes) test sets, with the spread over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = ("id", "ood_stale", "ood_true", "inductive_stale")
    rows = record["tables"]["per_model"]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    w = 0.8 / len(METHODS)
    for k, m in enumerate(METHODS):
        per_seed = [[np.mean([r["value"] for r in rows if r["method"] == m and r["split"] == s and r["seed"] == sd])
                     for sd in sorted({r["seed"] for r in rows})] for s in splits]
        mean = [np.mean(v) for v in per_seed]
        err = [[mu - np.min(v) for mu, v in zip(mean, per_seed)], [np.max(v) - mu for mu, v in zip(mean, per_seed)]]
        ax.bar(np.arange(len(splits)) + k * w, mean, w, yerr=err, label=m)
    ax.set_xticks(np.arange(len(splits)) + 0.4 - w / 2)
    ax.set_xticklabels(["in distribution", "OOD, graph\nknown at training", "OOD, true\nrewired graph",
                        "unseen nodes, graph\nknown at training"], fontsize=7)
    ax.set_ylabel("MAE (min-max over seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return {"mae": fig}


EXPERIMENT = Experiment(
    name=NAME, paper=PAPER,
    ray="tuning runs (method x lr) and (method x seed) simulate-train-evaluate runs as pmap tasks",
    checked_against="authors' code (PoorOtterBob/STOP: the MLP backbone, Core_Adaptive context-aware units and "
                    "the STOP forward); the abstract for message perturbation and the spatio-temporal DRO, which "
                    "the released code lacks (implemented as assumed in rayml.graphs.stop)",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
