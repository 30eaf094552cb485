"""rayml.compress.ply (standard 3DGS files) and the tiled renderer a real scene needs."""

import numpy as np
import pytest
import torch

from rayml.compress import ply
from rayml.compress import splatting as sp


def _gaussians(n=30, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return sp.Gaussians(torch.randn(n, 3, generator=g) * 0.4, torch.full((n, 3), -2.5) + 0.2 * torch.randn(n, 3, generator=g),
                        torch.randn(n, 4, generator=g), torch.randn(n, generator=g), torch.randn(n, k, 3, generator=g))


def test_ply_round_trips_a_scene_in_the_3dgs_layout(tmp_path):
    g = _gaussians()
    path = tmp_path / "scene.ply"
    ply.save_ply(g, path)
    head = path.read_bytes().split(b"end_header")[0].decode("ascii")
    assert "property float f_rest_8" in head and "property float f_rest_9" not in head  # 3 (K - 1) = 9
    out = ply.load_ply(path)
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        assert torch.allclose(getattr(out, name), getattr(g, name)), name
    # channel-major f_rest: the first K - 1 values are red's coefficients 1..K-1
    raw = np.frombuffer(path.read_bytes()[path.read_bytes().index(b"end_header\n") + 11:], "<f4").reshape(30, -1)
    assert np.allclose(raw[:, 9:12], g.sh[:, 1:, 0].numpy())


def test_ply_refuses_what_is_not_3dgs_data(tmp_path):
    bad = tmp_path / "a.ply"
    bad.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n0\n")
    with pytest.raises(ValueError, match="binary_little_endian"):
        ply.load_ply(bad)
    bad.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nend_header\n"
                    + np.zeros(1, "<f4").tobytes())
    with pytest.raises(ValueError, match="lacks 3DGS properties"):
        ply.load_ply(bad)
    bad.write_bytes(b"PNG")
    with pytest.raises(ValueError, match="not a PLY"):
        ply.load_ply(bad)


def test_tiled_rendering_equals_the_dense_one_with_gradients():
    g = _gaussians(n=40, k=4, seed=1)
    cam = sp.look_at_camera((0.0, -0.5, 2.5), size=12)
    params = [t.clone().requires_grad_(True) for t in (g.means, g.log_scales, g.quats, g.opacity_logits, g.sh)]
    grads = []
    for max_elements in (1 << 22, 40 * 7):  # one tile; tiles of 7 pixels
        gg = sp.Gaussians(*params)
        img, w = sp.render(gg, cam, return_weights=True, max_elements=max_elements)
        for p in params:
            p.grad = None
        (img.square().sum() + w.sum()).backward()
        grads.append(([p.grad.clone() for p in params], img.detach(), w.detach()))
    (ga, ia, wa), (gb, ib, wb) = grads
    assert torch.allclose(ia, ib, atol=1e-6) and torch.allclose(wa, wb, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ga, gb))
    with pytest.raises(ValueError, match="max_elements"):
        sp.render(g, cam, max_elements=0)
