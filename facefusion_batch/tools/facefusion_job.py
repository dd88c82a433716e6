"""FaceFusion 3 job files (`ffbatch render --facefusion-job job.json`), run as FaceFusion's runner runs them.

A job file is FaceFusion's JSON (`version` "1", `date_created`, `date_updated`, `steps`: a list of
`{"args": {...}, "status": ...}`), the args keyed by FaceFusion's option names in snake case: every
step key FaceFusion knows is written (85 in 3.8.1), those of every processor included, whichever
the step runs. tests/data/facefusion_jobs/ holds files FaceFusion's own job commands wrote.

As FaceFusion's runner does (jobs/job_runner.py), each step renders to its step file
`<name>-<job>-<index><ext>` beside its output; a remix step (`job-remix-step`) names the earlier
step's file as its target, so it renders that step's result. After the last step, the step files
of each output are joined in step order (one step: renamed; images: the last one), and every step
file is removed, whether the job finished or not. The first step that fails stops the job.

Each step becomes the command line FaceFusion's own option names make, which the command line
rewrites to ffbatch's like any other FaceFusion name. Keys are:

- of a processor the step does not run: ignored (listed at -v);
- of face_swapper and face_enhancer when the step runs them: mapped to ffbatch's options, or
  refused by name; a step that runs only face_enhancer is an enhance-only render (--swapper none);
- of a processor ffbatch does not have, when the step runs it: the step is refused naming it;
- of FaceFusion's own machinery (detector, landmarker, tracker, audio, scaling): accepted where
  they ask for what ffbatch does anyway (FACEFUSION_DEFAULTS), refused by name where not;
- of frame staging on disk (ffbatch streams): no effect here;
- face_tracker_score 0 (FaceFusion's default, no tracker): every face the detector keeps is swapped
  in every frame, its points as detected (NO_TRACKER), where ffbatch's tracker would hold back a
  weak new face and smooth the points along each track;
- trim_frame_start / trim_frame_end: the step renders those frames (START inclusive, END exclusive,
  each clamped to the video, as FaceFusion's restrict_trim_frame) with `--frames`, and its file is
  that clip from 0 with the input's sound of the same span (video/encode/trimmed.py); a photo is not
  trimmed, as in FaceFusion.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from facefusion_batch.errors import InputError
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.encode.join_in_order import join_in_order
from facefusion_batch.video.encode.trimmed import trim_range, write_trimmed
from facefusion_batch.video.pictures.stills import is_still_image

log = logging.getLogger("ffbatch")

# FaceFusion 3.8.1's processors (facefusion/processors/modules); a step key `<processor>_...`
# belongs to its processor, and voice_extractor_model to the lip syncer, its one user
FACEFUSION_PROCESSORS = (
    "age_modifier", "background_remover", "deep_swapper", "expression_restorer", "face_debugger",
    "face_editor", "face_enhancer", "face_swapper", "frame_colorizer", "frame_enhancer", "lip_syncer",
)  # fmt: skip
PROCESSORS = ("face_swapper", "face_enhancer")  # the ones ffbatch runs
OWNED_BY = {"voice_extractor_model": "lip_syncer"}

# keys of FaceFusion's own machinery: the values accepted, each asking for what ffbatch does
# anyway (null is "not set" and always accepted); any other value is refused by name
FACEFUSION_DEFAULTS: dict[str, tuple[Any, ...]] = {
    # face_detector_model, _size, _angles, _margin and face_landmarker_model, _score are options
    # (FaceFusion's detectors and landmarkers, when their files are here)
    "face_tracker_score": (0.0,),
    "output_image_quality": (80,),
    "output_image_scale": (1.0,),
    # the audio is copied as it is (re-encoded to AAC only where the container cannot hold it)
    "output_audio_encoder": ("flac", "aac", "libmp3lame", "libopus", "libvorbis", "pcm_s16le", "pcm_s32le"),
    "output_audio_quality": (80,),
    "output_audio_volume": (100,),
    "output_video_scale": (1.0,),
}
# FaceFusion's face_tracker_score 0: no tracker. ffbatch's tracker links faces across frames; with
# no presence needed and no smoothing it swaps what FaceFusion swaps (scripts/compare_facefusion.py)
NO_TRACKER = ["--face-presence", "0", "--smoothing", "0"]
# keys that only steer how FaceFusion stages frames on disk (ffbatch streams): no effect here
NO_EFFECT = frozenset(
    {"temp_frame_format", "temp_pixel_format", "workflow_mode", "workflow_strategy", "target_frame_amount"}
    | {"keep_temp"}  # older FaceFusion: keep its temporary frames; ffbatch has none
)


@dataclass(frozen=True)
class JobStep:
    index: int
    target: Path
    output: Path  # the step's file, `<name>-<job>-<index><ext>`
    final: Path  # the output_path the job writes
    argv: list[str]  # FaceFusion's option names, the input first (`-t TARGET`)
    trim: tuple[int | None, int | None] = (None, None)  # trim_frame_start, trim_frame_end


@dataclass
class Job:
    path: Path
    steps: list[JobStep]
    ignored: dict[str, list[int]] = field(default_factory=dict)  # key -> the steps it was ignored in

    def outputs(self) -> dict[Path, list[Path]]:
        """Each output_path and its step files, in step order (FaceFusion's output set)."""
        out: dict[Path, list[Path]] = {}
        for step in self.steps:
            out.setdefault(step.final, []).append(step.output)
        return out


_MAX_JOB_BYTES = 16 << 20  # a FaceFusion job is a few KiB


def read_job(path: Path) -> dict[str, Any]:
    """The job's JSON, checked to be FaceFusion's job format (exit 2 saying what is wrong). Only
    a regular file of at most 16 MiB is read: a FIFO would wait forever, /dev/zero never end."""
    if Path(path).exists() and not Path(path).is_file():
        raise InputError(f"--facefusion-job {path}: not a regular file (a FIFO, a device or a folder)")
    if Path(path).is_file() and Path(path).stat().st_size > _MAX_JOB_BYTES:
        raise InputError(f"--facefusion-job {path}: over {_MAX_JOB_BYTES >> 20} MiB, not a job file")
    try:
        job = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--facefusion-job {path}: no such file") from None
    except RecursionError:
        raise InputError(f"--facefusion-job {path}: not a FaceFusion job file (nested too deep)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--facefusion-job {path}: not a FaceFusion job file ({exc})") from None
    if not isinstance(job, dict) or not {"version", "date_created", "steps"} <= set(job):
        raise InputError(f"--facefusion-job {path}: not a FaceFusion job (version, date_created, steps)")
    if str(job["version"]) != "1":
        raise InputError(f"--facefusion-job {path}: job format version {job['version']!r}; ffbatch reads 1")
    steps = job["steps"]
    if not isinstance(steps, list) or not steps:
        raise InputError(f"--facefusion-job {path}: the job has no steps")
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("args"), dict):
            raise InputError(f"--facefusion-job {path}: step {i} has no args")
    return job


def step_output_name(output: Path, job_id: str, index: int) -> Path:
    """FaceFusion's name for a step's output: `<name>-<job>-<index><ext>` (job_helper)."""
    return output.with_name(f"{output.stem}-{job_id}-{index}{output.suffix}")


def owner(key: str) -> str | None:
    """The FaceFusion processor a step key belongs to, None for the common keys."""
    if key in OWNED_BY:
        return OWNED_BY[key]
    return next((p for p in FACEFUSION_PROCESSORS if key.startswith(p + "_")), None)


def read_facefusion_job(path: Path, accepted: frozenset[str]) -> Job:
    """Every step of the job at `path` as FaceFusion's command line; `accepted`: the FaceFusion
    option names the command line takes (`--face-swapper-model`, ...)."""
    raw = read_job(path)
    job_id = Path(path).stem  # FaceFusion's <jobs>/<status>/<job id>.json
    job = Job(Path(path), [])
    for index, step in enumerate(raw["steps"]):
        what = f"--facefusion-job {path}, step {index}"
        args = dict(step["args"])
        target, output = args.pop("target_path", None), args.pop("output_path", None)
        if not target or not output:
            raise InputError(f"{what}: needs target_path and output_path")
        target, output = Path(target), Path(output)
        check_output_path(what, output)
        processors = args.pop("processors", None) or ["face_swapper"]
        lacking = [p for p in processors if p not in PROCESSORS]
        if lacking:
            known = [p for p in lacking if p in FACEFUSION_PROCESSORS]
            raise InputError(
                f"{what}: runs {', '.join(lacking)}, which ffbatch does not have "
                f"({'a FaceFusion processor' if known else 'not a FaceFusion processor'}; ffbatch runs "
                "face_swapper and face_enhancer)"
            )
        argv = ["-t", str(target), "-o", str(step_output_name(output, job_id, index))]
        if args.get("face_tracker_score") in (0, None):
            argv += NO_TRACKER
        if "face_swapper" not in processors:
            argv += ["--swapper", "none"]
            args.pop("source_paths", None)  # FaceFusion writes them, and the enhancer does not read them
        for key in [k for k in args if owner(k) is not None and owner(k) not in processors]:
            job.ignored.setdefault(key, []).append(index)
            del args[key]
        trim = read_trim(what, args.pop("trim_frame_start", None), args.pop("trim_frame_end", None))
        check_fps(what, target, args.pop("output_video_fps", None))
        check_resolution(what, target, args.pop("output_video_resolution", None))
        for key, value in args.items():
            if value is None or key in NO_EFFECT:
                continue
            if key in FACEFUSION_DEFAULTS:
                if value not in FACEFUSION_DEFAULTS[key]:
                    accepted_values = ", ".join(map(repr, FACEFUSION_DEFAULTS[key])) or "unset"
                    raise InputError(
                        f"{what}: {key} = {value!r} is not supported (ffbatch does this its own way; "
                        f"accepted: {accepted_values})"
                    )
                continue
            option = "--" + key.replace("_", "-")
            if option not in accepted:
                raise InputError(f"{what}: {key} is not an option ffbatch knows (FaceFusion's {option})")
            values = value if isinstance(value, list) else [value]
            argv += [option, *(str(v) for v in values)]
        job.steps.append(JobStep(index, target, step_output_name(output, job_id, index), output, argv, trim))
    return job


def read_trim(what: str, start: Any, end: Any) -> tuple[int | None, int | None]:
    """trim_frame_start / trim_frame_end as FaceFusion takes them: whole frame numbers or null."""
    for key, value in (("trim_frame_start", start), ("trim_frame_end", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InputError(f"{what}: {key} = {value!r} is not a frame number (a whole number from 0)")
    if start is not None and end is not None and end <= start:
        raise InputError(f"{what}: trim_frame_end {end} is not after trim_frame_start {start}: no frames")
    return start, end


def run_step_trimmed(step: JobStep, run_step: Callable[[JobStep], int]) -> int:
    """A step with trim_frame_start / _end: its frames rendered with --frames into a segment, then
    the step's file made of it with the target's sound of the same span."""
    if step.trim == (None, None) or is_still_image(step.target) or not step.target.is_file():
        return run_step(step)  # a photo is not trimmed; a missing target is the render's to report
    total = probe(step.target).frame_count
    if total is None:
        raise InputError(f"{step.target}: its frame count is unknown, so trim_frame_* cannot be applied")
    start, end = trim_range(total, *step.trim)
    if (start, end) == (0, total):
        return run_step(step)
    if end <= start:
        raise InputError(
            f"--facefusion-job, step {step.index}: trim_frame_start {step.trim[0]} / trim_frame_end "
            f"{step.trim[1]} leave no frames of {step.target} ({total} frames)"
        )
    segment = step.output.with_name(f".{step.output.stem}.frames{step.output.suffix}")
    argv = list(step.argv)
    argv[argv.index("-o") + 1] = str(segment)
    try:
        code = run_step(replace(step, argv=[*argv, "--frames", f"{start}:{end}"]))
        if code == 0:
            log.info(
                "--facefusion-job: step %d: frames %d to %d of %s", step.index, start, end - 1, step.target
            )
            write_trimmed(segment, step.target, step.output)
        return code
    finally:
        segment.unlink(missing_ok=True)


def check_output_path(what: str, output: Path) -> None:
    """A job file comes from elsewhere (a queue, another user): an output_path that climbs with `..`
    would write outside the folders it names without a word, so it is refused; a path written
    out plainly (absolute, or relative to the working directory as FaceFusion reads it) runs."""
    if ".." in output.parts:
        raise InputError(
            f"{what}: output_path {output} climbs out of its folder with '..'; ffbatch writes a job's "
            "outputs only where they are named plainly: write the path without '..' (an absolute path "
            "is fine)"
        )


def check_fps(what: str, target: Path, fps: Any) -> None:
    """FaceFusion records the target's rate as output_video_fps (3.8 leaves it null); another
    rate is a conversion ffbatch does not do (it keeps every frame and its timestamp)."""
    if fps is None or not target.is_file() or is_still_image(target):
        return  # the render reports a missing input
    rate = float(probe(target).average_rate or 0)
    if rate and abs(rate - float(fps)) > 0.01:
        raise InputError(
            f"{what}: output_video_fps {float(fps):g} differs from the target's {rate:g} fps; ffbatch "
            "keeps the input's frames and timestamps"
        )


def check_resolution(what: str, target: Path, resolution: Any) -> None:
    """Older FaceFusion records the target's size as output_video_resolution ("WxH"); another
    size is a scaling ffbatch does not do."""
    if resolution is None or not target.is_file() or is_still_image(target):
        return
    info = probe(target)
    if str(resolution).lower() != f"{info.width}x{info.height}":
        raise InputError(
            f"{what}: output_video_resolution {resolution} differs from the target's "
            f"{info.width}x{info.height}; ffbatch writes the input's size"
        )


def check_outputs(job: Job, overwrite: bool) -> None:
    """Before any step: no output is an existing file unless --overwrite, no output is a step's target."""
    targets = {s.target for s in job.steps}
    for final, pieces in job.outputs().items():
        if final in targets:
            raise InputError(f"--facefusion-job {job.path}: {final} is both a target and an output")
        if final.exists() and not overwrite:
            raise InputError(f"output {final} already exists; pass --overwrite to replace it")
        if len(pieces) > 1 and is_still_image(final):
            log.info(
                "%s: %d image steps write it; the last one is kept, as FaceFusion does", final, len(pieces)
            )


def run_job(job: Job, run_step: Callable[[JobStep], int]) -> int:
    """The job's steps in order (`run_step`: one render, its exit status), then each output made
    from its step files (videos joined in order); the step files removed in any case."""
    if job.ignored:
        log.debug(
            "--facefusion-job: keys of processors the steps do not run, ignored: %s",
            ", ".join(sorted(job.ignored)),
        )
    try:
        for n, step in enumerate(job.steps):
            log.info("--facefusion-job: step %d of %d", n + 1, len(job.steps))
            code = run_step_trimmed(step, run_step)
            if code:
                log.error("--facefusion-job: step %d failed; later steps not run", step.index)
                return code
        for final, pieces in job.outputs().items():
            if len(pieces) == 1 or is_still_image(final):
                os.replace(pieces[-1], final)
            else:
                log.info("--facefusion-job: joining %d steps into %s", len(pieces), final)
                join_in_order(pieces, final)
        return 0
    finally:
        for step in job.steps:
            step.output.unlink(missing_ok=True)


DEFAULT_ENHANCER = "gfpgan_1.4"  # FaceFusion's --face-enhancer-model default
# FaceFusion's execution providers that are one of ffbatch's backends
BACKENDS = {"cpu": "cpu", "cuda": "cuda", "tensorrt": "tensorrt"}


def processor_options(processors: list[str], argv: list[str]) -> list[str]:
    """FaceFusion's --processors as ffbatch's options: face_swapper alone is the default, with
    face_enhancer the enhancer runs after it (FaceFusion's default model unless one is named in
    `argv`), face_enhancer alone is an enhance-only render; any other processor is refused."""
    lacking = [p for p in processors if p not in PROCESSORS]
    if lacking:
        raise InputError(
            f"--processors {' '.join(processors)}: ffbatch does not have {', '.join(lacking)} "
            "(it runs face_swapper and face_enhancer)"
        )
    out = [] if "face_swapper" in processors else ["--swapper", "none"]
    named = any(a.partition("=")[0] in ("--face-enhancer-model", "--enhancer-model") for a in argv)
    if "face_enhancer" in processors and not named:
        out += ["--enhancer-model", DEFAULT_ENHANCER]
    return out


def backend_for(providers: list[str]) -> str:
    """FaceFusion's --execution-providers (tried in order there) as ffbatch's --backend: the first,
    which must be one ffbatch has."""
    first = providers[0]
    if first not in BACKENDS:
        raise InputError(
            f"--execution-providers {first}: ffbatch has no {first} backend; it runs on "
            f"{', '.join(BACKENDS)} (--backend)"
        )
    return BACKENDS[first]
