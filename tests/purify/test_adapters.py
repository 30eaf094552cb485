"""The diffusers adapter: time and noise-level mapping, eps -> score against closed forms, purification with a
small randomly initialised diffusers UNet2DModel (deterministic, on the sizes the UNet takes)."""

from __future__ import annotations

import types

import pytest
import torch

from rayml.purify import adapters as AD
from rayml.purify import diffusion as D
from rayml.purify import ssni as S

diffusers = pytest.importorskip("diffusers")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _unet(**kw):
    torch.manual_seed(0)
    return diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=kw.pop("out_channels", 1),
                                 layers_per_block=1, block_out_channels=(8, 16),
                                 down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=4, **kw)


class PointMassUNet(torch.nn.Module):
    """A diffusers-style model whose output is the exact eps of a point mass ``c`` at the *discrete* level
    ``alphas_cumprod[k]`` of integer timesteps ``k`` (float64 inside)."""

    def __init__(self, c, acp, kind="epsilon"):
        super().__init__()
        self.c, self.acp, self.kind = c.double(), acp, kind
        self.config = types.SimpleNamespace(in_channels=1, out_channels=1, sample_size=4, block_out_channels=(4,))
        self.seen = []

    def forward(self, x, k):
        self.seen.append(k.detach().clone())
        ki = torch.round(k.double()).long()
        assert torch.allclose(k.double(), ki.double(), atol=2e-3)  # the test asks only at integer levels
        ab = self.acp[ki][:, None, None, None]
        x = x.double()
        eps = (x - ab.sqrt() * self.c) / (1 - ab).sqrt()
        out = {"epsilon": eps, "sample": self.c.expand_as(x), "v_prediction": ab.sqrt() * eps - (1 - ab).sqrt() * self.c}
        from diffusers.models.unets.unet_2d import UNet2DOutput

        return UNet2DOutput(sample=out[self.kind].float())


def _t_of_level(ab: torch.Tensor, sched=D.VPSchedule()) -> torch.Tensor:
    """rayml's time t with alpha_bar(t) = ab: the root of beta_min s + (beta_max - beta_min) s^2 / 2 = -log ab."""
    a, b, c = 0.5 * (sched.beta_max - sched.beta_min), sched.beta_min, torch.log(ab)
    return 1000.0 * (-b + torch.sqrt(b * b - 4 * a * c)) / (2 * a)


def test_ddpm_alphas_cumprod_is_diffusers_own():
    acp = diffusers.DDPMScheduler().alphas_cumprod.double()
    assert torch.allclose(AD.ddpm_alphas_cumprod(), acp, rtol=1e-6)
    # rayml's continuous schedule is the limit of the same betas: alpha_bar(k + 1) ~ alphas_cumprod[k]
    cont = D.VPSchedule().alpha_bar(torch.arange(1, 1001, dtype=torch.float64))
    assert float((cont - acp).abs().max()) < 1e-3


@pytest.mark.parametrize("kind", ["epsilon", "sample", "v_prediction"])
def test_score_of_the_adapter_is_the_closed_form_point_mass_score(kind):
    acp = AD.ddpm_alphas_cumprod()
    c = torch.linspace(-0.7, 0.7, 16, dtype=torch.float64).reshape(1, 1, 4, 4)
    ks = torch.tensor([0, 9, 99, 499, 900])
    model = AD.DiffusersEps(PointMassUNet(c, acp, kind), acp.float(), prediction_type=kind)
    t = _t_of_level(acp[ks]).float()
    x = torch.randn(5, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = D.score(model, x, t).double()
    ab = acp[ks][:, None, None, None]
    expected = -(x.double() - ab.sqrt() * c) / (1 - ab)  # -eps / sigma of the point mass, in float64
    for i in range(len(ks)):  # each level at its own scale (the score at k = 0 is 10^4 times the one at k = 900)
        assert torch.allclose(got[i], expected[i], rtol=2e-3, atol=2e-3 * float(expected[i].abs().max())), int(ks[i])
    # the timesteps asked are the discrete steps whose level is rayml's alpha_bar(t)
    assert torch.allclose(model.unet.seen[-1].double(), ks.double(), atol=2e-3)


def test_timesteps_are_monotone_and_clamped():
    model = AD.from_diffusers(_unet())
    t = torch.tensor([0.0, 0.5, 1.0, 10.0, 100.0, 999.0, 1000.0])
    k = model.timesteps(t)
    assert torch.all(k[1:] >= k[:-1]) and float(k[0]) == 0.0 and float(k[-1]) <= 999.0
    assert abs(float(k[4]) - 99.0) < 1.0  # DDPM's linear betas: t = 100 is about step 99


def test_purification_with_a_random_diffusers_unet_runs_and_is_deterministic():
    model = AD.from_diffusers(_unet())
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    ref = S.ReferenceStats(mean=50.0, std=5.0, min=30.0, max=90.0, n=10)
    cfg = S.PurifyConfig(t_star=60.0, stride=20.0)
    a, ta = S.purify(model, x, cfg, ssni=S.SSNIConfig("N", eps_steps=2), ref=ref, seed=3)
    b, tb = S.purify(model, x, cfg, ssni=S.SSNIConfig("N", eps_steps=2), ref=ref, seed=3)
    c, _ = S.purify(model, x, cfg, ssni=S.SSNIConfig("N", eps_steps=2), ref=ref, seed=4)
    assert torch.equal(a, b) and torch.equal(ta, tb) and not torch.equal(a, c)
    assert a.shape == x.shape and torch.isfinite(a).all() and a.min() >= 0 and a.max() <= 1
    g = D.gdmp(model, x, 40.0, stride=20.0, seed=0)
    assert torch.equal(g, D.gdmp(model, x, 40.0, stride=20.0, seed=0))
    # gradients reach the images through the wrapped UNet (what the adaptive attacks need)
    xr = x.clone().requires_grad_(True)
    D.diffpure(model, xr, 40.0, stride=20.0, seed=0).sum().backward()
    assert xr.grad is not None and float(xr.grad.abs().sum()) > 0


def test_learned_sigma_keeps_the_eps_channels_and_sizes_are_checked():
    unet = _unet(out_channels=2)
    model = AD.from_diffusers(unet)
    x, t = torch.zeros(2, 1, 8, 8), torch.tensor([10.0, 20.0])
    with torch.no_grad():
        full = unet(x, model.timesteps(t)).sample
        assert torch.equal(model(x, t), full[:, :1])
    assert model.accepts(8, 8) and not model.accepts(16, 16)
    with pytest.raises(ValueError, match="does not take 16x16"):
        model(torch.zeros(1, 1, 16, 16), torch.ones(1))
    any_size = AD.from_diffusers(_unet(), any_size=True)
    assert any_size.accepts(16, 12) and not any_size.accepts(9, 8)
    assert any_size(torch.zeros(1, 1, 16, 12), torch.ones(1)).shape == (1, 1, 16, 12)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: AD.DiffusersEps(_unet(), AD.ddpm_alphas_cumprod(), prediction_type="x"), ValueError, "prediction_type"),
        (lambda: AD.DiffusersEps(_unet(), torch.tensor([0.5, 0.9])), ValueError, "decreasing"),
        (lambda: AD.DiffusersEps(torch.nn.Linear(2, 2), AD.ddpm_alphas_cumprod()), TypeError, "config"),
        (lambda: AD.DiffusersEps(_unet(out_channels=3), AD.ddpm_alphas_cumprod()), ValueError, "channels"),
        (lambda: AD.from_diffusers(_unet())(torch.zeros(1, 3, 8, 8), torch.ones(1)), ValueError, "x must be"),
        (lambda: AD.from_diffusers(_unet(), scheduler=object()), TypeError, "alphas_cumprod"),
    ],
)
def test_bad_arguments_are_rejected(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_load_local_reads_a_saved_folder_without_downloading(tmp_path):
    unet = _unet()
    unet.save_pretrained(tmp_path)
    diffusers.DDPMScheduler(prediction_type="epsilon").save_pretrained(tmp_path / "scheduler")
    model = AD.load_local(str(tmp_path))
    x, t = torch.rand(2, 1, 8, 8), torch.tensor([5.0, 50.0])
    with torch.no_grad():
        assert torch.allclose(model(x, t), AD.from_diffusers(unet)(x, t))
