"""MPEG-4 Part 2 (DivX/Xvid) packets that give no picture: not-coded VOPs.

An Xvid or DivX encoder that drops a frame (rate control, a capture that fell behind) writes an
N-VOP in its place: a VOP header with `vop_coded` 0, "the previous picture again". FFmpeg's
decoder returns no frame for it, without an error, so counting packets would call a valid file
damaged (and number its frames wrongly). In a *packed* stream (DivX packed B-frames) the N-VOP
after a chunk holding two VOPs is the placeholder at which the decoder hands over the delayed
picture: that one gives a frame. With two or more B-frames the packed chunk (P and the first
B-frame) is followed by the other B-frames, one a chunk, and only then the N-VOP: each chunk
hands over the picture held back by the one before and holds back its own, as FFmpeg's decoder
and its `mpeg4_unpack_bframes` filter both do, so the N-VOP that ends the run still gives the
held picture. An N-VOP with nothing held back is a dropped frame and gives none. Reading
`vop_coded` needs the time-increment width, from the Video Object Layer header (ISO/IEC
14496-2 6.2.3) in the extradata or the first keyframe.
"""

from __future__ import annotations

from facefusion_batch.video.decode.bits import BitReader

_VOP = b"\x00\x00\x01\xb6"
_VOL_FIRST, _VOL_LAST = 0x20, 0x2F  # video_object_layer_start_code 00 00 01 2x
_GRAYSCALE = 3


def increment_bits(data: bytes | None) -> int | None:
    """The width of `vop_time_increment` from the first VOL header in `data`; None if none."""
    if not data:
        return None
    at = data.find(b"\x00\x00\x01")
    while at >= 0:
        if at + 3 < len(data) and _VOL_FIRST <= data[at + 3] <= _VOL_LAST:
            try:
                return _vol_increment_bits(BitReader(data, at + 4))
            except EOFError:
                return None
        at = data.find(b"\x00\x00\x01", at + 3)
    return None


def _vol_increment_bits(bits: BitReader) -> int | None:
    bits.read(1 + 8)  # random_accessible_vol, video_object_type_indication
    verid = 1
    if bits.read(1):  # is_object_layer_identifier
        verid = bits.read(4)
        bits.read(3)  # priority
    if bits.read(4) == 0xF:  # aspect_ratio_info: extended PAR
        bits.read(16)
    if bits.read(1):  # vol_control_parameters
        bits.read(2 + 1)  # chroma_format, low_delay
        if bits.read(1):  # vbv_parameters
            bits.read(79)
    shape = bits.read(2)
    if shape == _GRAYSCALE and verid != 1:
        bits.read(4)
    if not bits.read(1):  # marker
        return None
    resolution = bits.read(16)
    if not resolution or not bits.read(1):
        return None
    return max(1, (resolution - 1).bit_length())


def vop_coded(data: bytes, at: int, width: int) -> bool:
    """Whether the VOP whose start code is at `data[at]` is coded (False: an N-VOP)."""
    bits = BitReader(data, at + 4)
    try:
        bits.read(2)  # vop_coding_type
        while bits.read(1):  # modulo_time_base
            pass
        if not bits.read(1):
            return True  # no marker: not a header we can read, so not a placeholder we know
        bits.read(width)
        if not bits.read(1):
            return True
        return bool(bits.read(1))
    except EOFError:
        return True


class NotCodedVops:
    """Says, packet by packet in decode order, whether an MPEG-4 Part 2 packet gives a picture."""

    def __init__(self, extradata: bytes | None) -> None:
        self._width = increment_bits(extradata)
        self._held = False  # a packed P+B chunk held a picture back that no N-VOP has handed over yet
        self.b_frames = False  # a B-VOP was seen: the decoder runs a picture behind

    def gives_frame(self, data: bytes) -> bool:
        if self._width is None:
            self._width = increment_bits(data)  # the VOL header sits in the first keyframe
        vops = data.count(_VOP)
        self.b_frames = self.b_frames or _has_b_vop(data)
        if vops == 1 and self._width is not None and not vop_coded(data, data.find(_VOP), self._width):
            gives, self._held = self._held, False
            return gives
        if vops >= 2:
            self._held = True  # a coded single VOP hands the held picture over and holds its own
        return True

    @property
    def repeats_at_end(self) -> bool:
        """Whether an N-VOP that ends the stream gives a picture when the decoder is flushed: it
        does without B-frames (the decoder hands the repeated picture over); with them the flush
        hands over the last reference picture, which was counted where it was coded."""
        return not self.b_frames


def _has_b_vop(data: bytes) -> bool:
    """Whether `data` holds a B-VOP (vop_coding_type 2, the first two bits after the start code)."""
    at = data.find(_VOP)
    while 0 <= at < len(data) - 4:
        if data[at + 4] >> 6 == 2:
            return True
        at = data.find(_VOP, at + 4)
    return False
