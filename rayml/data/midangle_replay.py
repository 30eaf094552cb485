"""Mid-angle replay: the forgetting of replay-based continual learning, and buffers chosen by angle.

"Understanding the Forgetting of (Replay-based) Continual Learning via Feature Learning: Angle
Matters", ICML 2025 (authors' code: iLearn-Lab/ICML25-Theory_CL).

1. **The theory's setting** (``signal_task``, ``PatchNet``, ``forgetting_after``; the authors'
   ``synthetic/cl_cnn_replay_ewc.py``): an input is two patches in random order, the signal
   ``y * b_mu * v`` and Gaussian noise; task 1 has ``v = e_1``, task 2 the same vector rotated by an
   angle in the first two coordinates. The network is the two-layer CNN of feature-learning theory:
   ``2m`` filters over patches, activation ``ReLU(z)^3``, the mean over patches, class ``c``'s logit
   the sum of its ``m`` filters; full-batch GD on cross-entropy. Forgetting = task-1 test error after
   training on task 2 (from task 1's solution), without replay and with replay (task 2's data mixed
   with 10% of task 1's, in the proportion 90/10 of the authors' code).
2. **Buffer selection by angle** (``select_buffer``; the authors' ``real-world/sampling_mnist.py``):
   per class, the cosine of each (flattened) example with the class-mean vector; ``small`` keeps the
   ``k`` largest cosines (smallest angles), ``large`` the ``k`` smallest, ``mid`` the ``k`` around the
   median (the middle of the sorted list), ``random`` a uniform draw, ``reservoir`` reservoir sampling
   over the task's stream.
3. **Split digits** (``split_digits``, ``SmallCNN``, ``run_sequence``): ``load_digits`` split into
   the binary tasks 0/1, 2/3, 4/5, 6/7, 8/9; a small CNN trained task after task with experience replay
   from the buffers of earlier tasks; average final accuracy and average forgetting (best accuracy
   on a task minus its final accuracy).

Assumed: the angle is computed on raw pixels (as in the authors' MNIST script) and per class; the
CNN, epochs and learning rates of the digits sequence; replay mixes each batch of the current task
with an equal-sized batch from the buffer.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "RULES",
    "select_buffer",
    "signal_task",
    "PatchNet",
    "train_full_batch",
    "error_rate",
    "forgetting_after",
    "split_digits",
    "SmallCNN",
    "run_sequence",
    "CubeNet",
    "buffer_protocol",
]

RULES = ("mid", "small", "large", "random", "reservoir")


def _class_cosines(X: np.ndarray) -> np.ndarray:
    Xf = X.reshape(len(X), -1).astype(float)
    mean = Xf.mean(0)
    norms = np.linalg.norm(Xf, axis=1) * np.linalg.norm(mean)
    return (Xf @ mean) / np.where(norms > 0, norms, 1.0)


def select_buffer(X: np.ndarray, y: np.ndarray, per_class: int, rule: str, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``per_class`` examples of each class of ``y`` chosen by ``rule`` (one of ``RULES``)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not isinstance(per_class, (int, np.integer)) or per_class < 1:
        raise ValueError(f"per_class must be a positive integer, got {per_class!r}")
    X, y = np.asarray(X), np.asarray(y)
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y)}")
    out = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = min(per_class, idx.size)
        if rule in ("mid", "small", "large"):
            order = idx[np.argsort(-_class_cosines(X[idx]), kind="stable")]  # largest cosine first
            if rule == "small":
                pick = order[:k]
            elif rule == "large":
                pick = order[-k:]
            else:
                start = idx.size // 2 - k // 2 if idx.size > k else 0
                pick = order[start:start + k]
        elif rule == "random":
            pick = rng.choice(idx, size=k, replace=False)
        else:  # reservoir sampling over the class's stream, in stream order
            res = list(idx[:k])
            for t in range(k, idx.size):
                j = int(rng.integers(t + 1))
                if j < k:
                    res[j] = idx[t]
            pick = np.asarray(res)
        out.append(np.sort(pick))
    return np.concatenate(out)


# --- the theory's setting ------------------------------------------------------------------------

def signal_task(n: int, angle_deg: float, rng: np.random.Generator, *, patch_len: int = 100, b_mu: float = 8.0,
                noise: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` two-patch examples ``[y b_mu v, xi]`` (random patch order), ``v = R(angle) e_1``."""
    v = np.zeros(patch_len)
    a = np.deg2rad(angle_deg)
    v[0], v[1] = np.cos(a), np.sin(a)
    y = rng.choice([-1, 1], size=n)
    xi = rng.normal(0, noise, size=(n, patch_len))
    sig = y[:, None] * b_mu * v[None]
    first = rng.random(n) < 0.5
    X = np.where(first[:, None], np.concatenate([sig, xi], 1), np.concatenate([xi, sig], 1))
    return torch.tensor(X, dtype=torch.float32)[:, None, :], torch.tensor((y > 0).astype(np.int64))


class PatchNet(nn.Module):
    """Two-layer CNN over patches with ``ReLU^3`` (the feature-learning theory's network)."""

    def __init__(self, patch_len: int = 100, m: int = 10, *, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv1d(1, 2 * m, kernel_size=patch_len, stride=patch_len)
        self.m = m

    def forward(self, x):
        h = F.relu(self.conv(x)).pow(3).mean(2)
        return torch.stack([h[:, :self.m].sum(1), h[:, self.m:].sum(1)], 1)


def train_full_batch(model: nn.Module, X: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float) -> nn.Module:
    """Full-batch GD on cross-entropy."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step()
    return model


@torch.no_grad()
def error_rate(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Test error."""
    return float((model(X).argmax(1) != y).float().mean())


def forgetting_after(angle_deg: float, seed: int, *, n_train: int = 100, n_test: int = 1000, epochs: int = 1000,
                     lr: float = 0.01, replay_fraction: float = 0.1, m: int = 10, patch_len: int = 100,
                     b_mu: float = 8.0, noise: float = 1.0) -> dict:
    """Train task 1, then task 2 at ``angle_deg`` without and with replay; task-1 test errors."""
    rng = np.random.default_rng(seed)
    kw = dict(patch_len=patch_len, b_mu=b_mu, noise=noise)
    X1, y1 = signal_task(n_train + n_test, 0.0, rng, **kw)
    X2, y2 = signal_task(n_train + n_test, angle_deg, rng, **kw)
    tr1, te1 = (X1[:n_train], y1[:n_train]), (X1[n_train:], y1[n_train:])
    tr2 = (X2[:n_train], y2[:n_train])
    base = train_full_batch(PatchNet(patch_len, m, seed=seed % (2**31)), *tr1, epochs=epochs, lr=lr)
    before = error_rate(base, *te1)
    state = {k: v.clone() for k, v in base.state_dict().items()}

    def continue_on(X, y):
        net = PatchNet(patch_len, m)
        net.load_state_dict(state)
        return error_rate(train_full_batch(net, X, y, epochs=epochs, lr=lr), *te1)

    n_old = int(round(replay_fraction * n_train))
    keep2 = rng.permutation(n_train)[: n_train - n_old]
    keep1 = rng.permutation(n_train)[:n_old]
    Xm = torch.cat([tr2[0][keep2], tr1[0][keep1]])
    ym = torch.cat([tr2[1][keep2], tr1[1][keep1]])
    return {"angle": float(angle_deg), "error_before": before, "error_no_replay": continue_on(*tr2),
            "error_replay": continue_on(Xm, ym)}


# --- split digits ---------------------------------------------------------------------------------

def split_digits(seed: int, test_fraction: float = 0.3) -> list[dict]:
    """The five binary tasks of ``load_digits`` (0/1, ..., 8/9): train/test arrays per task."""
    from sklearn.datasets import load_digits

    d = load_digits()
    X, y = d.images.astype(np.float32) / 16.0, d.target
    rng = np.random.default_rng(seed)
    tasks = []
    for t in range(5):
        idx = rng.permutation(np.flatnonzero((y == 2 * t) | (y == 2 * t + 1)))
        n_te = int(round(test_fraction * idx.size))
        te, tr = idx[:n_te], idx[n_te:]
        tasks.append({"X": X[tr], "y": (y[tr] % 2).astype(np.int64), "X_test": X[te], "y_test": (y[te] % 2).astype(np.int64)})
    return tasks


class SmallCNN(nn.Module):
    """Two 3x3 conv layers and a linear head (a shared binary head across tasks)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 2)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def run_sequence(rule: str | None, seed: int, *, per_class: int = 10, epochs: int = 5, lr: float = 0.05,
                 batch: int = 32) -> dict:
    """Train the five tasks in order with experience replay from buffers chosen by ``rule`` (``None``:
    no replay); returns the accuracy matrix ``acc[i][j]`` (on task ``j`` after task ``i``), the
    average final accuracy and the average forgetting over the first four tasks."""
    if rule is not None and rule not in RULES:
        raise ValueError(f"rule must be None or one of {RULES}, got {rule!r}")
    tasks = split_digits(seed)
    rng = np.random.default_rng(seed + 1)
    torch.manual_seed(seed)
    net = SmallCNN()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    bx, by = [], []
    acc = np.zeros((5, 5))
    for i, task in enumerate(tasks):
        X = torch.tensor(task["X"])[:, None]
        y = torch.tensor(task["y"])
        for _ in range(epochs):
            perm = torch.tensor(rng.permutation(len(y)))
            for s in range(0, len(y), batch):
                b = perm[s:s + batch]
                xb, yb = X[b], y[b]
                if bx:
                    bxa, bya = torch.cat(bx), torch.cat(by)
                    r = torch.tensor(rng.choice(len(bya), size=min(len(b), len(bya)), replace=False))
                    xb, yb = torch.cat([xb, bxa[r]]), torch.cat([yb, bya[r]])
                opt.zero_grad()
                F.cross_entropy(net(xb), yb).backward()
                opt.step()
        if rule is not None:
            keep = select_buffer(task["X"], task["y"], per_class, rule, rng)
            bx.append(X[keep])
            by.append(y[keep])
        with torch.no_grad():
            for j, tj in enumerate(tasks[: i + 1]):
                acc[i, j] = float((net(torch.tensor(tj["X_test"])[:, None]).argmax(1) ==
                                   torch.tensor(tj["y_test"])).float().mean())
    forgetting = float(np.mean([acc[:, j].max() - acc[4, j] for j in range(4)]))
    return {"acc": acc.tolist(), "average_accuracy": float(acc[4].mean()), "forgetting": forgetting}


# --- the authors' buffer protocol (real-world/sampling_mnist.py), scaled to load_digits ----------

class CubeNet(nn.Module):
    """The authors' real-world network: per class, ``width`` bias-free linear units on the flattened
    pixels, activation ``ReLU(z)^3``, summed into the class's logit."""

    def __init__(self, d_in: int = 64, width: int = 256):
        super().__init__()
        self.lin = nn.ModuleList([nn.Linear(d_in, width, bias=False) for _ in range(2)])

    def forward(self, x):
        x = x.reshape(len(x), -1)
        return torch.stack([F.relu(lin(x)).pow(3).sum(1) for lin in self.lin], 1)


def _sgd_epochs(net: nn.Module, X: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float, batch: int,
                gen: torch.Generator) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for s in range(0, len(y), batch):
            b = perm[s:s + batch]
            opt.zero_grad()
            F.cross_entropy(net(X[b]), y[b]).backward()
            opt.step()


def buffer_protocol(rules, seed: int, *, per_class: int = 5, epochs: int = 3, lr: float = 0.01, width: int = 256,
                    batch: int = 64, first: int = 2, second: int = 4) -> dict:
    """The authors' ``sampling_mnist.py`` protocol on ``load_digits``: train ``CubeNet`` on task
    ``first`` (digits 4/5), then, from that one state, on task ``second`` (8/9) plus a buffer of
    ``per_class`` task-1 examples per class chosen by each rule; task-1 test accuracy after.

    ``rules``: names from ``RULES`` and ``"none"`` (no buffer). Every rule starts from the same
    trained state and sees the same batch order (paired); the buffer is added to task 2's training
    set, as in the authors' script. Returns ``{"before": acc, rule: acc, ...}``.
    """
    for r in rules:
        if r != "none" and r not in RULES:
            raise ValueError(f"rules must hold 'none' or names from {RULES}, got {r!r}")
    tasks = split_digits(seed)
    t1, t2 = tasks[first], tasks[second]
    X1, y1 = torch.tensor(t1["X"]), torch.tensor(t1["y"])
    X1t, y1t = torch.tensor(t1["X_test"]), torch.tensor(t1["y_test"])
    X2, y2 = torch.tensor(t2["X"]), torch.tensor(t2["y"])
    torch.manual_seed(seed % (2**31))
    net = CubeNet(X1[0].numel(), width)
    _sgd_epochs(net, X1, y1, epochs=epochs, lr=lr, batch=batch, gen=torch.Generator().manual_seed(seed % (2**31)))
    state = {k: v.clone() for k, v in net.state_dict().items()}

    def accuracy(m):
        with torch.no_grad():
            return float((m(X1t).argmax(1) == y1t).float().mean())

    out = {"before": accuracy(net)}
    for r in rules:
        Xb, yb = X2, y2
        if r != "none":
            keep = select_buffer(t1["X"], t1["y"], per_class, r, np.random.default_rng([seed, 17]))
            Xb, yb = torch.cat([X2, X1[keep]]), torch.cat([y2, y1[keep]])
        m = CubeNet(X1[0].numel(), width)
        m.load_state_dict(state)
        _sgd_epochs(m, Xb, yb, epochs=epochs, lr=lr, batch=batch, gen=torch.Generator().manual_seed(seed % (2**31) + 1))
        out[r] = accuracy(m)
    return out
