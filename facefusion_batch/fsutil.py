"""File-system details shared by everything that writes outputs atomically."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_mode: int | None = None


def default_file_mode() -> int:
    """The mode a plain `open()` would give a new file (0666 less the umask).

    `tempfile.mkstemp` creates files 0600; renamed into place they would stay
    unreadable to the other users of a render farm.
    """
    global _mode
    with _lock:
        if _mode is None:
            umask = os.umask(0o022)
            os.umask(umask)
            _mode = 0o666 & ~umask
        return _mode


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (model files run to hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomically(path: Path, data: Mapping[str, Any], *, sort_keys: bool = False) -> None:
    """Write JSON to a temporary file beside `path`, fsync it, then rename it into place.

    A reader sees the old file or the new one, never half of one.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=sort_keys)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
