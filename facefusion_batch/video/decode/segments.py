"""Frame ranges of a video: exact frame numbers, keyframe seeking, segment tags.

A frame's number is its rank in presentation order: frame N is the picture with
the N-th smallest pts among the video packets (0-based) that give a picture (packets
an edit list hides are marked discard and give none). That is the order the
decoder returns frames in, so a full decode counting from 0 and a seek to the
keyframe before a range agree on every number. `FrameIndex` finds the pts of
every frame by demuxing the stream once (no decoding: fast, I/O bound).

Ranges are written `START:END`, END exclusive, like a Python slice: `0:100` is
frames 0 to 99; `100:` runs to the end. A farm's range (`--frame-range FIRST-LAST`) is
inclusive and in the input's own numbers: an image sequence's file numbers, a video's frame
numbers from 0 (`parse_frame_range`, `frames_of_range`).

An image sequence (shot/plate.%04d.dpx) has one frame per file, every one a keyframe: its
index is its files (frame N is the N-th number present), with no demuxing at all.

Segments (the output of `render --frames`) carry container tags so that a join
can check them and a re-run can recognise finished work: `ffbatch_frames`
(`START:END`), `ffbatch_frame_count` (frames of the whole input),
`ffbatch_settings` (digest of the settings that affect pixels) and
`ffbatch_input` (the input's file name).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import av.error

from facefusion_batch.errors import InputError
from facefusion_batch.fsutil import ffmpeg_path
from facefusion_batch.video.decode.h264_fields import FieldPairs
from facefusion_batch.video.decode.mpeg4 import NotCodedVops
from facefusion_batch.video.decode.probe import pick_video_stream, sequence_numbers
from facefusion_batch.video.decode.stream_end import PacketEnd, judge_end
from facefusion_batch.video.decode.timing import ClockMap, ClockScan, has_clock, shift_ticks
from facefusion_batch.video.encode.sequence import is_sequence_pattern

TAG_FRAMES = "ffbatch_frames"
TAG_FRAME_COUNT = "ffbatch_frame_count"
TAG_SETTINGS = "ffbatch_settings"
TAG_INPUT = "ffbatch_input"


def parse_range(text: str, option: str = "--frames") -> tuple[int, int | None]:
    """`START:END` (END exclusive), `START:` (to the end) or `:END`; InputError otherwise."""
    start_text, sep, end_text = text.strip().partition(":")
    if not sep:
        raise InputError(f"{option} {text!r}: write START:END (0-based, END exclusive), e.g. 0:250")
    try:
        start = int(start_text) if start_text.strip() else 0
        end = int(end_text) if end_text.strip() else None
    except ValueError:
        raise InputError(f"{option} {text!r}: START and END must be whole numbers") from None
    if start < 0 or (end is not None and end <= start):
        raise InputError(f"{option} {text!r}: need 0 <= START < END")
    return start, end


def parse_frame_range(text: str, option: str = "--frame-range") -> tuple[int, int]:
    """A farm's inclusive range as it substitutes it: `1001-1100`, a single `1001`, Deadline's
    `<STARTFRAME>-<ENDFRAME>` once filled in, or an OpenJD range expression (`1-10`, `-5--1`,
    `1-5,6-10`, `10-1:-1`; whitespace allowed) whose frames are contiguous. (FIRST, LAST),
    inclusive; InputError for anything else (a step that skips frames, a list with a gap)."""
    if "<" in text or "{{" in text:
        raise InputError(
            f"{option} {text!r}: the farm did not fill in its frame tokens "
            "(Deadline's <STARTFRAME>-<ENDFRAME>, OpenJD's {{Task.Param.Frame}})"
        )
    pieces: list[tuple[int, int]] = []
    for element in text.split(","):
        match = _RANGE_ELEMENT.match(element)
        if match is None:
            raise InputError(
                f"{option} {text!r}: write FIRST-LAST (inclusive, in the input's own frame numbers), "
                "e.g. 1001-1100"
            )
        first = int(match["first"])
        last = int(match["last"]) if match["last"] is not None else first
        step = int(match["step"]) if match["step"] is not None else (1 if last >= first else -1)
        if step == 0 or (last - first) * step < 0:
            raise InputError(f"{option} {text!r}: the step must be non-zero and go from FIRST toward LAST")
        if abs(step) != 1 and abs(last - first) >= abs(step):
            raise InputError(
                f"{option} {text!r}: a step of {step} skips frames; a task renders contiguous frames "
                "(give the farm a chunk size instead of a step)"
            )
        if abs(step) != 1:
            last = first  # a step longer than the range: its first frame alone
        pieces.append((min(first, last), max(first, last)))
    pieces.sort()
    for (_, last), (first, _) in zip(pieces, pieces[1:], strict=False):
        if first != last + 1:
            raise InputError(
                f"{option} {text!r}: frames {last + 1}-{first - 1} are left out (or listed twice); "
                "a task renders one contiguous range"
            )
    return pieces[0][0], pieces[-1][1]


_RANGE_ELEMENT = re.compile(
    r"^[ \t]*(?P<first>-?\d+)(?:[ \t]*-[ \t]*(?P<last>-?\d+)(?:[ \t]*:[ \t]*(?P<step>-?\d+))?)?[ \t]*$"
)


def first_frame_number(path: str | Path) -> int:
    """The number `--frame-range` counts from: an image sequence's first file's, 0 for a video
    (a frame's number is then its 0-based place, as in `--frames`, whatever its timecode)."""
    if is_sequence_pattern(path):
        numbers = sequence_numbers(Path(path))
        if not numbers:
            raise InputError(f"input {path}: no files match this image sequence pattern")
        return numbers[0]
    return 0


def frames_of_range(text: str, input: str | Path, option: str = "--frame-range") -> tuple[int, int]:
    """`--frame-range` as the 0-based, END-exclusive range of `--frames`."""
    first, last = parse_frame_range(text, option)
    base = first_frame_number(input)
    if first < base:
        raise InputError(f"{option} {text}: {input} starts at frame {base}")
    if is_sequence_pattern(input):
        numbers = sequence_numbers(Path(input))
        if last > numbers[-1]:
            raise InputError(f"{option} {text}: {input} holds frames {numbers[0]}-{numbers[-1]}")
    return first - base, last - base + 1


def format_range(start: int, end: int) -> str:
    return f"{start}:{end}"


def split_frames(count: int, chunk: int) -> list[tuple[int, int]]:
    """[0, count) cut into consecutive ranges of `chunk` frames (the last may be shorter)."""
    if chunk < 1:
        raise ValueError("chunk must be >= 1")
    return [(a, min(a + chunk, count)) for a in range(0, count, chunk)]


@dataclass(frozen=True)
class FrameIndex:
    """The pts of every frame in presentation order, and which of them are keyframes."""

    path: Path
    stream_index: int
    time_base: Fraction
    count: int  # frames in the stream
    pts: tuple[int, ...]  # sorted: pts[n] is the pts of frame n (only when `exact`)
    keyframe_pts: tuple[int, ...]  # sorted
    exact: bool  # every packet had a pts and no two were equal: seeking is safe
    # where the clock jumps (video/decode/timing.py): pts are on the moved timeline, which a seek in the
    # file's own clock cannot address, so ranges seek to a keyframe by its byte position
    # (parallel to `keyframe_pts`); () for every other input
    keyframe_pos: tuple[int, ...] = ()
    end: PacketEnd | None = field(default=None, compare=False)  # where the packets stop (a damaged tail)

    def resolve(self, start: int, end: int | None, option: str = "--frames") -> tuple[int, int]:
        """Check a range against the video; END None means the last frame."""
        end = self.count if end is None else end
        if start >= self.count or end > self.count:
            raise InputError(
                f"{option} {start}:{end} is outside {self.path}, "
                f"which has {self.count} frames (0:{self.count})"
            )
        return start, end

    def seek_pts(self, start: int) -> int | None:
        """pts of the last keyframe at or before frame `start`; None to decode from the beginning."""
        if not self.exact or self.keyframe_pos or start == 0:
            return None
        i = self._keyframe_before(start)
        return self.keyframe_pts[i] if i >= 0 else None

    def seek_byte(self, start: int) -> int | None:
        """Where the clock jumps: the byte position of the last keyframe at or before frame
        `start`; None to decode from the beginning (or to seek by `seek_pts`)."""
        if not self.exact or not self.keyframe_pos or start == 0:
            return None
        i = self._keyframe_before(start)
        return self.keyframe_pos[i] if i >= 0 else None

    def _keyframe_before(self, start: int) -> int:
        return bisect.bisect_right(self.keyframe_pts, self.pts[start]) - 1


def gives_frame(packet: av.Packet) -> bool:
    """Whether a demuxed video packet stands for a frame: it holds data (not the end-of-stream
    flush) and no edit list hides it (such packets are decoded for reference, never shown)."""
    return bool(packet.size) and not packet.is_discard


class FramePackets:
    """Which demuxed video packets of `stream` stand for a frame, asked in decode order: those
    `gives_frame` accepts, less MPEG-4 Part 2 not-coded VOPs (video/decode/mpeg4.py), which a decoder
    shows no picture for, and the second fields of H.264 field pairs (video/decode/h264_fields.py),
    which complete the frame their first field began."""

    def __init__(self, stream) -> None:
        ctx = stream.codec_context
        name = ctx.name if ctx is not None else ""
        self._vops = NotCodedVops(ctx.extradata) if name == "mpeg4" else None
        self._fields = FieldPairs(ctx.extradata) if name == "h264" else None
        self.held: int | None = None  # pts of a last packet that gave no frame yet (see `at_end`)
        self._held = False

    def __call__(self, packet: av.Packet) -> bool:
        if not gives_frame(packet):
            return False
        if self._fields is not None and self._fields.progressive:
            self._fields = None  # its SPS allows no fields: the packets need no reading
        if self._fields is not None:
            return self._fields.gives_frame(bytes(packet))
        gives = self._vops is None or self._vops.gives_frame(bytes(packet))
        self._held, self.held = not gives, (None if gives else packet.pts)
        return gives

    def at_end(self) -> bool:
        """Whether the stream's last packet, an N-VOP, gives a frame after all: the decoder hands
        over the picture it repeats when it is flushed (FFmpeg's mpeg4 decoder does, without
        B-frames: video/decode/mpeg4.py)."""
        return self._held and (self._vops is None or self._vops.repeats_at_end)


def frame_index(path: str | Path, stream_index: int | None = None) -> FrameIndex:
    """Demux (not decode) the video stream once and number its frames."""
    path = Path(path)
    if is_sequence_pattern(path):
        return _sequence_index(path)
    try:
        container = av.open(ffmpeg_path(path))
    except (av.error.FFmpegError, OSError) as exc:
        raise InputError(f"input video {path} cannot be read: {exc}") from None
    try:
        if stream_index is None:
            stream = pick_video_stream(container)
            if stream is None:
                raise InputError(f"input video {path} has no video stream")
        else:
            chosen = container.streams[stream_index]
            if not isinstance(chosen, av.VideoStream):
                raise InputError(f"stream {stream_index} of {path} is not a video stream")
            stream = chosen
        pts: list[int] = []
        keys: list[int] = []
        positions: list[int | None] = []  # where each of `pts` is, for a clock that jumps
        key_positions: list[int | None] = []  # and each of `keys`
        missing = 0
        end = PacketEnd()
        counts = FramePackets(stream)
        # an MPEG-TS/PS clock may jump: the audio is read too (the same pass), to place each jump
        clock = ClockScan(stream.index) if has_clock(container) else None
        streams = [s for s in container.streams if s.type == "audio"] if clock is not None else []
        try:
            for packet in container.demux(stream, *streams):
                if clock is not None:
                    clock.add(packet)
                if packet.stream.index != stream.index:
                    continue
                if packet.is_keyframe and packet.pts is not None and packet.size:
                    keys.append(packet.pts)  # a seek may land on a keyframe an edit list hides
                    key_positions.append(packet.pos)
                if gives_frame(packet):
                    end.note(packet)  # where the stream's data ends, N-VOPs included
                if not counts(packet):
                    continue
                if packet.pts is None:
                    missing += 1
                    continue
                pts.append(packet.pts)
                positions.append(packet.pos)
        except (av.error.FFmpegError, OSError):
            pass  # a damaged tail: number the frames that are there, as the reader would decode them
        if counts.at_end():
            if counts.held is None:
                missing += 1
            else:
                pts.append(counts.held)
                positions.append(None)
        time_base = Fraction(stream.time_base) if stream.time_base else Fraction(1, 90000)
    finally:
        container.close()
    jumps = clock.result() if clock is not None else None
    key_pos: tuple[int, ...] = ()
    if jumps:  # the frames on the timeline the reader gives them (each part after the one before)
        pts = _moved(jumps, stream.index, pts, positions, time_base)
        placed = [(k, p) for k, p in zip(keys, key_positions, strict=True) if p is not None and p >= 0]
        moved = _moved(jumps, stream.index, [k for k, _ in placed], [p for _, p in placed], time_base)
        pairs = sorted(zip(moved, (p for _, p in placed), strict=True))
        keys, key_pos = [k for k, _ in pairs], tuple(p for _, p in pairs)
    ordered = sorted(pts)
    # Without timestamps (or with repeated ones) a frame's number is its decode count: the
    # reader then decodes from the beginning and counts instead of seeking.
    exact = not missing and len(set(ordered)) == len(ordered) and bool(keys)
    return FrameIndex(
        path=path,
        stream_index=stream.index,
        time_base=time_base,
        count=len(pts) + missing,
        pts=tuple(ordered) if exact else (),
        keyframe_pts=tuple(sorted(keys)),
        exact=exact,
        keyframe_pos=key_pos,
        end=end,
    )


def _sequence_index(pattern: Path) -> FrameIndex:
    """An image sequence's frames: one per file, each a keyframe; FFmpeg's image2 demuxer gives
    frame N the pts N (in frames, from the first file) and seeks to it exactly."""
    numbers = sequence_numbers(pattern)
    if not numbers:
        raise InputError(f"input {pattern}: no files match this image sequence pattern")
    count = len(numbers)
    return FrameIndex(
        path=pattern,
        stream_index=0,
        time_base=Fraction(1, 24),
        count=count,
        pts=tuple(range(count)),
        keyframe_pts=tuple(range(count)),
        exact=True,
    )


def _moved(clock: ClockMap, stream: int, pts: list[int], positions: list, time_base: Fraction) -> list[int]:
    """`pts` of packets at `positions` (in demux order) on the clock map's moved timeline."""
    rebaser = clock.rebaser()
    return [
        p + shift_ticks(rebaser.shift(stream, pos), time_base) for p, pos in zip(pts, positions, strict=True)
    ]


def check_complete(info) -> None:
    """--fail-on-truncated: exit 2 before any rendering when the input's video packets stop before
    the end its container declares (one demux pass; a plain render would only warn)."""
    index = frame_index(info.path, info.video_stream_index)
    if index.end is not None:
        judge_end(info, index.end, index.count, fail=True, warn=False, strict=True)


def video_packet_count(path: str | Path) -> int | None:
    """Video packets a file holds, by demuxing it (no decoding); None when it cannot be read to
    its end. A finished segment or output holds one per frame: fewer means it was cut short."""
    try:
        with av.open(ffmpeg_path(path)) as container:
            stream = pick_video_stream(container)
            if stream is None:
                return None
            return sum(1 for packet in container.demux(stream) if packet.size)
    except (av.error.FFmpegError, OSError):
        return None


def read_tags(path: str | Path) -> dict[str, str]:
    """The container tags of a file (keys lower-cased); {} if it cannot be opened."""
    try:
        with av.open(ffmpeg_path(path)) as container:
            return {k.lower(): v for k, v in container.metadata.items()}
    except (av.error.FFmpegError, OSError):
        return {}
