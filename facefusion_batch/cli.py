"""The `ffbatch` command line: render, preview, models, doctor.

Exit codes: 0 done, 1 internal error, 2 bad input or usage, 130 interrupted
(SIGINT), 143 terminated (SIGTERM). Logs go to stderr; stdout carries only
what a script may want to read (the output path, model lists, JSON).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import math
import os
import shutil
import sys
import tempfile
import traceback
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core
import typer.main

from facefusion_batch import RENDER_REVISION, __version__, paths
from facefusion_batch.config import check_matte_run
from facefusion_batch.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    FfbatchError,
    InputError,
    forget_signals,
    signal_behind,
    signal_handlers,
)
from facefusion_batch.farm.jobs import farm_paths_and_range, run_render_command, running_command
from facefusion_batch.farm.multi_gpu import render_on_several_gpus
from facefusion_batch.farm.plan import plan_command
from facefusion_batch.farm.task_reports import concat_with_report
from facefusion_batch.fsutil import remove_live_temps
from facefusion_batch.settings.options import (
    PANELS,
    PLAN,
    PREVIEW,
    RENDER,
    RENDER_OPTIONS,
    REQUIRED,
    Option,
    render_settings,
)
from facefusion_batch.stdout import say
from facefusion_batch.tools import doctor as tools_doctor
from facefusion_batch.tools import engines as tools_engines
from facefusion_batch.tools import models as tools_models
from facefusion_batch.tools.facefusion_job import (
    NO_TRACKER,
    Job,
    JobStep,
    backend_for,
    check_outputs,
    processor_options,
    read_facefusion_job,
    run_job,
)
from facefusion_batch.tools.preview import preview_command

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # plain help: readable at 80 columns, no option name cut short by a table column
    rich_markup_mode=None,
    help="Batched, offline face swapping for video files.",
)
models_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="List, fetch and verify model files."
)
app.add_typer(models_app, name="models")
engines_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Build, list and verify TensorRT engines for this GPU."
)
app.add_typer(engines_app, name="engines")

log = logging.getLogger("ffbatch")

# --- help a person reads --------------------------------------------------------------------

# the panels render, preview and plan list their options in (settings/options.py: PANELS, as
# typer's rich_help_panel) are drawn as plain sections by PanelledCommand: rich tables cut long
# option names at 80 columns
# what a value is, in the help, instead of its Python type (<int>, <list[Path]>)
_METAVARS: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def _metavar(param: Any) -> str:
    described = getattr(param, "type_descriptor", None)
    if described is None:
        return (param.name or "value").upper()
    if described.is_path:
        return "PATH"
    kind = described.annotation
    kind = typing.get_args(kind)[0] if described.is_list else kind
    return _METAVARS.get(kind, (param.name or "value").upper())


class PanelledCommand(typer.core.TyperCommand):
    """A command whose help lists its options by panel (PANELS' order, the rest last as
    "Options"), with each value named by what it is (N, NUMBER, TEXT, PATH) and its arguments
    by name in the usage line (INPUT...)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument" and param.metavar is None:
                param.metavar = (param.name or "input").upper()
            elif param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = f"{param.metavar}" if param.required else f"[{param.metavar}]"
                pieces.append(name + ("..." if param.nargs != 1 else ""))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":  # its name once, not with its type after it
                dots = "..." if param.nargs != 1 else ""
                sections.setdefault("Arguments", []).append((f"{param.metavar}{dots}", record[1]))
            else:
                sections.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        order = ["Arguments", *PANELS, "Options"]
        for name in sorted(sections, key=lambda n: order.index(n) if n in order else len(order)):
            with formatter.section(name):
                formatter.write_dl(sections[name])


def setup_logging(quiet: bool, verbose: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ffbatch: %(message)s"))
    root = logging.getLogger("ffbatch")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # SVT-AV1 prints a banner of some 20 lines at its info level straight to stderr; it reads
    # SVT_LOG as an encoder opens: its errors only, unless -v
    if not verbose:
        os.environ.setdefault("SVT_LOG", "1")


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ffbatch {__version__} (render revision {RENDER_REVISION})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


# --- the option table as typer's parameters -------------------------------------------------

Command = TypeVar("Command", bound=Callable[..., Any])


def typer_info(option: Option) -> Any:
    """typer's Option (or Argument) for one entry of the option table (settings/options.py)."""
    if option.argument:
        return typer.Argument(help=option.help, metavar=option.metavar, show_default=option.show_default)
    return typer.Option(
        *option.flags, help=option.help, rich_help_panel=option.panel, show_default=option.show_default
    )


def with_options(*options: Option) -> Callable[[Command], Command]:
    """Give a command `options` as its parameters (after its typer.Context): typer reads them
    from the signature set here, so an option is declared once, in the table."""

    def parameter(option: Option) -> inspect.Parameter:
        default = option.cli_default
        return inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[option.kind, typer_info(option)],
            default=inspect.Parameter.empty if default is REQUIRED else default,
        )

    def attach(command: Command) -> Command:
        context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        command.__signature__ = inspect.Signature([context, *map(parameter, options)])  # type: ignore[attr-defined]
        return command

    return attach


# render's options other commands share by name
VerboseOpt = Annotated[bool, typer_info(RENDER_OPTIONS["verbose"])]
ModelsDirOpt = Annotated[Path | None, typer_info(RENDER_OPTIONS["models_dir"])]


# --- FaceFusion's option names --------------------------------------------------------------

# FaceFusion 3.x's name → (ffbatch's, how its values map): "one" value, "list" (FaceFusion's
# space-separated values joined by commas), "repeat" (one ffbatch option per value), "size"
# (FaceFusion's WxH resolution → the width), "sqrt" (FaceFusion's detector score, cls·obj, on
# ffbatch's √(cls·obj) scale), "processors" and "providers" (tools/facefusion_job.py), "input"
# (the positional input). Accepted on render
# and preview, rewritten before parsing, hidden from the main list, listed in render's help.
FACEFUSION_ALIASES: dict[str, tuple[str, str]] = {
    "-t": ("", "input"),
    "--target": ("", "input"),
    "--target-path": ("", "input"),
    "--source-paths": ("--source", "repeat"),
    "--output-path": ("--output", "one"),
    "--face-selector-mode": ("--faces", "one"),
    "--face-selector-order": ("--face-order", "one"),
    "--reference-face-distance": ("--reference-distance", "one"),
    "--reference-frame-number": ("--reference-frame", "one"),
    "--face-detector-score": ("--score-threshold", "sqrt"),
    "--face-detector-angles": ("--detector-angles", "list"),
    "--face-detector-margin": ("--detector-margin", "list"),
    "--face-swapper-model": ("--swapper-model", "one"),
    "--face-swapper-weight": ("--swapper-weight", "one"),
    "--face-swapper-pixel-boost": ("--pixel-boost", "size"),
    "--face-enhancer-model": ("--enhancer-model", "one"),
    "--face-enhancer-blend": ("--enhancer-blend", "one"),
    "--face-enhancer-weight": ("--enhancer-weight", "one"),
    "--face-mask-types": ("--mask", "list"),
    "--face-mask-blur": ("--mask-blur", "one"),
    "--face-mask-padding": ("--mask-padding", "list"),
    "--face-mask-regions": ("--mask-regions", "list"),
    "--face-mask-areas": ("--mask-areas", "list"),
    "--face-occluder-model": ("--occluder-model", "one"),
    "--face-parser-model": ("--parser-model", "one"),
    "--output-video-encoder": ("--encoder", "one"),
    "--output-video-quality": ("--quality", "one"),
    "--output-video-preset": ("--preset", "one"),
    "--processors": ("--swapper", "processors"),
    "--execution-providers": ("--backend", "providers"),
}
# FaceFusion's names that are ffbatch's own options too (same name, same meaning)
FACEFUSION_SAME = frozenset(
    {
        "--face-detector-model",
        "--face-detector-size",
        "--face-landmarker-model",
        "--face-landmarker-score",
        "--face-selector-gender",
        "--face-selector-race",
        "--face-selector-age-start",
        "--face-selector-age-end",
        "--reference-face-position",
    }
)
# FaceFusion names whose meaning differs here: refused with what to use instead
FACEFUSION_REFUSED = {
    "--trim-frame-start": "FaceFusion trims the output (audio kept); here --frames START:END renders a "
    "video-only segment for `ffbatch concat`, so it is not the same option",
    "--trim-frame-end": "see --trim-frame-start",
}


def facefusion_argv(argv: list[str]) -> list[str]:
    """render / preview arguments with FaceFusion's option names rewritten to ffbatch's
    (FaceFusion's `headless-run` is a render, without a tracker as FaceFusion's default)."""
    if argv and argv[0] == "headless-run":
        argv = ["render", *NO_TRACKER, *argv[1:]]
    if not argv or argv[0] not in ("render", "preview"):
        return argv
    out, inputs, i = [argv[0]], [], 1
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in FACEFUSION_REFUSED:
            raise InputError(f"{name} is not accepted: {FACEFUSION_REFUSED[name]}")
        if name not in FACEFUSION_ALIASES:
            out.append(token)
            i += 1
            continue
        target, kind = FACEFUSION_ALIASES[name]
        values = [inline] if eq else []
        i += 1
        many = kind in ("list", "repeat", "input", "processors", "providers")
        while i < len(argv) and (not values or many):
            if argv[i].startswith("-") and not _is_number(argv[i]):
                break
            values.append(argv[i])
            i += 1
            if kind in ("one", "size"):
                break
        if not values:
            raise InputError(f"{name} (FaceFusion's name for {target or 'the input'}) needs a value")
        if kind == "input":
            inputs += values
        elif kind == "repeat":
            for v in values:
                out += [target, v]
        elif kind == "list":
            out += [target, ",".join(values)]
        elif kind == "size":
            out += [target, values[0].lower().split("x", 1)[0]]
        elif kind == "sqrt":  # FaceFusion's detector score is cls·obj, ffbatch's √(cls·obj)
            out += [target, f"{math.sqrt(float(values[0])):.6g}" if _is_number(values[0]) else values[0]]
        elif kind == "processors":
            out += processor_options(values, argv)
        elif kind == "providers":
            out += [target, backend_for(values)]
        else:
            out += [target, values[0]]
    return out + inputs


def facefusion_job_argvs(argv: list[str]) -> tuple[Job, list[str]] | None:
    """`render --facefusion-job JOB [options]` → the job read (its steps as FaceFusion's command
    lines, rewritten later like any other) and the other options, added to each step; None when
    the command is not that."""
    if not argv or argv[0] != "render":
        return None
    rest, job = [], None
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--facefusion-job" or token.startswith("--facefusion-job="):
            if token.startswith("--facefusion-job="):
                job = token.partition("=")[2]
            elif i + 1 < len(argv):
                job, i = argv[i + 1], i + 1
            else:
                raise InputError("--facefusion-job needs a job file (FaceFusion's JSON)")
        else:
            rest.append(token)
        i += 1
    if job is None:
        return None
    return read_facefusion_job(Path(job), frozenset(FACEFUSION_ALIASES) | FACEFUSION_SAME), rest


def run_facefusion_job(found: tuple[Job, list[str]]) -> int:
    """The job's steps in order, each its own render (with several steps, --report R writes
    R-<step>), then its outputs made from the steps' files (tools/facefusion_job.py)."""
    job, rest = found
    setup_logging("-q" in rest or "--quiet" in rest, "-v" in rest or "--verbose" in rest)
    check_outputs(job, "--overwrite" in rest)

    def run_step(step: JobStep) -> int:
        extra = list(rest)
        if len(job.steps) > 1 and "--report" in extra[:-1]:
            at = extra.index("--report") + 1
            report = Path(extra[at])
            extra[at] = str(report.with_name(f"{report.stem}-{step.index}{report.suffix}"))
        argv = ["render", *step.argv, *extra, "--overwrite"]  # the step's own file, as FaceFusion's
        try:  # the step prints its file's name, which is gone once the job ends; the job prints its outputs
            with contextlib.redirect_stdout(io.StringIO()):
                return app(args=facefusion_argv(argv), standalone_mode=False, prog_name="ffbatch") or 0
        except typer.Exit as exc:
            return exc.exit_code

    code = run_job(job, run_step)
    if code == 0:
        for output in job.outputs():
            typer.echo(str(output))
    return code


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def facefusion_help() -> str:
    """render's help section listing FaceFusion's names (one source: the table above), one per
    line and never rewrapped (click's \\b), so no name is split."""
    width = max(map(len, FACEFUSION_ALIASES)) + 2
    lines = [
        f"{ff:<{width}}{ours or 'INPUT (the positional input)'}"
        for ff, (ours, _) in FACEFUSION_ALIASES.items()
    ]
    lines += [f"{ff:<{width}}refused: it means something else here" for ff in FACEFUSION_REFUSED]
    return "FaceFusion's option names, accepted by render and preview:\n\n\b\n" + "\n".join(lines)


def given_options(ctx: typer.Context) -> set[str]:
    """The parameters the user set on the command line (the rest kept their defaults).

    The source is told by its name: typer carries its own copy of click, whose ParameterSource
    is not click's (and click itself is no dependency of ffbatch)."""
    sources = {name: ctx.get_parameter_source(name) for name in ctx.params}
    return {name for name, source in sources.items() if source is not None and source.name != "DEFAULT"}


@app.command(cls=PanelledCommand, epilog=facefusion_help())
@with_options(*RENDER)
def render(ctx: typer.Context, **params: Any) -> None:
    """Swap the face(s) of SOURCE into every frame of INPUT and write OUTPUT.

    Examples:

    \b
      ffbatch render in.mp4 -s face.jpg -o out.mp4
      ffbatch render shots/*.mov -s face.jpg --output-dir out/ --encoder prores_ks
      ffbatch render in.mp4 -s face.jpg -o out.mp4 --swapper-model inswapper_128
      ffbatch render a.####.png -s face.jpg -o b.####.png --frame-range 1001-1100
    """
    setup_logging(params["quiet"], params["verbose"])
    if params["facefusion_job"] is not None:  # read before parsing (main); here only through the app itself
        raise InputError("--facefusion-job runs through `ffbatch render --facefusion-job JOB`")
    inputs, output, frames = farm_paths_and_range(
        params["inputs"], params["output"], params["frames"], params["frame_range"]
    )
    ctx.params.update(inputs=inputs, output=output)  # shot.####.exr is shot.%04d.exr from here on
    settings, gpus_of_run = render_settings(ctx.params, given=given_options(ctx))
    check_matte_run(settings, len(inputs))
    if gpus_of_run:
        render_on_several_gpus(
            settings, gpus_of_run, inputs=list(inputs), output=output, frames=frames, ray=params["ray"]
        )
        return
    code = run_render_command(
        settings,
        list(inputs),
        output=output,
        output_dir=params["output_dir"],
        output_pattern=params["output_pattern"],
        frames=frames,
        ray=params["ray"],
        ray_workers=params["ray_workers"],
    )
    if code:
        raise typer.Exit(code)


@app.command(cls=PanelledCommand)
def concat(
    segments: Annotated[
        list[Path],
        typer.Argument(help="Segments made by `render --frames`, in any order.", show_default=False),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The joined video; container from its extension.")
    ],
    audio_from: Annotated[
        Path | None, typer.Option(help="Copy the audio of this file (the original input), in sync.")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output file.")] = False,
    clean: Annotated[
        bool, typer.Option(help="Delete the segments (and their emptied work directory) once joined.")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Write a JSON report here (also for a failed join), merged with every --task-report."
        ),
    ] = None,
    task_report: Annotated[
        list[Path] | None,
        typer.Option(
            help="A chunk task's report (repeatable), merged into --report (`ffbatch plan` gives them)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings only.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Join segments by stream copy (no re-encode) and mux the audio of --audio-from back in."""
    setup_logging(quiet, verbose)
    concat_with_report(
        list(segments),
        output,
        audio_from=audio_from,
        overwrite=overwrite,
        clean=clean,
        report=report,
        task_reports=list(task_report or []),
    )
    typer.echo(str(output))


@app.command(cls=PanelledCommand, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@with_options(*PLAN)
def plan(ctx: typer.Context, **params: Any) -> None:
    """Print the commands that render INPUT(s) in chunks on a farm, and join them.

    Examples:

    \b
      ffbatch plan in.mov -o out.mov -s face.jpg --chunk-frames 500 > jobs.sh
      ffbatch plan in.mov -o out.mov -s face.jpg --format openjd > job.yaml
      ffbatch plan shots/*.mov --output-dir out/ -s face.jpg --format slurm
    """
    setup_logging(True, False)
    text = plan_command(
        list(params["inputs"]),
        render_command=typer.main.get_command(app).commands["render"],  # type: ignore[attr-defined]  # a Group
        chunk_frames=params["chunk_frames"],
        fmt=params["format"],
        output=params["output"],
        output_dir=params["output_dir"],
        output_pattern=params["output_pattern"],
        ffbatch=params["ffbatch"],
        sbatch=params["sbatch"],
        overwrite=params["overwrite"],
    )
    typer.echo(text, nl=False)


@app.command(cls=PanelledCommand)
@with_options(*PREVIEW)
def preview(ctx: typer.Context, **params: Any) -> None:
    """Write a before/after contact sheet of a few frames of INPUT.

    The swap options are render's (same names, defaults and checks), and each frame is
    rendered with the face tracks' history a render gives it: a preview shows what
    `ffbatch render` with the same options writes at those times.

    Examples:

    \b
      ffbatch preview in.mp4 -s face.jpg -o sheet.png --crops
      ffbatch preview in.mp4 -s face.jpg -o sheet.png --frames 8 --faces one
    """
    setup_logging(params["quiet"], False)
    frames, output = params["frames"], params["output"]
    if not 1 <= frames <= 32:
        raise InputError(f"--frames must be between 1 and 32 (got {frames})")
    # render's table: the swap, detector and source options mean and check the same (preview's
    # own, --frames and --crops, fill no render setting)
    settings, _ = render_settings({**ctx.params, "workers": 1}, given=given_options(ctx) | {"workers"})
    preview_command(settings, frames, output, params["crops"])
    typer.echo(str(output))


@models_app.command("list", cls=PanelledCommand)
def models_list() -> None:
    """Every model and asset ffbatch knows, with its state in the store."""
    for line in tools_models.list_lines():
        typer.echo(line)


@models_app.command("fetch", cls=PanelledCommand)
def models_fetch(
    names: Annotated[list[str] | None, typer.Argument(help="Model names (default: the default set).")] = None,
    force: Annotated[bool, typer.Option(help="Fetch again even if present and valid.")] = False,
) -> None:
    """Fetch models (verified by sha256) into the store."""
    setup_logging(False, False)
    for line in tools_models.fetch(names, force):
        typer.echo(line)


@models_app.command("verify", cls=PanelledCommand)
def models_verify(
    names: Annotated[
        list[str] | None, typer.Argument(help="Model names (default: all in the store).")
    ] = None,
) -> None:
    """Check the sha256 of models in the store; exit 2 if any is wrong."""
    lines, ok = tools_models.verify(names)
    for line in lines:
        typer.echo(line)
    if not ok:
        raise typer.Exit(EXIT_USAGE)


@models_app.command("prepare", cls=PanelledCommand)
def models_prepare(
    name: Annotated[str, typer.Argument(help="A learned model, e.g. inswapper_128.")],
    fp16: Annotated[bool, typer.Option("--fp16", help="Also make a float16 variant (fp32 I/O).")] = False,
    int8: Annotated[bool, typer.Option("--int8", help="Also make an INT8 Q/DQ variant.")] = False,
    calibration_dir: Annotated[
        Path | None, typer.Option(help="Aligned face crops (ffbatch models calibration-crops), >= 500.")
    ] = None,
    models_dir: Annotated[Path | None, typer.Option(help="Look here for the original file first.")] = None,
    force: Annotated[bool, typer.Option(help="Make the variants again even if present.")] = False,
) -> None:
    """Make NAME's dynamic-batch copy (checked against single runs) and optional fp16 / INT8 variants.

    Each lands beside the original in the store with its own sha256; its sidecar JSON says how it was
    made and, for fp16 / INT8, its largest deviation from float32.
    """
    setup_logging(False, False)
    lines = tools_models.prepare(
        name, fp16=fp16, int8=int8, calibration_dir=calibration_dir, models_dir=models_dir, force=force
    )
    for line in lines:
        typer.echo(line)


@models_app.command("calibration-crops", cls=PanelledCommand)
def models_calibration_crops(
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for the crops.")],
    sources: Annotated[
        list[Path] | None, typer.Argument(help="Videos or photos to take faces from.", show_default=False)
    ] = None,
    count: Annotated[int, typer.Option(help="How many crops (>= 500 recommended for INT8).")] = 500,
    photos: Annotated[bool, typer.Option(help="Start with the embedded test photos' faces.")] = True,
    models_dir: ModelsDirOpt = None,
) -> None:
    """Write aligned crops of real faces (ffhq_512 template, 512 px) and their recogniser embeddings
    from the embedded photos and VIDEO_OR_PHOTOS, for checking and calibrating fp16 / INT8 variants."""
    setup_logging(False, False)
    tools_models.calibration_crops(sources or [], output, count, models_dir, photos=photos)
    typer.echo(str(output))


@app.command(cls=PanelledCommand)
def doctor() -> None:
    """What this machine offers: backends, GPUs, codecs, and what `auto` would choose."""
    for line in tools_doctor.report_lines():
        typer.echo(line)


EnginesDirOpt = Annotated[
    Path | None, typer.Option(help="Where engines live (default: $FFBATCH_HOME/engines).")
]


@engines_app.command("build", cls=PanelledCommand)
def engines_build(
    names: Annotated[
        list[str] | None, typer.Argument(help="Models (default: the detector and the face mesh).")
    ] = None,
    max_batch: Annotated[int, typer.Option(help="Largest frame batch of the optimisation profile.")] = 16,
    precision: Annotated[
        str, typer.Option(help="auto (fp16 if it agrees with fp32) | fp32 | fp16 | int8.")
    ] = "auto",
    onnx: Annotated[Path | None, typer.Option(help="int8: the Q/DQ ONNX to build from (one model).")] = None,
    engines_dir: EnginesDirOpt = None,
    gpu: Annotated[int, typer.Option(help="CUDA device to build for.")] = 0,
    force: Annotated[bool, typer.Option(help="Rebuild even if a matching engine exists.")] = False,
    models_dir: ModelsDirOpt = None,
) -> None:
    """Build engines for this GPU and TensorRT (exit 2 without them)."""
    setup_logging(False, False)
    device = tools_engines.engine_device(
        gpu=gpu, precision=precision, max_batch=max_batch, engines_dir=engines_dir
    )
    for line in tools_engines.build_engines(names, device, onnx=onnx, force=force, models_dir=models_dir):
        typer.echo(line)


@engines_app.command("list", cls=PanelledCommand)
def engines_list(engines_dir: EnginesDirOpt = None) -> None:
    """Stored engines: model, precision, batch profile, GPU, TensorRT, and whether they fit here."""
    for line in tools_engines.list_engines(tools_engines.engine_device(engines_dir=engines_dir)):
        typer.echo(line)


@engines_app.command("verify", cls=PanelledCommand)
def engines_verify(engines_dir: EnginesDirOpt = None) -> None:
    """Check every engine's bytes, its fit to this GPU/TensorRT and its outputs; exit 2 if any fails."""
    lines, ok = tools_engines.verify_engines(tools_engines.engine_device(engines_dir=engines_dir))
    for line in lines:
        typer.echo(line)
    if not ok:
        raise typer.Exit(EXIT_USAGE)


def _fill_closed_std_fds() -> None:
    """A script that closed stdout (`>&-`) must not have the next file ffbatch opens (a lock, an
    output) become fd 1, where a library's print would land: closed fds 0-2 get /dev/null."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            got = os.open(os.devnull, os.O_RDWR)
            if got != fd:  # a lower fd was free too: it gets /dev/null on the next pass
                os.dup2(got, fd)
                os.close(got)


@contextlib.contextmanager
def _private_tmpdir():
    """Libraries' temporary files go into a folder of this run's own, removed as it ends:
    onnxruntime's telemetry writes `.ses` into $TMPDIR as it is imported. Ray keeps its own."""
    saved = {k: os.environ.get(k) for k in ("TMPDIR", "RAY_TMPDIR")}
    base = tempfile.gettempdir()
    try:
        mine = tempfile.mkdtemp(prefix=".ffbatch-tmp-", dir=base)
    except OSError:  # a TMPDIR that cannot be written: leave it as it is
        yield
        return
    os.environ["TMPDIR"], os.environ["RAY_TMPDIR"] = mine, saved["RAY_TMPDIR"] or base
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(mine, ignore_errors=True)


def _check_home(given: list[str]) -> None:
    """`$FFBATCH_HOME` naming a file is the user's to fix (exit 2), not an internal error."""
    home = paths.ffbatch_home()
    if given[:1] not in (["--version"], ["--help"]) and home.exists() and not home.is_dir():
        raise InputError(f"FFBATCH_HOME {home} is a file, not a directory; point it at a folder or unset it")


# ffmpeg's options typed out of habit (`ffbatch` is not a drop-in ffmpeg): what ffbatch calls them
FFMPEG_HABITS = {
    "-i": "the input is the first argument: ffbatch render IN.mp4 -s FACE.jpg -o OUT.mp4",
    "-y": "--overwrite",
    "-c": "--encoder (video), --audio-codec (audio)",
    "-c:v": "--encoder",
    "-codec:v": "--encoder",
    "-vcodec": "--encoder",
    "-c:a": "--audio-codec",
    "-acodec": "--audio-codec",
    "-an": "--no-audio",
    "-crf": "--crf",
    "-preset": "--preset",
    "-profile:v": "--profile",
    "-pix_fmt": "--pix-fmt",
    "-b:v": "--bitrate",
    "-b:a": "--audio-bitrate",
    "-g": "--gop",
    "-r": "--fps (an image sequence's rate; a video keeps its own timing)",
    "-ss": "--frames START:END or --frame-range FIRST-LAST",
    "-t": "--frames START:END or --frame-range FIRST-LAST",
    "-to": "--frames START:END or --frame-range FIRST-LAST",
    "-frames:v": "--frames START:END or --frame-range FIRST-LAST",
    "-vframes": "--frames START:END or --frame-range FIRST-LAST",
}


def ffmpeg_hint(argv: list[str]) -> str:
    """'; ffmpeg's -y is --overwrite here' for the first of ffmpeg's options in `argv`, or ''."""
    for token in argv:
        if token == "--":
            break
        if token in FFMPEG_HABITS:
            said = FFMPEG_HABITS[token]
            return f"; ffmpeg's {token} is {said} here" if said.startswith("--") else f"; {said}"
    return ""


def _stdout_problem(exc: BaseException) -> str:
    """Why standard output did not take what ffbatch wrote to it, or '': a reader that went away
    (`| true`: click then swaps stdout for a wrapper and exits 1) or a full disk (`> /dev/full`:
    the OSError comes out of click's echo or stdout.say). Standard output then becomes /dev/null, so that
    Python's own flush at exit does not fail again."""
    if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
        problem = "the reader went away (broken pipe)"
    elif isinstance(exc, OSError) and any(
        (frame.f_code.co_name == "echo" and "click" in frame.f_code.co_filename)
        or frame.f_code is say.__code__
        for frame, _ in traceback.walk_tb(exc.__traceback__)
    ):
        problem = exc.strerror or str(exc)
    else:
        return ""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    return problem


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps every failure to a message on stderr and an exit status."""
    debug = bool(os.environ.get("FFBATCH_DEBUG"))
    _fill_closed_std_fds()
    for name, fd in (("stdout", 1), ("stderr", 2)):  # closed at start-up: Python left None there
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 - the process's own
    forget_signals()
    # the run's one signal handler set, from before anything loads; put back as main() ends (a
    # caller in-process, a test, keeps its own)
    owner = contextlib.ExitStack()
    owner.enter_context(signal_handlers(process=argv is None))  # a second signal: exit at once
    try:
        owner.enter_context(_private_tmpdir())
        given = list(sys.argv[1:] if argv is None else argv)
        owner.enter_context(running_command(given))  # the report's command line
        _check_home(given)
        runs = facefusion_job_argvs(given)
        if runs is not None:
            code = run_facefusion_job(runs)
        else:
            code = app(args=facefusion_argv(given), standalone_mode=False, prog_name="ffbatch")
            if code == EXIT_INTERRUPTED:  # typer turns a Ctrl-C into a silent 130; commands raise
                print("ffbatch: interrupted", file=sys.stderr)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        print("ffbatch: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except typer.TyperException as exc:  # usage errors: bad option, missing argument
        hint = ""
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        message = exc.format_message()
        message += ffmpeg_hint(sys.argv[1:] if argv is None else argv) if message else ""
        if message:  # empty when the help was shown for a bare command
            print(f"ffbatch: error: {message}{hint}", file=sys.stderr)
        code = exc.exit_code
    except FfbatchError as exc:
        if debug:
            log.exception("details")
        print(f"ffbatch: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("ffbatch: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except SystemExit as exc:
        problem = _stdout_problem(exc)
        if not problem:
            raise
        print(f"ffbatch: error: cannot write to standard output: {problem}", file=sys.stderr)
        code = EXIT_USAGE
    except Exception as exc:  # the last line of defence: a message, not a traceback
        problem = _stdout_problem(exc)
        if problem:
            print(f"ffbatch: error: cannot write to standard output: {problem}", file=sys.stderr)
            sys.exit(EXIT_USAGE)
        stopped = signal_behind(exc)
        if stopped is not None:
            print(f"ffbatch: error: {stopped}", file=sys.stderr)
            sys.exit(stopped.exit_code)
        if debug:
            import traceback

            traceback.print_exc()
        print(
            f"ffbatch: internal error: {type(exc).__name__}: {exc} (set FFBATCH_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        code = EXIT_INTERNAL
    finally:  # a signal that landed before a temporary file's own clean-up could run
        remove_live_temps()
        forget_signals()
        owner.close()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
