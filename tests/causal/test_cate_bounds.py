"""CATE bounds from instrument partitions (rayml.causal.cate_bounds): closed-form Manski bounds on a
discrete instrument, brute-force intersection over level pairs, generators, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rayml.causal import cate_bounds as cb


def _manski_brute(mu, pi, lo, hi):
    n, K, _ = mu.shape
    out = np.zeros((n, 2))
    for i in range(n):
        lows, highs = [], []
        for k, l in itertools.product(range(K), range(K)):
            p0, m0, p1, m1 = pi[i, k, 0], mu[i, k, 0], pi[i, l, 1], mu[i, l, 1]
            lows.append(p1 * m1 + (1 - p1) * lo - p0 * m0 - (1 - p0) * hi)
            highs.append(p1 * m1 + (1 - p1) * hi - p0 * m0 - (1 - p0) * lo)
        out[i] = max(lows), min(highs)
    return out


def test_manski_bounds_match_a_brute_force_over_level_pairs():
    rng = np.random.default_rng(0)
    mu = rng.uniform(-1, 2, size=(7, 3, 2))
    pi = rng.uniform(0.05, 0.95, size=(7, 3, 2))
    got = cb.manski_bounds(torch.tensor(mu), torch.tensor(pi), (-1.0, 2.0)).numpy()
    np.testing.assert_allclose(got, _manski_brute(mu, pi, -1.0, 2.0), rtol=1e-12)


def test_one_level_gives_the_no_instrument_bounds_of_width_equal_to_the_range():
    mu = torch.tensor([[[0.3, 0.6]]], dtype=torch.float64)
    pi = torch.tensor([[[0.4, 0.6]]], dtype=torch.float64)
    b = cb.manski_bounds(mu, pi, (0.0, 1.0))
    assert float(b[0, 1] - b[0, 0]) == pytest.approx(1.0)
    # by hand: E[Y(1)] in [0.36, 0.76], E[Y(0)] in [0.12, 0.72]
    np.testing.assert_allclose(b.numpy(), [[0.36 - 0.72, 0.76 - 0.12]])


def test_bounds_on_a_discrete_instrument_equal_the_known_ones():
    # population: instrument Z in {0, 1} (the partition is Z itself), one x; the nuisances are
    # constant within a level, so the aggregated ones must be P(A = a | x, Z = k) and E[Y | x, a, Z = k]
    m = 40
    z = np.array([0] * 25 + [1] * 15)
    A = torch.tensor(np.r_[np.ones(5), np.zeros(20), np.ones(12), np.zeros(3)], dtype=torch.long)
    p1_xz = {0: 0.2, 1: 0.8}
    mu_xz = {0: (0.1, 0.5), 1: (0.3, 0.9)}
    p1_z = {0: 5 / 25, 1: 12 / 15}  # equal to the population frequencies, as for a correct P(A | Z)
    pairs = {
        "p_xz": torch.tensor([[[1 - p1_xz[k], p1_xz[k]] for k in z]], dtype=torch.float64),
        "mu": torch.tensor([[list(mu_xz[k]) for k in z]], dtype=torch.float64),
        "p_z": torch.tensor([[1 - p1_z[k], p1_z[k]] for k in z], dtype=torch.float64),
    }
    phi = torch.nn.functional.one_hot(torch.tensor(z), 2).double()
    mu, pi = cb.level_nuisances(pairs, phi, A)
    np.testing.assert_allclose(pi[0].numpy(), [[0.8, 0.2], [0.2, 0.8]], rtol=1e-12)
    np.testing.assert_allclose(mu[0].numpy(), [[0.1, 0.5], [0.3, 0.9]], rtol=1e-12)
    b = cb.manski_bounds(mu, pi, (0.0, 1.0)).numpy()[0]
    # Y(1): level 1 gives [0.8*0.9, 0.8*0.9 + 0.2] = [0.72, 0.92], level 0 [0.1, 0.9]: [0.72, 0.90]
    # Y(0): level 0 gives [0.8*0.1, 0.8*0.1 + 0.2] = [0.08, 0.28], level 1 [0.06, 0.86]: [0.08, 0.28]
    np.testing.assert_allclose(b, [0.72 - 0.28, 0.90 - 0.08], rtol=1e-12)
    assert m == len(z)


def test_generators_are_deterministic_and_have_the_papers_shapes():
    a, b = cb.generate("mixture", 300, 3), cb.generate("mixture", 300, 3)
    np.testing.assert_array_equal(a["Y"], b["Y"])
    assert a["Z"].shape == (300, 1) and np.abs(a["Z"]).max() <= 1
    np.testing.assert_allclose(a["cate"], cb.true_cate("mixture", a["X"]))
    h = cb.generate("binary", 300, 3)
    assert h["Z"].shape == (300, 20) and set(np.unique(h["Z"])) <= {0.0, 1.0}
    assert set(np.unique(h["A"])) <= {0, 1}


def test_repnet_levels_are_one_hot_and_the_loss_has_its_three_terms():
    torch.manual_seed(0)
    rep = cb.RepNet(3, 4)
    phi, cls = rep(torch.randn(50, 3))
    assert phi.shape == (50, 4) and torch.all(phi.sum(1) == 1)
    bounds = torch.tensor([[0.0, 1.0]] * 50)
    loss = cb.repnet_loss(bounds, phi, cls, (0.0, 2.0), gamma=0.0, alpha=0.0)
    assert float(loss) == pytest.approx(0.5)
    balanced = torch.nn.functional.one_hot(torch.arange(4).repeat(5), 4).float()
    assert float(cb.repnet_loss(bounds[:20], balanced, torch.zeros(20, 4), (0.0, 2.0), gamma=0.0)) == pytest.approx(
        0.5 + np.log(4), rel=1e-3)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="dataset"):
        cb.generate("images", 100, 0)
    with pytest.raises(ValueError, match="n must"):
        cb.generate("mixture", 5, 0)
    with pytest.raises(ValueError, match="support"):
        cb.manski_bounds(torch.zeros(1, 1, 2), torch.ones(1, 1, 2) / 2, (1.0, 0.0))
    with pytest.raises(ValueError, match="K must"):
        cb.RepNet(2, 0)
    with pytest.raises(ValueError, match="batch"):
        cb.TrainConfig(batch=0)


def _fit_binary(module, seed=0):
    d = module.generate("binary", 500, seed)
    perm = np.random.default_rng(seed).permutation(500)
    tr, va = perm[:200], perm[200:300]
    support = (float(d["Y"].min()), float(d["Y"].max()))
    cfg = module.TrainConfig(nuisance_epochs=2, rep_epochs=8, rep_patience=8)  # the authors' rep_lr 0.03
    nu = module.fit_nuisances(d, tr, va, cfg, seed=seed)
    kw = {"allow_one_level": True} if "allow_one_level" in module.fit_repnet.__code__.co_varnames else {}
    rep = module.fit_repnet(d, nu, 4, tr, va, support, cfg, seed=seed, **kw)
    with torch.no_grad():
        Z = torch.as_tensor(d["Z"][tr], dtype=torch.float32)
        phi, _ = rep(Z, sample=False)
        return phi.sum(0), rep.logits(rep.trunk(Z))


def test_the_learned_partition_of_the_binary_instrument_uses_more_than_one_level():
    # the trunk used to end in a ReLU: at the authors' lr 0.03 it died (output 0 for every Z, the
    # same logits for every instrument) and the argmax partition put every instrument into one
    # level (issue 38); on this seed the old trunk gave levels [0, 200, 0, 0]
    counts, _ = _fit_binary(cb, 0)
    assert int((counts > 0).sum()) >= 2, counts


def test_a_one_level_partition_fails_loudly_and_small_levels_do_not_bind():
    class Dead(torch.nn.Module):  # a representation that maps every instrument to level 0
        K = 3

        def forward(self, Z, sample=False):
            return torch.nn.functional.one_hot(torch.zeros(len(Z), dtype=torch.long), 3).float(), None

    d = cb.generate("mixture", 100, 0)
    assert set(cb.repnet_levels(Dead(), d, np.arange(100))) == {0}
    # a level below the minimum share gives the no-instrument bounds on its pairs
    mu = torch.tensor([[[0.2, 0.8], [0.0, 1.0]]])
    pi = torch.tensor([[[0.5, 0.5], [0.99, 0.99]]])
    both = cb.manski_bounds(mu, pi, (0.0, 1.0))
    masked = cb.manski_bounds(mu, pi, (0.0, 1.0), valid=torch.tensor([True, False]))
    np.testing.assert_allclose(masked.numpy(), cb.manski_bounds(mu[:, :1], pi[:, :1], (0.0, 1.0)).numpy())
    assert float(both[0, 1] - both[0, 0]) < float(masked[0, 1] - masked[0, 0])
    phi = torch.nn.functional.one_hot(torch.tensor([0] * 19 + [1]), 2).float()
    assert cb.level_mask(phi, 0.1).tolist() == [True, False]
    with pytest.raises(ValueError, match="valid"):
        cb.manski_bounds(mu, pi, (0.0, 1.0), valid=torch.tensor([True]))


def test_partitions_through_the_same_aggregation_and_the_oracle_partition():
    d = cb.generate("mixture", 300, 0)
    levels = cb.oracle_partition(d["strength"], 3)
    assert np.bincount(levels).tolist() == [100, 100, 100]
    assert np.all(np.diff(d["strength"][np.argsort(levels, kind="stable")][[99, 100, 199, 200]])[[0, 2]] >= 0)
    with pytest.raises(ValueError, match="levels"):
        cb.partition_bounds(None, d, np.arange(10), np.full(10, 3), 3, (0.0, 1.0))


def test_the_plug_in_partition_bins_the_first_stages_estimated_strength():
    # a first stage whose P(A = 1 | Z) is increasing in the 1-D instrument: the plug-in partition is
    # then K equal-size bins of Z itself, in order (session-6 review's control of the tightness claim)
    class Increasing(torch.nn.Module):
        def forward(self, z):
            return torch.cat([torch.zeros_like(z), 3 * z], 1)

    d = cb.generate("mixture", 300, 1)
    nu = cb.Nuisances(a_xz=None, a_z=Increasing(), mu=None)
    idx = np.arange(50, 290)
    levels = cb.propensity_partition(nu, d, idx, 4)
    assert np.bincount(levels).tolist() == [60, 60, 60, 60]
    z = d["Z"][idx, 0]
    assert all(z[levels == k].max() <= z[levels == k + 1].min() for k in range(3))
    np.testing.assert_array_equal(levels, cb.oracle_partition(z, 4))
    with pytest.raises(ValueError, match="K"):
        cb.propensity_partition(nu, d, idx, 0)
