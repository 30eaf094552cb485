"""A small CNN classifier for scikit-learn's 8x8 digits (the classifier the purifiers protect).

Trained on the same training split as the score network (``diffusion.digits_split``), on clean
images only (a standard, non-robust classifier, as DiffPure and SSNI assume), and cached the same
way (shipped weights ``rayml/purify/weights/classifier_digits.pt`` for the default config).

Examples:
    >>> import torch
    >>> from rayml.purify.classifier import load_classifier
    >>> clf = load_classifier()                                   # doctest: +SKIP
    >>> clf(torch.rand(2, 1, 8, 8)).shape                         # doctest: +SKIP
    torch.Size([2, 10])
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rayml.purify import diffusion

__all__ = ["DigitsCNN", "ClassifierConfig", "train_classifier", "load_classifier", "accuracy"]


class DigitsCNN(nn.Module):
    """Conv(1->w) - Conv(w->2w, stride 2) - Conv(2w->2w) - global-average-free FC; input in ``[0, 1]``."""

    def __init__(self, width: int = 32, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * width * 16, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or tuple(x.shape[1:]) != (1, 8, 8):
            raise ValueError(f"x must be (N, 1, 8, 8), got {tuple(x.shape)}")
        return self.head(self.features(x))


@dataclass(frozen=True)
class ClassifierConfig:
    """Training config of the classifier (its hash names the cache file)."""

    width: int = 32
    epochs: int = 30
    batch: int = 64
    lr: float = 1e-3
    seed: int = 0
    data: str = "digits"

    def __post_init__(self):
        for name in ("width", "epochs", "batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")
        if self.data != "digits":
            raise ValueError(f"data must be 'digits', got {self.data!r}")


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy of ``model`` on ``(x, y)``."""
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def train_classifier(config: ClassifierConfig = ClassifierConfig()) -> tuple[DigitsCNN, dict]:
    """Adam on cross-entropy over the digits training split; returns the model (eval mode) and its card."""
    torch.manual_seed(config.seed)
    xtr, ytr, xte, yte = diffusion.digits_split()
    model = DigitsCNN(config.width)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    g = torch.Generator().manual_seed(config.seed)
    t0 = time.perf_counter()
    for _ in range(config.epochs):
        perm = torch.randperm(xtr.shape[0], generator=g)
        for i in range(0, xtr.shape[0], config.batch):
            idx = perm[i:i + config.batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    card = {"kind": "classifier", "config": asdict(config), "hash": diffusion.config_hash("classifier", config),
            "train_seconds": time.perf_counter() - t0,
            "train_accuracy": accuracy(model, xtr, ytr), "test_accuracy": accuracy(model, xte, yte)}
    return model, card


_LOADED: dict = {}


def load_classifier(config: ClassifierConfig = ClassifierConfig(), *, train: bool = True) -> DigitsCNN:
    """The classifier of ``config``: shipped weights, else the cache, else trained now and cached."""
    if config in _LOADED:
        return _LOADED[config]
    path = diffusion.find_weights("classifier", config, "classifier_digits")
    model = DigitsCNN(config.width)
    if path is not None:
        model.load_state_dict(torch.load(path, weights_only=True))
    elif train:
        model, card = train_classifier(config)
        diffusion.save_model(model, card, diffusion.cache_dir() / f"classifier-{diffusion.config_hash('classifier', config)}.pt")
    else:
        raise FileNotFoundError(f"no weights for classifier config {diffusion.config_hash('classifier', config)}")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    _LOADED[config] = model
    return model

