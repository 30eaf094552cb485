"""rayml.generative.inrflow: the flow-matching path, the point-wise decoder's properties, resolution-free
sampling, the baselines, the metrics, determinism and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayml.generative import inrflow as F
from rayml.generative import inrflow_baselines as B
from rayml.generative import inrflow_data as D

torch.set_num_threads(1)


def _img_model(seed=0, **kw):
    torch.manual_seed(seed)
    model = F.INRFlow(F.ModelConfig(modality="image", hidden=16, depth=1, heads=2, grid=2, **kw))
    _perturb(model, seed)
    return model.eval()


def _pts_model(seed=0):
    torch.manual_seed(seed)
    model = F.INRFlow(F.ModelConfig(modality="points", hidden=16, depth=1, heads=2, latents=4))
    _perturb(model, seed)
    return model.eval()


def _perturb(model, seed):
    # adaLN-Zero and the zero read-out make a fresh model output 0: give every weight a value
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))


# ---------------------------------------------------------------- the path: closed form


def test_interpolant_and_target_match_the_closed_form_in_float64():
    g = torch.Generator().manual_seed(0)
    y1 = torch.randn(5, 7, 3, generator=g, dtype=torch.float64)
    eps = torch.randn(5, 7, 3, generator=g, dtype=torch.float64)
    t = torch.rand(5, generator=g, dtype=torch.float64)
    yt, ut = F.interpolant(t, eps, y1)
    for i in range(5):
        ti = float(t[i])
        assert torch.allclose(yt[i], ti * y1[i] + (1 - ti) * eps[i], atol=1e-14)
        assert torch.allclose(ut[i], y1[i] - eps[i], atol=1e-14)
    # the target is the time derivative of the path: a central finite difference
    h = 1e-6
    yp, _ = F.interpolant(t + h, eps, y1)
    ym, _ = F.interpolant(t - h, eps, y1)
    assert torch.allclose((yp - ym) / (2 * h), ut, atol=1e-7)
    # the ends: noise at t = 0, data at t = 1
    assert torch.equal(F.interpolant(torch.zeros(5, dtype=torch.float64), eps, y1)[0], eps)
    assert torch.equal(F.interpolant(torch.ones(5, dtype=torch.float64), eps, y1)[0], y1)


def test_logit_normal_is_the_sigmoid_of_a_normal():
    t = F.logit_normal(20000, torch.Generator().manual_seed(1))
    assert float(t.min()) > 0 and float(t.max()) < 1
    u = torch.logit(t.double())
    assert abs(float(u.mean())) < 0.03 and abs(float(u.std()) - 1) < 0.03


def test_cicfm_loss_equals_a_direct_computation_on_the_query_subset():
    model = _img_model()
    x = F.image_grid(6).expand(3, -1, -1)
    g = torch.Generator().manual_seed(2)
    y1, eps = torch.randn(3, 36, 1, generator=g), torch.randn(3, 36, 1, generator=g)
    t = torch.tensor([0.1, 0.5, 0.9])
    q = torch.tensor([3, 17, 30, 5])
    yt = t.view(-1, 1, 1) * y1 + (1 - t.view(-1, 1, 1)) * eps
    expect = ((model(x, yt, t, x[:, q], yt[:, q]) - (y1 - eps)[:, q]) ** 2).mean()
    assert torch.allclose(F.cicfm_loss(model, x, y1, t, eps, q), expect)


def test_the_ode_sampler_transports_noise_exactly_along_a_known_straight_field():
    # an oracle velocity y1 - eps for a fixed y1 (the conditional field u_t(y | y1) = (y1 - y) / (1 - t))
    y1 = torch.full((2, 4, 1), 0.7)

    class Oracle(torch.nn.Module):
        def forward(self, cx, cy, t, qx, qy):
            return (y1 - qy) / (1 - t.view(-1, 1, 1))

    y0 = torch.randn(2, 4, 1, generator=torch.Generator().manual_seed(3))
    x = F.image_grid(2).expand(2, -1, -1)
    out = F.ode_sample(Oracle(), x, y0, 50, t_eps=0.0)
    # Euler on this field is exact until the last step, which lands on y1 exactly
    assert torch.allclose(out, y1, atol=1e-5)


# ---------------------------------------------------------------- the point-wise decoder


def test_decoder_is_permutation_equivariant_over_queries_and_invariant_to_context_order():
    model = _img_model()
    g = torch.Generator().manual_seed(4)
    x = F.image_grid(8).expand(2, -1, -1)
    y = torch.randn(2, 64, 1, generator=g)
    t = torch.tensor([0.3, 0.8])
    out = model(x, y, t, x, y)
    perm = torch.randperm(64, generator=g)
    assert torch.allclose(model(x, y, t, x[:, perm], y[:, perm]), out[:, perm], atol=1e-5)
    assert torch.allclose(model(x[:, perm], y[:, perm], t, x, y), out, atol=1e-5)
    pts = _pts_model()
    c = torch.randn(2, 20, 3, generator=g)
    v = pts(c, c, t, c, c)
    p = torch.randperm(20, generator=g)
    assert torch.allclose(pts(c[:, p], c[:, p], t, c[:, p], c[:, p]), v[:, p], atol=1e-5)


def test_queries_are_conditionally_independent_given_the_context():
    # a query's velocity does not depend on which other queries are decoded with it
    model = _img_model(1)
    g = torch.Generator().manual_seed(5)
    x = F.image_grid(8).expand(2, -1, -1)
    y = torch.randn(2, 64, 1, generator=g)
    t = torch.tensor([0.2, 0.6])
    full = model(x, y, t, x, y)
    for idx in ([7], [7, 40, 2], list(range(30, 64))):
        part = model(x, y, t, x[:, idx], y[:, idx])
        assert torch.allclose(part, full[:, idx], atol=1e-5)
    # off-grid coordinates are valid queries too (the field is continuous in the coordinate)
    off = torch.tensor([[[0.123, 0.456], [0.5, 0.5001]]]).expand(2, -1, -1)
    v = model(x, y, t, off, torch.zeros(2, 2, 1))
    assert v.shape == (2, 2, 1) and torch.isfinite(v).all()
    # whereas the point transformer baseline couples its points
    torch.manual_seed(0)
    ptf = B.PointTransformerFlow(8, depth=1, heads=2)
    _perturb(ptf, 0)
    c = torch.randn(1, 10, 3, generator=g)
    tt = torch.tensor([0.5])
    assert not torch.allclose(ptf(c, c, tt, c, c)[:, :3], ptf(c[:, :3], c[:, :3], tt, c[:, :3], c[:, :3]), atol=1e-4)


def test_image_encoder_latents_read_only_their_own_patch():
    model = _img_model(2)
    g = torch.Generator().manual_seed(6)
    x = F.image_grid(8).expand(1, -1, -1)
    y = torch.randn(1, 64, 1, generator=g)
    z = model._encode_image(x, y)
    top_left = (x[0, :, 0] < 0.5) & (x[0, :, 1] < 0.5)
    y2 = y.clone()
    y2[0, top_left] += 1.0
    z2 = model._encode_image(x, y2)
    # latent 0 (the top-left cell of a 2x2 lattice) changes, the others do not
    assert not torch.allclose(z[0, 0], z2[0, 0], atol=1e-4)
    assert torch.allclose(z[0, 1:], z2[0, 1:], atol=1e-6)


# ---------------------------------------------------------------- sampling at a new resolution


def test_sampling_at_a_new_resolution_returns_the_right_shape_and_uses_the_training_grid_as_context():
    model = _img_model(3)
    out = F.sample_images(model, 3, 11, train_resolution=6, steps=3, seed=0)
    assert out.shape == (3, 11, 11) and torch.isfinite(out).all()
    same = F.sample_images(model, 2, 6, train_resolution=6, steps=3, seed=0)
    assert same.shape == (2, 6, 6)
    pts = F.sample_points(_pts_model(), 2, 40, context_points=10, steps=3, seed=0)
    assert pts.shape == (2, 40, 3) and torch.isfinite(pts).all()


def test_joint_sampling_shows_the_same_samples_at_every_resolution():
    model = _img_model(6)
    joint = F.sample_multires(model, 3, [6, 9, 13], train_resolution=6, steps=4, seed=5)
    assert {k: tuple(v.shape) for k, v in joint.items()} == {6: (3, 6, 6), 9: (3, 9, 9), 13: (3, 13, 13)}
    # the training-grid trajectory does not depend on the extra queries (conditional independence)
    alone = F.sample_images(model, 3, 6, train_resolution=6, steps=4, seed=5)
    assert torch.allclose(joint[6], alone, atol=1e-5)
    assert torch.allclose(F.sample_multires(model, 3, [9], train_resolution=6, steps=4, seed=5)[6], alone, atol=1e-5)
    # the first k samples do not depend on how many are drawn
    assert torch.allclose(F.sample_images(model, 1, 6, train_resolution=6, steps=4, seed=5), alone[:1], atol=1e-5)
    # a new grid's points that coincide with training-grid points are decoded by the same field: at
    # t = 1 both ends sit on the same continuous function, so the shared corners agree closely
    for r in (9, 13):
        assert torch.isfinite(joint[r]).all()
    with pytest.raises(ValueError, match="resolutions"):
        F.sample_multires(model, 2, 9, train_resolution=6, steps=2, seed=0)


def test_the_fast_patch_attention_equals_the_masked_attention():
    model = _img_model(7, coord_res=8)
    g = torch.Generator().manual_seed(8)
    x = F.image_grid(8).expand(3, -1, -1).clone()
    y = torch.randn(3, 64, 1, generator=g)
    assert model._equal_patches(((x * 2).floor().clamp(0, 1) @ torch.tensor([2.0, 1.0])).long()) is not None
    fast = model._encode_image(x, y)
    slow_model = _img_model(7, coord_res=8)
    slow_model._equal_patches = lambda owner: None
    assert torch.allclose(fast, slow_model._encode_image(x, y), atol=1e-5)
    # an uneven grid (7 pixels on a 2x2 lattice) takes the masked path and still works
    x7 = F.image_grid(7).expand(2, -1, -1)
    assert torch.isfinite(model._encode_image(x7, torch.randn(2, 49, 1, generator=g))).all()


def test_sampling_is_deterministic_in_the_seed():
    model = _img_model(4)
    a = F.sample_images(model, 2, 9, train_resolution=6, steps=3, seed=7)
    b = F.sample_images(model, 2, 9, train_resolution=6, steps=3, seed=7)
    c = F.sample_images(model, 2, 9, train_resolution=6, steps=3, seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_the_grid_baselines_cannot_sample_another_resolution():
    torch.manual_seed(0)
    for grid in (B.GridMLPFlow(8, 16), B.GridUNetFlow(8, 4)):
        assert F.sample_images(grid, 2, 8, train_resolution=8, steps=2, seed=0).shape == (2, 8, 8)
        with pytest.raises(ValueError, match="grid"):
            F.sample_images(grid, 2, 12, train_resolution=8, steps=2, seed=0)


def test_unet_starts_at_zero_velocity_and_reads_the_value_and_the_time():
    torch.manual_seed(1)
    net = B.GridUNetFlow(16, 4)
    x = F.image_grid(16)
    y = torch.randn(1, 256, 1, generator=torch.Generator().manual_seed(2))
    t = torch.tensor([0.4])
    assert torch.equal(net(x, y, t, x, y), torch.zeros(1, 256, 1))  # zero-initialised read-out
    _perturb(net, 1)
    base = net(x, y, t, x, y)
    assert not torch.allclose(net(x, y + 0.5, t, x, y + 0.5), base, atol=1e-4)
    assert not torch.allclose(net(x, y, t + 0.3, x, y), base, atol=1e-4)
    # the image is laid out row-major as image_grid's coordinates: a transposed input is another image
    yt = y.view(1, 16, 16).transpose(1, 2).reshape(1, 256, 1)
    assert not torch.allclose(net(x, yt, t, x, yt).view(16, 16).T, base.view(16, 16), atol=1e-4)
    with pytest.raises(ValueError, match="divisible by 4"):
        B.GridUNetFlow(10, 4)
    with pytest.raises(ValueError, match="width"):
        B.GridUNetFlow(16, 1)


# ---------------------------------------------------------------- training


def test_training_is_deterministic_and_lowers_the_loss():
    x, _ = D.digit_images(6)
    vals = x[:64].reshape(64, -1, 1)
    coords = F.image_grid(6).expand(64, -1, -1)
    cfg = F.TrainConfig(steps=30, batch=16, lr=3e-3, query_fraction=0.5)
    r1 = F.train(_img_model(5), coords, vals, cfg, seed=3)
    r2 = F.train(_img_model(5), coords, vals, cfg, seed=3)
    assert r1["losses"] == r2["losses"]
    assert np.mean(r1["losses"][-5:]) < np.mean(r1["losses"][:5])
    for a, b in zip(r1["ema"].parameters(), r2["ema"].parameters()):
        assert torch.equal(a, b)


def test_a_snapshot_equals_the_ema_of_a_shorter_run():
    x, _ = D.digit_images(6)
    vals = x[:32].reshape(32, -1, 1)
    coords = F.image_grid(6).expand(32, -1, -1)
    long = F.train(_img_model(2), coords, vals, F.TrainConfig(steps=12, batch=8, lr=3e-3), seed=4, snapshots=(5, 12))
    short = F.train(_img_model(2), coords, vals, F.TrainConfig(steps=5, batch=8, lr=3e-3), seed=4)
    assert sorted(long["snapshots"]) == [5, 12] and long["losses"][:5] == short["losses"]
    for a, b in zip(long["snapshots"][5].parameters(), short["ema"].parameters()):
        assert torch.equal(a, b)
    for a, b in zip(long["snapshots"][12].parameters(), long["ema"].parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="snapshots"):
        F.train(_img_model(2), coords, vals, F.TrainConfig(steps=5, batch=8), seed=4, snapshots=(6,))


def test_match_width_equalises_parameter_counts():
    target = F.param_count(F.INRFlow(F.ModelConfig(modality="image", hidden=32, depth=2, heads=2)))
    w = B.match_width(lambda w: B.GridMLPFlow(16, w), target, range(4, 400, 2))
    assert abs(F.param_count(B.GridMLPFlow(16, w)) / target - 1) < 0.05
    u = B.match_width(lambda w: B.GridUNetFlow(16, w), target, range(2, 100))
    assert abs(F.param_count(B.GridUNetFlow(16, u)) / target - 1) < 0.05


def test_the_ema_follows_its_warmed_up_recurrence():
    # one step: decay = min(ema, 1 / 10), so ema = 0.1 * initial + 0.9 * updated weights
    model = _img_model(8)
    start = [p.detach().clone() for p in model.parameters()]
    x, _ = D.digit_images(6)
    fit = F.train(model, F.image_grid(6).expand(8, -1, -1), x[:8].reshape(8, -1, 1),
                  F.TrainConfig(steps=1, batch=4, lr=1e-2), seed=0)
    for p0, p1, pe in zip(start, model.parameters(), fit["ema"].parameters()):
        assert torch.allclose(pe, 0.1 * p0 + 0.9 * p1.detach(), atol=1e-6)


# ---------------------------------------------------------------- data and metrics


def test_digits_at_two_resolutions_sample_the_same_bilinear_image():
    lo, _ = D.digit_images(15)
    hi, _ = D.digit_images(29)
    # linspace(0, 1, 29)[::2] == linspace(0, 1, 15): the grids share those points
    assert torch.allclose(hi[:, ::2, ::2], lo, atol=1e-5)
    assert float(lo.min()) >= -1 and float(lo.max()) <= 1


def test_shape_clouds_are_normalised_and_deterministic():
    a, kinds = D.shape_clouds(8, 50, seed=0)
    b, _ = D.shape_clouds(8, 50, seed=0)
    assert torch.equal(a, b) and a.shape == (8, 50, 3) and set(kinds) == set(D.SHAPES)
    assert torch.allclose(a.mean(1), torch.zeros(8, 3), atol=1e-5)
    assert torch.allclose(a.norm(dim=-1).max(1).values, torch.ones(8), atol=1e-5)


def test_chamfer_matches_brute_force_and_mmd_cov_of_identical_sets():
    g = torch.Generator().manual_seed(9)
    a, b = torch.randn(3, 5, 3, generator=g), torch.randn(4, 6, 3, generator=g)
    cd = D.chamfer_matrix(a, b)
    for i in range(3):
        for j in range(4):
            d = np.array([[float(((p - q) ** 2).sum()) for q in b[j]] for p in a[i]])
            assert abs(cd[i, j].item() - (d.min(1).mean() + d.min(0).mean())) < 1e-5
    same = D.mmd_cov(b, b)
    assert same["mmd_cd"] == 0.0 and same["cov_cd"] == 1.0


def test_mmd_cov_by_kind_restricts_the_sums_to_each_kind_and_averages_back_to_the_whole_set():
    gen, _ = D.shape_clouds(7, 20, seed=4)
    ref, kinds = D.shape_clouds(10, 20, seed=5)  # uneven kinds: 3, 3, 2, 2
    out = D.mmd_cov(gen, ref, with_emd=True, reference_kinds=kinds)
    for name, fn in (("cd", D.chamfer_matrix), ("emd", D.emd_matrix)):
        d = fn(gen, ref).numpy()
        nearest_ref = {int(np.argmin(row)) for row in d}  # brute force: each generated cloud's nearest
        for k in set(kinds):
            idx = [j for j, r in enumerate(kinds) if r == k]
            assert out["by_kind"][k][f"mmd_{name}"] == pytest.approx(np.mean([d[:, j].min() for j in idx]), abs=1e-12)
            assert out["by_kind"][k][f"cov_{name}"] == pytest.approx(np.mean([j in nearest_ref for j in idx]))
        for m in (f"mmd_{name}", f"cov_{name}"):
            weighted = sum(out["by_kind"][k][m] * kinds.count(k) for k in set(kinds)) / len(kinds)
            assert out[m] == pytest.approx(weighted, abs=1e-12)
    assert "by_kind" not in D.mmd_cov(gen, ref)
    with pytest.raises(ValueError, match="reference_kinds"):
        D.mmd_cov(gen, ref, reference_kinds=kinds[:-1])


def test_emd_matches_brute_force_and_the_one_dimensional_closed_form():
    import itertools

    g = torch.Generator().manual_seed(10)
    a, b = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g, dtype=torch.float64)
    brute = min(np.mean([float((a[i] - b[p[i]]).norm()) for i in range(6)]) for p in itertools.permutations(range(6)))
    assert abs(D.emd(a, b) - brute) < 1e-9
    # on a line, the optimal matching pairs the sorted coordinates: EMD = mean |sort(a) - sort(b)|
    xa, xb = torch.randn(40, generator=g, dtype=torch.float64), torch.randn(40, generator=g, dtype=torch.float64)
    pa, pb = torch.zeros(40, 3, dtype=torch.float64), torch.zeros(40, 3, dtype=torch.float64)
    pa[:, 0], pb[:, 0] = xa, xb
    assert abs(D.emd(pa, pb) - float((xa.sort().values - xb.sort().values).abs().mean())) < 1e-9
    clouds = torch.randn(3, 5, 3, generator=g)
    others = torch.randn(2, 5, 3, generator=g)
    m = D.emd_matrix(clouds, others)
    assert m.shape == (3, 2) and abs(float(m[2, 1]) - D.emd(clouds[2], others[1])) < 1e-12
    same = D.mmd_cov(clouds, clouds, with_emd=True)
    assert same["mmd_emd"] < 1e-7 and same["cov_emd"] == 1.0
    with pytest.raises(ValueError, match="same number of points"):
        D.emd(torch.zeros(4, 3), torch.zeros(5, 3))


def test_frechet_distance_is_zero_on_itself_and_grows_with_a_shift():
    f = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    assert abs(D.frechet_distance(f, f)) < 1e-6
    assert abs(D.frechet_distance(f, f + 1.0) - 4.0) < 1e-3


# ---------------------------------------------------------------- bad input


def test_bad_input_is_rejected_with_the_argument_named():
    with pytest.raises(ValueError, match="modality"):
        F.ModelConfig(modality="audio")
    with pytest.raises(ValueError, match="hidden"):
        F.ModelConfig(hidden=30, heads=4)
    with pytest.raises(ValueError, match="query_fraction"):
        F.TrainConfig(query_fraction=0.0)
    with pytest.raises(ValueError, match="lr"):
        F.TrainConfig(lr=-1.0)
    with pytest.raises(TypeError, match="cfg"):
        F.INRFlow({"modality": "image"})
    with pytest.raises(ValueError, match="resolution"):
        F.image_grid(1)
    with pytest.raises(ValueError, match="same shape"):
        F.interpolant(torch.zeros(2), torch.zeros(2, 3, 1), torch.zeros(2, 4, 1))
    with pytest.raises(ValueError, match="t must"):
        F.interpolant(torch.zeros(3), torch.zeros(2, 3, 1), torch.zeros(2, 3, 1))
    model = _img_model()
    with pytest.raises(ValueError, match="values"):
        F.train(model, F.image_grid(4), torch.zeros(16, 1), F.TrainConfig(steps=1), 0)
    with pytest.raises(ValueError, match="finite"):
        F.train(model, F.image_grid(4), torch.full((1, 16, 1), float("nan")), F.TrainConfig(steps=1), 0)
    with pytest.raises(ValueError, match="steps"):
        F.sample_images(model, 2, 8, train_resolution=4, steps=0, seed=0)
    with pytest.raises(ValueError, match="n_points"):
        F.sample_points(_pts_model(), 2, 0, context_points=4, steps=2, seed=0)
    with pytest.raises(ValueError, match="context_mask"):
        F.ode_sample(model, F.image_grid(4), torch.zeros(1, 16, 1), 2, context_mask=torch.zeros(16, dtype=torch.bool))
    with pytest.raises(ValueError, match="kinds"):
        D.shape_clouds(2, 10, 0, kinds=("cube",))
    with pytest.raises(ValueError, match="point clouds"):
        D.chamfer_matrix(torch.zeros(2, 5, 2), torch.zeros(2, 5, 3))


# ---------------------------------------------------------------- the pixel-space resolution test


class _Recorder(torch.nn.Module):
    """A zero velocity field that records every context it is shown (the queries stay at their noise)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, context_x, context_y, t, query_x, query_y):
        self.seen.append((context_x.clone(), context_y.clone(), t.clone(), query_x.shape[1]))
        return torch.zeros_like(query_y)


def test_conditional_resample_shows_the_true_noisy_path_as_context():
    g = torch.Generator().manual_seed(0)
    images = torch.rand((3, 4, 4), generator=g) * 2 - 1
    rec = _Recorder()
    out = F.conditional_resample(rec, images, [6], steps=3, seed=1)
    assert {k: tuple(v.shape) for k, v in out.items()} == {4: (3, 4, 4), 6: (3, 6, 6)}
    eps = out[4].reshape(3, 16, 1)  # zero velocity: the training-grid queries end where they start (the noise)
    ts = torch.linspace(1e-4, 1.0, 4)
    assert len(rec.seen) == 3
    for i, (cx, cy, t, n_query) in enumerate(rec.seen):
        assert n_query == 16 + 36 and torch.equal(cx[0], F.image_grid(4)[0]) and torch.allclose(t, ts[i].expand(3))
        # the context is the true path t y1 + (1 - t) eps of the given images, with the queries' noise
        assert torch.allclose(cy, ts[i] * images.reshape(3, 16, 1) + (1 - ts[i]) * eps, atol=1e-6)


def test_conditional_resample_decodes_each_query_independently_of_the_others():
    model = _img_model(3)
    images = torch.rand((2, 6, 6), generator=torch.Generator().manual_seed(5)) * 2 - 1
    both = F.conditional_resample(model, images, [9], steps=3, seed=4)
    alone = F.conditional_resample(model, images, [], steps=3, seed=4)
    assert torch.allclose(both[6], alone[6], atol=1e-5) and torch.isfinite(both[9]).all()
    with pytest.raises(ValueError, match="context"):
        F.conditional_resample(model, images[0], [9], steps=3, seed=4)
    with pytest.raises(ValueError, match="resolutions"):
        F.conditional_resample(model, images, 9, steps=3, seed=4)


# ---------------------------------------------------------------- the trivial baselines


def test_the_trivial_baselines_match_their_fitted_moments():
    g = torch.Generator().manual_seed(0)
    train = torch.randn((400, 3, 3), generator=g) * 0.3 + torch.linspace(-0.5, 0.5, 9).reshape(3, 3)
    x = B.gaussian_images(train, 4000, seed=1)
    assert x.shape == (4000, 3, 3) and x.abs().max() <= 1
    assert torch.allclose(x.mean(0), train.mean(0), atol=0.03)
    clouds, _ = D.shape_clouds(40, 64, seed=2)
    blob = B.gaussian_blob(clouds, 50, 64, seed=3)
    pts = clouds.reshape(-1, 3)
    assert blob.shape == (50, 64, 3)
    assert torch.allclose(torch.cov(blob.reshape(-1, 3).T), torch.cov(pts.T), atol=0.02)
    sph = B.mean_radius_spheres(clouds, 5, 64, seed=4)
    radius = (pts - pts.mean(0)).norm(dim=1).mean()
    assert torch.allclose((sph - pts.mean(0)).norm(dim=-1), radius.expand(5, 64), atol=1e-5)
    with pytest.raises(ValueError, match="train"):
        B.gaussian_blob(torch.zeros(3, 4, 2), 2, 4, seed=0)
    with pytest.raises(ValueError, match="n_points"):
        B.mean_radius_spheres(clouds, 2, 0, seed=0)
