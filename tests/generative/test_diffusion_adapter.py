"""rayml.generative.diffusion_adapter: a user's discrete noise-prediction model as DiffAdvMAP's prior."""

from types import SimpleNamespace

import pytest
import torch

from rayml.generative import diffadvmap as dam
from rayml.generative.diffusion_adapter import TabulatedSchedule, user_prior
from rayml.purify.diffusion import T_MAX


def test_the_tabulated_schedule_spans_the_table_on_continuous_levels():
    ac = torch.linspace(0.99, 0.02, 50)
    s = TabulatedSchedule(ac)
    assert float(s.alpha_bar(torch.tensor(0.0))) == 1.0
    assert torch.isclose(s.alpha_bar(torch.tensor(T_MAX)), ac[-1])
    assert torch.isclose(s.alpha_bar(torch.tensor(T_MAX * 10 / 50)), ac[9])   # position 10 = step index 9
    ab = s.alpha_bar(torch.linspace(0, T_MAX, 101))
    assert bool((ab[1:] <= ab[:-1]).all())
    for bad in ([0.5], [0.5, 0.9], [1.5, 0.5], [0.5, 0.0]):
        with pytest.raises(ValueError, match="alphas_cumprod"):
            TabulatedSchedule(bad)


def test_the_predictor_calls_the_module_at_the_discrete_step_and_unwraps_sample():
    seen = []

    def unet(x, step):   # a diffusers-style output object
        seen.append(step.clone())
        return SimpleNamespace(sample=torch.zeros_like(x))

    eps, _ = user_prior(unet, torch.linspace(0.999, 0.01, 100))
    out = eps(torch.ones(2, 3, 4, 4), torch.tensor([0.0, T_MAX]))
    assert out.shape == (2, 3, 4, 4) and seen[0].tolist() == [0, 99]
    bad, _ = user_prior(lambda x, step: x[:, :1], torch.linspace(0.999, 0.01, 10))
    with pytest.raises(ValueError, match="shape"):
        bad(torch.ones(1, 3, 4, 4), torch.tensor([10.0]))


def test_diffadvmap_attacks_with_a_users_rgb_prior_and_classifier():
    torch.manual_seed(0)
    net = torch.nn.Conv2d(3, 3, 3, padding=1)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    eps, schedule = user_prior(lambda x, step: net(x), torch.linspace(0.9999, 0.05, 200))
    x, y = torch.rand(3, 3, 8, 8), torch.tensor([0, 1, 2])
    cfg = dam.MAPConfig(t_star=200.0, steps=2, inner=2)
    adv = dam.attack(eps, clf, x, y, cfg, seed=1, schedule=schedule)
    again = dam.attack(eps, clf, x, y, cfg, seed=1, schedule=schedule)
    assert adv.shape == x.shape and float(adv.min()) >= 0 and float(adv.max()) <= 1
    assert torch.equal(adv, again)
