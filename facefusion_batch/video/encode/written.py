"""What a finished, tagged output held when it was written: its size and sha256, recorded in the
ffbatch home (`$FFBATCH_HOME/written/`, keyed by the file's absolute path, so nothing foreign
lands beside a user's outputs), so that reuse trusts content, not a packet count.

A farm segment, a many-input output or a compositing video is reused ("up to date") only while
its bytes are the ones written: a copy that broke off, bytes flipped on a disk or in transfer,
an edit in place, or a file this machine has no record of (moved, or written on another farm
node with its own home) all make it render again, with a warning naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from facefusion_batch import fsutil, paths


def record_path(path: Path) -> Path:
    """Where the record of `path` is kept (its absolute path's digest, in the ffbatch home)."""
    key = hashlib.blake2b(os.fsencode(os.path.realpath(path)), digest_size=16).hexdigest()
    return paths.ffbatch_home() / "written" / f"{key}.json"


def record_written(path: Path) -> None:
    """Note `path`'s size and sha256 (called once it is renamed into place)."""
    path = Path(path)
    data = {"path": os.path.realpath(path), "bytes": path.stat().st_size, "sha256": fsutil.sha256_file(path)}
    record = record_path(path)
    record.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_json_atomically(record, data, sort_keys=True)


def forget_written(path: Path) -> None:
    """Remove the record of `path` (the file itself is being removed or replaced)."""
    with contextlib.suppress(OSError):
        os.unlink(record_path(path))


def written_problem(path: Path) -> str:
    """'' when `path` still holds the bytes recorded when it was written; else what is wrong."""
    path = Path(path)
    try:
        data = json.loads(record_path(path).read_text(encoding="utf-8"))
        size, sha256 = int(data["bytes"]), str(data["sha256"])
    except FileNotFoundError:
        return "this machine has no record of its sha256 (written elsewhere, or moved here)"
    except (OSError, ValueError, KeyError, TypeError):
        return f"its record {record_path(path)} is unreadable"
    try:
        got = path.stat().st_size
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if got != size:
        return f"its size is {got} bytes, {size} were written"
    if fsutil.sha256_file(path) != sha256:
        return "its sha256 does not match the one recorded when it was written (changed or damaged)"
    return ""
