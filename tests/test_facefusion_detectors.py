"""FaceFusion's face detectors in ffbatch (faces/facefusion_detectors.py) against FaceFusion 3.8.1's
own functions, on the same pictures and the same model files.

The reference is FaceFusion's face_detector, face_helper and face_recognizer run by
scripts/facefusion_detect_reference.py: live, when a FaceFusion checkout and a Python that runs it
are here ($FACEFUSION_SOURCE, $FACEFUSION_PYTHON; default /tmp/facefusion and
/tmp/ff-venv312/bin/python), else tests/data/facefusion_detect_reference.json, which that script
wrote from the same files:

    .venv/bin/python tests/test_facefusion_detectors.py DIR
    FF_PYTHON scripts/facefusion_detect_reference.py --facefusion FF --models DIR \\
        --out tests/data/facefusion_detect_reference.json t1.jpg astronaut.png

(DIR: the stand-ins of tests/standin_detectors.py, OpenCV's YuNet as yunet_2023_mar and the
arcface stand-in of tests/standins.py; the pictures: the store's assets).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import standin_detectors
import standins

from facefusion_batch.errors import InputError
from facefusion_batch.faces.detect import DetectorSettings, YuNetDetector
from facefusion_batch.faces.facefusion_detectors import (
    FaceFusionDetector,
    FaceFusionDetectorSettings,
    facefusion_detector_settings,
    margin_pixels,
    parse_margin,
)
from facefusion_batch.faces.facefusion_landmarks import (
    FaceFusionLandmarker,
    FaceFusionLandmarkerSettings,
    facefusion_landmarker_settings,
)
from facefusion_batch.faces.identity import Recogniser
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.models import store
from facefusion_batch.models.facefusion import FACE_DETECTORS, MODELS
from facefusion_batch.pipeline.build import (
    Models,
    detect_sources,
    facefusion_detector,
    facefusion_landmarker,
    load_learned,
)
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend
from facefusion_batch.video.pictures.stills import read_image

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "tests" / "data" / "facefusion_detect_reference.json"
SCRIPT = ROOT / "scripts" / "facefusion_detect_reference.py"
FF_SOURCE = Path(os.environ.get("FACEFUSION_SOURCE", "/tmp/facefusion"))
FF_PYTHON = Path(os.environ.get("FACEFUSION_PYTHON", "/tmp/ff-venv312/bin/python"))

_spec = importlib.util.spec_from_file_location("ff_reference", SCRIPT)
assert _spec and _spec.loader
ff_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ff_reference)
CASES = ff_reference.CASES
K = HostKernels()


def write_models(directory: Path) -> Path:
    standin_detectors.write_detectors(directory, store.model_path("yunet_2023mar"))
    standin_detectors.write_landmarkers(directory)
    standins.write_standin(directory, "arcface_w600k_r50")
    return directory


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A private store: the stand-ins' batch copies are made there, never in the real one."""
    from facefusion_batch import paths

    store.model_path("yunet_2023mar")  # fetched into the real store first, if need be
    new = standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FFBATCH_HOME", str(new))
        yield new


@pytest.fixture(scope="module")
def model_dir(home, tmp_path_factory) -> Path:
    return write_models(tmp_path_factory.mktemp("ffmodels"))


@pytest.fixture(scope="module")
def pictures(t1_path, astronaut_path) -> list[Path]:
    return [t1_path, astronaut_path]


@pytest.fixture(scope="module")
def reference(model_dir, pictures, tmp_path_factory) -> dict:
    if FF_PYTHON.is_file() and (FF_SOURCE / "facefusion" / "face_detector.py").is_file():
        out = tmp_path_factory.mktemp("ref") / "reference.json"
        subprocess.run(
            [str(FF_PYTHON), str(SCRIPT), "--facefusion", str(FF_SOURCE), "--models", str(model_dir)]
            + ["--out", str(out), *map(str, pictures)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return json.loads(out.read_text())
    return json.loads(COMMITTED.read_text())


@pytest.fixture(scope="module")
def ff_models(model_dir) -> Models:
    backend = OnnxRuntimeCpuBackend(2)
    yunet = backend.load(store.model_path("yunet_2023mar"), label="yunet_2023mar")
    score = float(f"{math.sqrt(0.5):.6g}")  # FaceFusion's --face-detector-score 0.5, as the CLI rewrites it
    return Models(backend=backend, detector=YuNetDetector(yunet, DetectorSettings(score_threshold=score)),
                  models_dir=model_dir)  # fmt: skip


def assert_faces(table, frame: int, score, box, five) -> None:
    """`table`'s faces in `frame` are these, in this order: scores within 1e-6, boxes and five
    points within 0.002 px."""
    mine = np.flatnonzero(table.frame_index == frame)
    assert len(mine) == len(score) > 0
    np.testing.assert_allclose(table.score[mine], score, atol=1e-6)
    np.testing.assert_allclose(table.box[mine], box, atol=2e-3)
    np.testing.assert_allclose(table.landmarks5[mine], five, atol=2e-3)


def sessions(models: Models, model: str) -> dict:
    return {MODELS[f].family: load_learned(models, f)[0] for f in FACE_DETECTORS[model]}


def test_the_committed_reference_is_what_facefusion_gives(reference):
    """The committed file is the script's output on today's stand-ins (regenerate it when they change)."""
    committed = json.loads(COMMITTED.read_text())
    assert committed["cases"].keys() == reference["cases"].keys()
    assert committed["margin_cases"].keys() == reference["margin_cases"].keys()
    for group in ("cases", "margin_cases"):
        for case in reference[group]:
            for mine, theirs in zip(committed[group][case], reference[group][case], strict=True):
                assert mine["score"] == pytest.approx(theirs["score"], abs=1e-6)
    for model, per_image in reference["landmarks"].items():
        for mine, theirs in zip(committed["landmarks"][model], per_image, strict=True):
            assert mine["score"] == pytest.approx(theirs["score"], abs=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_faces_are_facefusions(case, ff_models, reference, pictures):
    """Both pictures (different sizes) in one batch: the same faces, scores, boxes and five points
    as FaceFusion's detect_faces(+by angle) and apply_nms, best first."""
    model, size, angles, score = CASES[case]
    settings = FaceFusionDetectorSettings(
        model, int(size.split("x")[0]), tuple(angles), score, max_faces_per_frame=ff_reference.KEPT
    )
    table = FaceFusionDetector(sessions(ff_models, model), settings).detect(
        K, [read_image(p) for p in pictures]
    )
    for i, theirs in enumerate(reference["cases"][case]):
        assert_faces(table, i, theirs["score"], theirs["box"], theirs["five"])


@pytest.mark.parametrize("name", ["retinaface_10g", "scrfd_2.5g"])
def test_insightfaces_signature_runs_from_its_batch_copy(name, ff_models, pictures, tmp_path, monkeypatch):
    """insightface's files fix the batch at 1, leave height and width symbolic and declare their
    outputs as fixed anchor counts: ffbatch makes their batch copy (the probe at the catalogue's
    640, the anchors folded item after item) and finds the same faces, scores, boxes and points
    as with the dynamic stand-in of the same weights. Before, the copy was refused ('symbolic
    non-batch dim; cannot probe it'), so FaceFusion's real retinaface/scrfd could not run."""
    monkeypatch.setenv("FFBATCH_HOME", str(tmp_path / "home"))  # its own batch copy, made here
    directory = tmp_path / "insightface"
    directory.mkdir()
    standins.write_standin(
        directory, name, standin_detectors.insightface_signature(standin_detectors.DETECTOR_STANDINS[name]())
    )
    replica = Models(backend=ff_models.backend, detector=ff_models.detector, models_dir=directory)
    session, _ = load_learned(replica, name)
    assert replica.paths[name].endswith(".batch.onnx")  # the copy, made and checked
    model = MODELS[name].family
    settings = FaceFusionDetectorSettings(model, 640, (0, 90), 0.5)
    images = [read_image(p) for p in pictures]
    theirs = FaceFusionDetector(sessions(ff_models, model), settings).detect(K, images)
    mine = FaceFusionDetector({model: session}, settings).detect(K, images)
    for i in range(len(images)):
        at = theirs.frame_index == i
        assert_faces(mine, i, theirs.score[at], theirs.box[at], theirs.landmarks5[at])


@pytest.mark.parametrize("name", list(ff_reference.MARGIN_CASES))
def test_a_margin_finds_facefusions_faces(name, ff_models, reference, pictures):
    """--face-detector-margin: the frame padded with black at each side (a share of its height or
    width, at every angle) before it is shrunk, the faces moved back: FaceFusion's detect_faces."""
    case, margin = ff_reference.MARGIN_CASES[name]
    model, size, angles, score = CASES[case]
    settings = FaceFusionDetectorSettings(
        model, int(size.split("x")[0]), tuple(angles), score, ff_reference.KEPT, tuple(margin)
    )
    table = FaceFusionDetector(sessions(ff_models, model), settings).detect(
        K, [read_image(p) for p in pictures]
    )
    for i, theirs in enumerate(reference["margin_cases"][name]):
        assert_faces(table, i, theirs["score"], theirs["box"], theirs["five"])
    plain = reference["cases"][case]
    assert any(  # the margin changes what the detector sees
        a["score"] != b["score"] for a, b in zip(plain, reference["margin_cases"][name], strict=True)
    )


def test_margin_values_as_facefusion_reads_them():
    assert parse_margin(None) == (0, 0, 0, 0) and parse_margin("10") == (10, 10, 10, 10)
    assert parse_margin("10 20") == (10, 20, 10, 20) and parse_margin("10,20,30") == (10, 20, 30, 20)
    assert parse_margin("1 2 3 4") == (1, 2, 3, 4)
    for bad in ("101", "1 2 3 4 5", "x", "-1"):
        with pytest.raises(InputError, match="--detector-margin"):
            parse_margin(bad)
    assert margin_pixels((100, 200, 3), (10, 20, 30, 100)) == (5, 20, 15, 100)


@pytest.mark.parametrize("model", ff_reference.LANDMARKERS)
def test_landmarkers_refine_the_five_points_as_facefusion(model, ff_models, reference, pictures):
    """fan_68_5's angle, then 2dfan4 / peppa_wutz / both on the upright crop: where the landmarker
    scores above 0.5 the five points become the 68's, else they stay the detector's (FaceFusion's
    create_faces); every face of both pictures in one call per model."""
    images = [read_image(p) for p in pictures]
    table = FaceFusionDetector(sessions(ff_models, "yunet"), FaceFusionDetectorSettings("yunet")).detect(
        K, images
    )
    names = ["fan_68_5", *(["2dfan4", "peppa_wutz"] if model == "many" else [model])]
    counted = {n: Counting(load_learned(ff_models, n)[0]) for n in names}
    settings = FaceFusionLandmarkerSettings(model, ff_reference.LANDMARKER_SCORE)
    refined = FaceFusionLandmarker(counted, settings).refine(K, images, table)
    assert all(c.runs == 1 for c in counted.values())
    for i, theirs in enumerate(reference["landmarks"][model]):
        mine = np.flatnonzero(refined.frame_index == i)
        np.testing.assert_allclose(refined.landmarks5[mine], theirs["five68"], atol=0.01)
    scores = np.concatenate([r["score"] for r in reference["landmarks"][model]])
    moved = np.abs(refined.landmarks5 - table.landmarks5).max(axis=(1, 2)) > 0
    assert (moved == (scores > 0.5)).all()


@pytest.mark.parametrize("model", ff_reference.LANDMARKERS)
def test_landmarkers_read_a_turned_face_as_facefusion(model, ff_models, reference, astronaut_path):
    """detect_face_landmark at 90, 180 and 270 degrees (the crop turned upright, the points
    turned back): the 68 points within 0.01 px and the score of FaceFusion's."""
    image = read_image(astronaut_path)
    detector = FaceFusionDetector(sessions(ff_models, "yunet"), FaceFusionDetectorSettings("yunet"))
    face = detector.detect(K, [image]).select(np.array([0, 0, 0]))
    names = ["fan_68_5", *(["2dfan4", "peppa_wutz"] if model == "many" else [model])]
    landmarker = FaceFusionLandmarker(
        {n: load_learned(ff_models, n)[0] for n in names}, FaceFusionLandmarkerSettings(model)
    )
    points68, score = landmarker.landmarks(K, [image], face, np.array([90, 180, 270]))
    for i, angle in enumerate(("90", "180", "270")):
        theirs = reference["turned"][model][angle]
        np.testing.assert_allclose(points68[i], theirs["points68"], atol=0.01)
        assert score[i] == pytest.approx(theirs["score"], abs=1e-5)


class Counting:
    """A session that counts its runs."""

    def __init__(self, session) -> None:
        self.session, self.runs = session, 0
        self.inputs, self.outputs = session.inputs, session.outputs

    def run(self, *args, **kw):
        self.runs += 1
        return self.session.run(*args, **kw)

    def __getattr__(self, name):
        return getattr(self.session, name)


def test_one_model_call_per_batch(ff_models, pictures):
    counted = {name: Counting(s) for name, s in sessions(ff_models, "many").items()}
    settings = FaceFusionDetectorSettings("many", angles=(0, 90, 180))
    table = FaceFusionDetector(counted, settings).detect(K, [read_image(p) for p in pictures] * 2)
    assert {name: c.runs for name, c in counted.items()} == {"retinaface": 1, "scrfd": 1, "yolo_face": 1}
    assert set(table.frame_index.tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("landmarker", [0.0, 0.5])
def test_the_source_photo_is_detected_as_facefusion_does(ff_models, reference, astronaut_path, landmarker):
    """--embedding-convention facefusion: the 512x512 source photo is not enlarged before YuNet
    (FaceFusion's yunet reading, cls*obj >= 0.5), then refined by 2dfan4 (FaceFusion's default;
    --face-landmarker-score 0: not): its five points and embedding are FaceFusion's; ffbatch's own
    letterbox (enlarged to 640) puts them elsewhere."""
    settings = DetectorSettings(
        score_threshold=ff_models.detector.settings.score_threshold,
        facefusion_landmarker=FaceFusionLandmarkerSettings("2dfan4", landmarker),
    )
    models = Models(
        backend=ff_models.backend,
        detector=YuNetDetector(ff_models.detector.session, settings),
        models_dir=ff_models.models_dir,
    )
    if landmarker:
        theirs = reference["landmarks"]["2dfan4"][1]
        five, expected = theirs["five68"][0], np.array(theirs["embedding"])
    else:
        theirs = reference["cases"]["yunet"][1]
        five, expected = theirs["five"][0], np.array(theirs["embedding"])
    _, frames, table = detect_sources(models, (astronaut_path,), facefusion=True)
    np.testing.assert_allclose(table.landmarks5[0], five, atol=0.01)
    recogniser = Recogniser(load_learned(models, "arcface_w600k_r50")[0])
    embedding = recogniser.embed(K, frames, table)[0]
    cos = embedding @ expected / np.linalg.norm(embedding) / np.linalg.norm(expected)
    assert cos > 0.99999
    _, _, own = detect_sources(models, (astronaut_path,))
    assert np.abs(own.landmarks5[0] - table.landmarks5[0]).max() > 0.5


def test_a_device_kernel_set_detects_the_same_faces(ff_models, t1_path):
    """On the torch kernel set (CPU here) the frames come down as BGR, not as the output's planes."""
    pytest.importorskip("torch")
    from facefusion_batch.kernels.torch_kernels import TorchKernels

    detector = FaceFusionDetector(
        sessions(ff_models, "yunet"), FaceFusionDetectorSettings("yunet", angles=(0, 90))
    )
    frames = [read_image(t1_path)] * 2
    host = detector(K, K.upload(frames))
    device = TorchKernels("cpu")
    with device.scope():
        table = detector(device, device.upload(frames))
    assert len(table) == len(host) == 12
    np.testing.assert_allclose(table.landmarks5, host.landmarks5, atol=1e-3)


def test_an_absent_detector_file_warns_and_yunet_detects(ff_models, tmp_path, caplog):
    models = Models(backend=ff_models.backend, detector=ff_models.detector, models_dir=tmp_path)
    standins.write_standin(tmp_path, "arcface_w600k_r50")  # a models dir with files, not the detector's
    with caplog.at_level(logging.WARNING, logger="ffbatch"):
        chosen = facefusion_detector(models, FaceFusionDetectorSettings("yolo_face"))
    assert chosen is ff_models.detector
    assert "yoloface_8n.onnx" in caplog.text and "ffbatch models fetch yoloface_8n" in caplog.text


def test_the_landmarker_runs_when_its_files_are_here(ff_models, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="ffbatch"):
        here = facefusion_landmarker(ff_models, FaceFusionLandmarkerSettings("many"))
        absent = Models(backend=ff_models.backend, detector=ff_models.detector, models_dir=tmp_path)
        assert facefusion_landmarker(absent, FaceFusionLandmarkerSettings("2dfan4")) is None
    assert isinstance(here, FaceFusionLandmarker) and here.models == ["2dfan4", "peppa_wutz"]
    assert "fan_68_5.onnx, 2dfan4.onnx is not here; the faces keep the detector's five points" in caplog.text
    assert facefusion_landmarker(ff_models, FaceFusionLandmarkerSettings("2dfan4", 0.0)) is None


def test_options_take_facefusions_values():
    s = facefusion_detector_settings("retinaface", "320x320", "0,90", float(f"{math.sqrt(0.5):.6g}"))
    assert s == FaceFusionDetectorSettings("retinaface", 320, (0, 90), 0.5)
    assert facefusion_detector_settings("yolo_face", None, None, None) == FaceFusionDetectorSettings()
    assert facefusion_detector_settings(None, None, None, 0.6) is None
    for bad in (("yolo_face", "320x320", None), ("yolov8", None, None), ("scrfd", None, "45")):
        with pytest.raises(InputError):
            facefusion_detector_settings(*bad, None)
    with pytest.raises(InputError):
        facefusion_detector_settings(None, "640x640", None, None)
    assert facefusion_landmarker_settings("many", 0.3) == FaceFusionLandmarkerSettings("many", 0.3)
    for model, score in (("fan_68_5", 0.5), ("2dfan4", 1.5)):
        with pytest.raises(InputError):
            facefusion_landmarker_settings(model, score)


def test_facefusion_command_line_names_reach_render():
    from facefusion_batch.cli import facefusion_argv

    argv = [
        "render",
        "--face-detector-model",
        "many",
        "--face-detector-angles",
        "0",
        "90",
        "--face-detector-score",
        "0.5",
    ]
    assert facefusion_argv(["render", "--face-detector-margin", "10", "20", *argv[1:], "in.mp4"])[1:] == [
        "--detector-margin", "10,20", "--face-detector-model", "many", "--detector-angles", "0,90",
        "--score-threshold", "0.707107", "in.mp4",
    ]  # fmt: skip


def test_render_detects_with_facefusions_yunet(model_dir, home, t1_path, astronaut_path, tmp_path):
    """render with FaceFusion's names: its yunet file from --models-dir finds t1.jpg's faces as
    FaceFusion's reference does (a photo input, the classical swap); a size the model does not
    take is exit 2."""
    from test_cli import assert_usage_error, ffbatch_here

    report = tmp_path / "report.json"
    common = ["render", t1_path, "--source", astronaut_path, "--swapper", "classical"]
    common += ["--models-dir", model_dir]
    proc = ffbatch_here(
        *common, "--face-detector-model", "yunet", "--face-detector-score", "0.5",
        "--face-landmarker-score", "0", "-o", tmp_path / "out.png", "--report", report,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = "face detector: FaceFusion's yunet (yunet_2023_mar.onnx), 640x640, angles 0, score 0.5"
    assert said in proc.stderr
    assert "face landmarker" not in proc.stderr  # --face-landmarker-score 0: FaceFusion runs none
    assert json.loads(report.read_text())["faces_found"] == 6  # FaceFusion's yunet finds 6 (reference)
    bad = ffbatch_here(*common, "--face-detector-model", "yolo_face", "--face-detector-size", "320x320",
                       "-o", tmp_path / "bad.png")  # fmt: skip
    assert_usage_error(bad, "--face-detector-size 320x320", "640x640")
    margin = ffbatch_here(
        *common, "--face-detector-model", "yunet", "--face-detector-score", "0.5", "--face-landmarker-score",
        "0", "--face-detector-margin", "10", "20", "30", "40", "-o", tmp_path / "m.png", "--report", report,
    )  # fmt: skip
    assert margin.returncode == 0, margin.stderr
    assert "face detector margin: 10 20 30 40 %" in margin.stderr
    done = json.loads(report.read_text())
    assert done["settings"]["detector"]["facefusion"]["margin"] == [10, 20, 30, 40]
    assert done["faces_found"] == 6  # FaceFusion's reference with this margin (MARGIN_CASES)
    for args in (["--face-detector-model", "yunet", "--detector-margin", "101"], ["--detector-margin", "10"]):
        proc = ffbatch_here(*common, *args, "-o", tmp_path / "x.png")
        assert proc.returncode == 2 and "--detector-margin" in proc.stderr, proc.stderr


if __name__ == "__main__":  # write the models directory the script reads
    write_models(Path(sys.argv[1]))
