"""Device-agnostic purification: every tensor factory call names a device, and CUDA runs when present."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from rayml.purify import attacks as A
from rayml.purify import diffusion as D
from rayml.purify import ssni as S

FACTORIES = {torch.randn, torch.rand, torch.randint, torch.arange, torch.full, torch.zeros, torch.ones, torch.empty,
             torch.tensor, torch.as_tensor, torch.linspace}


class FactoryAudit(TorchFunctionMode):
    """Records every tensor factory call made without an explicit ``device``."""

    def __init__(self):
        super().__init__()
        self.missing: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            self.missing.append(func.__name__)
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    model = D.ScoreNet(1, 8).eval()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0), device="cpu")
    ref = S.ReferenceStats(mean=50.0, std=5.0, min=30.0, max=90.0, n=10)
    return model, x, ref


@pytest.mark.parametrize("method", ["diffpure", "gdmp"])
@pytest.mark.parametrize("variant", [None, "N", "L"])
def test_purification_and_attacks_create_no_tensor_without_a_device(setup, method, variant):
    model, x, ref = setup
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    cfg = S.PurifyConfig(method=method, t_star=60.0, stride=20.0)
    scfg = S.SSNIConfig(variant) if variant else None
    with FactoryAudit() as audit:
        S.purify(model, x, cfg, ssni=scfg, ref=ref, seed=0, straight_through=variant is not None)
        S.score_norms(model, x, eps_steps=3, seed=1)
        fn = lambda xs, g: S.purify(model, xs, cfg, ssni=scfg, ref=ref, seed=g)[0]  # noqa: E731
        A.pgd(A.eot_grad(clf, fn, 2), x, torch.tensor([0, 1, 2], device=x.device), eps=0.1, iterations=1, seed=2)
        A.pgd(A.classifier_grad(clf), x, torch.tensor([0, 1, 2], device=x.device), eps=0.1, iterations=1,
              norm="l2", seed=3)
    assert audit.missing == []


def test_the_audit_catches_a_cpu_factory_call():
    with FactoryAudit() as audit:
        torch.zeros(2)
        torch.zeros(2, device="cpu")
    assert audit.missing == ["zeros"]


def test_noise_is_drawn_on_the_meta_device():
    like = torch.empty(2, 3, device="meta")
    z = D._noise(like.shape, D._generator(0, like.device), like)
    assert z.device.type == "meta" and z.shape == like.shape
    emb = D._time_embedding(torch.ones(2, device="meta"), 8)
    assert emb.device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_ssni_purification_runs_on_cuda(setup):
    model, x, ref = setup
    model, x = model.to("cuda"), x.to("cuda")
    out, t = S.purify(model, x, S.PurifyConfig(t_star=60.0, stride=20.0), ssni=S.SSNIConfig("L"), ref=ref, seed=0)
    assert out.device.type == "cuda" and t.device.type == "cuda" and torch.isfinite(out).all()
