"""Records of verified file states: what the model store writes beside a file it verified.

A file's record (its ``<file>.verified.json`` sidecar in the store, or its entry in
``$FFBATCH_HOME/external-hashes.json`` for a file in a user's directory) holds its sha256 and
the state it was hashed at: size, mtime_ns and inode. While all three hold the file is trusted
without reading it; other digests of the same state (FaceFusion's CRC32) are kept beside the
sha256 (`recorded_digest`, `record_digest`), so no run reads a large file twice.

Imports only paths and fsutil: the store and the FaceFusion checks both use it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from facefusion_batch import fsutil, paths

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".verified.json"
DIGESTS = ("crc32",)  # other digests kept in a file's record, valid for the state it was hashed at


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def external_memo_path() -> Path:
    return paths.ffbatch_home() / "external-hashes.json"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    fsutil.write_json_atomically(path, data, sort_keys=True)


def write_memo(path: Path, data: Mapping[str, Any]) -> None:
    """Write a record that only saves work later: a read-only store is not an error."""
    try:
        write_json_atomic(path, data)
    except OSError as exc:
        log.debug("cannot update %s: %s", path, exc)


def stamp_of(path: Path) -> dict[str, int]:
    """size, mtime_ns and inode: a file verified in this state is trusted while all three hold
    (a copy or an atomic replace changes the inode even when size and mtime are kept)."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def matches(record: Mapping[str, Any], stamp: Mapping[str, int]) -> bool:
    return all(record.get(k) == v for k, v in stamp.items())


def _record_of(path: Path) -> tuple[Path, str | None]:
    """Where `path`'s record lives: its sidecar when there is one (the store), else the memo of
    files in user directories under the path's key."""
    sidecar = sidecar_path(path)
    return (sidecar, None) if sidecar.is_file() else (external_memo_path(), str(Path(path).absolute()))


def recorded_digest(path: Path, kind: str) -> str | None:
    """A digest of `path` (one of `DIGESTS`) recorded while the file was as it is now (size,
    mtime_ns and inode), or None: then it must be computed (and given to `record_digest`)."""
    assert kind in DIGESTS
    where, key = _record_of(path)
    data = read_json(where) or {}
    entry = data.get(key) if key is not None else data
    try:
        fresh = isinstance(entry, dict) and matches(entry, stamp_of(path))
    except OSError:
        return None
    value = entry.get(kind) if fresh and isinstance(entry, dict) else None
    return value if isinstance(value, str) else None


def record_digest(path: Path, kind: str, value: str) -> None:
    """Keep `value` as `path`'s `kind` digest for its present state (only beside a record of the
    same state: a digest never outlives the file state its sha256 was verified at)."""
    assert kind in DIGESTS
    where, key = _record_of(path)
    data = read_json(where) or {}
    entry = data.get(key) if key is not None else data
    if not (isinstance(entry, dict) and matches(entry, stamp_of(path))):
        return
    entry[kind] = value
    write_memo(where, data)


def digests_in(info: Mapping[str, Any] | None) -> dict[str, str]:
    """The digests of `DIGESTS` a validator or a recipe computed while checking a file (a CRC32
    as 8 hex digits), to keep in its record so that no later check reads the file again."""
    out = {}
    for kind in DIGESTS:
        value = (info or {}).get(kind)
        if isinstance(value, str) and len(value) == 8 and all(c in "0123456789abcdef" for c in value):
            out[kind] = value
    return out


def trusted_sha256(path: Path) -> str:
    """`path`'s sha256: the one its record holds while the file is as it was hashed (size,
    mtime_ns, inode), else computed now. For keys of caches, not for verification."""
    where, key = _record_of(path)
    data = read_json(where) or {}
    entry = data.get(key) if key is not None else data
    sha = entry.get("sha256") if isinstance(entry, dict) else None
    if isinstance(sha, str) and isinstance(entry, dict) and matches(entry, stamp_of(path)):
        return sha
    return fsutil.sha256_file(path)
