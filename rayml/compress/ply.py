"""Standard 3DGS ``.ply`` files: load a user's trained scene as ``Gaussians`` (and write one).

The layout is the one the 3DGS reference code (Kerbl et al., 2023) writes and HybridGS reads: a
binary little-endian PLY with one ``vertex`` element of float32 properties ``x y z``, ``nx ny nz``
(unused), ``f_dc_0..2`` (the SH DC term per colour channel), ``f_rest_0..3(K-1)-1`` (the other
``K - 1`` SH coefficients, channel-major: all of red's, then green's, then blue's), ``opacity`` (a
logit), ``scale_0..2`` (log-scales) and ``rot_0..3`` (a quaternion ``w, x, y, z``, unnormalised).
Properties are found by name, in any order; other properties are ignored.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from rayml.compress.splatting import Gaussians

__all__ = ["load_ply", "save_ply"]

_TYPES = {"float": "<f4", "float32": "<f4", "double": "<f8", "float64": "<f8", "uchar": "u1", "uint8": "u1",
          "char": "i1", "int8": "i1", "short": "<i2", "int16": "<i2", "ushort": "<u2", "uint16": "<u2",
          "int": "<i4", "int32": "<i4", "uint": "<u4", "uint32": "<u4"}


def _header(f, path):
    if f.readline().strip() != b"ply":
        raise ValueError(f"path {path!r} is not a PLY file (no 'ply' magic)")
    fmt, count, props, element = None, 0, [], None
    while True:
        line = f.readline()
        if not line:
            raise ValueError(f"path {path!r}: the PLY header has no end_header")
        words = line.decode("ascii", "replace").split()
        if not words or words[0] == "comment":
            continue
        if words[0] == "end_header":
            break
        if words[0] == "format":
            fmt = words[1]
        elif words[0] == "element":
            element = words[1]
            if element == "vertex":
                count = int(words[2])
            elif count == 0:
                raise ValueError(f"path {path!r}: the vertex element must come first")
        elif words[0] == "property" and element == "vertex":
            if words[1] == "list":
                raise ValueError(f"path {path!r}: list properties of vertices are not 3DGS data")
            if words[1] not in _TYPES:
                raise ValueError(f"path {path!r}: unknown property type {words[1]!r}")
            props.append((words[2], _TYPES[words[1]]))
    if fmt != "binary_little_endian":
        raise ValueError(f"path {path!r}: only binary_little_endian PLY is read (3DGS's format), got {fmt!r}")
    return count, np.dtype(props)


def load_ply(path: str | os.PathLike, *, dtype=torch.float32) -> Gaussians:
    """A 3DGS scene from a standard ``.ply`` (see the module docstring) as ``Gaussians``."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        count, dt = _header(f, path)
        data = np.frombuffer(f.read(count * dt.itemsize), dtype=dt, count=count)
    names = set(dt.names)
    need = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
            "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [n for n in need if n not in names]
    if missing:
        raise ValueError(f"path {path!r}: the vertex element lacks 3DGS properties {missing}")
    rest = sorted((n for n in names if n.startswith("f_rest_")), key=lambda n: int(n.rsplit("_", 1)[1]))
    k = len(rest) // 3 + 1
    if len(rest) % 3 or k not in (1, 4, 9, 16):
        raise ValueError(f"path {path!r}: {len(rest)} f_rest properties is not 3 (K - 1) for K in 1, 4, 9, 16")

    def cols(ns):
        return np.stack([data[n].astype(np.float64) for n in ns], 1) if ns else np.zeros((count, 0))

    sh = np.concatenate([cols(["f_dc_0", "f_dc_1", "f_dc_2"])[:, None, :],
                         cols(rest).reshape(count, 3, k - 1).transpose(0, 2, 1)], 1)
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=dtype)  # noqa: E731
    return Gaussians(t(cols(["x", "y", "z"])), t(cols(["scale_0", "scale_1", "scale_2"])),
                     t(cols(["rot_0", "rot_1", "rot_2", "rot_3"])), t(data["opacity"].astype(np.float64)), t(sh))


def save_ply(g: Gaussians, path: str | os.PathLike) -> None:
    """Write ``g`` as a standard 3DGS ``.ply`` (float32, normals zero)."""
    if not isinstance(g, Gaussians):
        raise TypeError(f"g must be Gaussians, got {type(g).__name__}")
    n, k = g.n, g.sh.shape[1]
    sh = g.sh.detach().cpu().numpy()
    names = (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
             + [f"f_rest_{i}" for i in range(3 * (k - 1))]
             + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])
    cols = np.concatenate([g.means.detach().cpu().numpy(), np.zeros((n, 3)), sh[:, 0, :],
                           sh[:, 1:, :].transpose(0, 2, 1).reshape(n, -1),
                           g.opacity_logits.detach().cpu().numpy()[:, None], g.log_scales.detach().cpu().numpy(),
                           g.quats.detach().cpu().numpy()], 1).astype("<f4")
    header = "ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % n
    header += "".join(f"property float {name}\n" for name in names) + "end_header\n"
    with open(os.fspath(path), "wb") as f:
        f.write(header.encode("ascii"))
        f.write(np.ascontiguousarray(cols).tobytes())
