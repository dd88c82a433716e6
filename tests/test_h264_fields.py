"""H.264 field pairs (PAFF) in the frame index (issue 14: count frames, never packets).

No encoder here writes field pictures (x264 codes interlaced frames as MBAFF), so the field
streams are written bit by bit: a Main-profile SPS that allows fields, its PPS, and slice
headers, packed as an MPEG-TS demuxer hands them over (Annex B, a packet per field) and as
MP4 / Matroska do (length-prefixed, avcC extradata). Real interlaced x264 streams check that
frame pictures in a stream that allows fields are still one frame a packet.
"""

from __future__ import annotations

import av
import numpy as np
import pytest

from facefusion_batch.video.decode.h264_fields import FieldPairs, nal_units, parse_sps
from facefusion_batch.video.decode.segments import frame_index


class BitWriter:
    def __init__(self) -> None:
        self.bits: list[int] = []

    def u(self, count: int, value: int) -> BitWriter:
        self.bits += [(value >> (count - 1 - i)) & 1 for i in range(count)]
        return self

    def ue(self, value: int) -> BitWriter:
        code = value + 1
        width = code.bit_length()
        return self.u(width - 1, 0).u(width, code)

    def rbsp(self) -> bytes:
        bits = self.bits + [1]  # rbsp_stop_one_bit
        bits += [0] * (-len(bits) % 8)
        return bytes(int("".join(map(str, bits[i : i + 8])), 2) for i in range(0, len(bits), 8))


def sps(frame_mbs_only: int = 0, sps_id: int = 0) -> bytes:
    w = BitWriter().u(8, 77).u(8, 0).u(8, 30).ue(sps_id)  # Main profile, level 3.0
    w.ue(2)  # log2_max_frame_num_minus4: frame_num is 6 bits
    w.ue(0).ue(0)  # pic_order_cnt_type 0, log2_max_pic_order_cnt_lsb_minus4
    w.ue(2).u(1, 0).ue(7).ue(2)  # refs, no gaps, 8 x 3 macroblocks (map units)
    w.u(1, frame_mbs_only)
    if not frame_mbs_only:
        w.u(1, 0)  # mb_adaptive_frame_field_flag
    w.u(1, 1).u(1, 0).u(1, 0)  # direct_8x8_inference, no cropping, no VUI
    return bytes([0x67]) + w.rbsp()


def pps(pps_id: int = 0, sps_id: int = 0) -> bytes:
    return bytes([0x68]) + BitWriter().ue(pps_id).ue(sps_id).u(1, 0).u(1, 0).rbsp()


def slice_nal(frame_num: int, field: bool, bottom: int = 0, first_mb: int = 0, idr: bool = False) -> bytes:
    w = BitWriter().ue(first_mb).ue(7 if idr else 5).ue(0).u(6, frame_num).u(1, int(field))
    if field:
        w.u(1, bottom)
    w.u(7, 0x55)  # the rest of the header and the slice data, unread
    return bytes([0x65 if idr else 0x41]) + w.rbsp()


def annex_b(*units: bytes) -> bytes:
    return b"".join(b"\x00\x00\x00\x01" + u for u in units)


def length_prefixed(*units: bytes) -> bytes:
    return b"".join(len(u).to_bytes(4, "big") + u for u in units)


def avcc(*parameter_sets: bytes) -> bytes:
    spss = [u for u in parameter_sets if u[0] & 0x1F == 7]
    ppss = [u for u in parameter_sets if u[0] & 0x1F == 8]
    out = bytes([1, 77, 0, 30, 0xFF, 0xE0 | len(spss)])
    out += b"".join(len(u).to_bytes(2, "big") + u for u in spss)
    out += bytes([len(ppss)]) + b"".join(len(u).to_bytes(2, "big") + u for u in ppss)
    return out


# (packet's slices, whether the packet gives a frame of its own)
STREAM = [
    ([slice_nal(0, True, 0, idr=True)], True),  # an IDR top field: a frame begins
    ([slice_nal(0, True, 1)], False),  # its bottom field completes it
    ([slice_nal(1, True, 0), slice_nal(1, True, 0, first_mb=12)], True),  # two slices, one field
    ([slice_nal(1, True, 1)], False),
    ([slice_nal(2, False)], True),  # a frame picture between field pairs
    ([slice_nal(3, True, 1), slice_nal(3, True, 0)], True),  # both fields in one packet
    ([slice_nal(4, True, 0)], True),  # a lone field: the decoder gives it a frame of its own
    ([slice_nal(5, True, 0)], True),  # (another frame_num: not its pair)
    ([slice_nal(5, True, 1)], False),
    ([slice_nal(6, True, 1)], True),  # bottom field first
    ([slice_nal(6, True, 0)], False),
    ([slice_nal(6, True, 1)], True),  # the same parity again: a new field, not a pair
]


def test_second_fields_give_no_frame_in_an_mpeg_ts_stream():
    """Annex B packets, a field each, the parameter sets in the first packet."""
    pairs = FieldPairs(None)
    packets = [annex_b(*([sps(), pps()] if i == 0 else []), *slices) for i, (slices, _) in enumerate(STREAM)]
    assert [pairs.gives_frame(p) for p in packets] == [gives for _, gives in STREAM]
    assert sum(gives for _, gives in STREAM) == 8 and not pairs.progressive


def test_second_fields_give_no_frame_with_avcc_extradata():
    """Length-prefixed NALs, the parameter sets in the extradata (MP4 / Matroska)."""
    pairs = FieldPairs(avcc(sps(), pps()))
    assert [pairs.gives_frame(length_prefixed(*slices)) for slices, _ in STREAM] == [g for _, g in STREAM]


def test_a_progressive_sps_needs_no_reading_and_unreadable_packets_count_as_frames():
    assert FieldPairs(avcc(sps(frame_mbs_only=1), pps())).progressive
    assert FieldPairs(annex_b(sps(frame_mbs_only=1), pps())).progressive
    pairs = FieldPairs(None)  # no parameter sets yet: nothing is known, every packet is a frame
    assert not pairs.progressive
    assert pairs.gives_frame(annex_b(slice_nal(0, True, 0))) and pairs.gives_frame(
        annex_b(slice_nal(0, True, 1))
    )
    pairs = FieldPairs(avcc(sps(), pps()))
    assert pairs.gives_frame(b"\x00\x00\x00\x05\x06\x05\x01\xff\x80")  # an SEI alone: no slice
    assert pairs.gives_frame(b"garbage")
    sps_id, info = parse_sps(sps(sps_id=3)[1:])
    assert (sps_id, info.frame_num_bits, info.frame_mbs_only) == (3, 6, False)
    assert nal_units(annex_b(b"\x09\xf0", b"\x41\x9a"), None) == [b"\x09\xf0", b"\x41\x9a"]


@pytest.mark.parametrize("suffix", [".ts", ".mp4", ".mkv"])
def test_interlaced_x264_frames_are_one_frame_a_packet(tmp_path, suffix):
    """x264 --interlaced (MBAFF): its SPS allows fields, its pictures are frames; the index
    reads the slice headers and numbers every frame the decoder gives."""
    path = tmp_path / f"mbaff{suffix}"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        stream.options = {"x264-params": "interlaced=1:tff=1:bframes=2"}
        rng = np.random.default_rng(0)
        for i in range(14):
            frame = av.VideoFrame.from_ndarray(
                rng.integers(0, 255, (96, 128, 3), dtype=np.uint8), format="rgb24"
            )
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert not FieldPairs(stream.codec_context.extradata).progressive or suffix == ".ts"
        decoded = sum(1 for _ in container.decode(stream))
    index = frame_index(path)
    assert index.count == decoded == 14 and index.exact
