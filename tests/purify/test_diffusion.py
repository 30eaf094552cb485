"""The digits diffusion model: schedule, forward/reverse process, purification, training and cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayml.purify import diffusion as D


class DeltaEps(torch.nn.Module):
    """The exact epsilon of a data distribution that is one point ``c`` (model scale)."""

    def __init__(self, c: torch.Tensor, schedule=D.VPSchedule()):
        super().__init__()
        self.c, self.schedule = c, schedule

    def forward(self, x, t):
        ab = self.schedule.alpha_bar(t)[:, None, None, None]
        return (x - torch.sqrt(ab) * self.c) / torch.sqrt(1 - ab)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU is shared; torch's thread pool only slows these small nets down
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def model():
    return D.load_score_model()


@pytest.fixture(scope="module")
def digits():
    return D.digits_split()


def test_alpha_bar_matches_the_discrete_ddpm_schedule():
    betas = np.linspace(1e-4, 0.02, 1000)
    discrete = np.cumprod(1 - betas)
    cont = D.VPSchedule().alpha_bar(torch.arange(1, 1001, dtype=torch.float32)).numpy()
    assert np.max(np.abs(cont - discrete)) < 1e-3  # the continuous limit of DDPM's linear betas
    assert float(D.VPSchedule().alpha_bar(torch.tensor(0.0))) == 1.0


def test_diffuse_has_the_closed_form_moments():
    x = torch.full((20000, 1, 2, 2), 0.5)
    t = 300.0
    ab = float(D.VPSchedule().alpha_bar(torch.tensor(t)))
    xt = D.diffuse(x, t, seed=3)
    assert float(xt.mean()) == pytest.approx(np.sqrt(ab) * 0.5, abs=0.01)
    assert float(xt.var()) == pytest.approx(1 - ab, rel=0.03)


@pytest.mark.parametrize("stride", [1.0, 7.0, 40.0])
def test_reverse_with_the_exact_score_of_a_point_mass_returns_the_point(stride):
    c = torch.linspace(-0.8, 0.8, 16).reshape(1, 1, 4, 4)
    eps_model = DeltaEps(c)
    t = torch.tensor([0.0, 1.0, 55.0, 100.0, 333.0])
    xt = D.diffuse(c.repeat(5, 1, 1, 1), t, seed=0)
    x0 = D.reverse(eps_model, xt, t, stride=stride, seed=1)
    assert torch.allclose(x0, c.expand_as(x0), atol=1e-4)


def test_purification_at_t_zero_returns_the_input(model, digits):
    x = digits[2][:8]
    assert torch.equal(D.diffpure(model, x, 0.0, seed=0), x)
    assert torch.equal(D.gdmp(model, x, 0.0, seed=0), x)
    mixed = D.diffpure(model, x, torch.tensor([0.0, 100.0] * 4), stride=25.0, seed=0)
    assert torch.equal(mixed[0::2], x[0::2]) and not torch.equal(mixed[1::2], x[1::2])


def test_purification_is_deterministic_for_a_seed(model, digits):
    x = digits[2][:6]
    a = D.diffpure(model, x, 100.0, stride=10.0, seed=5)
    b = D.diffpure(model, x, 100.0, stride=10.0, seed=5)
    c = D.diffpure(model, x, 100.0, stride=10.0, seed=6)
    g1 = D.gdmp(model, x, 100.0, stride=10.0, seed=5)
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, g1)
    assert a.min() >= 0 and a.max() <= 1 and a.shape == x.shape


def test_gdmp_guidance_never_overshoots_on_a_coarse_stride(model, digits):
    from rayml.purify.classifier import accuracy, load_classifier

    x, y = digits[2][:32], digits[3][:32]
    with torch.no_grad():
        # a tiny radius makes GDMP's scale huge; with stride 50 the uncapped step (var * 2 s ~ 9) diverged
        guided = D.gdmp(model, x, 250.0, stride=50.0, seed=0, guide_radius=0.01, guide_scale=0.195)
        plain = D.diffpure(model, x, 250.0, stride=50.0, seed=0)
    assert float((guided - x).abs().mean()) < float((plain - x).abs().mean())
    assert accuracy(load_classifier(), guided, y) > 0.9


def test_shipped_model_denoises_and_keeps_the_class(model, digits):
    from rayml.purify.classifier import accuracy, load_classifier

    x, y = digits[2][:64], digits[3][:64]
    with torch.no_grad():
        out = D.diffpure(model, x, 100.0, stride=5.0, seed=0)
    assert accuracy(load_classifier(), out, y) > 0.85


def test_score_is_minus_eps_over_sigma(model, digits):
    x = D.to_model(digits[0][:3])
    t = torch.tensor([10.0, 100.0, 500.0])
    with torch.no_grad():
        s = D.score(model, x, t)
        e = model(x, t)
    sig = torch.sqrt(1 - D.VPSchedule().alpha_bar(t))[:, None, None, None]
    assert torch.allclose(s, -e / sig)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: D.as_levels(-1.0, 2), "t must lie in"),
        (lambda: D.as_levels(1001.0, 2), "t must lie in"),
        (lambda: D.as_levels([1.0, 2.0, 3.0], 2), "t must be a number or 2"),
        (lambda: D.ScoreNet(1, 12), "width"),
        (lambda: D.ScoreNet()(torch.zeros(1, 1, 7, 7), torch.ones(1)), "H, W even"),
        (lambda: D.DiffusionConfig(iterations=0), "iterations"),
        (lambda: D.DiffusionConfig(lr=2.0), "lr"),
        (lambda: D.DiffusionConfig(data="cifar"), "data"),
        (lambda: D.VPSchedule(1.0, 0.5), "beta_min"),
        (lambda: D.reverse(DeltaEps(torch.zeros(1, 1, 2, 2)), torch.zeros(1, 1, 2, 2), 5.0, stride=0), "stride"),
        (lambda: D.gdmp(None, torch.zeros(1, 1, 2, 2), 5.0, guide_radius=0), "guide_radius"),
    ],
)
def test_bad_arguments_are_rejected(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_tiny_config_trains_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    cfg = D.DiffusionConfig(width=8, iterations=20, batch=16, seed=1)
    m1 = D.load_score_model(cfg)
    files = sorted(p.name for p in (tmp_path / "purify").iterdir())
    assert files == [f"score-{D.config_hash('score', cfg)}.json", f"score-{D.config_hash('score', cfg)}.pt"]
    D._LOADED.clear()
    m2 = D.load_score_model(cfg, train=False)
    x, t = torch.zeros(2, 1, 8, 8), torch.tensor([10.0, 20.0])
    assert torch.equal(m1(x, t), m2(x, t))
    with pytest.raises(FileNotFoundError):
        D.load_score_model(D.DiffusionConfig(width=8, iterations=41), train=False)
