"""FedAG on your own silos: the federation driver (Algorithm 1's rounds) and the trained model.

``fit_fedag`` federates one FedAG run over the user's domains: one ``fedag_silo.Silo`` per domain
(its real data stays there; a Ray actor when ``use_ray``, an in-process object otherwise), the
server's adapters fitted to each domain's synthetic images, then ``rounds`` rounds of client update
(local training, quality scores) and server update (quality-aware mutual learning,
attention-regularised cross-domain learning), the clients merging the server's models with
momentum. It returns a ``FedAGModel`` that predicts on any images the backbone takes (in-domain:
the domain's own adapter; otherwise the attention mixture of all adapters).

``init_server`` and ``server_round`` are the server's two steps; the experiment
(``rayml.experiments.fedag``), which runs many federations at once, calls them too.

Examples:
    >>> import numpy as np
    >>> from rayml.data import image_text as it
    >>> from rayml.federated import fedag, fedag_data, fedag_fit
    >>> fed = fedag_data.build_federation(0, domains=("rotated", "noised", "blurred"), syn_per_domain=32)
    >>> silos = {d: (fed[d].train_x, fed[d].train_y) for d in fed.domains}
    >>> syn = {d: (fed[d].syn_x, fed[d].syn_y) for d in fed.domains}
    >>> cfg = fedag.FedAGConfig(rounds=1, local_epochs=1, adapter_init_epochs=1, interact_epochs=1)
    >>> model = fedag_fit.fit_fedag(silos, syn, it.load_or_train(0), cfg, seed=0, use_ray=False)
    >>> model.predict(fed["noised"].test_x[:4], domain="noised").shape
    (4,)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from rayml.federated import fedag
from rayml.federated.fedag_silo import Silo, head_of, hidden_features

__all__ = ["FedAGModel", "init_server", "server_round", "fit_fedag"]


def _seed_of(*parts) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint32)[0])


@dataclass
class FedAGModel:
    """A trained FedAG server: one adapter per training domain, the domain attention, and the
    frozen backbone's head, class texts and logit scale."""

    domains: list
    adapters: list
    attention: torch.nn.Module
    head: torch.nn.Module
    text: torch.Tensor
    scale: float
    encoder: object = None

    def logits(self, pixels, domain: str | None = None) -> torch.Tensor:
        """Class logits of images (as the encoder takes them): the ``domain``'s own adapter
        (one2one) when it is a training domain, else the attention mixture (one2all)."""
        if domain is not None and domain not in self.domains:
            raise ValueError(f"domain must be None or one of {self.domains}, got {domain!r}")
        h = hidden_features(self.encoder, pixels)
        if domain is not None:
            return fedag.one2one_logits(self.adapters[self.domains.index(domain)], h, self.text, self.scale, self.head)
        return fedag.one2all_logits(self.adapters, self.attention, h, self.text, self.scale, self.head)

    def predict(self, pixels, domain: str | None = None) -> np.ndarray:
        """Predicted class indices (see ``logits``)."""
        return self.logits(pixels, domain).argmax(1).numpy()


def init_server(syn: Sequence[tuple[torch.Tensor, torch.Tensor]], text: torch.Tensor, scale: float,
                cfg: fedag.FedAGConfig, gen_seed: int, head: torch.nn.Module | None = None):
    """The server's start: adapter ``i`` fitted to domain ``i``'s synthetic ``(features, labels)``
    with the contrastive loss (``adapter_init_epochs``, ``lr_init``), a fresh domain attention.
    Returns ``(adapters, attention)``; every initial weight is seeded from ``gen_seed``."""
    gen = torch.Generator().manual_seed(int(gen_seed))
    adapters = []
    for i, (f, y) in enumerate(syn):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed_of(gen_seed, i))
            a = fedag.AttentionAdapter(int(f.shape[1]))
        fedag.train_adapter(a, f, y, text, scale, epochs=cfg.adapter_init_epochs, lr=cfg.lr_init,
                            batch_size=cfg.batch_size, gen=gen, head=head)
        adapters.append(a)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seed_of(gen_seed, 99))
        attention = fedag.DomainAttention(int(text.shape[0]))
    return adapters, attention


def server_round(adapters, attention, uploads: Sequence[Mapping], syn: Sequence[tuple], text: torch.Tensor,
                 scale: float, cfg: fedag.FedAGConfig, gen_seed: int, head: torch.nn.Module | None = None,
                 use_quality: bool = True) -> tuple[list, dict]:
    """One server update (``fedag.server_update``) on the silos' ``uploads`` (``{"params",
    "quality"}`` per domain) with ``syn`` = per domain ``(features, flat pixels, labels)``; adapters and
    attention change in place. ``use_quality=False`` is the ablation with every quality score 1.
    Returns the client models to send down (flat vectors) and the mean losses."""
    clients = [fedag.set_flat_params(fedag.ClientNet(in_dim=int(syn[i][1].shape[1]), hidden=cfg.client_hidden,
                                                     n_classes=int(text.shape[0])),
                                     u["params"]) for i, u in enumerate(uploads)]
    quality = [torch.as_tensor(np.array(u["quality"])) for u in uploads]
    if not use_quality:
        quality = [torch.ones_like(q) for q in quality]
    gen = torch.Generator().manual_seed(int(gen_seed))
    log = fedag.server_update(adapters, attention, clients, syn, quality, text, scale, cfg, gen, head)
    return [fedag.flat_params(c) for c in clients], {k: float(np.mean(v)) for k, v in log.items() if v}


def fit_fedag(silos: Mapping[str, tuple], synthetic: Mapping[str, tuple], encoder, cfg: fedag.FedAGConfig | None = None,
              *, seed: int = 0, use_ray: bool = True) -> FedAGModel:
    """Federate FedAG over the user's silos (Algorithm 1) and return the trained server.

    Args:
        silos: ``{domain: (images, labels)}``: each silo's real training data (images as the
            encoder takes them, flattened per image for an MLP tower; labels ints in ``0..C-1``).
        synthetic: ``{domain: (images, labels)}``: the server's synthetic images of each domain
            (generated from the domain's description; never a silo's data). Same keys as ``silos``.
        encoder: the frozen backbone: ``image_tower`` (an ``nn.Sequential`` ending in its last
            ``nn.Linear``) and ``class_embeddings()`` (``(C, d)`` normalised class texts), with an
            optional ``logit_scale`` (log scale; default ``log 100``).
        cfg: the schedule (``fedag.FedAGConfig``; the authors' defaults if ``None``).
        seed: seeds every initialisation and batch order (per silo and round).
        use_ray: silos as Ray actors (``rayml.runtime.connect``) or in-process objects.
    """
    cfg = cfg or fedag.FedAGConfig()
    if not silos or set(silos) != set(synthetic):
        raise ValueError(f"silos and synthetic must name the same non-empty set of domains, got {sorted(silos)} "
                         f"and {sorted(synthetic)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    domains = list(silos)
    text = torch.as_tensor(np.array(encoder.class_embeddings(), dtype=np.float32))
    ls = getattr(encoder, "logit_scale", None)
    scale = float(np.exp(min(float(ls.detach()) if ls is not None else np.log(100.0), np.log(100.0))))
    head = head_of(encoder)
    syn = []
    for d in domains:
        sx, sy = synthetic[d]
        syn.append((hidden_features(encoder, sx), torch.as_tensor(np.array(sx, dtype=np.float32).reshape(len(sx), -1)),
                    torch.as_tensor(np.array(sy, dtype=np.int64))))
    data = {d: {0: (silos[d][0], silos[d][1], synthetic[d][0], synthetic[d][1])} for d in domains}
    if use_ray:
        import ray

        from rayml import runtime

        runtime.connect()
        actor = ray.remote(Silo).options(num_cpus=0, max_restarts=0)
        handles = {d: actor.remote(d, encoder, data[d], text.numpy(), scale) for d in domains}
        call = lambda d, reqs: handles[d].run_round.remote(reqs)  # noqa: E731
        get = ray.get
    else:
        objs = {d: Silo(d, encoder, data[d], text.numpy(), scale) for d in domains}
        call = lambda d, reqs: objs[d].run_round(reqs)  # noqa: E731
        get = lambda x: x  # noqa: E731
    try:
        adapters, attention = init_server([(f, y) for f, _, y in syn], text, scale, cfg, _seed_of(seed, 7), head)
        down = [None] * len(domains)
        for rnd in range(cfg.rounds):
            refs = [call(d, [{"kind": "fedag", "key": "fit", "seed": 0, "server_params": down[i],
                              "momentum": cfg.momentum, "init_seed": _seed_of(seed, 13, i),
                              "epochs": cfg.local_epochs, "lr": cfg.lr_local, "batch_size": cfg.batch_size,
                              "gen_seed": _seed_of(seed, 11, i, rnd), "hidden": cfg.client_hidden}])
                    for i, d in enumerate(domains)]
            uploads = [get(r)[0] for r in refs]
            down, _ = server_round(adapters, attention, uploads, syn, text, scale, cfg, _seed_of(seed, 17, rnd), head)
    finally:
        if use_ray:
            for h in handles.values():
                ray.kill(h, no_restart=True)
    return FedAGModel(domains=domains, adapters=adapters, attention=attention, head=head, text=text, scale=scale,
                      encoder=encoder)
