"""The MiniLM graph rewrite: same vectors as the exported graph, fewer nodes, only exact patterns."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from engram.adapters.local.onnx_embedder import default_model_path
from engram.adapters.local.onnx_graph import _encode_varint, _fields, _Graph, _Node, _varint, simplify


@pytest.fixture(scope="module")
def original() -> bytes:
    return default_model_path().read_bytes()


def _run(model: bytes, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return np.asarray(hidden)


def test_the_rewritten_graph_gives_the_same_hidden_states(original: bytes) -> None:
    simplified, counts = simplify(original)
    assert counts == {"nan_guards": 6, "gelu": 6}  # one of each per layer of MiniLM-L6
    assert len(simplified) < len(original)
    rng = np.random.default_rng(7)
    ids = rng.integers(1000, 30000, size=(3, 40)).astype(np.int64)
    ids[:, 0], mask = 101, np.ones_like(ids)
    mask[1, 25:] = 0  # padded rows go through the attention mask, as in a real batch
    mask[2, 3:] = 0
    want, got = _run(original, ids, mask), _run(simplified, ids, mask)
    assert got.shape == want.shape == (3, 40, 384)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


def test_a_graph_without_the_patterns_comes_back_as_it_was(original: bytes) -> None:
    once, _ = simplify(original)
    twice, counts = simplify(once)
    assert counts == {"nan_guards": 0, "gelu": 0}
    assert twice == once


def test_protobuf_varints_round_trip() -> None:
    for value in (0, 1, 127, 128, 300, 2**31, 2**63 - 1):
        encoded = _encode_varint(value)
        assert _varint(memoryview(encoded), 0) == (value, len(encoded))
    message = b"\x08\x96\x01" + b"\x12\x03abc"  # field 1 = 150, field 2 = "abc"
    parsed = [(n, w, v if isinstance(v, int) else bytes(v)) for n, w, v, _ in _fields(message)]
    assert parsed == [(1, 0, 150), (2, 2, b"abc")]


def _gelu_nodes(divisor: str) -> list[_Node]:
    return [
        _Node("Div", inputs=["x", divisor], outputs=["d"]),
        _Node("Erf", inputs=["d"], outputs=["e"]),
        _Node("Add", inputs=["e", "one"], outputs=["a"]),
        _Node("Mul", inputs=["half", "a"], outputs=["h"]),
        _Node("Mul", inputs=["x", "h"], outputs=["y"]),
        _Node("MatMul", inputs=["y", "w"], outputs=["z"]),
    ]


def test_only_an_exact_gelu_is_fused() -> None:
    scalars = {"sqrt2": math.sqrt(2), "two": 2.0, "one": 1.0, "half": 0.5}
    exact = _Graph(_gelu_nodes("sqrt2"), scalars)
    assert exact.fuse_gelu() == 1
    fused = [n for n in exact.nodes if id(n) not in exact.dropped]
    assert [(n.op, n.domain, n.inputs, n.outputs) for n in fused] == [
        ("Gelu", "com.microsoft", ["x"], ["y"]),
        ("MatMul", "", ["y", "w"], ["z"]),
    ]
    other = _Graph(_gelu_nodes("two"), scalars)  # x * 0.5 * (1 + erf(x / 2)) is not GELU
    assert other.fuse_gelu() == 0 and not other.dropped


def test_only_a_nan_guard_filling_zero_is_dropped() -> None:
    def nodes(fill: str) -> list[_Node]:
        return [
            _Node("Softmax", inputs=["s"], outputs=["p"]),
            _Node("IsNaN", inputs=["p"], outputs=["n"]),
            _Node("Where", inputs=["n", fill, "p"], outputs=["g"]),
            _Node("MatMul", inputs=["g", "v"], outputs=["o"]),
        ]

    guard = _Graph(nodes("zero"), {"zero": 0.0, "big": 1e9})
    assert guard.drop_nan_guards() == 1
    assert guard.nodes[-1].inputs == ["p", "v"]
    other = _Graph(nodes("big"), {"zero": 0.0, "big": 1e9})
    assert other.drop_nan_guards() == 0 and other.nodes[-1].inputs == ["g", "v"]


def test_a_rewired_node_keeps_its_attributes() -> None:
    from engram.adapters.local.onnx_graph import _len_field

    attribute = _len_field(1, b"perm") + _len_field(8, b"\x00\x02\x01\x03")  # an AttributeProto's bytes
    raw = _len_field(1, b"g") + _len_field(2, b"o") + _len_field(3, b"t1") + _len_field(4, b"Transpose")
    raw += _len_field(5, attribute)
    node = _Node.parse(memoryview(raw))
    node.inputs, node.raw = ["p"], None  # what dropping a NaN guard in front of it does
    again = _Node.parse(memoryview(node.encode()))
    assert (again.op, again.inputs, again.outputs) == ("Transpose", ["p"], ["o"])
    assert again.rest == [_len_field(5, attribute)]
