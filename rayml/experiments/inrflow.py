"""inrflow reproduction: one point-wise flow-matching transformer for images and point clouds.

The paper (INRFlow, ICML 2025) trains the same ambient-space flow transformer on images, 3-D point
clouds and proteins, and samples images at resolutions above the training one. We run, on every
(modality, seed):

- images: ``load_digits`` at 16x16 (bilinear upsampling of the 8x8 digits) as (pixel coordinate,
  intensity) sets; a random split into training digits and held-out digits per seed;
- point clouds: ``n_points`` points on spheres, tori, boxes and chairs made of boxes;
- methods at equal parameter count (each baseline's width matched to INRFlow's), training steps and
  batch: ``inrflow`` (the point-wise objective, a quarter of the pixels as queries), two grid models
  on the fixed 16x16 grid, ``grid`` (a flow-matching MLP) and ``unet`` (a small time-conditioned
  U-Net), and ``pointtf`` (a point-cloud flow transformer with self-attention over all points, no
  point-wise decoder);
- the trivial baselines (issue 41), no network: a full-covariance Gaussian on the training pixels;
  for clouds a Gaussian blob of the training points and every cloud a sphere of their mean radius,
  scored against the same held-out data as every draw. They are the gates: a modality's paper claims
  are ``incomplete`` unless INRFlow beats its trivial baselines;
- each method's learning rate tuned on ``lr_grid`` (the same grid for every method, {1e-3, 3e-3} as
  the issue asks: the authors' 1e-4 learns nothing in a few thousand steps) with
  ``rayml.evidence.tune`` on a tuning seed apart from the test seeds, by the same distance as the
  test (FID-like / MMD-CD to validation data), extended ``lr_extend`` times past an edge holding the
  choice; a choice still on an edge is flagged (``metrics.lr_on_edge`` and a sanity claim);
- metrics against held-out data: an FID-like distance (Fréchet distance of the features of a small
  digits classifier trained by the project and cached, one per resolution) for images; MMD-CD,
  COV-CD, and with the exact earth mover's distance MMD-EMD and COV-EMD for point clouds;
- ``draws`` independent sample draws per trained model, each scored against its own held-out data
  (images: a disjoint slice of the held-out digits; clouds: a fresh reference set), the clouds' metrics
  also per shape class (the same nearest neighbours, the sums restricted to one class's reference
  clouds). The per-modality claims pair the methods over (shape class, seed, draw) (images: (seed,
  draw)) with a sign test, and ``metrics.case_wins`` counts the cases each method wins, so no shape
  class, seed or reference set decides a claim alone;
- ``curve`` (empty at quick and full, ``[6, 12]`` at tiny, the test suite's size; e.g.
  ``--set curve=[100,200]``): EMA snapshots along each test run scored like draw 0, the training curve
  of every method (the ``curve`` table); the loss per tenth of training is always in the ``loss`` table;
- the INR property, tested in pixel space (issue 41: an FID-like judge pools to 4x4 and cannot see
  resolution): ``n_cond`` held-out digits at 16x16 are the true noisy context at every ODE step
  (``conditional_resample``), the model decodes every ``cond_res`` grid, and the pixel RMSE against
  the exact digit at that resolution (the data are bilinear upsamplings of the 8x8 digits) is
  compared with the model's own 16x16 output replicated by nearest neighbour (and, for reference,
  upsampled bilinearly: the ideal interpolant of bilinear data). A figure shows unconditional samples
  at ``show_res`` too (one joint sampling, the training grid as context). Point clouds are also sampled with ``dense_factor`` times the training
  points (INRFlow: the training points are the context, the rest extra queries; the transformer:
  all points jointly).

Every (phase, modality, method, lr, seed) training and scoring is one ``rayml.runtime.pmap`` task
(the longest submitted first); the metric floors share the test map. Each task records its wall and
CPU seconds in the ``timing_tasks`` table.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from rayml import evidence, runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim

PAPER = "INRFlow: Flow Matching INRs in Ambient Space (Apple ML research), ICML 2025"
METHOD = "inrflow"

_BASE = dict(res=16, cond_res=[28], show_res=[28, 64], curve=[], grid=4, heads=2, mlp_ratio=2.0, fourier_freqs=6,
             query_fraction=0.25, ema=0.999, feature_epochs=8, dense_factor=4, lr_grid=[1e-3, 3e-3], lr_extend=0)
SIZES = {
    "tiny": dict(_BASE, seeds=2, draws=2, steps=12, batch=8, hidden=16, depth=1, latents=8, point_depth=1, n_points=32,
                 n_clouds=24, n_eval=24, n_eval_points=12, sample_steps=4, lr_grid=[1e-3], n_show=2, show_res=[28],
                 n_cond=4, curve=[6, 12]),
    # a preview: far too short to beat the trivial baselines (the gates fail and decide nothing; see the page)
    # lr_extend=1 (session 10): every method chose the grid's upper edge 3e-3 at quick; one step past it
    "quick": dict(_BASE, seeds=2, draws=2, steps=100, batch=32, hidden=32, depth=2, latents=16, point_depth=1, n_points=64,
                  n_clouds=400, n_eval=64, n_eval_points=24, sample_steps=10, n_show=6, n_cond=16, lr_extend=1),
    "full": dict(_BASE, seeds=4, draws=2, steps=3000, batch=32, hidden=32, depth=2, latents=16, point_depth=2, n_points=64,
                 n_clouds=2000, n_eval=128, n_eval_points=48, sample_steps=25, n_show=8, n_cond=64, cond_res=[28, 64],
                 lr_extend=1, feature_epochs=20),
}
MODALITIES = ("image", "points")
METHODS = {"image": ("inrflow", "grid", "unet"), "points": ("inrflow", "pointtf")}
# the baseline each modality is compared with in the cross-modality aggregates (claims 1 and 2)
COMPARISONS = {"mlp": {"image": "grid", "points": "pointtf"}, "unet": {"image": "unet", "points": "pointtf"}}
# rough relative cost of a task, to submit the longest first (shorter makespan on few workers)
_COST = {("image", "inrflow"): 5, ("points", "inrflow"): 4, ("points", "pointtf"): 3, ("image", "unet"): 3,
         ("image", "grid"): 1}


# ----------------------------------------------------------------------------- models and data


_WIDTHS: dict = {}  # per-process memo of the matched baseline widths (a bisection builds a dozen models)


def _models(config):
    """The INRFlow model of each modality and its width-matched baselines (fresh, seeded by the caller)."""
    from rayml.generative import inrflow as F
    from rayml.generative import inrflow_baselines as B

    c = config
    img = lambda: F.INRFlow(F.ModelConfig(modality="image", hidden=c["hidden"], depth=c["depth"], heads=c["heads"],  # noqa: E731
                                          grid=c["grid"], mlp_ratio=c["mlp_ratio"], coord_res=c["res"]))
    pts = lambda: F.INRFlow(F.ModelConfig(modality="points", hidden=c["hidden"], depth=c["point_depth"],  # noqa: E731
                                          heads=c["heads"], latents=c["latents"], mlp_ratio=c["mlp_ratio"],
                                          fourier_freqs=c["fourier_freqs"]))
    ptf = lambda w: B.PointTransformerFlow(w, depth=2, heads=c["heads"], mlp_ratio=c["mlp_ratio"],  # noqa: E731
                                           fourier_freqs=c["fourier_freqs"])
    key = tuple(c[k] for k in ("hidden", "depth", "heads", "grid", "mlp_ratio", "res", "point_depth", "latents",
                               "fourier_freqs"))
    if key not in _WIDTHS:
        # the bisection builds models, which draws from the global RNG: it must not move the caller's
        # seeded stream (else the first task in each worker process initialises differently)
        with torch.random.fork_rng(devices=[]):
            n_img, n_pts = F.param_count(img()), F.param_count(pts())
            step = 2 * c["heads"]
            _WIDTHS[key] = (B.match_width(lambda w: B.GridMLPFlow(c["res"], w), n_img, range(4, 1025, 2)),
                            B.match_width(lambda w: B.GridUNetFlow(c["res"], w), n_img, range(2, 257)),
                            B.match_width(ptf, n_pts, range(step, 1025, step)))
    gw, uw, pw = _WIDTHS[key]
    return {("image", "inrflow"): img, ("points", "inrflow"): pts,
            ("image", "grid"): lambda: B.GridMLPFlow(c["res"], gw),
            ("image", "unet"): lambda: B.GridUNetFlow(c["res"], uw),
            ("points", "pointtf"): lambda: ptf(pw)}


def _digit_split(res, seed):
    """Training and held-out digits at ``res`` for one seed (30% held out)."""
    from rayml.generative import inrflow_data as D

    x, _ = D.digit_images(res)
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(int(seed) % (2**63)))
    cut = int(0.7 * x.shape[0])
    return x[perm[:cut]], x[perm[cut:]], perm


def _resolution_test(model, held, s_data, seed, config) -> list:
    """The pixel-space test of the INR property: the first ``n_cond`` held-out digits at the training
    resolution as a true noisy context (``conditional_resample``), decoded at every ``cond_res``; per
    digit the RMSE against the exact image at that resolution (the data are bilinear upsamplings of the
    8x8 digits, so the truth exists at every resolution) of the native decoding, of the model's own
    training-resolution output replicated by nearest neighbour, and (reference: the ideal interpolant
    of bilinear data) upsampled bilinearly."""
    from rayml.generative import inrflow as F

    res, n = int(config["res"]), int(config["n_cond"])
    outs = F.conditional_resample(model, held[:n], [int(r) for r in config["cond_res"]],
                                  steps=int(config["sample_steps"]), seed=seed)
    own = outs[res][:, None]
    rows = []
    for r in config["cond_res"]:
        r = int(r)
        truth = _digit_split(r, s_data)[1][:n]
        up = {"native": outs[r].clamp(-1, 1),
              "nearest": torch.nn.functional.interpolate(own, size=(r, r), mode="nearest")[:, 0].clamp(-1, 1),
              "bilinear": torch.nn.functional.interpolate(own, size=(r, r), mode="bilinear",
                                                          align_corners=True)[:, 0].clamp(-1, 1)}
        for how, x in up.items():
            rmse = ((x - truth) ** 2).mean(dim=(1, 2)).sqrt()
            rows += [{"res": r, "digit": i, "decoding": how, "value": float(v)} for i, v in enumerate(rmse)]
    return rows


def _round(t, nd=3):
    return np.round(np.asarray(t, dtype=np.float64), nd).tolist()


def fit_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """Train one method on one (modality, seed) and score its samples against held-out data."""
    import time

    from rayml.generative import inrflow as F
    from rayml.generative import inrflow_data as D

    phase, modality, method, lr, index, seed = item
    torch.set_num_threads(1)
    t_start, cpu_start = time.perf_counter(), time.process_time()
    config = shared["config"]
    s_data, s_fit, s_sample, s_hi = runtime.seeds(seed, 4)
    torch.manual_seed(s_fit % (2**63))
    model = _models(config)[(modality, method)]()
    res = int(config["res"])
    cfg = F.TrainConfig(steps=int(config["steps"]), batch=int(config["batch"]) if modality == "image" else
                        max(1, int(config["batch"]) // 2), lr=float(lr), ema=float(config["ema"]),
                        query_fraction=float(config["query_fraction"]) if method == "inrflow" else 1.0)
    steps, n_eval = int(config["sample_steps"]), int(config["n_eval"])
    # the training curve (test runs only): EMA snapshots along the run, scored like draw 0
    curve = tuple(int(k) for k in config["curve"]) if phase == "test" else ()
    out = {"phase": phase, "modality": modality, "method": method, "lr": float(lr), "index": index,
           "params": F.param_count(model)}
    timing = {}
    if modality == "image":
        train_x, held, _ = _digit_split(res, s_data)
        vals = train_x.reshape(train_x.shape[0], -1, 1)
        coords = F.image_grid(res).expand(vals.shape[0], -1, -1)
        fit = F.train(model, coords, vals, cfg, s_fit, snapshots=curve)
        timing["train"] = time.perf_counter() - t_start
        net = D.load_feature_net(shared["features"][res], res)
        samples = F.sample_images(fit["ema"], n_eval, res, train_resolution=res, steps=steps, seed=s_sample)
        out["finite"] = bool(torch.isfinite(samples).all())
        out["fid"] = D.frechet_distance(D.features(net, samples), D.features(net, held[:n_eval]))
        if phase == "test":
            # independent sample draws, each scored against its own disjoint slice of the held-out digits
            draws = []
            for d, (s_smp, _) in enumerate(_draw_seeds(seed, config), start=0):
                if d:
                    x = F.sample_images(fit["ema"], n_eval, res, train_resolution=res, steps=steps, seed=s_smp)
                    out["finite"] = out["finite"] and bool(torch.isfinite(x).all())
                    fid = D.frechet_distance(D.features(net, x), D.features(net, held[d * n_eval:(d + 1) * n_eval]))
                else:
                    fid = out["fid"]
                draws.append({"draw": d, "case": "digits", "fid": fid})
            out["draws"] = draws
            out["fid"] = float(np.mean([r["fid"] for r in draws]))
        if curve:
            ref = D.features(net, held[:n_eval])
            out["curve"] = [{"step": k, "metric": "fid", "value": D.frechet_distance(D.features(net, F.sample_images(
                m, n_eval, res, train_resolution=res, steps=steps, seed=s_sample)), ref)} for k, m in fit["snapshots"].items()]
        timing["sample"] = time.perf_counter() - t_start - timing["train"]
        if phase == "test" and method == "inrflow":
            out["cond"] = _resolution_test(fit["ema"], held, s_data, s_hi, config)
        if phase == "test":
            if index == 0:
                k = int(config["n_show"])
                out["show"] = {"train_res": _round(samples[:k])}
                if method == "inrflow":
                    out["show"]["data"] = _round(held[:k])
                    # the INR figure: the same k samples (same training-grid noise as above) at the
                    # training resolution and at every resolution of show_res, none trained on
                    many = F.sample_multires(fit["ema"], k, [res] + [int(r) for r in config["show_res"]],
                                             train_resolution=res, steps=steps, seed=s_sample)
                    out["show"]["multires"] = {str(r): _round(v) for r, v in many.items()}
    else:
        n_pts, n_clouds, n_eval_p = int(config["n_points"]), int(config["n_clouds"]), int(config["n_eval_points"])
        train_c, _ = D.shape_clouds(n_clouds, n_pts, s_data)
        held_c, _ = D.shape_clouds(n_eval_p, n_pts, s_data + 1)
        fit = F.train(model, train_c, train_c, cfg, s_fit, snapshots=curve)
        timing["train"] = time.perf_counter() - t_start
        samples = F.sample_points(fit["ema"], n_eval_p, n_pts, context_points=n_pts, steps=steps, seed=s_sample)
        out["finite"] = bool(torch.isfinite(samples).all())
        if phase == "tune":
            out.update(D.mmd_cov(samples, held_c))
        else:
            # independent sample draws, each against its own held-out reference set (draw 0: the samples
            # above against held_c); scored per shape class so that no class decides a claim alone
            draws = []
            for d, (s_smp, s_ref) in enumerate(_draw_seeds(seed, config)):
                x = samples
                if d:
                    x = F.sample_points(fit["ema"], n_eval_p, n_pts, context_points=n_pts, steps=steps, seed=s_smp)
                    out["finite"] = out["finite"] and bool(torch.isfinite(x).all())
                ref, kinds = D.shape_clouds(n_eval_p, n_pts, s_data + 1 if d == 0 else s_ref)
                m = D.mmd_cov(x, ref, with_emd=True, reference_kinds=kinds)
                draws.append({"draw": d, **{k: v for k, v in m.items() if k != "by_kind"}})
                draws += [{"draw": d, "case": kind, **v} for kind, v in m["by_kind"].items()]
            out["draws"] = draws
            for k in _POINT_KEYS:
                out[k] = float(np.mean([r[k] for r in draws if "case" not in r]))
            out["curve"] = [{"step": k, "metric": name, "value": v} for k, m in fit["snapshots"].items() for name, v in
                            D.mmd_cov(F.sample_points(m, n_eval_p, n_pts, context_points=n_pts, steps=steps,
                                                      seed=s_sample), held_c).items()]
        timing["sample"] = time.perf_counter() - t_start - timing["train"]
        if phase == "test":
            dense = n_pts * int(config["dense_factor"])
            held_d, _ = D.shape_clouds(n_eval_p, dense, s_data + 1)  # the same shapes, denser
            samples_d = F.sample_points(fit["ema"], n_eval_p, dense, context_points=n_pts, steps=steps, seed=s_hi)
            out["finite"] = out["finite"] and bool(torch.isfinite(samples_d).all())
            dd = D.mmd_cov(samples_d, held_d)
            out["mmd_cd_dense"], out["cov_cd_dense"] = dd["mmd_cd"], dd["cov_cd"]
            if index == 0:
                k = min(4, n_eval_p)
                out["show"] = {"clouds": _round(samples[:k]), "dense": _round(samples_d[:2])}
                if method == "inrflow":
                    out["show"]["data"] = _round(held_c[:k])
    losses = fit["losses"]
    q = max(1, len(losses) // 10)
    out["loss_first"] = float(np.mean(losses[:q]))
    out["loss_last"] = float(np.mean(losses[-q:]))
    out["loss_curve"] = [float(np.mean(losses[i:i + q])) for i in range(0, len(losses), q)]
    timing["total"] = time.perf_counter() - t_start
    timing["cpu"] = time.process_time() - cpu_start  # CPU seconds: what an idle core would take
    out["timing"] = timing
    return out


_POINT_KEYS = ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd")


def _draw_seeds(seed, config) -> list:
    """Per test draw ``d``: (sampling seed, reference-set seed); spawned from the item's seed after the
    four seeds ``fit_task`` uses, so they are the same for every method of a test seed (paired draws)."""
    n = int(config["draws"])
    extra = runtime.seeds(seed, 4 + 3 * n)[4:]
    return [(extra[3 * d], extra[3 * d + 1]) for d in range(n)]


TRIVIAL = {"image": ("gaussian",), "points": ("blob", "sphere")}


def floor_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """The metrics' floor (training data itself scored against the held-out data) and the trivial
    baselines (``TRIVIAL``: a full-covariance Gaussian on the pixels; a Gaussian blob and every cloud a
    sphere of the mean radius), scored against the same held-out slices / reference sets as every test
    draw."""
    from rayml.generative import inrflow_baselines as B
    from rayml.generative import inrflow_data as D

    modality, index, seed = item
    torch.set_num_threads(1)
    config = shared["config"]
    s_data = runtime.seeds(seed, 4)[0]
    if modality == "image":
        res, n_eval = int(config["res"]), int(config["n_eval"])
        train_x, held, _ = _digit_split(res, s_data)
        net = D.load_feature_net(shared["features"][res], res)
        sl = lambda x, d: x[d * n_eval:(d + 1) * n_eval]  # noqa: E731  (the test draws' held-out slices)
        fid = lambda x, d: D.frechet_distance(D.features(net, x), D.features(net, sl(held, d)))  # noqa: E731
        n_draws = int(config["draws"])
        draws = [{"draw": d, "case": "digits", "fid": fid(sl(train_x, d), d)} for d in range(n_draws)]
        trivial = {"gaussian": [{"draw": d, "case": "digits",
                                 "fid": fid(B.gaussian_images(train_x, n_eval, seed=s_smp), d)}
                                for d, (s_smp, _) in enumerate(_draw_seeds(seed, config))]}
        return {"modality": modality, "index": index, "draws": draws, "fid": float(np.mean([r["fid"] for r in draws])),
                "trivial": trivial}
    n_pts, n_eval_p, n_clouds = int(config["n_points"]), int(config["n_eval_points"]), int(config["n_clouds"])
    n = int(config["draws"])
    extra = runtime.seeds(seed, 4 + 3 * n)[4:]
    train_c, _ = D.shape_clouds(n_clouds, n_pts, s_data)
    draws, trivial = [], {k: [] for k in TRIVIAL["points"]}

    def scored(x, ref, kinds, d):
        m = D.mmd_cov(x, ref, with_emd=True, reference_kinds=kinds)
        return [{"draw": d, **{k: v for k, v in m.items() if k != "by_kind"}}] + [
            {"draw": d, "case": kind, **v} for kind, v in m["by_kind"].items()]

    for d in range(n):  # the same reference sets as the test draws, against fresh clouds of the shapes
        ref, kinds = D.shape_clouds(n_eval_p, n_pts, s_data + 1 if d == 0 else extra[3 * d + 1])
        other, _ = D.shape_clouds(n_eval_p, n_pts, s_data + 2 if d == 0 else extra[3 * d + 2])
        draws += scored(other, ref, kinds, d)
        s_smp = extra[3 * d]
        trivial["blob"] += scored(B.gaussian_blob(train_c, n_eval_p, n_pts, seed=s_smp), ref, kinds, d)
        trivial["sphere"] += scored(B.mean_radius_spheres(train_c, n_eval_p, n_pts, seed=s_smp), ref, kinds, d)
    return {"modality": modality, "index": index, "draws": draws, "trivial": trivial,
            **{k: float(np.mean([r[k] for r in draws if "case" not in r])) for k in _POINT_KEYS}}


# ----------------------------------------------------------------------------- the run


def _check(config):
    for key in ("seeds", "draws", "steps", "batch", "hidden", "depth", "heads", "grid", "latents", "point_depth", "n_points",
                "n_clouds", "n_eval", "n_eval_points", "sample_steps", "n_show", "fourier_freqs", "feature_epochs",
                "dense_factor"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    v = config["res"]
    if isinstance(v, bool) or not isinstance(v, int) or v < 4:
        raise ValueError(f"res must be an integer >= 4, got {v!r}")
    cond = config["cond_res"]
    if not isinstance(cond, list) or not cond or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 4
                                                         and v != config["res"] for v in cond):
        raise ValueError(f"cond_res must be a non-empty list of resolutions (integers >= 4) other than res "
                         f"(the resolutions not trained on), got {cond!r}")
    for key in ("n_cond",):
        if isinstance(config[key], bool) or not isinstance(config[key], int) or not 1 <= config[key] <= 500:
            raise ValueError(f"{key} must be an integer in [1, 500], got {config[key]!r}")
    if isinstance(config["lr_extend"], bool) or not isinstance(config["lr_extend"], int) or config["lr_extend"] < 0:
        raise ValueError(f"lr_extend must be an integer >= 0, got {config['lr_extend']!r}")
    show = config["show_res"]
    if not isinstance(show, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2 for v in show):
        raise ValueError(f"show_res must be a list of resolutions (integers >= 2), got {show!r}")
    if config["hidden"] % (2 * config["heads"]) or config["hidden"] % 4:
        raise ValueError(f"hidden must be divisible by 4 and by 2 * heads, got hidden={config['hidden']}")
    if config["batch"] < 2:
        raise ValueError(f"batch must be >= 2 (point clouds train with batch // 2), got {config['batch']}")
    if config["n_eval"] < 8 or config["n_eval_points"] < 4 or config["n_clouds"] < 4:
        raise ValueError("n_eval must be >= 8, n_eval_points >= 4 and n_clouds >= 4")
    if config["n_eval"] * config["draws"] > 540:
        raise ValueError(f"n_eval * draws must be <= 540 (the held-out digits, one disjoint slice per draw), got "
                         f"n_eval={config['n_eval']}, draws={config['draws']}")
    curve = config["curve"]
    if not isinstance(curve, list) or not all(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= config["steps"]
                                              for k in curve):
        raise ValueError(f"curve must be a list of step counts in [1, steps={config['steps']}], got {curve!r}")
    grid = config["lr_grid"]
    if not isinstance(grid, list) or not grid or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                         and v > 0 for v in grid):
        raise ValueError(f"lr_grid must be a non-empty list of learning rates > 0, got {grid!r}")
    if not 0 < config["query_fraction"] <= 1:
        raise ValueError(f"query_fraction must be in (0, 1], got {config['query_fraction']!r}")
    if not 0 <= config["ema"] < 1:
        raise ValueError(f"ema must be in [0, 1), got {config['ema']!r}")
    if not config["mlp_ratio"] > 0:
        raise ValueError(f"mlp_ratio must be > 0, got {config['mlp_ratio']!r}")


_SCORE = {"image": ("fid", 1.0), "points": ("mmd_cd", 1.0)}  # the distance each modality is scored (and tuned) by


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune each method's lr on a tuning seed, then train / sample / score on the test seeds."""
    from rayml.generative import inrflow_data as D

    _check(config)
    n_seeds = int(config["seeds"])
    test_seeds, (tune_seed,) = evidence.split_seeds(seed, n_seeds, 1)
    grid = [float(v) for v in config["lr_grid"]]
    epochs = int(config["feature_epochs"])
    shared = {"config": dict(config), "features": {config["res"]: D.feature_net(int(config["res"]), seed=0,
                                                                                epochs=epochs)}}
    pairs = [(m, mth) for m in MODALITIES for mth in METHODS[m]]
    longest_first = sorted(pairs, key=lambda p: -_COST[p])  # submission order only: results are keyed, not positional

    timing_rows = []

    def evaluate(problems):
        """Tuning scores (FID-like / MMD-CD on the tuning seed; a non-finite sample scores inf) of one round."""
        order = sorted(range(len(problems)), key=lambda i: -_COST[problems[i][0]])
        items = [("tune", *problems[i][0], problems[i][1]["lr"], 0, tune_seed) for i in order]
        got = runtime.pmap(fit_task, items, shared=shared, chunk_size=1, desc="inrflow tuning")
        timing_rows.extend(got)
        scores = [0.0] * len(problems)
        for i, r in zip(order, got):
            v = r[_SCORE[r["modality"]][0]]
            scores[i] = float(v) if r["finite"] and np.isfinite(v) else float("inf")
        return scores

    choices = evidence.tune(evaluate, {p: {"lr": grid} for p in pairs}, paper={"lr": 1e-4},
                            extend=int(config["lr_extend"]) if len(grid) > 1 else 0, limits={"lr": (1e-5, 0.1)})
    tuned = {p: choices[p].setting["lr"] for p in pairs}

    items = [("test", m, mth, tuned[(m, mth)], i, s) for m, mth in longest_first for i, s in enumerate(test_seeds)]
    items += [("floor", m, i, s) for i, s in enumerate(test_seeds) for m in MODALITIES]
    out = runtime.pmap(_task, items, shared=shared, chunk_size=1, desc="inrflow runs")
    res = sorted((r for r in out if "method" in r), key=lambda r: (r["index"], MODALITIES.index(r["modality"]),
                                                                   METHODS[r["modality"]].index(r["method"])))
    floors = [r for r in out if "method" not in r]
    timing_rows += res

    keys = ("fid", "mmd_cd", "cov_cd", "mmd_emd", "cov_emd", "mmd_cd_dense", "cov_cd_dense", "loss_first", "loss_last")
    rows, shows, curves = [], [], []
    for r in res:
        for key in keys:
            if key in r:
                rows.append({"modality": r["modality"], "method": r["method"], "seed": r["index"], "metric": key,
                             "value": float(r[key])})
        if "show" in r:
            shows.append({"modality": r["modality"], "method": r["method"], **r["show"]})
        for k, v in enumerate(r["loss_curve"]):
            curves.append({"modality": r["modality"], "method": r["method"], "seed": r["index"], "chunk": k,
                           "metric": "loss", "value": v})
    for f in floors:
        for key in ("fid", "mmd_cd", "cov_cd", "mmd_emd", "cov_emd"):
            if key in f:
                rows.append({"modality": f["modality"], "method": "data", "seed": f["index"], "metric": key,
                             "value": float(f[key])})
        for name, drs in f["trivial"].items():
            for key in ("fid",) + _POINT_KEYS:
                v = [d[key] for d in drs if d.get("case", "digits") == "digits" and key in d]  # whole-set rows
                if v:
                    rows.append({"modality": f["modality"], "method": name, "seed": f["index"], "metric": key,
                                 "value": float(np.mean(v))})
    cond_rows = [{"seed": r["index"], **c} for r in res for c in r.get("cond", ())]

    # the per-draw table the tested claims pair on: images one row per (seed, draw) ("set" level); point
    # clouds one row per (shape class, seed, draw) ("class" level) and the whole reference set ("set")
    draw_rows = []
    trivial_runs = [{"modality": f["modality"], "index": f["index"], "method": name, "draws": drs}
                    for f in floors for name, drs in f["trivial"].items()]
    for r in res + [dict(f, method="data") for f in floors] + trivial_runs:
        for dr in r.get("draws", ()):
            for key in ("fid",) + _POINT_KEYS:
                if key in dr:
                    draw_rows.append({"modality": r["modality"], "method": r["method"], "seed": r["index"],
                                      "draw": dr["draw"], "case": dr.get("case", "all"),
                                      "level": "class" if r["modality"] == "points" and "case" in dr else "set",
                                      "metric": key, "value": float(dr[key])})

    def wins(modality, metric, base, level, lower):
        """Per-case wins of INRFlow and of ``base`` (and ties) over the paired rows of ``draw_rows``."""
        pick = lambda mth: {(r["case"], r["seed"], r["draw"]): r["value"] for r in draw_rows  # noqa: E731
                            if r["modality"] == modality and r["method"] == mth and r["metric"] == metric
                            and r["level"] == level}
        a, b = pick("inrflow"), pick(base)
        gaps = [(a[k] - b[k]) * (-1 if lower else 1) for k in sorted(set(a) & set(b), key=repr)]
        return {"inrflow": sum(g > 0 for g in gaps), base: sum(g < 0 for g in gaps), "ties": sum(g == 0 for g in gaps)}

    case_wins = {f"image/{b}/fid": wins("image", "fid", b, "set", True) for b in ("grid", "unet")}
    case_wins.update({f"points/pointtf/{k}": wins("points", k, "pointtf", "class", k.startswith("mmd"))
                      for k in _POINT_KEYS})

    def mean(modality, method, metric):
        v = [r["value"] for r in rows if r["modality"] == modality and r["method"] == method and r["metric"] == metric]
        return float(np.mean(v)) if v else float("nan")

    # the cross-modality comparisons: each modality's distance divided by a scale common to INRFlow and the
    # compared baseline, paired over (modality, seed), so neither modality's units decide the aggregate
    norm_rows = []
    for comp, base in COMPARISONS.items():
        for m in MODALITIES:
            key = _SCORE[m][0]
            scale = max(float(np.mean([mean(m, mth, key) for mth in ("inrflow", base[m])])), 1e-12)
            for r in rows:
                if r["modality"] == m and r["metric"] == key and r["method"] in ("inrflow", base[m]):
                    norm_rows.append({"comparison": comp, "case": m, "seed": r["seed"],
                                      "role": "inrflow" if r["method"] == "inrflow" else "baseline",
                                      "method": r["method"], "value": r["value"] / scale})

    def norm_mean(comp, role):
        v = [r["value"] for r in norm_rows if r["comparison"] == comp and r["role"] == role]
        return float(np.mean(v)) if v else float("nan")

    params = {f"{m}/{mth}": int(next(r["params"] for r in res if r["modality"] == m and r["method"] == mth))
              for m, mth in pairs}
    gap = max(abs(params[f"{m}/{mth}"] / params[f"{m}/inrflow"] - 1) for m, mth in pairs)
    finite = float(all(r["finite"] for r in res))
    inr = lambda m, k: mean(m, "inrflow", k)  # noqa: E731

    def cond_mean(how):
        v = [r["value"] for r in cond_rows if r["decoding"] == how]
        return float(np.mean(v)) if v else float("nan")

    metrics = {
        "fid": inr("image", "fid"),
        **{k: inr("points", k) for k in ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd", "mmd_cd_dense", "cov_cd_dense")},
        "trivial": {"gaussian_fid": mean("image", "gaussian", "fid"),
                    **{f"{b}_{k}": mean("points", b, k) for b in TRIVIAL["points"] for k in _POINT_KEYS}},
        "trivial_mmd_cd": min(mean("points", b, "mmd_cd") for b in TRIVIAL["points"]),
        "baselines_beat_trivial": {
            "image": {b: mean("image", b, "fid") < mean("image", "gaussian", "fid") for b in ("grid", "unet")},
            "points": {"pointtf": mean("points", "pointtf", "mmd_cd") < min(mean("points", b, "mmd_cd")
                                                                            for b in TRIVIAL["points"])}},
        "resolution_rmse": {how: cond_mean(how) for how in ("native", "nearest", "bilinear")},
        "distance_norm": norm_mean("mlp", "inrflow"), "distance_norm_unet": norm_mean("unet", "inrflow"),
        "loss_first": float(np.mean([r["loss_first"] for r in res])),
        "loss_last": float(np.mean([r["loss_last"] for r in res])),
        "finite": finite, "param_gap": float(gap), "params": params,
        "data_floor": {"fid": mean("image", "data", "fid"),
                       **{k: mean("points", "data", k) for k in ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd")}},
        "tuned_lr": {f"{m}/{mth}": tuned[(m, mth)] for m, mth in pairs},
        # tuned learning rates on an edge of a grid of more than one value (after any extension: the
        # optimum may lie outside)
        "lr_on_edge": [f"{m}/{mth}" for m, mth in pairs if choices[(m, mth)].edges],
        "case_wins": case_wins,
    }
    metrics["lr_on_edge_count"] = len(metrics["lr_on_edge"])
    baselines = {
        "grid": {"fid": mean("image", "grid", "fid")}, "unet": {"fid": mean("image", "unet", "fid")},
        "gaussian": {"fid": mean("image", "gaussian", "fid")},
        **{b: {k: mean("points", b, k) for k in _POINT_KEYS} for b in TRIVIAL["points"]},
        "pointtf": {k: mean("points", "pointtf", k) for k in ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd", "mmd_cd_dense",
                                                              "cov_cd_dense")},
        "baseline": {"distance_norm": norm_mean("mlp", "baseline"), "distance_norm_unet": norm_mean("unet", "baseline")},
    }
    budget = {"train_steps": int(config["steps"]), "batch_images": int(config["batch"]),
              "batch_points": max(1, int(config["batch"]) // 2), "sample_steps": int(config["sample_steps"]),
              "params": params, "test_seeds": n_seeds,
              "tuning": f"lr on {grid} (the issue's grid; the authors' 1e-4 lies below it, see the page), extended "
                        f"{int(config['lr_extend'])} time(s) past an edge holding the choice, on a separate tuning seed, "
                        "by FID-like (images) / MMD-CD (points) to validation data, per (modality, method)",
              "lr_choices": {f"{m}/{mth}": choices[(m, mth)].summary() for m, mth in pairs},
              "optimizer": "AdamW, grad-norm clip 2.0, EMA (warmed-up decay, max "
                           f"{config['ema']}), logit-normal t, Euler ODE sampling from the EMA weights"}
    timing = [{"phase": r["phase"], "modality": r["modality"], "method": r["method"], "lr": r["lr"], "seed": r["index"],
               **{f"{k}_s": round(v, 2) for k, v in r["timing"].items()}} for r in timing_rows]
    curve_rows = [{"modality": r["modality"], "method": r["method"], "seed": r["index"], **c}
                  for r in res for c in r.get("curve", ())]
    tables = {"quality": rows, "draws": draw_rows, "curve": curve_rows, "normalised": norm_rows, "samples": shows,
              "loss": curves, "timing_tasks": timing, "resolution": cond_rows,
              "tuning": evidence.tuning_rows({f"{m}/{mth}": c for (m, mth), c in choices.items()},
                                             metric="fid (image) / mmd_cd (points)")}
    # this run as the pilot of every paired paper claim: the pairs its own test needs for power 0.8
    metrics["power"] = evidence.claim_power(tables, CLAIMS)
    return Outcome(metrics=metrics, baselines=baselines, tables=tables, budget=budget)


def _task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """A test run (``fit_task``) or a metric floor (``floor_task``), so both share one pmap."""
    return floor_task(item[1:], shared) if item[0] == "floor" else fit_task(item, shared)


_DOMAINS = ("abstract: 'INRFlow effectively handles different data modalities such as images, 3D point clouds and "
            "protein structure data, achieving strong performance in different domains and outperforming comparable "
            "approaches'")
_CONTINUOUS = ("abstract: 'we introduce a conditionally independent point-wise training objective that enables INRFlow "
               "to make predictions continuously in coordinate space'")

_PAIR = ("case", "seed", "draw")


def _rows(modality, method, metric, level="class"):
    """The filter of a tested claim's rows in the ``draws`` table."""
    return {"modality": modality, "method": method, "metric": metric, "level": level}


_PAPER = dict(
    cross_mlp=Claim(text="across modalities (digits images, shape point clouds), a lower distance to held-out data than the "
               "equal-size baseline of each modality (FID-like / MMD-CD, each divided by its modality's mean over both "
               "methods; paired over modality x seed)",
          metric="metrics.distance_norm", compare="baselines.baseline.distance_norm", op="<",
          test="paired sign test over seeds", table="normalised", a={"comparison": "mlp", "role": "inrflow"},
          b={"comparison": "mlp", "role": "baseline"}, pair_on=("case", "seed"), source=_DOMAINS),
    cross_unet=Claim(text="across modalities, a lower distance to held-out data than the equal-size grid U-Net (images) and "
               "point transformer (clouds) (each distance divided by its modality's mean over INRFlow and that "
               "baseline; paired over modality x seed)",
          metric="metrics.distance_norm_unet", compare="baselines.baseline.distance_norm_unet", op="<",
          test="paired sign test over seeds", table="normalised", a={"comparison": "unet", "role": "inrflow"},
          b={"comparison": "unet", "role": "baseline"}, pair_on=("case", "seed"), source=_DOMAINS),
    fid_grid=Claim(text="images: lower FID-like distance to held-out digits than the equal-size grid flow-matching MLP "
               "(paired over seed x sample draw, each draw against its own disjoint held-out digits)",
          metric="metrics.fid", compare="baselines.grid.fid", op="<", test="paired sign test over seeds", table="draws",
          a=_rows("image", "inrflow", "fid", "set"), b=_rows("image", "grid", "fid", "set"), pair_on=_PAIR,
          source=_DOMAINS),
    mmd_cd=Claim(text="point clouds: lower MMD-CD to held-out shapes than the equal-size point transformer without the "
               "point-wise decoder (paired over shape class x seed x sample draw, each draw against its own held-out "
               "reference clouds)", metric="metrics.mmd_cd", compare="baselines.pointtf.mmd_cd", op="<",
          test="paired sign test over seeds", table="draws", a=_rows("points", "inrflow", "mmd_cd"),
          b=_rows("points", "pointtf", "mmd_cd"), pair_on=_PAIR, source=_DOMAINS),
    cov_cd=Claim(text="point clouds: higher COV-CD than the point transformer (paired over shape class x seed x draw)",
          metric="metrics.cov_cd", compare="baselines.pointtf.cov_cd", op=">", test="paired sign test over seeds",
          table="draws", a=_rows("points", "inrflow", "cov_cd"), b=_rows("points", "pointtf", "cov_cd"),
          pair_on=_PAIR, source=_DOMAINS),
    fid_unet=Claim(text="images: lower FID-like distance to held-out digits than the equal-size grid U-Net (paired over seed "
               "x sample draw)", metric="metrics.fid", compare="baselines.unet.fid", op="<",
          test="paired sign test over seeds", table="draws", a=_rows("image", "inrflow", "fid", "set"),
          b=_rows("image", "unet", "fid", "set"), pair_on=_PAIR, source=_DOMAINS),
    mmd_emd=Claim(text="point clouds: lower MMD-EMD (exact EMD) to held-out shapes than the point transformer (paired over "
               "shape class x seed x draw)", metric="metrics.mmd_emd", compare="baselines.pointtf.mmd_emd", op="<",
          test="paired sign test over seeds", table="draws", a=_rows("points", "inrflow", "mmd_emd"),
          b=_rows("points", "pointtf", "mmd_emd"), pair_on=_PAIR, source=_DOMAINS),
    cov_emd=Claim(text="point clouds: higher COV-EMD than the point transformer (paired over shape class x seed x draw)",
          metric="metrics.cov_emd", compare="baselines.pointtf.cov_emd", op=">", test="paired sign test over seeds",
          table="draws", a=_rows("points", "inrflow", "cov_emd"), b=_rows("points", "pointtf", "cov_emd"),
          pair_on=_PAIR, source=_DOMAINS),
    resolution=Claim(
        text="at a resolution never trained on, decoding the coordinates is closer to the exact image than replicating "
             "the model's own training-resolution output (pixel RMSE against the exact image, conditioned on the true "
             "noisy 16x16 context of held-out digits; paired over resolution x seed x digit)",
        metric="metrics.resolution_rmse.native", compare="metrics.resolution_rmse.nearest", op="<",
        test="paired sign test over seeds", table="resolution", a={"decoding": "native"}, b={"decoding": "nearest"},
        pair_on=("res", "seed", "digit"), tie=1e-6, source=_CONTINUOUS),
)
IMAGE_GATE = Claim(
    text="images: INRFlow's FID-like distance is below the trivial baseline's (a full-covariance Gaussian fitted to "
         "the training pixels; a model that does not beat it decides no image claim)",
    metric="metrics.fid", compare="baselines.gaussian.fid", op="<", kind="sanity")
POINTS_GATE = Claim(
    text="point clouds: INRFlow's MMD-CD is below both trivial baselines' (a Gaussian blob fitted to the training "
         "points; every cloud a sphere of the mean radius; a model that does not beat them decides no cloud claim)",
    metric="metrics.mmd_cd", compare="metrics.trivial_mmd_cd", op="<", kind="sanity")
_img = dict(zip(("cross_mlp", "cross_unet", "fid_grid", "fid_unet", "resolution"),
                evidence.gate(IMAGE_GATE, *(_PAPER[k] for k in ("cross_mlp", "cross_unet", "fid_grid", "fid_unet",
                                                                 "resolution")))[1:]))
_pts = dict(zip(("cross_mlp", "cross_unet", "mmd_cd", "cov_cd", "mmd_emd", "cov_emd"),
                evidence.gate(POINTS_GATE, _img["cross_mlp"], _img["cross_unet"],
                              *(_PAPER[k] for k in ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd")))[1:]))
CLAIMS = (
    IMAGE_GATE, POINTS_GATE, _pts["cross_mlp"], _pts["cross_unet"], _img["fid_grid"], _pts["mmd_cd"], _pts["cov_cd"],
    _img["fid_unet"], _pts["mmd_emd"], _pts["cov_emd"], _img["resolution"],
    Claim(text="the baselines are within 10% of INRFlow's parameter count", metric="metrics.param_gap", compare=0.1,
          op="<=", kind="sanity"),
    Claim(text="no tuned learning rate lies on an edge of the tuning grid (where the optimum could lie outside it)",
          metric="metrics.lr_on_edge_count", compare=0, op="<=", kind="sanity"),
    Claim(text="every sample is finite", metric="metrics.finite", compare=1.0, op=">=", kind="sanity"),
    Claim(text="the flow-matching loss falls during training (mean over runs, last tenth < first tenth)",
          metric="metrics.loss_last", compare="metrics.loss_first", op="<", kind="sanity"),
    Claim(text="the FID-like floor (training digits vs held-out digits) is below INRFlow's FID-like distance",
          metric="metrics.data_floor.fid", compare="metrics.fid", op="<", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """Headline distances (method vs baseline per modality, seed spread), digit samples at 16x16 and at
    the unseen resolution, point-cloud samples, loss curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["quality"]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    panels = (("image", "fid", ("inrflow", "grid", "unet", "gaussian", "data"), "FID-like at 16x16 (lower is better)"),
              ("points", "mmd_cd", ("inrflow", "pointtf", "blob", "sphere", "data"), "MMD-CD (lower is better)"),
              ("points", "mmd_emd", ("inrflow", "pointtf", "blob", "sphere", "data"), "MMD-EMD (lower is better)"),
              ("image", "hi", None, "pixel RMSE at the unseen resolution"))
    cond = record["tables"].get("resolution", [])
    for ax, (mod, metric, methods, label) in zip(axes, panels):
        if metric == "hi":
            bars = [(f"{how} @{r}", how, r) for r in sorted({c["res"] for c in cond})
                    for how in ("native", "nearest", "bilinear")]
        else:
            bars = [(mth, mth, metric) for mth in methods]
        for j, (name, mth, key) in enumerate(bars):
            if metric == "hi":
                v = [c["value"] for c in cond if c["decoding"] == mth and c["res"] == key]
            else:
                v = [r["value"] for r in rows if r["modality"] == mod and r["method"] == mth and r["metric"] == key]
            if not v:
                continue
            m = float(np.mean(v))
            ax.bar(j, m, 0.6, color=f"C{j}", yerr=[[m - min(v)], [max(v) - m]], capsize=3)
            ax.scatter([j] * len(v), v, color="k", s=8, zorder=3)
        ax.set_xticks(range(len(bars)), [b[0] for b in bars], rotation=20, fontsize=8)
        ax.set_ylabel(label, fontsize=8)
    axes[0].set_title("images: INRFlow vs grid MLP / U-Net\n(bars: mean, whiskers: min-max over seeds)", fontsize=8)
    axes[1].set_title("point clouds (Chamfer): INRFlow vs point transformer", fontsize=8)
    axes[2].set_title("point clouds (exact EMD)", fontsize=8)
    axes[3].set_title("INR property: decoding a resolution never trained on\n(native vs own 16x16 replicated / "
                      "bilinear)", fontsize=8)
    fig.tight_layout()

    shows = {(s["modality"], s["method"]): s for s in record["tables"].get("samples", [])}
    imgs = [("data 16x16", shows.get(("image", "inrflow"), {}).get("data")),
            ("INRFlow 16x16", shows.get(("image", "inrflow"), {}).get("train_res")),
            ("grid MLP 16x16", shows.get(("image", "grid"), {}).get("train_res")),
            ("grid U-Net 16x16", shows.get(("image", "unet"), {}).get("train_res"))]
    k = max((len(v) for _, v in imgs if v), default=1)
    fig2, axes2 = plt.subplots(len(imgs), k, figsize=(1.1 * k, 1.2 * len(imgs)), squeeze=False)
    for i, (name, v) in enumerate(imgs):
        for j in range(k):
            ax = axes2[i][j]
            ax.axis("off")
            if v and j < len(v):
                ax.imshow(np.asarray(v[j]), cmap="gray", vmin=-1, vmax=1)
        axes2[i][0].set_title(name, fontsize=7, loc="left")
    fig2.tight_layout()

    clouds = [("data", shows.get(("points", "inrflow"), {}).get("data")),
              ("INRFlow", shows.get(("points", "inrflow"), {}).get("clouds")),
              ("INRFlow, 4x points", shows.get(("points", "inrflow"), {}).get("dense")),
              ("point transformer", shows.get(("points", "pointtf"), {}).get("clouds"))]
    fig3 = plt.figure(figsize=(10, 9))
    for i, (name, v) in enumerate(clouds):
        for j in range(4):
            ax = fig3.add_subplot(4, 4, 4 * i + j + 1, projection="3d")
            ax.set_axis_off()
            if v and j < len(v):
                p = np.asarray(v[j])
                ax.scatter(p[:, 0], p[:, 2], p[:, 1], s=2)
                ax.set_xlim(-1, 1)
                ax.set_ylim(-1, 1)
                ax.set_zlim(-1, 1)
            if j == 0:
                ax.set_title(name, fontsize=8)
    fig3.tight_layout()

    curves = record["tables"].get("loss", [])
    fig4, axes4 = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, mod in zip(axes4, MODALITIES):
        for j, mth in enumerate(METHODS[mod]):
            seeds = sorted({r["seed"] for r in curves if r["modality"] == mod and r["method"] == mth})
            series = [[r["value"] for r in sorted((c for c in curves if c["modality"] == mod and c["method"] == mth
                                                   and c["seed"] == s), key=lambda c: c["chunk"])] for s in seeds]
            if not series:
                continue
            n = min(len(s) for s in series)
            arr = np.array([s[:n] for s in series])
            ax.plot(arr.mean(0), color=f"C{j}", label=mth)
            ax.fill_between(range(n), arr.min(0), arr.max(0), color=f"C{j}", alpha=0.2)
        ax.set_xlabel("training (tenths)")
        ax.set_ylabel("flow-matching loss")
        ax.set_title(mod)
        ax.legend(fontsize=7)
    fig4.tight_layout()
    # the INR property: the same samples (one joint sampling, the 16x16 grid as context) at resolutions
    # never trained on, beside the 16x16 samples upsampled bilinearly
    multi = shows.get(("image", "inrflow"), {}).get("multires") or {}
    fig5 = None
    if multi:
        import torch

        keys = sorted(multi, key=int)
        lo = np.asarray(multi[keys[0]])
        top = int(keys[-1])
        bil = torch.nn.functional.interpolate(torch.tensor(lo, dtype=torch.float32)[:, None], size=(top, top),
                                              mode="bilinear", align_corners=True)[:, 0].numpy()
        rows5 = [(f"INRFlow {k}x{k}" + (" (trained)" if k == keys[0] else " (never trained)"), np.asarray(multi[k]))
                 for k in keys] + [(f"16x16 upsampled bilinearly to {top}x{top}", bil)]
        k5 = lo.shape[0]
        fig5, ax5 = plt.subplots(len(rows5), k5, figsize=(1.2 * k5, 1.3 * len(rows5)), squeeze=False)
        for i, (name, v) in enumerate(rows5):
            for j in range(k5):
                ax5[i][j].axis("off")
                ax5[i][j].imshow(v[j], cmap="gray", vmin=-1, vmax=1, interpolation="nearest")
            ax5[i][0].set_title(name, fontsize=7, loc="left")
        fig5.tight_layout()
    # the tested point-cloud claims, case by case: INRFlow minus the point transformer per (class, seed, draw)
    drows = record["tables"].get("draws", [])
    fig6, axes6 = plt.subplots(1, 4, figsize=(15, 3.4))
    for ax, metric in zip(axes6, ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd")):
        pick = lambda mth: {(r["case"], r["seed"], r["draw"]): r["value"] for r in drows  # noqa: E731
                            if r["modality"] == "points" and r["method"] == mth and r["metric"] == metric
                            and r["level"] == "class"}
        a, b = pick("inrflow"), pick("pointtf")
        cases = sorted({k[0] for k in a})
        for j, case in enumerate(cases):
            gaps = [a[k] - b[k] for k in sorted(a) if k[0] == case and k in b]
            ax.scatter(j + np.linspace(-0.2, 0.2, len(gaps)), gaps, s=12, color=f"C{j}")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(cases)), cases, fontsize=8)
        better = "below 0" if metric.startswith("mmd") else "above 0"
        ax.set_title(f"{metric.upper().replace('_', '-')}: INRFlow - point transformer\n(INRFlow better {better}; "
                     "one dot per seed x draw)", fontsize=8)
    fig6.tight_layout()
    figs = {"distances": fig, "digit_samples": fig2, "cloud_samples": fig3, "loss": fig4, "point_classes": fig6}
    if fig5 is not None:
        figs["resolutions"] = fig5
    return figs


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="every (phase, modality, method, lr, seed) training + sampling + scoring (the lr tuning grid, the test seeds) "
        "and the metric floors as pmap tasks, longest first; the cached feature nets travel as bytes through the "
        "object store",
    checked_against="the authors' code (apple-aiml-research/ml-inrflow: linear path and velocity target, logit-normal "
                    "t, query subsampling with shared noise, PatchCAEncoder spatial-aware latents, Perceiver encoder / "
                    "DiT trunk / PerceiverDecoder with adaLN-Zero, ODE sampler with a context mask, the resolution-free "
                    "notebook, optimiser config) and the abstract; a review digest of the earlier ASFT version; closed "
                    "forms in the tests: the path and target against t y1 + (1-t) eps and y1 - eps, the decoder's "
                    "permutation equivariance and conditional independence over queries, joint multi-resolution "
                    "sampling against sampling the training grid alone, a training snapshot at step k against a k-step run, the "
                    "per-class MMD / COV against brute force and their class-weighted mean against the whole set, the exact EMD against brute force over all "
                    "matchings and the 1-D closed form (sorted coordinates), Chamfer against brute force",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
