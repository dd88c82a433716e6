"""The report says how the output was made (encoder parameters, the stream map) and why detected
faces were not swapped; `-v` adds that detail to the log. Every test renders and decodes."""

from __future__ import annotations

import json

import av
import cv2
import hostk
import numpy as np
import pytest
from media import audio_packets, decode_all, make_clip
from test_cli import ffbatch_here
from test_integrity import with_exif_orientation

from facefusion_batch import errors
from facefusion_batch.errors import Interrupted
from facefusion_batch.farm.jobs import failure_record

FRAMES = 3


@pytest.fixture(scope="module")
def group_clip(tmp_path_factory, t1_small):
    """3 still frames of t1 (six faces), 640x442, AAC audio."""
    folder = tmp_path_factory.mktemp("report")
    return make_clip(folder / "group.mp4", image=t1_small[:442], size=(640, 442), frames=FRAMES, pan=False)


def render_report(clip, source, out, *extra) -> dict:
    report = out.with_suffix(".json")
    proc = ffbatch_here("render", clip, "-s", source, "-o", out, "-q", "--report", report, *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text())


def face_change(before: np.ndarray, after: np.ndarray, box: np.ndarray) -> float:
    x1, y1, x2, y2 = np.clip(box.astype(int), 0, None)
    return float(np.abs(before[y1:y2, x1:x2].astype(float) - after[y1:y2, x1:x2]).mean())


def test_faces_not_swapped_are_counted_by_reason(group_clip, astronaut_path, tmp_path, models):
    before = decode_all(group_clip)[0][0][1]
    faces = hostk.detect(models, [before])
    by_size = faces.select(np.argsort(-faces.areas()))
    assert len(faces) >= 3
    one = render_report(group_clip, astronaut_path, tmp_path / "one.mp4", "--faces", "one")
    assert one["faces_found"] == len(faces) * FRAMES and one["faces_swapped"] == FRAMES
    assert one["faces_not_swapped"] == {"not_the_largest_face": (len(faces) - 1) * FRAMES}
    index = render_report(group_clip, astronaut_path, tmp_path / "index.mp4", "--face-index", "1")
    assert index["faces_not_swapped"] == {"not_at_face_index": (len(faces) - 1) * FRAMES}
    many = render_report(group_clip, astronaut_path, tmp_path / "many.mp4", "--faces", "many")
    assert many["faces_found"] - many["faces_swapped"] == sum(many["faces_not_swapped"].values())
    assert "not_the_largest_face" not in many["faces_not_swapped"]
    # the pixels agree with the counts: --faces one changed the largest face, not the second
    outs = {name: decode_all(tmp_path / f"{name}.mp4")[0] for name in ("one", "index")}
    assert len(outs["one"]) == len(outs["index"]) == FRAMES
    largest, second = by_size.box[0], by_size.box[1]
    one_out, index_out = outs["one"][0][1], outs["index"][0][1]
    assert face_change(before, one_out, largest) > face_change(before, index_out, largest) + 3
    assert face_change(before, index_out, second) > face_change(before, one_out, second) + 3


def test_the_report_holds_the_encoder_parameters_and_the_stream_map(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "pcm.mov", frames=4, size=(128, 96), audio="pcm_s16le")
    face_clip = make_clip(tmp_path / "aac.mp4", frames=4, size=(128, 96), audio="aac")
    out = tmp_path / "out.mp4"
    report = render_report(clip, astronaut_path, out, "--crf", "27", "--preset", "ultrafast")
    enc = report["encoder_parameters"]
    assert enc["codec"] == "libx264" and enc["crf"] == 27 and enc["preset"] == "ultrafast"
    assert enc["options"]["crf"] == "27" and enc["pix_fmt"] == "yuv420p" and enc["bitrate"] is None
    video, audio = report["streams"]
    assert video == {
        "input": 0,
        "kind": "video",
        "codec": "h264",
        "output": 0,
        "action": "re-encoded to libx264",
    }
    assert audio["input"] == 1 and audio["codec"] == "pcm_s16le" and audio["action"] == "re-encoded to aac"
    with av.open(str(out)) as container:
        v, a = container.streams.video[0], container.streams.audio[0]
        assert (v.index, v.codec_context.name, v.codec_context.pix_fmt) == (0, "h264", enc["pix_fmt"])
        assert (a.index, a.codec_context.name) == (audio["output"], "aac")
    # copied audio: the packets arrive as they were; --bitrate alone has no crf
    copied = render_report(face_clip, astronaut_path, tmp_path / "copy.mkv", "--bitrate", "300k")
    assert copied["encoder_parameters"]["crf"] is None and copied["encoder_parameters"]["bitrate"] == "300k"
    assert copied["streams"][1] == {
        "input": 1,
        "kind": "audio",
        "codec": "aac",
        "output": 1,
        "action": "copied",
    }
    assert audio_packets(tmp_path / "copy.mkv") and [p for _, p in audio_packets(tmp_path / "copy.mkv")] == [
        p for _, p in audio_packets(face_clip)
    ]
    muted = render_report(face_clip, astronaut_path, tmp_path / "muted.mkv", "--no-audio")
    assert muted["streams"][1]["action"] == "dropped" and muted["streams"][1]["reason"] == "--no-audio"
    assert not audio_packets_or_none(tmp_path / "muted.mkv")


def audio_packets_or_none(path) -> list:
    try:
        return audio_packets(path)
    except IndexError:  # no audio stream at all
        return []


def test_verbose_adds_settings_decoder_encoder_stream_map_and_batch_timings(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "in.mp4", frames=4, size=(128, 96), audio="aac")
    plain = ffbatch_here("render", clip, "-s", astronaut_path, "-o", tmp_path / "a.mp4", "--batch-size", "2")
    verbose = ffbatch_here(
        "render", clip, "-s", astronaut_path, "-o", tmp_path / "b.mp4", "--batch-size", "2", "-v"
    )
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    lines = verbose.stderr.splitlines()
    assert len(lines) > len(plain.stderr.splitlines()) + 5
    detail = ("ffbatch: settings: ", "ffbatch: decoder: h264", "ffbatch: encoder: ", "ffbatch: stream map: ")
    for start in detail + ("ffbatch: batch 0: 2 frames", "ffbatch: batch 1: 2 frames"):
        assert any(line.startswith(start) for line in lines), start
        assert not any(line.startswith(start) for line in plain.stderr.splitlines()), start
    settings = json.loads(next(x for x in lines if x.startswith("ffbatch: settings: ")).split(": ", 2)[2])
    assert settings["batch_size"] == 2
    encoder = json.loads(next(x for x in lines if x.startswith("ffbatch: encoder: ")).split(": ", 2)[2])
    assert encoder["codec"] == "libx264" and encoder["pix_fmt"] == "yuv420p"
    streams = [json.loads(x.split(": ", 2)[2]) for x in lines if x.startswith("ffbatch: stream map: ")]
    assert [s["action"] for s in streams] == ["re-encoded to libx264", "copied"]
    assert len(decode_all(tmp_path / "b.mp4")[0]) == 4


def test_a_chunked_render_reports_its_encoder_and_streams_too(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "in.mp4", frames=4, size=(128, 96), audio="aac")
    report = render_report(clip, astronaut_path, tmp_path / "out.mp4", "--chunk-frames", "2", "--crf", "30")
    assert report["segments"]["total"] == 2 and report["encoder_parameters"]["crf"] == 30
    video, audio = report["streams"]
    assert video["action"] == "re-encoded to libx264" and audio["kind"] == "audio"
    assert audio["action"] == report["audio"] == "copied"
    assert len(decode_all(tmp_path / "out.mp4")[0]) == 4
    assert [p for _, p in audio_packets(tmp_path / "out.mp4")] == [p for _, p in audio_packets(clip)]


def test_a_still_image_render_reports_its_stream_map(tmp_path, t1_small, astronaut_path):
    """A photo as the target: the report's stream map says what the picture was (from its header),
    what it became, the EXIF orientation applied and the EXIF block not carried."""
    height, width = t1_small.shape[:2]
    sideways = cv2.rotate(t1_small, cv2.ROTATE_90_COUNTERCLOCKWISE)  # stored as a phone stores it
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(with_exif_orientation(cv2.imencode(".jpg", sideways)[1].tobytes(), 6))
    out = tmp_path / "out.png"
    report = render_report(photo, astronaut_path, out)
    assert report["streams"] == [
        {
            "input": 0,
            "kind": "image",
            "codec": "jpeg",
            "size": f"{height}x{width}",  # as stored: sideways
            "output": 0,
            "action": "re-encoded to png (EXIF orientation 6 applied)",
        },
        {
            "input": 0,
            "kind": "metadata",
            "codec": "exif",
            "action": "dropped",
            "reason": "the output image holds the pixels only",
        },
    ]
    assert cv2.imread(str(out)).shape[:2] == (height, width)  # upright
    assert report["faces_swapped"] > 0
    plain = tmp_path / "plain.png"
    cv2.imwrite(str(plain), t1_small)
    assert render_report(plain, astronaut_path, tmp_path / "out.jpg")["streams"] == [
        {
            "input": 0,
            "kind": "image",
            "codec": "png",
            "size": f"{width}x{height}",
            "output": 0,
            "action": "re-encoded to jpeg",
        }
    ]


def test_a_signal_that_lands_inside_an_import_is_reported_as_an_interrupt(monkeypatch):
    """SIGTERM while `import onnxruntime` initialises comes out as ImportError: exit 143 (the
    CLI), and the report says interrupted, not "internal error: ImportError"."""
    monkeypatch.setattr(errors, "_received", [])
    broken = ImportError("initialization failed")
    assert failure_record(broken)["status"] == "failed"  # no signal: a real internal error
    errors.note_signal(Interrupted("terminated (SIGTERM)", exit_code=143))
    assert failure_record(broken) == {"status": "interrupted", "message": "terminated (SIGTERM)"}


def test_a_signal_swallowed_while_the_models_load_still_stops_the_render(
    monkeypatch, tmp_path, face_clip, astronaut_path
):
    """SIGTERM that lands where an exception is caught or dropped (a library's broad `except`
    while the models load, a finalizer) never unwinds; the render must still stop before its
    first frame: exit 143, no output, no temporary file (it once rendered on and exited 0)."""
    import os
    import signal

    from facefusion_batch import cli
    from facefusion_batch.pipeline import run

    real = run.load_models

    def loading_swallows_a_signal(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes, inside this try
                pass
        except Exception:  # what a library's broad except does to it
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "load_models", loading_swallows_a_signal)
    out = tmp_path / "o.mp4"
    with pytest.raises(SystemExit) as stopped:
        cli.main(["render", str(face_clip), "-s", str(astronaut_path), "-o", str(out), "-q"])
    assert stopped.value.code == 143
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []
    assert errors.swallowed_signal() is None  # the next run in this process starts clean
