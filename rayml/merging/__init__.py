"""Model merging for the language-model methods.

Modules:
    operators: linear, task arithmetic, TIES, DARE and SLERP merges of state dicts.
    irt: 2PL item response theory with the mp-IRT and gmp-IRT performance estimators.
    merge3: MERGE^3's extract, estimate and evolve on Ray actors.
    hf_endpoints: Hugging Face Llama-family bases as bytes, LoRA endpoints, plain-text cross tasks.
"""
