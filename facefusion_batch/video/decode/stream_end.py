"""Where a video's packets stop, and whether that is a file cut short or damage.

`PacketEnd` records where the frame-giving packets of one demux pass end (time, byte);
`judge_end` compares that with the end the container declares for the video: short of it, the
file was cut short (a warning: its complete frames are all there is) or is damaged (exit 2 under
`--on-decode-error fail`). An MPEG transport stream declares no end, but its packets all have one
size: one that ends inside a packet was cut short (`transport_cut`). `declared_size` tells the
two apart, from the container's own size fields (no FFmpeg): a demuxer reads on to the end of
the file whether the file was cut short or it gave up at damage (it scans for the next element
it knows), so where it stopped reading cannot tell them apart. The size fields can: Matroska
writes the Segment's size, AVI each RIFF chunk's, MP4 / MOV each top-level box's, when the file
is finished. A file shorter than that was cut short (its bytes end); one that holds them all,
but whose video stops early, is damaged.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

from facefusion_batch.errors import InputError
from facefusion_batch.video.decode.probe import VideoInfo, sequence_numbers

log = logging.getLogger("ffbatch")

_EBML = b"\x1a\x45\xdf\xa3"
_SEGMENT = b"\x18\x53\x80\x67"
_ISO_TYPES = frozenset(
    {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"uuid", b"meta", b"pnot", b"styp"}
)
_MAX_BOXES = 4096  # top-level boxes / RIFF chunks walked before giving up (a real file has a few)
# containers that declare no size: what one may keep after the last video packet (cues, tags,
# an index): a stream that stops early with more than this (or 2 % of the file, or two of its
# largest packets) left was not cut short
_TRAILER_BYTES = 4096


@dataclass
class PacketEnd:
    """Where the frame-giving video packets of one demux pass end."""

    end_s: float | None = None  # where the last of them ends, in seconds
    last_byte: int = 0  # where in the file the last of them ends
    largest: int = 0  # bytes of the largest of them
    timed: bool = True  # whether each said how long it lasts (then their end is exact)

    def note(self, packet) -> None:
        """Take in one packet that gives a frame."""
        end = packet.pts if packet.pts is not None else packet.dts
        if end is not None and packet.time_base is not None:
            end_s = float((end + (packet.duration or 0)) * packet.time_base)
            self.end_s = max(self.end_s or end_s, end_s)
        if packet.pos is not None and packet.pos >= 0:
            self.last_byte = max(self.last_byte, packet.pos + packet.size)
        self.largest = max(self.largest, packet.size)
        self.timed = self.timed and bool(packet.duration)


def judge_end(
    info: VideoInfo, seen: PacketEnd, frames: int, *, fail: bool, warn: bool = True, strict: bool = False
) -> None:
    """Where the packets stop against where the container says the video ends: InputError when
    the demuxer gave up at damage (`fail`), a warning (`warn`) when the file was cut short;
    InputError for any early stop when `strict` (--fail-on-truncated)."""
    path, declared, end = info.path, info.declared_end_s, seen.end_s
    partial = transport_cut(path) if path.is_file() else None
    if partial:  # a transport stream declares no end, but its packets have one size
        if strict:
            raise InputError(
                f"input video {path} ends {partial} bytes into a transport-stream packet ({frames} "
                "frames): cut short; --fail-on-truncated renders no short shot"
            )
        if warn:
            log.warning(
                "%s: the file ends %d bytes into a transport-stream packet: it was cut short; its %d "
                "complete frames are rendered",
                path,
                partial,
                frames,
            )
        return
    rate = info.average_rate
    frame_s = float(1 / rate) if rate else 0.04
    # packets that carry their durations end exactly where the container says: one frame short
    # is a frame lost; without durations the last one's end is a frame's guess
    slack = 0.5 * frame_s if seen.timed else 1.5 * frame_s
    if declared is None or end is None or end >= declared - slack:
        return
    numbers = [] if path.is_file() else sequence_numbers(path)
    if numbers and frames < len(numbers) and fail:  # a sequence is never cut short: a frame is missing
        bad = path.parent / (path.name % numbers[frames])
        empty = " (0 bytes)" if bad.is_file() and bad.stat().st_size == 0 else ""
        raise InputError(
            f"input sequence {path} is damaged: {bad.name}{empty}, frame {frames} of {len(numbers)}, gives "
            "no picture; replace it"
        )
    if strict:
        raise InputError(
            f"input video {path} stops at {end:.3f} s ({frames} frames) but its container says it runs "
            f"to {declared:.3f} s: truncated or damaged; --fail-on-truncated renders no short shot"
        )
    size = path.stat().st_size if path.is_file() else 0
    remaining = size - seen.last_byte if seen.last_byte else 0
    declared_bytes = declared_size(path) if path.is_file() else None
    if declared_bytes is not None and not size < declared_bytes and _asf_header(path):
        return  # ASF gives every stream the file's play time, not its own end: a whole file is whole
    if declared_bytes is not None:  # exact: the bytes end before the container's own size fields say
        cut_short = size < declared_bytes
    else:  # no size declared: a file cut short ends inside (or just after) a packet
        cut_short = remaining <= max(_TRAILER_BYTES, size // 50, 2 * seen.largest)
    if not cut_short and fail:
        # the demuxer gave up inside the file, at damage it cannot step over
        whole = f" (all {declared_bytes} bytes the container declares are there)" if declared_bytes else ""
        raise InputError(
            f"input video {path} is damaged: its video stops at {end:.3f} s ({frames} frames), "
            f"{remaining} bytes before the end of the file{whole}, but the container says it runs "
            f"to {declared:.3f} s"
        )
    if warn:
        log.warning(
            "%s: the video stops at %.3f s but the container says it runs to %.3f s; the file "
            "may be truncated or damaged (%d frames decoded)",
            path,
            end,
            declared,
            frames,
        )


_TS_SYNC = 0x47
_TS_PACKETS = ((188, 0), (192, 4), (204, 0))  # (packet size, where its sync byte is): TS, M2TS, TS with FEC


def transport_cut(path: str | Path) -> int | None:
    """For an MPEG transport stream, how many bytes of the packet the file ends inside (a file
    cut short mid-packet); None when `path` is not one, or ends where a packet ends."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4 * 204 + 4)
            fh.seek(0, 2)
            size = fh.tell()
    except OSError:
        return None
    for packet, sync in _TS_PACKETS:
        if len(head) >= sync + 3 * packet + 1 and all(head[sync + k * packet] == _TS_SYNC for k in range(4)):
            return (size % packet) or None
    return None


def declared_size(path: str | Path) -> int | None:
    """The bytes the container of `path` declares (Matroska, AVI, MP4 / MOV, ASF), or None where
    it does not say (MPEG-TS, a Matroska file written as a stream with an unknown size, an unknown
    format)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
            if head[:4] == _EBML:
                return _matroska(fh)
            if head[:4] == b"RIFF":
                return _chunks(fh, riff=True)
            if head[4:8] in _ISO_TYPES:
                return _chunks(fh, riff=False)
            if head[:12] == _ASF_HEADER[:12]:
                return _asf(fh)
    except OSError:
        return None
    return None


_ASF_HEADER = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")  # ASF_Header_Object
_ASF_FILE_PROPERTIES = bytes.fromhex("a1dcab8c47a9cf118ee400c00c205365")  # ASF_File_Properties_Object


def _asf_header(path: str | Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == _ASF_HEADER
    except OSError:
        return False


def _asf(fh) -> int | None:
    """The File Size an ASF (WMV, WMA) file's File Properties Object declares: its header object
    (GUID, size, object count, 2 reserved bytes) holds that object (GUID, size, file ID, file size)."""
    fh.seek(0)
    header = fh.read(30)
    if len(header) < 30 or header[:16] != _ASF_HEADER:
        return None
    end = struct.unpack("<Q", header[16:24])[0]
    offset = 30
    for _ in range(_MAX_BOXES):
        if offset + 24 > end:
            return None
        fh.seek(offset)
        obj = fh.read(48)
        if len(obj) < 24:
            return None
        size = struct.unpack("<Q", obj[16:24])[0]
        if obj[:16] == _ASF_FILE_PROPERTIES:
            return struct.unpack("<Q", obj[40:48])[0] if len(obj) >= 48 else None
        if size < 24:
            return None
        offset += size
    return None


def _vint(fh, keep_marker: bool) -> tuple[int, int] | None:
    """An EBML variable-length integer: (value, its length in bytes); None at the end or if invalid.
    An all-ones size (unknown) comes back as -1."""
    first = fh.read(1)
    if not first:
        return None
    byte = first[0]
    length = next((n for n in range(8) if byte & (0x80 >> n)), None)
    if length is None:
        return None
    rest = fh.read(length)
    if len(rest) < length:
        return None
    value = byte if keep_marker else byte & (0xFF >> (length + 1))
    for b in rest:
        value = (value << 8) | b
    if not keep_marker and value == (1 << (7 * (length + 1))) - 1:
        return -1, length + 1
    return value, length + 1


def _matroska(fh) -> int | None:
    fh.seek(0)
    offset = 0
    for _ in range(_MAX_BOXES):
        element = _vint(fh, keep_marker=True)
        size = _vint(fh, keep_marker=False)
        if element is None or size is None or size[0] < 0:
            return None
        offset += element[1] + size[1]
        if element[0] == int.from_bytes(_SEGMENT, "big"):
            return offset + size[0]
        offset += size[0]
        fh.seek(offset)
    return None


def _chunks(fh, *, riff: bool) -> int | None:
    """Walk top-level RIFF chunks (AVI, OpenDML's AVIX) or ISO boxes: where the last one ends."""
    fh.seek(0, 2)
    end = fh.tell()
    offset = 0
    for _ in range(_MAX_BOXES):
        if offset >= end:
            return offset
        fh.seek(offset)
        header = fh.read(16)
        if len(header) < 8:
            return offset + 8  # a header cut in two: the file ends inside it
        if riff:
            size = struct.unpack("<I", header[4:8])[0] + 8
            size += size & 1  # chunks are padded to even sizes
        else:
            size = struct.unpack(">I", header[:4])[0]
            if size == 1:
                if len(header) < 16:
                    return offset + 16
                size = struct.unpack(">Q", header[8:16])[0]
            elif size == 0:  # the last box, running to the end of the file
                return end
            if size < 8:
                return None
        offset += size
    return None
