"""A FedAG silo: one domain's real data, the frozen backbone, and the silo's models between rounds.

The adapters act on the backbone's frozen hidden features (``hidden_features``) through its frozen
last layer (``head_of``; ``rayml.federated.fedag.adapt``).

The experiment wraps ``Silo`` in ``ray.remote`` (one actor per domain): the data and the backbone's
features of it stay loaded in the actor, only parameters and scores travel (through the object
store). The class itself imports no Ray, so the tests drive it in-process too.

One call per round, ``run_round(requests)``, serves every federated run that uses the silo in that
round (runs differ in method, held-out domain, seed, learning rate). A request is a dict:

* ``{"kind": "adapter", "key", "seed", "params", "epochs", "lr", "mu", "batch_size", "gen_seed"}``:
  the baselines' local step: load ``params`` (the global adapter; ``None``: the silo's own adapter
  kept under ``key``, the local-only baseline), train it on the silo's data with CLIP's contrastive
  loss (plus FedProx's proximal term to ``params`` when ``mu > 0``), keep it under ``key``, return it.
* ``{"kind": "fedag", "key", "seed", "server_params", "momentum", "init_seed", "epochs", "lr",
  "batch_size", "gen_seed", "hidden"}``: FedAG's client update: merge the server's client model
  into the silo's own (``momentum_merge``; round 0: a fresh model from ``init_seed``), train it on
  the real data, score the domain's synthetic images (``client_round``); returns the trained
  parameters and the quality scores.

Every random choice comes from the request's ``gen_seed`` / ``init_seed``, which the driver spawns
per (run, silo, round): results do not depend on which process serves which call.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from rayml.federated import fedag

__all__ = ["Silo", "backbone_features", "hidden_features", "head_of"]


def backbone_features(encoder, pixels: np.ndarray) -> torch.Tensor:
    """The frozen backbone's normalised image embeddings of a batch of images (no gradient)."""
    with torch.no_grad():
        return encoder.image_features(torch.as_tensor(np.array(pixels, dtype=np.float32)))


def _tower(encoder):
    tower = getattr(encoder, "image_tower", None)
    if not isinstance(tower, torch.nn.Sequential) or not isinstance(tower[-1], torch.nn.Linear):
        raise TypeError("encoder must have an image_tower nn.Sequential ending in an nn.Linear (the frozen head), "
                        f"got {type(tower).__name__}")
    return tower


def hidden_features(encoder, pixels: np.ndarray) -> torch.Tensor:
    """The frozen backbone's hidden image features (the input of its last layer; 128-d for the
    digits CLIP) of a batch of images shaped as the encoder takes them (no gradient). The adapters
    re-weight these (``fedag.adapt``)."""
    tower = _tower(encoder)
    x = torch.as_tensor(np.array(pixels, dtype=np.float32))
    with torch.no_grad():
        return tower[:-1](x.reshape(x.shape[0], -1) if isinstance(tower[0], torch.nn.Linear) else x)


def head_of(encoder) -> torch.nn.Linear:
    """The backbone's frozen last layer (``fedag.frozen_head``): hidden features -> embedding."""
    last = _tower(encoder)[-1]
    return fedag.frozen_head(last.weight.detach().numpy(),
                             None if last.bias is None else last.bias.detach().numpy())


class Silo:
    """One domain's silo. ``data[seed] = (train_x, train_y, syn_x, syn_y)``: the silo's real data
    and the server's synthetic images of its domain (sent once, for the quality scores)."""

    def __init__(self, domain: str, encoder, data: Mapping[int, tuple], text: np.ndarray, scale: float):
        torch.set_num_threads(1)
        self.domain = domain
        self.encoder = encoder
        self.head = head_of(encoder)
        self.text = torch.as_tensor(np.array(text, dtype=np.float32))
        self.scale = float(scale)
        self._data = {}
        for seed, (tx, ty, sx, sy) in data.items():
            self._data[int(seed)] = {
                "x": torch.as_tensor(np.array(tx, dtype=np.float32).reshape(len(tx), -1)),
                "y": torch.as_tensor(np.array(ty, dtype=np.int64)),
                "f": hidden_features(encoder, tx),
                "sx": torch.as_tensor(np.array(sx, dtype=np.float32).reshape(len(sx), -1)),
                "sy": torch.as_tensor(np.array(sy, dtype=np.int64)),
            }
        self._state: dict = {}

    def sizes(self) -> dict:
        """Training-set size per seed (FedAvg's weights, if asked for)."""
        return {s: int(d["y"].shape[0]) for s, d in self._data.items()}

    def run_round(self, requests: Sequence[Mapping]) -> list:
        """Serve this round's requests of every run (see the module docstring), in order."""
        return [self._serve(r) for r in requests]

    def _serve(self, r: Mapping) -> dict:
        d = self._data[int(r["seed"])]
        gen = torch.Generator().manual_seed(int(r["gen_seed"]))
        if r["kind"] == "adapter":
            adapter = fedag.AttentionAdapter(int(d["f"].shape[1]))
            params = r["params"] if r["params"] is not None else self._state[r["key"]]
            fedag.set_flat_params(adapter, params)
            anchor = [p.detach().clone() for p in adapter.parameters()]
            fedag.train_adapter(adapter, d["f"], d["y"], self.text, self.scale, epochs=int(r["epochs"]),
                                lr=float(r["lr"]), batch_size=int(r["batch_size"]), gen=gen,
                                prox_mu=float(r["mu"]), anchor=anchor, head=self.head)
            out = fedag.flat_params(adapter)
            self._state[r["key"]] = out
            return {"params": out}
        if r["kind"] == "fedag":
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(r["init_seed"]))
                client = fedag.ClientNet(in_dim=int(d["x"].shape[1]), hidden=int(r["hidden"]),
                                         n_classes=int(self.text.shape[0]))
            if r["key"] in self._state:
                own = self._state[r["key"]]
                merged = own if r["server_params"] is None else fedag.momentum_merge(own, r["server_params"],
                                                                                     float(r["momentum"]))
                fedag.set_flat_params(client, merged)
            q = fedag.client_round(client, d["x"], d["y"], d["sx"], d["sy"], epochs=int(r["epochs"]),
                                   lr=float(r["lr"]), batch_size=int(r["batch_size"]), gen=gen)
            out = fedag.flat_params(client)
            self._state[r["key"]] = out
            return {"params": out, "quality": q.numpy().astype(np.float32)}
        raise ValueError(f"request kind must be 'adapter' or 'fedag', got {r['kind']!r}")

    def forget(self, prefix: str = "") -> int:
        """Drop the kept models whose key starts with ``prefix``; returns how many."""
        keys = [k for k in self._state if str(k).startswith(prefix)]
        for k in keys:
            del self._state[k]
        return len(keys)
