"""Attacks: PGD against a closed form, projections, EOT and BPDA gradients through purification."""

from __future__ import annotations

import pytest
import torch

from rayml.purify import attacks as A
from rayml.purify import diffusion as D
from rayml.purify import ssni as S
from rayml.purify.classifier import accuracy, load_classifier


class Linear2(torch.nn.Module):
    """Two-class logits ``[0, w . x]``."""

    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, x):
        z = (x.flatten(1) * self.w.flatten()).sum(1)
        return torch.stack([torch.zeros_like(z), z], 1)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_linf_pgd_reaches_the_closed_form_corner_of_a_linear_model():
    w = torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    x = torch.full((3, 1, 4, 4), 0.5)
    y = torch.ones(3, dtype=torch.long)
    adv = A.pgd(A.classifier_grad(Linear2(w)), x, y, eps=0.1, iterations=10, step=0.05, seed=0)
    assert torch.allclose(adv, x - 0.1 * w.sign(), atol=1e-6)


def test_l2_pgd_moves_along_the_gradient_to_the_sphere():
    w = torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    x = torch.full((2, 1, 4, 4), 0.5)
    y = torch.ones(2, dtype=torch.long)
    adv = A.pgd(A.classifier_grad(Linear2(w)), x, y, eps=0.2, iterations=20, step=0.05, norm="l2",
                random_start=False)
    assert torch.allclose(adv, x - 0.2 * w / w.norm(), atol=1e-5)


@pytest.mark.parametrize("norm, eps", [("linf", 0.1), ("l2", 0.5)])
def test_pgd_stays_in_the_ball_and_the_image_range(norm, eps):
    clf = load_classifier()
    _, _, x, y = D.digits_split()
    x, y = x[:32], y[:32]
    adv = A.pgd(A.classifier_grad(clf), x, y, eps=eps, iterations=5, norm=norm, seed=0)
    d = (adv - x).flatten(1)
    size = d.abs().max(1).values if norm == "linf" else d.norm(dim=1)
    assert torch.all(size <= eps + 1e-5) and adv.min() >= 0 and adv.max() <= 1
    assert torch.equal(adv, A.pgd(A.classifier_grad(clf), x, y, eps=eps, iterations=5, norm=norm, seed=0))


def test_pgd_breaks_the_undefended_classifier_at_a_large_radius():
    clf = load_classifier()
    _, _, x, y = D.digits_split()
    x, y = x[:64], y[:64]
    adv = A.pgd(A.classifier_grad(clf), x, y, eps=0.3, iterations=20, seed=0)
    assert accuracy(clf, x, y) > 0.9 and accuracy(clf, adv, y) < 0.05


def test_eot_and_bpda_gradients_through_purification():
    clf, model = load_classifier(), D.load_score_model()
    _, _, x, y = D.digits_split()
    x, y = x[:4], y[:4]
    cfg = S.PurifyConfig(stride=50.0)
    fn = lambda xs, g: S.purify(model, xs, cfg, seed=g)[0]  # noqa: E731
    g_eot = A.eot_grad(clf, fn, eot=3)(x, y, torch.Generator().manual_seed(0))
    g_bpda = A.bpda_eot_grad(clf, fn, eot=3)(x, y, torch.Generator().manual_seed(0))
    for g in (g_eot, g_bpda):
        assert g.shape == x.shape and torch.isfinite(g).all() and float(g.abs().sum()) > 0
    # BPDA with the identity "purifier" is exactly the classifier's gradient
    ident = A.bpda_eot_grad(clf, lambda xs, g: xs, eot=2)(x, y, None)
    assert torch.allclose(ident, A.classifier_grad(clf)(x, y, None), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(norm="l1"), "norm"), (dict(eps=0.0), "eps"), (dict(iterations=0), "iterations")],
)
def test_bad_arguments_are_rejected(kwargs, match):
    args = dict(eps=0.1, iterations=2) | kwargs
    with pytest.raises(ValueError, match=match):
        A.pgd(lambda x, y, g: x, torch.zeros(1, 1, 2, 2), torch.zeros(1, dtype=torch.long), **args)
    with pytest.raises(ValueError, match="eot"):
        A.eot_grad(None, None, eot=0)


def test_eot_grad_penalty_is_subtracted_from_the_loss():
    """The norm-penalty attack's gradient: d/dx [CE - penalty(x)] (issue 40's adaptive attack on SSNI)."""
    import torch

    from rayml.purify import attacks as A

    torch.manual_seed(0)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x, y = torch.rand(2, 1, 2, 2), torch.tensor([0, 2])
    ident = lambda xs, g: xs  # noqa: E731
    plain = A.eot_grad(clf, ident, 1)(x, y, None)
    pen = A.eot_grad(clf, ident, 1, penalty=lambda xs, g: 3.0 * (xs ** 2).flatten(1).sum(1))(x, y, None)
    torch.testing.assert_close(pen, plain - 6.0 * x)
