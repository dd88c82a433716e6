"""Progress: a tqdm bar on a terminal; elsewhere (a farm log, a pipe) a plain line every
FFBATCH_PROGRESS_SECONDS (default 10 s), so a log tells a stuck job from a slow one."""

from __future__ import annotations

import os
import sys
import time

DEFAULT_INTERVAL_S = 10.0


def progress_interval() -> float:
    """Seconds between plain progress lines (FFBATCH_PROGRESS_SECONDS; a bad value is the default)."""
    try:
        value = float(os.environ.get("FFBATCH_PROGRESS_SECONDS", DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value == value and 0 < value < float("inf") else DEFAULT_INTERVAL_S


class Progress:
    def __init__(self, enabled: bool = True) -> None:
        tty = sys.stderr.isatty()
        self.enabled = enabled and tty
        self.lines = enabled and not tty
        self._bar = None
        self._total: int | None = None
        self._done = 0
        self._started = self._next = 0.0
        self._interval = progress_interval()

    def start(self, total: int | None) -> None:
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, unit="frame", dynamic_ncols=True, file=sys.stderr, desc="ffbatch", smoothing=0.1
            )
        elif self.lines:
            self._total, self._done = total, 0
            self._started = time.monotonic()
            self._next = self._started + self._interval

    def update(self, frames: int) -> None:
        if self._bar is not None:
            self._bar.update(frames)
        elif self.lines:
            self._done += frames
            now = time.monotonic()
            if now >= self._next:
                self._next = now + self._interval
                self._line(now)

    def _line(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-6)
        fps = self._done / elapsed
        if self._total:
            left = max(self._total - self._done, 0)
            eta = f", {left / fps:.0f} s left" if fps > 0 else ""
            share = 100 * self._done / self._total
            text = f"{self._done}/{self._total} frames ({share:.0f}%), {fps:.1f} fps{eta}"
        else:
            text = f"{self._done} frames, {fps:.1f} fps"
        try:
            print(f"ffbatch: progress: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed: progress is not worth failing the job for
            self.lines = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
