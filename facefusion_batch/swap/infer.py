"""Running a learned model over many items: one call per chunk, inputs in the declared dtype.

A batch of frames can hold many faces (and pixel boost multiplies them by 4 or
16), so a stage's items are split into calls of at most `max_batch`, derived
from the crop size and an activation-memory budget rather than fixed.
"""

from __future__ import annotations

import numpy as np

from facefusion_batch.runtime.session import Session

_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def batch_limit(size: int, *, channels: int = 128, budget_mb: float = 1024.0) -> int:
    """Items per call so that two `channels`-deep fp32 activations at `size`² fit in the budget."""
    per_item = size * size * channels * 4 * 2
    return max(1, int(budget_mb * 2**20 // per_item))


def cast_feeds(session: Session, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each input in the dtype the graph declares (an fp16 model may take fp16 inputs)."""
    declared = {t.name: _DTYPES.get(t.dtype) for t in session.inputs}
    return {k: np.ascontiguousarray(v, declared.get(k) or v.dtype) for k, v in feeds.items()}


def run_chunked(session: Session, feeds: dict[str, np.ndarray], max_batch: int) -> list[np.ndarray]:
    """The model's outputs (in graph order, as float32) for all items, in calls of `max_batch`.

    Inputs whose first axis is not the item axis (such as codeformer's weight)
    go whole into every call: pass them in `feeds` with a leading axis of 1
    and they are broadcast.
    """
    n = max(len(v) for v in feeds.values())
    feeds = cast_feeds(session, feeds)
    names = [o.name for o in session.outputs]
    parts = []
    for i in range(0, n, max(1, max_batch)):
        chunk = {k: (v if len(v) != n else v[i : i + max_batch]) for k, v in feeds.items()}
        out = session.run(chunk)
        parts.append([np.asarray(out[name], np.float32) for name in names])
    return [np.concatenate([p[j] for p in parts]) for j in range(len(names))]
