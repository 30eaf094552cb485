"""KV-cache reuse and compression for the language-model methods.

Modules:
    epic: EPIC's position-independent context caching (chunk compile, LegoLink, CacheBlend).
    epic_vllm: EPIC as a vLLM KV connector (``KVConnectorBase_V1``), loaded lazily.
"""
