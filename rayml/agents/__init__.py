"""Agent methods.

Modules:
    syncmind: SyncMind's out-of-sync recovery harness (budgets, the collaborator, the metrics).
    syncmind_repos: the source repositories SyncBench-style scenarios are built from (generated
        repositories with version histories, and installed pure-Python stdlib modules).
    syncmind_bench: SyncBench construction (history tracing, restoring an older function version,
        fail-to-pass verification in a subprocess).
    syncmind_agents: scripted recovery agents of several strategies.
    syncmind_llm: a SmolLM2-135M agent that picks each turn's option.
"""
