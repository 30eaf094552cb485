"""Graph-of-Net (GON) data: graphs whose nodes are graphs, and the graph constructors that build them.

Wang, Zhao, Wang, Shan, Li, Li, Huang, Wang, Pan and Wang, "N2GON: Neural Networks for
Graph-of-Net with Position Awareness", ICML 2025 (no public code). A GON is a graph
``GN = (V, E)`` whose every node ``v_i`` is itself a graph ``G_i = (X_i, A_i)`` (the paper's
Section 2 definition as quoted in the abstract: "representing each node as a graph itself").

This module builds the two GONs the rayml experiment uses (the paper's datasets are not offline):

- ``digits_gon``: every ``sklearn.datasets.load_digits`` image as a pixel / superpixel graph
  (``pixel_superpixel_graph``), the images linked by a kNN graph over their pixel vectors.
- ``molecule_gon``: small molecule-like random graphs (``random_molecule``: a random tree of
  typed atoms with a class motif), linked by a kNN graph over a composition / degree fingerprint.

Either GON's inter-graph edges are either built from the node contents (``edges="knn"``: a kNN
graph, whose information a content-only model recovers) or planted from the labels alone
(``edges="planted"``, ``planted_edges``: a planted partition with a set edge homophily, independent
of the contents given the labels), the setting of the paper's GONs, whose links (interactions,
citations) carry information the node-graphs' contents lack. Each GON also keeps a flat vector per
node-graph (``GraphOfNet.flat``: the image's pixels, the molecule's fingerprint) for the flat
baselines (logistic regression, a plain GCN).

Node-graphs are batched as one disjoint union (``collate``): node ids are offset per graph and
``batch[i]`` is node ``i``'s graph, the layout ``rayml.graphs.message_passing`` works on.

Assumed (the paper's data are citation / PPI / molecule GONs we cannot load here): every detail
of both generators below (block size, 8-neighbourhoods, motifs, fingerprints, k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GraphOfNet", "pixel_superpixel_graph", "knn_graph", "planted_edges", "collate", "random_molecule",
           "MOTIFS", "EDGE_KINDS", "digits_gon", "molecule_gon", "flat_features", "edge_homophily", "split_nodes"]

MOTIFS = ("triangle", "square", "trifluoro", "azide")
N_ATOM_TYPES = 4
EDGE_KINDS = ("knn", "planted")


@dataclass(frozen=True)
class GraphOfNet:
    """A GON: ``n_graphs`` node-graphs batched as one disjoint union, and the inter-graph edges.

    Attributes:
        x: (total nodes, d) features of every node of every node-graph.
        intra_edges: (2, E_intra) edges inside node-graphs, global node ids, each pair once.
        batch: (total nodes,) the node-graph each node belongs to.
        inter_edges: (2, E_inter) edges between node-graphs (ids ``0..n_graphs-1``), each pair once.
        y: (n_graphs,) the label of every node-graph (the GON's node classes).
        flat: (n_graphs, f) one flat vector per node-graph for the flat baselines, or ``None``
            (``flat_features`` then pools the node features).
    """

    x: np.ndarray
    intra_edges: np.ndarray
    batch: np.ndarray
    inter_edges: np.ndarray
    y: np.ndarray
    flat: np.ndarray | None = None

    @property
    def n_graphs(self) -> int:
        return int(self.y.shape[0])

    @property
    def n_classes(self) -> int:
        return int(self.y.max()) + 1


def _pairs_once(edges: np.ndarray) -> np.ndarray:
    """Undirected pairs with ``i < j``, sorted and unique; self loops dropped."""
    e = np.asarray(edges, dtype=np.int64).reshape(2, -1)
    e = np.sort(e, axis=0)
    e = e[:, e[0] != e[1]]
    if e.shape[1] == 0:
        return e
    return np.unique(e, axis=1)


def pixel_superpixel_graph(image: np.ndarray, block: int = 2, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One image as a pixel / superpixel graph (the GON node-graph of an image).

    Nodes: every pixel brighter than ``threshold`` (features ``[intensity, row, col, 1, 0]``, row
    and column scaled to [0, 1]) and one superpixel per ``block x block`` tile (features
    ``[mean intensity, centre row, centre col, 0, 1]``). Edges: pixel-pixel between 8-neighbours,
    pixel-superpixel for each pixel and its tile, superpixel-superpixel between 4-neighbouring tiles.

    assumed: square tiles as superpixels (SLIC is not needed on 8 x 8 images); intensities scaled
    to [0, 1] by the image's maximum possible value 16 when the input is ``load_digits`` data.

    Returns:
        ``(x, edges)``: (n_nodes, 5) features and (2, E) edges, each pair once with ``i < j``.
    """
    img = np.asarray(image, dtype=np.float64)
    if img.ndim != 2 or min(img.shape) < 1:
        raise ValueError(f"image must be a non-empty 2-d array, got shape {img.shape}")
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block!r}")
    if not np.all(np.isfinite(img)):
        raise ValueError("image must be finite")
    h, w = img.shape
    rs, cs = max(h - 1, 1), max(w - 1, 1)
    keep = np.argwhere(img > threshold)  # (P, 2) row, col in row-major order
    pid = -np.ones((h, w), dtype=np.int64)
    pid[keep[:, 0], keep[:, 1]] = np.arange(keep.shape[0])
    P = keep.shape[0]
    feats = [np.column_stack([img[keep[:, 0], keep[:, 1]], keep[:, 0] / rs, keep[:, 1] / cs,
                              np.ones(P), np.zeros(P)])]
    edges = []
    for dr, dc in ((0, 1), (1, -1), (1, 0), (1, 1)):  # each 8-neighbour pair once
        r2, c2 = keep[:, 0] + dr, keep[:, 1] + dc
        ok = (r2 >= 0) & (r2 < h) & (c2 >= 0) & (c2 < w)
        j = np.where(ok, pid[np.clip(r2, 0, h - 1), np.clip(c2, 0, w - 1)], -1)
        m = j >= 0
        edges.append(np.vstack([np.arange(P)[m], j[m]]))
    bh, bw = -(-h // block), -(-w // block)
    sid = P + np.arange(bh * bw).reshape(bh, bw)
    cent = []
    for a in range(bh):
        for b in range(bw):
            tile = img[a * block:(a + 1) * block, b * block:(b + 1) * block]
            r0, c0 = a * block + (tile.shape[0] - 1) / 2, b * block + (tile.shape[1] - 1) / 2
            cent.append([tile.mean(), r0 / rs, c0 / cs, 0.0, 1.0])
    feats.append(np.asarray(cent))
    edges.append(np.vstack([np.arange(P), sid[keep[:, 0] // block, keep[:, 1] // block]]))
    edges.append(np.vstack([sid[:, :-1].ravel(), sid[:, 1:].ravel()]))
    edges.append(np.vstack([sid[:-1, :].ravel(), sid[1:, :].ravel()]))
    return np.vstack(feats).astype(np.float32), _pairs_once(np.hstack(edges))


def knn_graph(features: np.ndarray, k: int) -> np.ndarray:
    """The symmetrised k-nearest-neighbour graph (Euclidean; ties broken by the lower index).

    Returns (2, E) edges, each pair once with ``i < j``: ``{i, j}`` is an edge when ``j`` is among
    ``i``'s ``k`` nearest other points or ``i`` among ``j``'s.
    """
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"features must be a 2-d array with >= 2 rows, got shape {f.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < f.shape[0]:
        raise ValueError(f"k must be an integer in [1, n - 1] = [1, {f.shape[0] - 1}], got {k!r}")
    if not np.all(np.isfinite(f)):
        raise ValueError("features must be finite")
    n = f.shape[0]
    sq = (f * f).sum(1)
    out = []
    for s in range(0, n, 1024):
        d = sq[s:s + 1024, None] + sq[None, :] - 2.0 * f[s:s + 1024] @ f.T
        d[np.arange(d.shape[0]), np.arange(s, s + d.shape[0])] = np.inf
        nn = np.argsort(d, axis=1, kind="stable")[:, :k]
        out.append(np.vstack([np.repeat(np.arange(s, s + d.shape[0]), k), nn.ravel()]))
    return _pairs_once(np.hstack(out))


def planted_edges(rng: np.random.Generator, y: np.ndarray, degree: float, homophily: float) -> np.ndarray:
    """Inter-graph edges planted from the labels alone (a planted partition over the classes).

    ``round(n * degree / 2)`` draws: a uniformly random node-graph ``i`` is linked, with probability
    ``homophily``, to a uniformly random other member of its class, else to a uniformly random
    member of another class (the only member of a class links across). Duplicates merge, so the mean degree is at most ``degree`` and the
    edge homophily close to ``homophily``. Given the labels the edges are independent of the
    node-graphs' contents: they carry label information the contents lack.

    Returns (2, E) edges, each pair once with ``i < j``.
    """
    y = np.asarray(y)
    if y.ndim != 1 or y.size < 2 or np.unique(y).size < 2:
        raise ValueError(f"y must be 1-d with >= 2 nodes and >= 2 classes, got shape {y.shape}")
    if isinstance(degree, bool) or not isinstance(degree, (int, float)) or not 0 < degree < y.size:
        raise ValueError(f"degree must be a number in (0, n), got {degree!r}")
    if isinstance(homophily, bool) or not isinstance(homophily, (int, float)) or not 0 <= homophily <= 1:
        raise ValueError(f"homophily must lie in [0, 1], got {homophily!r}")
    m = int(round(y.size * degree / 2))
    src = rng.integers(y.size, size=m)
    same = rng.random(m) < homophily
    dst = np.empty(m, dtype=np.int64)
    for k in range(m):
        pool = np.flatnonzero((y == y[src[k]]) if same[k] else (y != y[src[k]]))
        pool = pool[pool != src[k]]
        if pool.size == 0:  # the only member of its class: an edge to another class
            pool = np.flatnonzero(y != y[src[k]])
        dst[k] = pool[rng.integers(pool.size)]
    return _pairs_once(np.vstack([src, dst]))


def collate(graphs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch node-graphs ``[(x_i, edges_i), ...]`` as one disjoint union ``(x, edges, batch)``."""
    if not graphs:
        raise ValueError("graphs must hold at least one (x, edges) pair")
    xs, es, bs, off = [], [], [], 0
    for g, (x, e) in enumerate(graphs):
        x = np.asarray(x)
        e = np.asarray(e, dtype=np.int64).reshape(2, -1)
        if x.ndim != 2 or x.shape[0] < 1:
            raise ValueError(f"graph {g}: x must be 2-d with >= 1 node, got shape {x.shape}")
        if e.size and (e.min() < 0 or e.max() >= x.shape[0]):
            raise ValueError(f"graph {g}: edges refer to nodes outside its {x.shape[0]} nodes")
        xs.append(x)
        es.append(e + off)
        bs.append(np.full(x.shape[0], g, dtype=np.int64))
        off += x.shape[0]
    return np.vstack(xs).astype(np.float32), np.hstack(es), np.concatenate(bs)


def random_molecule(rng: np.random.Generator, label: int, *, n_atoms: tuple[int, int] = (10, 18),
                    motif_prob: float = 0.7, comp_signal: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """A small molecule-like graph of class ``label`` (one-hot atom types, valence <= 4).

    A random tree of typed atoms (each new atom bonds to a random atom with free valence), atom
    types drawn from a base composition shifted towards type ``label % 4`` by ``comp_signal``, and
    with probability ``motif_prob`` the class motif attached to a random atom: ``MOTIFS[label]`` =
    a 3-ring, a 4-ring, three type-2 leaves on one atom (a CF3-like group), or a chain of three
    type-1 atoms (an azide-like group). Without its motif a graph's class shows only in its
    composition (and, in the GON, in its neighbours).

    assumed: every number here; the paper's molecule GONs are not available offline.
    """
    if not 0 <= label < len(MOTIFS):
        raise ValueError(f"label must lie in [0, {len(MOTIFS)}), got {label!r}")
    lo, hi = n_atoms
    if not 2 <= lo <= hi:
        raise ValueError(f"n_atoms must be (lo, hi) with 2 <= lo <= hi, got {n_atoms!r}")
    if not 0 <= motif_prob <= 1 or not 0 <= comp_signal <= 1:
        raise ValueError("motif_prob and comp_signal must lie in [0, 1]")
    base = np.array([0.55, 0.2, 0.15, 0.1])
    p = (1 - comp_signal) * base + comp_signal * np.eye(N_ATOM_TYPES)[label % N_ATOM_TYPES]
    n = int(rng.integers(lo, hi + 1))
    types = list(rng.choice(N_ATOM_TYPES, size=n, p=p))
    deg = [0] * n
    edges = []
    for i in range(1, n):
        free = [j for j in range(i) if deg[j] < 4]
        j = int(free[rng.integers(len(free))])
        edges.append((j, i))
        deg[i] += 1
        deg[j] += 1

    def add(t, to):
        types.append(t)
        deg.append(1)
        deg[to] += 1
        edges.append((to, len(types) - 1))
        return len(types) - 1

    if rng.random() < motif_prob:
        free = [j for j in range(n) if deg[j] <= 1] or list(range(n))
        a = int(free[rng.integers(len(free))])
        name = MOTIFS[label]
        if name in ("triangle", "square"):
            ring = [add(0, a)]
            for _ in range(2 if name == "triangle" else 3):
                ring.append(add(0, ring[-1]))
            edges.append((ring[0], ring[-1]))  # close a 3- or 4-ring hanging off atom a
            deg[ring[0]] += 1
            deg[ring[-1]] += 1
        elif name == "trifluoro":
            c = add(0, a)
            for _ in range(3):
                add(2, c)
        else:
            b = add(1, a)
            b = add(1, b)
            add(1, b)
    x = np.eye(N_ATOM_TYPES, dtype=np.float32)[np.asarray(types)]
    return x, _pairs_once(np.asarray(edges, dtype=np.int64).T)


def edge_homophily(edges: np.ndarray, y: np.ndarray) -> float:
    """The fraction of edges joining two nodes of the same class."""
    e = np.asarray(edges)
    return float(np.mean(y[e[0]] == y[e[1]])) if e.shape[1] else float("nan")


def _inter(rng, edges: str, flat: np.ndarray, y: np.ndarray, k: int, degree: float, homophily: float) -> np.ndarray:
    if edges not in EDGE_KINDS:
        raise ValueError(f"edges must be one of {EDGE_KINDS}, got {edges!r}")
    return knn_graph(flat, k) if edges == "knn" else planted_edges(rng, y, degree, homophily)


def digits_gon(rng: np.random.Generator, n_images: int, k: int = 5, *, edges: str = "knn", degree: float = 6.0,
               homophily: float = 0.5) -> GraphOfNet:
    """``n_images`` random ``load_digits`` images as pixel / superpixel graphs, linked by a kNN graph
    over the images' pixel vectors (``edges="knn"``, ``k`` neighbours, symmetrised) or by edges
    planted from the labels (``edges="planted"``, ``planted_edges(degree, homophily)``)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    if isinstance(n_images, bool) or not isinstance(n_images, (int, np.integer)) or not 20 <= n_images <= len(d.target):
        raise ValueError(f"n_images must be an integer in [20, {len(d.target)}], got {n_images!r}")
    idx = np.sort(rng.choice(len(d.target), size=int(n_images), replace=False))
    graphs = [pixel_superpixel_graph(d.images[i] / 16.0) for i in idx]
    x, e, b = collate(graphs)
    y, flat = d.target[idx].astype(np.int64), (d.data[idx] / 16.0).astype(np.float32)
    return GraphOfNet(x=x, intra_edges=e, batch=b, inter_edges=_inter(rng, edges, flat, y, k, degree, homophily),
                      y=y, flat=flat)


def _fingerprint(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    deg = np.bincount(e.ravel(), minlength=x.shape[0])
    return np.concatenate([x.mean(0), np.bincount(np.minimum(deg, 4), minlength=5) / x.shape[0]])


def molecule_gon(rng: np.random.Generator, n_graphs: int, k: int = 5, motif_prob: float = 0.7,
                 comp_signal: float = 0.15, *, edges: str = "knn", degree: float = 6.0,
                 homophily: float = 0.5) -> GraphOfNet:
    """``n_graphs`` random molecules (balanced classes ``0..3``, ``random_molecule``) linked by a
    kNN graph over a similarity fingerprint: atom-type fractions and the degree histogram
    (``edges="knn"``), or by edges planted from the labels (``edges="planted"``).

    assumed: the fingerprint (a WL-1 style composition / degree profile) and ``k``.
    """
    if isinstance(n_graphs, bool) or not isinstance(n_graphs, (int, np.integer)) or n_graphs < 20:
        raise ValueError(f"n_graphs must be an integer >= 20, got {n_graphs!r}")
    y = rng.permutation(np.arange(int(n_graphs)) % len(MOTIFS))
    graphs = [random_molecule(rng, int(c), motif_prob=motif_prob, comp_signal=comp_signal) for c in y]
    fp = np.vstack([_fingerprint(x, e) for x, e in graphs]).astype(np.float32)
    x, e, b = collate(graphs)
    y = y.astype(np.int64)
    return GraphOfNet(x=x, intra_edges=e, batch=b, inter_edges=_inter(rng, edges, fp, y, k, degree, homophily),
                      y=y, flat=fp)


def flat_features(gon: GraphOfNet) -> np.ndarray:
    """One flat vector per node-graph: ``gon.flat`` when the GON has it, else the node features'
    per-graph mean and max with the node-degree histogram (``_fingerprint``'s degree part)."""
    if gon.flat is not None:
        f = np.asarray(gon.flat, dtype=np.float32)
        if f.shape[0] != gon.n_graphs or f.ndim != 2:
            raise ValueError(f"gon.flat must be (n_graphs, f) = ({gon.n_graphs}, f), got {f.shape}")
        return f
    out = []
    for g in range(gon.n_graphs):
        idx = np.flatnonzero(gon.batch == g)
        m = np.isin(gon.intra_edges[0], idx)
        deg = np.bincount(gon.intra_edges[:, m].ravel() - idx[0], minlength=idx.size)
        xg = gon.x[idx]
        out.append(np.concatenate([xg.mean(0), xg.max(0), np.bincount(np.minimum(deg, 4), minlength=5) / idx.size]))
    return np.vstack(out).astype(np.float32)


def split_nodes(rng: np.random.Generator, y: np.ndarray, per_class: int, n_val: int) -> dict:
    """Semi-supervised split of the GON's nodes: ``per_class`` labelled nodes of each class, ``n_val``
    validation nodes, the rest test."""
    y = np.asarray(y)
    classes = np.unique(y)
    if isinstance(per_class, bool) or not isinstance(per_class, (int, np.integer)) or per_class < 1:
        raise ValueError(f"per_class must be an integer >= 1, got {per_class!r}")
    # a class with fewer members keeps at least one unlabelled
    train = np.concatenate([rng.choice(np.flatnonzero(y == c), size=min(per_class, max(int((y == c).sum()) - 1, 1)),
                                       replace=False) for c in classes])
    rest = rng.permutation(np.setdiff1d(np.arange(y.shape[0]), train))
    if n_val >= rest.size:
        raise ValueError(f"n_val must leave test nodes: {n_val} >= {rest.size}")
    return {"train": np.sort(train), "val": np.sort(rest[:n_val]), "test": np.sort(rest[n_val:])}
