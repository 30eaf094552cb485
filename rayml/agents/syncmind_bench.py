"""SyncBench construction: out-of-sync scenarios from version histories (SyncMind, ICML 2025).

Implements the construction of Sec. 3 of "SyncMind: Measuring Agent Out-of-Sync Recovery in
Collaborative Software Engineering" (Guo et al., ICML 2025) as the authors' code does it
(``syncbench/utilizer/tracer.py``, ``syncbench/constructor/*_builder.py``):

1. build the repository's history with the ``git`` CLI (in a temporary directory);
2. trace every function and method of every non-test module through the commits that touched its
   file (``git log -- path``, ``git show commit:path``) and collect its distinct older versions;
3. for each older version, restore it into the newest repository (only that function changes: the
   rest of the repository "moved on") and run the tests in a subprocess with a timeout;
4. keep the instance when the newest repository passes every test and the restored one fails some
   (fail-to-pass tests are the verifier; the authors' ``TEST_MODE="fp"``).

Each scenario is plain data (the files of the out-of-sync repository, the failing log, the
reference fix), so it travels to Ray workers by value. Assumed (not in the paper): instances are
labelled ``callee`` when a failing test names the out-of-sync function itself and ``caller`` when
the tests reach it only through other repository code; git commit dates and author are fixed so
that hashes (and records) are reproducible.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from typing import Mapping

__all__ = ["function_spans", "replace_function", "run_tests", "build_git_repo", "trace_histories",
           "construct_scenarios", "RUNNER"]

# ----------------------------------------------------------------------------------------------
# Functions and methods in source text


def function_spans(source: str) -> dict:
    """``{qualname: (first line, last line, text)}`` of the top-level functions and the methods of
    top-level classes in ``source`` (1-based lines, decorators included, text not dedented)."""
    return dict(_spans(source))


@functools.lru_cache(maxsize=8192)
def _spans(source: str) -> dict:
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    out = {}

    def add(node, prefix):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        out[prefix + node.name] = (first, node.end_lineno, "".join(lines[first - 1:node.end_lineno]))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node, "")
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(child, node.name + ".")
    return out


def replace_function(source: str, qualname: str, new_text: str) -> str:
    """``source`` with function ``qualname`` replaced by ``new_text`` (re-indented to its place).

    Raises:
        KeyError: ``qualname`` is not defined in ``source``.
        SyntaxError: ``new_text`` does not parse as a function definition.
    """
    spans = function_spans(source)
    if qualname not in spans:
        raise KeyError(f"qualname {qualname!r} is not a function or method of the file")
    first, last, old = spans[qualname]
    body = textwrap.dedent(new_text).strip("\n")
    parsed = ast.parse(body)
    if len(parsed.body) != 1 or not isinstance(parsed.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise SyntaxError("new_text must hold exactly one function definition")
    indent = old[: len(old) - len(old.lstrip())]
    indent = indent[indent.rfind("\n") + 1:]
    new_lines = [(indent + ln if ln.strip() else ln) for ln in body.split("\n")]
    lines = source.splitlines(keepends=True)
    return "".join(lines[: first - 1]) + "\n".join(new_lines) + "\n" + "".join(lines[last:])


# ----------------------------------------------------------------------------------------------
# Running a repository's tests in a subprocess

RUNNER = r'''
import importlib.util, json, os, sys, traceback, unittest
root = os.getcwd()
sys.path.insert(0, root)
results, logs = {}, []
for path in sys.argv[1:]:
    name = path[:-3].replace("/", ".")
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(root, path))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    except BaseException:
        results[path + "::<import>"] = "error"
        logs.append("ERROR " + path + "\n" + traceback.format_exc(limit=8))
        continue
    for attr in sorted(vars(mod)):
        fn = getattr(mod, attr)
        if attr.startswith("test_") and callable(fn) and not isinstance(fn, type):
            key = path + "::" + attr
            try:
                fn()
                results[key] = "passed"
            except BaseException:
                results[key] = "failed"
                logs.append("FAILED " + key + "\n" + traceback.format_exc(limit=8))
        elif isinstance(fn, type) and issubclass(fn, unittest.TestCase) and fn.__module__ == name:
            for case in unittest.defaultTestLoader.loadTestsFromTestCase(fn):
                key = path + "::" + attr + "." + case._testMethodName
                res = unittest.TestResult()
                case.run(res)
                bad = res.failures + res.errors
                results[key] = "passed" if not bad else "failed"
                logs.extend("FAILED " + key + "\n" + text for _, text in bad)
print(json.dumps({"results": results, "log": "\n".join(logs)}))
'''


def _write_tree(root: str, files: Mapping[str, str]) -> None:
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as fh:
            fh.write(text)


def run_tests(files: Mapping[str, str], test_paths, timeout_s: float = 10.0) -> dict:
    """Run the ``test_*`` functions of ``test_paths`` against the repository ``files``.

    The files are written to a fresh temporary directory and the tests run there in a separate
    Python process (isolated mode, no site packages) killed after ``timeout_s`` seconds.

    Returns:
        ``{"passed": int, "failed": int, "total": int, "ok": bool, "results": {test: status},
        "log": str}``: ``ok`` is True when every test passed; ``log`` is the failing tests'
        tracebacks with repository-relative paths (the error log an agent sees).
    """
    test_paths = sorted(test_paths)
    if not test_paths:
        raise ValueError("test_paths must name at least one test file")
    with tempfile.TemporaryDirectory(prefix="syncmind-") as root:
        _write_tree(root, files)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", RUNNER, *test_paths], cwd=root, env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
            payload = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
        except subprocess.TimeoutExpired:
            payload = {"results": {p + "::<timeout>": "error" for p in test_paths},
                       "log": f"TIMEOUT after {timeout_s:g} s"}
        except (json.JSONDecodeError, IndexError):
            payload = None
        if payload is None:
            payload = {"results": {p + "::<crash>": "error" for p in test_paths},
                       "log": "the test process crashed:\n" + proc.stderr[-2000:]}
        log = payload["log"].replace(root + os.sep, "").replace(root, ".")
        log = "\n".join(ln for ln in log.split("\n") if 'File "<string>"' not in ln)
    res = payload["results"]
    passed = sum(v == "passed" for v in res.values())
    return {"passed": passed, "failed": len(res) - passed, "total": len(res), "ok": passed == len(res) > 0,
            "results": res, "log": log}


# ----------------------------------------------------------------------------------------------
# Histories with the git CLI

_GIT_ENV = {"GIT_AUTHOR_NAME": "collaborator", "GIT_AUTHOR_EMAIL": "c@example.invalid",
            "GIT_COMMITTER_NAME": "collaborator", "GIT_COMMITTER_EMAIL": "c@example.invalid",
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def _git(root: str, *args: str, date: str | None = None) -> str:
    env = {"PATH": os.environ.get("PATH", ""), **_GIT_ENV}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    out = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=root,
                         env=env, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def build_git_repo(repo: Mapping, root: str) -> list[str]:
    """Commit ``repo["commits"]`` (full snapshots) into a new git repository at ``root``; returns
    the commit hashes, oldest first (dates and author fixed, so hashes are reproducible)."""
    os.makedirs(root, exist_ok=True)
    _git(root, "init", "-q")
    hashes = []
    previous: set = set()
    for i, commit in enumerate(repo["commits"]):
        for gone in previous - set(commit["files"]):
            os.remove(os.path.join(root, gone))
        _write_tree(root, commit["files"])
        previous = set(commit["files"])
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "--allow-empty", "-m", commit["message"],
             date=f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00")
        hashes.append(_git(root, "rev-parse", "HEAD").strip())
    return hashes


def _is_test(path: str) -> bool:
    return os.path.basename(path).startswith("test_")


def trace_histories(root: str) -> dict:
    """For every function/method of every non-test module at HEAD, its distinct older versions:
    ``{(path, qualname): [(commit hash, text), ...]}`` newest first (the authors'
    ``CodeHistoryTracer.get_function_history`` over ``git log -- path``)."""
    head_files = [p for p in _git(root, "ls-files").split() if p.endswith(".py") and not _is_test(p)]
    out = {}
    for path in sorted(head_files):
        head_text = _git(root, "show", f"HEAD:{path}")
        head_spans = function_spans(head_text)
        commits = _git(root, "log", "--format=%H", "--", path).split()
        for qualname, (_, _, gold) in head_spans.items():
            seen = {textwrap.dedent(gold)}
            versions = []
            for h in commits[1:]:
                try:
                    spans = function_spans(_git(root, "show", f"{h}:{path}"))
                except (RuntimeError, SyntaxError):
                    continue
                if qualname in spans:
                    text = textwrap.dedent(spans[qualname][2])
                    if text not in seen:
                        seen.add(text)
                        versions.append((h, text))
            if versions:
                out[(path, qualname)] = versions
    return out


def _references(test_text: str, name: str) -> bool:
    tree = ast.parse(test_text)
    return any((isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
               or (isinstance(n, ast.alias) and n.name == name) for n in ast.walk(tree))


def construct_scenarios(repo: Mapping, *, timeout_s: float = 10.0, max_per_repo: int | None = None) -> list[dict]:
    """SyncBench instances of one source repository (module docstring, steps 1-4).

    Args:
        repo: ``{"name", "kind", "commits": [{"message", "files"}]}`` (``syncmind_repos``).
        timeout_s: the test subprocess's time limit.
        max_per_repo: keep at most this many instances (the first in (file, function, commit)
            order), as the paper downsamples each repository for its evaluation subset.

    Returns:
        scenario dicts: ``id, repo, source_kind, type (callee|caller), path, qualname, commit,
        files`` (the out-of-sync repository), ``gold_source`` / ``stale_source`` (the function's
        current and restored text), ``test_paths`` (the verifier), ``initial_log``,
        ``gold_summary`` / ``initial_summary`` (passed / failed / total).
    """
    if not repo.get("commits"):
        raise ValueError("repo must hold at least one commit")
    with tempfile.TemporaryDirectory(prefix="syncbench-") as root:
        hashes = build_git_repo(repo, root)
        histories = trace_histories(root)
    head = dict(repo["commits"][-1]["files"])
    test_paths = sorted(p for p in head if _is_test(p) and p.endswith(".py"))
    if not test_paths:
        return []
    gold = run_tests(head, test_paths, timeout_s)
    if not gold["ok"]:
        return []  # the authors skip repositories whose current tests do not pass
    short = {h: f"c{i}" for i, h in enumerate(hashes)}
    scenarios = []
    for (path, qualname), versions in sorted(histories.items()):
        gold_text = textwrap.dedent(function_spans(head[path])[qualname][2])
        for h, old_text in versions:
            files = dict(head)
            files[path] = replace_function(head[path], qualname, old_text)
            res = run_tests(files, test_paths, timeout_s)
            if res["ok"]:
                continue  # not fail-to-pass: the old version still passes the tests
            failing = sorted({k.split("::")[0] for k, v in res["results"].items() if v != "passed"})
            name = qualname.split(".")[-1]
            callee = any(_references(head[t], name) for t in failing if t in head)
            scenarios.append({
                "id": f"{repo['name']}:{path}:{qualname}@{short[h]}",
                "repo": repo["name"], "source_kind": repo.get("kind", "generated"),
                "type": "callee" if callee else "caller", "path": path, "qualname": qualname,
                "commit": short[h], "files": files, "gold_source": gold_text, "stale_source": old_text,
                "test_paths": failing, "initial_log": res["log"],
                "gold_summary": {"passed": sum(v == "passed" for k, v in gold["results"].items()
                                               if k.split("::")[0] in failing),
                                 "failed": 0},
                "initial_summary": {"passed": res["passed"], "failed": res["failed"]},
            })
            if max_per_repo is not None and len(scenarios) >= max_per_repo:
                return scenarios
    return scenarios
