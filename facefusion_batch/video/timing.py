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
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from fractions import Fraction
from typing import Generic, TypeVar

_CLOCK_FORMATS = frozenset({"mpegts", "mpeg"})
REORDER_DEPTH = 4  # how far a pts may be out of its display place (packed B-frames: 1)

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
