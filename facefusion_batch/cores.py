"""How many cores this process may use: one place for every thread pool's default."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores in this process's affinity mask (what a farm's cpuset or `taskset` gives a job),
    else the machine's count: a job pinned to 4 cores of a 64-core node sizes its pools to 4."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity masks on this platform
        return max(1, os.cpu_count() or 1)
