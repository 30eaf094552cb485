"""``PagedLayout`` of EPIC's vLLM connector: the layout inside a paged-cache block is read off a cache
writer, whatever it is (vLLM's CPU backend stores keys transposed), and refused when the writer is
lossy. Writers here are plain torch stand-ins for the kernels; the real CPU kernels are probed in
``tests/llm/test_vllm_cpu.py`` (vLLM venv)."""

from __future__ import annotations

import pytest
import torch

from rayml.kvcache.epic_vllm import PagedLayout, read_rows, write_rows

BS, H, D = 8, 3, 4


def transposed_writer(key, value, cache, slots):
    """Like vLLM 0.32's CPU ``vec`` kernel: per block and head, keys as [D, BS], then values [BS, D]."""
    nb = cache.shape[0]
    flat = cache.view(nb, H, 2 * BS * D)
    for i, s in enumerate(slots.tolist()):
        b, t = divmod(s, BS)
        for h in range(H):
            flat[b, h, torch.arange(D) * BS + t] = key[i, h]
            flat[b, h, BS * D + t * D + torch.arange(D)] = value[i, h]


def rows_last_writer(key, value, cache, slots):
    write_rows(cache, slots, torch.cat([key, value], -1), BS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("writer", [transposed_writer, rows_last_writer])
def test_probed_layout_reads_and_writes_what_the_writer_wrote(writer, dtype):
    lay = PagedLayout.probe(writer, (H, BS, 2 * D), dtype, BS, H, D)
    g = torch.Generator().manual_seed(0)
    n = 13
    key, value = torch.randn(n, H, D, generator=g).to(dtype), torch.randn(n, H, D, generator=g).to(dtype)
    slots = torch.randperm(4 * BS, generator=g)[:n]
    cache = torch.zeros(4, H, BS, 2 * D, dtype=dtype)
    writer(key, value, cache, slots)
    assert torch.equal(lay.read(cache, slots), torch.cat([key, value], -1))
    again = torch.zeros_like(cache)
    lay.write(again, slots, torch.cat([key, value], -1))
    assert torch.equal(again, cache)


def test_rows_last_is_the_layout_of_read_rows_and_the_transposed_one_is_not():
    cache = torch.zeros(3, H, BS, 2 * D)
    key, value = torch.randn(5, H, D), torch.randn(5, H, D)
    slots = torch.tensor([0, 7, 9, 16, 23])
    transposed_writer(key, value, cache, slots)
    rows = torch.cat([key, value], -1)
    assert torch.equal(PagedLayout.probe(transposed_writer, (H, BS, 2 * D), torch.float32, BS, H, D).read(cache, slots), rows)
    assert not torch.equal(read_rows(cache, slots, BS), rows)  # what the connector read before the probe
    assert torch.equal(PagedLayout.rows_last(BS, H, D).key_offsets,
                       PagedLayout.probe(rows_last_writer, (H, BS, 2 * D), torch.float32, BS, H, D).key_offsets)


def test_a_lossy_or_partial_writer_is_refused():
    def halves(key, value, cache, slots):  # stores values at half size: not a copy
        rows_last_writer(key, value / 2, cache, slots)

    def keys_only(key, value, cache, slots):
        rows_last_writer(key, torch.zeros_like(value), cache, slots)

    for bad in (halves, keys_only):
        with pytest.raises(NotImplementedError):
            PagedLayout.probe(bad, (H, BS, 2 * D), torch.float32, BS, H, D)
    with pytest.raises(NotImplementedError, match="not a plain key/value block"):
        PagedLayout.probe(rows_last_writer, (H, BS, 3 * D), torch.float32, BS, H, D)
