"""FaceFusion 3 job files (`ffbatch render --facefusion-job job.json`): each step as a render.

A job file is FaceFusion's JSON (`version` "1", `date_created`, `date_updated`, `steps`: a list of
`{"args": {...}, "status": ...}`), the args keyed by FaceFusion's option names in snake case,
every step key present (unset ones null, the rest at FaceFusion's defaults). Each step becomes
the command line FaceFusion's own names would make (`--face-swapper-model X`, ...), which the
command line rewrites to ffbatch's options like any other FaceFusion name. Steps run in order
and stop at the first that fails, as FaceFusion's runner does.

What ffbatch cannot do the same way is refused by name, never ignored:

- a key it does not know, a processor other than face_swapper and face_enhancer;
- a key of FaceFusion's own machinery (detector, landmarker, tracker, audio re-encoding,
  scaling) set to anything but FaceFusion's default, since that asks for something else;
- trimming (FaceFusion trims with the audio; ffbatch's --frames is a video-only segment);
- two steps writing one output (FaceFusion joins them; here every step is one output).

A step whose target is an earlier step's output (FaceFusion's "remix": the earlier step's
`<name>-<job>-<index><ext>`) takes that step's output file, rendered before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facefusion_batch.errors import InputError
from facefusion_batch.video.probe import probe

# keys of FaceFusion's own machinery: accepted at its defaults only (null is "not set")
AT_DEFAULT: dict[str, tuple[Any, ...]] = {
    "face_detector_model": ("yolo_face",),
    "face_detector_size": ("640x640",),
    "face_detector_margin": ([0, 0, 0, 0], [0]),
    "face_detector_angles": ([0],),
    "face_landmarker_model": ("2dfan4",),
    "face_landmarker_score": (0.5,),
    "face_tracker_score": (0.0,),
    "output_image_quality": (80,),
    "output_image_scale": (1.0,),
    "output_audio_encoder": ("aac",),
    "output_audio_quality": (80,),
    "output_audio_volume": (100,),
    "output_video_scale": (1.0,),
    "trim_frame_start": (),
    "trim_frame_end": (),
}
# keys that only steer how FaceFusion stages frames on disk (ffbatch streams): no effect here
NO_EFFECT = frozenset(
    {"temp_frame_format", "temp_pixel_format", "workflow_mode", "workflow_strategy", "target_frame_amount"}
)
PROCESSORS = ("face_swapper", "face_enhancer")
ENHANCER_KEYS = ("face_enhancer_model", "face_enhancer_blend", "face_enhancer_weight")
VOICE_KEYS = ("voice_extractor_model",)  # only the lip syncer (refused) uses it


@dataclass(frozen=True)
class JobStep:
    index: int
    target: Path
    output: Path
    argv: list[str]  # FaceFusion's option names, the input first (`-t TARGET`)


def read_job(path: Path) -> dict[str, Any]:
    """The job's JSON, checked to be FaceFusion's job format (exit 2 saying what is wrong)."""
    try:
        job = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--facefusion-job {path}: no such file") from None
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
    """FaceFusion's temporary name for a step's output: `<name>-<job>-<index><ext>`."""
    return output.with_name(f"{output.stem}-{job_id}-{index}{output.suffix}")


def job_steps(path: Path, accepted: frozenset[str]) -> list[JobStep]:
    """Every step of the job at `path` as FaceFusion's command line; `accepted`: the FaceFusion
    option names the command line takes (`--face-swapper-model`, ...)."""
    job = read_job(path)
    job_id = Path(path).stem
    steps: list[JobStep] = []
    written: dict[Path, int] = {}
    remixed: dict[Path, Path] = {}
    for index, step in enumerate(job["steps"]):
        what = f"--facefusion-job {path}, step {index}"
        args = dict(step["args"])
        target, output = args.pop("target_path", None), args.pop("output_path", None)
        if not target or not output:
            raise InputError(f"{what}: needs target_path and output_path")
        target, output = Path(target), Path(output)
        target = remixed.get(target, target)
        if output in written:
            raise InputError(
                f"{what}: writes {output} as step {written[output]} does; FaceFusion joins such steps, "
                "ffbatch renders one output per step: give each step its own output_path"
            )
        written[output] = index
        remixed[step_output_name(output, job_id, index)] = output
        argv = ["-t", str(target), "-o", str(output)]
        processors = args.pop("processors", None) or ["face_swapper"]
        other = [p for p in processors if p not in PROCESSORS]
        if other or "face_swapper" not in processors:
            raise InputError(
                f"{what}: processors {processors}: ffbatch runs face_swapper, with face_enhancer "
                f"optionally{f'; not {other}' if other else ''}"
            )
        if "face_enhancer" not in processors:
            for key in ENHANCER_KEYS:
                args.pop(key, None)
        for key in VOICE_KEYS:
            args.pop(key, None)
        fps = args.pop("output_video_fps", None)
        if fps is not None:
            check_fps(what, target, float(fps))
        for key, value in args.items():
            if value is None or key in NO_EFFECT:
                continue
            if key in AT_DEFAULT:
                if value not in AT_DEFAULT[key]:
                    raise InputError(
                        f"{what}: {key} = {value!r} is not supported (ffbatch does this its own way; "
                        f"accepted: {', '.join(map(repr, AT_DEFAULT[key])) or 'unset'})"
                    )
                continue
            option = "--" + key.replace("_", "-")
            if option not in accepted:
                raise InputError(f"{what}: {key} is not an option ffbatch knows (FaceFusion's {option})")
            values = value if isinstance(value, list) else [value]
            argv += [option, *(str(v) for v in values)]
        steps.append(JobStep(index, target, output, argv))
    return steps


def check_fps(what: str, target: Path, fps: float) -> None:
    """FaceFusion records the target's rate as output_video_fps; another rate is a conversion
    ffbatch does not do (it keeps every frame and its timestamp)."""
    if not target.is_file():
        return  # the render reports the missing input
    rate = float(probe(target).average_rate or 0)
    if rate and abs(rate - fps) > 0.01:
        raise InputError(
            f"{what}: output_video_fps {fps:g} differs from the target's {rate:g} fps; ffbatch keeps "
            "the input's frames and timestamps"
        )
