"""rayml.compress.splatting: the dense renderer against a brute-force per-pixel float64 reference."""

import math

import numpy as np
import pytest
import torch

from rayml.compress import scenes
from rayml.compress import splatting as sp


def _random_gaussians(n, degree, seed, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    K = (degree + 1) ** 2
    return sp.Gaussians(torch.tensor(rng.uniform(-0.6, 0.6, (n, 3)), dtype=dtype),
                        torch.tensor(rng.uniform(-2.6, -1.4, (n, 3)), dtype=dtype),
                        torch.tensor(rng.normal(size=(n, 4)), dtype=dtype),
                        torch.tensor(rng.normal(size=n), dtype=dtype),
                        torch.tensor(rng.normal(size=(n, K, 3)) * 0.4, dtype=dtype))


@pytest.mark.parametrize("degree", [0, 1, 3])
def test_render_matches_the_per_pixel_reference(degree):
    g = _random_gaussians(15, degree, seed=degree)
    for cam in sp.orbit_cameras(2, size=9, offset=0.3):
        bg = (0.2, 0.1, 0.7)
        fast = sp.render(g, cam, bg).numpy()
        ref = sp.render_reference(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam, bg)
        assert fast.shape == (9, 9, 3)
        np.testing.assert_allclose(fast, ref, atol=1e-10)
        assert fast.std() > 0.01  # the splats are visible, not just background


def test_render_is_differentiable_and_blending_weights_sum_to_opacity_mass():
    g = _random_gaussians(8, 1, seed=5, dtype=torch.float32)
    params = [g.means, g.log_scales, g.quats, g.opacity_logits, g.sh]
    for p in params:
        p.requires_grad_(True)
    cam = sp.orbit_cameras(1, size=12)[0]
    img, w = sp.render(g, cam, return_weights=True)
    img.sum().backward()
    for p in params:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    # on a black background each pixel is sum_i alpha_i T_i c_i; with unit colours it is the weight mass
    white = sp.Gaussians(g.means.detach(), g.log_scales.detach(), g.quats.detach(), g.opacity_logits.detach(),
                         torch.full_like(g.sh.detach()[:, :1], 0.5 / sp.SH_C0))
    img2, w2 = sp.render(white, cam, return_weights=True)
    assert torch.allclose(img2[..., 0].sum(), w2.sum(), atol=1e-4)


def test_gaussians_behind_the_camera_are_invisible():
    g = _random_gaussians(3, 0, seed=1)
    cam = sp.look_at_camera((0.0, 0.0, -3.0), size=8)
    behind = sp.Gaussians(g.means + torch.tensor([0.0, 0.0, -10.0], dtype=g.means.dtype), g.log_scales, g.quats,
                          g.opacity_logits, g.sh)
    assert torch.allclose(sp.render(behind, cam, (0.3, 0.3, 0.3)), torch.full((8, 8, 3), 0.3, dtype=torch.float64))


def test_covariance_and_rotation_properties():
    g = _random_gaussians(10, 0, seed=2)
    R = sp.quat_to_rotmat(g.quats)
    assert torch.allclose(R @ R.transpose(1, 2), torch.eye(3, dtype=R.dtype).expand(10, 3, 3), atol=1e-12)
    assert torch.allclose(torch.det(R), torch.ones(10, dtype=R.dtype))
    cov = sp.covariance_3d(g.log_scales, g.quats)
    ev = torch.linalg.eigvalsh(cov)
    assert torch.allclose(torch.sort(ev, 1).values, torch.sort(torch.exp(2 * g.log_scales), 1).values, rtol=1e-9)


def test_sh_degree_zero_is_the_dc_term():
    sh = torch.tensor([[[0.3, -0.2, 1.0]]])
    c = sp.sh_to_color(sh, torch.tensor([[0.0, 0.0, 1.0]]))
    assert torch.allclose(c, torch.clamp_min(sp.SH_C0 * sh[:, 0] + 0.5, 0))


def test_ssim_and_psnr():
    rng = np.random.default_rng(0)
    a = torch.tensor(rng.uniform(0, 1, (16, 16, 3)), dtype=torch.float32)
    assert float(sp.ssim(a, a)) == pytest.approx(1.0, abs=1e-5)
    assert sp.psnr(a, a) == math.inf
    noisy = (a + 0.05 * torch.randn(16, 16, 3, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    worse = (a + 0.2 * torch.randn(16, 16, 3, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    assert 1.0 > float(sp.ssim(noisy, a)) > float(sp.ssim(worse, a))
    mse = float(((noisy - a) ** 2).mean())
    assert sp.psnr(noisy, a) == pytest.approx(-10 * math.log10(mse))
    with pytest.raises(ValueError, match="ssim"):
        sp.ssim(a, a[:8])


def test_procedural_views_and_points_are_deterministic():
    s = scenes.make_scene("mixed", 3)
    cams = sp.orbit_cameras(3, size=12)
    v1, v2 = scenes.render_views(s, cams), scenes.render_views(s, cams)
    assert v1.shape == (3, 12, 12, 3) and np.array_equal(v1, v2) and 0 <= v1.min() and v1.max() <= 1
    assert v1.mean() > 0.01
    p1, c1 = scenes.surface_points(s, cams, 50, 0)
    p2, _ = scenes.surface_points(s, cams, 50, 0)
    assert np.array_equal(p1, p2) and p1.shape == (50, 3) and np.abs(p1).max() < 1.0


def test_bad_input_is_rejected():
    g = _random_gaussians(2, 0, seed=0)
    with pytest.raises(ValueError, match="means"):
        sp.Gaussians(torch.zeros(3, 2), g.log_scales, g.quats, g.opacity_logits, g.sh)
    with pytest.raises(ValueError, match="sh"):
        sp.Gaussians(g.means, g.log_scales, g.quats, g.opacity_logits, torch.zeros(2, 5, 3))
    with pytest.raises(TypeError, match="cam"):
        sp.render(g, "camera")
    with pytest.raises(ValueError, match="background"):
        sp.render(g, sp.orbit_cameras(1, size=8)[0], (0, 0))
    with pytest.raises(ValueError, match="size"):
        sp.look_at_camera((0, 0, 2), size=2)
    with pytest.raises(ValueError, match="kind"):
        scenes.make_scene("teapot", 0)
    with pytest.raises(ValueError, match="n must"):
        sp.orbit_cameras(0)
