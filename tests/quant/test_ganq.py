"""GANQ (rayml.quant.ganq), its baselines and QuantLinear: references, properties, bad input, Ray."""

import copy

import pytest
import torch
from torch import nn

from rayml.quant import ganq
from rayml.quant import baselines as qb
from rayml.quant.ganq import GANQConfig, objective, quantize_weight
from rayml.quant.linear import QuantLinear, load_quantized, replace_linears, save_quantized

D = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small float64 matmuls run far faster on one thread on a shared CPU."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _layer(m=24, n=40, p=300, seed=0, heavy=True):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(m, n, generator=g, dtype=D)
    if heavy:
        W = W * torch.exp(0.7 * torch.randn(m, n, generator=g, dtype=D))  # heavy tails
    mix = torch.eye(n, dtype=D) + 0.3 * torch.randn(n, n, generator=g, dtype=D)
    X = torch.randn(p, n, generator=g, dtype=D) @ mix
    return W, X.T @ X / p


def _rel(W, W_hat, H):
    return float(objective(W, W_hat.to(D), H).sum() / objective(W, torch.zeros_like(W), H).sum())


# ----------------------------------------------------------------------------------------------
# S-step and T-step against direct re-derivations


def _s_step_naive(W, T, L):
    """Eq. (20) literally: for j = n-1..0, idx = argmin_s |W_j + (1/L_jj) sum_{u>j} r_u L_uj - T_s|."""
    m, n = W.shape
    Q = torch.zeros(m, n, dtype=torch.long)
    r = torch.zeros(m, n, dtype=D)
    for i in range(m):
        for j in range(n - 1, -1, -1):
            c = sum(float(r[i, u] * L[u, j]) for u in range(j + 1, n))
            target = float(W[i, j]) + c / float(L[j, j])
            s = min(range(T.shape[1]), key=lambda s: (abs(target - float(T[i, s])), s))
            Q[i, j] = s
            r[i, j] = W[i, j] - T[i, s]
    return Q


@pytest.mark.parametrize("block_columns", [1, 3, 64])
def test_s_step_matches_equation_20(block_columns):
    W, H = _layer(m=5, n=13, seed=1)
    L, _ = ganq.cholesky_factor(H)
    T = ganq.initial_table(W, 3)
    assert torch.equal(ganq.s_step(W, T, L, block_columns), _s_step_naive(W, T, L))


def test_s_step_zeroes_each_term_greedily():
    """Each chosen entry minimises the j-th term of |(W - W~) L|^2 given the columns to its right."""
    W, H = _layer(m=4, n=9, seed=2)
    L, _ = ganq.cholesky_factor(H)
    T = ganq.initial_table(W, 2)
    Q = ganq.s_step(W, T, L)
    R = W - torch.gather(T, 1, Q)
    for j in range(9):
        for i in range(4):
            rest = float(R[i, j + 1:] @ L[j + 1:, j])
            terms = [((W[i, j] - T[i, s]) * L[j, j] + rest) ** 2 for s in range(4)]
            assert float(terms[int(Q[i, j])]) <= min(float(t) for t in terms) + 1e-12


def test_t_step_is_the_least_squares_table():
    """Eq. (5) against an independent per-row least squares min_T |(W_i - T S_i) L|^2."""
    W, H = _layer(m=6, n=30, seed=3)
    L = torch.linalg.cholesky(H)
    T0 = ganq.initial_table(W, 3)
    Q = ganq.s_step(W, T0, L)
    T = ganq.t_step(W, H, Q, T0)
    for i in range(6):
        S = torch.zeros(8, 30, dtype=D)
        S[Q[i], torch.arange(30)] = 1.0
        used = S.sum(1) > 0
        A = (S[used] @ L).T  # (n, used)
        want = torch.linalg.lstsq(A, (W[i] @ L)[:, None], driver="gelsd").solution[:, 0]
        torch.testing.assert_close(T[i, used], want, rtol=1e-7, atol=1e-9)
        assert torch.equal(T[i, ~used], T0[i, ~used])  # unused entries keep their value


def test_objective_never_increases():
    W, H = _layer(m=32, n=48, seed=4)
    res = quantize_weight(W, H, GANQConfig(bits=3, iterations=8))
    hist = res.history
    assert len(hist) == 8
    for h in hist:  # the T-step is the exact minimiser for the S-step's assignment
        assert h["objective_t"] <= h["objective_s"] * (1 + 1e-12)
    best = [min(h["objective_t"] for h in hist[:k + 1]) for k in range(8)]
    assert all(b2 <= b1 for b1, b2 in zip(best, best[1:]))
    assert res.objective == pytest.approx(best[-1], rel=1e-12)
    assert res.objective < hist[0]["objective_s"] < res.initial_objective
    recomputed = float(objective(W, res.quant.dequantize().to(D), H).sum())
    assert recomputed == pytest.approx(res.objective, rel=1e-5)  # float32 table storage
    # more iterations never give a worse returned iterate
    objs = [quantize_weight(W, H, GANQConfig(bits=3, iterations=k)).objective for k in (1, 3, 8)]
    assert objs[0] >= objs[1] >= objs[2]


@pytest.mark.parametrize("bits", [3, 4])
def test_recovers_the_table_of_a_lut_layer(bits):
    """W drawn from 2^N values per row: from a perturbed T^0 GANQ finds the exact table and
    indices (objective 0) where nearest rounding to T^0 does not."""
    g = torch.Generator().manual_seed(bits)
    m, n, levels = 12, 96, 2 ** bits
    u = torch.linspace(-1, 1, levels, dtype=D)
    base = torch.sign(u) * u.abs() ** 1.5  # a non-uniform table
    T = (torch.rand(m, 1, generator=g, dtype=D) + 0.5) * base + 0.1 * torch.randn(m, 1, generator=g, dtype=D)
    Q = torch.randint(0, levels, (m, n), generator=g)
    W = torch.gather(T, 1, Q)
    X = torch.randn(400, n, generator=g, dtype=D) @ (torch.eye(n, dtype=D) + 0.2 * torch.randn(n, n, generator=g, dtype=D))
    H = X.T @ X / 400
    gap = (T[:, 1:] - T[:, :-1]).min(dim=1).values[:, None]
    T0 = T + 0.3 * gap * (2 * torch.rand(m, levels, generator=g, dtype=D) - 1)
    res = quantize_weight(W, H, GANQConfig(bits=bits), table0=T0)
    assert res.initial_objective > 1e-3
    assert res.objective < 1e-12
    assert torch.equal(res.quant.indices.long(), Q)
    torch.testing.assert_close(res.quant.table.double(), T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bits", [3, 4])
def test_ganq_beats_baselines_on_layer_objective(bits):
    W, H = _layer(m=32, n=64, p=400, seed=5)
    ganq_rel = quantize_weight(W, H, GANQConfig(bits=bits)).objective / float(objective(W, 0 * W, H).sum())
    for W_hat in (qb.rtn_per_channel(W, bits).dequantize(), qb.gptq(W, H, bits).dequantize(),
                  qb.kmeans_per_row(W, bits).dequantize(), qb.rtn_grouped(W, bits, 16)):
        assert ganq_rel < _rel(W, W_hat, H)


# ----------------------------------------------------------------------------------------------
# Pieces: calibration, Cholesky, initial table, outliers


def test_collect_hessians_is_x_xt_over_tokens():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    batches = [torch.randn(7, 5), torch.randn(2, 6, 5)]
    Hs = ganq.collect_hessians(model, batches)
    X = torch.cat([batches[0], batches[1].reshape(-1, 5)]).double()
    torch.testing.assert_close(Hs["0"], X.T @ X / 19)
    with torch.no_grad():
        Z = torch.relu(model[0](X.float())).double()
    torch.testing.assert_close(Hs["2"], Z.T @ Z / 19, rtol=1e-5, atol=1e-6)


def test_cholesky_adds_lambda_only_when_needed():
    W, H = _layer(n=10)
    L, lam = ganq.cholesky_factor(H)
    assert lam == 0.0
    torch.testing.assert_close(L @ L.T, H)
    X = torch.randn(3, 10, dtype=D)
    Hs = X.T @ X  # rank 3: not positive definite (Remark 3.1)
    L, lam = ganq.cholesky_factor(Hs, damp=1e-4)
    assert lam > 0
    torch.testing.assert_close(L @ L.T, Hs + lam * torch.eye(10, dtype=D))


def test_initial_table_shapes_and_ranges():
    W, _ = _layer(m=5, n=50)
    for bits in range(2, 9):
        T = ganq.initial_table(W, bits)
        assert T.shape == (5, 2 ** bits)
        torch.testing.assert_close(T.min(1).values, W.min(1).values)
        torch.testing.assert_close(T.max(1).values, W.max(1).values)
    T4 = ganq.initial_table(W, 4)  # 3, 5, 5, 3 levels on the quarters: quarter ends appear twice
    lo, hi = W.min(1).values, W.max(1).values
    torch.testing.assert_close(T4[:, 2], lo + (hi - lo) / 4)
    torch.testing.assert_close(T4[:, 3], lo + (hi - lo) / 4)


def test_outliers_algorithm_2():
    W = torch.arange(20, dtype=D).reshape(1, 20) - 9.5
    mask, dense = ganq.split_outliers(W, 0.2)  # p = 0.9: upper cutoff sorted[18], lower sorted[2]
    assert mask[0].nonzero().flatten().tolist() == [0, 1, 2, 18, 19]
    assert float(dense[mask].abs().sum()) == 0.0
    Wl, H = _layer(m=8, n=40, seed=6)
    res = quantize_weight(Wl, H, GANQConfig(bits=3, outlier_ratio=0.1))
    q = res.quant
    assert q.outlier_index is not None and len(q.outlier_index) >= 8 * 4
    W_hat = q.dequantize().double()
    # the outlier positions hold quantized-zero + the exact full-precision value
    rows, cols = q.outlier_index[:, 0], q.outlier_index[:, 1]
    base = torch.gather(q.table, 1, q.indices.long()).double()
    torch.testing.assert_close(W_hat[rows, cols] - base[rows, cols], Wl[rows, cols].float().double())
    plain = quantize_weight(Wl, H, GANQConfig(bits=3))
    assert _rel(Wl, W_hat, H) < plain.objective / float(objective(Wl, 0 * Wl, H).sum())


# ----------------------------------------------------------------------------------------------
# Baselines


def test_gptq_with_diagonal_h_is_rtn_and_helps_with_correlated_h():
    W, H = _layer(m=10, n=30, seed=7)
    diag = torch.diag(torch.rand(30, dtype=D) + 0.5)
    assert torch.equal(qb.gptq(W, diag, 3).indices, qb.rtn_per_channel(W, 3).indices)
    assert _rel(W, qb.gptq(W, H, 3).dequantize(), H) < _rel(W, qb.rtn_per_channel(W, 3).dequantize(), H)


def test_rtn_grid_and_groups():
    W = torch.tensor([[-1.0, 0.0, 1.0, 2.0], [0.0, 0.1, 0.2, 0.3]])
    torch.testing.assert_close(qb.rtn_per_channel(W, 2).dequantize(), torch.tensor([[-1.0, 0.0, 1.0, 2.0],
                                                                                      [0.0, 0.1, 0.2, 0.3]]))
    Wg = torch.tensor([[0.0, 1.0, 0.0, 30.0]])  # grids include 0 (as in the GPTQ code)
    torch.testing.assert_close(qb.rtn_grouped(Wg, 2, 2), Wg, rtol=0, atol=1e-4)
    assert float((qb.rtn_per_channel(Wg, 2).dequantize() - Wg).abs().max()) > 0.5


def test_kmeans_recovers_clusters():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([-3.0, -1.0, 0.5, 4.0])
    W = centres[torch.randint(0, 4, (3, 60), generator=g)] + 0.01 * torch.randn(3, 60, generator=g)
    q = qb.kmeans_per_row(W, 2)
    assert float((q.dequantize() - W).abs().max()) < 0.05


def _kmeans_reference(W, bits, wt, iterations=50):
    """Lloyd's algorithm with a literal nearest-centre argmin (lowest index on ties)."""
    levels = 2 ** bits
    fr = (torch.arange(levels, dtype=D) + 0.5) / levels
    C = torch.quantile(W, fr, dim=1).T.contiguous()
    assign = None
    for _ in range(iterations):
        C = torch.sort(C, dim=1).values
        new = torch.argmin((W[:, :, None] - C[:, None, :]).abs(), dim=2)
        if assign is not None and torch.equal(new, assign):
            break
        assign = new
        for i in range(W.shape[0]):
            for k in range(levels):
                sel = assign[i] == k
                if sel.any():
                    C[i, k] = (wt[sel] * W[i, sel]).sum() / wt[sel].sum()
    return torch.gather(C, 1, assign)


@pytest.mark.parametrize("bits", [2, 3])
def test_kmeans_equals_a_literal_lloyd(bits):
    W, H = _layer(m=6, n=50, seed=12)
    wt = torch.diagonal(H)
    got = qb.kmeans_per_row(W, bits, weights=wt).dequantize().double()
    torch.testing.assert_close(got, _kmeans_reference(W, bits, wt + 1e-12 * float(wt.max())), rtol=0, atol=1e-6)


def test_equal_bits_group_size():
    # an fp16 scale and an N-bit zero per group; at most 16 * 2^N bits a row (the table's)
    assert qb.equal_bits_group_size(3, 576) == 96 and qb.equal_bits_group_size(4, 576) == 48
    for bits in (2, 3, 4, 5):
        for n in (7, 128, 384, 576, 1536):
            g = qb.equal_bits_group_size(bits, n)
            assert -(-n // g) * (16 + bits) <= 16 * 2 ** bits                   # within the table's bits
            assert g == 1 or -(-n // (g - 1)) * (16 + bits) > 16 * 2 ** bits    # and the smallest such
    with pytest.raises(ValueError, match="in_features"):
        qb.equal_bits_group_size(3, 0)


def test_gptq_grouped_reduces_to_gptq_and_to_grouped_rtn():
    W, H = _layer(m=8, n=24, seed=13)
    # one group spanning the row: the per-row grid is set from the untouched row, as in gptq()
    torch.testing.assert_close(qb.gptq_grouped(W, H, 3, 24).double(), qb.gptq(W, H, 3).dequantize().double())
    # diagonal H: no error is propagated, so each group is plain RTN on its own grid
    diag = torch.diag(torch.rand(24, dtype=D) + 0.5)
    torch.testing.assert_close(qb.gptq_grouped(W, diag, 3, 8), qb.rtn_grouped(W, 3, 8))
    # groups help on correlated H at the same bit width; the lazy batch width does not change the result
    assert _rel(W, qb.gptq_grouped(W, H, 3, 8), H) < _rel(W, qb.gptq(W, H, 3).dequantize(), H)
    torch.testing.assert_close(qb.gptq_grouped(W, H, 3, 8, block=8), qb.gptq_grouped(W, H, 3, 8, block=128))
    with pytest.raises(ValueError, match="group_size"):
        qb.gptq_grouped(W, H, 3, 0)


# ----------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("bits", [1, 9, 0, 3.0, True, "4"])
def test_bad_bits_rejected(bits):
    with pytest.raises(ValueError, match="bits"):
        GANQConfig(bits=bits)
    with pytest.raises(ValueError, match="bits"):
        qb.rtn_per_channel(torch.randn(2, 4), bits)


def test_bad_config_and_shapes_rejected():
    with pytest.raises(ValueError, match="iterations"):
        GANQConfig(iterations=0)
    with pytest.raises(ValueError, match="outlier_ratio"):
        GANQConfig(outlier_ratio=0.7)
    with pytest.raises(ValueError, match="row_block"):
        GANQConfig(row_block=0)
    W, H = _layer(m=4, n=6)
    with pytest.raises(ValueError, match="H must be"):
        quantize_weight(W, H[:5, :5])
    with pytest.raises(ValueError, match="W must be"):
        quantize_weight(W[0], H)
    with pytest.raises(ValueError, match="table0"):
        quantize_weight(W, H, GANQConfig(bits=3), table0=torch.zeros(4, 4))
    with pytest.raises(TypeError, match="config"):
        quantize_weight(W, H, {"bits": 3})


def test_no_calibration_data_rejected():
    model = nn.Sequential(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="batches"):
        ganq.collect_hessians(model, [])
    with pytest.raises(ValueError, match="nn.Linear"):
        ganq.collect_hessians(nn.Sequential(nn.ReLU()), [torch.randn(2, 3)])
    with pytest.raises(ValueError, match="hessians"):
        ganq.quantize_layers({"a": torch.randn(2, 3)}, {}, use_ray=False)


def test_non_linear_modules_rejected():
    model = nn.Sequential(nn.Linear(4, 4), nn.Conv1d(1, 1, 1))
    with pytest.raises(TypeError, match="nn.Linear"):
        ganq.linear_layers(model, ["1"])
    with pytest.raises(TypeError, match="nn.Linear"):
        ganq.collect_hessians(model, [torch.randn(2, 4)], names=["1"])
    with pytest.raises(KeyError, match="no module"):
        ganq.linear_layers(model, ["nope"])
    q = qb.rtn_per_channel(torch.randn(4, 4), 4)
    with pytest.raises(TypeError, match="nn.Linear"):
        replace_linears(model, {"1": q})
    with pytest.raises(TypeError, match="nn.Linear"):
        QuantLinear.from_linear(model[1], q)


# ----------------------------------------------------------------------------------------------
# QuantLinear and checkpoints


def _quant_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(13, 9), nn.GELU(), nn.Linear(9, 5, bias=False))
    X = torch.randn(64, 13)
    Hs = ganq.collect_hessians(model, [X])
    q0 = quantize_weight(model[0].weight, Hs["0"], GANQConfig(bits=3, iterations=3, outlier_ratio=0.1)).quant
    q2 = quantize_weight(model[2].weight, Hs["2"], GANQConfig(bits=4, iterations=3)).quant
    dense = nn.Sequential(nn.Linear(13, 9), nn.GELU(), nn.Linear(9, 5, bias=False))
    dense.load_state_dict(model.state_dict())
    with torch.no_grad():
        dense[0].weight.copy_(q0.dequantize())
        dense[2].weight.copy_(q2.dequantize())
    return replace_linears(model, {"0": q0, "2": q2}), dense, X


def test_quant_linear_matches_dequantized_dense_model():
    qmodel, dense, X = _quant_model()
    assert isinstance(qmodel[0], QuantLinear) and qmodel[0].outlier_index.shape[0] > 0
    torch.testing.assert_close(qmodel(X), dense(X), rtol=1e-5, atol=1e-5)


def test_save_and_load_quantized_checkpoint(tmp_path):
    qmodel, _, X = _quant_model()
    path = save_quantized(qmodel, tmp_path / "q.safetensors")
    fresh = nn.Sequential(nn.Linear(13, 9), nn.GELU(), nn.Linear(9, 5, bias=False))
    loaded = load_quantized(fresh, path)
    assert isinstance(loaded[2], QuantLinear) and loaded[2].bits == 4
    assert torch.equal(loaded(X), qmodel(X))
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ValueError, match="not a rayml quantized checkpoint"):
        load_quantized(fresh, tmp_path / "plain.safetensors")


# ----------------------------------------------------------------------------------------------
# Row blocks: serial == Ray


def test_row_blocks_serial_equals_whole_layer():
    W, H = _layer(m=20, n=24, seed=8)
    whole = quantize_weight(W, H, GANQConfig(bits=3, iterations=4))
    blocked = quantize_weight(W, H, GANQConfig(bits=3, iterations=4, row_block=7))
    assert ganq.row_blocks(20, 7) == [(0, 7), (7, 14), (14, 20)]
    assert (whole.quant.indices == blocked.quant.indices).float().mean() > 0.99
    assert blocked.objective == pytest.approx(whole.objective, rel=1e-6)


def test_ray_row_blocks_identical_to_serial(ray_session):
    W, H = _layer(m=30, n=24, seed=9)
    cfg = GANQConfig(bits=3, iterations=4, row_block=8)
    serial = quantize_weight(W, H, cfg)
    remote = ganq.quantize_weight_ray(W, H, cfg)
    assert torch.equal(serial.quant.indices, remote.quant.indices)
    assert torch.equal(serial.quant.table, remote.quant.table)
    assert serial.history == remote.history
    weights = {"a": W, "b": W[:10, :12]}
    hess = {"a": H, "b": H[:12, :12]}
    many_ray = ganq.quantize_layers(weights, hess, bits=(3, 4), config=cfg)
    many_local = ganq.quantize_layers(weights, hess, bits=(3, 4), config=cfg, use_ray=False)
    assert set(many_ray) == {("a", 3), ("a", 4), ("b", 3), ("b", 4)}
    for key in many_ray:
        assert torch.equal(many_ray[key].quant.indices, many_local[key].quant.indices)
        assert torch.equal(many_ray[key].quant.table, many_local[key].quant.table)
    assert torch.equal(many_ray[("a", 3)].quant.indices, serial.quant.indices)


def test_quantize_model_swaps_in_quant_linears():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 10), nn.Tanh(), nn.Linear(10, 4))
    ref = nn.Sequential(nn.Linear(12, 10), nn.Tanh(), nn.Linear(10, 4))
    ref.load_state_dict(model.state_dict())
    X = torch.randn(50, 12)
    out = ganq.quantize_model(model, [X], GANQConfig(bits=4, iterations=2), use_ray=False)
    assert set(out) == {"0", "2"} and all(isinstance(model[i], QuantLinear) for i in (0, 2))
    with torch.no_grad():
        ref[0].weight.copy_(out["0"].quant.dequantize())
        ref[2].weight.copy_(out["2"].quant.dequantize())
    torch.testing.assert_close(model(X), ref(X), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# The sequential (GPTQ / authors' code) calibration protocol


class _Block(nn.Module):
    """A toy block with the Llama names: attention-like and MLP-like parts."""

    def __init__(self, d=6, f=10):
        super().__init__()
        self.self_attn = nn.Module()
        for name, (i, o) in {"q_proj": (d, d), "k_proj": (d, d), "v_proj": (d, d), "o_proj": (d, d)}.items():
            setattr(self.self_attn, name, nn.Linear(i, o, bias=False))
        self.mlp = nn.Module()
        for name, (i, o) in {"gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}.items():
            setattr(self.mlp, name, nn.Linear(i, o, bias=False))

    def forward(self, x):
        a = self.self_attn
        h = torch.tanh(a.q_proj(x)) * a.k_proj(x) + a.v_proj(x)
        x = x + a.o_proj(h)
        m = self.mlp
        return x + m.down_proj(torch.sigmoid(m.gate_proj(x)) * m.up_proj(x))


def test_sequential_protocol_calibrates_each_group_on_the_quantized_prefix():
    torch.manual_seed(2)
    blocks = nn.ModuleList([_Block(), _Block()])
    ref = copy.deepcopy(blocks)
    x0 = torch.randn(3, 7, 6)
    calls = []

    def quantize(name, W, H):
        calls.append(name)
        return qb.rtn_per_channel(W, 2).dequantize()

    hs = ganq.quantize_sequential(blocks, x0, lambda b, x: b(x), quantize)
    order = [f"layers.{b}.{n}" for b in range(2) for g in ganq.LLAMA_GROUPS for n in g]
    assert calls == order and list(hs) == order
    # independent re-derivation: quantize ref step by step, H from a plain hooked forward each time
    x = x0
    for b, block in enumerate(ref):
        for group in ganq.LLAMA_GROUPS:
            Hs = ganq.collect_hessians(block, [x], names=list(group))
            for n in group:
                torch.testing.assert_close(hs[f"layers.{b}.{n}"], Hs[n], rtol=1e-10, atol=1e-12)
                mod = block.get_submodule(n)
                with torch.no_grad():
                    mod.weight.copy_(qb.rtn_per_channel(mod.weight, 2).dequantize())
        x = block(x)
    for p, q in zip(blocks.parameters(), ref.parameters()):
        assert torch.equal(p, q)


def test_sink_positions_leave_a_planted_sink_out_of_h_and_protect_the_other_tokens():
    """Issue 40: a massive activation at position 0 (an attention sink) takes ``H`` over, and GANQ then
    fits the sink's direction at the cost of every other token; ``skip_positions=1`` (calibration
    windows that start after the sink) leaves it out of ``H``, which then equals the non-sink tokens' ``H``."""
    torch.manual_seed(5)
    block = _Block()
    x0 = torch.randn(4, 9, 6)
    x0[:, 0] = 200.0 * torch.randn(6)  # the planted sink: the same huge vector at position 0 of every row
    plain = ganq.quantize_sequential([copy.deepcopy(block)], x0, lambda b, x: b(x), lambda n, W, H: W)
    kept = ganq.quantize_sequential([copy.deepcopy(block)], x0, lambda b, x: b(x), lambda n, W, H: W,
                                    skip_positions=1)
    rest = ganq.collect_hessians(block, [x0[:, 1:]], names=["self_attn.q_proj"])["self_attn.q_proj"]
    torch.testing.assert_close(kept["layers.0.self_attn.q_proj"], rest, rtol=1e-10, atol=1e-12)
    sink_share = float(torch.trace(plain["layers.0.self_attn.q_proj"]) * 9 * 4 / (x0 ** 2).sum())
    assert sink_share > 0.99 and torch.trace(plain["layers.0.self_attn.q_proj"]) > 100 * torch.trace(rest)
    errors = {}
    for skip in (0, 1):
        W = block.self_attn.q_proj.weight.detach().to(torch.float64)
        H = (kept if skip else plain)["layers.0.self_attn.q_proj"]
        W_hat = ganq.quantize_weight(W, H, ganq.GANQConfig(bits=2, iterations=3)).quant.dequantize()
        errors[skip] = float(ganq.objective(W, W_hat, rest).sum())  # error on the non-sink tokens
    assert errors[1] < errors[0]
    skipped = ganq.collect_hessians(block, [x0], names=["self_attn.q_proj"], skip_positions=1)["self_attn.q_proj"]
    torch.testing.assert_close(skipped, rest, rtol=1e-10, atol=1e-12)  # the held-out H leaves the sink out too
    with pytest.raises(ValueError, match="skip_positions"):
        ganq.quantize_sequential([block], x0, lambda b, x: b(x), lambda n, W, H: W, skip_positions=9)


def test_sequential_protocol_bad_input():
    blocks = [_Block()]
    ident = lambda n, W, H: W  # noqa: E731
    with pytest.raises(ValueError, match="inputs"):
        ganq.quantize_sequential(blocks, torch.empty(0, 6), lambda b, x: b(x), ident)
    with pytest.raises(TypeError, match="nn.Linear"):
        ganq.quantize_sequential([nn.Sequential(nn.Linear(6, 6), nn.ReLU())], torch.randn(2, 6),
                                 lambda b, x: b(x), ident, groups=[("1",)])
    with pytest.raises(ValueError, match="saw no input"):
        ganq.quantize_sequential(blocks, torch.randn(2, 6), lambda b, x: x, ident)


# ----------------------------------------------------------------------------------------------
# The experiment's data: held-out answer perplexity on the substrate model


@pytest.fixture(scope="module")
def base_lm():
    import rayml.llm

    return rayml.llm.pretrained("base")


def test_score_batches_match_items_scored_one_by_one(base_lm):
    """Per-text NLL of the padded batches equals each item scored alone; KL to itself is 0 and KL to
    another model equals a direct float64 computation."""
    from rayml.experiments import ganq as E
    from rayml.llm import data, tasks

    tok, model = base_lm.tokenizer, base_lm.model
    batches = E.heldout_batches(tok, 2, seed=5, batch_size=4)
    names = [t for b in batches for t in b["text"]]
    assert len(names) == len(set(names)) == 2 * len(tasks.TASKS)
    with torch.no_grad():
        logits = [model(b["ids"]) for b in batches]
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.layers[0].mlp.down_proj.weight.mul_(1.1)
        logits_b = [other(b["ids"]) for b in batches]
    got = E.score_batches(lambda i, b: logits[i], batches, lambda i, b: logits[i])
    got_b = E.score_batches(lambda i, b: logits_b[i], batches, lambda i, b: logits[i])
    for b in batches:
        for r, name in enumerate(b["text"]):
            keep = b["ids"][r] != tok.pad_id
            keep[0] = True
            ids = b["ids"][r][: int(keep.nonzero().max()) + 1]
            tgt = b["targets"][r][: len(ids)]
            m = tgt != data.IGNORE
            assert int(m.sum()) >= 2 and int(tgt[m][-1]) == tok.eos_id  # answer tokens and <eos>
            with torch.no_grad():
                logp = model(ids[None])[0].double().log_softmax(-1)[m]
                logq = other(ids[None])[0].double().log_softmax(-1)[m]
            nll = -float(logp[torch.arange(int(m.sum())), tgt[m]].sum())
            kl = float((logp.exp() * (logp - logq)).sum())
            assert got[name][2] == int(m.sum())
            assert got[name][0] == pytest.approx(nll, rel=1e-3, abs=1e-3)  # float32, batched
            assert got[name][1] == 0.0
            assert got_b[name][1] == pytest.approx(kl, rel=1e-2, abs=1e-6) and got_b[name][1] > 0


def test_text_batches_score_every_next_token():
    from rayml.experiments import ganq as E

    w = torch.arange(30).reshape(3, 10)
    bs = E.text_batches(w.numpy(), batch_size=2)
    assert [b["text"] for b in bs] == [["w0", "w1"], ["w2"]]
    assert torch.equal(bs[0]["targets"][:, :-1], w[:2, 1:]) and bool((bs[0]["targets"][:, -1] < 0).all())


def test_suffix_rebuild_reproduces_the_model(base_lm):
    """The task's blocks from ``start`` on, fed the fp32 prefix, give the full model's logits."""
    from rayml.experiments import ganq as E

    model = base_lm.model
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    entry = []
    h = model.layers[2].register_forward_pre_hook(lambda mod, args: entry.append(args[0]))
    with torch.no_grad():
        want = model(ids)
    h.remove()
    state = {k: v for k, v in model.state_dict().items()}
    blocks, norm, head = E._suffix_from({"model_config": model.config.to_dict(), "start": 2, "state": state})
    assert sorted(blocks) == [2, 3]
    x, rope = entry[0], {}
    with torch.no_grad():
        for b in sorted(blocks):
            x = E._run_block(blocks[b], x, rope, model.config.to_dict())
        got = norm(x) @ head.T
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_calibration_rows_are_task_text_and_seeded(base_lm):
    from rayml.experiments import ganq as E

    tok = base_lm.tokenizer
    w = base_lm.card["train_config"]["task_weights"]
    a = E.calibration_rows(tok, w, seed=3, rows=2, row_len=64)
    assert a.shape == (2, 64) and torch.equal(a, E.calibration_rows(tok, w, seed=3, rows=2, row_len=64))
    assert not torch.equal(a, E.calibration_rows(tok, w, seed=4, rows=2, row_len=64))
    assert not torch.equal(a, E.calibration_rows(tok, w, seed=3, rows=2, row_len=64, stream=E.LAYER_SEED))
    assert int(a[0, 0]) == tok.bos_id


def test_bits_per_weight():
    from rayml.experiments.ganq import bits_per_weight

    assert bits_per_weight("rtn", 4, 128) == 4 + 20 / 128
    assert bits_per_weight("gptq-grouped", 3, 576) == pytest.approx(3 + 6 * 19 / 576)
    assert bits_per_weight("ganq", 4, 128) == 4 + 16 * 16 / 128
    assert bits_per_weight("kmeans", 3, 4096) == pytest.approx(3.03125)
    for bits in (3, 4):  # the grouped baselines never get more bits than the table methods
        for n in (128, 384, 576, 1536):
            assert bits_per_weight("rtn-grouped", bits, n) <= bits_per_weight("ganq", bits, n)
            assert bits_per_weight("gptq-grouped", bits, n) > bits_per_weight("gptq", bits, n)


def test_percdamp_runs_both_steps_on_the_ridge_h():
    """percdamp = 0 is the paper's GANQ; > 0 equals Algorithm 1 on H + lambda I (objective undamped)."""
    W, H = _layer(m=10, n=20, seed=11)
    base = quantize_weight(W, H, GANQConfig(bits=3, iterations=3))
    same = quantize_weight(W, H, GANQConfig(bits=3, iterations=3, percdamp=0.0))
    assert torch.equal(base.quant.indices, same.quant.indices)
    cfg = GANQConfig(bits=3, iterations=3, percdamp=0.05)
    got = quantize_weight(W, H, cfg)
    Hd = H + 0.05 * torch.diagonal(H).mean() * torch.eye(20, dtype=D)
    L = torch.linalg.cholesky(Hd)
    T = ganq.initial_table(W, 3)
    best = None
    for _ in range(3):
        Q = ganq.s_step(W, T, L)
        T = ganq.t_step(W, Hd, Q, T)
        f = float(objective(W, torch.gather(T, 1, Q), H).sum())
        if best is None or f < best[0]:
            best = (f, Q)
    assert torch.equal(got.quant.indices.long(), best[1])
    assert got.objective == pytest.approx(best[0], rel=1e-12)
    with pytest.raises(ValueError, match="percdamp"):
        GANQConfig(percdamp=-0.1)
