"""Agent methods.

Modules:
    syncmind: SyncMind's out-of-sync recovery harness (budgets, the collaborator, the metrics).
    syncmind_repos: the source repositories SyncBench-style scenarios are built from (generated
        repositories with version histories, and installed pure-Python stdlib modules).
    syncmind_bench: SyncBench construction (history tracing, restoring an older function version,
        fail-to-pass verification in a subprocess).
    syncmind_agents: scripted recovery agents of several strategies.
    syncmind_llm: a SmolLM2-135M agent that picks each turn's option.
    design_dsl: the domain-specific design interface (statements, operational mechanism, automated
        domain specification).
    design_dsl_kernel / design_dsl_domains / design_dsl_models: the parametric-CAD commands and
        voxel kernel; product domains, instruction suite and corpora; the retrieval parser and
        SmolLM2 decoders, and one episode.
"""
