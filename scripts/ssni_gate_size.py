"""The size of the ssni own-defence gate's per-defence min-p test on a flat plateau (R14, session 15).

A stationary two-state chain per (image, draw) outcome over the window's three schedule steps (k-2, k-1, k):
160 images x 2 draws, 80% correct, 8% of outcomes changing a step (correct -> wrong 0.05, wrong -> correct
0.2). An image's second draw copies its first draw's whole trajectory with probability ``together`` (0: draws
independent, 0.5, 1: always together; "start": the same start state, independent flips). For each draw the
session-14 min-p over (image, draw) outcomes (``_window_min_p``) and the session-15 min-p over images
(``_image_window``, ``_image_min_p``: the net change summed over images, each image's change
vector sign-flipped as a unit) are computed; printed: P(p < 0.025) and P(p < 0.05) with their
standard errors.

    python scripts/ssni_gate_size.py [--sims 20000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from rayml.experiments import ssni


def chains(rng, sims, images, draws, together, p_cw=0.05, p_wc=0.2):
    """``(sims, 3, draws, images)`` boolean states: stationary start, independent flips, draws tied per image."""
    pi = p_wc / (p_cw + p_wc)
    shape = (sims, draws, images)
    x = rng.random(shape) < pi
    states = [x]
    for _ in range(2):
        u = rng.random(shape)
        x = np.where(x, u >= p_cw, u < p_wc)
        states.append(x)
    out = np.stack(states, 1)
    if together == "start":
        start = out[:, 0, :1]
        # the same start state for both draws, independent flips: rerun the chain from draw 0's start
        x = np.repeat(start, draws, 1)
        states = [x]
        for _ in range(2):
            u = rng.random(shape)
            x = np.where(x, u >= p_cw, u < p_wc)
            states.append(x)
        return np.stack(states, 1)
    tie = rng.random((sims, images)) < float(together)
    for r in range(1, draws):
        out[:, :, r] = np.where(tie[:, None, :], out[:, :, 0], out[:, :, r])
    return out


def grouped(keys, fn):
    """``fn(key, index)`` over the rows of ``keys`` grouped by value."""
    out = np.ones(len(keys))
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    for g, key in enumerate(uniq):
        sel = np.nonzero(inverse == g)[0]
        out[sel] = fn(key, sel)
    return out


def sizes(sims, seed, together, images=160, draws=2):
    rng = np.random.default_rng(seed)
    s = chains(rng, sims, images, draws, together).astype(int)
    u, v = s[:, 1] - s[:, 0], s[:, 2] - s[:, 1]
    w = u + v
    flat = lambda x: x.reshape(sims, -1)  # noqa: E731
    # outcome level (session 14): split (a, o, c) and losses
    a, o, c = (flat(m).sum(1) for m in ((u == 0) & (v != 0), (u != 0) & (v != 0), (u != 0) & (v == 0)))
    l2, lw = flat(v < 0).sum(1), flat(w < 0).sum(1)
    old = grouped(np.c_[a, o, c], lambda k, i: ssni._min_p_lookup(k[0], k[1], k[2], l2[i], lw[i]))
    # image level (session 15): per-image net changes, the sign-flip test of their sums
    iv, iw = v.sum(1), w.sum(1)
    new = np.array([ssni._sum_lookup(ssni._change_types(iv[i], iw[i]), [iv[i].sum()], [iw[i].sum()])[0]
                    for i in range(sims)])
    return old, new


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(f"{'draws together':>15} | {'unit':>8} | P(p<0.025) (se) | P(p<0.05) (se)   [{args.sims} draws each]")
    for j, together in enumerate((0.0, "start", 0.5, 1.0)):
        old, new = sizes(args.sims, args.seed + j, together)
        for unit, p in (("outcome", old), ("image", new)):
            r1, r2 = float(np.mean(p < 0.025)), float(np.mean(p < 0.05))
            se = lambda r: np.sqrt(r * (1 - r) / args.sims)  # noqa: E731
            print(f"{str(together):>15} | {unit:>8} | {r1:.4f} ({se(r1):.4f}) | {r2:.4f} ({se(r2):.4f})")


if __name__ == "__main__":
    main()
