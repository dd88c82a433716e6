"""`ffbatch render ... --ray auto|ADDRESS`: the segments of every input as tasks on Ray actors.

The driver (the `ffbatch` process) cuts each input into chunks exactly as a
chunked local render does (same work directory, manifest and segment names, so
either can finish the other's job), then hands the missing segments to a pool
of actors. Each actor loads the models and prepares the source faces once, then
renders segment after segment: one actor per GPU (`num_gpus=1`), or CPU actors
when the cluster has no GPUs. When an actor dies (its node went away, it was
killed), the segment it held goes back to the queue and another actor renders
it; an error in the input itself fails that input only. The driver counts the
frames of every finished segment (the progress bar), records it in the
manifest, and joins an input's segments with its audio as soon as they are
all there.

The compositing outputs (`--matte-output`, `--face-only-output`) are staged in
the work directory as a chunked render stages them (farm/chunk_compositing.py):
each actor writes its segment's sequence frames and video piece there, and the
driver moves them to their names, or joins them, after the output's join.

Every host must see the inputs, the sources and the output directory at the
same paths (a shared file system): actors write the segments straight into the
work directory. Ray is imported only here, and only when `--ray` is given.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from facefusion_batch.config import RenderSettings, validate, validate_options
from facefusion_batch.errors import (
    EXIT_OK,
    EXIT_USAGE,
    FfbatchError,
    InputError,
    Interrupted,
)
from facefusion_batch.farm.chunk_compositing import prepare_staged, publish_staged, segment_settings
from facefusion_batch.farm.concat import join_segments
from facefusion_batch.farm.manifest import (
    job_lock,
    remove_stale_partials,
    remove_work_dir,
    segment_name,
    settings_digest,
    work_dir_for,
    write_json_atomic,
)
from facefusion_batch.farm.outputs import is_done, output_tags
from facefusion_batch.farm.resume import open_job_manifest, plan_segments
from facefusion_batch.farm.segment import segment_tags, write_segment
from facefusion_batch.pipeline.run import JobReport, Renderer
from facefusion_batch.progress import Progress
from facefusion_batch.settings.types import PlanSettings
from facefusion_batch.stdout import say
from facefusion_batch.timing import StageTimer
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.decode.segments import frame_index
from facefusion_batch.video.encode.formats import segment_suffix

log = logging.getLogger("ffbatch")

MAX_ATTEMPTS = 3  # a segment whose actor died is tried this many times in all
DEFAULT_CHUNK = PlanSettings().chunk_frames
MIN_CHUNK = 25
START_TIMEOUT = 600.0  # seconds with no actor started and none rendering before the job fails


def import_ray():
    try:
        import ray
    except ImportError:
        raise InputError(
            "--ray needs Ray, which is not installed here: pip install 'facefusion-batch[ray]' "
            "(or pip install ray)"
        ) from None
    return ray


# -- the actor ---------------------------------------------------------------------------------------


class SegmentWorker:
    """Models loaded once per actor; renders one segment per call (wrapped by `ray.remote`)."""

    def __init__(self, settings: RenderSettings, threads: int) -> None:
        """`settings` carry the device (backend, --streams, --max-batch, --precision) as the
        driver resolved it for the actors."""
        logging.getLogger("ffbatch").setLevel(logging.WARNING)
        if settings.threads is None:
            settings = replace(settings, threads=threads)
        self.renderer = self._load(settings)
        self.host = socket.gethostname()
        self._indexes: dict[str, Any] = {}

    def _load(self, settings: RenderSettings):

        return Renderer.load(settings)

    def where(self) -> str:
        return f"{self.host}:{os.getpid()}"

    def render(self, settings: RenderSettings, start: int, end: int, path: str, tags: dict) -> dict:

        started = time.perf_counter()
        settings = replace(settings, threads=self.renderer.settings.threads)
        if not self.renderer.serves(settings):  # e.g. a per-input reference face
            self.renderer = self._load(settings)
        info = probe(settings.input)
        key = str(settings.input)
        if key not in self._indexes:
            self._indexes = {key: frame_index(settings.input, info.video_stream_index)}
        report = JobReport(input=key, output=path, backend="")
        timer = StageTimer()
        write_segment(
            self.renderer, settings, info, self._indexes[key], (start, end), Path(path), tags, report, timer
        )
        return {
            "frames": report.frames_out,
            "faces_swapped": report.faces_swapped,
            "faces_found": report.faces_found,
            "frames_with_faces": report.frames_with_faces,
            "faces_not_swapped": dict(report.faces_not_swapped),
            "swap_decisions": dict(report.swap_decisions),
            "seconds": time.perf_counter() - started,
            "worker": self.where(),
            "stage_seconds": dict(timer.seconds),
        }


# -- the driver --------------------------------------------------------------------------------------


@dataclass
class SegmentTask:
    job: int
    frames: tuple[int, int]
    path: Path
    attempts: int = 0


@dataclass
class InputJob:
    settings: RenderSettings
    status: str = "pending"  # pending | rendering | ok | skipped | failed
    message: str = ""
    manifest: Any = None
    info: Any = None
    done: dict[tuple[int, int], Path] = field(default_factory=dict)
    missing: list[tuple[int, int]] = field(default_factory=list)
    tags_for: Callable[[int, int], dict] | None = None
    frames: int = 0
    faces_swapped: int = 0
    faces_found: int = 0
    frames_with_faces: int = 0
    faces_not_swapped: dict[str, int] = field(default_factory=dict)  # by reason, summed over segments
    swap_decisions: dict[str, int] = field(default_factory=dict)  # swapped faces by decision, summed
    started: float = 0.0
    join_seconds: float = 0.0
    retries: int = 0
    workers: set[str] = field(default_factory=set)
    total: int = 0
    reused: int = 0

    def summary(self) -> dict[str, Any]:
        s = self.settings
        return {
            "input": str(s.input),
            "output": str(s.output),
            "status": self.status,
            "message": self.message,
            "frames_out": self.frames,
            "faces_found": self.faces_found,
            "faces_swapped": self.faces_swapped,
            "frames_with_faces": self.frames_with_faces,
            "faces_not_swapped": dict(sorted(self.faces_not_swapped.items())),
            "swap_decisions": dict(sorted(self.swap_decisions.items())),
            "clock_discontinuities": len(self.info.clock.discontinuities) if self.info is not None else 0,
            "segments": {
                "total": self.total,
                "reused": self.reused,
                "rendered": len(self.done) - self.reused,
            },
            "retries": self.retries,
            "workers": sorted(self.workers),
            "join_seconds": round(self.join_seconds, 3),
        }


RAY_PORTS = {"ray": 10001, "": 6379}  # Ray Client's port (ray://), the head's GCS port
ANSWER_SECONDS = 3.0  # a head that does not take a connection in this long is not there


def check_address(address: str) -> None:
    """Exit 2 at once, naming the address, when nothing takes a TCP connection there: Ray itself
    waits about 190 s for an unreachable head before it gives up. `auto` and `local` are Ray's."""
    if address in ("auto", "local"):
        return
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    host, port_text = rest.rstrip("/"), ""
    if host.startswith("["):  # [IPv6]:port
        host, _, tail = host[1:].partition("]")
        port_text = tail.removeprefix(":")
    elif host.count(":") == 1:
        host, port_text = host.split(":")
    try:
        port = int(port_text) if port_text else RAY_PORTS.get(scheme, 6379)
    except ValueError:
        raise InputError(f"--ray {address}: write HOST:PORT, ray://HOST:PORT, auto or local") from None
    if not host or not 0 < port < 65536:
        raise InputError(f"--ray {address}: write HOST:PORT, ray://HOST:PORT, auto or local")
    try:
        with socket.create_connection((host, port), timeout=ANSWER_SECONDS):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise InputError(
            f"--ray {address}: no Ray cluster answers at {host}:{port} ({reason}); start its head there "
            "(ray start --head) or give --ray auto or local"
        ) from None


def connect(address: str, ray) -> bool:
    """Connect to (or start) Ray; True when this process started it and must shut it down."""
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address == "auto":
        try:
            ray.init(address="auto", log_to_driver=False, logging_level=logging.WARNING)
            log.info("ray: connected to the running cluster")
        except ConnectionError:
            log.info("ray: no running cluster found; starting a local one on this machine")
            ray.init(**quiet)
        return True
    if address == "local":
        ray.init(**quiet)
        return True
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise InputError(f"--ray {address}: cannot connect to a Ray cluster there ({exc})") from None
    return True


def plan_pool(ray, workers: int | None) -> tuple[int, dict[str, float], int]:
    """How many actors, the resources of each, and onnxruntime threads per actor."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    cpus = max(1, int(resources.get("CPU", 1)))
    if gpus:
        count = workers or gpus
        per_cpu = max(1, cpus // count)
        return count, {"num_gpus": 1, "num_cpus": min(per_cpu, 2)}, per_cpu
    count = workers or max(1, cpus // 2)
    per_cpu = max(1, cpus // count)
    return count, {"num_cpus": per_cpu}, per_cpu


def render_with_ray(
    jobs: list[RenderSettings],
    *,
    address: str,
    workers: int | None = None,
    report_path: Path | None = None,
    batch: bool = False,
    on_dispatch: Callable[[Any, SegmentTask], None] | None = None,
    start_timeout: float = START_TIMEOUT,
) -> int:
    """Render `jobs` on Ray; returns the exit status (2 if any input failed).

    The jobs' device settings go to the actors. An actor with a GPU sees only its own, as
    device 0 (Ray sets CUDA_VISIBLE_DEVICES); `--backend auto` resolved to the CPU here (a driver
    without a GPU) renders on the cluster's GPUs when it has some.

    `batch`: several inputs (`--output-dir`): up-to-date outputs are skipped, a failed input does
    not stop the others. Otherwise one input, whose failure raises. `on_dispatch(actor, task)`
    is called as each segment is handed out (progress displays, tests). `start_timeout`: how
    long to wait when nothing but actors' starts is left to wait for.
    """
    if workers is not None and workers < 1:
        raise InputError(f"--ray-workers must be at least 1 (got {workers})")
    check_address(address)  # before Ray waits minutes on it
    ray = import_ray()
    validate_options(jobs[0])
    started = time.perf_counter()
    entries = [InputJob(settings=replace(j, report=None)) for j in jobs]
    with contextlib.ExitStack() as stack:
        shutdown = connect(address, ray)
        if shutdown:
            stack.callback(ray.shutdown)
        count, resources, threads = plan_pool(ray, workers)
        if resources.get("num_gpus"):
            entries = [replace(e, settings=on_actor_gpu(e.settings)) for e in entries]
        tasks: deque[SegmentTask] = deque()
        for number, entry in enumerate(entries):
            try:  # up to date but not its compositing outputs: that input fails, as a local batch's
                if batch and is_done(entry.settings):
                    entry.status, entry.message = "skipped", "up to date"
                    log.info("%s is up to date; skipping it", entry.settings.output)
                    continue
                _prepare(entry, stack, count)
            except FfbatchError as exc:
                if not batch:
                    raise
                entry.status, entry.message = "failed", str(exc)
                log.error("%s: %s", entry.settings.input, exc)
                continue
            for frames in entry.missing:
                path = entry.manifest.work_dir / _name(frames, entry.settings)
                tasks.append(SegmentTask(number, frames, path))
        total_frames = sum(b - a for t in tasks for a, b in [t.frames])
        log.info(
            "ray: %d segments (%d frames) of %d input(s) on %d actor(s) %s",
            len(tasks),
            total_frames,
            len(entries),
            count,
            resources,
        )
        actors = []
        if tasks:
            remote = ray.remote(max_restarts=0, max_task_retries=0)(SegmentWorker)
            template = entries[tasks[0].job].settings
            actors = [
                remote.options(**resources).remote(template, threads) for _ in range(min(count, len(tasks)))
            ]

        started_actors: set[int] = set()
        try:
            with Progress(enabled=not jobs[0].quiet) as progress:
                progress.start(total_frames)
                _schedule(
                    ray, actors, tasks, entries, progress, on_dispatch, batch, started_actors, start_timeout
                )
        except KeyboardInterrupt:
            raise Interrupted(
                "interrupted (SIGINT); finished segments are kept: run the same command to resume"
            ) from None
        finally:  # the never-started first: a started one's freed CPU could go to one of them
            for number in sorted(range(len(actors)), key=lambda n: n in started_actors):
                with contextlib.suppress(Exception):
                    ray.kill(actors[number])
        for entry in entries:
            if entry.status == "rendering":
                _join(entry, output_tags(entry.settings) if batch else None, batch)
    return _finish(entries, report_path, time.perf_counter() - started, batch)


def on_actor_gpu(settings: RenderSettings) -> RenderSettings:
    """The settings an actor with one GPU renders with: that GPU as device 0; `--backend auto`
    chosen on a driver without a GPU becomes cuda, the cluster's GPUs (said in the log)."""
    device = replace(settings.device, gpu=0)
    if device.auto and device.backend == "cpu":
        log.info("ray: --backend auto renders on the cluster's GPUs (cuda)")
        device = replace(device, backend="cuda", precision="auto", streams=2)
    return replace(settings, device=device)


def _name(frames: tuple[int, int], settings: RenderSettings) -> str:

    return segment_name(*frames, segment_suffix(settings.encoder.codec))


def _prepare(entry: InputJob, stack: contextlib.ExitStack, actors: int) -> None:
    """Validate, probe, number the frames, open the manifest, find what is missing."""

    settings = entry.settings
    validate(settings)
    info = probe(settings.input)
    index = frame_index(settings.input, info.video_stream_index)
    chunk = settings.chunk_frames or min(DEFAULT_CHUNK, max(MIN_CHUNK, -(-index.count // actors)))
    digest = settings_digest(settings)
    output = Path(settings.output)
    work = work_dir_for(output)
    stack.enter_context(job_lock(work, output))
    remove_stale_partials(work)
    prepare_staged(settings, work)
    manifest = open_job_manifest(settings, output, work, digest, chunk, index.count)
    done, missing = plan_segments(settings, index, chunk, manifest, digest)
    entry.info, entry.manifest, entry.done, entry.missing = info, manifest, done, missing
    entry.total, entry.reused = len(done) + len(missing), len(done)
    entry.tags_for = lambda a, b: segment_tags(settings, a, b, index.count, digest)
    entry.status = "rendering"
    entry.started = time.perf_counter()
    if done:
        log.info(
            "%s: %d of %d segments are done already", settings.input, len(done), len(done) + len(missing)
        )


def _schedule(
    ray,
    actors,
    tasks: deque,
    entries: list[InputJob],
    progress,
    on_dispatch,
    batch: bool,
    started: set[int],
    start_timeout: float,
) -> None:
    """Hand segments to actors as they become free, retrying those whose actor died.

    A segment goes only to an actor that has started (answered `where`): one whose creation
    the cluster never schedules (no free CPU or GPU for it, a leaked lease) holds no segment,
    and the others render everything. When nothing but actors' starts is left to wait for and
    none comes in `start_timeout` seconds, the job fails instead of waiting forever. `started`
    gets the numbers of the actors that started."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

    died = (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)
    idle: list = []
    starting: dict[Any, int] = {actor.where.remote(): number for number, actor in enumerate(actors)}
    running: dict[Any, tuple[int, SegmentTask]] = {}
    last_death = ""
    waiting_since = time.monotonic()
    while tasks or running:
        while tasks and idle:
            task = tasks.popleft()
            entry = entries[task.job]
            if entry.status != "rendering":
                continue  # its input failed meanwhile
            actor = idle.pop()
            number = actors.index(actor)
            start, end = task.frames
            task.attempts += 1
            settings = segment_settings(entry.settings, entry.manifest.work_dir, start, end)
            ref = actor.render.remote(settings, start, end, str(task.path), entry.tags_for(start, end))
            running[ref] = (number, task)
            if on_dispatch:
                on_dispatch(actor, task)
        if not running and not starting:
            if tasks:
                why = f" (the last: {last_death})" if last_death else ""
                raise FfbatchError(
                    f"every Ray worker died{why}; finished segments are kept, run again to resume"
                )
            break
        timeout = None
        if not running and not idle:  # nothing can finish but an actor's start
            timeout = max(0.0, start_timeout - (time.monotonic() - waiting_since))
        ready, _ = ray.wait([*running, *starting], num_returns=1, timeout=timeout)
        if not ready:
            raise FfbatchError(
                f"no Ray worker started within {start_timeout:.0f} s: the cluster has no free "
                "CPU or GPU for one ('ray status' shows what holds them); finished segments are kept"
            )
        waiting_since = time.monotonic()
        ref = ready[0]
        if ref in starting:
            number = starting.pop(ref)
            try:
                ray.get(ref)
            except died as exc:  # its __init__ failed (models, device) or its node went away
                last_death = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                log.warning("ray: worker %d did not start: %s", number, last_death)
                continue
            started.add(number)
            idle.append(actors[number])
            continue
        number, task = running.pop(ref)
        entry = entries[task.job]
        try:
            result = ray.get(ref)
        except died as exc:
            entry.retries += 1
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if task.attempts >= MAX_ATTEMPTS:
                _fail(
                    entry,
                    f"segment {task.frames[0]}:{task.frames[1]} failed {task.attempts} times: {reason}",
                    batch,
                )
                continue
            log.warning(
                "ray: worker %d died while rendering frames %d:%d of %s (%s); retrying on another worker",
                number,
                *task.frames,
                entry.settings.input,
                reason,
            )
            tasks.appendleft(task)
            continue
        except Exception as exc:  # the render itself failed: the input is at fault, not the worker
            idle.append(actors[number])
            cause = getattr(exc, "cause", None) or exc
            _fail(entry, str(cause).strip().splitlines()[-1] if str(cause).strip() else repr(cause), batch)
            continue
        idle.append(actors[number])
        entry.manifest.record(*task.frames, task.path)
        entry.done[task.frames] = task.path
        entry.frames += result["frames"]
        entry.faces_swapped += result["faces_swapped"]
        entry.faces_found += result["faces_found"]
        entry.frames_with_faces += result["frames_with_faces"]
        for reason, count in result["faces_not_swapped"].items():
            entry.faces_not_swapped[reason] = entry.faces_not_swapped.get(reason, 0) + count
        for decision, count in result.get("swap_decisions", {}).items():
            entry.swap_decisions[decision] = entry.swap_decisions.get(decision, 0) + count
        entry.workers.add(result["worker"])
        progress.update(result["frames"])
        log.info(
            "ray: frames %d:%d of %s done on %s (%.1f fps)",
            *task.frames,
            entry.settings.input,
            result["worker"],
            result["frames"] / max(result["seconds"], 1e-6),
        )


def _fail(entry: InputJob, message: str, batch: bool) -> None:
    entry.status, entry.message = "failed", message
    log.error("%s: %s", entry.settings.input, message)
    if not batch:
        raise InputError(f"{entry.settings.input}: {message}")


def _join(entry: InputJob, tags: dict | None, batch: bool) -> None:

    settings = entry.settings
    started = time.perf_counter()
    try:
        join_segments(
            [entry.done[r] for r in sorted(entry.done)],
            Path(settings.output),
            audio_from=Path(settings.input) if entry.info.audio_streams and settings.encoder.audio else None,
            overwrite=True,
            metadata=tags,
            tags_from=Path(settings.input),
            audio_codec=settings.encoder.audio_codec,
            audio_bitrate=settings.encoder.audio_bitrate,
        )
        publish_staged(settings, entry.manifest.work_dir, list(entry.done), entry.manifest.frame_count)
    except FfbatchError as exc:
        _fail(entry, str(exc), batch)
        return
    entry.join_seconds = time.perf_counter() - started
    remove_work_dir(entry.manifest.work_dir)
    entry.status = "ok"


def _finish(entries: list[InputJob], report_path: Path | None, wall: float, batch: bool) -> int:
    counts = {k: sum(e.status == k for e in entries) for k in ("ok", "skipped", "failed")}
    for entry in entries:
        if entry.status in ("ok", "skipped"):
            say(str(entry.settings.output))
    frames = sum(e.frames for e in entries)
    log.info(
        "ray: %d input(s): %d rendered, %d up to date, %d failed; %d frames in %.1f s (%.1f fps)",
        len(entries),
        counts["ok"],
        counts["skipped"],
        counts["failed"],
        frames,
        wall,
        frames / wall if wall > 0 else 0.0,
    )
    if report_path:
        write_json_atomic(
            Path(report_path),
            {
                "inputs": len(entries),
                **counts,
                "status": "failed" if counts["failed"] else "ok",
                "executor": "ray",
                "wall_seconds": round(wall, 3),
                "fps": round(frames / wall, 3) if wall > 0 else 0.0,
                "jobs": [e.summary() for e in entries],
            },
        )
    return EXIT_USAGE if counts["failed"] else EXIT_OK
