"""SSNI: score norms, the two reweighting functions, per-sample purification."""

from __future__ import annotations

import math

import pytest
import torch

from rayml.purify import diffusion as D
from rayml.purify import ssni as S

REF = S.ReferenceStats(mean=60.0, std=10.0, min=40.0, max=120.0, n=100)


class DeltaEps(torch.nn.Module):
    """The exact epsilon of a point-mass data distribution at ``c`` (model scale)."""

    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x, t):
        ab = D.VPSchedule().alpha_bar(t)[:, None, None, None]
        return (x - torch.sqrt(ab) * self.c) / torch.sqrt(1 - ab)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def model():
    return D.load_score_model()


@pytest.fixture(scope="module")
def digits():
    return D.digits_split()


def test_score_norm_of_the_exact_score_grows_with_the_distance_to_the_data():
    c = torch.zeros(1, 1, 8, 8)
    model = DeltaEps(c)
    direction = torch.linspace(-1, 1, 64).reshape(1, 1, 8, 8)
    images = D.to_image(torch.cat([c + r * direction for r in (0.0, 0.02, 0.1, 0.4)]))
    norms = S.score_norms(model, images, eps_steps=20, seed=0)
    assert torch.all(norms[1:] > norms[:-1])
    # float64 re-derivation of the deterministic part: ||mean_k sqrt(ab_k)(x - c)/(1 - ab_k)||
    ab = D.VPSchedule().alpha_bar(torch.arange(1, 21, dtype=torch.float64))
    coef = float((torch.sqrt(ab) / (1 - ab)).mean())
    expected = coef * float((0.4 * direction).norm())
    assert float(norms[3]) == pytest.approx(expected, rel=0.02)


def test_trained_score_norm_is_larger_for_noisy_inputs(model, digits):
    x = digits[2][:64]
    noisy = (x + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    with torch.no_grad():
        clean_n = S.score_norms(model, x, seed=1)
        noisy_n = S.score_norms(model, noisy, seed=1)
    assert float(noisy_n.mean()) > 1.5 * float(clean_n.mean())
    assert float((noisy_n > clean_n).float().mean()) > 0.9


@pytest.mark.parametrize("variant", ["N", "L"])
def test_reweighting_is_monotone_in_the_score_norm(variant):
    norms = torch.linspace(0.0, 400.0, 401)
    t = S.sample_levels(norms, REF, S.SSNIConfig(variant))
    assert torch.all(t[1:] >= t[:-1]) and t[-1] > t[0]
    assert torch.equal(t, torch.round(t)) and t.min() >= 0 and t.max() <= 1000


def test_sigmoid_reweighting_by_hand():
    cfg = S.SSNIConfig("N", t_star=100, bias=5, tau=2.0)
    t = S.sample_levels(torch.tensor([60.0, 80.0, 1e6, -1e6]), REF, cfg)
    expected_80 = round(105 / (1 + math.exp(-(80 - 60) / (2.0 * 10.0))))
    assert t.tolist() == [round(105 / 2), expected_80, 105.0, 0.0]


def test_linear_reweighting_by_hand_uses_the_reference_extremes_only():
    cfg = S.SSNIConfig("L", t_star=100, bias=5, linear_range="reference")
    t = S.sample_levels(torch.tensor([40.0, 80.0, 120.0]), REF, cfg)
    assert t.tolist() == [5.0, 55.0, 105.0]
    # a norm beyond the reference max gets a level past t* + b; it does not rescale its batch-mate
    t = S.sample_levels(torch.tensor([50.0, 220.0]), REF, cfg)
    assert t.tolist() == [round(10 * 100 / 80 + 5), round(180 * 100 / 80 + 5)]


@pytest.mark.parametrize("variant", ["N", "L"])
def test_a_samples_level_does_not_depend_on_its_batch(variant):
    cfg = S.SSNIConfig(variant, t_star=100, bias=5, linear_range="reference")
    probe = torch.tensor([70.0])
    alone = S.sample_levels(probe, REF, cfg)
    for mates in (torch.tensor([10.0, 300.0]), torch.tensor([65.0]), torch.tensor([1000.0, 0.0, 90.0])):
        t = S.sample_levels(torch.cat([probe, mates]), REF, cfg)
        assert torch.equal(t[:1], alone)
        t = S.sample_levels(torch.cat([mates, probe]), REF, cfg)
        assert torch.equal(t[-1:], alone)


def test_purified_levels_do_not_depend_on_the_batch_with_deterministic_norms():
    c = torch.zeros(1, 1, 8, 8)
    model = DeltaEps(c)
    direction = torch.linspace(-1, 1, 64).reshape(1, 1, 8, 8)
    imgs = D.to_image(torch.cat([c + r * direction for r in (0.05, 0.1, 0.3, 0.6)]))
    ref = S.ReferenceStats(*(lambda n: (float(n.mean()), float(n.std()), float(n.min()), float(n.max()), 4))(
        S.score_norms(model, imgs[:2], eps_steps=20, seed=0)))
    cfg = S.SSNIConfig("L", eps_steps=20, linear_range="reference")  # the batch-independent rule
    small = S.sample_levels(S.score_norms(model, imgs[:1], seed=0), ref, cfg)
    big = S.sample_levels(S.score_norms(model, imgs, seed=0), ref, cfg)
    # the noise of the score norm differs between the two batches; its effect on the norm is tiny
    assert abs(float(small[0]) - float(big[0])) <= 1.0


def test_straight_through_levels_pass_gradients():
    norms = torch.tensor([55.0, 70.0], requires_grad=True)
    t = S.sample_levels(norms, REF, S.SSNIConfig("N"), straight_through=True)
    assert torch.equal(t.detach(), S.sample_levels(norms.detach(), REF, S.SSNIConfig("N")))
    t.sum().backward()
    assert torch.all(norms.grad > 0)


def test_ssni_purify_picks_per_sample_levels_and_is_deterministic(model, digits):
    x = digits[2][:16]
    noisy = (x + 0.15 * torch.randn(x.shape, generator=torch.Generator().manual_seed(2))).clamp(0, 1)
    ref = S.reference_stats(model, digits[0][:100], seed=0)
    cfg = S.PurifyConfig(stride=20.0)
    out1, t1 = S.purify(model, torch.cat([x, noisy]), cfg, ssni=S.SSNIConfig("N"), ref=ref, seed=3)
    out2, t2 = S.purify(model, torch.cat([x, noisy]), cfg, ssni=S.SSNIConfig("N"), ref=ref, seed=3)
    assert torch.equal(out1, out2) and torch.equal(t1, t2)
    assert float(t1[16:].mean()) > float(t1[:16].mean())
    assert abs(float(t1[:16].mean()) - 52.5) < 30  # clean inputs sit near (t* + b) / 2
    base, tb = S.purify(model, x, S.PurifyConfig(t_star=0.0), seed=0)
    assert torch.equal(base, x) and torch.all(tb == 0)


def test_gradients_reach_the_input_through_ssni(model, digits):
    ref = S.reference_stats(model, digits[0][:50], seed=0)
    x = digits[2][:4].clone().requires_grad_(True)
    out, _ = S.purify(model, x, S.PurifyConfig(stride=50.0), ssni=S.SSNIConfig("L"), ref=ref, seed=0,
                      straight_through=True)
    (out ** 2).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and float(x.grad.abs().sum()) > 0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: S.SSNIConfig(variant="X"), "variant"),
        (lambda: S.SSNIConfig(tau=0.0), "tau"),
        (lambda: S.SSNIConfig(t_star=0.0), "t_star"),
        (lambda: S.SSNIConfig(bias=-1.0), "bias"),
        (lambda: S.SSNIConfig(eps_steps=0), "eps_steps"),
        (lambda: S.PurifyConfig(method="sde"), "method"),
        (lambda: S.PurifyConfig(stride=0.0), "stride"),
        (lambda: S.purify(None, torch.zeros(2, 8, 8)), "images must be"),
        (lambda: S.purify(None, torch.zeros(2, 1, 8, 8), ssni=S.SSNIConfig()), "ref"),
    ],
)
def test_bad_arguments_are_rejected(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _two_level_images(n: int, seed: int) -> torch.Tensor:
    """A planted data set the user might bring: 4x4 images, left half dark, right half bright."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, 1, 4, 4)
    x[..., 2:] = 1.0
    return (x + 0.03 * torch.randn(x.shape, generator=g)).clamp(0, 1)


def test_fit_score_model_learns_the_users_own_images():
    """A score network fitted on the user's images (not digits) gives them a smaller score norm than
    uniform noise of the same shape, is deterministic per seed, and its card names the data."""
    x = _two_level_images(64, 0)
    model, card = S.fit_score_model(x, iterations=150, batch=32, seed=1)
    again, _ = S.fit_score_model(x, iterations=150, batch=32, seed=1)
    assert card["data"]["images"] == [64, 1, 4, 4] and len(card["data"]["sha256"]) == 64
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    held_out, noise = _two_level_images(32, 2), torch.rand(32, 1, 4, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        clean_norm = S.score_norms(model, held_out, seed=0)
        noise_norm = S.score_norms(model, noise, seed=0)
    assert clean_norm.median() < noise_norm.median()
    ref = S.reference_stats(model, held_out, seed=0)
    out, t = S.purify(model, noise[:4], S.PurifyConfig("diffpure", stride=50.0), ssni=S.SSNIConfig("N"), ref=ref,
                      seed=0)
    assert out.shape == (4, 1, 4, 4) and (t > 0).all()


@pytest.mark.parametrize("images, match", [(torch.rand(4, 4, 4), "shape"), (torch.rand(4, 1, 3, 4), "even"),
                                           (torch.rand(4, 1, 4, 4) * 2, r"\[0, 1\]"), ([[0.5]], "images must be")])
def test_fit_score_model_rejects_bad_images(images, match):
    with pytest.raises((ValueError, TypeError), match=match):
        S.fit_score_model(images, iterations=1)


def test_linear_reweighting_takes_min_and_max_over_reference_and_batch_by_default():
    """The paper's SSNI-L (issue 40): min / max over the reference norms and the batch, so a batch of
    attacked inputs whose norms lie far above the reference max gets levels up to t* + b, not the
    376-397 the reference-only range extrapolated to."""
    cfg = S.SSNIConfig("L", t_star=100, bias=5)
    assert cfg.linear_range == "reference+batch"
    norms = torch.tensor([300.0, 200.0, 50.0])          # REF: min 40, max 120
    t = S.sample_levels(norms, REF, cfg)
    assert t.tolist() == [105.0, round(160 * 100 / 260 + 5), round(10 * 100 / 260 + 5)]
    within = S.sample_levels(torch.tensor([50.0, 100.0]), REF, cfg)   # inside the reference range
    assert torch.equal(within, S.sample_levels(torch.tensor([50.0, 100.0]), REF,
                                               S.SSNIConfig("L", t_star=100, bias=5, linear_range="reference")))
    old = S.sample_levels(norms, REF, S.SSNIConfig("L", t_star=100, bias=5, linear_range="reference"))
    assert old[0] > 300  # the reference-only range sends the attacked norm past t* + b
    with pytest.raises(ValueError, match="linear_range"):
        S.SSNIConfig("L", linear_range="batch")
