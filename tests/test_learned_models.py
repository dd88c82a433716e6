"""FaceFusion model files: catalogue, CRC32-checked fetch, batch preparation, fp16 / INT8 variants.

Everything runs on stand-ins (tests/standins.py) served from file:// URLs or a
--models-dir; the publisher's files are never downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import standins
from media import make_clip

from facefusion_batch import paths
from facefusion_batch.errors import ModelError
from facefusion_batch.faces.identity import Recogniser, read_emap
from facefusion_batch.models import catalog, facefusion, prepare, store
from facefusion_batch.models.calibration import load_crops
from facefusion_batch.models.catalog import build_catalog
from facefusion_batch.models.facefusion import RECOGNISER
from facefusion_batch.runtime.backends import select_backend
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.tools.calibration import extract_crops


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory) -> Path:
    return standins.write_standins(tmp_path_factory.mktemp("standins"))


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FFBATCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def published(tmp_path, monkeypatch, standin_dir) -> dict:
    """The publisher's release served from a file:// directory, and a catalogue pointing at it."""
    release = tmp_path / "release" / "models-3.0.0"
    release.mkdir(parents=True)
    for f in standin_dir.iterdir():
        (release / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(facefusion, "RELEASES_URL", (tmp_path / "release").as_uri())
    entries = [e for e in catalog.ENTRIES if e.name not in facefusion.MODELS and not e.name.endswith(".hash")]
    cat = build_catalog(entries + list(catalog._facefusion_entries()))
    return {"dir": release, "catalog": cat}


def test_catalogue_has_facefusion_names_urls_and_hash_entries():
    for name in (
        "inswapper_128",
        "hyperswap_1a_256",
        "simswap_256",
        "ghost_2_256",
        "blendswap_256",
        "uniface_256",
        "arcface_w600k_r50",
        "gfpgan_1.4",
        "gpen_bfr_512",
        "codeformer",
        "xseg_1",
        "bisenet_resnet_34",
        "crossface_simswap",
        "crossface_ghost",
        "crossface_hififace",
        "hififace_unofficial_256",
        "simswap_unofficial_512",
        "gfpgan_1.2",
        "gfpgan_1.3",
        "gpen_bfr_1024",
        "gpen_bfr_2048",
        "restoreformer_plus_plus",
    ):
        spec = catalog.CATALOG[name]
        assert spec.file == f"{name}.onnx" and spec.sha256 is None, name
        assert spec.derived_from == f"{name}.hash" and spec.validator == "facefusion_crc32"
        assert catalog.CATALOG[f"{name}.hash"].sources[0].url.endswith(f"/{name}.hash")
    assert "releases/download/models-3.0.0/inswapper_128.onnx" in facefusion.MODELS["inswapper_128"].url
    assert facefusion.MODELS["hyperswap_1a_256"].release == "models-3.3.0"
    assert catalog.CATALOG["inswapper_128"].inputs[1].shape == (1, 512)
    assert facefusion.MODELS["hififace_unofficial_256"].release == "models-3.1.0"
    assert facefusion.MODELS["crossface_hififace"].release == "models-3.4.0"
    # the embedding convention of each publisher: InsightFace's for inswapper, FaceFusion's otherwise
    assert {m.convention for m in facefusion.MODELS.values() if m.family == "inswapper"} == {"insightface"}
    assert facefusion.MODELS["hyperswap_1a_256"].convention == "facefusion"


def test_fetch_checks_the_crc32_and_records_the_sha256(home, published):
    path = store.fetch("inswapper_128", catalog=published["catalog"])
    assert path == paths.models_dir() / "inswapper_128.onnx"
    assert (paths.models_dir() / "inswapper_128.hash").is_file()  # FaceFusion's layout
    record = json.loads(store.sidecar_path(path).read_text())
    assert record["crc32"] == (published["dir"] / "inswapper_128.hash").read_text()
    assert record["sha256"] == store.sha256_file(path)
    # a later change of the file is refused
    with open(path, "r+b") as fh:
        fh.seek(100)
        fh.write(b"\x00\x01")
    res = store.verify("inswapper_128", catalog=published["catalog"])
    assert not res.ok and "sha256" in res.reason


def test_fetch_refuses_a_file_whose_crc32_differs(home, published):
    (published["dir"] / "inswapper_128.hash").write_text("00000000")
    with pytest.raises(ModelError, match="CRC32"):
        store.fetch("inswapper_128", catalog=published["catalog"])
    assert not (paths.models_dir() / "inswapper_128.onnx").exists()


def test_models_dir_file_is_checked_against_the_hash_beside_it(home, tmp_path, standin_dir, caplog):
    ff = tmp_path / "assets_models"
    standins.write_standins(ff, ["gfpgan_1.4"])
    assert store.model_path("gfpgan_1.4", models_dir=ff, fetch=False) == (ff / "gfpgan_1.4.onnx").absolute()
    ff2 = tmp_path / "tampered"
    standins.write_standins(ff2, ["gfpgan_1.4"])
    (ff2 / "gfpgan_1.4.hash").write_text("deadbeef")
    with pytest.raises(ModelError):  # ignored with a warning, and not in the store either
        store.model_path("gfpgan_1.4", models_dir=ff2, fetch=False)


def test_prepare_makes_a_dynamic_batch_that_equals_single_runs(home, standin_dir):
    cat = prepare.variant_catalog("inswapper_128")
    path = prepare.prepared_path("inswapper_128@batch", models_dir=standin_dir, catalog=cat)
    assert path == paths.models_dir() / "inswapper_128.batch.onnx"
    record = json.loads(store.sidecar_path(path).read_text())
    assert record["reshapes_rewritten"] >= 1  # the shared [1,3,1,1] target of both style Reshapes
    assert record["validation"]["batch_max_rel_diff"] <= prepare.BATCH_RTOL
    assert record["source_sha256"] == store.sha256_file(standin_dir / "inswapper_128.onnx")
    model = onnx.load(str(path))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    # emap is still the last initializer
    np.testing.assert_array_equal(read_emap(path), read_emap(standin_dir / "inswapper_128.onnx"))
    # batch of 4 == 4 single runs
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    target = rng.uniform(0, 1, (4, 3, 128, 128)).astype(np.float32)
    source = rng.standard_normal((4, 512)).astype(np.float32)
    batched = session.run(None, {"target": target, "source": source})[0]
    for i in range(4):
        single = session.run(None, {"target": target[i : i + 1], "source": source[i : i + 1]})[0]
        np.testing.assert_allclose(batched[i : i + 1], single, atol=1e-5)


def test_prepared_copy_is_made_again_when_the_original_changes(home, tmp_path):
    d = standins.write_standins(tmp_path / "m", ["arcface_w600k_r50"])
    first = prepare.prepared_path("arcface_w600k_r50@batch", models_dir=d)
    sha1 = store.sha256_file(first)
    standins.write_standin(d, "arcface_w600k_r50", standins.arcface(seed=9))
    second = prepare.prepared_path("arcface_w600k_r50@batch", models_dir=d)
    assert store.sha256_file(second) != sha1


def test_a_graph_that_pins_its_batch_elsewhere_is_refused(home, tmp_path):
    model = standins.inswapper()
    # keep only the first item of the batch: no relabelling can make that batch-safe
    for name, value in (("s0", [0]), ("s1", [1]), ("ax", [0])):
        model.graph.initializer.insert(0, onnx.numpy_helper.from_array(np.array(value, np.int64), name))
    model.graph.node.insert(0, onnx.helper.make_node("Slice", ["target", "s0", "s1", "ax"], ["first"]))
    for node in model.graph.node[1:]:
        node.input[:] = ["first" if i == "target" else i for i in node.input]
    d = standins.write_standins(tmp_path / "m", [])
    standins.write_standin(d, "inswapper_128", model)
    with pytest.raises(ModelError, match="batch"):
        prepare.prepared_path("inswapper_128@batch", models_dir=d)
    assert not (paths.models_dir() / "inswapper_128.batch.onnx").exists()


@pytest.fixture(scope="module")
def calibration_dir(tmp_path_factory, models, t1_small) -> Path:
    """Aligned crops from a short clip over t1 (six faces), made by the CLI's extractor."""
    root = tmp_path_factory.mktemp("calibration")
    clip = make_clip(root / "clip.mp4", frames=4, size=(480, 320), image=t1_small, audio=None)
    arcface = root / "arcface.onnx"
    onnx.save(prepare.make_dynamic_batch(standins.arcface())[0], str(arcface))
    recogniser = Recogniser(select_backend(DeviceSettings()).load(arcface, label=RECOGNISER))
    assert extract_crops([clip], root / "crops", models.detector, recogniser, count=12) >= 8
    return root / "crops"


def test_calibration_crops_are_aligned_and_recut_per_template(calibration_dir):
    manifest = json.loads((calibration_dir / "manifest.json").read_text())
    assert manifest["template"] == "ffhq_512" and manifest["size"] == 512
    crops = load_crops(calibration_dir, "arcface_128", 128, limit=4)
    assert crops.shape == (4, 128, 128, 3) and crops.dtype == np.uint8


@pytest.mark.parametrize("variant", ["fp16", "int8"])
def test_fp16_and_int8_variants_run_and_record_their_deviation(home, standin_dir, calibration_dir, variant):
    cat = prepare.variant_catalog("gfpgan_1.4", calibration_dir=calibration_dir)
    path = prepare.prepared_path(f"gfpgan_1.4@{variant}", models_dir=standin_dir, catalog=cat)
    record = json.loads(store.sidecar_path(path).read_text())
    deviation = record["deviation_from_fp32"]
    assert 0 < deviation["max_abs_deviation"] < (0.02 if variant == "fp16" else 0.2), deviation
    assert "calibration set" in deviation["measured_on"]
    model = onnx.load(str(path))
    ops = {n.op_type for n in model.graph.node}
    if variant == "int8":
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    else:
        assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # fp32 I/O kept
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = session.run(None, {"input": np.zeros((2, 3, 512, 512), np.float32)})[0]
    assert out.shape == (2, 3, 512, 512) and out.dtype == np.float32


def test_fp16_of_the_inswapper_keeps_emap_and_runs(home, standin_dir):
    path = prepare.prepared_path("inswapper_128@fp16", models_dir=standin_dir)
    np.testing.assert_array_equal(read_emap(path), read_emap(standin_dir / "inswapper_128.onnx"))
    record = json.loads(store.sidecar_path(path).read_text())
    assert record["deviation_from_fp32"]["max_abs_deviation"] < 0.01
    assert "seeded probes" in record["deviation_from_fp32"]["measured_on"]


def test_int8_without_a_calibration_set_says_how_to_make_one(home, standin_dir):
    with pytest.raises(ModelError, match="calibration"):
        prepare.prepared_path("gfpgan_1.4@int8", models_dir=standin_dir)
