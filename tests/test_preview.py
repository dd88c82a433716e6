"""`ffbatch preview` with render's swap options: the sheet it writes, its errors, the learned path.

The learned cases run on the stand-in models of `standins.py` in a private $FFBATCH_HOME
(the learned path writes its dynamic-batch copies into the store).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import cv2
import hostk
import numpy as np
import pytest
import standins
import typer
from media import decode_all, make_clip
from test_cli import ffbatch_here

from facefusion_batch.cli import app
from facefusion_batch.config import SwapSettings
from facefusion_batch.errors import ModelError
from facefusion_batch.pipeline import build
from facefusion_batch.swap.classical.stage import ClassicalSwapper
from facefusion_batch.swap.learned import LearnedSettings, LearnedSwapper
from facefusion_batch.tools import preview
from facefusion_batch.tools.preview import SHEET_COLUMN_WIDTH, contact_sheet, draw_label, face_crops

CLIP_SIZE = (480, 320)  # (width, height)
ROW_HEIGHT = round(CLIP_SIZE[1] * SHEET_COLUMN_WIDTH / CLIP_SIZE[0])  # each side scaled to 640 wide
GAP = 4  # white lines between the columns and between the rows
LABEL_ROWS = 32  # the "before t=..." / "after t=..." captions sit in the top rows of each picture

# the options preview shares with render, which must mean exactly the same in both
SHARED_OPTIONS = (
    "faces",
    "blend",
    "eyes_mouth",
    "colour",
    "swapper",
    "swapper_model",
    "swapper_weight",
    "pixel_boost",
    "enhancer_model",
    "enhancer_blend",
    "enhancer_weight",
    "embedding_convention",
    "mask",
    "mask_blur",
    "mask_padding",
    "mask_regions",
    "occluder_model",
    "parser_model",
    "reference_face",
    "reference_frame",
    "reference_face_position",
    "reference_distance",
    "score_threshold",
    "face_order",
    "face_index",
    "source_face_index",
    "backend",
    "models_dir",
)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """Exit 2, nothing on stdout, exactly one `ffbatch: error:` line and no traceback: that line."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ffbatch: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def faces_swapped(proc: subprocess.CompletedProcess) -> int:
    found = re.search(r"(\d+) frames sampled, (\d+) faces swapped", proc.stderr)
    assert found, proc.stderr
    return int(found.group(2))


def read_sheet(sheet: Path, rows: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (before, after) pictures of each row, after checking the layout: two 640-wide columns,
    rows of the clip's scaled height, white 4-pixel gaps."""
    image = cv2.imread(str(sheet))
    assert image is not None, sheet
    width = SHEET_COLUMN_WIDTH
    assert image.shape == (rows * ROW_HEIGHT + (rows - 1) * GAP, 2 * width + GAP, 3)
    assert np.all(image[:, width : width + GAP] == 255)
    pairs = []
    for r in range(rows):
        y = r * (ROW_HEIGHT + GAP)
        if r:
            assert np.all(image[y - GAP : y] == 255)
        pairs.append((image[y : y + ROW_HEIGHT, :width], image[y : y + ROW_HEIGHT, width + GAP :]))
    return pairs


def face_mask(models, picture: np.ndarray, grow: float = 1.0, score: float | None = None) -> np.ndarray:
    """Where the detector's face boxes (grown `grow` times about their centres) lie; `score`: the
    detector's threshold instead of its default."""
    detector = models.detector
    default = detector.settings
    try:
        if score is not None:
            detector.settings = dataclasses.replace(default, score_threshold=score)
        table = hostk.detect(models, [np.ascontiguousarray(picture)])
    finally:
        detector.settings = default
    assert len(table) >= 1
    mask = np.zeros(picture.shape[:2], bool)
    for x0, y0, x1, y1 in table.box:
        cx, cy, w, h = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * grow, (y1 - y0) * grow
        mask[int(max(0, cy - h / 2)) : int(cy + h / 2), int(max(0, cx - w / 2)) : int(cx + w / 2)] = True
    return mask


@pytest.fixture(scope="module")
def clip(tmp_path_factory, t1_small) -> Path:
    """6 frames of 480x320 panning over t1 (several faces in each)."""
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=6, size=CLIP_SIZE, image=t1_small)


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory) -> Path:
    return standins.write_standins(tmp_path_factory.mktemp("standins"))


@pytest.fixture(scope="module")
def private_home(tmp_path_factory, models) -> Path:
    from facefusion_batch import paths

    return standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))


# --- the options ---------------------------------------------------------------------------------


def test_preview_takes_renders_swap_options_with_the_same_names_defaults_and_help():
    commands = typer.main.get_command(app).commands
    render = {p.name: p for p in commands["render"].params}
    preview = {p.name: p for p in commands["preview"].params}
    for name in SHARED_OPTIONS:
        r, p = render[name], preview[name]
        assert (p.opts, p.default, p.help, p.required) == (r.opts, r.default, r.help, r.required), name
        assert p.type_descriptor.annotation is r.type_descriptor.annotation, name


@pytest.mark.parametrize(
    "extra",
    [
        ("--swapper-weight", "2"),
        ("--faces", "three"),
        ("--swapper", "magic"),
        ("--swapper-model", "nope"),
        ("--swapper", "classical", "--swapper-model", "inswapper_128"),
        ("--pixel-boost", "100"),
        ("--enhancer-model", "nope"),
        ("--enhancer-blend", "101"),
        ("--mask", "box,bogus"),
        ("--mask-blur", "1.5"),
        ("--mask-padding", "1,2"),
        ("--mask-padding", "abc"),
        ("--mask-regions", "nose,tail"),
        ("--occluder-model", "xseg_9"),
        ("--score-threshold", "1.5"),
        ("--source-face-index", "-1"),
        ("--faces", "reference"),
        ("--faces", "reference", "--reference-frame", "0", "--reference-distance", "2"),
        ("--faces", "reference", "--reference-frame", "0", "--reference-face-position", "-1"),
        ("--swapper-weight", "heavy"),
    ],
    ids=lambda extra: " ".join(extra),
)
def test_bad_values_give_renders_one_line_error_and_exit_2(tmp_path, clip, astronaut_path, extra):
    sheet = tmp_path / "sheet.png"
    line = error_line(ffbatch_here("preview", clip, "-s", astronaut_path, "-o", sheet, *extra))
    option = extra[-2] if extra[-1] != "reference" else "--faces"
    assert option in line, line
    # the very same message as render's for the same options
    rendered = ffbatch_here("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", *extra)
    assert line == error_line(rendered).replace("'ffbatch render", "'ffbatch preview")
    assert not sheet.exists() and list(tmp_path.iterdir()) == []


def test_a_missing_reference_face_is_named(tmp_path, clip, astronaut_path):
    missing = tmp_path / "her.jpg"
    proc = ffbatch_here(
        "preview", clip, "-s", astronaut_path, "-o", tmp_path / "s.png", "--faces", "reference",
        "--reference-face", missing,
    )  # fmt: skip
    line = error_line(proc)
    assert "--reference-face" in line and str(missing) in line and "no such file" in line


@pytest.mark.parametrize("swapper", ["classical", "learned"])
def test_source_face_index_beyond_the_sources_faces(
    tmp_path, clip, astronaut_path, standin_dir, private_home, swapper
):
    sheet = tmp_path / "sheet.png"
    args = ["--swapper", swapper] + (["--swapper-model", "inswapper_128"] if swapper == "learned" else [])
    proc = ffbatch_here(
        "preview", clip, "-s", astronaut_path, "-o", sheet, "--source-face-index", "1",
        "--models-dir", standin_dir, *args, home=private_home,
    )  # fmt: skip
    line = error_line(proc)
    assert line == (
        f"ffbatch: error: --source-face-index 1: source image {astronaut_path} has only 1 face "
        "(indices 0-0, largest first)"
    )
    assert not sheet.exists()


# --- the sheet -----------------------------------------------------------------------------------


def test_classical_preview_sheet_and_faces_one(tmp_path, clip, astronaut_path, models):
    runs = {}
    for faces in ("many", "one"):
        sheet = tmp_path / f"{faces}.png"
        proc = ffbatch_here(
            "preview", clip, "-s", astronaut_path, "-o", sheet, "--frames", "2", "--swapper", "classical",
            "--faces", faces, "--colour", "global", "--blend", "feather",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"{sheet}\n"
        runs[faces] = faces_swapped(proc), read_sheet(sheet, rows=2)
    many, one = runs["many"][0], runs["one"][0]
    assert one == 2 and many > one, (many, one)  # one face per sampled frame
    for before, after in runs["many"][1]:
        near = face_mask(models, before)
        diff = np.abs(before.astype(int) - after.astype(int)).max(axis=2)
        diff[:LABEL_ROWS] = 0
        assert diff[near].mean() > 5, diff[near].mean()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.png", "one.png"]  # no leftovers


@pytest.fixture(scope="module")
def learned_preview(tmp_path_factory, clip, astronaut_path, standin_dir, private_home):
    sheet = tmp_path_factory.mktemp("learned") / "sheet.png"
    proc = ffbatch_here(
        "preview", clip, "-s", astronaut_path, "-o", sheet, "--frames", "2", "--models-dir", standin_dir,
        "--swapper-model", "inswapper_128", "--swapper-weight", "0.4", "--mask-blur", "0.2",
        home=private_home,
    )  # fmt: skip
    return proc, sheet


def test_learned_preview_changes_the_faces_and_nothing_else(learned_preview, models):
    proc, sheet = learned_preview
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{sheet}\n"
    assert "inswapper_128 is present" in proc.stderr
    for before, after in read_sheet(sheet, rows=2):
        diff = np.abs(before.astype(int) - after.astype(int)).max(axis=2)
        diff[:LABEL_ROWS] = 0
        # a face cut by the frame's edge that this frame alone scores under 0.6 is painted still, as
        # its track holds it (so a render paints it)
        near, around = face_mask(models, before), face_mask(models, before, grow=2.5, score=0.4)
        # the stand-in swapper repaints each face; away from the faces the two halves are one picture
        assert (diff[near] > 20).mean() > 0.3, (diff[near] > 20).mean()
        assert (diff[~around] > 2).mean() < 0.002, (diff[~around] > 2).mean()


def test_learned_preview_with_a_reference_frame(
    tmp_path, learned_preview, clip, astronaut_path, standin_dir, private_home
):
    sheet = tmp_path / "sheet.png"
    proc = ffbatch_here(
        "preview", clip, "-s", astronaut_path, "-o", sheet, "--frames", "2", "--models-dir", standin_dir,
        "--swapper-model", "inswapper_128", "--faces", "reference", "--reference-frame", "0",
        "--reference-distance", "0.1",
        home=private_home,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    read_sheet(sheet, rows=2)
    assert 1 <= faces_swapped(proc) < faces_swapped(learned_preview[0])


# --- what the learned path loads -----------------------------------------------------------------


def test_the_learned_path_never_asks_for_the_face_mesh(
    monkeypatch, standin_dir, private_home, astronaut_path, t1_small
):
    monkeypatch.setenv("FFBATCH_HOME", str(private_home))
    model_path = build.store.model_path
    asked: list[str] = []

    def mesh_absent(name, **kw):
        asked.append(name)
        if name in (build.MESH_MODEL, build.TOPOLOGY):
            raise ModelError(f"{name} is not in this store")
        return model_path(name, **kw)

    monkeypatch.setattr(build.store, "model_path", mesh_absent)
    models = build.load_models("cpu", threads=2, models_dir=standin_dir)
    learned = SwapSettings(swapper="learned", learned=LearnedSettings(swapper_model="inswapper_128"))
    pipeline = build.build_pipeline(models, (astronaut_path,), learned, "many")
    assert isinstance(pipeline.stage("swap"), LearnedSwapper) and pipeline.stage("mesh") is None
    assert hostk.run(pipeline, [t1_small]).faces_swapped >= 1
    assert build.MESH_MODEL not in asked and build.TOPOLOGY not in asked, asked
    assert build.MESH_MODEL not in models.paths and build.TOPOLOGY not in models.paths
    # the classical swap does need them: the same models then ask for the mesh
    with pytest.raises(ModelError, match=build.MESH_MODEL):
        build.build_pipeline(models, (astronaut_path,), SwapSettings(swapper="classical"), "many")


def test_the_classical_path_loads_the_mesh_and_topology_on_first_use(astronaut_path, t1_small):
    models = build.load_models("cpu", threads=2, models_dir=None)
    assert set(models.paths) == {build.DETECTOR_MODEL}
    pipeline = build.build_pipeline(models, (astronaut_path,), SwapSettings(swapper="classical"), "many")
    swapper, mesh = pipeline.stage("swap"), pipeline.stage("mesh")
    assert isinstance(swapper, ClassicalSwapper) and mesh.session is models.mesh.session
    assert {build.MESH_MODEL, build.TOPOLOGY} <= set(models.paths)
    assert hostk.run(pipeline, [t1_small]).faces_swapped >= 1


def test_a_sheet_label_is_outlined_where_its_letters_are():
    """The label's black outline hugs its white letters on any picture: its ink ends where the
    letters end (OpenCV 5 lays a thick black copy out wider, which ran a character past them)."""
    grey = np.full((40, 300, 3), 128, np.uint8)
    draw_label(grey, "after  t=12.34s")
    white = np.flatnonzero((grey.min(axis=2) > 200).any(axis=0))
    black = np.flatnonzero((grey.max(axis=2) < 60).any(axis=0))
    assert len(white) and len(black)
    assert abs(int(black.max()) - int(white.max())) <= 2 and abs(int(black.min()) - int(white.min())) <= 2


def test_face_crops_show_the_painted_faces_at_one_to_one():
    """`--crops`: under its row, each painted face before | after at its own pixels (not scaled),
    wrapped to the sheet's width; a frame without faces adds nothing."""
    rng = np.random.default_rng(3)
    before = rng.integers(0, 255, (200, 300, 3), dtype=np.uint8)
    after = 255 - before
    rects = [(10, 20, 60, 50), (200, 100, 90, 80)]
    tiles = face_crops(before, after, rects, width=180)
    # 60+2+60 fits a line; 90+2+90 = 182 is wider than 180: its own line, scaled down to fit
    assert tiles.shape[1] == 180
    assert np.array_equal(tiles[:50, :60], before[20:70, 10:70])
    assert np.array_equal(tiles[:50, 62:122], after[20:70, 10:70])
    assert face_crops(before, after, [], width=180) is None
    rows = [("t=0.00s", before, after), ("t=1.00s", before, after)]
    plain = contact_sheet(rows)
    closer = contact_sheet(rows, [rects[:1], []])
    assert closer.shape[0] == plain.shape[0] + 50 + 4  # one line of crops under the first row only
    top = plain.shape[0] // 2 + 2  # under the first row and its gap, from the sheet's left edge
    assert np.array_equal(closer[top : top + 50, :60], before[20:70, 10:70])


def test_preview_crops_option(tmp_path, clip, astronaut_path):
    sheet = tmp_path / "sheet.png"
    proc = ffbatch_here(
        "preview", clip, "-s", astronaut_path, "-o", sheet, "--frames", "1", "--swapper", "classical",
        "--crops",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert faces_swapped(proc) > 0
    image = cv2.imread(str(sheet))
    assert image.shape[1] == 2 * SHEET_COLUMN_WIDTH + GAP and image.shape[0] > ROW_HEIGHT + GAP
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sheet.png"]


# --- the preview is the render -------------------------------------------------------------------


@pytest.mark.slow
def test_preview_frames_are_the_renders_frames_on_a_moving_clip(
    tmp_path, monkeypatch, t1_small, astronaut_path
):
    """On a panning clip the sampled frames go through the face tracks with a render's warm-up, so
    every "after" picture (and crop) is the lossless render's decoded frame at that time, to the
    level; the same frames swapped alone, without the tracks' history, are not."""
    clip = make_clip(tmp_path / "pan.mp4", frames=48, size=CLIP_SIZE, image=t1_small, audio=None)
    render = tmp_path / "render.mkv"
    swap = ("-s", astronaut_path, "--swapper", "classical")
    proc = ffbatch_here("render", clip, *swap, "-o", render, "--encoder", "ffv1")
    assert proc.returncode == 0, proc.stderr
    decoded, time_base = decode_all(render)
    inputs = [image for _, image in decode_all(clip)[0]]
    assert len(decoded) == len(inputs) == 48

    seen = {}
    real = preview.render_frames

    def spy(renderer, settings, info, index, wanted):
        rows, swapped = real(renderer, settings, info, index, wanted)
        seen.update(wanted=wanted, rows=rows, alone=[renderer.swap([row[1]]).frames[0] for row in rows])
        return rows, swapped

    monkeypatch.setattr(preview, "render_frames", spy)
    sheet = tmp_path / "sheet.png"
    # frames 12 and 36: the second's warm-up starts at frame 14, after the first's ends
    proc = ffbatch_here("preview", clip, *swap, "-o", sheet, "--frames", "2", "--crops")
    assert proc.returncode == 0, proc.stderr
    assert seen["wanted"] == [12, 36]
    expected, differs_alone = [], []
    for n, (seconds, before, after, rects), alone in zip(
        seen["wanted"], seen["rows"], seen["alone"], strict=True
    ):
        assert seconds == pytest.approx(float(decoded[n][0] * time_base))
        assert np.array_equal(before, inputs[n])
        assert rects, n  # faces were painted
        assert np.array_equal(after, decoded[n][1]), np.abs(after.astype(int) - decoded[n][1]).max()
        differs_alone.append(np.abs(alone.astype(int) - decoded[n][1]).max())
        expected.append((f"t={seconds:.2f}s", inputs[n], decoded[n][1], rects))
    assert max(differs_alone) > 20, differs_alone
    # the sheet, crops included, is the one the input and the render's frames make
    want = contact_sheet([row[:3] for row in expected], [row[3] for row in expected])
    assert np.array_equal(cv2.imread(str(sheet)), want)
