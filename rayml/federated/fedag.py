"""FedAG: cross-silo Federated Adapter Generalization (the pure torch core; no Ray here).

Paper: Jiaqi Wang, Jingtao Li, Weiming Zhuang, Chen Chen, Lingjuan Lyu, Fenglong Ma, "Enhancing
Foundation Models with Federated Domain Knowledge Infusion", ICML 2025 (PMLR 267, wang25bk). The
abstract names the method FedAG: "multiple fine-grained adapters to capture domain-specific
knowledge ... quality-aware in-domain mutual learning and attention-regularized cross-domain
learning". The full text was not reachable here; this module follows the authors' pre-release code
(``JackqqWang/fedadd``, ``FedAdapter_final.py``, ``models/CLIP_adapter.py``,
``utils_FedAdapter.py``; the paper points to ``JackqqWang/fedag``, not stored here) and a
reviewer's summary of the paper (OpenReview 6SIVFmjIm4). Read, not copied.

The protocol (Algorithm 1 of the paper: client update, then server update, per round):

* **Server** (holds the frozen CLIP-style backbone, one *fine-grained adapter per training domain*
  and a domain-attention module): each adapter is CLIP-Adapter / FedCLIP's attention adapter,
  ``a(f) = softmax(W2 tanh(W1 f))``, which re-weights the frozen image feature ``f`` as
  ``normalize(a(f) * f)``; logits are ``scale * <adapted f, class text embedding>``
  (``adapter_logits``). The server holds synthetic images of every training domain (generated
  from the domain's description; never the silos' data) and first fits adapter ``i`` to domain
  ``i``'s synthetic images with CLIP's symmetric contrastive loss (``contrastive_adapter_loss``).
* **Client update** (a silo of domain ``i``): train a small local classifier on the silo's real
  data (cross-entropy), compute class prototypes (mean penultimate feature per class) on that
  data, and score each synthetic image of its domain by the cosine of its penultimate feature to
  the prototype of its label (``quality_scores``); upload the classifier and the scores.
* **Server update, quality-aware in-domain mutual learning** (``in_domain_adapter_loss``,
  ``in_domain_client_loss``): adapter ``i`` distils from the quality-weighted logits of the
  domain's client models, ``q * z_client`` (``kd_loss``: ``alpha`` KL + ``(1 - alpha)`` CE), and
  the client models distil from adapter ``i`` with their own logits scaled by ``q``.
* **Server update, attention-regularised cross-domain learning** (``cross_domain_loss``): every
  adapter ``j`` scores domain ``i``'s synthetic image, an attention module maps each adapter's
  logits to a score, a softmax over adapters weights the logits into one prediction, and the loss
  is ``CE(z_i, y) + CE(sum_j att_j z_j, y) + lam * sum_n max_j (att_j - att_i)``
  (``attention_regulariser``: the domain's own adapter should get the most attention).
* The updated client models go back; each silo keeps ``m * theta_local + (1 - m) * theta_server``
  (``momentum_merge``).
* **Inference**: in-domain, adapter ``i`` on domain ``i`` (``one2one``); any domain, including
  unseen ones, the attention-weighted mixture of all adapters (``one2all``).

Assumed (not read in the paper's text; each also noted where it is implemented):
    * the client model is a one-hidden-layer MLP on pixels (the paper: a small ViT); its
      penultimate features are the hidden ReLU layer's.
    * one persistent Adam per server phase per round (the authors' code re-creates Adam at every
      batch, which makes every step a fresh first Adam step).
    * the logit scale is the backbone's learnt ``exp(logit_scale)`` (the authors' code: 100, CLIP's
      learnt value).
    * prototypes of a class absent from a silo's data are zero vectors (their cosine is 0).

Examples:
    >>> import torch
    >>> from rayml.federated import fedag
    >>> ad = fedag.AttentionAdapter(4)
    >>> fedag.adapter_logits(ad, torch.eye(4)[:2], torch.eye(4)[:3], 10.0).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "FedAGConfig",
    "AttentionAdapter",
    "ClientNet",
    "DomainAttention",
    "flat_params",
    "set_flat_params",
    "num_params",
    "frozen_head",
    "adapt",
    "adapter_logits",
    "contrastive_adapter_loss",
    "kd_loss",
    "class_prototypes",
    "quality_scores",
    "attention_weights",
    "attention_regulariser",
    "cross_domain_loss",
    "in_domain_adapter_loss",
    "in_domain_client_loss",
    "train_adapter",
    "train_client",
    "client_round",
    "server_update",
    "momentum_merge",
    "fedavg",
    "one2one_logits",
    "one2all_logits",
]


@dataclass(frozen=True)
class FedAGConfig:
    """FedAG's schedule; defaults are the authors' code's (``options_fedadapter.py``).

    Attributes:
        rounds: communication rounds.
        local_epochs: client epochs over its real data per round (``--epoch``).
        batch_size: every loader's batch size.
        adapter_init_epochs: server epochs fitting each adapter to its synthetic data
            (``--adp_init_epoch``).
        interact_epochs: server mutual-learning epochs over the synthetic data per round.
        lr_init: Adam learning rate of the adapter initialisation (``--lr_CLIP``).
        lr_local: Adam learning rate of the clients' local training (``--lr_local``).
        lr_server: Adam learning rate of the server update (``--lr``).
        temperature: distillation temperature (``--temperature``).
        alpha: weight of the soft (KL) term in ``kd_loss`` (the code passes 0.5).
        lam: weight of the attention regulariser (``--lam``).
        momentum: weight of the client's own parameters in ``momentum_merge`` (``--momentum``).
        client_hidden: the client MLP's hidden width (assumed; the paper's clients are ViTs).
    """

    rounds: int = 10
    local_epochs: int = 10
    batch_size: int = 32
    adapter_init_epochs: int = 20
    interact_epochs: int = 2
    lr_init: float = 1e-4
    lr_local: float = 3e-4
    lr_server: float = 1e-4
    temperature: float = 1.0
    alpha: float = 0.5
    lam: float = 0.1
    momentum: float = 0.9
    client_hidden: int = 64

    def __post_init__(self):
        for name in ("rounds", "local_epochs", "batch_size", "client_hidden"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("adapter_init_epochs", "interact_epochs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        for name in ("lr_init", "lr_local", "lr_server", "temperature"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name in ("alpha", "momentum"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not np.isfinite(self.lam) \
                or self.lam < 0:
            raise ValueError(f"lam must be a finite number >= 0, got {self.lam!r}")


# ---------------------------------------------------------------------------------------- modules

class AttentionAdapter(nn.Module):
    """FedCLIP's attention adapter: ``softmax(W2 tanh(W1 f))``, a weight per feature dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, dim), nn.Softmax(dim=1))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.net(feats)


class ClientNet(nn.Module):
    """A silo's local classifier: pixels -> ReLU hidden layer (the penultimate features) -> logits.

    Assumed: the paper's clients run a small ViT; an MLP plays its part on 8x8 digits.
    """

    def __init__(self, in_dim: int = 64, hidden: int = 64, n_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate features (the input of ``head``), the space of the prototypes."""
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class DomainAttention(nn.Module):
    """The attention module of the cross-domain learning: an adapter's logits -> one score
    (``Linear(C, 1)`` then ReLU, as in the authors' ``init_MLP``)."""

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_classes, 1), nn.ReLU())

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return self.net(logits)


def flat_params(module: nn.Module) -> np.ndarray:
    """All parameters of ``module`` as one float32 vector (what a message carries)."""
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]).numpy().astype(np.float32)


def set_flat_params(module: nn.Module, vec) -> nn.Module:
    """Load a vector made by ``flat_params`` into ``module`` (in place); returns it."""
    v = torch.as_tensor(np.array(vec, dtype=np.float32))
    n = num_params(module)
    if v.ndim != 1 or v.numel() != n:
        raise ValueError(f"vec must be a vector of {n} parameters, got shape {tuple(v.shape)}")
    i = 0
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(v[i:i + p.numel()].reshape(p.shape))
            i += p.numel()
    return module


def num_params(module: nn.Module) -> int:
    """Number of scalar parameters of ``module``."""
    return int(sum(p.numel() for p in module.parameters()))


# ------------------------------------------------------------------------------------------ losses

def frozen_head(weight, bias=None) -> nn.Linear:
    """The backbone's frozen last layer ``h -> W h + b`` (``weight`` ``(d_out, d_in)``) as a module
    without trainable parameters: the map from the hidden features an adapter re-weights to the
    embedding space of the class texts."""
    w = torch.as_tensor(np.array(weight, dtype=np.float32))
    if w.ndim != 2:
        raise ValueError(f"weight must be a (d_out, d_in) matrix, got shape {tuple(w.shape)}")
    head = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None)
    with torch.no_grad():
        head.weight.copy_(w)
        if bias is not None:
            b = torch.as_tensor(np.array(bias, dtype=np.float32))
            if b.shape != (w.shape[0],):
                raise ValueError(f"bias must have shape ({w.shape[0]},), got {tuple(b.shape)}")
            head.bias.copy_(b)
    head.requires_grad_(False)
    return head


def adapt(adapter: nn.Module, feats: torch.Tensor, head: nn.Module | None = None) -> torch.Tensor:
    """The adapted, normalised image embedding.

    Without ``head`` (FedCLIP's form): ``normalize(a(f) * f)`` on the embedding ``f`` itself. With
    ``head`` (rayml's, issue 43): the adapter re-weights the backbone's frozen *hidden* features
    ``h`` and the frozen last layer maps them to the embedding, ``normalize(head(d * a(h) * h))``;
    ``d = h.shape[1]`` makes uniform weights (``a = 1/d``) the identity, so an adapter starts near
    the zero-shot backbone. Assumed: the paper's adapter acts on CLIP's output embedding, whose 512+
    dimensions carry what the 32-d embedding of the digits backbone has lost (review, issue 43).
    """
    if head is None:
        return F.normalize(adapter(feats) * feats, dim=-1)
    return F.normalize(head(feats.shape[1] * adapter(feats) * feats), dim=-1)


def adapter_logits(adapter: nn.Module, feats: torch.Tensor, text: torch.Tensor, scale: float,
                   head: nn.Module | None = None) -> torch.Tensor:
    """CLIP logits through an adapter: ``scale * adapt(adapter, f, head) @ text.T``.

    Args:
        adapter: an ``AttentionAdapter`` (or any map ``f -> weights`` of ``f``'s shape).
        feats: ``(n, d)`` frozen image features (the hidden features when ``head`` is given).
        text: ``(C, d_text)`` normalised class text embeddings.
        scale: the logit scale.
        head: the frozen last layer (``frozen_head``), or ``None`` (features are embeddings).
    """
    return scale * adapt(adapter, feats, head) @ text.T


def contrastive_adapter_loss(adapter: nn.Module, feats: torch.Tensor, labels: torch.Tensor,
                             text: torch.Tensor, scale: float, head: nn.Module | None = None) -> torch.Tensor:
    """CLIP's symmetric in-batch InfoNCE between adapted image features and their captions' text
    embeddings (``text[labels]``), as the authors' adapter training and FedCLIP do. Captions of
    the same class in one batch count as negatives, as there."""
    img = adapt(adapter, feats, head)
    txt = text[labels]
    logits = scale * img @ txt.T
    target = torch.arange(feats.shape[0])
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
            alpha: float = 0.5) -> torch.Tensor:
    """Distillation loss of the mutual learning: ``alpha T^2 KL(p_teacher || p_student) + (1 - alpha) CE``.

    ``KL`` is averaged over the batch (``batchmean``) on temperature-``T`` softmaxes; ``CE`` is the
    student's cross-entropy on the labels (the authors' ``knowledge_distillation_loss``).
    """
    log_p_s = F.log_softmax(student / temperature, dim=1)
    p_t = F.softmax(teacher / temperature, dim=1)
    soft = F.kl_div(log_p_s, p_t, reduction="batchmean") * temperature ** 2
    return alpha * soft + (1.0 - alpha) * F.cross_entropy(student, labels)


def class_prototypes(feats: torch.Tensor, labels: torch.Tensor, n_classes: int = 10) -> torch.Tensor:
    """``(C, h)`` class prototypes: the mean feature of each class (zeros for an absent class;
    assumed, the authors' code would divide by zero there)."""
    protos = torch.zeros(n_classes, feats.shape[1], dtype=feats.dtype)
    counts = torch.zeros(n_classes, dtype=feats.dtype)
    protos.index_add_(0, labels, feats)
    counts.index_add_(0, labels, torch.ones_like(labels, dtype=feats.dtype))
    return protos / counts.clamp(min=1.0)[:, None]


def quality_scores(syn_feats: torch.Tensor, syn_labels: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """The quality of each synthetic sample: the cosine between its client feature and the
    prototype of its label (the authors' ``cos_sim_tensor(A, P[labels])``); 0 where either is 0."""
    p = prototypes[syn_labels]
    num = (syn_feats * p).sum(1)
    den = syn_feats.norm(dim=1) * p.norm(dim=1)
    return torch.where(den > 0, num / den.clamp(min=1e-12), torch.zeros_like(num))


def attention_weights(logits_all: torch.Tensor, attention: nn.Module) -> torch.Tensor:
    """``(J, n, 1)`` softmax over the ``J`` adapters of the attention scores of their logits
    ``logits_all`` ``(J, n, C)``."""
    return torch.softmax(attention(logits_all), dim=0)


def attention_regulariser(att: torch.Tensor, i: int) -> torch.Tensor:
    """``sum_n max_j (att[j, n] - att[i, n])``: zero exactly when adapter ``i`` (the sample's own
    domain) has the largest attention on every sample, positive otherwise."""
    return (att - att[i]).max(dim=0)[0].sum()


def cross_domain_loss(logits_all: torch.Tensor, att: torch.Tensor, i: int, labels: torch.Tensor,
                      lam: float) -> torch.Tensor:
    """The attention-regularised cross-domain loss of domain ``i``'s batch:
    ``CE(z_i, y) + CE(sum_j att_j z_j, y) + lam * attention_regulariser(att, i)``."""
    combined = (logits_all * att).sum(0)
    return (F.cross_entropy(logits_all[i], labels) + F.cross_entropy(combined, labels)
            + lam * attention_regulariser(att, i))


def in_domain_adapter_loss(adapter_z: torch.Tensor, client_z: torch.Tensor, quality: torch.Tensor,
                           labels: torch.Tensor, temperature: float, alpha: float) -> torch.Tensor:
    """Adapter as student: ``kd_loss(z_adapter, q * z_client, y)`` (the teacher's logits of each
    sample scaled by its quality: a low-quality sample's soft target is flatter)."""
    return kd_loss(adapter_z, quality[:, None] * client_z.detach(), labels, temperature, alpha)


def in_domain_client_loss(client_z: torch.Tensor, adapter_z: torch.Tensor, quality: torch.Tensor,
                          labels: torch.Tensor, temperature: float, alpha: float) -> torch.Tensor:
    """Client as student: ``kd_loss(q * z_client, z_adapter, y)``."""
    return kd_loss(quality[:, None] * client_z, adapter_z.detach(), labels, temperature, alpha)


# ---------------------------------------------------------------------------------------- training

def _batches(n: int, batch_size: int, gen: torch.Generator):
    perm = torch.randperm(n, generator=gen)
    return [perm[s:s + batch_size] for s in range(0, n, batch_size)]


def train_adapter(adapter: nn.Module, feats: torch.Tensor, labels: torch.Tensor, text: torch.Tensor, scale: float,
                  *, epochs: int, lr: float, batch_size: int, gen: torch.Generator,
                  prox_mu: float = 0.0, anchor: Sequence[torch.Tensor] | None = None,
                  head: nn.Module | None = None) -> nn.Module:
    """Fit an adapter with ``contrastive_adapter_loss`` (Adam); with ``prox_mu > 0`` adds FedProx's
    ``mu / 2 ||w - w_anchor||^2`` (Li et al., MLSys 2020, Eq. 2). Used for the adapters'
    initialisation on synthetic data and for the baselines' local training."""
    opt = torch.optim.Adam(adapter.parameters(), lr=lr)
    adapter.train()
    for _ in range(epochs):
        for idx in _batches(feats.shape[0], batch_size, gen):
            if idx.numel() < 2:
                continue
            loss = contrastive_adapter_loss(adapter, feats[idx], labels[idx], text, scale, head)
            if prox_mu > 0 and anchor is not None:
                loss = loss + 0.5 * prox_mu * sum(((p - a) ** 2).sum() for p, a in zip(adapter.parameters(), anchor))
            opt.zero_grad()
            loss.backward()
            opt.step()
    adapter.eval()
    return adapter


def train_client(client: ClientNet, pixels: torch.Tensor, labels: torch.Tensor, *, epochs: int, lr: float,
                 batch_size: int, gen: torch.Generator) -> ClientNet:
    """A FedAG client's local training on its real data: cross-entropy, Adam (fresh each round, as
    in the authors' ``Client.train_classifier``)."""
    opt = torch.optim.Adam(client.parameters(), lr=lr)
    client.train()
    for _ in range(epochs):
        for idx in _batches(pixels.shape[0], batch_size, gen):
            loss = F.cross_entropy(client(pixels[idx]), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    client.eval()
    return client


def client_round(client: ClientNet, pixels: torch.Tensor, labels: torch.Tensor, syn_pixels: torch.Tensor,
                 syn_labels: torch.Tensor, *, epochs: int, lr: float, batch_size: int,
                 gen: torch.Generator) -> torch.Tensor:
    """FedAG's client update (Algorithm 1, client side): local training, class prototypes of the
    real data's penultimate features, and the quality score of every synthetic sample of the
    domain. Returns the scores ``(n_syn,)``; ``client`` is trained in place."""
    train_client(client, pixels, labels, epochs=epochs, lr=lr, batch_size=batch_size, gen=gen)
    with torch.no_grad():
        protos = class_prototypes(client.features(pixels), labels, int(client.head.out_features))
        return quality_scores(client.features(syn_pixels), syn_labels, protos)


def server_update(adapters: Sequence[nn.Module], attention: nn.Module, clients: Sequence[ClientNet],
                  syn: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], quality: Sequence[torch.Tensor],
                  text: torch.Tensor, scale: float, cfg: FedAGConfig, gen: torch.Generator,
                  head: nn.Module | None = None) -> dict:
    """FedAG's server update (Algorithm 1, server side), ``cfg.interact_epochs`` epochs over the
    synthetic data, one batch of every domain per step (the domains' loaders zipped):

    1. adapters and attention: one Adam step on
       ``sum_i in_domain_adapter_loss_i + sum_i cross_domain_loss_i``;
    2. clients: one Adam step on ``sum_i in_domain_client_loss_i``.

    Args:
        adapters: one adapter per training domain (updated in place).
        attention: the ``DomainAttention`` module (updated in place).
        clients: the domains' uploaded client models, ``clients[i]`` of domain ``i`` (in place).
        syn: per domain ``(frozen features, pixels, labels)`` of its synthetic images.
        quality: per domain the clients' quality scores of those images.
        text, scale: class text embeddings and logit scale.
        cfg: the schedule (``interact_epochs``, ``lr_server``, ``temperature``, ``alpha``, ``lam``).
        gen: the generator of the batch order.
        head: the backbone's frozen last layer when the features are hidden ones (``adapt``).

    Returns:
        ``{"loss_kd": [...], "loss_cross": [...], "loss_client": [...]}`` per step.
    """
    k = len(adapters)
    if not (len(clients) == len(syn) == len(quality) == k):
        raise ValueError(f"adapters, clients, syn and quality must have one entry per domain, got "
                         f"{len(adapters)}, {len(clients)}, {len(syn)}, {len(quality)}")
    server_params = [p for a in adapters for p in a.parameters()] + list(attention.parameters())
    opt_s = torch.optim.Adam(server_params, lr=cfg.lr_server)
    opt_c = torch.optim.Adam([p for c in clients for p in c.parameters()], lr=cfg.lr_server)
    log = {"loss_kd": [], "loss_cross": [], "loss_client": []}
    for _ in range(cfg.interact_epochs):
        orders = [_batches(s[0].shape[0], cfg.batch_size, gen) for s in syn]
        for group in zip(*orders):
            for a in adapters:
                a.train()
            loss_kd = torch.zeros(())
            loss_cross = torch.zeros(())
            for i, idx in enumerate(group):
                feats, pixels, labels = syn[i][0][idx], syn[i][1][idx], syn[i][2][idx]
                q = quality[i][idx]
                with torch.no_grad():
                    teacher = clients[i](pixels)
                logits_all = torch.stack([adapter_logits(a, feats, text, scale, head) for a in adapters])
                loss_kd = loss_kd + in_domain_adapter_loss(logits_all[i], teacher, q, labels, cfg.temperature,
                                                           cfg.alpha)
                att = attention_weights(logits_all, attention)
                loss_cross = loss_cross + cross_domain_loss(logits_all, att, i, labels, cfg.lam)
            opt_s.zero_grad()
            (loss_kd + loss_cross).backward()
            opt_s.step()
            for a in adapters:
                a.eval()
            loss_c = torch.zeros(())
            for i, idx in enumerate(group):
                feats, pixels, labels = syn[i][0][idx], syn[i][1][idx], syn[i][2][idx]
                clients[i].train()
                with torch.no_grad():
                    teacher = adapter_logits(adapters[i], feats, text, scale, head)
                loss_c = loss_c + in_domain_client_loss(clients[i](pixels), teacher, quality[i][idx], labels,
                                                        cfg.temperature, cfg.alpha)
            opt_c.zero_grad()
            loss_c.backward()
            opt_c.step()
            for c in clients:
                c.eval()
            log["loss_kd"].append(float(loss_kd.detach()))
            log["loss_cross"].append(float(loss_cross.detach()))
            log["loss_client"].append(float(loss_c.detach()))
    return log


def momentum_merge(local, server, momentum: float) -> np.ndarray:
    """The client's merge of the server's update: ``momentum * local + (1 - momentum) * server``."""
    local, server = np.asarray(local, dtype=np.float32), np.asarray(server, dtype=np.float32)
    if local.shape != server.shape:
        raise ValueError(f"local and server must have the same shape, got {local.shape} and {server.shape}")
    return (momentum * local + (1.0 - momentum) * server).astype(np.float32)


def fedavg(vectors: Sequence, weights: Sequence[float] | None = None) -> np.ndarray:
    """FedAvg (McMahan et al., AISTATS 2017): the weighted mean of the silos' parameter vectors
    (equal weights by default, as the authors' FedCLIP baseline)."""
    if len(vectors) == 0:
        raise ValueError("vectors must not be empty")
    arr = np.stack([np.asarray(v, dtype=np.float64) for v in vectors])
    if weights is None:
        w = np.full(len(vectors), 1.0 / len(vectors))
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(vectors),) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights must be {len(vectors)} non-negative numbers with a positive sum")
        w = w / w.sum()
    return (w @ arr).astype(np.float32)


# --------------------------------------------------------------------------------------- inference

def one2one_logits(adapter: nn.Module, feats: torch.Tensor, text: torch.Tensor, scale: float,
                   head: nn.Module | None = None) -> torch.Tensor:
    """In-domain inference: the domain's own adapter."""
    with torch.no_grad():
        return adapter_logits(adapter, feats, text, scale, head)


def one2all_logits(adapters: Sequence[nn.Module], attention: nn.Module, feats: torch.Tensor, text: torch.Tensor,
                   scale: float, head: nn.Module | None = None) -> torch.Tensor:
    """Inference on any domain: the attention-weighted mixture of every adapter's logits."""
    with torch.no_grad():
        logits_all = torch.stack([adapter_logits(a, feats, text, scale, head) for a in adapters])
        return (logits_all * attention_weights(logits_all, attention)).sum(0)
