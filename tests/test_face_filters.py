"""--face-selector-gender / -race / -age-start / -age-end: FaceFusion's filters, on a stand-in of its
fairface model (the real file's signature; what it computes is known, so the test knows the answer)."""

from __future__ import annotations

import json

import hostk
import numpy as np
import onnx
import pytest
import standins
from test_cli import ffbatch_here

from facefusion_batch.config import SwapSettings, validate_swap
from facefusion_batch.errors import InputError
from facefusion_batch.faces.classify import (
    AGE_BANDS,
    GENDERS,
    FaceClasses,
    FaceClassifier,
    FaceFilter,
    FaceFilterSettings,
    keep_mask,
)
from facefusion_batch.faces.select import select_faces
from facefusion_batch.models.facefusion import MODELS
from facefusion_batch.models.prepare import make_dynamic_batch
from facefusion_batch.video.pictures.stills import read_image

K = hostk.HOST


def facefusion_age_passes(band: int, start: int, end: int) -> bool:
    """FaceFusion's filter_faces_by_age, re-derived: set(face.age) & set(range(start, end))."""
    lo, hi = AGE_BANDS[band]
    return bool(set(range(lo, hi)) & set(range(start, end)))


def test_filters_keep_what_facefusions_would():
    classes = FaceClasses(
        gender=np.array([0, 1, 1, 0, 1, 0, 1, 0, 1]),
        age=np.arange(9),
        race=np.array([0, 1, 2, 3, 4, 5, 6, 3, 0]),
    )
    assert keep_mask(classes, FaceFilterSettings(gender="female")).tolist() == [0, 1, 1, 0, 1, 0, 1, 0, 1]
    assert np.flatnonzero(keep_mask(classes, FaceFilterSettings(race="asian"))).tolist() == [3, 4, 7]
    for start, end in ((0, 100), (20, 30), (29, 30), (3, 9), (9, 10), (65, 71), (0, 1)):
        expected = [facefusion_age_passes(b, start, end) for b in range(9)]
        got = keep_mask(classes, FaceFilterSettings(age_start=start, age_end=end)).tolist()
        assert got == expected, (start, end)
    source = FaceClasses(np.array([1]), np.array([4]), np.array([5]))
    auto = keep_mask(classes, FaceFilterSettings(gender="auto", race="auto"), source)
    assert np.flatnonzero(auto).tolist() == []  # female and indian: face 5 is male
    assert np.flatnonzero(keep_mask(classes, FaceFilterSettings(gender="auto"), source)).tolist() == [
        1,
        2,
        4,
        6,
        8,
    ]


@pytest.fixture(scope="module")
def classifier(models, tmp_path_factory):
    path = tmp_path_factory.mktemp("fairface") / "fairface.onnx"
    onnx.save(make_dynamic_batch(standins.fairface())[0], str(path))
    session = models.backend.load(path, label="fairface stand-in")
    calls = []

    class Counting:
        inputs, outputs = session.inputs, session.outputs

        def run(self, feeds):
            calls.append(len(feeds["input"]))
            return session.run(feeds)

    c = FaceClassifier(Counting(), MODELS["fairface"])
    c.calls = calls
    return c


def painted(models, image):
    """t1 with face 0 tinted red (female to the stand-in), face 1 blue and dark (male, young),
    face 2 bright (old); and its face table."""
    table = hostk.detect(models, [image])
    out = image.astype(np.int16)
    for row, change in ((0, (0, 0, 90)), (1, (40, -60, -60)), (2, (80, 80, 80))):
        x0, y0, x1, y1 = table.box[row].astype(int)
        out[max(0, y0 - 20) : y1 + 20, max(0, x0 - 20) : x1 + 20] += np.array(change, np.int16)
    x0, y0, x1, y1 = table.box[1].astype(int)
    out[max(0, y0 - 20) : y1 + 20, max(0, x0 - 20) : x1 + 20] //= 4
    return np.clip(out, 0, 255).astype(np.uint8), table


def test_one_classifier_call_and_the_filters_on_a_frame(models, t1_small, classifier):
    image, table = painted(models, t1_small)
    frames = hostk.frames([image])
    classifier.calls.clear()
    classes = classifier.classify(K, frames, table)
    assert classifier.calls == [len(table)]  # every face in one call
    assert classes.gender[0] == 1 and classes.gender[1] == 0
    assert classes.age[1] < classes.age[0] < classes.age[2]
    female = FaceFilter(classifier, FaceFilterSettings(gender="female"))(K, frames, table)
    assert 0 in [int(np.flatnonzero((table.box == b).all(1))[0]) for b in female.box]
    assert len(female) == int((classes.gender == 1).sum()) < len(table)
    young_end = AGE_BANDS[int(classes.age[1])][1]
    young = FaceFilter(classifier, FaceFilterSettings(age_start=0, age_end=young_end))(K, frames, table)
    assert len(young) >= 1 and all(
        classes.age[np.flatnonzero((table.box == b).all(1))[0]] <= classes.age[1] for b in young.box
    )


def test_filter_options_are_checked():
    for f, match in (
        (FaceFilterSettings(gender="other"), "--face-selector-gender must be one of"),
        (FaceFilterSettings(race="martian"), "--face-selector-race must be one of"),
        (FaceFilterSettings(age_start=101), "--face-selector-age-start must be between 0 and 100"),
        (FaceFilterSettings(age_start=40, age_end=30), "--face-selector-age-end"),
    ):
        with pytest.raises(InputError, match=match):
            validate_swap(SwapSettings(face_filter=f), "many")


def test_render_with_the_filters(tmp_path, private_home, t1_small, models, astronaut_path, classifier):
    from media import decode_all, make_clip

    image, _ = painted(models, t1_small)
    clip = make_clip(tmp_path / "clip.mp4", frames=3, size=(480, 320), image=image, pan=False)
    args = ["render", clip, "-s", astronaut_path, "--swapper", "classical", "--report", tmp_path / "r.json"]
    # without the model file: exit 2 naming it and how to get it, before any frame
    absent = ffbatch_here(
        *args,
        "--face-selector-gender",
        "female",
        "-o",
        tmp_path / "a.mp4",
        home=private_home,
    )
    assert absent.returncode == 2, absent.stderr
    assert "--face-selector-gender needs FaceFusion's gender-age model fairface" in absent.stderr
    assert "ffbatch models fetch fairface" in absent.stderr and not (tmp_path / "a.mp4").exists()
    store = standins.write_standins(tmp_path / "models", ["fairface"])
    counts = {}
    for name, extra in (
        ("all", []),
        ("female", ["--face-selector-gender", "female"]),
        ("male", ["--face-selector-gender", "male"]),
    ):
        proc = ffbatch_here(
            *args, *extra, "--models-dir", store, "-o", tmp_path / f"{name}.mp4", home=private_home
        )
        assert proc.returncode == 0, proc.stderr
        counts[name] = json.loads((tmp_path / "r.json").read_text())["faces_swapped"]
        assert len(decode_all(tmp_path / f"{name}.mp4")[0]) == 3
    assert 0 < counts["female"] < counts["all"] and counts["female"] + counts["male"] == counts["all"]
    # auto: the --source face's gender, classified once at the start
    photo = read_image(astronaut_path)
    source = select_faces(hostk.detect(models, [photo]), "one", 1)
    gender = GENDERS[int(classifier.classify(K, hostk.frames([photo]), source).gender[0])]
    auto = ["--face-selector-gender", "auto", "--models-dir", store, "-o", tmp_path / "auto.mp4"]
    proc = ffbatch_here(*args, *auto, home=private_home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["faces_swapped"] == counts[gender]
