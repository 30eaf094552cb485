"""A small differentiable 3D Gaussian splatting renderer in torch (CPU), for tiny scenes.

Kerbl, Kopanas, Leimkühler & Drettakis, "3D Gaussian Splatting for Real-Time Radiance Field
Rendering", SIGGRAPH 2023 -- the representation HybridGS (ICML 2025) compresses. Each Gaussian has
a mean ``mu``, a covariance ``Sigma = R S S^T R^T`` (scale ``S = diag(exp(log_scale))``, rotation
``R`` from a unit quaternion), an opacity ``sigmoid(o)`` and view-dependent colour from spherical
harmonics of degree ``<= 3``. Rendering (the 3DGS paper's Eq. 2-5):

- EWA projection: ``Sigma' = J W Sigma W^T J^T + 0.3 I`` (``W`` the world-to-camera rotation, ``J``
  the Jacobian of the perspective projection at the camera-space mean; ``0.3 I`` is 3DGS's
  low-pass dilation);
- per pixel ``alpha_i = min(0.99, sigmoid(o_i) exp(-d^T Sigma'^-1 d / 2))``, dropped below 1/255;
- front-to-back compositing over Gaussians sorted by depth,
  ``C = sum_i c_i alpha_i prod_{j<i} (1 - alpha_j) + T_final * background``.

``render`` evaluates every (Gaussian, pixel) pair densely -- no early termination -- in pixel tiles
of at most ``max_elements`` pairs, which is exact and differentiable, fast enough for a few thousand
Gaussians at 32-64 px, and bounded in memory for a real scene (``rayml.compress.ply`` loads one).
``render_reference`` is an independent float64 per-pixel loop of the same model, for tests.
``ssim`` / ``psnr`` are the image metrics (SSIM with an 11x11 Gaussian window, sigma 1.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "SH_C0",
    "Camera",
    "Gaussians",
    "look_at_camera",
    "orbit_cameras",
    "quat_to_rotmat",
    "covariance_3d",
    "sh_to_color",
    "render",
    "render_reference",
    "ssim",
    "psnr",
]

SH_C0 = 0.28209479177387814
_SH_C1 = 0.4886025119029199
_SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
_SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154, -0.4570457994644658,
          1.445305721320277, -0.5900435899266435)
ALPHA_MIN = 1.0 / 255.0
ALPHA_MAX = 0.99
NEAR = 0.2
DILATION = 0.3


@dataclass(frozen=True)
class Camera:
    """A pinhole camera: ``x_cam = R x_world + t`` (x right, y down, z forward), pixel centres at
    ``(u + 0.5, v + 0.5)``, ``u = fx x / z + cx``."""

    R: np.ndarray
    t: np.ndarray
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    @property
    def center(self) -> np.ndarray:
        """The camera's position in world coordinates."""
        return -self.R.T @ self.t


@dataclass
class Gaussians:
    """Rendering parameters of ``N`` Gaussians (torch tensors, float32 or float64).

    Attributes:
        means: ``(N, 3)`` world positions.
        log_scales: ``(N, 3)``.
        quats: ``(N, 4)`` as ``(w, x, y, z)``, normalised when used.
        opacity_logits: ``(N,)``.
        sh: ``(N, K, 3)`` spherical-harmonic coefficients, ``K in {1, 4, 9, 16}``.
    """

    means: torch.Tensor
    log_scales: torch.Tensor
    quats: torch.Tensor
    opacity_logits: torch.Tensor
    sh: torch.Tensor

    def __post_init__(self):
        n = self.means.shape[0] if self.means.ndim == 2 else -1
        shapes = {"means": (self.means, (n, 3)), "log_scales": (self.log_scales, (n, 3)),
                  "quats": (self.quats, (n, 4)), "opacity_logits": (self.opacity_logits, (n,))}
        for name, (x, want) in shapes.items():
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"Gaussians.{name} must be a torch.Tensor, got {type(x).__name__}")
            if tuple(x.shape) != want:
                raise ValueError(f"Gaussians.{name} must have shape {want}, got {tuple(x.shape)}")
        if not isinstance(self.sh, torch.Tensor) or self.sh.ndim != 3 or self.sh.shape[0] != n \
                or self.sh.shape[1] not in (1, 4, 9, 16) or self.sh.shape[2] != 3:
            raise ValueError(f"Gaussians.sh must have shape ({n}, K in {{1,4,9,16}}, 3), "
                             f"got {tuple(getattr(self.sh, 'shape', ()))}")

    @property
    def n(self) -> int:
        return int(self.means.shape[0])


def look_at_camera(eye, target=(0.0, 0.0, 0.0), *, size: int = 32, fov_deg: float = 45.0) -> Camera:
    """A square camera at ``eye`` looking at ``target`` (world up is +y)."""
    eye, target = np.asarray(eye, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if not isinstance(size, int) or size < 4:
        raise ValueError(f"size must be an integer >= 4, got {size!r}")
    if not 1.0 < fov_deg < 170.0:
        raise ValueError(f"fov_deg must be in (1, 170), got {fov_deg!r}")
    forward = target - eye
    if np.linalg.norm(forward) < 1e-9:
        raise ValueError("eye and target must differ")
    forward /= np.linalg.norm(forward)
    up = np.array([0.0, 1.0, 0.0])
    right = np.cross(forward, up)
    if np.linalg.norm(right) < 1e-6:
        right = np.array([1.0, 0.0, 0.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    R = np.stack([right, down, forward])
    f = 0.5 * size / math.tan(math.radians(fov_deg) / 2)
    return Camera(R=R, t=-R @ eye, fx=f, fy=f, cx=size / 2, cy=size / 2, width=size, height=size)


def orbit_cameras(n: int, *, radius: float = 2.4, size: int = 32, offset: float = 0.0,
                  elevations=(-0.35, 0.1, 0.5)) -> list[Camera]:
    """``n`` cameras on a sphere around the origin, azimuths evenly spaced (shifted by ``offset``
    of a step, so ``offset=0.5`` gives views held out between the training views), elevations
    (radians) cycling through ``elevations``."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    cams = []
    for i in range(n):
        az = 2 * math.pi * (i + offset) / n
        el = elevations[i % len(elevations)]
        eye = radius * np.array([math.cos(el) * math.cos(az), -math.sin(el), math.cos(el) * math.sin(az)])
        cams.append(look_at_camera(eye, size=size))
    return cams


def quat_to_rotmat(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``(N, 3, 3)`` of quaternions ``(N, 4)`` = ``(w, x, y, z)`` (normalised here)."""
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], dim=-1).reshape(q.shape[:-1] + (3, 3))


def covariance_3d(log_scales: torch.Tensor, quats: torch.Tensor) -> torch.Tensor:
    """``Sigma = R S S^T R^T`` (3DGS Eq. 6), ``(N, 3, 3)``."""
    M = quat_to_rotmat(quats) * torch.exp(log_scales)[:, None, :]
    return M @ M.transpose(1, 2)


def sh_to_color(sh: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
    """Colour ``max(0, SH(dir) + 0.5)`` of coefficients ``(N, K, 3)`` along unit ``dirs`` ``(N, 3)``
    (the 3DGS convention, degrees 0-3)."""
    K = sh.shape[1]
    out = SH_C0 * sh[:, 0]
    if K > 1:
        x, y, z = dirs[:, 0:1], dirs[:, 1:2], dirs[:, 2:3]
        out = out - _SH_C1 * y * sh[:, 1] + _SH_C1 * z * sh[:, 2] - _SH_C1 * x * sh[:, 3]
        if K > 4:
            xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
            out = (out + _SH_C2[0] * xy * sh[:, 4] + _SH_C2[1] * yz * sh[:, 5]
                   + _SH_C2[2] * (2 * zz - xx - yy) * sh[:, 6] + _SH_C2[3] * xz * sh[:, 7]
                   + _SH_C2[4] * (xx - yy) * sh[:, 8])
            if K > 9:
                out = (out + _SH_C3[0] * y * (3 * xx - yy) * sh[:, 9] + _SH_C3[1] * xy * z * sh[:, 10]
                       + _SH_C3[2] * y * (4 * zz - xx - yy) * sh[:, 11]
                       + _SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy) * sh[:, 12]
                       + _SH_C3[4] * x * (4 * zz - xx - yy) * sh[:, 13] + _SH_C3[5] * z * (xx - yy) * sh[:, 14]
                       + _SH_C3[6] * x * (xx - 3 * yy) * sh[:, 15])
    return torch.clamp_min(out + 0.5, 0.0)


def _check_camera(cam):
    if not isinstance(cam, Camera):
        raise TypeError(f"cam must be a Camera, got {type(cam).__name__}")


def _project(g: Gaussians, cam: Camera):
    """Screen means ``(N, 2)``, conics ``(N, 2, 2)``, depths ``(N,)``, colours ``(N, 3)``."""
    dt = g.means.dtype
    R = torch.as_tensor(cam.R, dtype=dt)
    t = torch.as_tensor(cam.t, dtype=dt)
    pc = g.means @ R.T + t
    z = pc[:, 2]
    zs = z.clamp_min(NEAR)
    u = cam.fx * pc[:, 0] / zs + cam.cx
    v = cam.fy * pc[:, 1] / zs + cam.cy
    zero = torch.zeros_like(zs)
    J = torch.stack([torch.stack([cam.fx / zs, zero, -cam.fx * pc[:, 0] / zs ** 2], -1),
                     torch.stack([zero, cam.fy / zs, -cam.fy * pc[:, 1] / zs ** 2], -1)], 1)
    T = J @ R
    cov2 = T @ covariance_3d(g.log_scales, g.quats) @ T.transpose(1, 2)
    cov2 = cov2 + DILATION * torch.eye(2, dtype=dt)
    det = cov2[:, 0, 0] * cov2[:, 1, 1] - cov2[:, 0, 1] * cov2[:, 1, 0]
    conic = torch.stack([torch.stack([cov2[:, 1, 1], -cov2[:, 0, 1]], -1),
                         torch.stack([-cov2[:, 1, 0], cov2[:, 0, 0]], -1)], 1) / det[:, None, None]
    dirs = g.means - torch.as_tensor(cam.center, dtype=dt)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return torch.stack([u, v], -1), conic, z, sh_to_color(g.sh, dirs)


def _composite(mean2, conic, z, color, opac, px, bg):
    """Front-to-back compositing of depth-sorted Gaussians at the pixels ``px`` ``(P, 2)``: the
    colours ``(P, 3)`` and the blending weights summed over these pixels ``(N,)``."""
    d = px[None, :, :] - mean2[:, None, :]  # (N, P, 2)
    power = -0.5 * (conic[:, None, 0, 0] * d[..., 0] ** 2 + conic[:, None, 1, 1] * d[..., 1] ** 2
                    + (conic[:, None, 0, 1] + conic[:, None, 1, 0]) * d[..., 0] * d[..., 1])
    alpha = torch.clamp_max(opac[:, None] * torch.exp(torch.clamp_max(power, 0.0)), ALPHA_MAX)
    keep = (power <= 0) & (alpha >= ALPHA_MIN) & (z[:, None] > NEAR)
    alpha = torch.where(keep, alpha, torch.zeros_like(alpha))
    one_minus = 1.0 - alpha
    trans = torch.cumprod(torch.cat([torch.ones_like(one_minus[:1]), one_minus[:-1]], 0), 0)  # exclusive
    w = alpha * trans  # (N, P)
    return w.T @ color + (trans[-1] * one_minus[-1])[:, None] * bg, w.sum(1)


def render(g: Gaussians, cam: Camera, background=(0.0, 0.0, 0.0), *, return_weights: bool = False,
           max_elements: int = 1 << 22):
    """Render ``g`` from ``cam``: an ``(H, W, 3)`` image (differentiable in every parameter).

    With ``return_weights`` also the per-Gaussian blending weights summed over pixels,
    ``sum_pixels alpha_i T_i`` (``(N,)``), which LightGaussian's global significance accumulates.
    ``max_elements`` bounds the (Gaussian, pixel) pairs evaluated at once: the pixels are taken in
    tiles of ``max_elements // N`` (at least one), so memory does not grow with Gaussians x pixels;
    with gradients on, each tile is recomputed in the backward pass (``torch.utils.checkpoint``).
    Tiling does not change the result (compositing is per pixel).
    """
    if not isinstance(g, Gaussians):
        raise TypeError(f"g must be Gaussians, got {type(g).__name__}")
    _check_camera(cam)
    if isinstance(max_elements, bool) or not isinstance(max_elements, int) or max_elements < 1:
        raise ValueError(f"max_elements must be a positive integer, got {max_elements!r}")
    dt = g.means.dtype
    bg = torch.as_tensor(background, dtype=dt)
    if bg.shape != (3,):
        raise ValueError(f"background must have 3 values, got shape {tuple(bg.shape)}")
    H, W = cam.height, cam.width
    if g.n == 0:
        img = bg.expand(H, W, 3).clone()
        return (img, torch.zeros(0, dtype=dt)) if return_weights else img
    mean2, conic, z, color = _project(g, cam)
    order = torch.argsort(z.detach())
    mean2, conic, z, color = mean2[order], conic[order], z[order], color[order]
    opac = torch.sigmoid(g.opacity_logits)[order]
    ys, xs = torch.meshgrid(torch.arange(H, dtype=dt) + 0.5, torch.arange(W, dtype=dt) + 0.5, indexing="ij")
    px = torch.stack([xs.reshape(-1), ys.reshape(-1)], -1)  # (P, 2)
    tile = max(1, max_elements // g.n)
    if tile >= len(px):
        img, wsum = _composite(mean2, conic, z, color, opac, px, bg)
    else:
        from torch.utils.checkpoint import checkpoint

        parts = []
        for i in range(0, len(px), tile):
            args = (mean2, conic, z, color, opac, px[i:i + tile], bg)
            parts.append(checkpoint(_composite, *args, use_reentrant=False) if torch.is_grad_enabled()
                         else _composite(*args))
        img = torch.cat([c for c, _ in parts], 0)
        wsum = torch.stack([w for _, w in parts], 0).sum(0)
    img = img.reshape(H, W, 3)
    if not return_weights:
        return img
    weights = torch.zeros(g.n, dtype=dt)
    weights[order] = wsum
    return img, weights


def render_reference(means, log_scales, quats, opacity_logits, sh, cam: Camera, background=(0.0, 0.0, 0.0)):
    """A brute-force float64 per-pixel renderer of the same model, written independently of
    ``render`` (numpy, explicit loops over pixels and depth-sorted Gaussians); for tests only."""
    _check_camera(cam)
    means, log_scales, quats = (np.asarray(a, dtype=np.float64) for a in (means, log_scales, quats))
    opacity_logits, sh = np.asarray(opacity_logits, dtype=np.float64), np.asarray(sh, dtype=np.float64)
    n = means.shape[0]
    Rw, tw = np.asarray(cam.R, dtype=np.float64), np.asarray(cam.t, dtype=np.float64)
    eye = -Rw.T @ tw
    splats = []
    for i in range(n):
        w_, x_, y_, z_ = quats[i] / np.linalg.norm(quats[i])
        Rq = np.array([[1 - 2 * (y_ ** 2 + z_ ** 2), 2 * (x_ * y_ - w_ * z_), 2 * (x_ * z_ + w_ * y_)],
                       [2 * (x_ * y_ + w_ * z_), 1 - 2 * (x_ ** 2 + z_ ** 2), 2 * (y_ * z_ - w_ * x_)],
                       [2 * (x_ * z_ - w_ * y_), 2 * (y_ * z_ + w_ * x_), 1 - 2 * (x_ ** 2 + y_ ** 2)]])
        S = np.diag(np.exp(log_scales[i]))
        cov = Rq @ S @ S @ Rq.T
        p = Rw @ means[i] + tw
        zc = max(p[2], NEAR)
        J = np.array([[cam.fx / zc, 0.0, -cam.fx * p[0] / zc ** 2], [0.0, cam.fy / zc, -cam.fy * p[1] / zc ** 2]])
        cov2 = J @ Rw @ cov @ Rw.T @ J.T + DILATION * np.eye(2)
        mean2 = np.array([cam.fx * p[0] / zc + cam.cx, cam.fy * p[1] / zc + cam.cy])
        dvec = (means[i] - eye) / np.linalg.norm(means[i] - eye)
        color = _sh_reference(sh[i], dvec)
        splats.append((p[2], mean2, np.linalg.inv(cov2), 1 / (1 + np.exp(-opacity_logits[i])), color))
    splats.sort(key=lambda s: s[0])
    img = np.zeros((cam.height, cam.width, 3))
    for v in range(cam.height):
        for u in range(cam.width):
            pix = np.array([u + 0.5, v + 0.5])
            T, c = 1.0, np.zeros(3)
            for depth, mean2, conic, op, color in splats:
                if depth <= NEAR:
                    continue
                d = pix - mean2
                power = -0.5 * d @ conic @ d
                if power > 0:
                    continue
                a = min(ALPHA_MAX, op * math.exp(power))
                if a < ALPHA_MIN:
                    continue
                c += color * a * T
                T *= 1 - a
            img[v, u] = c + T * np.asarray(background, dtype=np.float64)
    return img


def _sh_reference(coef: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Real SH basis (3DGS sign convention) evaluated term by term, float64."""
    x, y, z = d
    basis = [SH_C0, -_SH_C1 * y, _SH_C1 * z, -_SH_C1 * x,
             _SH_C2[0] * x * y, _SH_C2[1] * y * z, _SH_C2[2] * (2 * z * z - x * x - y * y), _SH_C2[3] * x * z,
             _SH_C2[4] * (x * x - y * y),
             _SH_C3[0] * y * (3 * x * x - y * y), _SH_C3[1] * x * y * z, _SH_C3[2] * y * (4 * z * z - x * x - y * y),
             _SH_C3[3] * z * (2 * z * z - 3 * x * x - 3 * y * y), _SH_C3[4] * x * (4 * z * z - x * x - y * y),
             _SH_C3[5] * z * (x * x - y * y), _SH_C3[6] * x * (x * x - 3 * y * y)]
    out = sum(basis[k] * coef[k] for k in range(coef.shape[0]))
    return np.maximum(out + 0.5, 0.0)


def _gauss_window(size: int = 11, sigma: float = 1.5, dtype=torch.float32) -> torch.Tensor:
    x = torch.arange(size, dtype=dtype) - (size - 1) / 2
    g = torch.exp(-x ** 2 / (2 * sigma ** 2))
    g = g / g.sum()
    return (g[:, None] * g[None, :])[None, None].expand(3, 1, size, size).contiguous()


def ssim(img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
    """SSIM of two ``(H, W, 3)`` images in [0, 1] (11x11 Gaussian window, sigma 1.5, zero padding,
    ``C1 = 0.01^2``, ``C2 = 0.03^2``: the window and constants of 3DGS's training loss)."""
    if img1.shape != img2.shape or img1.ndim != 3 or img1.shape[-1] != 3:
        raise ValueError(f"ssim needs two (H, W, 3) images of one shape, got {tuple(img1.shape)}, {tuple(img2.shape)}")
    a, b = img1.permute(2, 0, 1)[None], img2.permute(2, 0, 1)[None]
    win = _gauss_window(dtype=a.dtype)
    conv = lambda x: torch.nn.functional.conv2d(x, win, padding=5, groups=3)  # noqa: E731
    mu1, mu2 = conv(a), conv(b)
    s11, s22, s12 = conv(a * a) - mu1 ** 2, conv(b * b) - mu2 ** 2, conv(a * b) - mu1 * mu2
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    m = ((2 * mu1 * mu2 + c1) * (2 * s12 + c2)) / ((mu1 ** 2 + mu2 ** 2 + c1) * (s11 + s22 + c2))
    return m.mean()


def psnr(img1: torch.Tensor, img2: torch.Tensor) -> float:
    """PSNR in dB of images in [0, 1] (predictions clipped to [0, 1])."""
    mse = float(torch.mean((img1.clamp(0, 1) - img2) ** 2))
    return float("inf") if mse == 0 else -10.0 * math.log10(mse)
