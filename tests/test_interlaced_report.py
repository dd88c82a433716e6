"""Interlaced input is swapped per field; every face count of the report is per field, so a face
that is not swapped is counted, not a crash (issue 38: exit 1 "IndexError: boolean index" in
count_not_swapped on every interlaced group shot). Clips come from FFmpeg's own encoders through
PyAV: x264 coding interlaced (MBAFF, top field first) and MPEG-2 with interlaced motion and DCT."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest
from test_cli import ffbatch_here

from facefusion_batch.video.decode.probe import probe

FRAMES = 3
ENCODERS = {
    "h264.mkv": ("libx264", {"x264-params": "interlaced=1:tff=1", "preset": "ultrafast", "crf": "14"}),
    "mpeg2.mpg": ("mpeg2video", {"flags": "+ilme+ildct", "top": "1", "qscale": "2"}),
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_faces_not_swapped_in_interlaced_input_are_counted_per_field(
    name, tmp_path, t1_small, astronaut_path
):
    codec, options = ENCODERS[name]
    clip = tmp_path / name
    picture = np.ascontiguousarray(t1_small[:440])  # six faces; a height of whole field pairs of 4:2:0
    with av.open(str(clip), "w") as out:
        stream = out.add_stream(codec, rate=25, options=options)
        stream.width, stream.height, stream.pix_fmt = 640, 440, "yuv420p"
        stream.codec_context.field_order = 2
        for i in range(FRAMES):
            frame = av.VideoFrame.from_ndarray(picture, format="bgr24").reformat(format="yuv420p")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    assert probe(clip).field_order in (2, 3)  # interlaced, as the decoder reports it
    out, report = tmp_path / "out.mkv", tmp_path / "r.json"
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "-o", out, "--faces", "one", "--backend", "cpu",
        "--report", report, "-q",
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(report.read_text())
    assert "swapped per field" in data["frames_as"]
    fields = 2 * FRAMES
    assert data["faces_swapped"] == fields  # the largest face of every field
    assert data["faces_found"] >= 3 * fields
    assert data["faces_not_swapped"] == {"not_the_largest_face": data["faces_found"] - fields}
    assert data["frames_out"] == FRAMES and data["frames_with_faces"] == FRAMES
    with av.open(str(out)) as container:
        assert len(list(container.decode(video=0))) == FRAMES
