"""Point-cloud coding of HybridGS data (Sec. 3.2.1) with Google Draco, and the raw-attribute codecs.

HybridGS codes its compact explicit data with a canonical point-cloud encoder: the paper uses
MPEG G-PCC (test model v23, lossless octree geometry and lossless RAHT attributes, "xyza" mode:
the geometry plus one attribute channel per sub point cloud, the geometry bits counted once).
G-PCC's reference software is not on PyPI; here the same layout goes through Google Draco
(``DracoPy``): the integer positions are the point geometry (``quantization_bits = BD_p`` over the
range ``2^BD_p - 1`` from the origin, which is exact), and every feature column is its own
one-component integer attribute of that point cloud, so the geometry is coded once and each
column gets its own prediction and entropy coding (Draco's kd-tree coder compresses at most 12
attribute components; wider data is split into sub point clouds of 12 columns, each carrying the
geometry, as the paper's G-PCC sub point clouds do). Draco's kd-tree point-cloud coder reorders
points; the decoder restores the canonical (x, y, z) lexicographic order, which is unique because
HybridGS's uniqueness step leaves one primitive per integer position.

The side information (bit depths, the robust quantiser's ``a, b``, the position transform and the
two latent decoders' weights in float32) travels in a small header and is counted in the size,
as in the paper's Table 3.

Baselines coding the raw 3DGS attributes with the same codec:
``encode_raw`` (positions at 16 bits, every other attribute as lossless float32) and
``encode_uniform`` (every attribute min-max quantised to ``bits``, the traditional
"quantise and code as a point cloud" scheme; ``uniform_at_rate`` picks the largest ``bits`` that
fits a byte budget).
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace

import numpy as np
import torch

from rayml.compress import splatting as sp
from rayml.compress.hybridgs import ATTRIBUTES, CompactGaussians

__all__ = [
    "MAGIC",
    "encode",
    "decode",
    "encode_raw",
    "decode_raw",
    "raw_matrix",
    "from_raw_matrix",
    "encode_uniform",
    "decode_uniform",
    "uniform_at_rate",
]

MAGIC = b"HGS1"
_RAW_MAGIC = b"HGR1"
_UNI_MAGIC = b"HGU1"


def _draco():
    try:
        import DracoPy
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("HybridGS coding needs DracoPy: pip install \"DracoPy>=2.0\"") from exc
    return DracoPy


def _check_level(compression_level):
    if isinstance(compression_level, bool) or not isinstance(compression_level, int) or not 0 <= compression_level <= 10:
        raise ValueError(f"compression_level must be an integer in [0, 10], got {compression_level!r}")


def _pack(header: dict, floats: np.ndarray, body: bytes, magic: bytes) -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    f = np.ascontiguousarray(floats, dtype="<f4").tobytes()
    return magic + struct.pack("<II", len(h), len(f)) + h + f + body


def _unpack(buf: bytes, magic: bytes):
    if not isinstance(buf, (bytes, bytearray)):
        raise TypeError(f"buf must be bytes, got {type(buf).__name__}")
    if bytes(buf[:4]) != magic or len(buf) < 12:
        raise ValueError(f"buf is not a bitstream of this codec (expected magic {magic!r})")
    lh, lf = struct.unpack("<II", buf[4:12])
    if 12 + lh + lf > len(buf):
        raise ValueError("buf is truncated")
    header = json.loads(bytes(buf[12:12 + lh]))
    floats = np.frombuffer(bytes(buf[12 + lh:12 + lh + lf]), dtype="<f4").astype(np.float32)
    return header, floats, bytes(buf[12 + lh + lf:])


def _attr_dtype(bits: int):
    return np.uint8 if bits <= 8 else np.uint16 if bits <= 16 else np.uint32


# Draco's kd-tree point-cloud coder takes at most 12 attribute components besides the positions;
# past that it falls back to a coder that barely compresses. Each column is its own one-component
# attribute (the paper's one-channel-per-sub-point-cloud layout), at most 12 to a Draco point cloud;
# wider data is split into several sub point clouds, each carrying (and paying for) the geometry.
MAX_COMPONENTS = 12


def _encode_columns(positions: np.ndarray, cols: np.ndarray, position_bits: int, bits: int,
                    compression_level: int) -> bytes:
    DracoPy = _draco()
    bodies = []
    for start in range(0, max(cols.shape[1], 1), MAX_COMPONENTS):
        chunk = cols[:, start:start + MAX_COMPONENTS]
        attrs = {uid: np.ascontiguousarray(chunk[:, uid:uid + 1]).astype(_attr_dtype(bits))
                 for uid in range(chunk.shape[1])}
        body = DracoPy.encode(positions.astype(np.float32), quantization_bits=position_bits,
                              quantization_range=float(2 ** position_bits - 1), quantization_origin=[0.0, 0.0, 0.0],
                              compression_level=compression_level, generic_attributes=attrs)
        bodies.append(struct.pack("<I", len(body)) + body)
    return b"".join(bodies)


def _decode_columns(body: bytes, n: int, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and columns in canonical (x, y, z) lexicographic order (positions are unique)."""
    DracoPy = _draco()
    out = np.empty((n, columns), np.int64)
    P, pos = None, 0
    for start in range(0, max(columns, 1), MAX_COMPONENTS):
        (length,) = struct.unpack("<I", body[pos:pos + 4])
        pc = DracoPy.decode(body[pos + 4:pos + 4 + length])
        pos += 4 + length
        pts = np.rint(np.asarray(pc.points, dtype=np.float64)).astype(np.int64).reshape(n, 3)
        order = np.lexsort(pts.T[::-1])
        P = pts[order]
        for uid in range(min(MAX_COMPONENTS, columns - start)):
            out[:, start + uid] = np.asarray(pc.get_attribute_by_unique_id(uid)["data"]).reshape(n, -1)[order, 0]
    return P, out


def _check_compact(data: CompactGaussians) -> None:
    if not isinstance(data, CompactGaussians):
        raise TypeError(f"data must be CompactGaussians, got {type(data).__name__}")
    n = data.n
    p = data.positions
    if p.ndim != 2 or p.shape[1] != 3 or not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"data.positions must be an (N, 3) integer array, got {p.dtype} {p.shape}")
    if n and (p.min() < 0 or p.max() > 2 ** data.position_bits - 1):
        raise ValueError(f"data.positions must lie in [0, 2^{data.position_bits} - 1]")
    if n and len(np.unique(p, axis=0)) != n:
        raise ValueError("data.positions must be unique (HybridGS's uniqueness step guarantees it)")
    for k in ATTRIBUTES:
        f = data.features.get(k)
        if f is None or f.ndim != 2 or f.shape[0] != n or not np.issubdtype(f.dtype, np.integer):
            raise ValueError(f"data.features[{k!r}] must be an (N, C) integer array")
        if n and (f.min() < 0 or f.max() > 2 ** data.bits[k] - 1):
            raise ValueError(f"data.features[{k!r}] must lie in [0, 2^{data.bits[k]} - 1]")


def encode(data: CompactGaussians, *, compression_level: int = 7) -> bytes:
    """HybridGS bitstream: header (side information) + one Draco point cloud (geometry once, one
    attribute per feature column). Lossless on the quantised data."""
    _check_compact(data)
    _check_level(compression_level)
    d = data.sorted()
    dims = {k: int(d.features[k].shape[1]) for k in ATTRIBUTES}
    cols = np.concatenate([d.features[k] for k in ATTRIBUTES], 1)
    body = _encode_columns(d.positions, cols, d.position_bits, max(d.bits.values()), compression_level) if d.n else b""
    dec_shapes = {k: [list(w.shape) for w in d.decoders[k]] for k in ("color", "rotation")}
    floats = np.concatenate([*(d.a[k] for k in ATTRIBUTES), *(d.b[k] for k in ATTRIBUTES),
                             d.center.astype(np.float32), np.array([d.scale], np.float32),
                             *(w.reshape(-1) for k in ("color", "rotation") for w in d.decoders[k])])
    header = {"n": d.n, "pb": d.position_bits, "bits": d.bits, "dims": dims, "sh": d.sh_degree, "dec": dec_shapes}
    return _pack(header, floats, body, MAGIC)


def decode(buf: bytes) -> CompactGaussians:
    """Inverse of ``encode`` (rows in canonical (x, y, z) order)."""
    header, floats, body = _unpack(buf, MAGIC)
    n, dims = int(header["n"]), header["dims"]
    pos = 0

    def take(k):
        nonlocal pos
        out = floats[pos:pos + k]
        pos += k
        return out

    a = {k: take(dims[k]) for k in ATTRIBUTES}
    b = {k: take(dims[k]) for k in ATTRIBUTES}
    center, scale = take(3).astype(np.float64), float(take(1)[0])
    decoders = {k: [take(int(np.prod(s))).reshape(s) for s in header["dec"][k]] for k in ("color", "rotation")}
    if n:
        P, cols = _decode_columns(body, n, sum(dims[k] for k in ATTRIBUTES))
        feats, start = {}, 0
        for k in ATTRIBUTES:
            feats[k] = cols[:, start:start + dims[k]]
            start += dims[k]
    else:
        P = np.zeros((0, 3), np.int64)
        feats = {k: np.zeros((0, dims[k]), np.int64) for k in ATTRIBUTES}
    return CompactGaussians(positions=P, features=feats, bits={k: int(v) for k, v in header["bits"].items()},
                            position_bits=int(header["pb"]), a=a, b=b, center=center, scale=scale,
                            decoders=decoders, sh_degree=int(header["sh"]))


def payload_bytes(data: CompactGaussians, *, compression_level: int = 7) -> int:
    """The bytes of ``encode(data)`` that code the primitives: the stream less the same stream
    with no primitives (the side information), the rate Eq. 8 predicts."""
    empty = replace(data, positions=data.positions[:0], features={k: v[:0] for k, v in data.features.items()})
    return len(encode(data, compression_level=compression_level)) - len(encode(empty,
                                                                             compression_level=compression_level))


def lossless_ratio(data: CompactGaussians, *, compression_level: int = 7) -> float:
    """The codec's lossless ratio ``L`` on ``data``: ``N P_bit / 8`` over ``payload_bytes`` (Eq. 8's
    ``L``; the paper takes G-PCC's 1.3, a per-scene estimate from the data is its named fix)."""
    if data.n == 0:
        raise ValueError("data must hold at least one primitive to estimate the lossless ratio")
    return float(data.raw_bytes() / payload_bytes(data, compression_level=compression_level))


# ----------------------------------------------------------------------------------------------
# Raw 3DGS attributes
# ----------------------------------------------------------------------------------------------

def raw_matrix(g: sp.Gaussians) -> np.ndarray:
    """The raw 3DGS attribute matrix ``(N, 3 + 3 + 4 + 1 + 3K)``: means, log-scales, quaternions,
    opacity logits, SH coefficients (float32, the layout of a 3DGS .ply)."""
    if not isinstance(g, sp.Gaussians):
        raise TypeError(f"g must be Gaussians, got {type(g).__name__}")
    with torch.no_grad():
        return np.concatenate([g.means.numpy(), g.log_scales.numpy(), g.quats.numpy(),
                               g.opacity_logits.numpy()[:, None], g.sh.reshape(g.n, -1).numpy()], 1).astype(np.float32)


def from_raw_matrix(m: np.ndarray) -> sp.Gaussians:
    """Inverse of ``raw_matrix``."""
    m = np.asarray(m, dtype=np.float32)
    K = (m.shape[1] - 11) // 3
    t = torch.as_tensor(m)
    return sp.Gaussians(t[:, 0:3].contiguous(), t[:, 3:6].contiguous(), t[:, 6:10].contiguous(), t[:, 10].contiguous(),
                        t[:, 11:].reshape(len(m), K, 3).contiguous())


def encode_raw(g: sp.Gaussians, *, position_bits: int = 16, compression_level: int = 7) -> bytes:
    """The raw-attribute baseline: Draco with positions quantised to ``position_bits`` and every
    other attribute stored as lossless float32."""
    _check_level(compression_level)
    m = raw_matrix(g)
    body = _draco().encode(m[:, :3], quantization_bits=position_bits, compression_level=compression_level,
                           generic_attributes={0: np.ascontiguousarray(m[:, 3:])})
    return _pack({"n": int(len(m)), "cols": int(m.shape[1])}, np.zeros(0, np.float32), body, _RAW_MAGIC)


def decode_raw(buf: bytes) -> sp.Gaussians:
    """Inverse of ``encode_raw`` (positions to within the 16-bit grid; row order is Draco's)."""
    header, _, body = _unpack(buf, _RAW_MAGIC)
    pc = _draco().decode(body)
    n, cols = int(header["n"]), int(header["cols"])
    pts = np.asarray(pc.points, dtype=np.float32).reshape(n, 3)
    rest = np.asarray(pc.get_attribute_by_unique_id(0)["data"], dtype=np.float32).reshape(n, cols - 3)
    return from_raw_matrix(np.concatenate([pts, rest], 1))


def encode_uniform(g: sp.Gaussians, bits: int, *, position_bits: int = 16, compression_level: int = 7) -> bytes:
    """Raw attributes min-max quantised per column to ``bits`` (positions to ``position_bits``),
    coded like HybridGS data (Draco geometry + one integer attribute per column)."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 16:
        raise ValueError(f"bits must be an integer in [1, 16], got {bits!r}")
    if isinstance(position_bits, bool) or not isinstance(position_bits, int) or not 2 <= position_bits <= 20:
        raise ValueError(f"position_bits must be an integer in [2, 20], got {position_bits!r}")
    _check_level(compression_level)
    m = raw_matrix(g).astype(np.float64)
    lo, hi = m.min(0), m.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    levels = np.array([2 ** position_bits - 1] * 3 + [2 ** bits - 1] * (m.shape[1] - 3), dtype=np.float64)
    q = np.rint((m - lo) / span * levels).astype(np.int64)
    # the codec's canonical order needs unique positions: merge duplicates (keep the first)
    _, first = np.unique(q[:, :3], axis=0, return_index=True)
    q = q[np.sort(first)]
    body = _encode_columns(q[:, :3], q[:, 3:], position_bits, bits, compression_level)
    header = {"n": int(len(q)), "cols": int(m.shape[1]), "bits": bits, "pb": position_bits}
    return _pack(header, np.concatenate([lo, span]).astype(np.float32), body, _UNI_MAGIC)


def decode_uniform(buf: bytes) -> sp.Gaussians:
    """Inverse of ``encode_uniform`` (dequantised to the level centres)."""
    header, floats, body = _unpack(buf, _UNI_MAGIC)
    n, cols, bits, pb = (int(header[k]) for k in ("n", "cols", "bits", "pb"))
    lo, span = floats[:cols].astype(np.float64), floats[cols:].astype(np.float64)
    P, rest = _decode_columns(body, n, cols - 3)
    q = np.concatenate([P, rest], 1).astype(np.float64)
    levels = np.array([2 ** pb - 1] * 3 + [2 ** bits - 1] * (cols - 3), dtype=np.float64)
    return from_raw_matrix(lo + q / levels * span)


def uniform_at_rate(g: sp.Gaussians, target_bytes: float, *, position_bits: int = 16,
                    compression_level: int = 7) -> tuple[int, bytes]:
    """The largest ``bits`` in 1..16 whose ``encode_uniform`` stream fits ``target_bytes``
    (1 if none does), and that stream."""
    if not target_bytes > 0:
        raise ValueError(f"target_bytes must be > 0, got {target_bytes!r}")
    best = None
    for bits in range(16, 0, -1):
        buf = encode_uniform(g, bits, position_bits=position_bits, compression_level=compression_level)
        best = (bits, buf)
        if len(buf) <= target_bytes:
            break
    return best
