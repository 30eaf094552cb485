"""rayml.federated.fedag: FedAG's terms against hand-computed values, a FedAvg round by hand, the
silo's determinism, the digit domains, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayml.federated import fedag
from rayml.federated import fedag_data as fd
from rayml.federated import fedag_fit
from rayml.federated.fedag_silo import Silo, head_of, hidden_features


def _np_softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_ce(z, y):
    p = _np_softmax(z)
    return float(np.mean([-math.log(p[i, t]) for i, t in enumerate(y)]))


def _np_kd(student, teacher, y, T, alpha):
    """The distillation loss re-derived in float64 numpy: alpha T^2 KL(p_t || p_s) + (1 - alpha) CE."""
    ps, pt = _np_softmax(np.asarray(student) / T), _np_softmax(np.asarray(teacher) / T)
    kl = float(np.sum(pt * (np.log(pt) - np.log(ps))) / len(y))
    return alpha * T * T * kl + (1 - alpha) * _np_ce(student, y)


# ------------------------------------------------------------------ mutual-learning terms by hand

def test_kd_loss_hand_computed():
    s = torch.tensor([[0.0, 0.0]])
    t = torch.tensor([[math.log(3.0), 0.0]])
    y = torch.tensor([0])
    # p_t = (3/4, 1/4), p_s = (1/2, 1/2): KL = 3/4 ln(3/2) + 1/4 ln(1/2); CE = ln 2
    kl = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert float(fedag.kd_loss(s, t, y, 1.0, 0.5)) == pytest.approx(0.5 * kl + 0.5 * math.log(2.0), abs=1e-6)
    assert float(fedag.kd_loss(s, t, y, 1.0, 1.0)) == pytest.approx(kl, abs=1e-6)
    assert float(fedag.kd_loss(s, t, y, 1.0, 0.0)) == pytest.approx(math.log(2.0), abs=1e-6)


def test_kd_loss_matches_float64_rederivation_with_temperature():
    g = np.random.default_rng(0)
    s, t, y = g.normal(size=(5, 4)), g.normal(size=(5, 4)), g.integers(0, 4, 5)
    got = fedag.kd_loss(torch.tensor(s, dtype=torch.float64), torch.tensor(t, dtype=torch.float64),
                        torch.tensor(y), 2.0, 0.3)
    assert float(got) == pytest.approx(_np_kd(s, t, y, 2.0, 0.3), rel=1e-9)


def test_quality_weighting_of_the_mutual_learning_terms():
    g = np.random.default_rng(1)
    za, zc = g.normal(size=(3, 4)), 3 * g.normal(size=(3, 4))
    q = np.array([1.0, 0.5, 0.0])
    y = np.array([0, 1, 2])
    T = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    # adapter as student: the teacher's logits of each sample scaled by its quality (q = 0: uniform target)
    want = _np_kd(za, q[:, None] * zc, y, 1.0, 0.5)
    assert float(fedag.in_domain_adapter_loss(T(za), T(zc), T(q), torch.tensor(y), 1.0, 0.5)) == pytest.approx(want)
    # client as student: its own logits scaled by the quality
    want = _np_kd(q[:, None] * zc, za, y, 1.0, 0.5)
    assert float(fedag.in_domain_client_loss(T(zc), T(za), T(q), torch.tensor(y), 1.0, 0.5)) == pytest.approx(want)


def test_mutual_learning_gradients_go_to_the_student_only():
    za = torch.randn(4, 3, requires_grad=True)
    zc = torch.randn(4, 3, requires_grad=True)
    fedag.in_domain_adapter_loss(za, zc, torch.ones(4), torch.tensor([0, 1, 2, 0]), 1.0, 0.5).backward()
    assert za.grad is not None and zc.grad is None


def test_prototypes_and_quality_scores_hand_computed():
    feats = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    protos = fedag.class_prototypes(feats, torch.tensor([0, 0, 1]), n_classes=3)
    assert torch.allclose(protos, torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]))  # class 2 absent: zeros
    syn = torch.tensor([[1.0, 0.0], [1.0, 1.0], [5.0, 5.0], [0.0, 0.0]])
    q = fedag.quality_scores(syn, torch.tensor([0, 1, 2, 0]), protos)
    assert torch.allclose(q, torch.tensor([1.0, 1 / math.sqrt(2), 0.0, 0.0]), atol=1e-6)


# ---------------------------------------------------------- attention-regularised cross-domain terms

def test_attention_regulariser_hand_computed():
    att = torch.tensor([[0.5, 0.2], [0.3, 0.5], [0.2, 0.3]])  # (J=3 adapters, n=2 samples)
    # i = 0: sample 0 max(0, -.2, -.3) = 0; sample 1 max(0, .3, .1) = .3
    assert float(fedag.attention_regulariser(att, 0)) == pytest.approx(0.3)
    # i = 1: sample 0 max(.2, 0, -.1) = .2; sample 1 max(-.3, 0, -.2) = 0
    assert float(fedag.attention_regulariser(att, 1)) == pytest.approx(0.2)
    assert float(fedag.attention_regulariser(att, 2)) == pytest.approx(0.3 + 0.2)


def test_cross_domain_loss_hand_computed():
    z = np.array([[[2.0, 0.0]], [[0.0, 1.0]]])  # (J=2, n=1, C=2)
    att = np.array([[[0.25]], [[0.75]]])
    y = np.array([0])
    combined = (z * att).sum(0)  # [[0.5, 0.75]]
    for i, reg in ((0, 0.5), (1, 0.0)):
        want = _np_ce(z[i], y) + _np_ce(combined, y) + 0.1 * reg
        got = fedag.cross_domain_loss(torch.tensor(z), torch.tensor(att), i, torch.tensor(y), 0.1)
        assert float(got) == pytest.approx(want, rel=1e-9)


def test_attention_weights_are_a_softmax_over_adapters_of_relu_scores():
    torch.manual_seed(0)
    mod = fedag.DomainAttention(3)
    z = torch.randn(4, 5, 3)
    att = fedag.attention_weights(z, mod)
    scores = torch.relu(z @ mod.net[0].weight.T + mod.net[0].bias)
    assert att.shape == (4, 5, 1)
    assert torch.allclose(att, torch.softmax(scores, dim=0))
    assert torch.allclose(att.sum(0), torch.ones(5, 1))


def test_a_uniform_adapter_gives_the_zero_shot_logits():
    ad = fedag.AttentionAdapter(4)
    with torch.no_grad():
        ad.net[2].weight.zero_()
        ad.net[2].bias.zero_()
    f = torch.nn.functional.normalize(torch.randn(6, 4), dim=1)
    text = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    assert torch.allclose(fedag.adapter_logits(ad, f, text, 7.0), 7.0 * f @ text.T, atol=1e-6)


def test_a_uniform_adapter_on_hidden_features_gives_the_zero_shot_logits():
    """Issue 43: the adapter re-weights the frozen hidden features before the frozen last layer;
    uniform weights (1 / d each, scaled by d) are the backbone itself, so training starts at
    zero-shot, and the head's weights never train."""
    enc = _TinyEncoder(7)
    head = head_of(enc)
    ad = fedag.AttentionAdapter(7)
    with torch.no_grad():
        ad.net[2].weight.zero_()
        ad.net[2].bias.zero_()
    x = torch.rand(6, 64)
    h = hidden_features(enc, x)
    text = torch.as_tensor(enc.class_embeddings())
    with torch.no_grad():
        want = 4.0 * enc.image_features(x) @ text.T
    assert torch.allclose(fedag.adapter_logits(ad, h, text, 4.0, head), want, atol=1e-5)
    assert not any(p.requires_grad for p in head.parameters())
    with pytest.raises(ValueError, match="weight"):
        fedag.frozen_head(np.zeros(3))


def test_fit_fedag_on_user_silos_is_deterministic_and_predicts():
    """The federation driver outside the experiment: two silos of the user's data, in-process."""
    g = np.random.default_rng(3)
    silos = {d: (g.random((24, 64)).astype(np.float32), g.integers(0, 3, 24)) for d in ("a", "b")}
    syn = {d: (g.random((16, 64)).astype(np.float32), g.integers(0, 3, 16)) for d in ("a", "b")}
    cfg = fedag.FedAGConfig(rounds=2, local_epochs=1, batch_size=8, adapter_init_epochs=1, interact_epochs=1,
                            client_hidden=8)
    one = fedag_fit.fit_fedag(silos, syn, _TinyEncoder(6), cfg, seed=1, use_ray=False)
    two = fedag_fit.fit_fedag(silos, syn, _TinyEncoder(6), cfg, seed=1, use_ray=False)
    x = g.random((5, 64)).astype(np.float32)
    assert np.array_equal(one.logits(x).numpy(), two.logits(x).numpy())
    assert one.predict(x, domain="a").shape == (5,) and set(one.predict(x)) <= {0, 1, 2}
    with pytest.raises(ValueError, match="domain"):
        one.predict(x, domain="c")
    with pytest.raises(ValueError, match="silos and synthetic"):
        fedag_fit.fit_fedag(silos, {"a": syn["a"]}, _TinyEncoder(6), cfg, use_ray=False)


def test_shifted_domain_moves_the_digit_sideways():
    x = np.zeros((1, 64), dtype=np.float32)
    x[0, 3 * 8 + 3] = 1.0
    out = fd.apply_domain("shifted", x, np.random.default_rng(0)).reshape(8, 8)
    r, c = np.argwhere(out == 1.0)[0]
    assert out.sum() == 1.0 and r == 3 and abs(c - 3) == fd.SHIFT == 2


def test_one2all_is_the_attention_mixture_and_one2one_the_own_adapter():
    torch.manual_seed(1)
    ads = [fedag.AttentionAdapter(4) for _ in range(3)]
    att = fedag.DomainAttention(2)
    f, text = torch.randn(5, 4), torch.nn.functional.normalize(torch.randn(2, 4), dim=1)
    z = torch.stack([fedag.adapter_logits(a, f, text, 3.0) for a in ads]).detach()
    w = fedag.attention_weights(z, att).detach()
    assert torch.allclose(fedag.one2all_logits(ads, att, f, text, 3.0), (z * w).sum(0), atol=1e-6)
    assert torch.allclose(fedag.one2one_logits(ads[1], f, text, 3.0), z[1], atol=1e-6)


# ------------------------------------------------------------------------------ aggregation by hand

def test_fedavg_and_momentum_merge_hand_computed():
    v = [np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 9.0])]
    assert np.allclose(fedag.fedavg(v), [3.0, 5.0])
    assert np.allclose(fedag.fedavg(v, weights=[1, 0, 1]), [3.0, 5.5])
    assert np.allclose(fedag.fedavg(v, weights=[2, 1, 1]), [(2 + 3 + 5) / 4, (4 + 4 + 9) / 4])
    assert np.allclose(fedag.momentum_merge([1.0, 2.0], [11.0, 22.0], 0.9), [2.0, 4.0])


def test_a_fedavg_round_by_hand_through_the_silos_and_the_server_task():
    """Two silos each take one local step from the same global adapter; the server's FedAvg (no
    synthetic fine-tuning) equals the hand mean of the two uploads, and each upload equals one
    Adam step recomputed here from the silo's data."""
    from rayml.experiments.fedag import server_task

    g = np.random.default_rng(0)
    dim, n = 4, 6
    enc = _TinyEncoder(dim)
    text = np.eye(3, enc.out_dim, dtype=np.float32)
    ad = fedag.AttentionAdapter(dim)
    w0 = fedag.flat_params(ad)
    uploads, silos = [], []
    for s in range(2):
        x = g.random((n, 64)).astype(np.float32)
        y = g.integers(0, 3, n)
        silo = Silo(f"d{s}", enc, {0: (x, y, x[:3], y[:3])}, text, 5.0)
        req = {"kind": "adapter", "key": "k", "seed": 0, "params": w0, "epochs": 1, "lr": 0.05, "mu": 0.0,
               "batch_size": n, "gen_seed": 3}
        up = silo.run_round([req])[0]["params"]
        # one full-batch Adam step by hand: the first Adam step moves every weight by lr * sign(grad)
        ref = fedag.set_flat_params(fedag.AttentionAdapter(dim), w0)
        feats = hidden_features(enc, x)
        loss = fedag.contrastive_adapter_loss(ref, feats, torch.as_tensor(y), torch.as_tensor(text), 5.0,
                                              head_of(enc))
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in ref.parameters()]).numpy()
        step = np.where(grad != 0, 0.05 * np.sign(grad) * np.abs(grad) / (np.abs(grad) + 1e-8), 0.0)
        assert np.allclose(up, w0 - step, atol=1e-5)
        uploads.append({"params": up})
        silos.append(silo)
    config = {"rounds": 1, "local_epochs": 1, "batch_size": n, "init_epochs": 0, "interact_epochs": 0,
              "temperature": 1.0, "alpha": 0.5, "lam": 0.1, "momentum": 0.9, "client_hidden": 8}
    head = head_of(enc)
    shared = {"text": text, "scale": 5.0, "config": config, "syn": {}, "test": {}, "feature_dim": dim,
              "head": (head.weight.numpy(), head.bias.numpy())}
    run = {"method": "fedavg", "lr": 0.05, "train": ["d0", "d1"], "data_seed": 0}
    out = server_task({"run": run, "round": 0, "state": {}, "uploads": uploads, "gen_seed": 1}, shared)
    assert np.allclose(out["state"]["global"], (uploads[0]["params"] + uploads[1]["params"]) / 2, atol=1e-7)
    assert all(np.array_equal(d, out["state"]["global"]) for d in out["down"])


class _TinyEncoder(torch.nn.Module):
    """A fixed small 'backbone' for the silo tests: 64 pixels -> ReLU hidden layer of ``dim`` (the
    features the adapters re-weight) -> its last layer to ``out_dim`` (normalised embeddings)."""

    def __init__(self, dim, out_dim=5, n_classes=3):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            self.image_tower = torch.nn.Sequential(torch.nn.Linear(64, dim), torch.nn.ReLU(),
                                                   torch.nn.Linear(dim, out_dim))
            self._text = torch.nn.functional.normalize(torch.randn(n_classes, out_dim), dim=1)
        self.out_dim = out_dim

    def image_features(self, pixels):
        return torch.nn.functional.normalize(self.image_tower(pixels.reshape(pixels.shape[0], 64)), dim=-1)

    def class_embeddings(self):
        return self._text.numpy()


# ------------------------------------------------------------------------- server update, silos

def _server_setup(seed=0, k=3, dim=6, n=20):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ads = [fedag.AttentionAdapter(dim) for _ in range(k)]
    att = fedag.DomainAttention(10)
    clients = [fedag.ClientNet(hidden=8) for _ in range(k)]
    text = torch.nn.functional.normalize(torch.randn(10, dim, generator=g), dim=1)
    syn = [(torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=1), torch.rand(n, 64, generator=g),
            torch.randint(0, 10, (n,), generator=g)) for _ in range(k)]
    q = [torch.rand(n, generator=g) for _ in range(k)]
    return ads, att, clients, syn, q, text


def test_server_update_is_deterministic_and_trains_adapters_attention_and_clients():
    cfg = fedag.FedAGConfig(interact_epochs=2, batch_size=8, lr_server=1e-2)
    outs = []
    for _ in range(2):
        ads, att, clients, syn, q, text = _server_setup()
        before = [fedag.flat_params(m) for m in ads + [att] + clients]
        log = fedag.server_update(ads, att, clients, syn, q, text, 5.0, cfg, torch.Generator().manual_seed(4))
        after = [fedag.flat_params(m) for m in ads + [att] + clients]
        assert all(not np.array_equal(b, a) for b, a in zip(before, after))
        assert len(log["loss_kd"]) == 2 * 3  # epochs x ceil(20 / 8) zipped batches
        outs.append(after)
    assert all(np.array_equal(a, b) for a, b in zip(*outs))


def test_server_update_rejects_mismatched_domains():
    ads, att, clients, syn, q, text = _server_setup()
    with pytest.raises(ValueError, match="one entry per domain"):
        fedag.server_update(ads, att, clients[:2], syn, q, text, 5.0, fedag.FedAGConfig(), torch.Generator())


def test_silo_results_do_not_depend_on_what_else_it_serves():
    """Per-(run, silo, round) seeds: a request gives the same answer alone or among others, so the
    records cannot depend on how many workers or which process serve the rounds."""
    g = np.random.default_rng(2)
    x, y = g.random((30, 64)).astype(np.float32), g.integers(0, 10, 30)
    sx, sy = g.random((12, 64)).astype(np.float32), g.integers(0, 10, 12)
    text = np.eye(10, 5, dtype=np.float32)
    fa = {"kind": "fedag", "key": "a", "seed": 0, "server_params": None, "momentum": 0.9, "init_seed": 7,
          "epochs": 2, "lr": 1e-2, "batch_size": 8, "gen_seed": 11, "hidden": 8}
    ad = {"kind": "adapter", "key": "b", "seed": 0, "params": fedag.flat_params(fedag.AttentionAdapter(6)),
          "epochs": 1, "lr": 1e-2, "mu": 0.01, "batch_size": 8, "gen_seed": 5}
    one = Silo("d", _TinyEncoder(6), {0: (x, y, sx, sy)}, text, 5.0)
    two = Silo("d", _TinyEncoder(6), {0: (x, y, sx, sy)}, text, 5.0)
    alone = one.run_round([fa])[0]
    mixed = two.run_round([ad, fa])[1]
    assert np.array_equal(alone["params"], mixed["params"]) and np.array_equal(alone["quality"], mixed["quality"])
    assert alone["quality"].shape == (12,) and np.all(alone["quality"] >= 0)  # ReLU features: cosines >= 0
    # the next round merges the server's model into the silo's own: momentum * own + (1 - m) * server
    server = np.zeros_like(alone["params"])
    nxt = dict(fa, server_params=server, epochs=0)
    with pytest.raises(ValueError):
        one.run_round([dict(fa, kind="nope")])
    assert np.allclose(one.run_round([nxt])[0]["params"], 0.9 * alone["params"], atol=1e-6)


def test_flat_params_round_trip_and_size_check():
    ad = fedag.AttentionAdapter(5)
    v = np.arange(fedag.num_params(ad), dtype=np.float32)
    assert np.array_equal(fedag.flat_params(fedag.set_flat_params(ad, v)), v)
    assert fedag.num_params(ad) == 2 * (5 * 5 + 5)
    with pytest.raises(ValueError, match="vec"):
        fedag.set_flat_params(ad, v[:-1])


# ------------------------------------------------------------------------------------------- data

def test_domains_are_reproducible_and_sized():
    a = fd.build_federation(3, syn_per_domain=40)
    b = fd.build_federation(3, syn_per_domain=40)
    c = fd.build_federation(4, syn_per_domain=40)
    assert set(a.domains) == set(fd.DOMAINS)
    total = 0
    for name in fd.DOMAINS:
        da, db = a[name], b[name]
        assert np.array_equal(da.train_x, db.train_x) and np.array_equal(da.syn_x, db.syn_x)
        assert da.train_x.shape[1] == 64 and da.syn_x.shape == (40, 64)
        assert da.train_x.min() >= 0 and da.train_x.max() <= 1
        assert set(np.unique(da.train_y)) == set(range(10))
        total += len(da.train_y) + len(da.test_y)
    assert not np.array_equal(a["rotated"].train_x, c["rotated"].train_x)
    assert total == 1797 - int(np.ceil(0.15 * 1797)) or total == 1797 - int(0.15 * 1797)


def test_inverted_domain_is_exactly_one_minus_x_and_bad_syn_fraction():
    x = np.random.default_rng(0).random((5, 64)).astype(np.float32)
    assert np.allclose(fd.apply_domain("inverted", x, np.random.default_rng(0)), 1 - x)
    f = fd.build_federation(0, syn_per_domain=200, bad_fraction=0.3)
    frac = np.mean([f[d].syn_bad.mean() for d in fd.DOMAINS])
    assert 0.2 < frac < 0.4


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="name"):
        fd.apply_domain("sepia", np.zeros((1, 64)), np.random.default_rng(0))
    with pytest.raises(ValueError, match="pixels"):
        fd.apply_domain("inverted", np.zeros((1, 63)), np.random.default_rng(0))
    with pytest.raises(ValueError, match="seed"):
        fd.build_federation(-1)
    with pytest.raises(ValueError, match="syn_per_domain"):
        fd.build_federation(0, syn_per_domain=100000)
    with pytest.raises(ValueError, match="bad_fraction"):
        fd.build_federation(0, bad_fraction=1.5)
    with pytest.raises(ValueError, match="domains"):
        fd.build_federation(0, domains=("rotated", "rotated"))
    for kw, name in (({"rounds": 0}, "rounds"), ({"lam": -1.0}, "lam"), ({"momentum": 2.0}, "momentum"),
                     ({"lr_server": 0.0}, "lr_server"), ({"interact_epochs": -1}, "interact_epochs")):
        with pytest.raises(ValueError, match=name):
            fedag.FedAGConfig(**kw)
    with pytest.raises(ValueError, match="weights"):
        fedag.fedavg([np.zeros(2), np.ones(2)], weights=[-1, 1])
    with pytest.raises(ValueError, match="empty"):
        fedag.fedavg([])
    with pytest.raises(ValueError, match="shape"):
        fedag.momentum_merge(np.zeros(2), np.zeros(3), 0.5)
