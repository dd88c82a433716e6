"""Rewrite an ONNX file's graph without loading its weights into Python: the large initializers
are copied from the file as raw protobuf records, in chunks, while only the small parts (nodes,
inputs, outputs, small constants) are parsed, changed and written again.

A 550 MB model's batch copy is then a read and a write of its bytes, not a parse, a deep copy and
two serialisations of the whole graph. Protobuf allows a message's fields in any order and a
repeated field's records apart from each other, so the file written is the small graph's
serialisation followed by the large initializers' records unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import lazy
from ..progress import progress_interval

if TYPE_CHECKING:
    import onnx
else:
    onnx = lazy.module("onnx")  # imported at its first use

log = logging.getLogger(__name__)

MODEL_GRAPH = 7  # ModelProto.graph
GRAPH_INITIALIZER = 5  # GraphProto.initializer
GRAPH_VALUE_INFO = 13  # GraphProto.value_info
TENSOR_NAME = 8  # TensorProto.name
TENSOR_RAW_DATA = 9  # TensorProto.raw_data
# TensorProto's value fields: float, int32, string, int64, raw, double, uint64 data
TENSOR_VALUES = frozenset({4, 5, 6, 7, 9, 10, 11})
LARGE = 64 << 10  # an initializer record above this many bytes is copied, not parsed
CHUNK = 8 << 20

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WireError(ValueError):
    """The file is not a well-formed ONNX protobuf."""


def _varint(buf: mmap.mmap | bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("a varint runs past the end of the file")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf: mmap.mmap | bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, record start, value start, value end) of each field between start and end;
    for a length-delimited field the value is its payload."""
    pos = start
    while pos < end:
        record = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, pos = _varint(buf, pos)
            yield number, record, record, pos
            continue
        if wire == _LEN:
            size, pos = _varint(buf, pos)
            value = pos
            pos += size
        elif wire == _I64:
            value, pos = pos, pos + 8
        elif wire == _I32:
            value, pos = pos, pos + 4
        else:
            raise WireError(f"wire type {wire} (field {number}) is not used by ONNX")
        if pos > end:
            raise WireError(f"field {number} runs past the end of its message")
        yield number, record, value, pos


def _tensor_name(buf: mmap.mmap, start: int, end: int) -> str:
    for number, _, value, value_end in _fields(buf, start, end):
        if number == TENSOR_NAME:
            return bytes(buf[value:value_end]).decode("utf-8")
    raise WireError("an initializer without a name")


def _progress(total: int, what: str) -> Callable[[int], None]:
    """A byte counter: a bar on a terminal, otherwise a log line every progress interval."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc=what, file=sys.stderr, leave=False)

        def advance(done: int) -> None:
            bar.update(done)
            if bar.n >= total:
                bar.close()

        return advance
    written = [0]
    due = [time.monotonic() + progress_interval()]

    def advance_lines(done: int) -> None:
        written[0] += done
        if time.monotonic() >= due[0]:
            due[0] = time.monotonic() + progress_interval()
            log.info("%s: %d of %d MiB", what, written[0] >> 20, total >> 20)

    return advance_lines


def rewrite_graph(
    src: Path,
    dst: Path,
    change: Callable[[onnx.ModelProto], onnx.ModelProto],
    *,
    what: str = "rewriting",
    check: bool = False,
) -> str:
    """Write `change(model of src)` to `dst` and return the sha256 of what was written.

    With `check`, what is written is checked as `onnx.checker.check_model` checks the whole file,
    without loading its weights: the changed graph, with each large initializer declared by its
    name, type and shape, and each large initializer's own record (one value field, raw data of
    the size its shape and type need). A large initializer stored otherwise (typed fields,
    external data) makes it check the file written as a whole.

    `change` sees the model with every large initializer as a name-only placeholder (no data, no
    dims): it may read their names and rewrite nodes, inputs, outputs, value_info and small
    initializers, but must keep the placeholders, in order, after the other initializers.
    """
    try:
        return _rewrite(src, dst, change, what, check)
    except WireError as exc:
        raise WireError(f"{src} is not an ONNX model ({exc})") from None


def _tensor_header(buf: mmap.mmap, start: int, end: int) -> tuple[onnx.TensorProto, list[int], int]:
    """An initializer record's TensorProto without its values, the value fields it has, and the
    size of its raw data."""
    header = bytearray()
    values: list[int] = []
    raw = 0
    for number, record, value, value_end in _fields(buf, start, end):
        if number in TENSOR_VALUES:
            values.append(number)
            raw = value_end - value if number == TENSOR_RAW_DATA else raw
        else:
            header += buf[record:value_end]
    tensor = onnx.TensorProto()
    tensor.ParseFromString(bytes(header))
    return tensor, values, raw


def _raw_size_ok(tensor: onnx.TensorProto, raw: int) -> bool | None:
    """Whether `raw` bytes hold the tensor's shape of its type (None: a type this cannot size)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) or itemsize < 1:
        return None
    count = 1
    for d in tensor.dims:
        count *= d
    return raw == count * itemsize


def _check_small(
    model: onnx.ModelProto, kept: int, headers: list[tuple[onnx.TensorProto, list[int], int]]
) -> bool:
    """onnx's checker on `model` with its large initializers (after `kept`) declared as inputs of
    their type and shape, and their records checked here; False where a record is stored in a way
    this cannot judge (the caller then checks the whole file)."""
    for tensor, values, raw in headers:
        name = tensor.name
        if tensor.data_location == onnx.TensorProto.EXTERNAL or values != [TENSOR_RAW_DATA]:
            if not values and tensor.data_location != onnx.TensorProto.EXTERNAL:
                raise onnx.checker.ValidationError(
                    f"TensorProto (tensor name: {name}) should contain one and only one value field."
                )
            return False
        fits = _raw_size_ok(tensor, raw)
        if fits is None:
            return False
        if not fits:
            raise onnx.checker.ValidationError(
                f"TensorProto (tensor name: {name}) raw_data size ({raw} bytes) does not match its "
                f"shape {list(tensor.dims)} and type"
            )
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.initializer[kept:]
    declared = {i.name for i in probe.graph.input}
    for tensor, _, _ in headers:
        if tensor.name not in declared:
            probe.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
    onnx.checker.check_model(probe)
    return True


def _rewrite(
    src: Path, dst: Path, change: Callable[[onnx.ModelProto], onnx.ModelProto], what: str, check: bool = False
) -> str:
    with open(src, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        size = len(buf)
        top_small = bytearray()
        graph: tuple[int, int] | None = None
        for number, record, value, end in _fields(buf, 0, size):
            if number == MODEL_GRAPH:
                if graph is not None:
                    raise WireError("more than one graph in the model")
                graph = (value, end)
            else:
                top_small += buf[record:end]
        if graph is None:
            raise WireError("the file holds no graph")
        small = bytearray()
        large: list[tuple[int, int]] = []
        large_names: list[str] = []
        for number, record, value, end in _fields(buf, *graph):
            if number == GRAPH_INITIALIZER and end - record > LARGE:
                large.append((record, end))
                large_names.append(_tensor_name(buf, value, end))
            else:
                small += buf[record:end]
        model = onnx.ModelProto()
        try:
            model.ParseFromString(bytes(top_small))
            model.graph.ParseFromString(bytes(small))
        except Exception as exc:  # protobuf's DecodeError
            raise WireError(str(exc)) from exc
        kept = len(model.graph.initializer)
        for name in large_names:
            model.graph.initializer.add().name = name
        model = change(model)
        placeholders = [t.name for t in model.graph.initializer[kept:]]
        if placeholders != large_names:
            raise WireError("the change replaced, reordered or removed a large initializer")
        checked = not check or _check_small(
            model, kept, [_tensor_header(buf, *_payload(buf, a, b)) for a, b in large]
        )
        del model.graph.initializer[kept:]
        graph_small = model.graph.SerializeToString()
        model.ClearField("graph")
        head = model.SerializeToString()
        graph_size = len(graph_small) + sum(end - start for start, end in large)
        digest = hashlib.sha256()
        advance = _progress(graph_size, what)
        with open(dst, "wb") as out:

            def write(data: bytes | memoryview) -> None:
                digest.update(data)
                out.write(data)

            write(head)
            write(_encode_varint(MODEL_GRAPH << 3 | _LEN) + _encode_varint(graph_size))
            write(graph_small)
            advance(len(graph_small))
            view = memoryview(buf)
            try:
                for start, end in large:
                    for at in range(start, end, CHUNK):
                        piece = view[at : min(end, at + CHUNK)]
                        write(piece)
                        advance(len(piece))
                        piece.release()
            finally:
                view.release()
    if not checked:
        onnx.checker.check_model(str(dst))
    return digest.hexdigest()


def last_initializer(path: Path) -> onnx.TensorProto:
    """The graph's last initializer, as `onnx.load(path).graph.initializer[-1]` gives it (the
    records' order in the file), parsed alone: inswapper's 1 MiB emap without parsing its
    550 MB graph. A tensor whose values lie in an external file comes back as stored there."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        graphs = [
            (value, end) for number, _, value, end in _fields(buf, 0, len(buf)) if number == MODEL_GRAPH
        ]
        if len(graphs) != 1:
            raise WireError("the file holds no graph" if not graphs else "more than one graph in the model")
        last: tuple[int, int] | None = None
        for number, _, value, end in _fields(buf, *graphs[0]):
            if number == GRAPH_INITIALIZER:
                last = (value, end)
        if last is None:
            raise WireError(f"{path} has no initializers")
        tensor = onnx.TensorProto()
        try:
            tensor.ParseFromString(bytes(buf[last[0] : last[1]]))
        except Exception as exc:  # protobuf's DecodeError
            raise WireError(str(exc)) from exc
        return tensor


def _payload(buf: mmap.mmap, start: int, end: int) -> tuple[int, int]:
    """The value span of the length-delimited record at start..end."""
    _, pos = _varint(buf, start)
    _, pos = _varint(buf, pos)
    return pos, end
