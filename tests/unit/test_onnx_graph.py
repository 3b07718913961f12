"""The MiniLM graph rewrite: same vectors as the exported graph, fewer nodes, only exact patterns."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from engram.adapters.local.onnx_embedder import default_model_path
from engram.adapters.local.onnx_graph import _encode_varint, _fields, _Graph, _Node, _varint, simplify
from engram.settings import Settings
from engram.wiring import default_embedder


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
    assert counts == {"nan_guards": 6, "gelu": 6, "int8_matmuls": 0}  # one of each per layer of MiniLM-L6
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
    assert counts == {"nan_guards": 0, "gelu": 0, "int8_matmuls": 0}
    assert twice == once


def test_int8_activations_multiply_the_same_weights_in_integers(original: bytes) -> None:
    exact, _ = simplify(original)
    quantised, counts = simplify(original, int8_activations=True)
    assert counts == {"nan_guards": 6, "gelu": 6, "int8_matmuls": 36}  # q, k, v, out, two feed-forward; 6 layers
    assert b"DynamicQuantizeMatMul" in quantised and b"DynamicQuantizeMatMul" not in exact
    assert len(quantised) < len(exact)  # the Casts and Muls that dequantised the weights are gone; no new weights
    rng = np.random.default_rng(11)
    ids = rng.integers(1000, 30000, size=(4, 48)).astype(np.int64)
    ids[:, 0], mask = 101, np.ones_like(ids)
    mask[3, 20:] = 0
    want, got = _run(exact, ids, mask), _run(quantised, ids, mask)
    assert got.shape == want.shape and np.isfinite(got).all()
    assert not np.allclose(got, want, atol=1e-4)  # not the exact graph: activations are quantised
    m = mask[..., None]
    pooled_want, pooled_got = (want * m).sum(1) / m.sum(1), (got * m).sum(1) / m.sum(1)
    cosines = (
        (pooled_want * pooled_got).sum(1) / np.linalg.norm(pooled_want, axis=1) / np.linalg.norm(pooled_got, axis=1)
    )
    assert cosines.min() > 0.97, cosines  # the same sentence vectors but for quantisation noise


def test_only_int8_weights_dequantised_per_column_are_rewritten() -> None:
    def graph(weight_type: int, scale_dims: list[int]) -> _Graph:
        nodes = [
            _Node("Cast", inputs=["w_q"], outputs=["w_f"]),
            _Node("Mul", inputs=["w_f", "w_scale"], outputs=["w"]),
            _Node("MatMul", inputs=["x", "w"], outputs=["y"]),
        ]
        return _Graph(nodes, {}, {"w_q": (weight_type, [384, 1536]), "w_scale": (1, scale_dims)})

    g = graph(3, [1, 1536])
    assert g.quantize_activations() == 1
    kept = [n for n in g.nodes if id(n) not in g.dropped]
    assert [(n.op, n.domain, n.inputs) for n in kept] == [
        ("DynamicQuantizeMatMul", "com.microsoft", ["x", "w_q", "w_scale"])
    ]
    assert graph(1, [1, 1536]).quantize_activations() == 0  # float weights: nothing to multiply in integers
    assert graph(3, [384, 1]).quantize_activations() == 0  # a scale per row is not what the operator takes


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


def test_the_setting_picks_int8_activations_and_keeps_the_vectors_comparable(tmp_path: Path) -> None:
    exact = default_embedder(Settings(data_dir=tmp_path, embedder="minilm"))
    fast = default_embedder(Settings(data_dir=tmp_path, embedder="minilm-int8"))
    assert exact is not None and fast is not None and fast is not exact
    assert fast.model_id == exact.model_id + "-int8-activations"
    texts = ["Alice moved to Lisbon in March.", "The boundary layer thickens downstream of the shock."]
    a, b = exact.embed(texts), fast.embed(texts)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert ((a * b).sum(axis=1) > 0.97).all()
    assert not np.allclose(a, b, atol=1e-5)


def test_an_exposed_layer_is_a_second_output_and_the_first_is_unchanged(original: bytes) -> None:
    from engram.adapters.local.onnx_graph import with_outputs

    simplified, _ = simplify(original)
    exposed = with_outputs(simplified, ("layer_norm_6", "no_such_value"))
    session = ort.InferenceSession(exposed, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "layer_norm_6"]
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    last, early = session.run(None, feeds)
    assert early.shape == last.shape == (1, 4, 384)
    assert not np.allclose(early, last)  # another layer's states, not a copy
    np.testing.assert_array_equal(last, _run(simplified, ids, np.ones_like(ids)))
    assert with_outputs(simplified, ("no_such_value",)) == simplified
