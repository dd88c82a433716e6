"""File-system details shared by everything that writes: one atomic writer, modes, hashes.

Every file ffbatch writes (outputs, segments, reports, manifests, models, engines, caches)
goes through `AtomicFile`: it is written under a hidden temporary name beside its final
path (same file system), given the mode a plain `open()` would give it, synced, and renamed
into place only when complete. A reader sees the old file or the new one, never half of one;
on failure the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import random
import re
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from facefusion_batch.errors import InputError, OutputError, at_abrupt_exit

_lock = threading.Lock()
_mode: int | None = None
# the temporary files of AtomicFiles neither committed nor aborted: what a signal that lands
# between creating one and the code that would remove it leaves behind (`remove_live_temps`)
_live: set[Path] = set()
_NAMES, _NAME_CHARS = random.SystemRandom(), "abcdefghijklmnopqrstuvwxyz0123456789_"  # as mkstemp's
PARTIAL = ".partial-"  # what every temporary name holds: `.{stem}.partial-XXXXXXXX{suffix}`
NAME_MAX = 255  # bytes in one file name on the file systems renders land on


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


def share_as_usual(path: Path) -> None:
    """Give `path` (a file or a directory) the read (and, for a directory, search) bits the umask
    allows, if it lacks them: a store seeded from a private copy (0600 files, a 0700 directory)
    becomes readable by the group. Write bits are never added; a file of another user is left."""
    usual = default_file_mode()
    try:
        mode = path.stat().st_mode
        wanted = usual & 0o444
        if path.is_dir():
            wanted |= (usual & 0o444) >> 2  # search where read is allowed
        if mode & wanted != wanted:
            os.chmod(path, (mode & 0o7777) | wanted)
    except OSError:
        pass


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (model files run to hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def temp_prefix(path: Path) -> tuple[str, str]:
    """(prefix, suffix) of `path`'s temporary names: the stem is shortened so that the whole
    name stays within NAME_MAX bytes (a legal 254-byte output name must not fail at the end);
    the suffix is kept, so a container or image format is still told by its extension."""
    # file-system bytes (os.fsencode): a name that is not UTF-8 (café in Latin-1) keeps its bytes
    suffix = path.suffix if len(os.fsencode(path.suffix)) <= 32 else ""
    room = NAME_MAX - len(b".") - len(PARTIAL) - 8 - len(os.fsencode(suffix))
    stem = path.name[: len(path.name) - len(path.suffix)] if suffix else path.name
    encoded = os.fsencode(stem)[:room]
    return f".{os.fsdecode(encoded)}{PARTIAL}", suffix


class AtomicFile:
    """A file that appears at `path` only when `commit()` is called (or its `with` block ends
    without an error); `abort()` (or an error) removes the temporary file. Write to `temp`."""

    def __init__(self, path: Path, *, make_parent: bool = False) -> None:
        self.path = Path(path)
        parent = self.path.parent if str(self.path.parent) else Path(".")
        try:
            if make_parent:
                parent.mkdir(parents=True, exist_ok=True)
            prefix, suffix = temp_prefix(self.path)
            self.temp = _create_registered(parent, prefix, suffix)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        self.done = False

    def commit(self) -> None:
        """Sync the temporary file and rename it into place (then sync the directory)."""
        try:
            with open(self.temp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(self.temp, self.path)
        except OSError as exc:
            self.abort()
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        self.done = True
        _forget(self.temp)
        with contextlib.suppress(OSError):
            fd = os.open(self.temp.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def abort(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)
        _forget(self.temp)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self.done:
            self.commit()
        elif not self.done:
            self.abort()


def _create_registered(parent: Path, prefix: str, suffix: str) -> Path:
    """A new empty file `parent/{prefix}XXXXXXXX{suffix}` (as tempfile.mkstemp names it), its
    name registered in `_live` *before* it is created: a signal handler that runs at any point
    in between finds it registered, or finds no file to leave behind."""
    for _ in range(tempfile.TMP_MAX):
        temp = parent / f"{prefix}{''.join(_NAMES.choices(_NAME_CHARS, k=8))}{suffix}"
        with _lock:
            _live.add(temp)
        try:
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another file's name: not ours to remove
            _forget(temp)
            continue
        try:
            os.fchmod(fd, default_file_mode())
        finally:
            os.close(fd)
        return temp
    raise FileExistsError(errno.EEXIST, "no unused temporary name")


def _forget(temp: Path) -> None:
    with _lock:
        _live.discard(temp)


def remove_live_temps() -> None:
    """Remove the temporary files of AtomicFiles still open: the command is ending, and one of
    them survives only when a signal landed before the code that would remove it could run."""
    with _lock:
        temps = list(_live)
        _live.clear()
    for temp in temps:
        with contextlib.suppress(OSError):
            os.unlink(temp)


_held_locks: set[Path] = set()  # claim_output's lock files, for a second signal's abrupt exit


def _remove_on_abrupt_exit() -> None:
    remove_live_temps()
    for lock in list(_held_locks):
        with contextlib.suppress(OSError):
            os.unlink(lock)


at_abrupt_exit(_remove_on_abrupt_exit)


def write_bytes_atomically(path: Path, data: bytes, *, make_parent: bool = True) -> None:
    """`data` at `path`, atomically; a full disk or a vanished directory is an OutputError (exit 2)."""
    with AtomicFile(path, make_parent=make_parent) as out:
        try:
            out.temp.write_bytes(data)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_json_atomically(
    path: Path, data: Mapping[str, Any], *, sort_keys: bool = False, indent: int = 2
) -> None:
    """JSON at `path`, atomically (see AtomicFile)."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n"
    write_bytes_atomically(path, text.encode("utf-8"))


def ffmpeg_path(path: str | Path) -> str:
    """`path` as FFmpeg must be given a local file: absolute, so that a name such as `file:a.mp4`,
    `concat:x` or `pipe:0` is that file, never a protocol (FFmpeg reads `scheme:` as a URL)."""
    return os.path.abspath(os.fspath(path))


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file: by device and inode when both exist (hard links,
    symbolic links, `./x` against `/abs/x`), else by their resolved spelling."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def check_name_length(path: Path, what: str) -> None:
    """Refuse a file name longer than NAME_MAX bytes before any work (the OS would refuse it at
    the end, after the render)."""
    size = len(Path(path).name.encode(errors="surrogateescape"))
    if size > NAME_MAX:
        raise InputError(f"{what} {path}: the file name is {size} bytes; file systems allow {NAME_MAX}")


def lock_path(path: Path) -> Path:
    """`.{name}.lock` beside `path` (the name shortened, with a hash, to stay within NAME_MAX)."""
    path = Path(path)
    name = f".{path.name}.lock"
    if len(name.encode(errors="surrogateescape")) > NAME_MAX:
        tag = hashlib.blake2b(path.name.encode(errors="surrogateescape"), digest_size=4).hexdigest()
        keep = path.name.encode(errors="surrogateescape")[: NAME_MAX - 16]
        name = f".{keep.decode(errors='ignore')}-{tag}.lock"
    return path.parent / name


def stale_partials(path: Path) -> list[Path]:
    """The temporary files AtomicFile would make for `path` (`.{stem}.partial-XXXXXXXX{suffix}`)."""
    path = Path(path)
    prefix, suffix = temp_prefix(path)
    pattern = re.compile(re.escape(prefix) + r"[A-Za-z0-9_]{8}" + re.escape(suffix) + r"\Z")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        return sorted(parent / n for n in os.listdir(parent) if pattern.match(n))
    except OSError:
        return []


def _lock_file(lock: Path, *, wait: bool) -> int | None:
    """An open descriptor of `lock` holding its exclusive flock (waiting for the holder when
    `wait`, else None while another holds it); locked again when the holder before removed the
    file it had locked, so two processes never both hold "the" lock."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, default_file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextlib.contextmanager
def _holding(lock: Path, fd: int) -> Iterator[None]:
    """Keep the lock `fd` holds until the block ends, however it ends (a second signal's abrupt
    exit too, through _held_locks), then remove the file."""
    _held_locks.add(lock)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        _held_locks.discard(lock)
        os.close(fd)


@contextlib.contextmanager
def waiting_lock(lock: Path) -> Iterator[None]:
    """Hold the lock file `lock`, waiting for another process that holds it; the file is removed
    as the block ends, however it ends (a model store was left with a `.lock` for every file ever
    fetched, and an interrupted fetch's)."""
    fd = _lock_file(lock, wait=True)
    assert fd is not None
    with _holding(lock, fd):
        yield


@contextlib.contextmanager
def claim_output(path: Path, what: str = "output") -> Iterator[None]:
    """Hold `path` for the whole job: a second ffbatch process on the same output fails at once
    (exit 2) instead of racing it. Holding the claim, temporary files of a job that died
    (SIGKILL, power loss) are removed: no live writer can own them. The lock file goes at the end."""
    lock = lock_path(path)
    if not lock.parent.is_dir():
        raise OutputError(f"cannot write {path}: the directory {lock.parent} does not exist")
    try:
        fd = _lock_file(lock, wait=False)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    if fd is None:
        raise InputError(
            f"another ffbatch process is writing {what} {path} (it holds {lock}); "
            "wait for it to finish or stop it"
        )
    with _holding(lock, fd):
        for stale in stale_partials(path):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        yield
