"""The frame index is the decoder's on Xvid/DivX-style AVIs (issue 38): MPEG-4 part 2 with two or
three B-frames, *packed*, N-VOP placeholders and N-VOPs for frames the encoder dropped, AC-3
audio. A file like that gave "frame 3 should have pts 5 but the decoder returned 4" on almost
every `--frames` range, and an index of 41 frames where the decoder gives 60.

No encoder here writes packed bitstreams (FFmpeg's mpeg4 encoder writes B-frames unpacked; there
is no libxvid, and FFmpeg has no packing filter, only `mpeg4_unpack_bframes`), so `make_xvid_avi`
is a strict replica of DivX/Xvid packing written from that filter's documented behaviour, and
checked against it: FFmpeg's own filter unpacks the replica back into the encoder's packets.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import av.bitstream
import pytest
from media import _DIVX_USER_DATA, AUDIO_RATE, _mpeg4_packets, _not_coded_vop, _write_tone, frame_number
from test_cli import ffbatch

from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.decode.segments import frame_index

RATE = Fraction(25)
INCREMENT_BITS = 5  # a VOL time resolution of 25: 5 bits of vop_time_increment
FRAMES = 60


def packed_chunks(packets: list, dropped_after: tuple[int, ...] = ()) -> list[tuple[bytes, bool]]:
    """DivX/Xvid packing of encoder packets in decode order (I0 P3 B1 B2 P6 B4 B5 ...): a reference
    VOP and the first B-VOP after it in one chunk, each further B-VOP a chunk of its own, then an
    N-VOP placeholder (I0 [P3 B1] [B2] [N] [P6 B4] [B5] [N] ...): one chunk per frame time, as
    Video for Windows decoders needed. The first keyframe carries DivX's user data whose 'p' says
    "packed". An N-VOP chunk follows chunk n for each n in `dropped_after` (a frame the encoder
    dropped). (chunk, keyframe) pairs."""
    data = [bytes(p) for p in packets]
    first_vop = data[0].find(b"\x00\x00\x01\xb6")
    data[0] = data[0][:first_vop] + _DIVX_USER_DATA + data[0][first_vop:]
    chunks: list[tuple[bytes, bool]] = []
    i = 0
    while i < len(data):
        b_frames = 0
        while i + 1 + b_frames < len(packets) and packets[i + 1 + b_frames].pts < packets[i].pts:
            b_frames += 1
        if b_frames:
            chunks.append((data[i] + data[i + 1], False))
            chunks += [(data[i + 1 + k], False) for k in range(1, b_frames)]
            chunks.append((_not_coded_vop(INCREMENT_BITS), False))
        else:
            chunks.append((data[i], packets[i].is_keyframe))
        i += 1 + b_frames
    out = []
    for n, chunk in enumerate(chunks):
        out.append(chunk)
        if n in dropped_after:
            out.append((_not_coded_vop(INCREMENT_BITS), False))
    return out


def make_xvid_avi(
    path: Path, *, b_frames: int = 2, dropped_after: tuple[int, ...] = (), audio: str | None = "ac3"
) -> tuple[Path, list]:
    """An AVI of `FRAMES` synthetic frames, packed as `packed_chunks` says, timestamps by chunk
    number only, AC-3 audio from 0; and the encoder's packets."""
    packets = _mpeg4_packets(FRAMES, (128, 96), RATE, b_frames=b_frames)
    chunks = packed_chunks(packets, dropped_after)
    with av.open(str(path), mode="w", format="avi") as out:
        stream = out.add_stream("mpeg4", rate=RATE)
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        stream.codec_context.codec_tag = "XVID"
        sound = out.add_stream(audio, rate=AUDIO_RATE, layout="stereo") if audio else None
        for n, (chunk, keyframe) in enumerate(chunks):
            packet = av.Packet(chunk)
            packet.stream, packet.pts, packet.dts, packet.time_base = stream, n, n, 1 / RATE
            packet.is_keyframe = keyframe
            out.mux(packet)
        if sound is not None:
            _write_tone(out, sound, float(len(chunks) / RATE))
    return path, packets


def reference(path: Path) -> list[tuple[int, int]]:
    """(drawn frame number, display pts) of every picture a plain decode gives: the pictures in
    the decoder's order, each with the n-th smallest of the pts it attached (its guesses are out
    of order in a packed AVI)."""
    with av.open(str(path)) as container:
        frames = [(frame_number(f.to_ndarray(format="bgr24")), f.pts) for f in container.decode(video=0)]
    return list(zip((n for n, _ in frames), sorted(p for _, p in frames), strict=True))


def test_the_replica_is_what_ffmpegs_unpacking_filter_takes_apart(tmp_path):
    avi, packets = make_xvid_avi(tmp_path / "x.avi", audio=None)
    with av.open(str(avi)) as container:
        unpack = av.bitstream.BitStreamFilterContext("mpeg4_unpack_bframes", container.streams.video[0])
        got = [bytes(p) for packet in container.demux(video=0) if packet.size for p in unpack.filter(packet)]
        got += [bytes(p) for p in unpack.filter(None)]
    wanted = [bytes(p) for p in packets]
    assert len(got) == len(wanted) and got[1:] == wanted[1:]
    assert got[0].replace(_DIVX_USER_DATA[:-1] + b"\x00", b"") == wanted[0]  # the filter blanks the "p"


@pytest.mark.parametrize(
    "b_frames, dropped_after",
    [(1, ()), (2, ()), (3, ()), (2, (9, 20)), (3, (8,)), (2, (0,))],
    ids=["1B", "2B", "3B", "2B-dropped", "3B-dropped", "2B-dropped-first"],
)
def test_every_frame_range_gives_the_reference_decodes_frames(tmp_path, b_frames, dropped_after):
    avi, _ = make_xvid_avi(tmp_path / "x.avi", b_frames=b_frames, dropped_after=dropped_after)
    whole = reference(avi)
    assert [n for n, _ in whole] == list(range(FRAMES))
    index = frame_index(avi)
    assert index.count == FRAMES and list(index.pts) == [p for _, p in whole]
    with FrameReader(avi) as reader:
        assert [(frame_number(f.image), f.pts) for f in reader] == whole
    for start in range(FRAMES):  # every boundary: one frame, and a run of 7 from there
        for end in sorted({start + 1, min(FRAMES, start + 7)}):
            with FrameReader(avi, frames=(start, end), index=index) as reader:
                got = [(frame_number(f.image), f.pts) for f in reader]
            assert got == whole[start:end], (start, end)


@pytest.mark.slow
def test_ranges_chunks_and_the_ac3_audio_of_an_xvid_avi_on_the_command_line(tmp_path, astronaut_path):
    avi, _ = make_xvid_avi(tmp_path / "x.avi", b_frames=2, dropped_after=(9,))
    whole = reference(avi)

    def numbers(path: Path) -> list[int]:
        with av.open(str(path)) as container:
            return [frame_number(f.to_ndarray(format="bgr24")) for f in container.decode(video=0)]

    for frames in ("40:60", "0:25", "19:21"):
        out = tmp_path / f"{frames.replace(':', '-')}.mkv"
        proc = ffbatch("render", avi, "-s", astronaut_path, "-o", out, "--frames", frames, "--backend", "cpu")
        assert proc.returncode == 0 and "damaged" not in proc.stderr, proc.stderr
        start, end = map(int, frames.split(":"))
        assert numbers(out) == [n for n, _ in whole[start:end]]
    chunked = tmp_path / "chunked.mp4"
    proc = ffbatch(
        "render", avi, "-s", astronaut_path, "-o", chunked, "--chunk-frames", "20", "--backend", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    assert numbers(chunked) == list(range(FRAMES))
    with av.open(str(avi)) as src, av.open(str(chunked)) as out:
        audio_in = [p.size for p in src.demux(audio=0) if p.size]
        audio_out = [(p.pts, p.size) for p in out.demux(audio=0) if p.size]
    assert [size for _, size in audio_out] == audio_in  # every AC-3 packet, the first one too
    assert audio_out[0][0] == 0
