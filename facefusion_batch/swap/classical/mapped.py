"""`--map` with the classical swap: each mapped person's faces painted from that person's source.

The classical swapper holds one person's source photos (it picks among them by head pose), so
a clip with several mapped people gets one swapper per person; each paints its person's faces
of the whole batch in one call. No model runs here (the classical paint is kernel work).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.timing import StageTimer


class PersonRouter:
    """A stage: faces of person p (the table's `person` column) to swapper p."""

    name = "swap"

    def __init__(self, swappers: Sequence) -> None:
        if not swappers:
            raise ValueError("a person router needs at least one swapper")
        self.swappers = list(swappers)
        self._timer = StageTimer()

    @property
    def timer(self) -> StageTimer:
        return self._timer

    @timer.setter
    def timer(self, timer: StageTimer) -> None:
        self._timer = timer
        for swapper in self.swappers:
            if hasattr(swapper, "timer"):
                swapper.timer = timer

    def _each(self, method: str, *args) -> None:
        for swapper in self.swappers:  # the ordered steps inside each swapper (FacePipeline)
            if hasattr(swapper, method):
                getattr(swapper, method)(*args)

    def reset(self) -> None:
        self._each("reset")

    def release(self, seq: int | None) -> None:
        self._each("release", seq)

    def abort(self) -> None:
        self._each("abort")

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if table.person is None:
            raise ValueError("per-person sources need the table's `person` column (AssignPersons)")
        for p, swapper in enumerate(self.swappers):
            mine = np.flatnonzero(table.person == p)
            if not len(mine):
                continue
            if hasattr(swapper, "timer"):
                swapper(k, frames, table.select(mine))
            else:
                with self._timer.stage(self.name):
                    swapper(k, frames, table.select(mine))
        return table
