"""rayml.architectures.moe_x and chess_data: the MoE layer as a wide sparse MLP, the sparsity-aware
router against a float64 re-derivation, the probe scores against brute force, the chess data
against a replay of its PGN, bad input and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayml.architectures import chess_data as cd
from rayml.architectures import moe_x as mx
from rayml.architectures import othello_data as od


def _layer(router, act, seed=0, d=12, E=5, D=7, k=2):
    torch.manual_seed(seed)
    layer = mx.MoELayer(d, E, D, k, act=act, router=router).double()
    with torch.no_grad():
        layer.b_enc.normal_(0, 0.3)
        layer.b_dec.normal_(0, 0.3)
    return layer


def _reference_moe(layer, x):
    """Token by token: gate logits from the paper's formula (float64, math.erf), top-k, softmax over
    the chosen, then the sum of the chosen experts' outputs."""
    W, B = layer.w_enc.detach().numpy(), layer.b_enc.detach().numpy()
    Wd, bd = layer.w_dec.detach().numpy(), layer.b_dec.detach().numpy()
    act = (lambda a: np.maximum(a, 0)) if layer.act == "relu" else (
        lambda a: 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2))))
    out = []
    for t in x.numpy():
        if layer.router == "sparsity":
            mu, sd = t.mean(), t.std()
            logits = np.array([-sum(0.5 * (1 + math.erf((mu * W[j, i].sum() + B[j, i]) / (sd * np.linalg.norm(W[j, i]))
                                                         / math.sqrt(2))) for i in range(W.shape[1]))
                               for j in range(W.shape[0])])
        else:
            logits = layer.w_gate.detach().numpy() @ t
        chosen = np.argsort(-logits, kind="stable")[: layer.k]
        g = np.exp(logits[chosen] - logits[chosen].max())
        g /= g.sum()
        y = bd.copy()
        for gj, j in zip(g, chosen):
            y += gj * (Wd[j] @ act(W[j] @ t + B[j]))
        out.append(y)
    return np.array(out)


@pytest.mark.parametrize("router,act", [("sparsity", "relu"), ("learned", "gelu"), ("sparsity", "gelu")])
def test_moe_layer_equals_its_sparse_mlp_form_and_a_token_loop(router, act):
    layer = _layer(router, act)
    x = torch.randn(40, 12, dtype=torch.float64) * 1.3 + 0.2
    with torch.no_grad():
        fwd = layer(x)
        wide = layer.sparse_mlp(x)
    ref = _reference_moe(layer, x)
    np.testing.assert_allclose(fwd.numpy(), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(wide.numpy(), fwd.numpy(), rtol=0, atol=1e-12)


def test_moe_x_wide_hidden_is_a_sparse_relu_of_a_gated_preactivation():
    layer = _layer("sparsity", "relu", seed=3)
    x = torch.randn(30, 12, dtype=torch.float64)
    with torch.no_grad():
        h = layer.wide_hidden(x).reshape(30, layer.E, layer.D)
        idx, w, _ = layer.route(x)
        pre = torch.einsum("nd,ehd->neh", x, layer.w_enc) + layer.b_enc
        gates = torch.zeros(30, layer.E, dtype=x.dtype).scatter(1, idx, w)
    # g ReLU(a) = ReLU(g a) for g >= 0: a wide ReLU MLP, zero outside the k chosen experts
    torch.testing.assert_close(h, torch.relu(gates[:, :, None] * pre))
    off = torch.ones(30, layer.E, dtype=torch.bool).scatter(1, idx, False)
    assert (h[off] == 0).all()
    assert int((h != 0).sum(-1).sum(-1).max()) <= layer.k * layer.D


def test_sparsity_gate_ranks_experts_by_their_expected_activity():
    """With many Gaussian-like coordinates the estimate tracks the measured active counts."""
    torch.manual_seed(0)
    E, D, d = 6, 64, 256
    w = torch.randn(E, D, d, dtype=torch.float64) * 0.1 + torch.linspace(-0.02, 0.02, E, dtype=torch.float64)[:, None, None]
    b = torch.zeros(E, D, dtype=torch.float64)
    x = torch.randn(200, d, dtype=torch.float64) + 0.5
    logits = mx.sparsity_gate_logits(x, w, b)
    measured = ((torch.einsum("nd,ehd->neh", x, w) + b) > 0).sum(-1).double()
    corr = np.corrcoef(-logits.reshape(-1).numpy(), measured.reshape(-1).numpy())[0, 1]
    assert corr > 0.9
    assert (logits <= 0).all() and (logits >= -D).all()


def _brute_coverage(af, yf, at, yt):
    scale = np.maximum(af.max(0), 1e-12)
    out = []
    for p in range(yf.shape[1]):
        best = (-1.0, 0, 0.0)
        for t in mx.THRESHOLDS:
            for u in range(af.shape[1]):
                z = af[:, u] > t * scale[u]
                tp = (z & yf[:, p]).sum()
                f1 = 2 * tp / (z.sum() + yf[:, p].sum() + 1e-12)
                if f1 > best[0]:
                    best = (f1, u, t)
        _, u, t = best
        z = at[:, u] > t * scale[u]
        out.append(2 * (z & yt[:, p]).sum() / (z.sum() + yt[:, p].sum() + 1e-12))
    return np.array(out)


def test_bsp_coverage_matches_brute_force_and_finds_a_planted_unit():
    rng = np.random.default_rng(0)
    y = rng.random((120, 4)) < 0.3
    acts = np.maximum(rng.normal(size=(120, 9)), 0)
    acts[:, 5] = y[:, 2] * (1 + rng.random(120))  # unit 5 fires exactly when property 2 holds
    cov = mx.bsp_coverage(acts[:60], y[:60], acts[60:], y[60:])
    np.testing.assert_allclose(cov, _brute_coverage(acts[:60], y[:60], acts[60:], y[60:]), atol=1e-9)
    assert cov[2] == pytest.approx(1.0)


def test_board_reconstruction_is_perfect_with_one_unit_per_property_and_poor_with_noise():
    rng = np.random.default_rng(1)
    y = rng.random((200, 6)) < 0.4
    perfect = y.astype(float) * (1 + rng.random((200, 6)))
    rec, _ = mx.board_reconstruction(perfect[:100], y[:100], perfect[100:], y[100:])
    assert rec.mean() == pytest.approx(1.0, abs=1e-9)
    noise = rng.random((200, 6))
    rec_noise, _ = mx.board_reconstruction(noise[:100], y[:100], noise[100:], y[100:])
    assert rec_noise.mean() < 0.3


def test_chess_probe_boards_match_a_replay_of_the_pgn():
    import chess

    data = cd.make_games(6, 200, seed=4)
    for g in range(6):
        text = cd.decode(data.ids[g])
        rows = np.flatnonzero(data.probe_game == g)
        board = chess.Board()
        tokens = text.lstrip(";").split()
        moves = [t.split(".", 1)[1] if "." in t else t for t in tokens]
        for n, r in enumerate(rows):
            assert text[data.probe_pos[r]] == "."
            expect = np.full(64, 12)
            for sq, piece in board.piece_map().items():
                expect[sq] = cd.PIECES.index(piece.symbol())
            np.testing.assert_array_equal(data.boards[r], expect)
            for mv in moves[2 * n: 2 * n + 2]:
                if 2 * n + 2 <= len(moves) or mv == moves[-1]:
                    try:
                        board.push_san(mv)
                    except ValueError:  # the last move may be cut by seq_len
                        break
    labels = data.bsp_labels()
    assert labels.shape == (data.boards.shape[0], 832) and (labels.sum(1) == 64).all()
    assert cd.bsp_names()[4 * 13 + 12] == "e1=." and cd.bsp_names()[4 * 13 + 5] == "e1=K"


def test_othello_boards_match_a_replay_and_moves_are_legal():
    data = od.make_games(30, seed=3)
    labels = data.bsp_labels()
    assert labels.shape == (data.boards.shape[0], 48) and (labels.sum(1) == 16).all()
    for g in range(30):
        board, player = od._start_board(), 1
        rows = np.flatnonzero(data.probe_game == g)
        for r in rows:
            tok = int(data.ids[g, data.probe_pos[r]])
            if tok == od.PASS:
                assert od.legal_moves(board, player) == []
            else:
                flips = od._flips(board, tok - 2, player)
                assert flips  # a legal move flips a disc
                board = od.play(board, tok - 2, player)
            player = 3 - player
            mine, theirs = board == player, board == 3 - player
            np.testing.assert_array_equal(data.boards[r] == 1, mine)
            np.testing.assert_array_equal(data.boards[r] == 2, theirs)
            assert data.move_number[r] == data.probe_pos[r]
        if len(rows) == int((data.ids[g] != od.PAD).sum()) - 1:  # every move probed: the game ended there
            assert od.legal_moves(board, player) == [] and od.legal_moves(board, 3 - player) == []
    assert od.bsp_names()[0] == "a1=empty" and od.bsp_names()[47] == "d4=theirs"


def test_move_number_units_are_one_hot():
    from rayml.experiments.moe_x import move_number_units

    u = move_number_units(np.array([1, 3, 3]), 4)
    assert u.shape == (3, 5) and (u.sum(1) == 1).all() and u[1, 3] == 1


def test_equal_active_parameters_and_sae_and_determinism():
    kw = dict(vocab_size=len(cd.ALPHABET) + 1, d_model=16, n_layers=1, n_heads=2, hidden=32, seq_len=24)
    params = {a: mx.active_mlp_params(mx.ArchConfig(arch=a, **kw)) for a in mx.ARCHS}
    assert abs(params["moe-x"]["active"] - params["dense-gelu"]["active"]) <= kw["hidden"]  # biases only
    assert params["switch"]["active"] - params["moe-x"]["active"] == 8 * 16  # the learned router
    data = cd.make_games(10, 24, seed=0)
    cfg = mx.ArchConfig(arch="moe-x", **kw)
    m1, l1 = mx.train_lm(cfg, data.ids, steps=3, batch=4, lr=1e-3, seed=5)
    m2, l2 = mx.train_lm(cfg, data.ids, steps=3, batch=4, lr=1e-3, seed=5)
    assert l1 == l2 and mx.val_loss(m1, data.ids) == mx.val_loss(m2, data.ids)
    h = mx.collect_hidden(m1, 0, data.ids)
    assert h.shape[1] == cfg.n_experts * cfg.expert_hidden
    assert ((h != 0).sum(1) <= cfg.top_k * cfg.expert_hidden).all()
    sae = mx.fit_sae(h, 16, l1=1e-3, steps=5, seed=0)
    assert sae.features(torch.as_tensor(h)).shape == (h.shape[0], 16)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="arch"):
        mx.ArchConfig(arch="dense-swish", vocab_size=10)
    with pytest.raises(ValueError, match="top_k"):
        mx.ArchConfig(arch="moe-x", vocab_size=10, n_experts=2, top_k=4, hidden=8)
    with pytest.raises(ValueError, match="hidden"):
        mx.ArchConfig(arch="moe-x", vocab_size=10, hidden=7, top_k=2)
    with pytest.raises(ValueError, match="router"):
        mx.MoELayer(4, 2, 2, 1, act="relu", router="hash")
    with pytest.raises(ValueError, match="n_games"):
        cd.make_games(0, 32, seed=0)
    with pytest.raises(ValueError, match="text"):
        cd.encode("1.e4 ?")
    with pytest.raises(ValueError, match="policy"):
        cd.play_game(np.random.default_rng(0), policy="stockfish")
    with pytest.raises(ValueError, match="acts"):
        mx.fit_sae(np.zeros(3), 4, l1=0.1, steps=1, seed=0)
    with pytest.raises(ValueError, match="n_games"):
        od.make_games(0, seed=0)
    with pytest.raises(ValueError, match="player"):
        od.legal_moves(od._start_board(), 3)
    with pytest.raises(ValueError, match="not a legal move"):
        od.play(od._start_board(), 0, 1)
