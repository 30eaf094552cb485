"""DiffAdvMAP: unrestricted adversarial examples as MAP estimation under a diffusion prior.

"DiffAdvMAP: ... natural unrestricted adversarial examples via diffusion posterior sampling"
(ICML 2025). The adversarial example is drawn from the posterior
``p(x | x_ref, adversarial) ∝ p(x) p(x_ref | x) p(adv | x)``: the prior ``p(x)`` is the diffusion
model (``rayml.purify.diffusion``), the reconstruction constraint ``p(x_ref | x)`` keeps the
example close to the reference image, and the adversarial constraint ``p(adv | x)`` asks the
classifier's margin to reach a confidence ``kappa``. Following the authors' release (built on
CoPaint's optimise-``x_t`` DDIM sampler), ``attack``:

1. diffuses the reference image to level ``t*``;
2. at each DDIM level ``t`` (``steps`` levels from ``t*`` to 0) takes ``inner`` gradient steps on
   ``x_t`` of
   ``L(x_t) = c_adv (kappa - m(x0_hat))^2 + c_rec ||x_ref - x0_hat||^2 + c_reg ||x_t - x_t^0||^2``,
   where ``x0_hat = (x_t - sqrt(1 - ab_t) eps(x_t, t)) / sqrt(ab_t)`` (clipped to the image
   range), ``m = max_{j != y} Z_j - Z_y`` the classifier's margin (C&W), ``x_t^0`` the value at
   the start of the level; each step is clipped to ``|x_t - x_t^0| <= radius``;
3. moves to the next level with the deterministic DDIM update
   ``x_prev = sqrt(ab_prev) x0_hat + sqrt(1 - ab_prev) eps(x_t, t)``;
   the step size grows by ``lr_decay`` and ``c_reg`` by ``reg_decay`` per level.

Baselines: ``pgd_linf`` (PGD in an L-inf ball), ``guided`` (a diffusion-guided unrestricted
attack without the MAP posterior: reverse DDPM from ``t*`` with the classifier's adversarial
gradient added to every step's mean, as AdvDiff / DiffAttack-style guidance) and ``semantic``
(a global intensity / geometry attack: contrast, brightness, gamma, a small rotation and shift,
optimised by gradient; the grey-scale analogue of colour attacks).

Assumed (the paper's full text was not reachable; the authors' code was read): the margin
``m`` uses the logits; the loss is summed over the batch (each image's gradient is its own); the
radius 0.5 of the authors' non-ImageNet setting; ``t*``, the number of levels and the step sizes
are tuned for the 8x8 digits (the experiment tunes the step size on a grid); the final example is
the last ``x0_hat``.

Examples:
    >>> from rayml.purify import diffusion, classifier
    >>> from rayml.generative import diffadvmap as dam
    >>> score, clf = diffusion.load_score_model(), classifier.load_classifier()   # doctest: +SKIP
    >>> x, y = diffusion.digits_split()[2][:4], diffusion.digits_split()[3][:4]    # doctest: +SKIP
    >>> adv = dam.attack(score, clf, x, y, dam.MAPConfig(), seed=0)               # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rayml.purify import diffusion as D

__all__ = [
    "LabelOracle",
    "label_oracle",
    "MAPConfig",
    "GuidedConfig",
    "SemanticConfig",
    "margin",
    "attack",
    "guided_attack",
    "semantic_attack",
    "pgd_attack",
    "FeatureNet",
    "MLPClassifier",
    "train_feature_net",
    "train_mlp_classifier",
    "frechet_distance",
    "lpips_like",
]


def _check_images(x: torch.Tensor, y: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must be a tensor (N, C, H, W), got {getattr(x, 'shape', type(x))}")
    if not isinstance(y, torch.Tensor) or y.shape != (x.shape[0],):
        raise ValueError(f"y must be a tensor of {x.shape[0]} labels, got {getattr(y, 'shape', type(y))}")
    if float(x.min()) < 0 or float(x.max()) > 1:
        raise ValueError("x must hold images in [0, 1]")


@dataclass(frozen=True)
class MAPConfig:
    """DiffAdvMAP's settings (names after the authors' config: ``lr_xt``, ``coef_xt_reg``, ...)."""

    t_star: float = 300.0
    steps: int = 10
    inner: int = 5
    lr: float = 0.05
    lr_decay: float = 1.012
    coef_adv: float = 1.0
    coef_recon: float = 1.0
    coef_reg: float = 1e-3
    reg_decay: float = 1.01
    kappa: float = 3.0
    radius: float = 0.5

    def __post_init__(self):
        if not 0 < self.t_star <= D.T_MAX:
            raise ValueError(f"t_star must be in (0, {D.T_MAX:g}], got {self.t_star!r}")
        for name in ("steps", "inner"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("lr", "lr_decay", "reg_decay", "radius"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("coef_adv", "coef_recon", "coef_reg"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def gradient_evaluations(self) -> int:
        """Classifier gradients per image (the budget the baselines are matched to)."""
        return self.steps * self.inner


def margin(classifier: nn.Module, images: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """C&W margin ``max_{j != y} Z_j - Z_y`` per image (positive: misclassified)."""
    z = classifier(images)
    true = z.gather(1, y[:, None])[:, 0]
    other = z.masked_fill(F.one_hot(y, z.shape[1]).bool(), float("-inf")).amax(1)
    return other - true


def _x0_hat(score: D.ScoreNet, x: torch.Tensor, t: float, sched: D.VPSchedule):
    tt = torch.full((x.shape[0],), float(t))
    ab = sched.alpha_bar(tt)[:, None, None, None]
    eps = score(x, tt)
    return ((x - torch.sqrt(1 - ab) * eps) / torch.sqrt(ab)).clamp(-1.0, 1.0), eps


def attack(score: D.ScoreNet, classifier: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: MAPConfig = MAPConfig(),
           *, seed=0, schedule: D.VPSchedule = D.VPSchedule()) -> torch.Tensor:
    """DiffAdvMAP (the optimise-``x_t`` DDIM posterior sampler above); images in ``[0, 1]`` out.

    ``score`` is any noise predictor ``eps(x, t)`` on levels ``t`` in ``[0, T_MAX]`` with its
    ``schedule``; a user's own discrete DDPM (a ``diffusers`` UNet) plugs in through
    ``rayml.generative.diffusion_adapter.user_prior``."""
    _check_images(x, y)
    g = D._generator(seed)
    x_ref = D.to_model(x)
    xt = D.diffuse(x_ref, cfg.t_star, seed=g, schedule=schedule)
    levels = torch.linspace(cfg.t_star, 0.0, cfg.steps + 1).tolist()
    lr, reg = cfg.lr, cfg.coef_reg

    def loss_fn(x0h, xcur, x_orig):
        m = margin(classifier, D.to_image(x0h), y)
        per = (cfg.coef_adv * (cfg.kappa - m) ** 2 + cfg.coef_recon * ((x_ref - x0h) ** 2).flatten(1).sum(1)
               + reg * ((xcur - x_orig) ** 2).flatten(1).sum(1))
        return per.sum()

    x0h = x_ref
    for t, t_prev in zip(levels[:-1], levels[1:]):
        x_orig = xt.detach()
        cur = x_orig.clone()
        for _ in range(cfg.inner):
            cur.requires_grad_(True)
            with torch.enable_grad():
                x0h, _ = _x0_hat(score, cur, t, schedule)
                grad = torch.autograd.grad(loss_fn(x0h, cur, x_orig), cur)[0]
            grad = torch.nan_to_num(grad)
            cur = torch.max(torch.min(cur.detach() - lr * grad, x_orig + cfg.radius), x_orig - cfg.radius)
        with torch.no_grad():
            x0h, eps = _x0_hat(score, cur, t, schedule)
            ab_prev = schedule.alpha_bar(torch.tensor(float(t_prev)))
            xt = torch.sqrt(ab_prev) * x0h + torch.sqrt(1 - ab_prev) * eps
        lr *= cfg.lr_decay
        reg *= cfg.reg_decay
    return D.to_image(x0h.detach())


@dataclass(frozen=True)
class GuidedConfig:
    """The diffusion-guided baseline: reverse DDPM from ``t_star`` in ``steps`` steps, guidance ``scale``."""

    t_star: float = 300.0
    steps: int = 50
    scale: float = 2.0
    kappa: float = 3.0

    def __post_init__(self):
        if not 0 < self.t_star <= D.T_MAX:
            raise ValueError(f"t_star must be in (0, {D.T_MAX:g}], got {self.t_star!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {self.steps!r}")
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale!r}")


def guided_attack(score: D.ScoreNet, classifier: nn.Module, x: torch.Tensor, y: torch.Tensor,
                  cfg: GuidedConfig = GuidedConfig(), *, seed=0, schedule: D.VPSchedule = D.VPSchedule()) -> torch.Tensor:
    """Classifier-guided reverse diffusion (AdvDiff-style): each step's mean moves by
    ``-var * grad`` with ``grad = -scale * grad_x min(m(x0_hat), kappa)`` (ascending the margin)."""
    _check_images(x, y)
    g = D._generator(seed)
    xt = D.diffuse(D.to_model(x), cfg.t_star, seed=g, schedule=schedule)

    def guide(xa, a):
        with torch.enable_grad():
            xa = xa.detach().requires_grad_(True)
            ab = schedule.alpha_bar(a)[:, None, None, None]
            x0h = ((xa - torch.sqrt(1 - ab) * score(xa, a)) / torch.sqrt(ab)).clamp(-1, 1)
            m = margin(classifier, D.to_image(x0h), y).clamp(max=cfg.kappa).sum()
            grad = torch.autograd.grad(m, xa)[0]
        return -cfg.scale * torch.nan_to_num(grad) / torch.sqrt(1 - schedule.alpha_bar(a))[:, None, None, None]

    with torch.no_grad():
        out = D.reverse(score, xt, cfg.t_star, stride=cfg.t_star / cfg.steps, seed=g, guide=guide, schedule=schedule)
    return D.to_image(out)


@dataclass(frozen=True)
class SemanticConfig:
    """The semantic baseline: ``iterations`` Adam steps of size ``lr`` on global transform parameters."""

    iterations: int = 50
    lr: float = 0.05
    max_angle: float = 0.35
    max_shift: float = 0.15
    kappa: float = 3.0

    def __post_init__(self):
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {self.iterations!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _semantic(x, p, cfg):
    contrast = torch.exp(p[:, 0].tanh() * 0.7)[:, None, None, None]
    bright = (0.3 * p[:, 1].tanh())[:, None, None, None]
    gamma = torch.exp(p[:, 2].tanh() * 0.7)[:, None, None, None]
    angle = cfg.max_angle * p[:, 3].tanh()
    shift = cfg.max_shift * p[:, 4:6].tanh()
    cos, sin = torch.cos(angle), torch.sin(angle)
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    warped = F.grid_sample(x, grid, align_corners=False, padding_mode="zeros")
    return (contrast * warped.clamp(1e-6, 1) ** gamma + bright).clamp(0, 1)


def semantic_attack(classifier: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: SemanticConfig = SemanticConfig(),
                    *, seed=0) -> torch.Tensor:
    """A global intensity (contrast, brightness, gamma) and geometry (rotation, shift) attack."""
    _check_images(x, y)
    p = torch.zeros(x.shape[0], 6, requires_grad=True)
    opt = torch.optim.Adam([p], lr=cfg.lr)
    for _ in range(cfg.iterations):
        with torch.enable_grad():
            loss = -margin(classifier, _semantic(x, p, cfg), y).clamp(max=cfg.kappa).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return _semantic(x, p, cfg)


def pgd_attack(classifier: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: float, iterations: int,
               seed=0) -> torch.Tensor:
    """PGD in the L-inf ball of radius ``eps`` on the classifier's cross-entropy (Madry et al.)."""
    from rayml.purify import attacks as A

    _check_images(x, y)
    return A.pgd(A.classifier_grad(classifier), x, y, eps=eps, iterations=iterations, seed=seed)


# -------------------------------------------------------------------------- judges: a second classifier, features


class MLPClassifier(nn.Module):
    """A fully connected digits classifier (the transfer target: another architecture than the CNN)."""

    def __init__(self, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)


class FeatureNet(nn.Module):
    """A small conv net trained on the digits whose activations are the FID-like / LPIPS-like features."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 16, 64)
        self.out = nn.Linear(64, 10)

    def features(self, x):
        a1 = F.relu(self.c1(x))
        a2 = F.relu(self.c2(a1))
        h = F.relu(self.fc(a2.flatten(1)))
        return a1, a2, h

    def forward(self, x):
        return self.out(self.features(x)[2])


def _train(cls: type, seed: int, epochs: int) -> nn.Module:
    from rayml.runtime import cache_root

    # the initial weights come from ``seed`` too, not from the calling process's global RNG state
    # (which earlier work in that process moves), and the caller's RNG state is left as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls()
    path = cache_root() / "generative" / f"{cls.__name__.lower()}-s{seed}-e{epochs}-seeded-init.pt"
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
    else:
        # one thread: the trained weights must not depend on the caller's thread count (each node of a
        # cluster trains its own cached copy, and they must all be the same model)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        xtr, ytr, _, _ = D.digits_split()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            perm = torch.randperm(xtr.shape[0], generator=g)
            for i in range(0, xtr.shape[0], 64):
                idx = perm[i:i + 64]
                loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        torch.set_num_threads(threads)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{id(model)}")
        torch.save(model.state_dict(), tmp)
        tmp.replace(path)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def train_mlp_classifier(seed: int = 1, epochs: int = 30) -> MLPClassifier:
    """The transfer classifier, trained on the digits training split (cached under the rayml cache)."""
    return _train(MLPClassifier, seed, epochs)


def train_feature_net(seed: int = 2, epochs: int = 20) -> FeatureNet:
    """The feature network of the naturalness metrics (cached under the rayml cache)."""
    return _train(FeatureNet, seed, epochs)


def frechet_distance(a: torch.Tensor, b: torch.Tensor, ridge: float = 1e-6) -> float:
    """Fréchet distance between Gaussians fitted to feature sets ``a`` and ``b`` (the FID formula)."""
    import numpy as np
    from scipy import linalg

    a, b = a.double().numpy(), b.double().numpy()
    ma, mb = a.mean(0), b.mean(0)
    ca = np.cov(a, rowvar=False) + ridge * np.eye(a.shape[1])
    cb = np.cov(b, rowvar=False) + ridge * np.eye(b.shape[1])
    covmean = linalg.sqrtm(ca @ cb)
    covmean = covmean.real if np.iscomplexobj(covmean) else covmean
    return float(((ma - mb) ** 2).sum() + np.trace(ca + cb - 2 * covmean))


def lpips_like(net: FeatureNet, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-image LPIPS-like distance: channel-normalised conv activations, squared difference
    averaged over positions, summed over layers (Zhang et al. 2018, unit weights)."""
    with torch.no_grad():
        fa, fb = net.features(a)[:2], net.features(b)[:2]
        out = torch.zeros(a.shape[0])
        for x, y in zip(fa, fb):
            x = x / (x.norm(dim=1, keepdim=True) + 1e-10)
            y = y / (y.norm(dim=1, keepdim=True) + 1e-10)
            out = out + ((x - y) ** 2).sum(1).mean((1, 2))
    return out



class LabelOracle:
    """A label-preservation oracle: a k-nearest-neighbour vote over the digits training split, in
    pixel space (a human-label proxy: an example keeps its digit when its nearest training digits
    carry that label). Independent of the attacked CNN and of the transfer MLP (another model class,
    no gradients, nothing to attack), trained apart from both. Assumed (the project's check, issue 41;
    the paper reports no oracle).

    ``predict(x)`` takes images ``(N, 1, 8, 8)`` in ``[0, 1]`` and returns labels ``(N,)``.
    """

    def __init__(self, k: int = 5):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        xtr, ytr, _, _ = D.digits_split()
        self.k = k
        self.x_ = xtr.flatten(1).double()
        self.y_ = ytr.long()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The majority label of the ``k`` nearest training digits (ties: the smallest label)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != (1, 8, 8):
            raise ValueError(f"x must be images (N, 1, 8, 8), got {getattr(x, 'shape', type(x).__name__)}")
        d = torch.cdist(x.flatten(1).double().clamp(0, 1), self.x_)
        idx = d.topk(self.k, largest=False).indices
        votes = torch.nn.functional.one_hot(self.y_[idx], 10).sum(1)
        return votes.argmax(1)


def label_oracle(k: int = 5) -> LabelOracle:
    """The label-preservation oracle (``LabelOracle``) over the digits training split."""
    return LabelOracle(k)
