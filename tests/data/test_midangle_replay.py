"""Mid-angle replay (rayml.data.midangle_replay): buffer rules against an independent sort, the
reservoir's uniformity, the theory's data and network, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayml.data import midangle_replay as mr


def _reference(X, k, rule):
    Xf = X.reshape(len(X), -1)
    mean = Xf.mean(0)
    cos = [float(x @ mean / (np.linalg.norm(x) * np.linalg.norm(mean))) for x in Xf]
    order = sorted(range(len(X)), key=lambda i: (-cos[i], i))
    if rule == "small":
        return sorted(order[:k])
    if rule == "large":
        return sorted(order[-k:])
    start = len(X) // 2 - k // 2
    return sorted(order[start:start + k])


@pytest.mark.parametrize("rule", ["small", "mid", "large"])
def test_angle_rules_match_an_independent_sort(rule):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4, 4)) + 1.0
    y = np.repeat([0, 1], 15)
    got = mr.select_buffer(X, y, 4, rule, rng)
    want = _reference(X[:15], 4, rule) + [15 + i for i in _reference(X[15:], 4, rule)]
    assert list(got) == want


def test_mid_lies_between_small_and_large_in_angle():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(101, 8)) + 0.5
    y = np.zeros(101, dtype=int)
    cos = X @ X.mean(0) / (np.linalg.norm(X, axis=1) * np.linalg.norm(X.mean(0)))
    c = {r: cos[mr.select_buffer(X, y, 5, r, rng)].mean() for r in ("small", "mid", "large")}
    assert c["small"] > c["mid"] > c["large"]
    assert abs(np.median(cos) - c["mid"]) < abs(np.median(cos) - c["small"])


def test_reservoir_is_uniform_over_the_stream():
    X = np.zeros((20, 3)) + 1.0
    y = np.zeros(20, dtype=int)
    counts = np.zeros(20)
    rng = np.random.default_rng(2)
    for _ in range(2000):
        counts[mr.select_buffer(X, y, 5, "reservoir", rng)] += 1
    freq = counts / 2000
    assert np.allclose(freq, 0.25, atol=0.06)


def test_signal_task_has_the_signal_patch_at_the_angle():
    X, y = mr.signal_task(50, 60.0, np.random.default_rng(0), patch_len=10, b_mu=8.0, noise=0.0)
    assert X.shape == (50, 1, 20) and set(y.tolist()) <= {0, 1}
    patches = X[:, 0].reshape(50, 2, 10)
    sig = patches[patches.norm(dim=2) > 0]
    assert torch.allclose(sig.norm(dim=1), torch.full((50,), 8.0))
    v = sig / 8.0
    assert torch.allclose(v[:, 0].abs(), torch.full((50,), 0.5), atol=1e-6)


def test_patchnet_is_cubic_in_its_input():
    net = mr.PatchNet(patch_len=5, m=3, seed=0)
    with torch.no_grad():
        net.conv.bias.zero_()
    x = torch.randn(4, 1, 10)
    torch.testing.assert_close(net(2 * x), 8 * net(x))


def test_no_forgetting_at_angle_zero_and_bad_input():
    out = mr.forgetting_after(0.0, 0, n_train=40, n_test=200, epochs=100, patch_len=20)
    assert out["error_before"] <= 0.05 and out["error_no_replay"] <= 0.05
    with pytest.raises(ValueError, match="rule"):
        mr.select_buffer(np.ones((3, 2)), np.zeros(3), 1, "median", np.random.default_rng(0))
    with pytest.raises(ValueError, match="per_class"):
        mr.select_buffer(np.ones((3, 2)), np.zeros(3), 0, "mid", np.random.default_rng(0))
    with pytest.raises(ValueError, match="same length"):
        mr.select_buffer(np.ones((3, 2)), np.zeros(2), 1, "mid", np.random.default_rng(0))
    with pytest.raises(ValueError, match="rule"):
        mr.run_sequence("median", 0)


def test_cubenet_sums_cubed_relu_units_per_class():
    net = mr.CubeNet(d_in=6, width=4)
    x = torch.randn(3, 6)
    expected = torch.stack([torch.relu(x @ lin.weight.T).pow(3).sum(1) for lin in net.lin], 1)
    torch.testing.assert_close(net(x), expected)
    torch.testing.assert_close(net(2 * x), 8 * net(x))  # bias-free: homogeneous of degree 3


def test_buffer_protocol_pairs_every_rule_from_one_trained_state():
    a = mr.buffer_protocol(["none", "mid", "small"], 3, per_class=2, epochs=1, width=16)
    b = mr.buffer_protocol(["mid"], 3, per_class=2, epochs=1, width=16)  # the same state and batches
    assert b == {"before": a["before"], "mid": a["mid"]} and set(a) == {"before", "none", "mid", "small"}
    assert all(0.0 <= v <= 1.0 for v in a.values())
    with pytest.raises(ValueError, match="rules"):
        mr.buffer_protocol(["median"], 0)
