"""`ffbatch plan`: the commands a render farm runs, one per chunk of frames, then one join per input.

Every chunk command is `ffbatch render INPUT <render options> --frames A:B -o SEGMENT`
(idempotent: a finished segment is skipped when the task runs again), every
join is `ffbatch concat SEGMENTS -o OUTPUT --audio-from INPUT --clean`. The
segments go to the same hidden work directory beside the output that a local
chunked render uses (`.{name}.ffbatch/`), so `ffbatch render ... --chunk-frames N`
with the same N finishes a farm run that stopped half-way.

Formats:

- `json`: everything, for a program (argv lists and shell-quoted strings);
- `shell`: one line per chunk, then one concat line per input;
- `slurm`: one sbatch array script; tasks 0..C-1 render the chunks, tasks
  C..C+J-1 the joins (submitted separately, after the chunks: see its header);
- `opencue`: a PyOutline script; run with no argument it submits one render layer
  (one OpenCue frame per chunk) and one join layer per input that waits for it;
  the layers run the script itself with `--task N`;
- `openjd`: an Open Job Description job template (Deadline Cloud, `openjd run`): a render step
  over the chunks as an integer parameter space, a join step depending on it (farm/openjd.py).

All paths are made absolute and every word is quoted with `shlex.quote`, so
paths with spaces or quotes survive the farm's shell.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from facefusion_batch.config import (
    check_matte_run,
    check_writes,
    compositing_outputs,
    files_read,
    option_field,
    render_settings,
    template_literal,
)
from facefusion_batch.errors import InputError
from facefusion_batch.farm.chunk_compositing import chunk_segment
from facefusion_batch.farm.manifest import segment_name, work_dir_for
from facefusion_batch.farm.openjd import to_openjd
from facefusion_batch.farm.outputs import DEFAULT_PATTERN, compositing_paths, outputs_for
from facefusion_batch.settings.types import PLAN_FORMATS
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.decode.segments import first_frame_number, format_range, frame_index, split_frames
from facefusion_batch.video.encode.formats import check_fits, segment_suffix
from facefusion_batch.video.encode.sequence import is_sequence_pattern, printf_pattern

FORMATS = PLAN_FORMATS  # settings/types.py: PlanFormat

# render options that plan sets itself (or that make no sense per chunk)
_NOT_PASSED = frozenset(
    {"inputs", "output", "output_dir", "output_pattern", "frames", "frame_range", "chunk_frames", "ray"}
    | {"ray_workers"}
    | {"report", "force", "overwrite", "fail_if_no_faces"}
)


# options whose values are REF=SRC photo pairs: both made absolute, as paths are
_PATH_PAIRS = frozenset({"person_map"})


@dataclass
class Chunk:
    task: int
    frames: tuple[int, int]
    segment: Path
    argv: list[str]


@dataclass
class Job:
    input: Path
    output: Path
    work_dir: Path
    frame_count: int
    audio: bool
    chunks: list[Chunk] = field(default_factory=list)
    join_task: int = 0
    join_argv: list[str] = field(default_factory=list)
    # the compositing outputs of this input (option, path), expanded from their templates
    compositing: list[tuple[str, Path]] = field(default_factory=list)
    # a video compositing output (--matte-output, --face-only-output): its own join of the
    # chunks' pieces, (task, option, argv) each
    compositing_joins: list[tuple[int, str, list[str]]] = field(default_factory=list)
    # --report: the join's report (the chunks' merged), each chunk's beside it
    report: Path | None = None

    @property
    def sequence(self) -> bool:
        """An image sequence output: each chunk writes its frames at their final names, no join."""
        return is_sequence_pattern(self.output)

    @property
    def writes(self) -> list[tuple[str, Path]]:
        """What the job's joins and chunks leave: its output and compositing outputs."""
        return [(f"the output of {self.input},", self.output)] + [
            (f"the {option} of {self.input},", path) for option, path in self.compositing
        ]


@dataclass
class Plan:
    chunk_frames: int
    command: list[str]
    jobs: list[Job]

    @property
    def chunk_tasks(self) -> int:
        return sum(len(j.chunks) for j in self.jobs)

    @property
    def join_tasks(self) -> int:
        return sum((not j.sequence) + len(j.compositing_joins) for j in self.jobs)

    def tasks(self) -> list[list[str]]:
        """argv of every task by task number: all chunks, then all joins (each job's output,
        then its compositing videos)."""
        out = [c.argv for j in self.jobs for c in j.chunks]
        for j in self.jobs:
            out += [*([j.join_argv] if j.join_argv else []), *(argv for _, _, argv in j.compositing_joins)]
        return out


def quote(argv: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def _abs(path: Path | str) -> str:
    return os.path.abspath(os.fspath(path))


def passthrough_args(command, params: dict[str, Any], exclude: frozenset[str] = frozenset()) -> list[str]:
    """The render options that differ from their defaults, written back as arguments (but
    those in `exclude`, which plan sets per chunk)."""
    args: list[str] = []
    for param in command.params:
        name = param.name
        if name in _NOT_PASSED | exclude or name not in params or not getattr(param, "opts", None):
            continue
        value = params[name]
        if value == param.default or (value in (None, (), []) and param.default in (None, (), [])):
            continue
        long = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        if getattr(param, "is_flag", False) and isinstance(value, bool):
            if value:
                args.append(long)
            elif param.secondary_opts:
                args.append(param.secondary_opts[0])
            continue
        values = value if getattr(param, "multiple", False) else [value]
        for v in values:
            if name in _PATH_PAIRS:
                v = "=".join(_abs(p) for p in str(v).split("=", 1))
            args += [long, _abs(v) if isinstance(v, Path) else str(v)]
    return args


def make_plan(
    inputs: list[Path],
    *,
    chunk_frames: int,
    render_args: list[str],
    output: Path | None,
    output_dir: Path | None,
    output_pattern: str = DEFAULT_PATTERN,
    command: list[str] | None = None,
    overwrite: bool = False,
    suffix: str = ".mp4",
    compositing: tuple[tuple[str, Path], ...] = (),
    report: Path | None = None,
) -> Plan:
    """`compositing`: the compositing outputs (option, path), templates of each input's name
    (farm/outputs.compositing_paths). Each chunk writes its frames of a sequence, and its piece of
    a video into the job's work directory (as a chunked render does), which a join task of its
    own joins."""
    if chunk_frames < 1:
        raise InputError(f"--chunk-frames must be at least 1 (got {chunk_frames})")
    if not inputs:
        raise InputError("give at least one input video")
    if output is not None and output_dir is not None:
        raise InputError("give either -o/--output (one input) or --output-dir (any number), not both")
    if output is None and output_dir is None:
        raise InputError("missing option -o/--output: where the joined video goes (or --output-dir DIR)")
    if output is not None and len(inputs) > 1:
        raise InputError(f"{len(inputs)} inputs but one -o/--output; use --output-dir DIR instead")
    if output is not None:
        outputs = [output]
    else:
        assert output_dir is not None  # one of them was given (checked above)
        outputs = outputs_for(inputs, output_dir, output_pattern)
    command = command or ["ffbatch"]
    jobs: list[Job] = []
    for inp, out in zip(inputs, outputs, strict=True):
        info = probe(inp)
        index = frame_index(inp, info.video_stream_index)
        if index.count == 0:
            raise InputError(f"input video {inp} has no frames")
        work = Path(_abs(work_dir_for(Path(out))))
        jobs.append(
            Job(
                input=Path(_abs(inp)),
                output=Path(_abs(out)),
                work_dir=work,
                frame_count=index.count,
                audio=bool(info.audio_streams),
                compositing=[(o, Path(_abs(p))) for o, p in compositing_paths(list(compositing), inp)],
                report=None if report is None else Path(_abs(job_report(report, out, len(inputs)))),
            )
        )
    task = 0
    for job in jobs:
        for start, end in split_frames(job.frame_count, chunk_frames):
            segment = job.output if job.sequence else job.work_dir / segment_name(start, end, suffix)
            argv = [*command, "render", str(job.input), *render_args, *task_range(job.input, start, end)]
            argv += ["-o", str(segment), "--overwrite"]
            if job.report is not None:
                argv += ["--report", str(chunk_report(job.report, start, end))]
            for option, path in job.compositing:  # expanded: passed on as a literal template
                piece = (
                    path
                    if is_sequence_pattern(path)
                    else chunk_segment(job.work_dir, option, path, start, end)
                )
                argv += [option, template_literal(str(piece))]
            job.chunks.append(Chunk(task, (start, end), segment, argv))
            task += 1
    for job in jobs:
        if not job.sequence:
            argv = [*command, "concat", *(str(c.segment) for c in job.chunks), "-o", str(job.output)]
            if job.audio:
                argv += ["--audio-from", str(job.input)]
            argv += ["--clean"] + (["--overwrite"] if overwrite else [])
            if job.report is not None:
                argv += ["--report", str(job.report)]
                for c in job.chunks:
                    argv += ["--task-report", str(chunk_report(job.report, *c.frames))]
            job.join_task = task
            job.join_argv = argv
            task += 1
        for option, path in job.compositing:
            if is_sequence_pattern(path):
                continue
            pieces = [str(chunk_segment(job.work_dir, option, path, *c.frames)) for c in job.chunks]
            argv = [*command, "concat", *pieces, "-o", str(path), "--clean"]
            job.compositing_joins.append((task, option, argv + (["--overwrite"] if overwrite else [])))
            task += 1
    return Plan(chunk_frames, command, jobs)


def task_range(input: Path, start: int, end: int) -> list[str]:
    """A chunk's frames as its render is told them: an image sequence's in its own numbers
    (`--frame-range 1001-1100`, as a farm's own frame numbers), a video's as `--frames A:B`."""
    if is_sequence_pattern(input):
        first = first_frame_number(input)
        return ["--frame-range", f"{first + start}-{first + end - 1}"]
    return ["--frames", format_range(start, end)]


def job_report(report: Path, output: Path, inputs: int) -> Path:
    """--report of a plan: the join's report of one input; with several, one per output beside it."""
    if inputs == 1:
        return report
    return report.with_name(f"{report.stem}-{Path(output).stem.replace('%', '')}{report.suffix}")


def chunk_report(report: Path, start: int, end: int) -> Path:
    """Each chunk's own report, beside the job's: `run.json` -> `run.00000000-00001500.json`."""
    return report.with_name(f"{report.stem}.{start:08d}-{end:08d}{report.suffix}")


def to_json(plan: Plan) -> str:
    data = {
        "format": "ffbatch-plan",
        "version": 1,
        "chunk_frames": plan.chunk_frames,
        "command": plan.command,
        "tasks": {"chunks": plan.chunk_tasks, "joins": plan.join_tasks},
        "jobs": [
            {
                "input": str(j.input),
                "output": str(j.output),
                "work_dir": str(j.work_dir),
                "frame_count": j.frame_count,
                "audio": j.audio,
                "chunks": [
                    {
                        "task": c.task,
                        "frames": list(c.frames),
                        "segment": str(c.segment),
                        "argv": c.argv,
                        "command": quote(c.argv),
                    }
                    for c in j.chunks
                ],
                "join": (
                    {"task": j.join_task, "argv": j.join_argv, "command": quote(j.join_argv)}
                    if j.join_argv
                    else None  # an image sequence: its chunks write the frames at their final names
                ),
                "compositing_joins": [
                    {"task": task, "option": option, "argv": argv, "command": quote(argv)}
                    for task, option, argv in j.compositing_joins
                ],
            }
            for j in plan.jobs
        ],
    }
    return json.dumps(data, indent=2) + "\n"


def _summary(plan: Plan) -> str:
    frames = sum(j.frame_count for j in plan.jobs)
    return (
        f"{len(plan.jobs)} input(s), {frames} frames, {plan.chunk_tasks} chunks of up to "
        f"{plan.chunk_frames} frames, {plan.join_tasks} join(s)"
    )


def to_shell(plan: Plan) -> str:
    lines = [
        f"# ffbatch plan: {_summary(plan)}",
        "# Run the render lines in any order, on any machines that see these paths (each is",
        "# idempotent: a finished segment is skipped), then the concat lines. `bash -e` runs it all.",
    ]
    lines += [quote(c.argv) for j in plan.jobs for c in j.chunks]
    lines += [quote(argv) for argv in plan.tasks()[plan.chunk_tasks :]]
    return "\n".join(lines) + "\n"


def to_slurm(plan: Plan, sbatch: list[str]) -> str:
    chunks, joins = plan.chunk_tasks, plan.join_tasks
    last = chunks + joins - 1
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=ffbatch",
        f"#SBATCH --array=0-{chunks - 1}",
        *(f"#SBATCH {opt}" for opt in sbatch),
        f"# ffbatch plan: {_summary(plan)}",
        *(
            [
                f"# Tasks 0-{chunks - 1} render the chunks; tasks {chunks}-{last} join them"
                " (one per output).",
                "# Submit both, the joins after every chunk succeeded:",
                "#   jid=$(sbatch --parsable THIS_SCRIPT)",
                f"#   sbatch --dependency=afterok:$jid --array={chunks}-{last} THIS_SCRIPT",
            ]
            if joins
            else [  # image sequences: every chunk writes its frames at their final names
                f"# Tasks 0-{chunks - 1} render the chunks, each its frames of the sequence; no join.",
                "# Submit: sbatch THIS_SCRIPT",
            ]
        ),
        "# A task that failed can be run again alone (sbatch --array=N THIS_SCRIPT): finished",
        "# segments are skipped.",
        "set -euo pipefail",
        'case "${SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}" in',
    ]
    for number, argv in enumerate(plan.tasks()):
        lines.append(f"  {number}) exec {quote(argv)} ;;")
    lines += [
        '  *) echo "ffbatch plan: there is no task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"


_OPENCUE = '''#!/usr/bin/env python3
"""ffbatch plan for OpenCue: {summary}.

    python3 THIS_SCRIPT            submit (needs PyOutline, and this file where the hosts see it)
    python3 THIS_SCRIPT --task N   run task N here (what the layers do)
    python3 THIS_SCRIPT --list     print the tasks

One render layer whose OpenCue frames 0-{last_chunk} are the chunks, then one join layer
per output (an input's video, its compositing videos) that waits for the whole render layer.
"""

import os
import sys

JOB_NAME = "ffbatch"
TASKS = {tasks}
CHUNK_TASKS = {chunks}
JOINS = {joins}  # (layer name, task number)


def submit():
    from outline import Outline, cuerun
    from outline.modules.shell import Shell

    here = os.path.abspath(__file__)
    outline = Outline(JOB_NAME)
    render = Shell(
        "render",
        command=[sys.executable, here, "--task", "#IFRAME#"],
        range="0-%d" % (CHUNK_TASKS - 1),
        chunk=1,
    )
    outline.add_layer(render)
    for name, task in JOINS:
        join = Shell(name, command=[sys.executable, here, "--task", str(task)], range="1-1", chunk=1)
        join.depend_all(render)
        outline.add_layer(join)
    cuerun.launch(outline, use_pycuerun=False)


def main(argv):
    if argv[:1] == ["--task"] and len(argv) == 2:
        argv_task = TASKS[int(argv[1])]
        os.execvp(argv_task[0], argv_task)
    if argv == ["--list"]:
        import shlex

        for number, task in enumerate(TASKS):
            print(number, " ".join(shlex.quote(a) for a in task))
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    submit()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def to_opencue(plan: Plan) -> str:
    joins = []
    for i, j in enumerate(plan.jobs):
        if j.join_argv:
            joins.append((f"join-{i:03d}-{_layer_word(j.output.stem)}", j.join_task))
        for task, option, _ in j.compositing_joins:
            joins.append((f"join-{i:03d}-{_layer_word(option.strip('-'))}", task))
    tasks = "[\n" + "".join(f"    {argv!r},\n" for argv in plan.tasks()) + "]"
    return _OPENCUE.format(
        summary=_summary(plan),
        last_chunk=plan.chunk_tasks - 1,
        tasks=tasks,
        chunks=plan.chunk_tasks,
        joins=repr(joins),
    )


def _layer_word(text: str) -> str:
    word = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)
    return word[:40] or "output"


def render_plan(plan: Plan, fmt: str, sbatch: list[str] | None = None) -> str:
    if fmt == "json":
        return to_json(plan)
    if fmt == "shell":
        return to_shell(plan)
    if fmt == "slurm":
        return to_slurm(plan, sbatch or [])
    if fmt == "opencue":
        return to_opencue(plan)
    if fmt == "openjd":
        return to_openjd(plan, _summary(plan))
    raise InputError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")


def plan_command(
    tokens: list[str],
    *,
    render_command,
    chunk_frames: int,
    fmt: str,
    output: Path | None,
    output_dir: Path | None,
    output_pattern: str,
    ffbatch: str,
    sbatch: list[str] | None,
    overwrite: bool,
) -> str:
    """`ffbatch plan`: `tokens` are the inputs mixed with the render options to pass through,
    parsed by `render_command` (the click command of `ffbatch render`) and checked by the same
    option schema as a render (`config.render_settings`): what render refuses, plan refuses."""
    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    try:
        ctx = render_command.make_context("render", list(tokens), resilient_parsing=False)
    except Exception as exc:  # the render command's own parse error, e.g. --crf eighteen
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise InputError(f"plan: {message}") from None
    params = ctx.params
    if params.get("frames") or params.get("frame_range"):
        raise InputError("plan chooses the frames of each chunk itself; use --chunk-frames")
    if params.get("ray"):
        raise InputError("plan writes farm commands; --ray is for `ffbatch render`")
    if params.get("facefusion_job"):
        raise InputError("plan: --facefusion-job runs a job's steps with `ffbatch render`; plan one input")
    if params.get("gpus"):
        raise InputError("plan: every farm task renders on one GPU; leave out --gpus")
    if params.get("fail_if_no_faces"):
        raise InputError(
            "plan: --fail-if-no-faces judges a whole render; one farm chunk cannot (leave it out)"
        )
    # the farm's hosts resolve the device themselves; this machine's GPUs say nothing about theirs
    settings, _ = render_settings(params, resolve=False)
    refuse_control_characters("--ffbatch", ffbatch)
    if output is not None:
        output = Path(printf_pattern(output))  # shot.####.exr
    inputs = [Path(printf_pattern(p)) for p in params["inputs"]]
    if is_sequence_pattern(output or "") and len(inputs) > 1:
        raise InputError("plan: an image sequence output takes one input (use --output-dir for videos)")
    # each input's compositing paths (templates of its name), passed to its chunks by make_plan
    check_matte_run(settings, len(params["inputs"]))
    compositing = compositing_outputs(settings)
    per_chunk = frozenset(option_field(option) for option, _ in compositing)
    command = shlex.split(ffbatch)
    if not command:
        raise InputError("--ffbatch must name the command that runs ffbatch, e.g. ffbatch")
    plan = make_plan(
        inputs,
        chunk_frames=chunk_frames,
        render_args=passthrough_args(render_command, params, exclude=per_chunk),
        output=output,
        output_dir=output_dir,
        output_pattern=output_pattern,
        command=command,
        overwrite=overwrite,
        suffix=segment_suffix(settings.encoder.codec),
        compositing=tuple(compositing),
        report=settings.report,
    )
    check_writes(  # no output or compositing path is another's, nor a file any job reads
        [(what, path) for job in plan.jobs for what, path in job.writes],
        [read for job in plan.jobs for read in files_read(replace(settings, input=job.input))],
    )
    for argv in plan.tasks():
        for word in argv:
            refuse_control_characters("a plan word", str(word))
    for line in sbatch or ():
        refuse_control_characters("--sbatch", line)
    for job in plan.jobs:  # the joined outputs: an encoder their container cannot hold is exit 2 here
        if not job.sequence:
            check_fits(settings.encoder.codec, job.output)
    return render_plan(plan, fmt, sbatch)


def refuse_control_characters(what: str, text: str) -> None:
    """A newline (or any control character) in a plan would start a line every task runs: a
    path or an option holding one is refused, never quoted (slurm's #SBATCH lines cannot be)."""
    bad = next((ch for ch in text if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029"), None)
    if bad is not None:
        raise InputError(f"{what} {text!r} holds the control character {bad!r}; a farm plan cannot carry it")
