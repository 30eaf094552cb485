"""Staggered-grid equivariant layers and constrained surrogates: the group convolution against a
loop-by-loop definition, exact equivariance of every layer and of whole models (u / v permuted
with their signs), the failures that must happen (p4 under reflections, p1 under rotations),
conservation to float precision, parameter matching, training, scores and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from rayml.pde import staggered as st
from rayml.pde.staggered_layers import (
    GroupConv2d,
    StaggeredInput,
    StaggeredOutput,
    StreamFunctionOutput,
    act_diagonal,
    act_direction,
    act_spatial,
    compose,
    element_index,
    group_elements,
    inverse,
    transform_regular,
    transform_state,
)

D4 = group_elements("p4m")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny convolutions: one thread is fastest, and the shared CI machine has two cores
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _state(n=8, boundary="periodic", seed=0, batch=2):
    x = torch.randn(batch, 3, n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    if boundary == "closed":
        x[:, 1, :, -1] = 0.0
        x[:, 2, -1, :] = 0.0
    return x


def test_d4_multiplication_matches_2x2_matrices_and_acts_on_arrays_as_a_homomorphism():
    rot, ref = np.array([[0, -1], [1, 0]]), np.diag([1, -1])

    def mat(g):
        return np.linalg.matrix_power(rot, g[0]) @ np.linalg.matrix_power(ref, g[1])

    a = torch.randn(5, 5, dtype=torch.float64)
    unit = {0: (1, 0), 1: (0, 1), 2: (-1, 0), 3: (0, -1)}
    for g in D4:
        assert np.array_equal(mat(inverse(g)), np.linalg.inv(mat(g)).round().astype(int))
        for d in range(4):
            assert tuple(mat(g) @ np.array(unit[d])) == unit[act_direction(g, d)]
        for h in D4:
            assert np.array_equal(mat(compose(g, h)), mat(g) @ mat(h))
            assert torch.equal(act_spatial(act_spatial(a, h), g), act_spatial(a, compose(g, h)))


def _loop_group_conv(conv: GroupConv2d, x: torch.Tensor) -> torch.Tensor:
    """out_h(p) = sum_{c,g,q} W[c, h^-1 g](h^-1 q) x_g(p + q), circular, by explicit loops."""
    rot, ref = np.array([[0, -1], [1, 0]]), np.diag([1, -1])
    W, elems = conv.weight.detach(), conv.elems
    n, k = x.shape[-1], conv.kernel
    r = k // 2
    out = torch.zeros(x.shape[0], conv.out_fields, len(elems), n, n, dtype=x.dtype)
    for hi, h in enumerate(elems):
        hinv = inverse(h)
        m = np.linalg.matrix_power(rot, hinv[0]) @ np.linalg.matrix_power(ref, hinv[1])
        for gi, g in enumerate(elems):
            src = element_index(conv.group, compose(hinv, g))
            for qy in range(-r, r + 1):
                for qx in range(-r, r + 1):
                    wx, wy = m @ np.array([qx, qy])
                    w = W[:, :, src, wy + r, wx + r]                          # (Co, Ci)
                    shifted = torch.roll(x[:, :, gi], shifts=(-qy, -qx), dims=(-2, -1))  # x(p + q)
                    out[:, :, hi] += torch.einsum("oc,bcyx->boyx", w, shifted)
    return out + conv.bias.detach().view(1, -1, 1, 1, 1)


@pytest.mark.parametrize("group", ["p4", "p4m"])
def test_weight_shared_group_conv_equals_its_loop_definition(group):
    torch.manual_seed(0)
    conv = GroupConv2d(2, 3, group, kernel=3, boundary="periodic").double()
    with torch.no_grad():
        conv.bias.normal_()
    x = torch.randn(2, 2, len(conv.elems), 5, 5, dtype=torch.float64)
    assert torch.allclose(conv(x), _loop_group_conv(conv, x), atol=1e-12)


@pytest.mark.parametrize("group", ["p4", "p4m"])
@pytest.mark.parametrize("boundary", ["periodic", "closed"])
def test_group_conv_is_exactly_equivariant(group, boundary):
    torch.manual_seed(1)
    conv = GroupConv2d(2, 3, group, kernel=5, boundary=boundary).double()
    x = torch.randn(2, 2, len(conv.elems), 6, 6, dtype=torch.float64)
    for t in range(len(conv.elems)):
        assert torch.allclose(conv(transform_regular(x, group, t)), transform_regular(conv(x), group, t), atol=1e-12)


@pytest.mark.parametrize("group", ["p4", "p4m"])
@pytest.mark.parametrize("boundary", ["periodic", "closed"])
def test_input_and_output_layers_intertwine_the_staggered_action_and_the_regular_one(group, boundary):
    inp, out = StaggeredInput(group, boundary).double(), StaggeredOutput(group, boundary).double()
    x = _state(6, boundary)
    y = torch.randn(2, 2, len(group_elements(group)), 6, 6, dtype=torch.float64)
    for t, g in enumerate(group_elements(group)):
        assert torch.allclose(inp(transform_state(x, g, boundary)), transform_regular(inp(x), group, t), atol=1e-12)
        assert torch.allclose(out(transform_regular(y, group, t)), transform_state(out(y), g, boundary), atol=1e-12)


@pytest.mark.parametrize("group", ["p4", "p4m"])
def test_stream_function_output_is_equivariant_as_a_pseudo_scalar_and_divergence_free(group):
    out = StreamFunctionOutput(group).double()
    y = torch.randn(2, 1, len(group_elements(group)), 6, 6, dtype=torch.float64)
    fy = out(y)
    div = (fy[:, 1] - torch.roll(fy[:, 1], 1, -1)) + (fy[:, 2] - torch.roll(fy[:, 2], 1, -2))
    assert div.abs().max() < 1e-13 and fy[:, 1:].sum(dim=(-1, -2)).abs().max() < 1e-12
    assert torch.all(fy[:, 0] == 0)
    for t, g in enumerate(group_elements(group)):
        assert torch.allclose(out(transform_regular(y, group, t)), transform_state(fy, g, "periodic"), atol=1e-12)
    # corners: NE -> NW under r, NE -> SE under m
    assert act_diagonal((1, 0), 0) == 1 and act_diagonal((0, 1), 0) == 3 and act_diagonal((1, 1), 0) == 0


def test_stream_function_layer_without_the_reflection_sign_is_not_equivariant():
    # psi is a pseudo-scalar: dropping det(g) from the corner proposals breaks reflection equivariance
    out = StreamFunctionOutput("p4m").double()
    with torch.no_grad():
        out.gather.abs_()
    y = torch.randn(1, 1, 8, 6, 6, dtype=torch.float64)
    t = element_index("p4m", (0, 1))
    assert not torch.allclose(out(transform_regular(y, "p4m", t)), transform_state(out(y), (0, 1), "periodic"))


@pytest.mark.parametrize("group", ["p1", "p4", "p4m"])
def test_divfree_surrogates_keep_rollouts_divergence_free(group):
    m = _model(group, "divfree", width=4 if group == "p1" else 2)
    x0 = _state(seed=5).numpy() * 0.1
    x0[:, 0] = 0.0
    psi = np.random.default_rng(0).normal(size=(2, 8, 8))
    x0[:, 1] = -(psi - np.roll(psi, 1, axis=-2))
    x0[:, 2] = psi - np.roll(psi, 1, axis=-1)
    traj = st.rollout(m, x0, 10)
    div = (traj[..., 1, :, :] - np.roll(traj[..., 1, :, :], 1, -1)) + (traj[..., 2, :, :] - np.roll(traj[..., 2, :, :], 1, -2))
    assert np.abs(div).max() < 1e-12 * np.abs(traj[..., 1:, :, :]).max() and np.abs(traj[:, -1] - traj[:, 0]).max() > 1e-3
    if group == "p4m":
        assert st.equivariance_error(m, x0, "p4m") < 1e-12


def _model(group, constraint="both", boundary="periodic", width=2, n=8):
    torch.manual_seed(2)
    return st.build_model(st.SurrogateSpec(group=group, constraint=constraint, boundary=boundary,
                                           width=width, n=n)).double().eval()


@pytest.mark.parametrize("constraint", ["none", "mass", "momentum", "both"])
def test_p4m_surrogate_is_exactly_d4_equivariant_u_v_permuted_with_signs(constraint):
    m, x = _model("p4m", constraint), _state()
    with torch.no_grad():
        fx = m(x)
        for g in D4:
            assert torch.allclose(m(transform_state(x, g, "periodic")), transform_state(fx, g, "periodic"), atol=1e-12)
        # a 90 degree rotation really moves U into V (with the sign of the rotation): not a no-op
        r = transform_state(fx, (1, 0), "periodic")
        assert not torch.allclose(r, fx)


def test_closed_basin_surrogate_is_equivariant_and_keeps_walls_shut():
    m, x = _model("p4m", "mass", "closed"), _state(boundary="closed")
    with torch.no_grad():
        fx = m(x)
        assert torch.all(fx[:, 1, :, -1] == 0) and torch.all(fx[:, 2, -1, :] == 0)
        for g in D4:
            assert torch.allclose(m(transform_state(x, g, "closed")), transform_state(fx, g, "closed"), atol=1e-12)
    p1 = _model("p1", "mass", "closed", width=4)
    with torch.no_grad():
        f1 = p1(x)
    assert torch.all(f1[:, 1, :, -1] == 0) and torch.all(f1[:, 2, -1, :] == 0)


def test_equivariance_errors_that_must_appear_do_appear():
    x = _state().numpy()
    p4, p1, p4m = _model("p4", width=2), _model("p1", width=4), _model("p4m", width=2)
    assert st.equivariance_error(p4, x, "p4") < 1e-12
    assert st.equivariance_error(p4, x, "p4m") > 1e-3        # p4 is not reflection-equivariant
    assert st.equivariance_error(p1, x, "p4") > 1e-3         # p1 is not rotation-equivariant
    assert st.equivariance_error(p4m, x, "p4m") < 1e-12


@pytest.mark.parametrize("group", ["p1", "p4", "p4m"])
def test_constraints_conserve_mass_and_momentum_to_float_precision(group):
    x = _state(seed=3)
    width = 4 if group == "p1" else 2
    with torch.no_grad():
        sums = {c: _model(group, c, width=width)(x).sum(dim=(-1, -2)) for c in st.CONSTRAINTS}
    assert sums["mass"][:, 0].abs().max() < 1e-12 and sums["both"][:, 0].abs().max() < 1e-12
    assert sums["momentum"][:, 1:].abs().max() < 1e-12 and sums["both"][:, 1:].abs().max() < 1e-12
    assert sums["none"][:, 0].abs().max() > 1e-6 and sums["none"][:, 1:].abs().max() > 1e-6
    assert sums["mass"][:, 1:].abs().max() > 1e-6 and sums["momentum"][:, 0].abs().max() > 1e-6


def test_rollouts_conserve_mass_and_momentum_over_many_steps():
    m = _model("p4m", "both")
    x0 = _state(seed=4).numpy() * 0.1
    traj = st.rollout(m, x0, 20)
    scores = st.rollout_scores(traj, traj)
    assert scores["mass_drift"].max() < 1e-12 and scores["momentum_drift"].max() < 1e-12
    assert np.abs(traj[:, -1] - traj[:, 0]).max() > 1e-3


def test_apply_constraint_removes_exactly_the_domain_mean():
    dx = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    out = st.apply_constraint(dx, "mass")
    assert torch.allclose(out[:, 0], dx[:, 0] - dx[:, 0].mean(dim=(-1, -2), keepdim=True))
    assert torch.equal(out[:, 1:], dx[:, 1:])
    assert torch.equal(st.apply_constraint(dx, "none"), dx)


@pytest.mark.parametrize("base", [6, 12])
def test_matched_widths_give_parameter_counts_within_ten_percent(base):
    counts = {}
    for g in st.GROUPS:
        w = st.matched_width(g, base)
        counts[g] = st.count_parameters(st.build_model(st.SurrogateSpec(group=g, width=w, n=8)))
    assert all(abs(c / counts["p1"] - 1) < 0.1 for c in counts.values()), counts
    assert st.matched_width("p1", base) == base


def _toy_data(n=8, m=4, t=5, seed=0):
    from rayml.pde.shallow_water import SWEConfig, initial_state, simulate

    cfg = SWEConfig(n=n, dt=0.02, stride=3)
    rng = np.random.default_rng(seed)
    return np.stack([simulate(initial_state(cfg, rng), cfg, t) for _ in range(m)]).astype(np.float32)


def test_training_is_deterministic_reduces_the_loss_and_supports_the_alternatives():
    data = _toy_data()
    spec = st.SurrogateSpec(group="p4", constraint="both", width=2, n=8, steps=40, batch=4, lr=3e-3)
    a, b = st.train_surrogate(data, spec, 7), st.train_surrogate(data, spec, 7)
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert np.mean(a["losses"][-10:]) < np.mean(a["losses"][:5])
    for alt in (dict(augment=True), dict(pushforward=True)):
        out = st.train_surrogate(data, dataclasses.replace(spec, steps=3, **alt), 0)
        assert len(out["losses"]) == 3 and np.isfinite(out["losses"]).all()
    model = st.load_model(a)
    assert st.equivariance_error(model, data[:2, 0].astype(np.float64), "p4") < 1e-10


def test_rollout_scores_on_known_cases():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(2, 4, 3, 5, 5))
    s = st.rollout_scores(ref, ref)
    assert np.allclose(s["nrmse_eta"], 0) and np.allclose(s["corr_eta"], 1)
    still = np.repeat(ref[:, :1], 4, axis=1)
    s0 = st.rollout_scores(still, ref)
    assert np.allclose(s0["mass_drift"], 0) and np.allclose(s0["momentum_drift"], 0)
    assert np.allclose(s0["nrmse_eta"][:, 0], 0) and np.all(s0["nrmse_eta"][:, 1:] > 0)
    moved = still.copy()
    moved[:, 1:, 0] += 1.0                                      # add mass 25 per frame
    expected = 25.0 / np.abs(ref[:, 0, 0]).sum((-1, -2))
    assert np.allclose(st.rollout_scores(moved, ref)["mass_drift"][:, 1:], expected[:, None])
    s2 = st.rollout_scores(2 * ref, ref)
    assert np.allclose(s2["nrmse_eta"], 1) and np.allclose(s2["nrmse_vel"], 1) and np.allclose(s2["corr_eta"], 1)
    s3 = st.rollout_scores(-ref, ref)
    assert np.allclose(s3["corr_eta"], -1)
    with pytest.raises(ValueError, match="same shape"):
        st.rollout_scores(ref, ref[:1])


@pytest.mark.parametrize("kwargs,match", [
    (dict(group="p6"), "group"), (dict(constraint="energy"), "constraint"), (dict(boundary="open"), "boundary"),
    (dict(boundary="closed", constraint="momentum"), "momentum"), (dict(boundary="closed", constraint="divfree"), "momentum"), (dict(width=0), "width"), (dict(n=7), "n must"),
    (dict(kernel=2), "kernel"), (dict(lr=0.0), "lr"), (dict(steps=True), "steps"),
])
def test_bad_specs_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        st.SurrogateSpec(**kwargs)


def test_bad_layer_and_training_input_is_rejected():
    with pytest.raises(ValueError, match="kernel"):
        GroupConv2d(1, 1, "p4", kernel=4)
    with pytest.raises(ValueError, match="group"):
        GroupConv2d(1, 1, "p3")
    with pytest.raises(ValueError, match="fields"):
        GroupConv2d(2, 1, "p4")(torch.zeros(1, 1, 4, 4, 4))
    with pytest.raises(ValueError, match="trajectories must have shape"):
        st.train_surrogate(np.zeros((2, 5, 3, 4, 4)), st.SurrogateSpec(n=8), 0)
    with pytest.raises(ValueError, match="steps"):
        st.rollout(_model("p4"), _state().numpy(), -1)
    with pytest.raises(ValueError, match="base_width"):
        st.matched_width("p4", 0)
    with pytest.raises(ValueError, match="boundary"):
        transform_state(_state(), (1, 0), "open")
