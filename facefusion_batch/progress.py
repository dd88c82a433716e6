"""tqdm progress on a terminal, nothing otherwise: farm logs stay readable."""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._bar = None

    def start(self, total: int | None) -> None:
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, unit="frame", dynamic_ncols=True, file=sys.stderr, desc="ffbatch", smoothing=0.1
            )

    def update(self, frames: int) -> None:
        if self._bar is not None:
            self._bar.update(frames)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
