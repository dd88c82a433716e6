"""Saved progress of a chunked render: the work directory, its manifest and its lock.

A chunked render of `out.mp4` keeps its state in `.out.mp4.ffbatch/` beside the
output: one video-only segment per chunk (`00000000-00001500.mp4`, written
atomically) and `manifest.json`, rewritten atomically after every finished
segment:

    {"format": "ffbatch-manifest", "version": 1, "input": ..., "output": ...,
     "settings_digest": ..., "chunk_frames": 1500, "frame_count": 7000,
     "segments": {"0:1500": {"file": "00000000-00001500.mp4", "sha256": ..., "bytes": ...}}}

A re-run with the same settings keeps every segment whose sha256 still matches
and renders the rest; other settings (or `--force`) start over. The digest
covers what changes pixels (see `settings_digest`), not batch sizes or workers.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from facefusion_batch import RENDER_REVISION, __version__, fsutil
from facefusion_batch.config import DeviceSettings, RenderSettings
from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.video.decode.probe import sequence_numbers
from facefusion_batch.video.encode.sequence import is_sequence_pattern

log = logging.getLogger("ffbatch")

MANIFEST = "manifest.json"
FORMAT = "ffbatch-manifest"
VERSION = 1
SEGMENT_SUFFIX = ".mp4"  # ISO-BMFF keeps the input's time base exactly (Matroska rounds to 1 ms)

# RenderSettings fields that do not change a single output pixel or timestamp.
_NOT_IN_DIGEST = frozenset(
    {
        "input",
        "output",
        "sources",  # hashed by content instead
        "batch_size",
        "batch_window_ms",
        "workers",
        "threads",
        "models_dir",
        "report",
        "matte_output",
        "face_only_output",
        "overwrite",
        "quiet",
        "frames",
        "chunk_frames",
        "force",
        "reuse_across_versions",
        "fail_if_no_faces",
        "fail_on_truncated",
        "device",  # only what of it changes pixels: DEVICE_IN_DIGEST
    }
)
# Of the device settings, what changes pixels: the backend as chosen (torch and onnxruntime sum in
# another order) and the precision. Not the streams, batch sizes, GPU index or the decoder
# (H.264/HEVC/AV1 decoding is bit-exact: NVDEC gives the same pictures).
DEVICE_IN_DIGEST = ("backend", "precision")
# On the cuda backend also its runtime (onnxruntime's kernels sum in another order than torch's);
# entered only when it is not the default, so digests made before the option are kept.
DEFAULT_GPU_RUNTIME = DeviceSettings.gpu_runtime
_FINGERPRINT_BLOCK = 4 << 20


sha256_file = fsutil.sha256_file
_fingerprints: dict[tuple[int, int, int, int], str] = {}  # (dev, inode, size, mtime_ns) → digest


def file_fingerprint(path: Path) -> str:
    """blake2b of every byte (and the size): an edit in place anywhere changes it, the path and
    the mtime do not (a farm node that mounts the input elsewhere agrees). Read in 4 MiB blocks;
    remembered per run by inode, size and mtime, so a job hashes its input once. An image
    sequence by its files' numbers and sizes: a farm task reads only its own frames."""
    numbers = sequence_numbers(path) if is_sequence_pattern(path) else None
    if numbers is not None:
        sizes = [f"{n}:{(path.parent / (path.name % n)).stat().st_size}" for n in numbers]
        return hashlib.blake2b(" ".join(sizes).encode(), digest_size=32).hexdigest()
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _fingerprints:
        digest = hashlib.blake2b(str(st.st_size).encode(), digest_size=32)
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(_FINGERPRINT_BLOCK), b""):
                digest.update(block)
        _fingerprints[key] = digest.hexdigest()
    return _fingerprints[key]


def settings_digest(settings: RenderSettings, *, code: bool = True) -> str:
    """What decides the output's pixels and timing: the input, the source and reference photos
    (by content, never by how their paths are spelled), every rendering setting, and (`code`)
    the ffbatch version and its RENDER_REVISION. 16 hex digits."""
    fields = {k: v for k, v in asdict(settings).items() if k not in _NOT_IN_DIGEST}
    fields["device"] = {k: getattr(settings.device, k) for k in DEVICE_IN_DIGEST}
    if settings.device.backend == "cuda" and settings.device.gpu_runtime != DEFAULT_GPU_RUNTIME:
        fields["device"]["gpu_runtime"] = settings.device.gpu_runtime
    reference = fields.get("swap", {}).get("reference") if isinstance(fields.get("swap"), dict) else None
    if reference is not None:
        image = reference.get("image")
        reference["image"] = sha256_file(Path(image)) if image is not None else None
        reference["video"] = None  # the input itself, fingerprinted below
    if isinstance(fields.get("swap"), dict) and fields["swap"].get("mapping"):
        fields["swap"]["mapping"] = [
            [sha256_file(Path(p)) for p in pair] for pair in fields["swap"]["mapping"]
        ]
    data = {
        **({"ffbatch": __version__, "render_revision": RENDER_REVISION} if code else {}),
        "input": file_fingerprint(Path(settings.input)),
        "sources": [sha256_file(Path(s)) for s in settings.sources],
        "settings": fields,
    }
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def work_dir_for(output: Path) -> Path:
    """`.{name}.ffbatch/` beside the output (hidden, on the same file system for the renames)."""
    output = Path(output)
    return output.parent / f".{output.name}.ffbatch"


def segment_name(start: int, end: int, suffix: str = SEGMENT_SUFFIX) -> str:
    """`suffix`: video/encode/formats.segment_suffix(codec), .mov for the codecs .mp4 cannot hold (ProRes)."""
    return f"{start:08d}-{end:08d}{suffix}"


def range_key(start: int, end: int) -> str:
    return f"{start}:{end}"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fsutil.write_json_atomically(path, data, sort_keys=True)


@dataclass
class Manifest:
    work_dir: Path
    input: str
    output: str
    settings_digest: str
    chunk_frames: int
    frame_count: int
    segments: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings_alone: str = ""  # the digest without the code terms (farm/reuse.py)
    rendered_by: str = ""  # the ffbatch version and render revision that rendered the segments

    @property
    def path(self) -> Path:
        return self.work_dir / MANIFEST

    def matches(self, other: Manifest) -> bool:
        return (self.settings_digest, self.chunk_frames, self.frame_count) == (
            other.settings_digest,
            other.chunk_frames,
            other.frame_count,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "input": self.input,
            "output": self.output,
            "settings_digest": self.settings_digest,
            "chunk_frames": self.chunk_frames,
            "frame_count": self.frame_count,
            "segments": self.segments,
            "settings_alone": self.settings_alone,
            "rendered_by": self.rendered_by,
            "updated": _now(),
        }

    @classmethod
    def read(cls, work_dir: Path) -> Manifest | None:
        try:
            data = json.loads((work_dir / MANIFEST).read_text(encoding="utf-8"))
            if data.get("format") != FORMAT or data.get("version") != VERSION:
                return None
            return cls(
                work_dir=work_dir,
                input=data["input"],
                output=data["output"],
                settings_digest=data["settings_digest"],
                chunk_frames=int(data["chunk_frames"]),
                frame_count=int(data["frame_count"]),
                segments=dict(data.get("segments") or {}),
                settings_alone=str(data.get("settings_alone") or ""),
                rendered_by=str(data.get("rendered_by") or ""),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def save(self) -> None:
        write_json_atomic(self.path, self.to_json())

    def record(self, start: int, end: int, path: Path) -> None:
        """A segment is finished (already renamed into place): remember it, durably."""
        self.segments[range_key(start, end)] = {
            "file": path.name,
            "frames": end - start,
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
            "finished": _now(),
        }
        self.save()

    def verified(self, start: int, end: int) -> Path | None:
        """The segment file for this range if recorded and its sha256 still matches."""
        entry = self.segments.get(range_key(start, end))
        if not entry:
            return None
        path = self.work_dir / entry.get("file", "")
        try:
            if path.stat().st_size == entry.get("bytes") and sha256_file(path) == entry.get("sha256"):
                return path
        except OSError:
            pass
        log.warning("%s: segment %s is missing or changed; rendering it again", self.output, path.name)
        self.segments.pop(range_key(start, end), None)
        with contextlib.suppress(OSError):
            path.unlink()  # so that nothing adopts it as a finished segment either
        return None


def open_manifest(
    wanted: Manifest, force: bool, across_versions: Callable[[str, str], bool] | None = None
) -> Manifest:
    """The saved manifest if it belongs to the same job, else a fresh one (old work removed).
    Saved by another ffbatch version or render revision with the same settings, its segments
    are kept when `across_versions(rendered_by)` says so (--reuse-across-versions; it warns)."""
    work = wanted.work_dir
    saved = None if force else Manifest.read(work)
    if saved is not None and saved.matches(wanted):
        return saved
    if (
        saved is not None
        and across_versions is not None
        and saved.settings_alone
        and (saved.settings_alone, saved.chunk_frames, saved.frame_count)
        == (wanted.settings_alone, wanted.chunk_frames, wanted.frame_count)
    ):
        what = f"the saved progress in {work} ({len(saved.segments)} segments)"
        if across_versions(what, saved.rendered_by):
            return saved
        clear_work_dir(work)
        wanted.save()
        return wanted
    if force:
        log.info("%s: --force: discarding any saved progress", wanted.output)
        clear_work_dir(work)
    elif saved is not None:
        log.info(
            "%s: the settings or the input changed since the saved progress; starting over", wanted.output
        )
        clear_work_dir(work)
    # else a fresh job: segments already there (a farm's `render --frames`) are checked one by
    # one by their tags and adopted if they belong to this job
    wanted.save()
    return wanted


def clear_work_dir(work: Path) -> None:
    """Remove segments, partial files and the manifest, keeping the directory (and its lock)."""
    for entry in work.iterdir():
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()


def remove_stale_partials(work: Path) -> None:
    """Temporary files of a render that was killed outright (SIGKILL, power loss)."""
    for entry in work.glob(".*.partial-*"):
        with contextlib.suppress(OSError):
            entry.unlink()


LOCK = ".lock"


@contextlib.contextmanager
def job_lock(work: Path, output: Path) -> Iterator[None]:
    """One process per output at a time: a second one fails fast instead of racing."""
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, a read-only folder: the user's to fix
        raise OutputError(
            f"cannot use the work directory {work} for {output}: {exc.strerror or exc}"
            + (" (a file has its name; move it away)" if work.exists() and not work.is_dir() else "")
        ) from None
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(work / LOCK, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(
                f"another ffbatch process is rendering {output} (it holds {work / LOCK}); "
                "wait for it to finish or stop it"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def remove_work_dir(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
