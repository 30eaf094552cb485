"""The registry of rayml's methods: the 38 ICML 2025 papers of ``shared/METHODS.md``.

Each ``Method`` says which paper it implements, where its pure core lives, whether it is
implemented or still planned, what runs on Ray, and what the implementation was checked
against. A method is ``implemented`` exactly when ``rayml/experiments/<name>.py`` exists (a
helper adding a method touches no shared list). ``rayml list`` prints this table; the contract suite runs every implemented method's
experiment. A method becomes ``implemented`` only when its core, experiment and tests exist.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, replace

__all__ = ["Method", "METHODS", "get", "implemented", "names", "details", "experiment_module", "runnable", "SUBSTRATES",
           "EXTRAS", "MissingExtra", "extras_of", "check_extras", "require_extra"]

IMPLEMENTED = "implemented"
PLANNED = "planned"


@dataclass(frozen=True)
class Method:
    """One registered method.

    Attributes:
        name: the CLI name (``rayml run NAME``).
        ref: where its abstract is in ``shared/papers`` (P1.n / P2.n).
        title: the paper, as listed in METHODS.md (all ICML 2025).
        family: the subpackage of ``rayml`` it belongs to.
        module: the import path of its pure core.
        status: ``implemented`` or ``planned``.
        code: the authors' public repository, if known.
        experiment: the import path of its experiment module, if implemented.
    """

    name: str
    ref: str
    title: str
    family: str
    module: str
    status: str = PLANNED
    code: str = ""
    experiment: str = ""

    def load_experiment(self):
        """Import and return this method's ``EXPERIMENT`` object."""
        if self.status != IMPLEMENTED or not self.experiment:
            raise ValueError(f"method {self.name!r} is planned, not implemented yet")
        return importlib.import_module(self.experiment).EXPERIMENT


# The optional dependency groups of pyproject.toml (``pip install "rayml[llm]"``) and the modules
# whose presence shows that a group is installed. The core install (ray, torch, numpy, scipy,
# pyarrow, matplotlib, tqdm, scikit-learn, cma) runs every method whose family needs no extra.
EXTRAS: dict[str, tuple[str, ...]] = {
    "optim": ("cvxpy", "clarabel", "networkx", "osqp", "highspy"),
    "llm": ("safetensors", "tokenizers", "mistral_common", "sentencepiece", "jsonschema", "pymoo", "chess"),
    "graphs": ("networkx",),
    "serve": ("fastapi", "starlette", "PIL"),
    "bench": ("transformers", "xgrammar", "llguidance", "outlines_core"),
    "hf": ("transformers", "gguf", "accelerate"),
    "compress": ("DracoPy", "constriction"),
    "text": ("transformers",),
    "diffusion": ("diffusers",),
}
# What each family needs beyond the core, for ``rayml run``; ``_BENCH_EXTRAS`` adds what a
# method's benchmark needs on top (its peers).
_FAMILY_EXTRAS: dict[str, tuple[str, ...]] = {
    "optim": ("optim",), "llm": ("llm",), "decoding": ("llm",), "kvcache": ("llm",), "quant": ("llm",),
    "merging": ("llm",), "alignment": ("llm",), "architectures": ("llm",), "graphs": ("graphs",),
    "agents": ("llm",), "adversarial": ("llm",), "compress": ("compress",),
}
# Methods of a family that need less than their family (checked by the light-install test).
_METHOD_EXTRAS: dict[str, tuple[str, ...]] = {"gs-poweropt": (), "multinoulli-scg": (),
                                              "poisonedeye": ("llm", "hf")}  # SmolLM2 generator at quick
_BENCH_EXTRAS: dict[str, tuple[str, ...]] = {"llm-substrate": ("bench",), "zapformat": ("bench",)}


class MissingExtra(ValueError):
    """A method needs an optional dependency group that is not installed."""


def extras_of(name: str, kind: str = "run") -> tuple[str, ...]:
    """The extras method ``name`` needs for ``rayml run`` (``kind="run"``) or ``rayml bench``."""
    m = get(name)
    extras = _METHOD_EXTRAS.get(name, _FAMILY_EXTRAS.get(m.family, ()))
    if kind == "bench":
        extras += tuple(e for e in _BENCH_EXTRAS.get(name, ()) if e not in extras)
    return extras


def require_extra(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise ``MissingExtra`` (one line: ``what`` needs the extra, the modules missing, the install
    command) unless ``modules`` (default: every module of ``EXTRAS[extra]``) are importable."""
    missing = [mod for mod in (EXTRAS[extra] if modules is None else modules) if importlib.util.find_spec(mod) is None]
    if missing:
        raise MissingExtra(f"{what} needs the [{extra}] extra (missing: {', '.join(missing)}): "
                           f"pip install \"rayml[{extra}]\"")


def check_extras(name: str, kind: str = "run") -> None:
    """Raise ``MissingExtra`` (one line naming the extra and the install command) before any work
    if a module of an extra that method ``name`` needs is not importable."""
    for extra in extras_of(name, kind):
        require_extra(extra, f"{kind} {name!r}")


def _m(name, ref, title, family, module, *, code=""):
    return Method(name=name, ref=ref, title=title + " (ICML 2025)", family=family, module=module, code=code)


_PLANNED = (
    _m('gs-poweropt', 'P1.1', 'Gaussian Smoothing with a Power-Transformed Objective (GS-PowerOpt)', 'optim', 'rayml.optim.gs_poweropt', code=''),
    _m('ssni', 'P1.2', 'Sample-specific Score-aware Noise Injection for diffusion-based purification', 'purify', 'rayml.purify.ssni', code='tmlr-group/SSNI'),
    _m('hybridgs', 'P1.3', 'HybridGS: 3DGS compression with standard point cloud coding', 'compress', 'rayml.compress.hybridgs', code='Qi-Yangsjtu/HybridGS'),
    _m('gdro-sparsity', 'P1.4', 'Beyond Minimax Rates in Group DRO via a Novel Notion of Sparsity', 'bandits', 'rayml.bandits.gdro', code=''),
    _m('dpsdp', 'P1.5', 'Reinforce LLM Reasoning through Multi-Agent Reflection (DPSDP)', 'alignment', 'rayml.alignment.dpsdp', code=''),
    _m('zapformat', 'P1.6', 'Earley-Driven Dynamic Pruning for Efficient Structured Decoding (ZapFormat, Formatron)', 'decoding', 'rayml.decoding', code='Dan-wanna-M/formatron, Dan-wanna-M/kbnf'),
    _m('cur-mgae', 'P1.7', 'Self-supervised Masked Graph Autoencoder via Structure-aware Curriculum', 'graphs', 'rayml.graphs.cur_mgae', code=''),
    _m('staggered-pde', 'P1.8', 'Geometric and Physical Constraints Synergistically Enhance Neural PDE Surrogates', 'pde', 'rayml.pde.staggered', code=''),
    _m('fdgen', 'P1.9', 'FDGen: A Fairness-Aware Graph Generation Model', 'graphs', 'rayml.graphs.fdgen', code=''),
    _m('multinoulli-scg', 'P1.10', 'Multinoulli Extension / Multinoulli-SCG for partition-constrained subset selection', 'optim', 'rayml.optim.multinoulli_scg', code=''),
    _m('l2d', 'P1.11', 'Large Language Models to Diffusion Finetuning', 'architectures', 'rayml.architectures.l2d', code='SakanaAI/L2D'),
    _m('midangle-replay', 'P1.12', 'Understanding the Forgetting of (Replay-based) Continual Learning via Feature Learning: Angle Matters', 'data', 'rayml.data.midangle_replay', code='iLearn-Lab/ICML25-Theory_CL'),
    _m('syncmind', 'P1.13', 'SyncMind: agents out of sync in collaborative software engineering (SyncBench)', 'agents', 'rayml.agents.syncmind', code='xhguo7/SyncMind'),
    _m('poisonedeye', 'P1.14', 'PoisonedEye: knowledge poisoning of vision-language RAG', 'adversarial', 'rayml.adversarial.poisonedeye', code='123000001212/PoisonedEye'),
    _m('fedag', 'P1.15', 'Enhancing Foundation Models with Federated Domain Knowledge Infusion (FedAG)', 'federated', 'rayml.federated.fedag', code='JackqqWang/fedag'),
    _m('emloc', 'P1.16', 'EMLoC: Efficient Multi-Modal Long Context Learning', 'kvcache', 'rayml.kvcache.emloc', code='Zehong-Ma/EMLoC'),
    _m('kl-bandit', 'P1.17', 'Logarithmic Regret for Online KL-Regularized Reinforcement Learning', 'bandits', 'rayml.bandits.kl_regularized', code=''),
    _m('moe-x', 'P1.18', 'Mixture of Experts Made Intrinsically Interpretable (MoE-X)', 'architectures', 'rayml.architectures.moe_x', code=''),
    _m('design-dsl', 'P1.19', 'Targeted control of fast prototyping through a domain-specific interface', 'agents', 'rayml.agents.design_dsl', code=''),
    _m('manifold-diffusion', 'P2.1', 'Efficient diffusion models for symmetric manifolds', 'generative', 'rayml.generative.manifold_diffusion', code=''),
    _m('implicit-bias', 'P2.2', 'Implicit bias of gradient descent for non-homogeneous deep networks', 'theory', 'rayml.theory.implicit_bias', code=''),
    _m('direct', 'P2.3', 'DIRECT: deep active learning under imbalance via optimal separation', 'data', 'rayml.data.direct', code='EfficientTraining/LabelBench (strategy/direct.py)'),
    _m('qp-gnn', 'P2.4', 'Expressive Power of GNNs for (Mixed-Integer) Quadratic Programs', 'optim', 'rayml.optim.qp_gnn', code='liujl11git/GNN-QP'),
    _m('graph-of-net', 'P2.5', 'Position-aware neural network for Graph-of-Net (N2GON)', 'graphs', 'rayml.graphs.graph_of_net', code=''),
    _m('cross-learning', 'P2.6', 'High-probability bound for cross-learning contextual bandits with unknown context distributions', 'bandits', 'rayml.bandits.cross_learning', code=''),
    _m('kernel-pde', 'P2.7', 'Toward Efficient Kernel-Based Solvers for Nonlinear PDEs', 'pde', 'rayml.pde.kernel_solver', code='XZT008/PDE-GP-Solver'),
    _m('equal-share', 'P2.8', 'Securing Equal Share: learning multiplayer symmetric games', 'bandits', 'rayml.bandits.equal_share', code=''),
    _m('selective-dpo', 'P2.9', 'Principled Data Selection for Alignment: the hidden risks of difficult examples (Selective DPO)', 'alignment', 'rayml.alignment.selective_dpo', code='glorgao/SelectiveDPO'),
    _m('parallel-sampling', 'P2.10', 'Parallel simulation for log-concave sampling, adaptive complexity O~(log d)', 'sampling', 'rayml.sampling.parallel', code=''),
    _m('epic', 'P2.11', 'EPIC: position-independent context caching (LegoLink)', 'kvcache', 'rayml.kvcache.epic', code='DerekHJH/epic'),
    _m('inrflow', 'P2.12', 'INRFlow: flow matching transformers in ambient space', 'generative', 'rayml.generative.inrflow', code='apple-aiml-research/ml-inrflow'),
    _m('merge3', 'P2.13', 'MERGE^3: efficient evolutionary merging on consumer hardware', 'merging', 'rayml.merging.merge3', code='tommasomncttn/mergenetic'),
    _m('stop', 'P2.14', 'Robust spatio-temporal centralized interaction for OOD learning (STOP)', 'graphs', 'rayml.graphs.stop', code='PoorOtterBob/STOP'),
    _m('eig-augment', 'P2.15', 'Simple randomized rounding for max-min eigenvalue augmentation', 'optim', 'rayml.optim.eig_augment', code=''),
    _m('diffadvmap', 'P2.16', 'DiffAdvMAP: natural unrestricted adversarial examples via diffusion posterior sampling', 'generative', 'rayml.generative.diffadvmap', code='Powerful-zhengzhao/DiffAdvMAP'),
    _m('gm-matching', 'P2.17', 'Geometric Median Matching for robust k-subset selection from noisy data', 'data', 'rayml.data.gm_matching', code='anishacharya/GM-Matching'),
    _m('ganq', 'P2.18', 'GANQ: GPU-adaptive non-uniform quantization for LLMs', 'quant', 'rayml.quant.ganq', code='Evans-Z/GANQ'),
    _m('cate-bounds', 'P2.19', 'Learning representations of instruments for partial identification of treatment effects', 'causal', 'rayml.causal.cate_bounds', code='JSchweisthal/ComplexPartialIdentif'),
)

def experiment_module(name: str) -> str:
    """The import path of method ``name``'s experiment (``rayml.experiments.<name with _>``)."""
    return "rayml.experiments." + name.replace("-", "_")


def _discover(m: Method) -> Method:
    # A method is implemented exactly when its experiment module exists; its ``Experiment``
    # carries the rest (what runs on Ray, what it was checked against), read by ``details``.
    if importlib.util.find_spec(experiment_module(m.name)) is None:
        return m
    return replace(m, status=IMPLEMENTED, experiment=experiment_module(m.name))


METHODS: tuple[Method, ...] = tuple(_discover(m) for m in _PLANNED)
# Shared substrates that several methods stand on and that have an experiment of their own
# (``rayml run llm-substrate``); they are not among the 38 papers and `rayml list` shows them apart.
SUBSTRATES: tuple[Method, ...] = tuple(_discover(m) for m in (
    Method(name="llm-substrate", ref="substrate", family="llm", module="rayml.llm",
           title="The embedded small causal LM, tokenizer and verifiable task suite (rayml)"),
))
_BY_NAME = {m.name: m for m in (*METHODS, *SUBSTRATES)}


def names() -> list[str]:
    """All registered method names, in METHODS.md order."""
    return [m.name for m in METHODS]


def get(name: str) -> Method:
    """The method called ``name``; ``KeyError`` listing the known names otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(names())}") from None


def implemented() -> list[Method]:
    """The methods (of the 38 papers) whose experiments can be run."""
    return [m for m in METHODS if m.status == IMPLEMENTED]


def runnable() -> list[Method]:
    """Everything ``rayml run`` can run: implemented methods, then implemented substrates."""
    return implemented() + [m for m in SUBSTRATES if m.status == IMPLEMENTED]


def details(m: Method) -> dict:
    """The registry row of ``m`` plus, if implemented, what runs on Ray and what it was checked against."""
    row = dict(m.__dict__)
    if m.status == IMPLEMENTED:
        exp = m.load_experiment()
        row["ray"] = exp.ray
        row["checked_against"] = exp.checked_against
    return row
