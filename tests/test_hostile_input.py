"""Hostile input the job survives on request: undecodable frames (`--on-decode-error skip`),
which face of a many-face source photo is used (`--source-face-index`)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import cv2
import hostk
import numpy as np
import pytest
from media import decode_all, frame_number, make_clip
from test_cli import assert_usage_error, ffbatch, ffbatch_here, leftovers

from facefusion_batch.errors import InputError
from facefusion_batch.pipeline.build import pick_source_faces
from facefusion_batch.video.decode.reader import FrameReader

# -- --on-decode-error ------------------------------------------------------------------------


def packet_times(path: Path) -> list[Fraction]:
    """Presentation times of every video packet the container holds, in order: what the stream promised."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = Fraction(stream.time_base)
        return sorted(Fraction(p.pts) * tb for p in container.demux(stream) if p.pts is not None and p.size)


@pytest.fixture(scope="module")
def corrupt_clip(tmp_path_factory) -> Path:
    """60 synthetic frames (numbered, 320x240, no audio) whose middle bytes are overwritten: the
    decoder rejects one packet there with an error (and conceals the damage in the frames after)."""
    directory = tmp_path_factory.mktemp("corrupt")
    data = bytearray(make_clip(directory / "good.mp4", frames=60, audio=None).read_bytes())
    start = int(len(data) * 0.4)
    data[start : start + 20_000] = np.random.default_rng(1).bytes(20_000)
    bad = directory / "bad.mp4"
    bad.write_bytes(bytes(data))
    return bad


def test_decode_error_fail_is_the_default_and_writes_nothing(tmp_path, corrupt_clip, astronaut_path):
    out = tmp_path / "out.mp4"
    proc = ffbatch_here("render", corrupt_clip, "-s", astronaut_path, "-o", out, "-q")
    assert_usage_error(proc, "truncated or corrupt at frame", str(corrupt_clip))
    assert not out.exists() and leftovers(tmp_path) == []


def test_decode_error_skip_keeps_every_timestamp_and_counts_the_replaced_frames(
    tmp_path, corrupt_clip, astronaut_path
):
    promised = packet_times(corrupt_clip)
    assert len(promised) == 60
    with FrameReader(corrupt_clip) as reader:  # what a plain decode gets: fewer frames
        with pytest.raises(Exception, match="corrupt"):
            list(reader)
    out, report = tmp_path / "out.mp4", tmp_path / "r.json"
    proc = ffbatch_here(
        "render",
        corrupt_clip,
        "-s",
        astronaut_path,
        "-o",
        out,
        "--on-decode-error",
        "skip",
        "--report",
        report,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    assert "could not be decoded" in proc.stderr and "Traceback" not in proc.stderr
    frames, tb = decode_all(out)
    assert [Fraction(p) * tb for p, _ in frames] == promised  # every promised frame, at its own time
    data = json.loads(report.read_text())
    assert data["frames_replaced"] >= 1
    assert data["frames_out"] == 60
    # which frames were replaced: the reader flags them; each repeats the picture before it
    with FrameReader(corrupt_clip, on_decode_error="skip") as reader:
        replaced = [f.index for f in reader if f.replaced]
    assert len(replaced) == data["frames_replaced"]
    assert replaced and 20 < replaced[0] < 40
    # the frames before the damage are there in order (the decoder may smear a few around the
    # replaced one, which it does not report: that is concealment, not a dropped frame)
    numbers = [frame_number(image) for _, image in frames]
    assert numbers[:20] == list(range(20))
    for i in replaced:  # a copy of the frame before it (moving content differs by ~10 grey levels)
        before, after = frames[i - 1][1].astype(np.int16), frames[i][1].astype(np.int16)
        assert np.abs(after - before).mean() < 1.0
    assert numbers[-1] == 59  # and decoding went on to the end


def test_decode_error_skip_on_a_clean_file_replaces_nothing(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "clean.mp4", frames=12, audio=None)
    with FrameReader(clip, on_decode_error="skip") as reader:
        frames = list(reader)
    assert [f.pts for f in frames] == [i * 512 for i in range(12)]
    assert [frame_number(f.image) for f in frames] == list(range(12))
    assert reader.frames_replaced == 0 and not any(f.replaced for f in frames)


def test_decode_error_skip_refuses_frame_ranges_and_unknown_modes(tmp_path, corrupt_clip, astronaut_path):
    seg = tmp_path / "seg.mp4"
    proc = ffbatch_here(
        "render",
        corrupt_clip,
        "-s",
        astronaut_path,
        "-o",
        seg,
        "--frames",
        "0:10",
        "--on-decode-error",
        "skip",
    )
    assert_usage_error(proc, "--on-decode-error skip", "--frames")
    proc = ffbatch_here(
        "render",
        corrupt_clip,
        "-s",
        astronaut_path,
        "-o",
        seg,
        "--chunk-frames",
        "20",
        "--on-decode-error",
        "skip",
    )
    assert_usage_error(proc, "--on-decode-error skip", "chunk")
    proc = ffbatch_here(
        "render", corrupt_clip, "-s", astronaut_path, "-o", seg, "--on-decode-error", "ignore"
    )
    assert_usage_error(proc, "--on-decode-error", "fail, skip")
    assert leftovers(tmp_path) == [] and not seg.exists()


# -- --source-face-index ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_face_clip(tmp_path_factory, astronaut_image) -> Path:
    """4 frames of the astronaut's face (one face), 384x384, still camera."""
    directory = tmp_path_factory.mktemp("one_face")
    return make_clip(directory / "astronaut.mp4", image=astronaut_image, size=(384, 384), frames=4, pan=False)


def test_source_face_index_picks_the_nth_largest_face(models, t1_image, t1_path):
    table = hostk.detect(models, [t1_image])
    assert len(table) == 6
    areas = np.sort(table.areas())[::-1]
    for k in (0, 3, 5):
        picked = pick_source_faces(table, [str(t1_path)], k)
        assert len(picked) == 1 and picked.areas()[0] == pytest.approx(areas[k])
    with pytest.raises(InputError, match=r"--source-face-index 6: source image .*t1\.jpg has only 6 faces"):
        pick_source_faces(table, [str(t1_path)], 6)


@pytest.mark.slow
def test_source_face_index_changes_the_swapped_face(tmp_path, one_face_clip, t1_path, models):
    outs = {}
    for k in (0, 3):
        outs[k] = tmp_path / f"face{k}.mp4"
        proc = ffbatch(
            "render", one_face_clip, "-s", t1_path, "-o", outs[k], "-q", "--swapper", "classical",
            "--source-face-index", k,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    before = [image for _, image in decode_all(one_face_clip)[0]]
    a = [image for _, image in decode_all(outs[0])[0]]
    b = [image for _, image in decode_all(outs[3])[0]]
    assert len(a) == len(b) == 4
    box = hostk.detect(models, before[:1]).box[0].astype(int)
    x1, y1, x2, y2 = max(box[0], 0), max(box[1], 0), box[2], box[3]

    def face_diff(p, q):
        return float(np.abs(p[y1:y2, x1:x2].astype(np.int16) - q[y1:y2, x1:x2].astype(np.int16)).mean())

    assert face_diff(a[0], before[0]) > 5 and face_diff(b[0], before[0]) > 5  # both swapped
    assert face_diff(a[0], b[0]) > 5  # with different faces of the source photo
    away = np.ones(a[0].shape[:2], bool)  # outside the face box grown by half its size
    w, h = x2 - x1, y2 - y1
    away[max(y1 - h // 2, 0) : y2 + h // 2, max(x1 - w // 2, 0) : x2 + w // 2] = False
    far = np.abs(a[0][away].astype(np.int16) - b[0][away].astype(np.int16)).mean()
    assert far < 1  # away from the face they agree


def test_source_face_index_out_of_range_is_a_usage_error(tmp_path, one_face_clip, t1_path):
    out = tmp_path / "out.mp4"
    proc = ffbatch_here("render", one_face_clip, "-s", t1_path, "-o", out, "--source-face-index", 9)
    assert_usage_error(proc, "--source-face-index 9", str(t1_path), "only 6 faces")
    proc = ffbatch_here("render", one_face_clip, "-s", t1_path, "-o", out, "--source-face-index", -1)
    assert_usage_error(proc, "--source-face-index", "negative")
    assert not out.exists() and leftovers(tmp_path) == []


# --- a still image as the target ----------------------------------------------------------------


def test_a_still_image_target_is_rendered_as_an_image(tmp_path, t1_path, astronaut_path, t1_faces):
    out = tmp_path / "swapped photo.png"
    report = tmp_path / "r.json"
    proc = ffbatch_here(
        "render",
        str(t1_path),
        "-s",
        str(astronaut_path),
        "-o",
        str(out),
        "-q",
        "--report",
        str(report),
    )
    assert proc.returncode == 0, proc.stderr
    before = cv2.imread(str(t1_path))
    after = cv2.imread(str(out))
    assert after is not None and after.shape == before.shape
    diff = np.abs(after.astype(np.int16) - before.astype(np.int16)).max(axis=2)
    for x1, y1, x2, y2 in t1_faces.box.astype(int):
        assert diff[y1:y2, x1:x2].mean() > 3.0  # every face swapped
    # PNG is lossless: far from the faces the photo is bit-identical
    far = np.ones(diff.shape, bool)
    for x1, y1, x2, y2 in t1_faces.box.astype(int):
        w, h = x2 - x1, y2 - y1
        far[max(0, y1 - h) : y2 + h, max(0, x1 - w) : x2 + w] = False
    assert diff[far].max() == 0
    data = json.loads(report.read_text())
    assert data["frames_in"] == data["frames_out"] == 1 and data["faces_swapped"] == len(t1_faces.box)


def test_a_still_image_cannot_become_a_video(tmp_path, t1_path, astronaut_path):
    out = tmp_path / "out.mp4"
    proc = ffbatch_here(
        "render",
        str(t1_path),
        "-s",
        str(astronaut_path),
        "-o",
        str(out),
        "-q",
    )
    assert proc.returncode == 2 and "still image" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


# --- the report says what happened to the audio --------------------------------------------------


@pytest.mark.parametrize(
    ("audio", "suffix", "expected"),
    [("aac", ".mp4", "copied"), ("pcm_s16le", ".mp4", "re-encoded to AAC"), ("pcm_s16le", ".mkv", "copied")],
)
def test_report_says_whether_the_audio_was_copied(
    tmp_path, t1_small, astronaut_path, audio, suffix, expected
):
    clip = make_clip(tmp_path / f"in{suffix}", frames=6, size=(320, 180), image=t1_small, audio=audio)
    out = tmp_path / f"out{suffix}"
    report = tmp_path / "r.json"
    proc = ffbatch_here(
        "render",
        str(clip),
        "-s",
        str(astronaut_path),
        "-o",
        str(out),
        "-q",
        "--report",
        str(report),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report.read_text())["audio"] == expected
    with av.open(str(out)) as container:
        assert container.streams.audio[0].codec_context.name == ("aac" if expected != "copied" else audio)


@pytest.fixture(scope="module")
def concealed_clip(tmp_path_factory) -> Path:
    """A 30-frame .mkv with a run of zeros inside a packet that the decoder gets through: every
    frame comes out, but one or more are flagged as decoded from damaged data (concealed)."""
    directory = tmp_path_factory.mktemp("concealed")
    data = make_clip(directory / "good.mkv", frames=30, size=(128, 96), audio=None).read_bytes()
    rng = np.random.default_rng(7)
    for attempt in range(80):
        damaged = bytearray(data)
        at, n = int(rng.integers(len(data) // 4, len(data))), int(rng.integers(8, 400))
        damaged[at : at + n] = bytes(n)
        path = directory / f"bad{attempt}.mkv"
        path.write_bytes(bytes(damaged))
        try:
            with av.open(str(path)) as container:
                decoded = list(container.decode(video=0))
        except av.error.FFmpegError:
            continue
        if len(decoded) == 30 and any(f.is_corrupt for f in decoded):
            return path
    pytest.fail("no damage in 80 tries left every frame decodable but concealed")


@pytest.mark.slow
def test_a_frame_the_decoder_concealed_is_exit_2_unless_skipped(tmp_path, concealed_clip, astronaut_path):
    out = tmp_path / "out.mkv"
    proc = ffbatch("render", concealed_clip, "-s", astronaut_path, "-o", out, "-q")
    assert_usage_error(proc, "is damaged (the decoder concealed the damage", str(concealed_clip))
    assert not out.exists() and leftovers(tmp_path) == []
    report = tmp_path / "r.json"
    proc = ffbatch(
        "render",
        concealed_clip,
        "-s",
        astronaut_path,
        "-o",
        out,
        "--on-decode-error",
        "skip",
        "--report",
        report,
    )
    assert proc.returncode == 0, proc.stderr
    assert "decoded from damaged data" in proc.stderr
    assert len(decode_all(out)[0]) == 30  # every frame, as decoded
    data = json.loads(report.read_text())
    assert data["frames_concealed"] >= 1 and data["frames_replaced"] == 0
