"""File-system details shared by everything that writes outputs atomically."""

from __future__ import annotations

import os
import threading

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
