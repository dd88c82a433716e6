"""Timestamps as a decoder reads them: where the output's timeline starts, and display pts.

Two things FFmpeg's demuxers hand over that cannot be written as they are:

* Negative timestamps. An MPEG-TS clock (33 bits at 90 kHz) that wraps mid-clip is unwrapped
  by the demuxer into timestamps that start below 0 and rise through it. An .mp4 hides every
  frame before 0 behind its edit list and Matroska loses their pts, so the whole input is
  moved: `timeline_shift` is the time added to every video *and* audio timestamp so that no
  stream starts before 0 (MPEG-TS/PS: so that the first starts at 0; other inputs that do not
  start early: 0). Audio and video move by the same time, so their sync is kept exactly.
* Display timestamps out of order. Decoders return pictures in display order, but the pts
  attached to them are the demuxer's guesses: an AVI stores no pts, and with packed B-frames
  (DivX/Xvid) the guess puts the B-frame after the P-frame it precedes (2, 4, 3, 6, 5, ...).
  `DisplayTimes` gives the n-th picture the n-th smallest pts of the stream, looking a few
  frames ahead: the pictures stay in the decoder's order and the timestamps become the
  stream's own, strictly increasing, at its exact rate.
* Clock discontinuities. Two broadcast recordings spliced together (or a capture across a
  channel change) hold two clocks: mid-clip the timestamps jump back, or far forward. FFmpeg
  hands them over as they are. `ClockScan` finds every jump of the video's decode clock (any
  step back, or a step forward of more than `JUMP_S`, FFmpeg's own threshold) and the audio's
  jump at the same splice; `ClockMap` then moves each part to follow the one before: its first
  frame one frame after the last of the part before (later still if the audio before the splice
  runs past the video, so that no audio packet overlaps the next), video and audio of one part
  by the same time, so their sync within each part is kept exactly and nothing is dropped.
* Repeated timestamps. A frame whose pts repeats the one before it (or goes back before it)
  cannot be written as it is: `strictly_after` moves it one tick after the frame before. The
  reader applies it as it reads and the writer to what it is handed, so both hold one rule.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Generic, TypeVar

import av.error

_CLOCK_FORMATS = frozenset({"mpegts", "mpeg"})
REORDER_DEPTH = 4  # how far a pts may be out of its display place (packed B-frames: 1)
JUMP_S = 10  # a decode clock that steps forward by more than this has jumped (FFmpeg's dts_delta_threshold)
_SAME_SPLICE_S = 2  # an audio jump within this of the video's, in size, is the same splice

T = TypeVar("T")


def timeline_shift(container) -> Fraction:
    """Seconds to add to every timestamp of `container` so that no video or audio stream starts
    before 0: minus the earliest stream start when that is negative, else 0. MPEG-TS and MPEG-PS
    timestamps are a broadcast clock, not a timeline: they always start at 0 (as FFmpeg's own
    outputs do), so a clock at 10 h, or one past 2**33 after a wrap, is not an empty 10 h lead-in."""
    starts = [
        Fraction(s.start_time) * Fraction(s.time_base)
        for s in container.streams
        if s.type in ("video", "audio") and s.start_time is not None and s.time_base
    ]
    earliest = min(starts, default=Fraction(0))
    if earliest < 0 or container.format.name in _CLOCK_FORMATS:
        return -earliest
    return Fraction(0)


def shift_ticks(shift: Fraction, time_base: Fraction) -> int:
    """`shift` seconds in `time_base` units (to the nearest tick)."""
    return round(shift / time_base) if shift and time_base else 0


def strictly_after(last: int | None, pts: int) -> int:
    """`pts`, or one tick after `last` (the pts of the frame before) where it is not later than
    it: a frame that repeats the timestamp before it, or goes back before it, is shown one tick
    after that frame."""
    return last + 1 if last is not None and pts <= last else pts


class DisplayTimes(Generic[T]):
    """Pair items that arrive in display order with the stream's pts in increasing order.

    `push(item, pts)` returns the items now ready, each with its display pts; `finish()` the
    rest. An item pushed with pts None keeps None (the writer then steps on from the last)."""

    def __init__(self, depth: int = REORDER_DEPTH) -> None:
        self._depth = depth
        self._items: deque[tuple[T, bool]] = deque()
        self._pts: list[int] = []
        self.reordered = 0  # pts that arrived below one seen before (the stream's guesses were out of order)
        self._highest: int | None = None

    def push(self, item: T, pts: int | None) -> list[tuple[T, int | None]]:
        self._items.append((item, pts is not None))
        if pts is not None:
            if self._highest is not None and pts < self._highest:
                self.reordered += 1
            self._highest = pts if self._highest is None else max(self._highest, pts)
            heapq.heappush(self._pts, pts)
        ready = []
        while len(self._items) > self._depth:
            ready.append(self._pop())
        return ready

    def finish(self) -> list[tuple[T, int | None]]:
        ready = []
        while self._items:
            ready.append(self._pop())
        return ready

    def _pop(self) -> tuple[T, int | None]:
        item, has_pts = self._items.popleft()
        return item, (heapq.heappop(self._pts) if has_pts else None)


def display_order(pts: Iterable[int | None], depth: int = REORDER_DEPTH) -> list[int | None]:
    """The pts `DisplayTimes` gives frames whose own pts are `pts` (in decoder order)."""
    times: DisplayTimes[None] = DisplayTimes(depth)
    out = [p for value in pts for _, p in times.push(None, value)]
    return out + [p for _, p in times.finish()]


def has_clock(container) -> bool:
    """Whether `container` keeps a broadcast clock (MPEG-TS/PS), which may jump mid-clip."""
    return container.format.name in _CLOCK_FORMATS


@dataclass
class _Part:
    """What one stream holds between two jumps of its clock (in its time base's ticks)."""

    first_pos: int
    start: int  # the smallest pts
    end: int  # the largest pts + duration
    jump: int = 0  # how far its clock jumped into this part (0 for the first part)


@dataclass
class _Track:
    time_base: Fraction
    jump: int  # JUMP_S in ticks
    second: int  # 1 s in ticks
    parts: list[_Part] = field(default_factory=list)
    last: int | None = None  # the last decode time seen
    step: int = 0  # the last forward step (a duration when packets carry none)

    def seconds(self, ticks: int) -> Fraction:
        return ticks * self.time_base


@dataclass(frozen=True)
class ClockMap:
    """Seconds to add to each packet of an input whose clock jumps: per stream, the byte positions
    where its clock jumped and the shift from there on. Empty (falsy) for almost every input."""

    video_stream: int = -1
    shifts: tuple[tuple[int, tuple[tuple[int, Fraction], ...]], ...] = ()  # (stream, ((pos, shift), ...))
    # each discontinuity: (seconds into the moved timeline where it is, seconds the clock jumped)
    discontinuities: tuple[tuple[float, float], ...] = ()
    video_span_s: float | None = None  # how long the video runs once its parts follow each other

    def __bool__(self) -> bool:
        return bool(self.discontinuities)

    def describe(self) -> str:
        return ", ".join(
            f"at {at:.3f} s {'back' if jump < 0 else 'forward'} {_duration(abs(jump))}"
            for at, jump in self.discontinuities
        )

    def rebaser(self) -> Rebaser:
        return Rebaser(self)


class Rebaser:
    """Applies a `ClockMap` to packets in demux order (`rebase` moves pts and dts in place)."""

    def __init__(self, clock: ClockMap) -> None:
        self._tables = {
            stream: ([pos for pos, _ in table], [s for _, s in table]) for stream, table in clock.shifts
        }
        self._video = clock.video_stream
        self._last: dict[int, Fraction] = {}

    def shift(self, stream: int, pos: int | None) -> Fraction:
        """Seconds to add to a packet of `stream` at byte `pos` (streams without their own table,
        such as subtitles, follow the video's)."""
        table = self._tables.get(stream) or self._tables.get(self._video)
        if table is None:
            return Fraction(0)
        if pos is None or pos < 0:  # no position: as the packet before it
            return self._last.get(stream, Fraction(0))
        positions, shifts = table
        i = bisect.bisect_right(positions, pos) - 1
        value = shifts[i] if i >= 0 else Fraction(0)
        self._last[stream] = value
        return value

    def rebase(self, packet) -> Fraction:
        """Move `packet`'s pts and dts onto the continuous timeline; the shift, in seconds."""
        if not self._tables:
            return Fraction(0)
        value = self.shift(packet.stream.index, packet.pos)
        ticks = shift_ticks(value, Fraction(packet.time_base)) if packet.time_base else 0
        if ticks:
            if packet.pts is not None:
                packet.pts += ticks
            if packet.dts is not None:
                packet.dts += ticks
        return value


def scan_clock(container, video_stream: int) -> ClockMap:
    """The clock map of an opened input: demuxes it once (MPEG-TS/PS only; others keep one clock).
    A damaged tail ends the scan: the map covers the packets before it (as the reader reads them)."""
    if not has_clock(container):
        return ClockMap()
    scan = ClockScan(video_stream)
    streams = [s for s in container.streams if s.type == "audio" or s.index == video_stream]
    try:
        for packet in container.demux(*streams):
            scan.add(packet)
    except (av.error.FFmpegError, OSError):
        pass
    return scan.result()


class ClockScan:
    """Find the clock jumps of an input from its packets (`add` each, in demux order; `result`)."""

    def __init__(self, video_stream: int) -> None:
        self._video = video_stream
        self._tracks: dict[int, _Track] = {}

    def add(self, packet) -> None:
        """Take in one packet (integer arithmetic: this runs for every packet of the file)."""
        stream = packet.stream
        if not packet.size or stream is None:
            return
        track = self._tracks.get(stream.index)
        if track is None:
            if (stream.index != self._video and stream.type != "audio") or packet.time_base is None:
                return
            tb = Fraction(packet.time_base)
            track = self._tracks[stream.index] = _Track(tb, int(JUMP_S / tb), max(1, int(1 / tb)))
        dts, pts = packet.dts, packet.pts
        when = dts if dts is not None else pts
        if when is None:
            return
        shown = pts if pts is not None else when
        pos = packet.pos if packet.pos is not None else -1
        last = track.last
        if last is None:
            track.parts.append(_Part(pos, shown, shown))
        else:
            step = when - last
            # a decode clock never steps back (pts alone may, by a few frames of reordering)
            back = step < 0 if dts is not None else step < -track.second
            if back or step > track.jump:
                track.parts.append(_Part(pos, shown, shown, jump=step))
            elif step > 0:
                track.step = step
        part = track.parts[-1]
        if shown < part.start:
            part.start = shown
        end = shown + (packet.duration or track.step)
        if end > part.end:
            part.end = end
        track.last = when

    def result(self) -> ClockMap:
        video = self._tracks.get(self._video)
        if video is None or len(video.parts) < 2:
            return ClockMap()
        splices = len(video.parts) - 1
        # each stream's parts, numbered by the splice they follow (0: before the first)
        numbered: dict[int, list[tuple[int, _Part]]] = {self._video: list(enumerate(video.parts))}
        for index, track in self._tracks.items():
            if index != self._video:
                numbered[index] = _match_splices(track, video)
        shift = [Fraction(0)] * (splices + 1)
        for k in range(1, splices + 1):
            needed = []
            for index, parts in numbered.items():
                seconds = self._tracks[index].seconds
                before = [seconds(p.end) for n, p in parts if n == k - 1]
                after = [seconds(p.start) for n, p in parts if n == k]
                if before and after:
                    needed.append(max(before) + shift[k - 1] - min(after))
            shift[k] = max(needed)
        shifts = tuple(
            (index, tuple((p.first_pos, shift[n]) for n, p in parts))
            for index, parts in sorted(numbered.items())
        )
        at = video.seconds
        found = tuple(
            (float(at(video.parts[k].start) + shift[k]), float(at(video.parts[k].jump)))
            for k in range(1, splices + 1)
        )
        span = float(at(video.parts[-1].end) + shift[-1] - at(video.parts[0].start))
        return ClockMap(video_stream=self._video, shifts=shifts, discontinuities=found, video_span_s=span)


def _match_splices(track: _Track, video: _Track) -> list[tuple[int, _Part]]:
    """Number another stream's parts by the video splice each follows: a jump of about the size
    of the video's next one is that splice; any other jump (a gap in the audio alone) is not."""
    out: list[tuple[int, _Part]] = []
    splice = 0
    for i, part in enumerate(track.parts):
        if i:
            for k in range(splice + 1, len(video.parts)):
                if abs(track.seconds(part.jump) - video.seconds(video.parts[k].jump)) <= _SAME_SPLICE_S:
                    splice = k
                    break
        out.append((splice, part))
    return out


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds:.3f} s"
