"""How many items one model call takes (the batch-size policy lives here)."""

from __future__ import annotations


def batch_limit(size: int, *, channels: int = 128, budget_mb: float = 1024.0) -> int:
    """Items per call so that two `channels`-deep fp32 activations at `size`² fit in the budget."""
    per_item = size * size * channels * 4 * 2
    return max(1, int(budget_mb * 2**20 // per_item))
