"""Compositing outputs (issue 12, item 6): `--face-only-output` (the swapped faces with straight
alpha) and `--matte-output`, frame for frame beside the main output, in whole renders, `--frames`
segments and chunked, resumable renders.

The clip is lossless RGB (FFV1 bgr0, variable frame rate) rendered into a lossless RGB output,
so the layer can be compared with the output pixel for pixel: where its alpha is full its colour
is the output's, and over the input it gives the output back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from media import make_clip
from test_cli import ffbatch, ffbatch_here
from test_farm_resume import interrupt_after

from facefusion_batch.config import RenderSettings, SwapSettings, check_matte_run, template_literal
from facefusion_batch.errors import InputError, Interrupted
from facefusion_batch.farm.chunk_compositing import staged
from facefusion_batch.farm.jobs import render
from facefusion_batch.farm.manifest import work_dir_for
from facefusion_batch.farm.outputs import compositing_paths
from facefusion_batch.models.assets import asset_path
from facefusion_batch.pipeline.run import Renderer
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.video.compositing.compositing import face_layer
from facefusion_batch.video.encode.encoder_policy import EncoderSettings

FRAMES = 12
CHUNK = 5
SIZE = (256, 144)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compositing")


@pytest.fixture(scope="module")
def clip(work) -> Path:
    """12 frames panning over t1 (two or three faces a frame), RGB, lossless, variable rate."""
    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (400, 277), interpolation=cv2.INTER_AREA)
    return make_clip(
        work / "in.mkv", image=photo, size=SIZE, frames=FRAMES, audio=None, codec="ffv1", pix_fmt="bgr0",
        vfr=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def settings(clip, work) -> RenderSettings:
    return RenderSettings(
        input=clip,
        output=work / "unused.mkv",
        sources=(asset_path("astronaut.png"),),
        encoder=EncoderSettings(codec="ffv1", pix_fmt="bgr0"),
        # one alpha per pixel: the layer gives the output back
        swap=SwapSettings(swapper="classical", classical=ClassicalSettings(blend="feather")),
        quiet=True,
    )


@pytest.fixture(scope="module")
def renderer(settings) -> Renderer:
    return Renderer.load(settings)


def decoded(path: Path, fmt: str) -> tuple[list[np.ndarray], list[int]]:
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    return [f.to_ndarray(format=fmt) for f in frames], [f.pts for f in frames]


def sequence(folder: Path, prefix: str, numbers, fmt: str) -> list[np.ndarray]:
    return [decoded(next(folder.glob(f"{prefix}.*{n}.*")), fmt)[0][0] for n in numbers]


@pytest.fixture(scope="module")
def whole(work, settings, renderer) -> dict:
    """One whole render with the matte and the face layer as PNG sequences: the reference."""
    folder = work / "whole"
    folder.mkdir()
    job = replace(
        settings,
        output=folder / "out.mkv",
        matte_output=folder / "matte.%04d.png",
        face_only_output=folder / "face.%04d.png",
    )
    report = render(job, renderer=renderer)
    assert report.faces_swapped >= FRAMES
    assert [(c["option"], c["pix_fmt"], c.get("alpha")) for c in report.summary()["compositing"]] == [
        ("--matte-output", "gray", None),
        ("--face-only-output", "rgba", "straight"),
    ]
    numbers = range(1001, 1001 + FRAMES)
    out, pts = decoded(job.output, "rgb24")
    return {
        "folder": folder,
        "out": out,
        "pts": pts,
        "input": decoded(settings.input, "rgb24")[0],
        "matte": sequence(folder, "matte", numbers, "gray"),
        "face": sequence(folder, "face", numbers, "rgba"),
    }


def over(colour: np.ndarray, alpha: np.ndarray, plate: np.ndarray) -> np.ndarray:
    """Straight-alpha `over`, as a compositor merges the layer onto the input (0–255 floats)."""
    a = alpha.astype(np.float64)[..., None]
    return a * colour + (1 - a) * plate


def test_face_layer_png_is_the_swapped_faces_with_straight_alpha(whole):
    """Alpha is the matte (0 where nothing was pasted, > 0 where it was); where it is full the
    colour is exactly the output's (PNG against FFV1); over the input it gives the output back;
    transparent black elsewhere; one image per output frame."""
    assert len(whole["face"]) == len(whole["out"]) == FRAMES
    painted = 0
    layers = zip(whole["face"], whole["matte"], whole["out"], whole["input"], strict=True)
    for face, matte, out, plate in layers:
        alpha = face[..., 3]
        assert np.array_equal(alpha, matte)
        assert not face[alpha == 0].any()
        changed = (out != plate).any(axis=-1)
        assert not (changed & (alpha == 0)).any()
        full = alpha == 255
        assert np.array_equal(face[full][:, :3], out[full])
        inside = alpha > 0
        back = over(face[..., :3].astype(np.float64), alpha / 255, plate)
        assert np.abs(back - out)[inside].max(initial=0) <= 1.0
        painted += int(inside.sum())
    assert painted > 10_000


def test_the_face_layer_follows_the_paste_alpha_formula():
    """The layer's colour F solves a·F + (1 − a)·plate = out, and is clipped to the code range."""
    plate = np.full((4, 6, 3), 100, np.uint8)
    out = plate.copy()
    out[1, 2] = (150, 120, 110)  # a = 0.5: F = plate + 2 · change
    out[2, 3] = (255, 0, 100)  # a = 0.2: F beyond the range, clipped
    matte = np.zeros((4, 6), np.uint8)
    matte[1, 2], matte[2, 3] = 255 // 2 + 1, 51
    layer = face_layer(plate, out, matte, bits=16) / 257
    a = 128 / 255
    assert np.allclose(layer[1, 2, :3][::-1], 100 + (np.array([150, 120, 110]) - 100) / a, atol=0.01)
    assert np.allclose(layer[2, 3, :3][::-1], [255, 0, 100], atol=0.01)
    assert np.allclose(layer[..., 3], matte) and not layer[matte == 0].any()
    assert face_layer(plate, out, matte, bits=8).dtype == np.uint8


def test_face_layer_as_half_float_exr(tmp_path, settings, renderer, whole):
    job = replace(settings, output=tmp_path / "out.mkv", face_only_output=tmp_path / "face.%06d.exr")
    render(job, renderer=renderer)
    names = ["out.mkv"] + [f"face.{n:06d}.exr" for n in range(1001, 1001 + FRAMES)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    with av.open(str(tmp_path / "face.001004.exr")) as image:
        frame = next(image.decode(video=0))
    assert frame.format.name == "gbrapf16le"  # RGBA, half: a step of 2^-11 below 1, an eighth of a level
    face = frame.to_ndarray(format="gbrapf32le").astype(np.float64)
    alpha, matte, out = face[..., 3], whole["matte"][3], whole["out"][3]
    assert np.abs(alpha * 255 - matte).max() <= 0.25 and not face[matte == 0].any()
    full = matte == 255
    assert np.abs(face[full][:, :3] * 255 - out[full]).max() <= 0.5
    back = over(face[..., :3] * 255, alpha, whole["input"][3])
    assert np.abs(back - out)[matte > 0].max(initial=0) <= 1.0


def test_face_layer_as_prores_4444_with_alpha(tmp_path, settings, renderer, whole):
    """ProRes 4444 with alpha in .mov: the output's timestamps; alpha 0 exactly where the matte is,
    within a level elsewhere; colour within the codec's tolerance."""
    job = replace(
        settings,
        output=tmp_path / "out.mkv",
        face_only_output=tmp_path / "face.mov",
        matte_output=tmp_path / "matte.mkv",
    )
    render(job, renderer=renderer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["face.mov", "matte.mkv", "out.mkv"]
    with av.open(str(job.face_only_output)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "prores" and stream.codec_context.codec_tag == "ap4h"
        assert stream.codec_context.pix_fmt.startswith("yuva444p")
    faces, pts = decoded(job.face_only_output, "rgba64le")
    assert pts == whole["pts"] and decoded(job.matte_output, "gray")[1] == whole["pts"]
    assert len(set(np.diff(pts))) > 1  # the clip's rate varies: the pts are the input's, not renumbered
    for face, matte, out in zip(faces, whole["matte"], whole["out"], strict=True):
        alpha = face[..., 3] / 257
        assert not face[..., 3][matte == 0].any() and (face[..., 3][matte > 0] > 0).all()
        assert np.abs(alpha - matte).max() <= 1.0
        full = matte == 255
        if full.any():
            error = np.abs(face[full][:, :3] / 257 - out[full])
            assert error.mean() < 1.0 and error.max() <= 4.0


def test_a_chunked_render_writes_the_whole_renders_sequences(tmp_path, settings, renderer, whole):
    """Chunks of 5 frames: the same files as a whole render, numbered by input frame, and nothing
    else in the directory once joined (the chunks' frames waited in the work directory)."""
    job = replace(
        settings,
        output=tmp_path / "out.mkv",
        chunk_frames=CHUNK,
        matte_output=tmp_path / "matte.%04d.png",
        face_only_output=tmp_path / "face.%04d.png",
    )
    report = render(job, renderer=renderer)
    assert report.segments == {"total": 3, "reused": 0, "rendered": 3}
    numbers = range(1001, 1001 + FRAMES)
    expected = ["out.mkv"] + [f"face.{n}.png" for n in numbers] + [f"matte.{n}.png" for n in numbers]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)
    for name in ("matte", "face"):
        fmt = "gray" if name == "matte" else "rgba"
        for got, want in zip(sequence(tmp_path, name, numbers, fmt), whole[name], strict=True):
            assert np.array_equal(got, want)


def interrupted_chunked_render(tmp_path, settings, renderer, matte: Path, layer: Path):
    """A chunked render with both compositing outputs, interrupted after two chunks: the job and
    its work directory, which is all there is beside the input (nothing looks finished)."""
    job = replace(
        settings,
        output=tmp_path / "out.mkv",
        chunk_frames=CHUNK,
        matte_output=matte,
        face_only_output=layer,
        batch_size=2,
    )
    with pytest.raises(Interrupted, match="resume"):
        render(job, renderer=renderer, on_progress=interrupt_after(2 * CHUNK))
    work = work_dir_for(job.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == [work.name]
    return job, work


def test_an_interrupted_chunked_render_resumes_only_chunks_missing_frames(
    tmp_path, settings, renderer, whole
):
    """Interrupted after two chunks: their frames are kept in the work directory, none is at its
    final name yet. A chunk whose matte frame went missing is rendered again, a complete one is not."""
    job, work = interrupted_chunked_render(
        tmp_path, settings, renderer, tmp_path / "matte.%04d.png", tmp_path / "face.%04d.png"
    )
    kept = staged(work, "--matte-output", job.matte_output).parent
    assert sorted(p.name for p in kept.iterdir()) == [f"matte.{n}.png" for n in range(1001, 1011)]
    (kept / "matte.1003.png").unlink()  # the first chunk is no longer complete
    report = render(job, renderer=renderer)
    assert report.segments == {"total": 3, "reused": 1, "rendered": 2}
    assert report.frames_out == CHUNK + FRAMES - 2 * CHUNK  # chunks 0:5 and 10:12
    numbers = range(1001, 1001 + FRAMES)
    for name in ("matte", "face"):
        fmt = "gray" if name == "matte" else "rgba"
        for got, want in zip(sequence(tmp_path, name, numbers, fmt), whole[name], strict=True):
            assert np.array_equal(got, want)
    assert not work.exists()


def test_a_chunked_render_joins_video_mattes_and_layers_like_the_output(tmp_path, settings, renderer, whole):
    """Video compositing outputs in chunks: a segment per chunk in the work directory (resumed
    like the output's: a chunk whose matte segment is gone is rendered again), joined after the
    output: the whole render's mattes and timestamps, ProRes 4444 (`ap4h`) kept through the join."""
    job, work = interrupted_chunked_render(
        tmp_path, settings, renderer, tmp_path / "matte.mkv", tmp_path / "face.mov"
    )
    mattes = staged(work, "--matte-output", job.matte_output)
    assert sorted(p.name for p in mattes.iterdir()) == ["00000000-00000005.mkv", "00000005-00000010.mkv"]
    (mattes / "00000005-00000010.mkv").unlink()
    report = render(job, renderer=renderer)
    assert report.segments == {"total": 3, "reused": 1, "rendered": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["face.mov", "matte.mkv", "out.mkv"]
    got, pts = decoded(job.matte_output, "gray")
    assert pts == whole["pts"] and all(np.array_equal(a, b) for a, b in zip(got, whole["matte"], strict=True))
    with av.open(str(job.face_only_output)) as container:
        assert container.streams.video[0].codec_context.codec_tag == "ap4h"
    faces, pts = decoded(job.face_only_output, "rgba64le")
    assert pts == whole["pts"]
    for face, want in zip(faces, whole["face"], strict=True):
        assert not face[..., 3][want[..., 3] == 0].any()
        assert np.abs(face / 257 - want).mean() < 0.5


def test_frame_range_segments_write_their_own_frames(tmp_path, settings, renderer, whole):
    """`--frames A:B` (a farm task) writes the sequences' frames A..B-1 at their final numbers;
    run again it is up to date only while those frames are all there."""
    folder = tmp_path / "shots"
    folder.mkdir()
    base = replace(settings, matte_output=folder / "m.%04d.png", face_only_output=folder / "f.%04d.exr")
    for start, end in ((0, CHUNK), (CHUNK, None)):
        render(replace(base, output=tmp_path / f"seg{start}.mkv", frames=(start, end)), renderer=renderer)
    numbers = range(1001, 1001 + FRAMES)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"m.{n}.png" for n in numbers] + [f"f.{n}.exr" for n in numbers]
    )
    for got, want in zip(sequence(folder, "m", numbers, "gray"), whole["matte"], strict=True):
        assert np.array_equal(got, want)
    first = replace(base, output=tmp_path / "seg0.mkv", frames=(0, CHUNK))
    assert render(first, renderer=renderer).status == "skipped"
    (folder / "f.1002.exr").unlink()
    with pytest.raises(InputError, match="pass --force"):
        render(first, renderer=renderer)
    again = render(replace(first, force=True, overwrite=True), renderer=renderer)
    assert again.status != "skipped" and again.frames_out == CHUNK
    assert (folder / "f.1002.exr").is_file()


def test_frame_range_segments_write_video_segments_that_concat_joins(tmp_path, settings, renderer, whole):
    """A farm task's video matte and layer are segments of its range, tagged like its output:
    up to date together, and `ffbatch concat` joins them into the whole render's."""
    parts = []
    for start, end in ((0, CHUNK), (CHUNK, None)):
        part = replace(
            settings,
            output=tmp_path / f"seg{start}.mkv",
            frames=(start, end),
            matte_output=tmp_path / f"matte{start}.mkv",
            face_only_output=tmp_path / f"face{start}.mov",
        )
        render(part, renderer=renderer)
        parts.append(part)
    assert render(parts[0], renderer=renderer).status == "skipped"
    parts[0].matte_output.unlink()
    with pytest.raises(InputError, match="pass --force"):
        render(parts[0], renderer=renderer)
    render(replace(parts[0], force=True, overwrite=True), renderer=renderer)
    for name, option in (("matte.mkv", "matte_output"), ("face.mov", "face_only_output")):
        proc = ffbatch_here("concat", *(getattr(p, option) for p in parts), "-o", tmp_path / name)
        assert proc.returncode == 0, proc.stderr
    got, pts = decoded(tmp_path / "matte.mkv", "gray")
    assert pts == whole["pts"] and all(np.array_equal(a, b) for a, b in zip(got, whole["matte"], strict=True))
    faces, pts = decoded(tmp_path / "face.mov", "rgba64le")
    assert pts == whole["pts"] and len(faces) == FRAMES
    with av.open(str(tmp_path / "face.mov")) as container:
        assert container.streams.video[0].codec_context.codec_tag == "ap4h"


def test_sequences_follow_the_start_number(tmp_path, settings, renderer, whole):
    job = replace(
        settings,
        output=tmp_path / "out.mkv",
        encoder=replace(settings.encoder, start_number=0),
        matte_output=tmp_path / "m.%03d.tif",
        frames=(3, 6),
    )
    render(job, renderer=renderer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.003.tif", "m.004.tif", "m.005.tif", "out.mkv"]
    assert np.array_equal(decoded(tmp_path / "m.004.tif", "gray")[0][0], whole["matte"][4])
    again = replace(job, output=tmp_path / "other.mkv")  # as the main output: not replaced unasked
    with pytest.raises(InputError, match=r"m\.003\.tif already exists; pass --overwrite"):
        render(again, renderer=renderer)
    render(replace(again, overwrite=True), renderer=renderer)


def test_an_image_sequence_input_keeps_its_numbers(tmp_path, settings, renderer, whole):
    """The main output's rule: an input sequence's own first number (here 50) numbers the matte."""
    plate = tmp_path / "plate"
    plate.mkdir()
    for i, image in enumerate(whole["input"][:3]):
        cv2.imwrite(str(plate / f"p.{50 + i:04d}.png"), image[..., ::-1])
    job = replace(
        settings,
        input=plate / "p.%04d.png",
        output=tmp_path / "out.mkv",
        matte_output=tmp_path / "m.%04d.png",
        input_fps=25.0,
    )
    render(job, renderer=renderer)
    assert sorted(p.name for p in tmp_path.glob("m.*")) == ["m.0050.png", "m.0051.png", "m.0052.png"]
    assert np.array_equal(decoded(tmp_path / "m.0051.png", "gray")[0][0], whole["matte"][1])


def test_a_failed_render_leaves_no_compositing_file(tmp_path, settings, renderer):
    """Interrupted half way, a whole render removes every partial matte and layer it wrote."""
    job = replace(
        settings,
        output=tmp_path / "out.mkv",
        chunk_frames=0,
        matte_output=tmp_path / "m.%04d.png",
        face_only_output=tmp_path / "f.mov",
        batch_size=2,
    )
    with pytest.raises(Interrupted):
        render(job, renderer=renderer, on_progress=interrupt_after(6))
    assert list(tmp_path.iterdir()) == []


def test_impossible_compositing_outputs_are_exit_2_before_decoding(tmp_path, clip):
    """Refused up front with the reason: the input is not even a video, and nothing is written."""
    broken = tmp_path / "in" / "broken.mkv"
    broken.parent.mkdir()
    broken.write_bytes(b"not a video" * 100)
    out = tmp_path / "out"
    out.mkdir()
    base = ("render", broken, "-s", asset_path("astronaut.png"), "-o", out / "o.mkv", "--encoder", "ffv1")
    for extra, words in (
        (("--face-only-output", out / "f.mp4"), "ProRes 4444 with alpha in .mov"),
        (("--face-only-output", out / "f.mkv"), "the face layer needs alpha"),
        (("--face-only-output", out / "f.%04d.jpg"), "RGBA sequence of .exr, .png, .tif, .tiff"),
        (("--face-only-output", out / "f.%04d.dpx"), "the face layer needs alpha"),
        (("--matte-output", out / "m.mp4", "--frames", "0:4"), "write the matte as FFV1 in .mkv or .avi"),
        (("--matte-output", out / "m.%04d.exr"), "a matte sequence is written as"),
    ):
        proc = ffbatch_here(*base, *extra)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "broken.mkv" not in proc.stderr, proc.stderr
    still = ("render", asset_path("t1.jpg"), "-s", asset_path("astronaut.png"), "-o", out / "o.png")
    proc = ffbatch_here(*still, "--face-only-output", out / "f.%04d.png")
    assert proc.returncode == 2 and "is written for videos only" in proc.stderr, proc.stderr
    assert list(out.iterdir()) == []


def test_one_input_split_over_ray_or_several_gpus_is_not_refused(settings, tmp_path):
    """`--ray` and `--gpus A,B` stage the compositing outputs per segment (test_farm_ray.py,
    test_gpu_backends.py): the command line lets them through."""
    job = replace(settings, matte_output=tmp_path / "m.mkv", face_only_output=tmp_path / "f.%04d.exr")
    check_matte_run(job, 1)  # the run's split is not its concern: one input's paths are its own


def test_plan_passes_compositing_sequences_to_every_chunk(tmp_path, clip):
    """Each farm chunk writes its own frames of a sequence, on any backend."""
    base = ("plan", clip, "-s", asset_path("astronaut.png"), "-o", tmp_path / "o.mkv", "--encoder", "ffv1")
    layer = tmp_path / "f.%04d.exr"
    proc = ffbatch_here(*base, "--chunk-frames", "5", "--format", "json", "--face-only-output", layer)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    chunks = [task for job in plan["jobs"] for task in job["chunks"]]
    assert len(chunks) == 3
    for chunk in chunks:
        argv = chunk["argv"]
        assert argv[argv.index("--face-only-output") + 1] == str(layer)
    # a farm of GPU nodes: the torch kernel set records the mattes too
    matte = tmp_path / "m.%04d.png"
    proc = ffbatch_here(
        *base, "--backend", "cuda", "--chunk-frames", "5", "--format", "json", "--matte-output", matte
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)["jobs"][0]["chunks"][0]["argv"]
    assert argv[argv.index("--backend") + 1] == "cuda" and argv[argv.index("--matte-output") + 1] == str(
        matte
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_planned_video_matte_is_joined_by_a_task_of_its_own(tmp_path, clip, whole):
    """Each chunk writes its piece of the matte into the job's work directory; a join task of
    the matte's own gives the whole render's matte; the two joins leave no work directory."""
    out, matte = tmp_path / "o.mkv", tmp_path / "m.mkv"
    proc = ffbatch(
        "plan", clip, "-s", asset_path("astronaut.png"), "-o", out, "--encoder", "ffv1", "--pix-fmt", "bgr0",
        "--blend", "feather", "--matte-output", matte, "--chunk-frames", str(CHUNK), "--format", "json",
        "--ffbatch", f"{sys.executable} -m facefusion_batch",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["tasks"] == {"chunks": 3, "joins": 2}
    (job,) = plan["jobs"]
    pieces = [chunk["argv"][chunk["argv"].index("--matte-output") + 1] for chunk in job["chunks"]]
    assert all(Path(p).parent == staged(work_dir_for(out), "--matte-output", matte) for p in pieces)
    (join,) = job["compositing_joins"]
    assert join["option"] == "--matte-output" and join["argv"][-3:] == ["-o", str(matte), "--clean"]
    for task in [*(c["argv"] for c in job["chunks"]), job["join"]["argv"], join["argv"]]:
        done = subprocess.run(task, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    got, pts = decoded(matte, "gray")
    assert pts == whole["pts"] and all(np.array_equal(a, b) for a, b in zip(got, whole["matte"], strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mkv", "o.mkv"]  # work directory gone


# -- several inputs: each input's compositing outputs, from templates of its name ------------------

SECOND_FRAMES = 8
CLI_SETTINGS = (
    "-s",
    asset_path("astronaut.png"),
    "--encoder",
    "ffv1",
    "--pix-fmt",
    "bgr0",
    "--blend",
    "feather",
)


@pytest.fixture(scope="module")
def second(work, settings, renderer) -> dict:
    """A second input (the photo mirrored, 8 frames) and its single-input render: the reference
    for its compositing outputs in a run of several inputs."""
    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (400, 277), interpolation=cv2.INTER_AREA)
    clip = make_clip(
        work / "second.mkv", image=photo[:, ::-1].copy(), size=SIZE, frames=SECOND_FRAMES, audio=None,
        codec="ffv1", pix_fmt="bgr0",
    )  # fmt: skip
    folder = work / "second"
    folder.mkdir()
    job = replace(
        settings,
        input=clip,
        output=folder / "out.mkv",
        matte_output=folder / "matte.%04d.png",
        face_only_output=folder / "face.%04d.png",
    )
    assert render(job, renderer=renderer).faces_swapped >= SECOND_FRAMES
    numbers = range(1001, 1001 + SECOND_FRAMES)
    return {
        "clip": clip,
        "pts": decoded(job.output, "rgb24")[1],
        "matte": sequence(folder, "matte", numbers, "gray"),
        "face": sequence(folder, "face", numbers, "rgba"),
    }


def test_compositing_templates_expand_as_the_output_pattern_does():
    templates = [
        ("--matte-output", Path("m/{stem}.matte.mkv")),
        ("--face-only-output", Path("l/{name}.%06d.exr")),
    ]
    assert compositing_paths(templates, Path("/shots/a b.mov")) == [
        ("--matte-output", Path("m/a b.matte.mkv")),
        ("--face-only-output", Path("l/a b.mov.%06d.exr")),
    ]
    odd = Path("/shots/x{1}.mov")  # braces in a name survive a second expansion (a plan's chunk)
    (_, once), _ = compositing_paths(templates, odd)
    assert compositing_paths([("--matte-output", Path(template_literal(str(once))))], Path("y.mov")) == [
        ("--matte-output", Path("m/x{1}.matte.mkv"))
    ]
    with pytest.raises(InputError, match=r"use \{stem\}, \{ext\} and \{name\} only"):
        compositing_paths([("--matte-output", Path("m/{input}.mkv"))], odd)


@pytest.mark.slow
def test_several_inputs_each_write_their_compositing_outputs(tmp_path, clip, second, whole):
    """`--output-dir` with templated compositing paths: each input's matte (FFV1 video) and face
    layer (PNG sequence) are its single-input render's, pixel for pixel and pts for pts. Run
    again it is up to date and rewrites nothing; an input whose layer lost a frame is exit 2
    (never skipped half-written, never overwritten unasked) until --overwrite renders it again;
    one whose output is gone is rendered again only if its matte may be replaced."""
    out, mattes, layers = tmp_path / "out", tmp_path / "mattes", tmp_path / "layers"
    for folder in (out, mattes, layers):
        folder.mkdir()
    args = (
        "render", clip, second["clip"], *CLI_SETTINGS, "--output-dir", out, "-q",
        "--matte-output", mattes / "{stem}.matte.mkv", "--face-only-output", layers / "{stem}.face.%04d.png",
    )  # fmt: skip
    proc = ffbatch(*args)
    assert proc.returncode == 0, proc.stderr
    references = (("in", whole, FRAMES), ("second", second, SECOND_FRAMES))
    assert sorted(p.name for p in mattes.iterdir()) == ["in.matte.mkv", "second.matte.mkv"]
    assert sorted(p.name for p in layers.iterdir()) == sorted(
        f"{stem}.face.{n}.png" for stem, _, count in references for n in range(1001, 1001 + count)
    )
    for stem, reference, count in references:
        got, pts = decoded(mattes / f"{stem}.matte.mkv", "gray")
        assert pts == reference["pts"] and len(got) == count
        assert all(np.array_equal(a, b) for a, b in zip(got, reference["matte"], strict=True))
        faces = sequence(layers, f"{stem}.face", range(1001, 1001 + count), "rgba")
        assert all(np.array_equal(a, b) for a, b in zip(faces, reference["face"], strict=True))
    written = {p: p.stat().st_mtime_ns for folder in (out, mattes, layers) for p in folder.iterdir()}
    proc = ffbatch(*args)
    assert proc.returncode == 0, proc.stderr
    (layers / "second.face.1003.png").unlink()
    proc = ffbatch(*args)
    assert proc.returncode == 2 and "up to date but not its compositing outputs" in proc.stderr, proc.stderr
    assert "pass --overwrite" in proc.stderr and "Traceback" not in proc.stderr
    del written[layers / "second.face.1003.png"]
    assert {p: p.stat().st_mtime_ns for p in written} == written  # nothing rewritten, nor the first input
    proc = ffbatch(*args, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    faces = sequence(layers, "second.face", range(1001, 1001 + SECOND_FRAMES), "rgba")
    assert all(np.array_equal(a, b) for a, b in zip(faces, second["face"], strict=True))
    assert (mattes / "in.matte.mkv").stat().st_mtime_ns == written[mattes / "in.matte.mkv"]  # up to date
    (out / "in-swapped.mkv").unlink()  # to render again, but its matte is there: not replaced unasked
    proc = ffbatch(*args)
    assert (
        proc.returncode == 2 and f"{mattes / 'in.matte.mkv'} already exists; pass --overwrite" in proc.stderr
    )
    assert (mattes / "in.matte.mkv").stat().st_mtime_ns == written[mattes / "in.matte.mkv"]


@pytest.mark.slow
def test_a_plan_of_two_inputs_gives_each_its_compositing_outputs(tmp_path, clip, second, whole):
    """Each input's job has its own matte pieces and matte join, and passes its own face layer
    sequence to its chunks; all tasks run, each input's matte and layer are its single render's."""
    out, comp = tmp_path / "out", tmp_path / "comp"
    out.mkdir()
    comp.mkdir()
    proc = ffbatch(
        "plan", clip, second["clip"], *CLI_SETTINGS, "--output-dir", out, "--chunk-frames", "8",
        "--matte-output", comp / "{stem}.matte.mkv", "--face-only-output", comp / "{stem}.face.%04d.png",
        "--format", "json", "--ffbatch", f"{sys.executable} -m facefusion_batch",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["tasks"] == {"chunks": 3, "joins": 4}
    for job, stem in zip(plan["jobs"], ("in", "second"), strict=True):
        (join,) = job["compositing_joins"]
        assert join["argv"][join["argv"].index("-o") + 1] == str(comp / f"{stem}.matte.mkv")
        for chunk in job["chunks"]:
            argv = chunk["argv"]
            assert argv[argv.index("--face-only-output") + 1] == str(comp / f"{stem}.face.%04d.png")
            piece = Path(argv[argv.index("--matte-output") + 1])
            assert piece.parent == staged(Path(job["work_dir"]), "--matte-output", comp / f"{stem}.matte.mkv")
    tasks = [c["argv"] for j in plan["jobs"] for c in j["chunks"]]
    tasks += [argv for j in plan["jobs"] for argv in (j["join"]["argv"], j["compositing_joins"][0]["argv"])]
    for task in tasks:
        done = subprocess.run(task, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    for stem, reference, count in (("in", whole, FRAMES), ("second", second, SECOND_FRAMES)):
        got, pts = decoded(comp / f"{stem}.matte.mkv", "gray")
        assert pts == reference["pts"]
        assert all(np.array_equal(a, b) for a, b in zip(got, reference["matte"], strict=True))
        faces = sequence(comp, f"{stem}.face", range(1001, 1001 + count), "rgba")
        assert all(np.array_equal(a, b) for a, b in zip(faces, reference["face"], strict=True))
    assert sorted(p.name for p in out.iterdir()) == ["in-swapped.mkv", "second-swapped.mkv"]  # no work dir


def test_several_inputs_sharing_a_compositing_file_are_exit_2_up_front(tmp_path, clip):
    """Render and plan: a path without a field (every input would write it), two inputs' paths
    expanding to one file, or one that is an input or an output: exit 2, nothing written."""
    shots, out = tmp_path / "shots", tmp_path / "out"
    shots.mkdir()
    out.mkdir()
    a, b = (
        shots / "x.mkv",
        shots / "x.avi",
    )  # one stem, two outputs (x-swapped.mkv, x-swapped.avi): ffv1 fits both
    for path in (a, b):
        path.write_bytes(clip.read_bytes())
    for command in ("render", "plan"):
        base = (command, a, b, *CLI_SETTINGS, "--output-dir", out)
        for extra, words in (
            (
                ("--matte-output", out / "m.mkv"),
                f"--matte-output {out / 'm.mkv'} would be written by each of the 2",
            ),
            (("--face-only-output", out / "f.%04d.png"), f"e.g. {out / '{stem}.f.%04d.png'}"),
            (("--matte-output", out / "{stem}.m.mkv"), "are one file; choose two paths"),
            (("--matte-output", shots / "{stem}.mkv"), f"is the input file {a}"),
            (("--matte-output", out / "{stem}-swapped.mkv"), "are one file"),
            (
                ("--matte-output", out / "{name}.%04d.png", "--face-only-output", out / "{name}.%04d.png"),
                "are one file",
            ),
        ):
            proc = ffbatch_here(*base, *extra)
            assert proc.returncode == 2 and words in proc.stderr, (extra, proc.stderr)
            assert "Traceback" not in proc.stderr
    proc = ffbatch_here(
        "render", a, b, *CLI_SETTINGS, "--output-dir", out, "--matte-output", out / "{name}" / "m.mkv"
    )
    assert proc.returncode == 2 and f"the directory {out / 'x.mkv'} does not exist" in proc.stderr, (
        proc.stderr
    )
    assert list(out.iterdir()) == [] and sorted(p.name for p in shots.iterdir()) == ["x.avi", "x.mkv"]
