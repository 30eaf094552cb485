"""A small CLIP-style image-text encoder trained by rayml on the digits with generated captions.

Several methods need a vision-language encoder (PoisonedEye's multimodal retriever, FedAG's frozen
backbone), and nothing may be downloaded at run time, so rayml trains its own miniature CLIP:

* **images**: ``sklearn.datasets.load_digits`` (1797 grey 8x8 images, pixels scaled to [0, 1]);
  a fixed stratified split (``digits_split``: 70 % train, 30 % held out, ``random_state=0``)
  that does not depend on the training seed;
* **captions**: generated from varied templates ("a handwritten digit seven", "the number 7",
  "a scan showing a seven", ...), a fresh template per image per epoch, with a few filler words
  inserted at random so that words outside the templates learn to carry no class information;
* **towers**: an MLP image tower (64 -> 256 -> 128 -> ``dim``) and a text tower that averages
  word embeddings (a bag of words over the fixed vocabulary ``VOCAB``; unknown words map to
  ``<unk>``) followed by an MLP; both outputs are L2-normalised;
* **loss**: the symmetric InfoNCE loss of CLIP (Radford et al., "Learning Transferable Visual
  Models From Natural Language Supervision", ICML 2021, Eq. in Fig. 3) with a learnable
  temperature (``logit_scale`` initialised at ``log(1 / 0.07)``, clamped at ``log(100)``);
  random one-pixel shifts and small Gaussian noise augment the images;
* **neutral texts**: a text with no class word (a question such as "what digit is shown in the
  image?", an instruction) should not favour one class, so each batch also embeds a few random
  filler-word texts and adds ``neutral_weight`` times the variance, across the batch's images, of
  their cosine similarity to each image (``neutral_loss``; rayml's addition: without it the
  question embedding leaned towards one class and a retriever that fuses image and question keys
  retrieved that class's documents for every query).

Training runs on one torch thread (the weights must not depend on the caller's thread count, so
every node of a cluster that trains its own cached copy gets the same model) in a few seconds,
is deterministic from ``seed``, and is cached under ``rayml.runtime.cache_root() / "image_text"``.
Zero-shot classification uses CLIP's prompt ensembling: a class's text embedding is the
normalised mean of its captions' embeddings over all templates.

Assumed (rayml's own design, not a paper's): the architecture, the vocabulary, the templates and
the training schedule above. Send the encoder itself (it pickles) to Ray tasks, never a cache path.

Examples:
    >>> from rayml.data import image_text as it
    >>> enc = it.load_or_train(seed=0)                          # doctest: +SKIP
    >>> _, _, x, y = it.digits_split()                          # doctest: +SKIP
    >>> (enc.zero_shot_predict(x) == y).mean() > 0.8            # doctest: +SKIP
    True
    >>> enc.encode_texts(["a handwritten digit seven"]).shape   # doctest: +SKIP
    (1, 32)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "NUMBER_WORDS",
    "CAPTION_TEMPLATES",
    "VOCAB",
    "EncoderConfig",
    "ImageTextEncoder",
    "digit_images",
    "digits_split",
    "caption",
    "class_captions",
    "tokenize",
    "contrastive_loss",
    "neutral_loss",
    "train_encoder",
    "load_or_train",
]

_VERSION = 2  # bump when the data, vocabulary or training changes: it is part of the cache key

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

CAPTION_TEMPLATES = (
    "a handwritten digit {word}",
    "a photo of the number {word}",
    "an image of a handwritten {word}",
    "the digit {num}",
    "a scan showing a {word}",
    "a small grey picture of the digit {word}",
    "the number {num} written by hand",
    "{word}",
    "a blurry {word}",
    "this is a {word}",
    "a pixelated image of the digit {num}",
    "handwriting of the numeral {word}",
)

# Words that appear in questions, answers and instructions around a retrieval-augmented reader;
# the training captions insert them as fillers so that they learn to carry no class information.
_FILLER_WORDS = (
    "what", "which", "who", "how", "is", "are", "was", "be", "this", "that", "these", "it", "its",
    "in", "on", "of", "for", "to", "and", "or", "with", "by", "from", "as", "at", "about", "all",
    "any", "every", "some", "no", "not", "yes", "do", "does", "don", "t", "i", "you", "we", "they",
    "answer", "answers", "question", "questions", "respond", "response", "reply", "say", "tell",
    "shown", "show", "shows", "depicted", "see", "look", "picture", "photo", "image", "scan",
    "digit", "number", "numeral", "written", "hand", "handwritten", "grey", "small", "blurry",
    "pixelated", "please", "only", "always", "never", "primary", "goal", "task", "additional",
    "information", "context", "adding", "without", "know", "unknown", "correct", "true", "false",
    "label", "class", "category", "object", "main", "value", "here", "there", "an", "a", "the",
    "ignore", "previous", "instructions", "must", "should", "will", "can", "output", "word",
    "document", "knowledge", "base", "entry", "note", "fact", "according", "reference",
)

_TOKEN_RE = re.compile(r"[a-z]+|[0-9]")


def _build_vocab() -> tuple[str, ...]:
    words = set(NUMBER_WORDS) | {str(d) for d in range(10)} | set(_FILLER_WORDS)
    for tpl in CAPTION_TEMPLATES:
        words |= set(_TOKEN_RE.findall(tpl.replace("{word}", "").replace("{num}", "").lower()))
    return ("<pad>", "<unk>") + tuple(sorted(words))


VOCAB = _build_vocab()
_INDEX = {w: i for i, w in enumerate(VOCAB)}


@dataclass(frozen=True)
class EncoderConfig:
    """Size and training schedule of the encoder (all part of the cache key)."""

    dim: int = 32
    hidden: int = 128
    word_dim: int = 64
    epochs: int = 40
    batch_size: int = 128
    lr: float = 3e-3
    temperature_init: float = 0.07
    max_fillers: int = 3
    noise_std: float = 0.05
    neutral_weight: float = 3.0

    def __post_init__(self):
        for name in ("dim", "hidden", "word_dim", "epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.max_fillers, bool) or not isinstance(self.max_fillers, int) or self.max_fillers < 0:
            raise ValueError(f"max_fillers must be an integer >= 0, got {self.max_fillers!r}")
        for name in ("lr", "temperature_init"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name in ("noise_std", "neutral_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


# ----------------------------------------------------------------------------------------- data

def digit_images() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits as ``(n, 64)`` float32 pixels in [0, 1] and their int64 labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed stratified split ``(x_train, y_train, x_test, y_test)`` (30 % held out, seed 0)."""
    from sklearn.model_selection import train_test_split

    x, y = digit_images()
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, stratify=y, random_state=0)
    return xtr, ytr, xte, yte


def _check_label(label) -> int:
    if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or not 0 <= int(label) <= 9:
        raise ValueError(f"label must be an integer in 0..9, got {label!r}")
    return int(label)


def caption(label: int, template: int = 0) -> str:
    """The caption of digit ``label`` under ``CAPTION_TEMPLATES[template]``."""
    label = _check_label(label)
    n = len(CAPTION_TEMPLATES)
    if isinstance(template, bool) or not isinstance(template, (int, np.integer)) or not 0 <= template < n:
        raise ValueError(f"template must be an integer in 0..{len(CAPTION_TEMPLATES) - 1}, got {template!r}")
    return CAPTION_TEMPLATES[int(template)].format(word=NUMBER_WORDS[label], num=label)


def class_captions(label: int) -> list[str]:
    """Every template's caption of digit ``label`` (the prompt ensemble of zero-shot prediction)."""
    return [caption(label, t) for t in range(len(CAPTION_TEMPLATES))]


def tokenize(texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Word ids of ``texts`` as an ``EmbeddingBag`` input: the flat ids and the offsets.

    Lower-cases, splits into words and single digits; unknown words map to ``<unk>``, an empty
    text to a single ``<pad>`` (whose embedding is fixed at zero).
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a sequence of strings, got {type(texts).__name__}")
    ids, offsets = [], []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a string, got {type(t).__name__}")
        offsets.append(len(ids))
        toks = [_INDEX.get(w, 1) for w in _TOKEN_RE.findall(t.lower())]
        ids.extend(toks or [0])
    return torch.tensor(ids, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


# ---------------------------------------------------------------------------------------- model

class ImageTextEncoder(nn.Module):
    """Image and text towers mapping into one normalised ``dim``-dimensional space."""

    def __init__(self, config: EncoderConfig = EncoderConfig()):
        super().__init__()
        self.config = config
        c = config
        self.image_tower = nn.Sequential(nn.Linear(64, 2 * c.hidden), nn.ReLU(),
                                         nn.Linear(2 * c.hidden, c.hidden), nn.ReLU(),
                                         nn.Linear(c.hidden, c.dim))
        self.word_embedding = nn.EmbeddingBag(len(VOCAB), c.word_dim, mode="mean", padding_idx=0)
        self.text_tower = nn.Sequential(nn.Linear(c.word_dim, c.hidden), nn.ReLU(), nn.Linear(c.hidden, c.dim))
        self.logit_scale = nn.Parameter(torch.tensor(float(np.log(1.0 / c.temperature_init))))

    # differentiable features (torch in, torch out)
    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """Normalised embeddings of ``(n, 64)`` or ``(n, 8, 8)`` pixel tensors (differentiable)."""
        return F.normalize(self.image_tower(pixels.reshape(pixels.shape[0], 64)), dim=-1)

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """Normalised embeddings of a list of texts."""
        ids, offsets = tokenize(texts)
        return F.normalize(self.text_tower(self.word_embedding(ids, offsets)), dim=-1)

    # numpy API
    def encode_images(self, images) -> np.ndarray:
        """Normalised float32 embeddings ``(n, dim)`` of ``(n, 64)`` / ``(n, 8, 8)`` images in [0, 1]."""
        x = _as_pixels(images)
        with torch.no_grad():
            return self.image_features(torch.from_numpy(x)).numpy()

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised float32 embeddings ``(n, dim)`` of a list of texts."""
        with torch.no_grad():
            return self.text_features(list(texts) if not isinstance(texts, str) else texts).numpy()

    def class_embeddings(self) -> np.ndarray:
        """``(10, dim)`` zero-shot class embeddings: normalised mean over the caption templates."""
        e = np.stack([self.encode_texts(class_captions(k)).mean(0) for k in range(10)])
        return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)

    def zero_shot_predict(self, images) -> np.ndarray:
        """Zero-shot digit labels: the class embedding most similar (cosine) to each image's."""
        return np.argmax(self.encode_images(images) @ self.class_embeddings().T, axis=1)


def _as_pixels(images) -> np.ndarray:
    x = np.asarray(images, dtype=np.float32)
    if x.ndim == 3 and x.shape[1:] == (8, 8):
        x = x.reshape(x.shape[0], 64)
    if x.ndim != 2 or x.shape[1] != 64:
        raise ValueError(f"images must have shape (n, 64) or (n, 8, 8), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("images must be finite")
    return np.ascontiguousarray(x)


def contrastive_loss(img: torch.Tensor, txt: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric InfoNCE loss of matched rows of normalised ``img`` and ``txt`` embeddings."""
    logits = logit_scale.clamp(max=float(np.log(100.0))).exp() * img @ txt.T
    target = torch.arange(img.shape[0])
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def _augment(x: torch.Tensor, gen: torch.Generator, noise_std: float) -> torch.Tensor:
    """Random shifts of up to one pixel (zero fill) and Gaussian pixel noise."""
    n = x.shape[0]
    img = F.pad(x.reshape(n, 1, 8, 8), (1, 1, 1, 1))
    dx = torch.randint(0, 3, (n,), generator=gen)
    dy = torch.randint(0, 3, (n,), generator=gen)
    rows = (dy[:, None] + torch.arange(8)[None, :])[:, :, None].expand(n, 8, 8)
    cols = (dx[:, None] + torch.arange(8)[None, :])[:, None, :].expand(n, 8, 8)
    out = img[torch.arange(n)[:, None, None], 0, rows, cols]
    out = out + noise_std * torch.randn(out.shape, generator=gen)
    return out.reshape(n, 64).clamp(0.0, 1.0)


def _random_captions(labels: np.ndarray, rng: np.random.Generator, max_fillers: int) -> list[str]:
    out = []
    for y in labels:
        words = caption(int(y), int(rng.integers(len(CAPTION_TEMPLATES)))).split()
        for _ in range(int(rng.integers(0, max_fillers + 1))):
            words.insert(int(rng.integers(0, len(words) + 1)), _FILLER_WORDS[int(rng.integers(len(_FILLER_WORDS)))])
        out.append(" ".join(words))
    return out


def _filler_texts(n: int, rng: np.random.Generator) -> list[str]:
    """Texts of 2-8 filler words and no class word (questions, instructions): the neutral batch."""
    return [" ".join(_FILLER_WORDS[int(j)] for j in rng.integers(len(_FILLER_WORDS), size=int(rng.integers(2, 9))))
            for _ in range(n)]


def neutral_loss(img: torch.Tensor, neutral_txt: torch.Tensor) -> torch.Tensor:
    """Mean over the neutral texts of the variance of their cosine similarity across the batch's images."""
    return (neutral_txt @ img.T).var(dim=1).mean()


def train_encoder(seed: int = 0, config: EncoderConfig = EncoderConfig()) -> ImageTextEncoder:
    """Train the encoder on the training split from scratch (one torch thread; no cache).

    Args:
        seed: the seed of the initialisation, the batches, the captions and the augmentation.
        config: sizes and schedule.

    Returns:
        The trained encoder in eval mode, gradients of its parameters off.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not isinstance(config, EncoderConfig):
        raise TypeError(f"config must be an EncoderConfig, got {type(config).__name__}")
    xtr, ytr, _, _ = digits_split()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model = ImageTextEncoder(config)
        gen = torch.Generator().manual_seed(int(seed))
        rng = np.random.default_rng(int(seed))
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        steps_per_epoch = int(np.ceil(len(xtr) / config.batch_size))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.epochs * steps_per_epoch)
        x_all = torch.from_numpy(xtr)
        model.train()
        for _ in range(config.epochs):
            perm = torch.randperm(len(xtr), generator=gen).numpy()
            for s in range(0, len(xtr), config.batch_size):
                idx = perm[s:s + config.batch_size]
                if len(idx) < 2:
                    continue
                img = model.image_features(_augment(x_all[idx], gen, config.noise_std))
                txt = model.text_features(_random_captions(ytr[idx], rng, config.max_fillers))
                loss = contrastive_loss(img, txt, model.logit_scale)
                if config.neutral_weight > 0:
                    neutral = model.text_features(_filler_texts(max(2, len(idx) // 4), rng))
                    loss = loss + config.neutral_weight * neutral_loss(img, neutral)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _cache_key(seed: int, config: EncoderConfig) -> str:
    blob = json.dumps({"v": _VERSION, "seed": int(seed), "config": asdict(config), "vocab": VOCAB}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_or_train(seed: int = 0, config: EncoderConfig = EncoderConfig()) -> ImageTextEncoder:
    """The encoder trained with ``seed``: loaded from the rayml cache, trained and cached otherwise.

    The cache file is ``cache_root()/image_text/clip-digits-<key>.pt`` where the key hashes the
    seed, the config, the vocabulary and a version number. Weights are loaded with
    ``weights_only=True``; a file that does not load is retrained over.
    """
    from rayml.results import note_cache
    from rayml.runtime import cache_root

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not isinstance(config, EncoderConfig):
        raise TypeError(f"config must be an EncoderConfig, got {type(config).__name__}")
    path = cache_root() / "image_text" / f"clip-digits-{_cache_key(seed, config)}.pt"
    if path.exists():
        model = ImageTextEncoder(config)
        try:
            model.load_state_dict(torch.load(path, weights_only=True))
        except Exception:  # a truncated or foreign file: train over it
            pass
        else:
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            note_cache(path)  # the record names the bytes it read: they follow the CPU that trained them
            return model
    model = train_encoder(seed, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{np.random.default_rng().integers(1 << 30)}")
    torch.save(model.state_dict(), tmp)
    tmp.replace(path)
    note_cache(path, built=True)
    return model
