"""LUT GEMM: the Triton kernel (under TRITON_INTERPRET=1 on the CPU) against the torch reference,
the reference against a float64 dense product, packing, and bad input."""

import os
import sys

# Before triton is imported (rayml.kernels.lut_gemm imports it lazily, at the first launch): run
# kernels with numpy on the CPU.
_TRITON_PREIMPORTED = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from _timing import limit  # noqa: E402
from rayml.kernels import lut_gemm as lg  # noqa: E402

needs_interpreter = pytest.mark.skipif(
    not lg.HAS_TRITON or _TRITON_PREIMPORTED,
    reason="triton missing, or imported before TRITON_INTERPRET=1 could be set")

ODD_SHAPES = [(1, 19, 37), (5, 33, 70), (17, 65, 129), (3, 7, 10)]


def _weight(n, k, bits, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 2 ** bits, (n, k), generator=g)
    table = torch.randn(n, 2 ** bits, generator=g)
    return idx, table, g


def _dense64(x, idx, table):
    return x.double() @ torch.gather(table.double(), 1, idx).T


@pytest.mark.parametrize("bits", range(2, 9))
def test_pack_unpack_roundtrip(bits):
    idx, _, _ = _weight(6, 23, bits, bits)
    packed = lg.pack_indices(idx, bits)
    assert packed.dtype == torch.int32
    assert packed.shape == (6, -(-23 // (32 // bits)))
    assert torch.equal(lg.unpack_indices(packed, bits, 23), idx)


def test_pack_layout_is_little_end_first():
    idx = torch.tensor([[1, 2, 3, 15, 0, 0, 0, 15]])
    word = int(lg.pack_indices(idx, 4)[0, 0]) & 0xFFFFFFFF
    assert word == 1 | 2 << 4 | 3 << 8 | 15 << 12 | 15 << 28


@needs_interpreter
@pytest.mark.parametrize("bits", [3, 4])
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_triton_kernel_equals_reference_interpreted(bits, shape):
    m, n, k = shape
    idx, table, g = _weight(n, k, bits, seed=m * 1000 + n + bits)
    x = torch.randn(m, k, generator=g)
    packed = lg.pack_indices(idx, bits)
    y_kernel = lg.lut_gemm_triton(x, packed, table, bits, k)
    y_ref = lg.lut_gemm_reference(x, packed, table, bits, k)
    assert y_kernel.shape == (m, n)
    torch.testing.assert_close(y_kernel, y_ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(y_kernel.double(), _dense64(x, idx, table), rtol=1e-5, atol=1e-4)


@needs_interpreter
def test_triton_kernel_small_blocks_and_3d_input():
    idx, table, g = _weight(21, 45, 3, seed=7)
    x = torch.randn(2, 3, 45, generator=g)
    packed = lg.pack_indices(idx, 3)
    y = lg.lut_gemm_triton(x, packed, table, 3, 45, block_m=16, block_n=16, block_k=16)
    torch.testing.assert_close(y, lg.lut_gemm_reference(x, packed, table, 3, 45), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_reference_and_dequant_matmul_equal_dense_float64(bits):
    idx, table, g = _weight(40, 77, bits, seed=bits)
    x = torch.randn(9, 77, generator=g)
    packed = lg.pack_indices(idx, bits)
    want = _dense64(x, idx, table)
    torch.testing.assert_close(lg.lut_gemm_reference(x, packed, table, bits, 77).double(), want,
                               rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(lg.dequant_matmul(x, packed, table, bits, 77).double(), want, rtol=1e-5, atol=1e-4)
    # chunked scatter gives the same result
    torch.testing.assert_close(lg.lut_gemm_reference(x, packed, table, bits, 77, max_elements=700),
                               lg.lut_gemm_reference(x, packed, table, bits, 77))


def test_dispatcher_uses_reference_on_cpu():
    idx, table, g = _weight(5, 12, 4, seed=1)
    x = torch.randn(3, 12, generator=g)
    packed = lg.pack_indices(idx, 4)
    assert torch.equal(lg.lut_gemm(x, packed, table, 4, 12), lg.lut_gemm_reference(x, packed, table, 4, 12))


def test_weight_bytes():
    assert lg.weight_bytes(10, 64, 4, table_bytes_per_entry=2) == 10 * (4 * 8 + 2 * 16)
    assert lg.weight_bytes(1, 11, 3, table_bytes_per_entry=4) == 1 * (4 * 2 + 4 * 8)


def test_bad_input_rejected():
    idx, table, g = _weight(4, 10, 4, seed=0)
    packed = lg.pack_indices(idx, 4)
    x = torch.randn(2, 10)
    with pytest.raises(ValueError, match="bits"):
        lg.pack_indices(idx, 9)
    with pytest.raises(ValueError, match="bits"):
        lg.lut_gemm_reference(x, packed, table, 1, 10)
    with pytest.raises(ValueError, match=r"indices must lie"):
        lg.pack_indices(idx + 16, 4)
    with pytest.raises(ValueError, match="in_features"):
        lg.lut_gemm_reference(torch.randn(2, 11), packed, table, 4, 10)
    with pytest.raises(ValueError, match="table"):
        lg.lut_gemm_reference(x, packed, table[:, :8], 4, 10)
    with pytest.raises(ValueError, match="packed"):
        lg.lut_gemm_reference(x, packed.long(), table, 4, 10)


@needs_interpreter
def test_gpu_bench_code_path_runs_interpreted():
    """The GPU benchmark's code (pack, launch, compare with the dense product) on the CPU."""
    from rayml.experiments.ganq import gpu_bench

    res = gpu_bench([3, 4], reps=1, shapes=[(9, 21)], batches=[1, 3], device="cpu", dtype=torch.float32)
    assert res["status"] == "ran"
    keys = {f"9x21_m{m}_{b}bit" for m in (1, 3) for b in (3, 4)}
    assert keys <= set(res)
    for k in keys:
        assert res[k]["max_abs_err"] < 1e-5 and res[k]["lut_s"] > 0 and res[k]["speedup_vs_fp16"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_bench_skips_clearly_without_cuda():
    import subprocess
    import sys as _sys
    from pathlib import Path

    from rayml.experiments.ganq import gpu_bench

    assert gpu_bench()["status"].startswith("skipped: no CUDA device")
    script = Path(__file__).resolve().parents[2] / "scripts" / "ganq_gpu_bench.py"
    out = subprocess.run([_sys.executable, str(script)], capture_output=True, text=True, timeout=limit(120))
    assert out.returncode == 0 and out.stdout.startswith("SKIPPED: no CUDA device")
