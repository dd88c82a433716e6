"""The streamed graph rewrite (models/onnx_stream.py): the batch copy written without parsing the
weights equals the one made in memory, and a damaged file is refused by name."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
import standins
from onnx import numpy_helper

from facefusion_batch.faces.identity import read_emap
from facefusion_batch.models import onnx_stream, prepare


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    return prepare.make_dynamic_batch(model, check=False)[0]


@pytest.fixture
def swapper_file(tmp_path: Path) -> Path:
    path = tmp_path / "inswapper_128.onnx"
    onnx.save(standins.inswapper(), str(path))
    return path


def test_the_streamed_copy_equals_the_copy_made_in_memory(swapper_file: Path, tmp_path: Path) -> None:
    original = onnx.load(str(swapper_file))
    sizes = [len(t.SerializeToString()) for t in original.graph.initializer]
    assert max(sizes) > onnx_stream.LARGE > min(sizes)  # both paths: copied records and parsed ones
    expected, _ = prepare.make_dynamic_batch(original)
    out = tmp_path / "streamed.onnx"
    sha = onnx_stream.rewrite_graph(swapper_file, out, _dynamic, check=True)
    assert sha == hashlib.sha256(out.read_bytes()).hexdigest()
    onnx.checker.check_model(str(out))
    got = onnx.load(str(out))
    assert got.graph.input == expected.graph.input
    assert got.graph.output == expected.graph.output
    assert got.graph.node == expected.graph.node
    assert got.opset_import == expected.opset_import
    assert got.graph.initializer[-1].name == original.graph.initializer[-1].name  # emap stays last
    want, have = _initializers(expected), _initializers(got)
    assert sorted(have) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(have[name], value, err_msg=name)
    # the batch-pinning Reshape target was rewritten in a parsed (small) initializer
    assert have["style_shape"].tolist() == [0, 3, 1, 1]


def test_a_change_that_drops_a_large_initializer_is_refused(swapper_file: Path, tmp_path: Path) -> None:
    def drop_last(model: onnx.ModelProto) -> onnx.ModelProto:
        del model.graph.initializer[-1]
        return model

    with pytest.raises(onnx_stream.WireError, match="large initializer"):
        onnx_stream.rewrite_graph(swapper_file, tmp_path / "out.onnx", drop_last)


@pytest.mark.parametrize("damage", ["truncated", "not protobuf"])
def test_a_damaged_file_is_refused_by_name(swapper_file: Path, tmp_path: Path, damage: str) -> None:
    data = swapper_file.read_bytes()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else bytes(range(256)) * 64)
    with pytest.raises(onnx_stream.WireError, match="bad.onnx is not an ONNX model"):
        onnx_stream.rewrite_graph(bad, tmp_path / "out.onnx", _dynamic)


@pytest.mark.parametrize("mixes", [False, True])
def test_the_batch_check_passes_independent_items_and_refuses_mixed_ones(tmp_path: Path, mixes: bool) -> None:
    """check_batch_equality runs the batch and the single item at once: a graph whose items stay
    apart passes at 0, one that mixes them (each item plus the batch's mean) is refused."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    if mixes:
        nodes += [
            helper.make_node("ReduceMean", ["r"], ["m"], axes=[0], keepdims=1),
            helper.make_node("Add", ["r", "m"], ["y"]),
        ]
    else:
        nodes += [helper.make_node("Identity", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8, 8])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    if mixes:
        with pytest.raises(prepare.ValidationError, match="deviates from single runs"):
            prepare.check_batch_equality(path)
    else:
        assert prepare.check_batch_equality(path) == 0.0


@pytest.mark.parametrize("damage", ["short weights", "a node on an unknown name", "none"])
def test_the_streamed_check_agrees_with_the_checker_on_the_whole_file(tmp_path: Path, damage: str) -> None:
    """rewrite_graph(check=True) checks the copy without loading its weights: it refuses what
    onnx's checker refuses in the whole file (a large initializer whose raw data is shorter than
    its shape, a node reading a name nothing defines) and passes what it passes."""
    from onnx import TensorProto, helper

    weight = numpy_helper.from_array(np.ones((256, 256), np.float32), "w")  # 256 KiB: copied, not parsed
    if damage == "short weights":
        weight.raw_data = weight.raw_data[:-4]
    reads = "nowhere" if damage == "a node on an unknown name" else "w"
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", reads], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [weight],
    )
    src = tmp_path / "src.onnx"
    src.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    out = tmp_path / "out.onnx"
    if damage == "none":
        onnx_stream.rewrite_graph(src, out, _dynamic, check=True)
        onnx.checker.check_model(str(out))
        return
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(str(src))
    with pytest.raises(onnx.checker.ValidationError):
        onnx_stream.rewrite_graph(src, out, _dynamic, check=True)


def test_the_last_initializer_read_alone_is_the_one_onnx_loads_last(
    swapper_file: Path, tmp_path: Path
) -> None:
    """inswapper's emap, read without parsing the graph: the same record as onnx.load's last
    initializer, in the original and in its streamed batch copy (whose large initializers move
    after the small graph); read_emap gives its values, and falls back to a whole load for an
    emap stored outside the file."""
    loaded = onnx.load(str(swapper_file))
    alone = onnx_stream.last_initializer(swapper_file)
    assert alone.SerializeToString() == loaded.graph.initializer[-1].SerializeToString()
    copy = tmp_path / "copy.onnx"
    onnx_stream.rewrite_graph(swapper_file, copy, _dynamic, what="batch copy")
    assert onnx_stream.last_initializer(copy).SerializeToString() == alone.SerializeToString()
    emap = numpy_helper.to_array(loaded.graph.initializer[-1])
    assert emap.shape == (512, 512)
    np.testing.assert_array_equal(read_emap(swapper_file), emap)
    np.testing.assert_array_equal(read_emap(copy), emap)
    outside = tmp_path / "outside" / "model.onnx"
    outside.parent.mkdir()
    onnx.save(loaded, str(outside), save_as_external_data=True, location="weights.bin", size_threshold=1024)
    assert onnx_stream.last_initializer(outside).data_location == onnx.TensorProto.EXTERNAL
    np.testing.assert_array_equal(read_emap(outside), emap)


def test_a_file_without_initializers_has_no_emap(tmp_path: Path) -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "bare.onnx"
    onnx.save(onnx.helper.make_model(graph), str(path))
    with pytest.raises(ValueError, match="no initializers, so no emap"):
        read_emap(path)
