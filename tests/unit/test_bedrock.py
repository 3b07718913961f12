"""The Bedrock path of extraction and reflection, with botocore's Stubber and recorded Converse responses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from engram.adapters.aws.bedrock import BedrockGenerator
from engram.families.memory.llm_extraction import extract_with_llm
from engram.kernel.errors import Unavailable
from engram.settings import Settings
from engram.wiring import Engram, build_local

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


def converse_response(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 120, "outputTokens": 40, "totalTokens": 160},
        "metrics": {"latencyMs": 420},
    }


@pytest.fixture
def stubbed() -> tuple[BedrockGenerator, Stubber]:
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return BedrockGenerator(MODEL, "us-east-1", client=client), Stubber(client)


EXPECTED = {"modelId": MODEL, "system": ANY, "messages": ANY, "inferenceConfig": ANY}


def test_extraction_uses_converse(stubbed: tuple[BedrockGenerator, Stubber]) -> None:
    gen, stub = stubbed
    answer = {
        "facts": [{"key": "role", "value": "CTO", "category": "identity", "correction": False}],
        "relations": [{"type": "manager", "target": "Dana"}],
        "instructions": [],
        "uncertainties": [],
    }
    stub.add_response("converse", converse_response("Here you go: " + json.dumps(answer)), EXPECTED)
    with stub:
        ex = extract_with_llm(gen, "I just got promoted to CTO; Dana is my manager.")
    stub.assert_no_pending_responses()
    assert [(f.key, f.value) for f in ex.facts] == [("role", "CTO")]
    assert [(r.type, r.target) for r in ex.relations] == [("manager", "Dana")]


def test_malformed_answer_falls_back_to_rules(stubbed: tuple[BedrockGenerator, Stubber]) -> None:
    gen, stub = stubbed
    stub.add_response("converse", converse_response("I cannot answer in JSON, sorry."), EXPECTED)
    with stub:
        ex = extract_with_llm(gen, "I live in Oslo.")
    assert [(f.key, f.value) for f in ex.facts] == [("location", "Oslo")]


def test_service_errors_become_unavailable(stubbed: tuple[BedrockGenerator, Stubber]) -> None:
    gen, stub = stubbed
    stub.add_client_error("converse", "ThrottlingException", "slow down", 429)
    with stub, pytest.raises(Unavailable):
        gen.generate("s", "p")


def test_memory_store_and_reflect_through_bedrock(tmp_path: Path, stubbed: tuple[BedrockGenerator, Stubber]) -> None:
    gen, stub = stubbed
    base = build_local(Settings(data_dir=tmp_path, embedder="none"))
    engram = Engram(base.settings, base.records, base.blobs, base.index, None, base.clock, generator=gen)
    _, principal = engram.identity.create_key(["acme"], "supervisor", ["org/acme"])
    _, writer = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(writer, "acme", frozenset({"agent"}), "memory_store")
    from engram.families.memory.service import Turn

    answer = {"facts": [{"key": "employer", "value": "Globex", "category": "identity"}]}
    stub.add_response("converse", converse_response(json.dumps(answer)), EXPECTED)
    stub.add_response("converse", converse_response("Work at Globex comes up repeatedly."), EXPECTED)
    with stub:
        out = engram.memory.store(caller, Turn("Starting Monday I'm with Globex."), None)
        sup = engram.identity.enter(principal, "acme", frozenset({"supervisor"}), "memory_reflect")
        refl = engram.memory.reflect(sup, "Globex", False, None)
    stub.assert_no_pending_responses()
    assert out["attributes"][0]["value"] == "Globex"
    assert refl["reflection"] == "Work at Globex comes up repeatedly." and refl["evidence"]


def test_bedrock_embedder_with_stubbed_invoke_model() -> None:
    import io

    import numpy as np
    from botocore.response import StreamingBody

    from engram.adapters.aws.bedrock_embedder import BedrockEmbedder

    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    emb = BedrockEmbedder(dim=4, client=client)
    stub = Stubber(client)
    for vec in ([3.0, 0.0, 4.0, 0.0], [0.0, 1.0, 0.0, 0.0]):
        payload = json.dumps({"embedding": vec, "inputTextTokenCount": 3}).encode()
        stub.add_response(
            "invoke_model",
            {"body": StreamingBody(io.BytesIO(payload), len(payload)), "contentType": "application/json"},
            {
                "modelId": "amazon.titan-embed-text-v2:0",
                "body": ANY,
                "contentType": "application/json",
                "accept": "application/json",
            },
        )
    with stub:
        out = emb.embed(["first", "second"])
    assert out.shape == (2, 4) and np.allclose(out[0], [0.6, 0.0, 0.8, 0.0]) and np.allclose(out[1], [0, 1, 0, 0])
    stub.add_client_error("invoke_model", "ThrottlingException", "slow down", 429)
    with stub, pytest.raises(Unavailable):
        emb.embed(["x"])


def test_the_graph_reads_a_source_with_converse_and_keeps_only_what_the_text_holds(
    stubbed: tuple[BedrockGenerator, Stubber],
) -> None:
    """Issue #23: with Bedrock configured the graph's names and relations come from the model; a name the text
    does not hold, a type the graph does not know and a relation between unknown names are dropped."""
    from engram.families.entities.graph_rules import read_with_llm

    gen, stub = stubbed
    answer = {
        "names": [{"name": "Jane Smith", "type": "Person"}, {"name": "Acme Corp", "type": "Organization"},
                  {"name": "Invented Person", "type": "Person"}, {"name": "Tuesday", "type": "Date"}],
        "relations": [{"head": "Jane Smith", "type": "works_at", "tail": "Acme Corp"},
                      {"head": "Jane Smith", "type": "admires", "tail": "Acme Corp"},
                      {"head": "Invented Person", "type": "works_at", "tail": "Acme Corp"}],
    }  # fmt: skip
    stub.add_response("converse", converse_response(json.dumps(answer)), EXPECTED)
    with stub:
        names, facts = read_with_llm(lambda s, p: gen.generate(s, p), "On Tuesday Jane Smith joined Acme Corp.")
    stub.assert_no_pending_responses()
    assert [(n.text, n.type) for n, _ in names] == [("Jane Smith", "Person"), ("Acme Corp", "Organization")]
    assert [(f.head.text, f.relation, f.tail.text) for f in facts] == [("Jane Smith", "works_at", "Acme Corp")]
    stub.add_response("converse", converse_response("no JSON here"), EXPECTED)
    with stub:
        names, facts = read_with_llm(lambda s, p: gen.generate(s, p), "Jane Smith works at Acme Corporation.")
    assert [(f.head.text, f.relation, f.tail.text) for f in facts] == [("Jane Smith", "works_at", "Acme Corporation")]
