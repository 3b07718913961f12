"""Two exact simplifications of the MiniLM ONNX graph, made on its protobuf bytes at load time.

The exported graph carries patterns ONNX Runtime's own optimiser does not fuse on CPU:
- a NaN guard after every attention softmax (`Where(IsNaN(p), 0, p)`). The model's attention mask adds
  the lowest finite float, never -inf, so a softmax of finite scores is never NaN: the guard is dead code
  that still costs an element-wise pass over every attention matrix (~7 % of a forward pass here);
- GELU written out as `x * (0.5 * (1 + erf(x / sqrt 2)))`, in an operand order ONNX Runtime's GELU
  fusion does not recognise. Replaced by the `com.microsoft` Gelu operator (same erf definition), which
  ONNX Runtime then fuses with the bias add before it (BiasGelu).
Together ~12 % more documents/s on cranfield (bench/RESULTS.md); the embeddings equal the original
graph's to float rounding (a test compares them).

One more rewrite, not exact, only when asked (`ENGRAM_EMBEDDER=minilm-int8`): each matrix product with int8
weights dequantised to float (`MatMul(x, Mul(Cast(w), scale))`) becomes the `com.microsoft`
DynamicQuantizeMatMul of the same int8 weights, which quantises the activations too and multiplies in
integers: 38 % more documents embedded a second, a query ~2 ms sooner, vectors within cosine ~0.99 of the
exact graph's (#25's measurements in bench/RESULTS.md).

Only the node list (and one opset import) is rewritten; everything else, the weights included, is copied
through as bytes. No `onnx` package is needed: this reads and writes the few protobuf fields involved.
A graph that does not have a pattern is returned as it was.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

MS_DOMAIN = "com.microsoft"
# field numbers of onnx.proto
MODEL_GRAPH, MODEL_OPSET = 7, 8
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_OUTPUT = 1, 5, 12
VALUE_NAME, VALUE_TYPE = 1, 2  # ValueInfoProto
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP, NODE_DOMAIN = 1, 2, 3, 4, 7
TENSOR_DIMS, TENSOR_TYPE, TENSOR_FLOATS, TENSOR_NAME, TENSOR_RAW = 1, 2, 4, 8, 9
OPSET_DOMAIN, OPSET_VERSION = 1, 2
FLOAT, INT8 = 1, 3  # TensorProto.DataType
LEN = 2  # wire type: length-delimited


def _varint(buf: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _fields(data: bytes | memoryview) -> Iterator[tuple[int, int, memoryview | int, memoryview]]:
    """(field number, wire type, value, the field's own encoded bytes) of each field of a message.
    Values are views into `data`: the weights are never copied while the graph is read."""
    buf = memoryview(data)
    at = 0
    while at < len(buf):
        start = at
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        value: memoryview | int
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 1:
            value, at = buf[at : at + 8], at + 8
        elif wire == LEN:
            size, at = _varint(buf, at)
            value, at = buf[at : at + size], at + size
        elif wire == 5:
            value, at = buf[at : at + 4], at + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value, buf[start:at]


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | LEN) + _encode_varint(len(payload)) + payload


@dataclass
class _Node:
    op: str = ""
    domain: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    raw: memoryview | None = None  # the original encoding; None once changed
    rest: list[bytes] = field(default_factory=list)  # attributes and the like, kept through a change

    @classmethod
    def parse(cls, raw: memoryview) -> _Node:
        node = cls(raw=raw)
        for number, _, value, encoded in _fields(raw):
            if isinstance(value, memoryview) and number == NODE_INPUT:
                node.inputs.append(bytes(value).decode())
            elif isinstance(value, memoryview) and number == NODE_OUTPUT:
                node.outputs.append(bytes(value).decode())
            elif isinstance(value, memoryview) and number == NODE_OP:
                node.op = bytes(value).decode()
            elif isinstance(value, memoryview) and number == NODE_DOMAIN:
                node.domain = bytes(value).decode()
            elif number != NODE_NAME:
                node.rest.append(bytes(encoded))
        return node

    def encode(self) -> bytes:
        if self.raw is not None:
            return bytes(self.raw)
        out = b"".join(_len_field(NODE_INPUT, i.encode()) for i in self.inputs)
        out += b"".join(_len_field(NODE_OUTPUT, o.encode()) for o in self.outputs)
        out += _len_field(NODE_NAME, f"engram_{self.op}_{self.outputs[0]}".encode())
        out += _len_field(NODE_OP, self.op.encode()) + b"".join(self.rest)
        return out + (_len_field(NODE_DOMAIN, self.domain.encode()) if self.domain else b"")


def _tensor_type(raw: memoryview) -> tuple[str, int, list[int]]:
    """(name, element type, dims) of an initializer; its data is not read."""
    name, dtype, dims = "", 0, []
    for number, _, v, _ in _fields(raw):
        if number == TENSOR_NAME and isinstance(v, memoryview):
            name = bytes(v).decode()
        elif number == TENSOR_TYPE and isinstance(v, int):
            dtype = v
        elif number == TENSOR_DIMS and isinstance(v, int):
            dims.append(v)
    return name, dtype, dims


def _scalar(raw: memoryview) -> tuple[str, float] | None:
    """(name, value) of a float tensor with one element, else None."""
    name, dtype, dims = _tensor_type(raw)
    values = [  # raw bytes, or one float packed or not
        v
        for n, _, v, _ in _fields(raw)
        if n in (TENSOR_RAW, TENSOR_FLOATS) and isinstance(v, memoryview) and len(v) == 4
    ]
    if dtype != FLOAT or not values or any(d != 1 for d in dims):
        return None
    return name, struct.unpack("<f", values[-1])[0]


class _Graph:
    def __init__(
        self, nodes: list[_Node], scalars: dict[str, float], tensors: dict[str, tuple[int, list[int]]] | None = None
    ) -> None:
        self.nodes, self.scalars = nodes, scalars
        self.tensors = tensors or {}  # initializer name -> (element type, dims)
        self.producer = {o: n for n in nodes for o in n.outputs}
        self.consumers: dict[str, list[_Node]] = {}
        for n in nodes:
            for i in n.inputs:
                self.consumers.setdefault(i, []).append(n)
        self.dropped: set[int] = set()

    def sole_consumer(self, name: str, op: str) -> _Node | None:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op == op and not users[0].domain else None

    def is_const(self, name: str, value: float, tolerance: float = 1e-6) -> bool:
        return name in self.scalars and abs(self.scalars[name] - value) <= tolerance

    def other(self, node: _Node, name: str) -> str | None:
        """The other input of a two-input node, given one of them."""
        if len(node.inputs) != 2 or name not in node.inputs:
            return None
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def drop_nan_guards(self) -> int:
        count = 0
        for where in self.nodes:
            if where.op != "Where" or where.domain or len(where.inputs) != 3:
                continue
            cond, zero, probs = where.inputs
            isnan = self.producer.get(cond)
            softmax = self.producer.get(probs)
            if (
                isnan is None
                or isnan.op != "IsNaN"
                or isnan.inputs != [probs]
                or len(self.consumers.get(cond, [])) != 1
                or softmax is None
                or softmax.op != "Softmax"
                or not self.is_const(zero, 0.0)
            ):
                continue
            for user in self.consumers.get(where.outputs[0], []):
                user.inputs = [probs if i == where.outputs[0] else i for i in user.inputs]
                user.raw = None
            self.dropped |= {id(where), id(isnan)}
            count += 1
        return count

    def fuse_gelu(self) -> int:
        count = 0
        for erf in self.nodes:
            if erf.op != "Erf" or erf.domain:
                continue
            div = self.producer.get(erf.inputs[0])
            if div is None or div.op != "Div" or len(div.inputs) != 2 or not self.is_const(div.inputs[1], math.sqrt(2)):
                continue
            x = div.inputs[0]
            add = self.sole_consumer(erf.outputs[0], "Add")
            half = add and self.sole_consumer(add.outputs[0], "Mul")
            out = half and self.sole_consumer(half.outputs[0], "Mul")
            if add is None or half is None or out is None:
                continue
            one, scale = self.other(add, erf.outputs[0]), self.other(half, add.outputs[0])
            if (
                len(self.consumers.get(div.outputs[0], [])) != 1
                or one is None
                or not self.is_const(one, 1.0)
                or scale is None
                or not self.is_const(scale, 0.5)
                or self.other(out, half.outputs[0]) != x
            ):
                continue
            self.dropped |= {id(div), id(erf), id(add), id(half)}
            out.op, out.domain, out.inputs, out.raw, out.rest = "Gelu", MS_DOMAIN, [x], None, []  # in place
            count += 1
        return count

    def quantize_activations(self) -> int:
        """`MatMul(x, Mul(Cast(w), scale))`, w an int8 initializer and scale a float one per column (or one for
        all): `DynamicQuantizeMatMul(x, w, scale)`, the Cast and the Mul dropped."""
        count = 0
        for mm in self.nodes:
            if mm.op != "MatMul" or mm.domain or len(mm.inputs) != 2:
                continue
            mul = self.producer.get(mm.inputs[1])
            if mul is None or mul.op != "Mul" or mul.domain or len(mul.inputs) != 2:
                continue
            cast = self.producer.get(mul.inputs[0])
            weight = self.tensors.get(cast.inputs[0]) if cast is not None and len(cast.inputs) == 1 else None
            scale = self.tensors.get(mul.inputs[1])
            if (
                cast is None
                or cast.op != "Cast"
                or cast.domain
                or weight is None
                or weight[0] != INT8
                or len(weight[1]) != 2
                or scale is None
                or scale[0] != FLOAT
                or scale[1] not in ([], [1], [weight[1][1]], [1, weight[1][1]])
                or len(self.consumers.get(mul.outputs[0], [])) != 1
                or len(self.consumers.get(cast.outputs[0], [])) != 1
            ):
                continue
            self.dropped |= {id(mul), id(cast)}
            mm.op, mm.domain, mm.raw, mm.rest = "DynamicQuantizeMatMul", MS_DOMAIN, None, []
            mm.inputs = [mm.inputs[0], cast.inputs[0], mul.inputs[1]]
            count += 1
        return count


def simplify(model: bytes, int8_activations: bool = False) -> tuple[bytes, dict[str, int]]:
    """The model with its NaN guards dropped and its GELUs fused (and, with `int8_activations`, its int8-weight
    matrix products multiplied in integers), and how many of each were found."""
    fields = list(_fields(model))
    graph_raw = next((v for n, _, v, _ in fields if n == MODEL_GRAPH and isinstance(v, memoryview)), None)
    if graph_raw is None:
        return model, {"nan_guards": 0, "gelu": 0, "int8_matmuls": 0}
    graph_fields = list(_fields(graph_raw))
    nodes = [_Node.parse(v) for n, _, v, _ in graph_fields if n == GRAPH_NODE and isinstance(v, memoryview)]
    scalars: dict[int, tuple[str, float]] = {}  # field position -> (name, value) of one-float initializers
    for at, (n, _, v, _) in enumerate(graph_fields):
        if n == GRAPH_INITIALIZER and isinstance(v, memoryview) and len(v) < 256 and (s := _scalar(v)):
            scalars[at] = s
    tensors = {}
    if int8_activations:
        for n, _, v, _ in graph_fields:
            if n == GRAPH_INITIALIZER and isinstance(v, memoryview):
                name, dtype, dims = _tensor_type(v)
                tensors[name] = (dtype, dims)
    graph = _Graph(nodes, dict(scalars.values()), tensors)
    counts = {"nan_guards": graph.drop_nan_guards(), "gelu": graph.fuse_gelu()}
    counts["int8_matmuls"] = graph.quantize_activations() if int8_activations else 0
    if not any(counts.values()):
        return model, counts
    kept = [n for n in nodes if id(n) not in graph.dropped]
    used = {i for n in kept for i in n.inputs}
    new_graph = bytearray()
    for at, (number, _, _, raw) in enumerate(graph_fields):
        if number == GRAPH_NODE:
            if kept:  # the nodes go where the first one was, in their order
                new_graph += b"".join(_len_field(GRAPH_NODE, n.encode()) for n in kept)
                kept = []
        elif at not in scalars or scalars[at][0] in used:  # the rewritten patterns' constants go
            new_graph += raw
    out = bytearray()
    for number, _, _, raw in fields:
        out += _len_field(MODEL_GRAPH, bytes(new_graph)) if number == MODEL_GRAPH else raw
    has_ms = any(
        n == MODEL_OPSET and isinstance(v, memoryview) and _opset_domain(v) == MS_DOMAIN for n, _, v, _ in fields
    )
    if (counts["gelu"] or counts["int8_matmuls"]) and not has_ms:
        opset = _len_field(OPSET_DOMAIN, MS_DOMAIN.encode()) + _encode_varint(OPSET_VERSION << 3) + b"\x01"
        out += _len_field(MODEL_OPSET, opset)
    return bytes(out), counts


def with_outputs(model: bytes, names: tuple[str, ...]) -> bytes:
    """The model with intermediate values `names` made graph outputs too, typed as its first output (an encoder
    layer's states: batch x sequence x hidden, as `last_hidden_state`). A run asks for the outputs it wants, so a
    run that asks only for the first pays nothing for them. Names the graph does not produce are left out."""
    fields = list(_fields(model))
    graph_raw = next((v for n, _, v, _ in fields if n == MODEL_GRAPH and isinstance(v, memoryview)), None)
    if graph_raw is None:
        return model
    graph_fields = list(_fields(graph_raw))
    produced = {o for n, _, v, _ in graph_fields if n == GRAPH_NODE and isinstance(v, memoryview)
                for o in _Node.parse(v).outputs}  # fmt: skip
    first = next((v for n, _, v, _ in graph_fields if n == GRAPH_OUTPUT and isinstance(v, memoryview)), None)
    typed = first and next((raw for n, _, _, raw in _fields(first) if n == VALUE_TYPE), None)
    wanted = [name for name in names if name in produced]
    if typed is None or not wanted:
        return model
    new_graph = bytes(graph_raw) + b"".join(
        _len_field(GRAPH_OUTPUT, _len_field(VALUE_NAME, name.encode()) + bytes(typed)) for name in wanted
    )
    return b"".join(_len_field(MODEL_GRAPH, new_graph) if n == MODEL_GRAPH else bytes(raw) for n, _, _, raw in fields)


def _opset_domain(raw: memoryview) -> str:
    names = (bytes(v).decode() for n, _, v, _ in _fields(raw) if n == OPSET_DOMAIN and isinstance(v, memoryview))
    return next(names, "")
