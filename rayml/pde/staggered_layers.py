"""Equivariant layers for staggered (Arakawa C-) grids: the symmetry groups p4 / p4m acting on
scalar and face-vector fields, group convolutions with weight sharing, and the paper's input and
output layers.

Yunfei Huang, David S. Greenberg, "Geometric and Physical Constraints Synergistically Enhance
Neural PDE Surrogates", ICML 2025, Section 3 ("input and output layers that respect physical
laws and symmetries on the staggered grids").

Conventions: arrays are indexed ``[..., j, i]`` = ``[..., y, x]`` with ``y`` pointing north; a
state is ``(eta, U, V)`` with ``eta`` at cell centres, ``U`` on each cell's east face and ``V``
on its north face (see ``rayml.pde.shallow_water``). The point group of the square is
``D4 = {r^k m^s}``: ``r`` the rotation by +90 degrees about the domain's centre and ``m`` the
reflection ``y -> -y``; ``p4`` keeps the rotations (``s = 0``), ``p4m`` all eight, ``p1`` only
the identity (translations, which every convolution respects).

1. *Outward normals* (the input layer's first step): a face-vector field is rewritten per cell
   as the four outward normal fluxes ``D_d``, ``d`` = east, north, west, south
   (``D_2 = -U`` of the west face, ``D_3 = -V`` of the south face). A group element ``g``
   moves cell ``c`` to ``g c`` and direction ``d`` to ``g d``; no sign is left over, so the
   velocity's permutations and sign changes under rotations / reflections become a plain
   permutation of the four channels.
2. *Input layer*: scalars enter the regular representation as constants over the group, the
   outward normals as ``x_g = D_{g(east)}`` (the equivariant embedding of the direction
   permutation representation into the regular one).
3. *Group convolution* (Cohen & Welling 2016), regular -> regular, with weight sharing: one
   base filter ``W[c_out, c_in, g, :, :]``; the filter of output element ``h`` is
   ``W_h[.., g] = h . W[.., h^-1 g]`` (the kernel rotated / reflected by ``h``).
4. *Output layer*: the last regular field ``P_g`` gives per-cell directional fluxes
   ``F_d = sum_{g(east) = d} P_g``; the velocity on the face between cells ``a`` and ``b``
   (direction ``d`` from ``a`` to ``b``) is ``F_d(a) - F_{d+2}(b)`` (e.g.
   ``U_{i+1/2} = F_east(i) - F_west(i+1)``), and a scalar is the mean of ``P`` over the group.
   Closed boundaries: wall faces are set to zero.

Assumed (the full text's layer formulas were not reachable; secondary sources describe them as
above): the input layer is the fixed outward-normal embedding followed by a learned group
convolution (as expressive as a learned filter on the staggered positions); the output layer has
no extra weights beyond the last group convolution.

Examples:
    >>> import torch
    >>> from rayml.pde.staggered_layers import GroupConv2d, transform_regular, element_index
    >>> conv = GroupConv2d(2, 3, "p4m", kernel=3, boundary="periodic").double()
    >>> x = torch.randn(1, 2, 8, 6, 6, dtype=torch.float64)
    >>> g = element_index("p4m", (1, 1))
    >>> bool(torch.allclose(conv(transform_regular(x, "p4m", g)), transform_regular(conv(x), "p4m", g)))
    True
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GROUPS",
    "group_elements",
    "element_index",
    "compose",
    "inverse",
    "act_direction",
    "act_spatial",
    "transform_regular",
    "to_directions",
    "from_directions",
    "transform_state",
    "GroupConv2d",
    "StaggeredInput",
    "StaggeredOutput",
    "StreamFunctionOutput",
    "act_diagonal",
    "field_pool",
    "field_upsample",
]

GROUPS = ("p1", "p4", "p4m")
BOUNDARIES = ("periodic", "closed")


def _check_group(group: str) -> None:
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")


def group_elements(group: str) -> list[tuple[int, int]]:
    """The point-group elements ``(k, s)`` = ``r^k m^s`` of ``group`` in their channel order."""
    _check_group(group)
    if group == "p1":
        return [(0, 0)]
    if group == "p4":
        return [(k, 0) for k in range(4)]
    return [(k, s) for s in (0, 1) for k in range(4)]


def element_index(group: str, g: tuple[int, int]) -> int:
    """The channel of element ``g`` in ``group``'s regular representation."""
    elems = group_elements(group)
    g = (int(g[0]) % 4, int(g[1]) % 2)
    if g not in elems:
        raise ValueError(f"element {g} is not in {group}")
    return elems.index(g)


def compose(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """``a b`` in D4 (``m r = r^-1 m``)."""
    k1, s1 = a
    k2, s2 = b
    return ((k1 + (-1) ** s1 * k2) % 4, (s1 + s2) % 2)


def inverse(a: tuple[int, int]) -> tuple[int, int]:
    """``a^-1`` in D4 (reflections are involutions)."""
    k, s = a
    return ((-k) % 4, 0) if s == 0 else (k % 4, 1)


def act_direction(g: tuple[int, int], d: int) -> int:
    """Direction ``g d`` (0 east, 1 north, 2 west, 3 south)."""
    k, s = g
    return ((-1) ** s * d + k) % 4


def act_spatial(a: torch.Tensor, g: tuple[int, int]) -> torch.Tensor:
    """``(g . a)(p) = a(g^-1 p)`` for arrays ``(..., n, n)`` of cell values (or odd kernels)."""
    k, s = g
    if s:
        a = a.flip(-2)
    return torch.rot90(a, -k, dims=(-2, -1)) if k % 4 else a


def transform_regular(x: torch.Tensor, group: str, t: int) -> torch.Tensor:
    """Act with element number ``t`` on regular fields ``(B, C, |G|, n, n)``:
    ``(t . x)_g(p) = x_{t^-1 g}(t^-1 p)``."""
    elems = group_elements(group)
    te = elems[t]
    src = [element_index(group, compose(inverse(te), g)) for g in elems]
    return act_spatial(x[:, :, src], te)


def _west(a: torch.Tensor, boundary: str) -> torch.Tensor:
    """Value of the western neighbour (zero beyond a wall)."""
    if boundary == "periodic":
        return torch.roll(a, 1, dims=-1)
    return F.pad(a[..., :, :-1], (1, 0))


def _south(a: torch.Tensor, boundary: str) -> torch.Tensor:
    if boundary == "periodic":
        return torch.roll(a, 1, dims=-2)
    return F.pad(a[..., :-1, :], (0, 0, 1, 0))


def _east(a: torch.Tensor, boundary: str) -> torch.Tensor:
    if boundary == "periodic":
        return torch.roll(a, -1, dims=-1)
    return F.pad(a[..., :, 1:], (0, 1))


def _north(a: torch.Tensor, boundary: str) -> torch.Tensor:
    if boundary == "periodic":
        return torch.roll(a, -1, dims=-2)
    return F.pad(a[..., 1:, :], (0, 0, 0, 1))


def to_directions(U: torch.Tensor, V: torch.Tensor, boundary: str) -> torch.Tensor:
    """Face transports ``(..., n, n)`` to per-cell outward normals ``(..., 4, n, n)`` (E, N, W, S)."""
    return torch.stack([U, V, -_west(U, boundary), -_south(V, boundary)], dim=-3)


def from_directions(D: torch.Tensor, boundary: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Face transports from *consistent* outward normals (the east and north outflows)."""
    U, V = D[..., 0, :, :], D[..., 1, :, :]
    if boundary == "closed":
        U = U.clone()
        V = V.clone()
        U[..., :, -1] = 0.0
        V[..., -1, :] = 0.0
    return U, V


def transform_state(x: torch.Tensor, g: tuple[int, int], boundary: str) -> torch.Tensor:
    """Act with ``g`` in D4 on staggered states ``(..., 3, n, n)`` = ``(eta, U, V)``.

    ``eta`` moves as a scalar; the face transports move with the faces and rotate / reflect as a
    vector, which in outward-normal form is the permutation ``D'_d(p) = D_{g^-1 d}(g^-1 p)``.
    """
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    eta = act_spatial(x[..., 0, :, :], g)
    D = to_directions(x[..., 1, :, :], x[..., 2, :, :], boundary)
    gi = inverse(g)
    Dt = torch.stack([act_spatial(D[..., act_direction(gi, d), :, :], g) for d in range(4)], dim=-3)
    U, V = from_directions(Dt, boundary)
    return torch.stack([eta, U, V], dim=-3)


def _pad(x: torch.Tensor, p: int, boundary: str) -> torch.Tensor:
    if p == 0:
        return x
    return F.pad(x, (p, p, p, p), mode="circular" if boundary == "periodic" else "constant")


class GroupConv2d(nn.Module):
    """Regular -> regular group convolution on ``(B, C_in, |G|, n, n)``, weights shared over G.

    Args:
        in_fields, out_fields: numbers of regular fields (each has ``|G|`` channels).
        group: ``"p1"`` (a plain convolution), ``"p4"`` or ``"p4m"``.
        kernel: odd kernel size.
        boundary: ``"periodic"`` (circular padding) or ``"closed"`` (zero padding).
        bias: one bias per output field, shared over the group.
    """

    def __init__(self, in_fields: int, out_fields: int, group: str, *, kernel: int = 3,
                 boundary: str = "periodic", bias: bool = True):
        super().__init__()
        _check_group(group)
        if boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
        if not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"kernel must be an odd positive integer, got {kernel!r}")
        for name, v in (("in_fields", in_fields), ("out_fields", out_fields)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.group, self.boundary, self.kernel = group, boundary, kernel
        self.elems = group_elements(group)
        G = len(self.elems)
        self.in_fields, self.out_fields = in_fields, out_fields
        self.weight = nn.Parameter(torch.randn(out_fields, in_fields, G, kernel, kernel)
                                   * math.sqrt(2.0 / (in_fields * G * kernel * kernel)))
        self.bias = nn.Parameter(torch.zeros(out_fields)) if bias else None
        # perm[h, g] = index of h^-1 g
        perm = [[element_index(group, compose(inverse(h), g)) for g in self.elems] for h in self.elems]
        self.register_buffer("perm", torch.tensor(perm, dtype=torch.long), persistent=False)

    def full_weight(self) -> torch.Tensor:
        """The expanded filter bank ``(C_out |G|, C_in |G|, k, k)``."""
        G = len(self.elems)
        w = self.weight[:, :, self.perm]                       # (Co, Ci, h, g, k, k)
        w = torch.stack([act_spatial(w[:, :, i], h) for i, h in enumerate(self.elems)], dim=1)  # (Co, h, Ci, g, k, k)
        return w.reshape(self.out_fields * G, self.in_fields * G, self.kernel, self.kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, G, H, W = x.shape
        if C != self.in_fields or G != len(self.elems):
            raise ValueError(f"x must have {self.in_fields} fields of {len(self.elems)} channels, got {C} x {G}")
        y = F.conv2d(_pad(x.reshape(B, C * G, H, W), self.kernel // 2, self.boundary), self.full_weight())
        y = y.reshape(B, self.out_fields, G, H, W)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1, 1)
        return y


class StaggeredInput(nn.Module):
    """The input layer: a staggered state ``(B, 3, n, n)`` to regular fields ``(B, F, |G|, n, n)``.

    p4 / p4m: two fields, ``eta`` constant over the group and the outward normals embedded as
    ``x_g = D_{g(east)}``. p1: the three arrays as three plain channels.
    """

    def __init__(self, group: str, boundary: str):
        super().__init__()
        _check_group(group)
        self.group, self.boundary = group, boundary
        self.fields = 3 if group == "p1" else 2
        self.register_buffer("dir_of", torch.tensor([act_direction(g, 0) for g in group_elements(group)]),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.group == "p1":
            return x.unsqueeze(2)
        G = len(self.dir_of)
        eta = x[:, 0:1].unsqueeze(2).expand(-1, 1, G, -1, -1)
        D = to_directions(x[:, 1], x[:, 2], self.boundary)      # (B, 4, n, n)
        return torch.cat([eta, D[:, self.dir_of].unsqueeze(1)], dim=1)


class StaggeredOutput(nn.Module):
    """The output layer: regular fields ``(B, F, |G|, n, n)`` to a staggered increment ``(B, 3, n, n)``.

    p4 / p4m: ``eta`` = the group mean of field 0; face transports from field 1 by
    ``U = F_east(i) - F_west(i + 1)``, ``V = F_north(j) - F_south(j + 1)``. p1: three plain
    channels. Closed boundaries: the wall faces are zero.
    """

    def __init__(self, group: str, boundary: str):
        super().__init__()
        _check_group(group)
        self.group, self.boundary = group, boundary
        self.fields = 3 if group == "p1" else 2
        dirs = [act_direction(g, 0) for g in group_elements(group)]
        onehot = torch.zeros(4, len(dirs))
        for gi, d in enumerate(dirs):
            onehot[d, gi] = 1.0
        self.register_buffer("gather", onehot, persistent=False)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if self.group == "p1":
            out = y[:, :, 0]
            U, V = out[:, 1], out[:, 2]
            if self.boundary == "closed":
                U = torch.cat([U[..., :, :-1], torch.zeros_like(U[..., :, -1:])], dim=-1)
                V = torch.cat([V[..., :-1, :], torch.zeros_like(V[..., -1:, :])], dim=-2)
            return torch.stack([out[:, 0], U, V], dim=1)
        eta = y[:, 0].mean(dim=1)
        Fd = torch.einsum("dg,bgyx->bdyx", self.gather.to(y.dtype), y[:, 1])   # (B, 4, n, n)
        U = Fd[:, 0] - _east(Fd[:, 2], self.boundary)
        V = Fd[:, 1] - _north(Fd[:, 3], self.boundary)
        U, V = from_directions(torch.stack([U, V], dim=1), self.boundary)
        return torch.stack([eta, U, V], dim=1)


def act_diagonal(g: tuple[int, int], c: int) -> int:
    """Corner direction ``g c`` (0 NE, 1 NW, 2 SW, 3 SE): ``m`` maps NE to SE."""
    k, s = g
    return ((-1) ** s * c - s + k) % 4


class StreamFunctionOutput(nn.Module):
    """Divergence-free output layer: a regular field ``(B, 1, |G|, n, n)`` to a stream function at
    the cell corners and from it the face transports, ``U = -(psi_NE - psi_SE)``,
    ``V = psi_NE - psi_NW``, whose discrete divergence is zero to round-off (periodic grids).

    The stream function is a pseudo-scalar (it changes sign under reflections). Each cell proposes
    a value for each of its corners, ``C_c = sum_{g(NE) = c} det(g) P_g``, and the corner's value
    is the sum of the proposals of the four cells around it. p1: the single channel is ``psi`` at
    each cell's NE corner. The ``eta`` increment is zero.
    """

    def __init__(self, group: str, boundary: str = "periodic"):
        super().__init__()
        _check_group(group)
        if boundary != "periodic":
            raise ValueError("boundary: the stream-function output layer is implemented for periodic grids")
        self.group, self.boundary, self.fields = group, boundary, 1
        elems = group_elements(group)
        w = torch.zeros(4, len(elems))
        for gi, g in enumerate(elems):
            w[act_diagonal(g, 0), gi] = (-1.0) ** g[1]
        self.register_buffer("gather", w, persistent=False)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if self.group == "p1":
            psi = y[:, 0, 0]
        else:
            C = torch.einsum("cg,bgyx->bcyx", self.gather.to(y.dtype), y[:, 0])   # (B, 4, n, n)
            # NE corner of cell (j, i): NE of (j, i), NW of (j, i+1), SW of (j+1, i+1), SE of (j+1, i)
            psi = (C[:, 0] + _east(C[:, 1], "periodic") + _north(_east(C[:, 2], "periodic"), "periodic")
                   + _north(C[:, 3], "periodic"))
        U = -(psi - _south(psi, "periodic"))
        V = psi - _west(psi, "periodic")
        return torch.stack([torch.zeros_like(U), U, V], dim=1)


def field_pool(x: torch.Tensor) -> torch.Tensor:
    """2x2 average pooling of ``(B, C, |G|, n, n)`` (equivariant for even ``n``)."""
    B, C, G, H, W = x.shape
    return F.avg_pool2d(x.reshape(B, C * G, H, W), 2).reshape(B, C, G, H // 2, W // 2)


def field_upsample(x: torch.Tensor) -> torch.Tensor:
    """Nearest 2x upsampling of ``(B, C, |G|, n, n)``."""
    B, C, G, H, W = x.shape
    return F.interpolate(x.reshape(B, C * G, H, W), scale_factor=2, mode="nearest").reshape(B, C, G, 2 * H, 2 * W)
