"""The grammar compile pool (``rayml.decoding.compile_worker.IsolatedCompiler``) and the byte cap of
``GrammarCache`` (issue 21): workers restarted after a memory error or a crash, those failures not
cached, a small grammar not stuck behind a slow one, a bounded queue, LRU eviction by bytes."""

import os
import re
import signal
import threading
import time

import pytest

from _timing import limit
from rayml.decoding import byte_vocabulary
from rayml.decoding.compile_worker import IsolatedCompiler
from rayml.decoding.logits import GrammarCache, GrammarError, GrammarLimits, GrammarTooComplex, compiled_nbytes
from rayml.decoding.matcher import GrammarMatcher
from rayml.decoding.spec import GrammarCompileFailed, normalize_spec

SMALL = {"type": "regex", "regex": "[ab]c"}
# determinising (a|b)*a(a|b){n} builds 2^(n+1) states: n = 14 takes ~2 s and 100 MB on an idle core,
# n = 15 needs more than 250 MB of address space
SLOW = {"type": "regex", "regex": "(a|b)*a(a|b){14}"}
MEDIUM = {"type": "regex", "regex": "(a|b)*a(a|b){13}"}
HUGE = {"type": "regex", "regex": "(a|b)*a(a|b){15}"}
LIMITS = GrammarLimits(compile_timeout_s=120, compile_memory_mb=250, max_dfa_states=10**7)
ROOMY = GrammarLimits(compile_timeout_s=120, compile_memory_mb=2000, max_dfa_states=10**7)


def _compile_children():
    """Pids of this process's compile-worker children (read from /proc)."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"rayml.decoding.compile_worker" in cmd:
            out.append(int(d))
    return out


def _timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def test_memory_limit_failure_is_not_cached_and_the_worker_is_restarted():
    cache = GrammarCache(byte_vocabulary(), isolate=True, capacity=2, limits=LIMITS)
    try:
        good = cache.get(MEDIUM)
        with pytest.raises(GrammarTooComplex, match=re.escape("memory limit (250 MB)")) as err:
            cache.get(HUGE)
        assert isinstance(err.value, GrammarCompileFailed)
        misses = cache.stats["misses"]
        with pytest.raises(GrammarTooComplex, match="memory limit"):
            cache.get(HUGE)
        assert cache.stats["misses"] == misses + 1  # compiled again, not answered from the cache
        # the previously good grammar, evicted, compiles again in a fresh worker
        cache.get(SMALL)
        cache.get({"type": "regex", "regex": "[cd]e"})
        again = cache.get(MEDIUM)
        assert again is not good and len(again.grammar.terminals[0].trans) == len(good.grammar.terminals[0].trans)
        # an invalid grammar's error is still cached
        for _ in range(2):
            with pytest.raises(GrammarError, match="invalid regex"):
                cache.get({"type": "regex", "regex": "(a"})
        assert cache.stats["misses"] == misses + 5
        assert cache._compiler.stats["memory_errors"] == 2 and cache._compiler.restarts == 2
    finally:
        cache.close()


def test_a_crashed_worker_is_replaced_and_its_failure_not_cached():
    cache = GrammarCache(byte_vocabulary(), isolate=True, limits=ROOMY)
    try:
        before = set(_compile_children())
        box = {}

        def run():
            try:
                box["out"] = cache.get(MEDIUM)
            except Exception as exc:  # noqa: BLE001
                box["out"] = exc

        th = threading.Thread(target=run)
        th.start()
        time.sleep(0.2)
        for pid in _compile_children():  # as the kernel's OOM killer would
            os.kill(pid, signal.SIGKILL)
        th.join(limit(60))
        assert isinstance(box["out"], GrammarTooComplex) and "crashed" in str(box["out"])
        g = cache.get(MEDIUM)  # the same grammar, compiled by a new worker
        assert GrammarMatcher(g).allowed_tokens().tolist() == [ord("a"), ord("b")]
        assert not (set(_compile_children()) & before)
    finally:
        cache.close()


def test_a_small_grammar_is_not_stuck_behind_a_slow_one():
    cache = GrammarCache(byte_vocabulary(), isolate=True, limits=ROOMY)
    try:
        _, alone = _timed(cache.get, {"type": "regex", "regex": "[cd]e"})
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("slow", _timed(cache.get, SLOW)[1]))
        th.start()
        time.sleep(0.2)
        _, small = _timed(cache.get, SMALL)
        th.join(limit(120))
        slow = box["slow"]
        print(f"small alone {alone:.3f} s, small beside a slow one {small:.3f} s, slow one {slow:.3f} s")
        assert small < slow / 4
    finally:
        cache.close()


def test_express_lane_answers_small_grammars_when_every_worker_is_busy_and_passes_big_ones_on():
    pool = IsolatedCompiler(workers=1, express_timeout_s=0.3)
    pool.start()
    slow, small = normalize_spec(SLOW), normalize_spec(SMALL)
    other = normalize_spec({"type": "regex", "regex": "(a|b)*b(a|b){13}"})
    try:
        box = {}
        th1 = threading.Thread(target=lambda: box.setdefault("a", _timed(pool.compile, slow, ROOMY)[1]))
        th1.start()
        time.sleep(0.2)
        th2 = threading.Thread(target=lambda: box.setdefault("b", pool.compile(other, ROOMY)))
        th2.start()  # the worker is busy: the express child takes it and passes it on past 0.3 s
        time.sleep(0.6)
        g, t_small = _timed(pool.compile, small, ROOMY)  # the worker is busy; the express child answers
        th1.join(limit(120))
        th2.join(limit(120))
        assert g.terminals and box["b"].terminals
        assert t_small < box["a"] / 4
        assert pool.stats["express_overflows"] == 1 and pool.stats["express"] >= 2
        assert pool.stats["timeouts"] == 0
    finally:
        pool.close()


def test_the_queue_is_bounded():
    pool = IsolatedCompiler(workers=1, max_queue=0, express=False)
    pool.start()
    try:
        th = threading.Thread(target=pool.compile, args=(normalize_spec(MEDIUM), ROOMY))
        th.start()
        time.sleep(0.2)
        with pytest.raises(GrammarCompileFailed, match="busy"):
            pool.compile(normalize_spec(SMALL), ROOMY)
        th.join(limit(120))
        assert pool.stats["refused"] == 1
        assert pool.compile(normalize_spec(SMALL), ROOMY).terminals  # free again
    finally:
        pool.close()


def test_a_worker_grown_past_the_recycle_size_is_restarted():
    pool = IsolatedCompiler(workers=1, express=False, recycle_rss_mb=1)
    try:
        pool.compile(normalize_spec(SMALL), ROOMY)
        assert pool.stats["recycled"] == 1 and pool.restarts == 1
        assert pool.compile(normalize_spec(SMALL), ROOMY).terminals
    finally:
        pool.close()


def test_cache_evicts_least_recently_used_grammars_by_bytes():
    vocab = byte_vocabulary()
    probe = GrammarCache(vocab, max_bytes=None)
    sizes = {n: compiled_nbytes(probe.get({"type": "regex", "regex": f"[a-z]{{{n}}}"})) for n in (10, 20, 30)}
    # the estimate grows with the DFA and covers at least its transition tables
    assert sizes[10] < sizes[20] < sizes[30]
    g = probe.get({"type": "regex", "regex": "[a-z]{30}"})
    assert sizes[30] >= sum(t.trans.nbytes for t in g.grammar.terminals)

    cache = GrammarCache(vocab, max_bytes=sizes[10] + sizes[20] + sizes[30] // 2)
    a = cache.get({"type": "regex", "regex": "[a-z]{10}"})
    cache.get({"type": "regex", "regex": "[a-z]{20}"})
    assert cache.get({"type": "regex", "regex": "[a-z]{10}"}) is a  # now the most recently used
    cache.get({"type": "regex", "regex": "[a-z]{30}"})  # over the cap: the {20} grammar goes
    assert len(cache) == 2 and cache.stats["evicted"] == 1
    assert cache.get({"type": "regex", "regex": "[a-z]{10}"}) is a
    assert cache.nbytes <= cache.max_bytes
    tiny = GrammarCache(vocab, max_bytes=1)  # the newest grammar is always kept
    tiny.get(SMALL)
    tiny.get({"type": "regex", "regex": "[cd]e"})
    assert len(tiny) == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        IsolatedCompiler(workers=0)
    with pytest.raises(ValueError, match="max_queue"):
        IsolatedCompiler(max_queue=-1)
    with pytest.raises(ValueError, match="express_timeout_s"):
        IsolatedCompiler(express_timeout_s=0)
    with pytest.raises(ValueError, match="max_bytes"):
        GrammarCache(byte_vocabulary(), max_bytes=0)
