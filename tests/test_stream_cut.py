"""An MPEG transport stream cut mid-packet is a cut (issue 38): it declares no end, so the render
of a file that ends inside one of its 188-byte packets (9 of 20 frames there) was exit 0 without
a word. Now its complete frames are rendered with a warning saying it was cut short; a complete
stream gets none."""

from __future__ import annotations

import av
from media import make_clip
from test_cli import ffbatch_here

from facefusion_batch.video.decode.stream_end import transport_cut


def test_a_transport_stream_cut_inside_a_packet_is_rendered_with_a_warning(tmp_path, astronaut_path):
    full = make_clip(tmp_path / "full.ts", frames=20, size=(128, 96), audio=None, codec="mpeg2video")
    data = full.read_bytes()
    assert len(data) % 188 == 0 and transport_cut(full) is None
    cut = tmp_path / "cut.ts"
    cut.write_bytes(data[: len(data) // 2 // 188 * 188 + 100])  # ends 100 bytes into a packet
    assert transport_cut(cut) == 100
    with av.open(str(cut)) as container:
        decodable = sum(1 for _ in container.decode(video=0))
    assert 0 < decodable < 20
    out = tmp_path / "out.mp4"
    proc = ffbatch_here("render", cut, "-s", astronaut_path, "-o", out, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "ends 100 bytes into a transport-stream packet: it was cut short" in proc.stderr
    assert f"its {decodable} complete frames" in proc.stderr
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == decodable
    whole = ffbatch_here(
        "render", full, "-s", astronaut_path, "-o", tmp_path / "whole.mp4", "--backend", "cpu"
    )
    assert whole.returncode == 0 and "cut short" not in whole.stderr and "truncated" not in whole.stderr


def test_an_image_sequence_with_an_empty_frame_file_is_exit_2_naming_it(tmp_path, astronaut_path):
    """A sequence is never cut short: a 0-byte PNG among 12 gave exit 0 with 3 frames and only a
    "may be truncated" warning."""
    import cv2
    from media import synthetic_frame

    for i in range(12):
        cv2.imwrite(str(tmp_path / f"f.{i:04d}.png"), synthetic_frame(i, (128, 96)))
    (tmp_path / "f.0003.png").write_bytes(b"")
    out = tmp_path / "out.mp4"
    proc = ffbatch_here(
        "render", tmp_path / "f.%04d.png", "-s", astronaut_path, "-o", out, "--backend", "cpu"
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "f.0003.png (0 bytes), frame 3 of 12, gives no picture" in proc.stderr
    assert not out.exists()


def test_a_complete_asf_file_gets_no_truncation_warning(tmp_path, astronaut_path):
    """ASF gives every stream the file's play time (here the audio's, longer than the video), so
    a whole WMV was told it "may be truncated"; its File Properties Object says how big it is."""
    import numpy as np
    from media import synthetic_frame

    from facefusion_batch.video.decode.stream_end import declared_size

    wmv = tmp_path / "whole.wmv"
    with av.open(str(wmv), "w", format="asf") as out:
        video = out.add_stream("wmv2", rate=25)
        video.width, video.height, video.pix_fmt = 128, 96, "yuv420p"
        audio = out.add_stream("wmav2", rate=44100, layout="stereo")
        audio.codec_context.bit_rate = 128000
        for i in range(25):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, (128, 96)), format="bgr24")
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        step = audio.codec_context.frame_size or 2048
        for start in range(0, 44100, step):
            sound = av.AudioFrame.from_ndarray(
                np.zeros((2, step), np.float32), format="fltp", layout="stereo"
            )
            sound.sample_rate, sound.pts = 44100, start
            out.mux(audio.encode(sound))
        out.mux(audio.encode(None))
    assert declared_size(wmv) == wmv.stat().st_size
    proc = ffbatch_here("render", wmv, "-s", astronaut_path, "-o", tmp_path / "out.mkv", "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "truncated" not in proc.stderr and "damaged" not in proc.stderr
