"""Calibration on real faces: `ffbatch models calibration-crops` crops and embeds the faces of the
embedded photos and the user's footage; identity inputs are the swapper's input for those faces;
every fp16 / INT8 variant's deviation from float32 is measured on those crops, in levels.

The recogniser and swappers are stand-ins (tests/standins.py, random weights): what is checked is
that the vectors and crops fed are the real faces' own, not what a real model makes of them.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import standins
from media import make_clip
from test_cli import ffbatch_here

from facefusion_batch.config import resolve_device
from facefusion_batch.faces.identity import Recogniser, inswapper_latent, normalise, read_emap
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.models import convert, prepare, store
from facefusion_batch.models.calibration import feeds_for, identity_for, load_crops, load_embeddings
from facefusion_batch.models.facefusion import MODELS, RECOGNISER
from facefusion_batch.pipeline.build import Models, load_learned
from facefusion_batch.runtime.backends import select_backend
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend
from facefusion_batch.tools import models as tools_models
from facefusion_batch.tools.calibration import extract_crops, write_identity
from facefusion_batch.video.pictures.stills import read_image

HOST = HostKernels()


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory) -> Path:
    return standins.write_standins(tmp_path_factory.mktemp("standins"))


@pytest.fixture(scope="module")
def recogniser(tmp_path_factory) -> Recogniser:
    """The stand-in ArcFace with a dynamic batch, as the calibration command loads it."""
    model, _ = prepare.make_dynamic_batch(standins.arcface())
    path = tmp_path_factory.mktemp("arcface") / "arcface.onnx"
    onnx.save(model, str(path))
    return Recogniser(select_backend(DeviceSettings()).load(path, label=RECOGNISER), MODELS[RECOGNISER])


@pytest.fixture(scope="module")
def crops_dir(tmp_path_factory, models, recogniser, t1_path, astronaut_path, t1_small) -> Path:
    """t1 (six faces) and the astronaut, then a short clip over t1, as the command orders them."""
    root = tmp_path_factory.mktemp("calibration")
    clip = make_clip(root / "clip.mp4", frames=4, size=(480, 320), image=t1_small, audio=None)
    written = extract_crops(
        [t1_path, astronaut_path, clip], root / "crops", models.detector, recogniser, count=16
    )
    assert written >= 10
    return root / "crops"


def photo_embeddings(models, recogniser: Recogniser, path: Path) -> np.ndarray:
    """The recogniser's raw embeddings of a photo's faces, as the pipeline computes them."""
    frames = HOST.upload([read_image(path)])
    return recogniser.embed(HOST, frames, models.detector(HOST, frames))


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return normalise(a) @ normalise(b).T


def test_crops_and_embeddings_are_the_photos_faces_then_the_footage(
    crops_dir, models, recogniser, t1_path, astronaut_path
):
    manifest = json.loads((crops_dir / "manifest.json").read_text())
    n = manifest["count"]
    assert (
        manifest["sources"][:2] == [str(t1_path), str(astronaut_path)]
        and "clip.mp4" in manifest["sources"][2]
    )
    embeddings = load_embeddings(crops_dir)
    assert embeddings.shape == (n, 512) and len(list(crops_dir.glob("crop_*.png"))) == n
    t1 = photo_embeddings(models, recogniser, t1_path)
    astronaut = photo_embeddings(models, recogniser, astronaut_path)
    assert len(t1) == 6 and len(astronaut) == 1
    # the first rows are t1's faces, then the astronaut's, each its own face's embedding
    np.testing.assert_allclose(np.diag(cosine(embeddings[:6], t1)), 1.0, atol=1e-4)
    assert cosine(embeddings[6:7], astronaut)[0, 0] > 0.9999
    # footage faces are t1's faces again, smaller and encoded: each close to one of them
    assert (cosine(embeddings[7:], t1).max(axis=1) > 0.8).all()
    # an embedding re-computed from the stored crop (re-cut to the recogniser's template) agrees
    crop = load_crops(crops_dir, MODELS[RECOGNISER].template, MODELS[RECOGNISER].size, limit=1)
    x = HOST.model_input(crop, MODELS[RECOGNISER].mean, MODELS[RECOGNISER].std)
    again = recogniser.session.run({recogniser.input_name: x})
    assert cosine(np.asarray(again[recogniser.session.outputs[0].name]), t1[:1])[0, 0] > 0.99


@pytest.mark.parametrize("name", ["inswapper_128", "hyperswap_1a_256"])
def test_identity_inputs_are_real_faces_embeddings(crops_dir, standin_dir, models, recogniser, t1_path, name):
    path = write_identity(crops_dir, name, model_path=standin_dir / f"{name}.onnx")
    identity = np.load(path)
    t1 = photo_embeddings(models, recogniser, t1_path)
    if name == "inswapper_128":  # the latent of the face: its embedding through emap, as the swap feeds it
        expected = inswapper_latent(t1, read_emap(standin_dir / f"{name}.onnx"))
    else:
        expected = normalise(t1)
    np.testing.assert_allclose(np.diag(cosine(identity[:6], expected)), 1.0, atol=1e-4)
    # what calibration feeds: each crop swapped with the previous crop's face (never random vectors)
    crops = load_crops(crops_dir, MODELS[name].template, MODELS[name].size)
    session = prepare._session(standin_dir / f"{name}.onnx")
    feeds = feeds_for(
        name, session, crops, np.random.default_rng(0), len(crops), identity_for(name, crops_dir, len(crops))
    )
    source = feeds["source"]
    assert source.shape == (len(crops), 512)
    np.testing.assert_allclose(np.diag(cosine(source[1:7], expected)), 1.0, atol=1e-4)
    np.testing.assert_array_equal(source, np.roll(identity[: len(crops)], 1, axis=0))


@pytest.fixture(scope="module")
def prepared(crops_dir, standin_dir, tmp_path_factory) -> tuple[Path, list[str]]:
    """A store (FFBATCH_HOME) holding the inswapper stand-in's batch, fp16 and INT8 variants, made by
    `ffbatch models prepare` with the calibration set; and prepare's lines. The built-in converters
    (float32 outside the Q/DQ pairs, what the CPU runs as integer kernels); test_convert and
    test_learned_models run ModelOpt's where it is at hand."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FFBATCH_HOME", str(home))
        mp.setattr(convert, "modelopt_python", lambda: (None, "left out by this test"))
        lines = list(
            tools_models.prepare(
                "inswapper_128",
                fp16=True,
                int8=True,
                calibration_dir=crops_dir,
                models_dir=standin_dir,
                force=False,
            )
        )
    return home, lines


def test_variants_record_their_deviation_in_levels_on_real_crops(prepared):
    _, lines = prepared
    assert [line.split(":")[0] for line in lines] == [
        "inswapper_128@batch",
        "inswapper_128@fp16",
        "inswapper_128@int8",
    ]
    for variant, bound in (("fp16", 2.0), ("int8", 40.0)):
        path = Path(lines[["batch", "fp16", "int8"].index(variant)].split(": ", 1)[1])
        record = json.loads(store.sidecar_path(path).read_text())
        deviation = record["deviation_from_fp32"]
        assert deviation["real_faces"] and "real face crops" in deviation["measured_on"], deviation
        assert 0 < deviation["mean_levels"] <= deviation["max_levels"] < bound, deviation
        assert record["tool"] and record["made"]


def test_cpu_int8_runs_the_int8_variant_only_where_it_holds(
    prepared, standin_dir, models, monkeypatch, caplog
):
    home, _ = prepared
    monkeypatch.setenv("FFBATCH_HOME", str(home))
    cpu = Models(
        backend=OnnxRuntimeCpuBackend(2, precision="int8"), detector=models.detector, models_dir=standin_dir
    )
    session, base = load_learned(cpu, "inswapper_128")
    assert session.label == "inswapper_128@int8" and cpu.paths["inswapper_128"].endswith(".batch.int8.onnx")
    assert base == (standin_dir / "inswapper_128.onnx").absolute()
    # beyond the bound: fp32, and the log says why
    monkeypatch.setattr(prepare, "INT8_MEAN_LEVELS", 0.0)
    with caplog.at_level(logging.WARNING, logger="ffbatch"):
        session, _ = load_learned(cpu, "inswapper_128")
    assert session.label == "inswapper_128@batch"
    assert "inswapper_128 runs in fp32" in caplog.text and "bounds" in caplog.text
    # no INT8 variant made (the recogniser): fp32, saying how to make one
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ffbatch"):
        session, _ = load_learned(cpu, RECOGNISER)
    assert session.label == f"{RECOGNISER}@batch" and "ffbatch models prepare" in caplog.text
    # fp32 asked: the INT8 variant is not used
    fp32 = Models(backend=OnnxRuntimeCpuBackend(2), detector=models.detector, models_dir=standin_dir)
    assert load_learned(fp32, "inswapper_128")[0].label == "inswapper_128@batch"


def test_int8_refusal_reasons():
    held = {
        "high_precision": "fp32",
        "deviation_from_fp32": {"real_faces": True, "max_levels": 9.0, "mean_levels": 1.0},
    }
    assert prepare.int8_refusal(held) is None
    beyond = {**held, "deviation_from_fp32": {**held["deviation_from_fp32"], "mean_levels": 3.5}}
    assert "3.50 on average" in prepare.int8_refusal(beyond)
    assert "real face crops" in prepare.int8_refusal({**held, "deviation_from_fp32": {"real_faces": False}})
    assert "slower than fp32" in prepare.int8_refusal({**held, "high_precision": "fp16"})


def test_cpu_keeps_int8_when_asked_and_fp32_otherwise():
    assert resolve_device(backend="cpu", precision="int8").device.precision == "int8"
    assert resolve_device(backend="cpu", precision="fp16").device.precision == "fp32"
    assert resolve_device(backend="cpu").device.precision == "fp32"


def ffbatch(*args) -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`): these are
    usage errors, exit 2 and the message."""
    return ffbatch_here(*args)


def test_calibration_crops_command_refuses_bad_input(tmp_path):
    missing = ffbatch("models", "calibration-crops", tmp_path / "nope.mp4", "-o", tmp_path / "c")
    assert missing.returncode == 2 and "no such file" in missing.stderr, missing.stderr
    nothing = ffbatch("models", "calibration-crops", "--no-photos", "-o", tmp_path / "c")
    assert nothing.returncode == 2 and "no videos or photos" in nothing.stderr, nothing.stderr
    assert "Traceback" not in missing.stderr + nothing.stderr


def test_prepare_refuses_a_calibration_set_without_embeddings(tmp_path, standin_dir):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text("{}")
    result = ffbatch(
        "models",
        "prepare",
        "inswapper_128",
        "--int8",
        "--calibration-dir",
        tmp_path / "old",
        "--models-dir",
        standin_dir,
    )
    assert result.returncode == 2 and "embeddings.npy" in result.stderr, result.stderr
