"""Time the GANQ Triton LUT kernel against the fp16 cuBLAS matmul on 7B-class layer shapes.

Usage (on a machine with a CUDA GPU and the ``triton`` package)::

    python scripts/ganq_gpu_bench.py [--reps 200] [--bits 3 4] [--batches 1 16] [--json out.json]

Shapes are LLaMA-2-7B's decoder-block layers (out_features x in_features): q/k/v/o 4096x4096,
gate/up 11008x4096, down 4096x11008. For every shape, bit width and batch it prints the median
CUDA-event time of ``x @ W^T`` in fp16 (cuBLAS) and of ``rayml.kernels.lut_gemm.lut_gemm_triton``
(packed indices + fp16 per-row tables), their ratio, and the largest absolute difference from
the fp16 product with the dequantized weight. The paper's 2.57x is end to end (OPT-6.7B, 1024
generated tokens, RTX 4090), not per layer.

Without CUDA (or without Triton) it prints ``SKIPPED: ...`` and exits with status 0.
``rayml bench ganq`` runs the same measurement as its GPU part.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--bits", type=int, nargs="+", default=[3, 4])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)

    from rayml.experiments.ganq import GPU_SHAPES, gpu_bench

    res = gpu_bench(args.bits, reps=args.reps, seed=args.seed, shapes=GPU_SHAPES, batches=args.batches)
    if res["status"] != "ran":
        print(f"SKIPPED: {res['status'].removeprefix('skipped: ')}")
        return 0
    print(f"device: {res['device']}")
    print(f"{'shape':>14} {'batch':>5} {'bits':>4} {'fp16 us':>9} {'lut us':>9} {'speedup':>8} {'max|err|':>9}")
    for key, d in res.items():
        if not isinstance(d, dict):
            continue
        shape, m, b = key.split("_")
        print(f"{shape:>14} {m[1:]:>5} {b[:-3]:>4} {d['fp16_s'] * 1e6:9.1f} {d['lut_s'] * 1e6:9.1f} "
              f"{d['speedup_vs_fp16']:8.2f} {d['max_abs_err']:9.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
