"""The implicit-bias tracker (rayml.theory.implicit_bias): hand-computed margins and KKT points,
homogenisation limits, monotonicity measure, determinism and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayml.theory import implicit_bias as ib


def _data(n=12, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.sign(X[:, 0] + 0.1)
    return X, y


def test_homogeneous_margin_equals_the_classical_one_by_hand():
    X, y = _data()
    net = ib.make_network("relu", 3, 5, seed=2)
    W, a = net.W.detach().numpy(), net.a.detach().numpy()
    f = np.maximum(X.numpy() @ W.T, 0) @ a
    classical = np.min(y.numpy() * f) / (np.sum(W ** 2) + np.sum(a ** 2))
    assert float(ib.normalized_margin(net, X, y)) == pytest.approx(classical, rel=1e-12)
    assert float(ib.homogenized_margin(net, X, y)) == pytest.approx(classical, rel=1e-12)
    with torch.no_grad():  # scale invariance of a 2-homogeneous net's normalised margin
        for p in net.parameters():
            p.mul_(7.0)
    assert float(ib.normalized_margin(net, X, y)) == pytest.approx(classical, rel=1e-10)


@pytest.mark.parametrize("name, order", [("silu", 2), ("residual-silu", 3)])
def test_homogenisation_is_the_large_scale_limit(name, order):
    X, y = _data()
    net = ib.make_network(name, 3, 6, seed=1, scale=0.5)
    r = 1e5
    with torch.no_grad():
        limit = net(X, homogenized=True)
        for p in net.parameters():
            p.mul_(r)
        scaled = net(X) / r ** order
    np.testing.assert_allclose(scaled.numpy(), limit.numpy(), rtol=1e-4, atol=1e-6)
    assert net.order == order


def test_tanh_has_a_vanishing_homogenisation():
    X, y = _data()
    net = ib.make_network("tanh", 3, 6, seed=1)
    assert float(ib.homogenized_margin(net, X, y)) == 0.0


def test_smoothed_margin_brackets():
    X, y = _data()
    net = ib.make_network("silu", 3, 6, seed=3, scale=2.0)
    g, s = float(ib.normalized_margin(net, X, y)), float(ib.smoothed_margin(net, X, y))
    norm_m = float(ib.params_vector(net).norm()) ** 2
    assert g - math.log(len(y)) / norm_m - 1e-12 <= s <= g + 1e-12


def _single_neuron(w1, w2, a):
    net = ib.make_network("relu", 2, 1, seed=0)
    with torch.no_grad():
        net.W.copy_(torch.tensor([[w1, w2]], dtype=torch.float64))
        net.a.copy_(torch.tensor([a], dtype=torch.float64))
    return net


def test_kkt_residual_is_zero_at_a_hand_computed_kkt_point_and_positive_elsewhere():
    # one point x = (1, 0), y = +1: min (w1^2 + w2^2 + a^2) / 2 s.t. a w1 >= 1 has the KKT point
    # w = (1, 0), a = 1 with lambda = 1 (theta = grad q = (a x, w . x)); any positive rescaling of it
    # is the same direction
    X = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([1.0], dtype=torch.float64)
    k = ib.kkt_residual(_single_neuron(3.0, 0.0, 3.0), X, y)
    assert k["eps"] == pytest.approx(0.0, abs=1e-12) and k["delta"] == pytest.approx(0.0, abs=1e-12)
    off = ib.kkt_residual(_single_neuron(1.0, 0.5, 1.0), X, y)
    assert off["eps"] > 0.1
    assert math.isnan(ib.kkt_residual(_single_neuron(-1.0, 0.0, 1.0), X, y)["eps"])  # infeasible direction


def test_near_monotonicity_by_hand():
    m = ib.near_monotonicity([0.0, 1.0, 0.8, 2.0])
    assert m["gain"] == 2.0 and m["max_drop"] == pytest.approx(0.2) and m["rel_drop"] == pytest.approx(0.1)
    assert ib.near_monotonicity([3.0, 2.0, 1.0])["rel_drop"] == 1.0
    assert ib.near_monotonicity([5.0, 0.0, 1.0, 2.0], start=1)["rel_drop"] == 0.0


def test_track_gd_on_a_homogeneous_net_raises_margin_and_norm_and_is_deterministic():
    X, y = _data(n=16, d=3, seed=4)
    cfg = ib.TrackerConfig(steps=300, lr=0.1, checkpoints=10, kkt_every=3, max_step_norm=0.01)
    rows = ib.track_gd(ib.make_network("relu", 3, 8, seed=1, scale=0.3), X, y, cfg)
    again = ib.track_gd(ib.make_network("relu", 3, 8, seed=1, scale=0.3), X, y, cfg)
    assert [r["margin"] for r in rows] == [r["margin"] for r in again]
    assert rows[-1]["log_risk"] < rows[0]["log_risk"] and rows[-1]["norm"] > rows[0]["norm"]
    assert rows[-1]["margin"] > rows[0]["margin"] and rows[-1]["margin"] > 0
    assert "kkt_residual" in rows[-1] and rows[0]["step"] == 0 and rows[-1]["step"] == 300


def test_bad_input_is_rejected():
    X, y = _data()
    net = ib.make_network("relu", 3, 4)
    with pytest.raises(ValueError, match="y must"):
        ib.normalized_margin(net, X, y * 2)
    with pytest.raises(ValueError, match="network"):
        ib.make_network("gelu", 3, 4)
    with pytest.raises(ValueError, match="steps"):
        ib.TrackerConfig(steps=1)
    with pytest.raises(ValueError, match="loss"):
        ib.TrackerConfig(loss="hinge")
    with pytest.raises(ValueError, match="X must"):
        ib.track_gd(net, X.numpy(), y)


def test_track_gd_accepts_a_plain_sequential_with_its_order_and_says_what_is_missing():
    torch.manual_seed(0)
    X = torch.randn(12, 3)
    y = torch.where(X[:, 0] > 0, 1.0, -1.0)
    seq = torch.nn.Sequential(torch.nn.Linear(3, 8, bias=False), torch.nn.ReLU(), torch.nn.Linear(8, 1, bias=False))
    with pytest.raises(ValueError, match="order"):
        ib.track_gd(seq, X, y, ib.TrackerConfig(steps=5, checkpoints=3))
    rows = ib.track_gd(seq, X, y, ib.TrackerConfig(steps=20, checkpoints=4), order=2)
    assert rows[-1]["step"] == 20 and np.isfinite(rows[-1]["margin"])
    assert rows[-1]["margin"] == pytest.approx(rows[-1]["homogenized_margin"])
    with pytest.raises(ValueError, match="scores"):
        ib.track_gd(torch.nn.Linear(3, 2), X, y, ib.TrackerConfig(steps=5, checkpoints=3), order=1)


@pytest.mark.parametrize("name", ib.NETWORKS)
def test_euler_defect_polynomial_bounds_the_defect_at_every_scale(name):
    X, _ = _data(n=8, d=3, seed=5)
    net = ib.make_network(name, 3, 6, seed=2, scale=0.7)
    coeffs = ib.euler_defect(net, X)
    params = list(net.parameters())
    for r in (0.3, 3.0, 30.0):
        with torch.no_grad():
            for p in params:
                p.mul_(r)
        rho = float(torch.sqrt(sum((p.detach() ** 2).sum() for p in params)))
        bound = sum(c * rho ** k for k, c in enumerate(coeffs))
        for i in range(X.shape[0]):
            f = net(X[i:i + 1])[0]
            grads = torch.autograd.grad(f, params)
            defect = float(sum((g * p).sum() for g, p in zip(grads, params)) - net.order * f.detach())
            assert abs(defect) <= bound + 1e-9 * max(1.0, abs(float(f)))
    if name == "relu":
        assert coeffs == (0.0, 0.0)  # homogeneous: no defect, Q = 0


def test_induced_correction_solves_its_equation_and_induced_margin_reduces_to_smoothed_for_relu():
    c, M = (0.5, 2.0, 0.25), 3
    rho, h = 1.7, 1e-6
    Q = lambda r: ib.induced_correction(c, M, r)  # noqa: E731
    dQ = (Q(rho + h) - Q(rho - h)) / (2 * h)
    assert M * Q(rho) - rho * dQ == pytest.approx(sum(ck * rho ** k for k, ck in enumerate(c)), rel=1e-6)
    X, y = _data()
    net = ib.make_network("relu", 3, 5, seed=3)
    assert float(ib.induced_margin(net, X, y, (0.0, 0.0))) == pytest.approx(float(ib.smoothed_margin(net, X, y)))
    with pytest.raises(ValueError, match="defect"):
        ib.induced_correction((1.0, 1.0, 1.0), 2, 1.0)  # degree 2 is not below M = 2


def test_induced_margin_does_not_fall_after_the_threshold_on_a_residual_net():
    g = torch.Generator().manual_seed(7)
    X = torch.randn(10, 3, generator=g, dtype=torch.float64)
    w = torch.randn(3, generator=g, dtype=torch.float64)
    y = torch.sign(X @ w)
    X = X + 2.0 * y[:, None] * w / w.norm()
    net = ib.make_network("residual-silu", 3, 4, seed=1, scale=0.05)
    rows = ib.track_gd(net, X, y, ib.TrackerConfig(steps=3000, lr=0.05, checkpoints=40, kkt_every=100,
                                                   max_step_norm=0.002))
    induced = [r["induced_margin"] for r in rows]
    past = [i for i, v in enumerate(induced) if v > 0]
    assert past, "the threshold is reached"
    assert ib.near_monotonicity(induced, past[0])["value_drop"] <= 1e-3


def test_value_drop_is_relative_to_the_value():
    m = ib.near_monotonicity([1.0, 2.0, 1.9, 2.5])
    assert m["value_drop"] == pytest.approx(0.05)  # fell 0.1 below 2.0
    assert m["rel_drop"] == pytest.approx(0.1 / 1.5)
