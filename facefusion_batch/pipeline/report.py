"""What a job did, measured: frames, faces, per-stage time, latency, memory."""

from __future__ import annotations

import logging
import resource
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024.0 if sys.platform != "darwin" else peak / (1024.0 * 1024.0)


@dataclass
class RenderReport:
    input: str
    output: str
    backend: str
    frames_in: int = 0
    frames_out: int = 0
    faces_found: int = 0
    faces_swapped: int = 0
    frames_with_faces: int = 0
    # detected faces not swapped, by reason (FacePipeline: each stage's drop_reason); they add up
    # to faces_found - faces_swapped
    faces_not_swapped: dict[str, int] = field(default_factory=dict)
    # swapped faces by the default swap's do-no-harm decision (swap/classical/fit.py): full, or
    # own_eyes_<reason> (the face kept its own eyes: eyes_closed, eyes_wider, lids, gaze, pose, ...)
    swap_decisions: dict[str, int] = field(default_factory=dict)
    frames_replaced: int = 0  # --on-decode-error skip: frames not decoded, filled with the last good one
    frames_concealed: int = 0  # --on-decode-error skip: frames decoded from damaged data, kept as decoded
    clock_discontinuities: int = 0  # MPEG-TS/PS clock jumps mid-clip, each part moved after the one before
    batches: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    batch_latency_s: list[float] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    audio: str = ""
    frames_as: str = "bgr24"  # how frames travel: bgr24, or the decoder's yuv420p planes (GPU backends)
    encoder: str = ""
    models: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)  # GPU backends: NVML, device time, OOM retries
    # face tracks, swap toggles, and those where the face crossed the frame's edge
    tracking: dict[str, int] = field(default_factory=dict)
    status: str = "ok"
    message: str = ""

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        lat = np.asarray(self.batch_latency_s or [0.0])
        sizes = np.asarray(self.batch_sizes or [0])
        data.pop("batch_latency_s")
        data.pop("batch_sizes")
        data["fps"] = round(self.frames_out / self.wall_seconds, 3) if self.wall_seconds > 0 else 0.0
        data["batch_latency_p50_s"] = round(float(np.percentile(lat, 50)), 4)
        data["batch_latency_p99_s"] = round(float(np.percentile(lat, 99)), 4)
        data["batch_size_mean"] = round(float(sizes.mean()), 2)
        data["batch_size_max"] = int(sizes.max())
        data["stage_seconds"] = {k: round(v, 4) for k, v in sorted(self.stage_seconds.items())}
        data["wall_seconds"] = round(self.wall_seconds, 3)
        data["peak_rss_mb"] = round(self.peak_rss_mb, 1)
        return data


class WarningLog(logging.Handler):
    """The warnings a job logs, kept for its report (a farm reads the report, not the log)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a malformed log call must not fail the job
            self.handleError(record)

    def __enter__(self) -> WarningLog:
        logging.getLogger("ffbatch").addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("ffbatch").removeHandler(self)
