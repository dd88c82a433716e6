"""H.264 packets that give no picture of their own: the second field of a field pair (PAFF).

An interlaced H.264 stream may code a frame as two field pictures (picture-adaptive
frame/field coding, common in broadcast MPEG-TS). Each field is an access unit of its own,
so a demuxer hands it over as a packet of its own, but the decoder returns one frame for the
pair: counting packets would number two frames for every such one and call a valid file
damaged. Which packets are second fields is read from the slice headers (ISO/IEC 14496-10
7.3.3: `frame_num`, `field_pic_flag`, `bottom_field_flag`): a field that follows a field of
the other parity with the same `frame_num`, not yet paired, completes that frame.

Only streams whose sequence parameter set allows fields (`frame_mbs_only_flag` 0) are read
packet by packet; for every progressive stream the first SPS settles it and the rest costs
nothing. NAL units come length-prefixed (MP4, Matroska: the avcC extradata says how wide the
prefix is) or after start codes (MPEG-TS, raw .264).
"""

from __future__ import annotations

from dataclasses import dataclass

from facefusion_batch.video.decode.bits import BitReader

_SLICE, _IDR, _SPS, _PPS = 1, 5, 7, 8
# profiles whose SPS carries chroma format, bit depths and scaling matrices (7.3.2.1.1)
_HIGH_PROFILES = {100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135}


def _rbsp(data: bytes) -> BitReader:
    """The bits of a NAL unit's payload, its emulation prevention bytes (00 00 03) removed."""
    return BitReader(data.replace(b"\x00\x00\x03", b"\x00\x00"))


@dataclass(frozen=True)
class _Sps:
    frame_num_bits: int
    frame_mbs_only: bool
    separate_colour_planes: bool


def _skip_scaling_list(bits: BitReader, size: int) -> None:
    last = following = 8
    for _ in range(size):
        if following:
            following = (last + bits.se() + 256) % 256
        last = following or last


def parse_sps(rbsp: bytes) -> tuple[int, _Sps]:
    """(seq_parameter_set_id, what the slice headers need) from an SPS NAL's payload."""
    bits = _rbsp(rbsp)
    profile = bits.read(8)
    bits.read(16)  # constraint flags, level_idc
    sps_id = bits.ue()
    separate = False
    if profile in _HIGH_PROFILES:
        chroma_format = bits.ue()
        if chroma_format == 3:
            separate = bool(bits.read(1))
        bits.ue()  # bit_depth_luma_minus8
        bits.ue()  # bit_depth_chroma_minus8
        bits.read(1)  # qpprime_y_zero_transform_bypass_flag
        if bits.read(1):  # seq_scaling_matrix_present_flag
            for i in range(12 if chroma_format == 3 else 8):
                if bits.read(1):
                    _skip_scaling_list(bits, 16 if i < 6 else 64)
    frame_num_bits = bits.ue() + 4
    poc_type = bits.ue()
    if poc_type == 0:
        bits.ue()  # log2_max_pic_order_cnt_lsb_minus4
    elif poc_type == 1:
        bits.read(1)
        bits.se()
        bits.se()
        for _ in range(bits.ue()):
            bits.se()
    bits.ue()  # max_num_ref_frames
    bits.read(1)  # gaps_in_frame_num_value_allowed_flag
    bits.ue()  # pic_width_in_mbs_minus1
    bits.ue()  # pic_height_in_map_units_minus1
    return sps_id, _Sps(frame_num_bits, bool(bits.read(1)), separate)


def nal_units(data: bytes, length_size: int | None) -> list[bytes]:
    """The NAL units of one packet: length-prefixed (`length_size` bytes) or, for None, after
    Annex B start codes."""
    units = []
    if length_size is not None:
        at = 0
        while at + length_size <= len(data):
            size = int.from_bytes(data[at : at + length_size], "big")
            at += length_size
            units.append(data[at : at + size])
            at += size
        return units
    starts = []
    at = data.find(b"\x00\x00\x01")
    while at >= 0:
        starts.append(at + 3)
        at = data.find(b"\x00\x00\x01", at + 3)
    for i, start in enumerate(starts):
        end = starts[i + 1] - 3 if i + 1 < len(starts) else len(data)
        units.append(data[start:end].rstrip(b"\x00") if i + 1 < len(starts) else data[start:end])
    return units


def _avcc(extradata: bytes | None) -> tuple[int | None, list[bytes]]:
    """(NAL length size, the parameter set NALs) of avcC extradata (MP4, Matroska: version 1,
    the length size, then the SPS and the PPS, each 16-bit length-prefixed); (None, its NALs)
    for Annex B extradata (MPEG-TS)."""
    if not extradata:
        return None, []
    if extradata[0] != 1 or len(extradata) < 7:
        return None, nal_units(extradata, None)
    units: list[bytes] = []
    at = 5
    try:
        for mask in (0x1F, 0xFF):  # the SPS count (5 bits), then the PPS count
            count = extradata[at] & mask
            at += 1
            for _ in range(count):
                size = int.from_bytes(extradata[at : at + 2], "big")
                units.append(extradata[at + 2 : at + 2 + size])
                at += 2 + size
    except IndexError:
        pass
    return (extradata[4] & 3) + 1, units


class FieldPairs:
    """Says, packet by packet in decode order, whether an H.264 packet gives a frame of its own
    (False: it holds only the second field of a pair whose first field was counted)."""

    def __init__(self, extradata: bytes | None) -> None:
        self._length_size, units = _avcc(extradata)
        self._sps: dict[int, _Sps] = {}
        self._pps: dict[int, int] = {}  # pic_parameter_set_id -> seq_parameter_set_id
        self._fields_possible: bool | None = None  # None: no SPS seen yet
        self._open: tuple[int, int] | None = None  # (frame_num, bottom) of an unpaired first field
        for unit in units:
            self._parameter_set(unit)

    def _parameter_set(self, unit: bytes) -> None:
        if not unit:
            return
        kind = unit[0] & 0x1F
        try:
            if kind == _SPS:
                sps_id, sps = parse_sps(unit[1:])
                self._sps[sps_id] = sps
                if self._fields_possible is None or not sps.frame_mbs_only:
                    self._fields_possible = not sps.frame_mbs_only
            elif kind == _PPS:
                bits = _rbsp(unit[1:])
                pps_id = bits.ue()
                self._pps[pps_id] = bits.ue()
        except EOFError:
            pass

    @property
    def progressive(self) -> bool:
        """Whether the stream's SPS allows only frames (every packet then gives one)."""
        return self._fields_possible is False

    def gives_frame(self, data: bytes) -> bool:
        """False only for a packet whose pictures are all second fields: one whose slices cannot
        be read counts as a frame, as it did before (the reader still checks every count)."""
        if self._fields_possible is False:
            return True  # progressive only: every packet is a frame
        pictures = []
        for unit in nal_units(data, self._length_size):
            kind = unit[0] & 0x1F if unit else 0
            if kind in (_SPS, _PPS):
                self._parameter_set(unit)
            elif kind in (_SLICE, _IDR):
                picture = self._picture(unit)
                if picture is not None:
                    pictures.append(picture)
        return not pictures or any(pictures)

    def _picture(self, unit: bytes) -> bool | None:
        """For the first slice of a picture: whether the picture is a frame or a first field
        (False: the second field of a pair); None for a later slice of a picture."""
        bits = _rbsp(unit[1:24])
        try:
            if bits.ue() != 0:  # first_mb_in_slice
                return None
            bits.ue()  # slice_type
            sps = self._sps.get(self._pps.get(bits.ue(), -1))
            if sps is None:
                return True
            if sps.separate_colour_planes:
                bits.read(2)
            frame_num = bits.read(sps.frame_num_bits)
            field = not sps.frame_mbs_only and bits.read(1)
            bottom = bits.read(1) if field else 0
        except EOFError:
            return True
        if not field:
            self._open = None
            return True
        if self._open == (frame_num, 1 - bottom):
            self._open = None
            return False  # the second field of the pair: the frame was counted with the first
        self._open = (frame_num, bottom)
        return True
