"""The batch-size policy: one place that says how many frames a batch holds, how many items one
model call takes, and how many faces the device paints at once.

It turns the backend (CPU or GPU), the model's per-item cost (its input size and activation
depth, or on a GPU the cost the memory guard measured), the frame size and free memory into a
number; every stage asks it (stages get a policy from the pipeline build), the batcher asks it,
the memory guard asks it, and the TensorRT profiles are built from it.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_BATCH = 8  # frames per batch on the CPU: as fast as larger batches, and less memory
GPU_BATCH = 16  # frames per batch on a GPU when neither --batch-size nor --max-batch is given
# the pixels of 8 1080p frames: 4K gets batches of 2, 8K of 1 on the CPU; host memory stays bounded
CPU_BATCH_PIXELS = 8 * 1920 * 1080
# a 1080p frame as packed yuv420p planes ([1620, 1920]); a GPU batch holds `frames` of these
DEVICE_FRAME_PIXELS = 1920 * 1620
HOST_CALL_MB = 1024.0  # activation memory one host model call may take
# input bytes of one host call of a small model (the mesh): a call about the size of the CPU's
# cache runs the same per-image arithmetic with less traffic than one over a whole batch's faces
# (docs/development.md, "The classical path at 6 faces")
HOST_CACHE_CALL_BYTES = 1 << 20
# canvas pixels the torch set paints in one go: ~160 canvases of a 1080p face (320 x 320 px);
# the float intermediates of a chunk (~40 values a pixel) stay under ~3 GiB
PAINT_CHUNK_PIXELS = 1 << 24


@dataclass(frozen=True)
class BatchPolicy:
    """`frames`: frames per batch asked for (--batch-size, else the device's default);
    `on_gpu`: whether models and pixels run on a GPU; `max_batch`: most items of one model call
    on the device (--max-batch; None: free memory decides)."""

    frames: int = CPU_BATCH
    on_gpu: bool = False
    max_batch: int | None = None

    @staticmethod
    def default_frames(on_gpu: bool, max_batch: int | None = None) -> int:
        return (max_batch or GPU_BATCH) if on_gpu else CPU_BATCH

    def batch_pixels(self) -> int:
        """Most pixels one batch of frames may hold: on a GPU `frames` 1080p frames (larger frames
        proportionally fewer; the memory guard may cut the model calls further), on the CPU
        CPU_BATCH_PIXELS whatever the batch size, to bound host memory."""
        return max(1, self.frames) * DEVICE_FRAME_PIXELS if self.on_gpu else CPU_BATCH_PIXELS

    def shared_frames(self, total: int | None, workers: int) -> int:
        """Frames per batch for a clip of `total` frames that `workers` process at once: `frames`,
        or, when the whole clip fits in one batch a worker, its even share (10 frames over 2
        workers: 5 and 5, not 8 and 2 with one worker idle); `total` None (not known): `frames`.
        A batch's frames change no output (the ordered steps between batched calls carry every
        face track across batches)."""
        if not total or workers <= 1 or total > self.frames * workers:
            return self.frames
        return max(1, -(-total // workers))

    def frames_for(self, shape: tuple[int, ...]) -> int:
        """Frames of `shape` in one batch: `frames`, fewer for very large frames, never none."""
        if len(shape) < 2:
            return self.frames
        pixels = max(1, int(shape[0]) * int(shape[1]))
        return max(1, min(self.frames, self.batch_pixels() // pixels))

    def items_per_call(
        self, size: int, *, channels: int = 128, budget_mb: float = HOST_CALL_MB
    ) -> int | None:
        """Items (crops of `size`²) one model call takes: on the CPU as many as two
        `channels`-deep fp32 activations fit in `budget_mb`; on a GPU None, for the memory guard
        sizes each call from the cost it measured and the free memory."""
        if self.on_gpu:
            return None
        per_item = size * size * channels * 4 * 2
        return max(1, int(budget_mb * 2**20 // per_item))

    def cache_items(self, item_bytes: int) -> int | None:
        """Items of `item_bytes` of input one call of a small model takes: on the CPU as many as
        fit in HOST_CACHE_CALL_BYTES (at least one); on a GPU None (one call, the memory guard
        decides)."""
        if self.on_gpu:
            return None
        return max(1, HOST_CACHE_CALL_BYTES // max(1, item_bytes))

    def device_items(
        self,
        free_bytes: int,
        per_item_bytes: int,
        *,
        fixed_bytes: int = 0,
        fraction: float = 0.8,
        streams: int = 1,
    ) -> int:
        """Largest device batch whose measured cost fits in `fraction` of the free memory shared
        by `streams` (capped at `max_batch`). Never below 1: a batch of one fits or fails loudly."""
        budget = free_bytes * fraction / max(1, streams) - fixed_bytes
        size = int(budget // per_item_bytes) if per_item_bytes > 0 else (self.max_batch or 1 << 16)
        size = max(1, size)
        return min(size, self.max_batch) if self.max_batch is not None else size

    def profile_max(self) -> int:
        """The largest batch a TensorRT optimisation profile is built for."""
        return self.max_batch or GPU_BATCH

    @staticmethod
    def bucket(rows: int, limit: int | None = None) -> int:
        """The batch a call of `rows` items runs at on a GPU: 1, 2, 4, 8, then multiples of 16
        (never above `limit`). Face counts vary from batch to batch; with cuDNN's autotuner on,
        each new shape is tuned once, so few distinct shapes keep tuning out of the steady state."""
        if rows <= 0:
            return rows
        padded = 1 << (rows - 1).bit_length() if rows <= 8 else -(-rows // 16) * 16
        return max(rows, min(padded, limit)) if limit else padded

    @staticmethod
    def faces_per_paint(canvas: tuple[int, int], budget: int = PAINT_CHUNK_PIXELS) -> int:
        """Faces the device paints in one go on canvases of `canvas` (height, width)."""
        return max(1, budget // max(1, canvas[0] * canvas[1]))


HOST = BatchPolicy()
