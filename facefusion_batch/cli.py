"""The `ffbatch` command line: render, preview, models, doctor.

Exit codes: 0 done, 1 internal error, 2 bad input or usage, 130 interrupted
(SIGINT), 143 terminated (SIGTERM). Logs go to stderr; stdout carries only
what a script may want to read (the output path, model lists, JSON).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import shutil
import sys
import tempfile
import traceback
import typing
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
import typer.main

from facefusion_batch import RENDER_REVISION, __version__, paths
from facefusion_batch.config import (
    DEFAULT_FACE_PRESENCE,
    DEFAULT_LIP_SHADOW,
    check_matte_run,
    render_settings,
)
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
from facefusion_batch.farm.jobs import farm_paths_and_range, run_render_command
from facefusion_batch.farm.multi_gpu import render_on_several_gpus
from facefusion_batch.farm.plan import plan_command
from facefusion_batch.farm.task_reports import concat_with_report
from facefusion_batch.fsutil import remove_live_temps
from facefusion_batch.tools import doctor as tools_doctor
from facefusion_batch.tools import engines as tools_engines
from facefusion_batch.tools import models as tools_models
from facefusion_batch.tools.facefusion_job import (
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

# the panels render, preview and plan list their options in (typer's rich_help_panel, drawn as
# plain sections by PanelledCommand: rich tables cut long option names at 80 columns)
PANEL_IO = "Input and output"
PANEL_SWAP = "Swap"
PANEL_FACES = "Faces"
PANEL_QUALITY = "Encoding and quality"
PANEL_FARM = "Farm: ranges, chunks, resume"
PANEL_GPU = "Device and GPU"
PANEL_FACEFUSION = "FaceFusion names"
PANELS = (PANEL_IO, PANEL_SWAP, PANEL_FACES, PANEL_QUALITY, PANEL_FARM, PANEL_GPU, PANEL_FACEFUSION)
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


SourceOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--source",
        "-s",
        help="Photo of the face to put in; "
        "repeat for several photos of the same person "
        "(each target face uses the closest head pose). Required unless --map is given.",
        show_default=False,
        rich_help_panel=PANEL_IO,
    ),
]
GenderOpt = Annotated[
    str | None,
    typer.Option(
        help="Only faces of this gender: female, male, auto (the --source face's). Needs "
        "FaceFusion's fairface model.",
        show_default=False,
        rich_help_panel=PANEL_FACES,
    ),
]
RaceOpt = Annotated[
    str | None,
    typer.Option(
        help="Only faces of this race (FaceFusion's classes): white, black, latino, asian, "
        "indian, arabic, auto. Needs fairface.",
        show_default=False,
        rich_help_panel=PANEL_FACES,
    ),
]
AgeStartOpt = Annotated[
    int | None,
    typer.Option(
        help="Only faces this old or older (0-100). Needs fairface.",
        show_default=False,
        rich_help_panel=PANEL_FACES,
    ),
]
AgeEndOpt = Annotated[
    int | None,
    typer.Option(
        help="Only faces younger than this (0-100). Needs fairface.",
        show_default=False,
        rich_help_panel=PANEL_FACES,
    ),
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        help="REF=SRC: faces of the person in photo REF get the face in photo SRC; repeat for each "
        "person. One choice per face track; faces near no REF are left alone (--map-unmatched).",
        show_default=False,
        rich_help_panel=PANEL_FACES,
    ),
]
MapUnmatchedOpt = Annotated[
    str,
    typer.Option(
        help="--map, a face near no reference: skip (left alone), nearest (the nearest reference's "
        "source anyway), source (swapped with --source).",
        rich_help_panel=PANEL_FACES,
    ),
]
RecogniserOpt = Annotated[
    str,
    typer.Option(
        help="Who a face is, for --faces reference and --map: arcface (arcface_w600k_r50), dlib "
        "(pip install 'ffbatch[dlib]'), auto (arcface if its file is here, else dlib). "
        "It only chooses faces; it never feeds the swap.",
        rich_help_panel=PANEL_FACES,
    ),
]

# options render and preview share: defined once, so their names, help and types agree
FacesOpt = Annotated[
    str,
    typer.Option(
        help="many: every face; one: the largest face of each frame; "
        "reference: the faces of the person in --reference-face / --reference-frame.",
        rich_help_panel=PANEL_FACES,
    ),
]
BlendOpt = Annotated[str, typer.Option(help="multiband | feather | poisson.", rich_help_panel=PANEL_SWAP)]
EyesMouthOpt = Annotated[
    str,
    typer.Option(
        help="eyes: the source's eyes, following the target's eyelids (a shut or lowered eye takes "
        "the source's eye drawn shut), and the target's inner mouth (default); target: keep the "
        "target's eyes and mouth; source: paint the source's both.",
        rich_help_panel=PANEL_SWAP,
    ),
]
ColourOpt = Annotated[
    str,
    typer.Option(
        "--colour",
        help="local | global | none: how the face is recoloured to the target's skin and light.",
        rich_help_panel=PANEL_SWAP,
    ),
]
LipShadowOpt = Annotated[
    float,
    typer.Option(
        help="Classical swap, 0–1: how far the shadow under a top-lit source's lower lip is lifted "
        "toward its chin's skin. 1 removes the grey goatee it can leave on pale faces, at some cost "
        "in likeness; 0 keeps the photo as it is.",
        rich_help_panel=PANEL_SWAP,
    ),
]
SwapperOpt = Annotated[
    str,
    typer.Option(
        help="auto: the learned swapper when its model files are present, else classical; "
        "classical; learned (fetched if missing); none: no swap, --enhancer-model alone.",
        rich_help_panel=PANEL_SWAP,
    ),
]
SwapperModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Learned swapper, FaceFusion's name: inswapper_128, hyperswap_1a_256, simswap_256, "
        "ghost_1_256, blendswap_256, uniface_256, ... (a prepared variant: NAME@fp16).",
        rich_help_panel=PANEL_SWAP,
    ),
]
SwapperWeightOpt = Annotated[
    float,
    typer.Option(
        help="0–1; 0.5 the source identity alone, lower keeps more of the target's.",
        rich_help_panel=PANEL_SWAP,
    ),
]
PixelBoostOpt = Annotated[
    int | None,
    typer.Option(
        help="Learned swapper crop size, a multiple of its input (128-px models: 256, 512).",
        rich_help_panel=PANEL_SWAP,
    ),
]
EnhancerModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Face enhancer after the swap: gfpgan_1.4, gpen_bfr_512, codeformer...",
        rich_help_panel=PANEL_SWAP,
    ),
]
EnhancerBlendOpt = Annotated[
    int, typer.Option(help="Percent of the enhanced face kept, 0–100.", rich_help_panel=PANEL_SWAP)
]
EnhancerWeightOpt = Annotated[
    float,
    typer.Option(
        help="0–1: codeformer's fidelity input (FaceFusion's default 0.5); others ignore it.",
        rich_help_panel=PANEL_SWAP,
    ),
]
EmbeddingConventionOpt = Annotated[
    str | None,
    typer.Option(
        help="insightface | facefusion: how the source identity is fed. Default: the model "
        "publisher's (insightface for inswapper: latent renormalised; facefusion for the rest). "
        "facefusion reproduces FaceFusion 3.x's latent, --swapper-weight and several --source.",
        rich_help_panel=PANEL_SWAP,
    ),
]
FaceDetectorModelOpt = Annotated[
    str | None,
    typer.Option(
        help="FaceFusion's face detector: yolo_face | retinaface | scrfd | yunet | many, at FaceFusion's "
        "sizes, scores and angles, run when its file is here (else ffbatch's YuNet, with a warning). "
        "Default: ffbatch's YuNet. docs/facefusion.md.",
        rich_help_panel=PANEL_FACES,
    ),
]
FaceDetectorSizeOpt = Annotated[
    str | None,
    typer.Option(
        help="With --face-detector-model: its size, WxH (default FaceFusion's largest).",
        rich_help_panel=PANEL_FACES,
    ),
]
DetectorAnglesOpt = Annotated[
    str | None,
    typer.Option(
        help="With --face-detector-model: the frame turned by these angles too, e.g. 0,90 (default 0); "
        "FaceFusion's --face-detector-angles 0 90.",
        rich_help_panel=PANEL_FACES,
    ),
]
FaceLandmarkerModelOpt = Annotated[
    str,
    typer.Option(
        help="With --face-detector-model: FaceFusion's 68-point landmarker that refines the five points, "
        "2dfan4 | peppa_wutz | many, run when its file and fan_68_5's are here."
    ),
]
FaceLandmarkerScoreOpt = Annotated[
    float,
    typer.Option(help="With --face-detector-model: the landmarker's points kept above this score (0: none)."),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="More detail on stderr: settings, decoder, encoder, stream map, batch timings.",
    ),
]
MaskOpt = Annotated[
    str,
    typer.Option(
        help="Swap masks, comma-separated: box, occlusion (xseg; the classical swap too), area "
        "(the face mesh's areas, --mask-areas), region (parser; learned only), skin (classical only: "
        "what is not skin in front of the face stays, no model needed; hands are skin).",
        rich_help_panel=PANEL_SWAP,
    ),
]
MaskAreasOpt = Annotated[
    str | None,
    typer.Option(
        help="--mask area: upper-face, lower-face, mouth, comma-separated (default: all three).",
        rich_help_panel=PANEL_SWAP,
    ),
]
MaskBlurOpt = Annotated[float, typer.Option(help="Box mask blur, 0–1.", rich_help_panel=PANEL_SWAP)]
MaskPaddingOpt = Annotated[
    str, typer.Option(help="Box mask padding, percent: T,R,B,L or one value.", rich_help_panel=PANEL_SWAP)
]
MaskRegionsOpt = Annotated[
    str | None,
    typer.Option(
        help="Region mask classes, comma-separated (default: all face regions).", rich_help_panel=PANEL_SWAP
    ),
]
OccluderModelOpt = Annotated[str, typer.Option(help="xseg_1 | xseg_2 | xseg_3.", rich_help_panel=PANEL_SWAP)]
ParserModelOpt = Annotated[
    str, typer.Option(help="bisenet_resnet_34 | bisenet_resnet_18.", rich_help_panel=PANEL_SWAP)
]
ReferenceFaceOpt = Annotated[
    Path | None,
    typer.Option(
        help="--faces reference: a photo of the person whose faces are swapped.", rich_help_panel=PANEL_FACES
    ),
]
ReferenceFrameOpt = Annotated[
    int | None,
    typer.Option(
        help="--faces reference: take the person from this frame of the input.", rich_help_panel=PANEL_FACES
    ),
]
ReferenceFacePositionOpt = Annotated[
    int,
    typer.Option(help="Which face of the reference picture, 0 = the largest.", rich_help_panel=PANEL_FACES),
]
ReferenceDistanceOpt = Annotated[
    float,
    typer.Option(
        help="Faces within this distance (1 − cos)/2 of the reference are swapped.",
        rich_help_panel=PANEL_FACES,
    ),
]
ScoreThresholdOpt = Annotated[
    float, typer.Option(help="Face detector score threshold.", rich_help_panel=PANEL_FACES)
]
FaceOrderOpt = Annotated[
    str | None,
    typer.Option(
        help="Order of each frame's faces (FaceFusion's): left-right, right-left, top-bottom, "
        "bottom-top, small-large, large-small, best-worst, worst-best. --faces one takes the first.",
        rich_help_panel=PANEL_FACES,
    ),
]
FaceIndexOpt = Annotated[
    list[int] | None,
    typer.Option(
        help="Swap only the face at this position of each frame in --face-order (0 = first; "
        "default order large-small); repeat for several.",
        rich_help_panel=PANEL_FACES,
    ),
]
SmoothingOpt = Annotated[
    float,
    typer.Option(
        help="Landmark smoothing along each face's track (One Euro filter): 0 off, 1 default, "
        "more smooths more (at the cost of lag on fast motion).",
        rich_help_panel=PANEL_FACES,
    ),
]
FacePresenceOpt = Annotated[
    float,
    typer.Option(
        help="How sure the face mesh must be that it sees a face before its track is swapped: its "
        "presence logit, averaged over the track's last frames (0-100). Faces the mesh follows score "
        "16-44; a face the frame cuts so that its eyes are outside scores 0-6 and is left as it is. "
        "Lower swaps weaker faces (blurred, turned, cut), higher leaves more alone.",
        rich_help_panel=PANEL_FACES,
    ),
]
SourceFaceIndexOpt = Annotated[
    int,
    typer.Option(
        help="Which face of each --source photo to use, faces ordered largest first (0: the largest).",
        rich_help_panel=PANEL_SWAP,
    ),
]
BackendOpt = Annotated[str, typer.Option(help="auto | cpu | cuda | tensorrt.", rich_help_panel=PANEL_GPU)]
GpuRuntimeOpt = Annotated[
    str,
    typer.Option(
        help="What runs the models on --backend cuda: torch (default; ffbatch's ONNX interpreter) | "
        "onnxruntime (its CUDA provider with I/O binding; needs onnxruntime-gpu). docs/gpu.md.",
        rich_help_panel=PANEL_GPU,
    ),
]
ModelsDirOpt = Annotated[
    Path | None, typer.Option(help="Look here for model files first.", rich_help_panel=PANEL_SWAP)
]


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
    (FaceFusion's `headless-run` is a render)."""
    if argv and argv[0] == "headless-run":
        argv = ["render", *argv[1:]]
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
def render(
    ctx: typer.Context,
    inputs: Annotated[
        list[Path],
        typer.Argument(
            help="Input video(s), or an image sequence (shot/frame.%04d.dpx).",
            metavar="INPUT",
            show_default=False,
        ),
    ],
    source: SourceOpt = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Output video; container from its "
            "extension. Written to a temporary name, renamed when done.",
            rich_help_panel=PANEL_IO,
        ),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            help="Several inputs: write one output per input into this directory.", rich_help_panel=PANEL_IO
        ),
    ] = None,
    output_pattern: Annotated[
        str,
        typer.Option(
            help="File names in --output-dir: {stem}, {ext} (with its dot), {name}.", rich_help_panel=PANEL_IO
        ),
    ] = "{stem}-swapped{ext}",
    frames: Annotated[
        str | None,
        typer.Option(
            help="Render only frames START:END (0-based, END exclusive) into a video-only "
            "segment for `ffbatch concat`.",
            rich_help_panel=PANEL_FARM,
        ),
    ] = None,
    frame_range: Annotated[
        str | None,
        typer.Option(
            help="Render only frames FIRST-LAST, inclusive, in the input's own numbers (an image "
            "sequence's file numbers; a video's frames from 0) as a farm substitutes them: 1001-1100, "
            "Deadline's <STARTFRAME>-<ENDFRAME>, an OpenJD chunk's range expression. A video output is "
            "a segment for `ffbatch concat`; a sequence output gets the frames at their final names.",
            rich_help_panel=PANEL_FARM,
        ),
    ] = None,
    chunk_frames: Annotated[
        int | None,
        typer.Option(
            help="Render in resumable chunks of N frames (default: chunks of 1500 frames "
            "for videos over 3000 frames; 0: never).",
            rich_help_panel=PANEL_FARM,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            help="Drop saved progress and finished outputs; render everything again.",
            rich_help_panel=PANEL_FARM,
        ),
    ] = False,
    reuse_across_versions: Annotated[
        bool,
        typer.Option(
            help="Reuse saved segments and finished outputs that another ffbatch version or render "
            "revision made with the same settings (said in a warning); by default they are rendered again.",
            rich_help_panel=PANEL_FARM,
        ),
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Render segments on Ray: auto (a running cluster, else a local one) or ADDRESS.",
            rich_help_panel=PANEL_FARM,
        ),
    ] = None,
    ray_workers: Annotated[
        int | None,
        typer.Option(
            help="Ray actors (default: one per GPU; without GPUs, cores / 2).", rich_help_panel=PANEL_FARM
        ),
    ] = None,
    faces: FacesOpt = "many",
    batch_size: Annotated[
        int,
        typer.Option(
            help="Frames per batch (every model call takes the batch). On the CPU 8 is as fast "
            "as larger batches and keeps memory lower.",
            rich_help_panel=PANEL_GPU,
        ),
    ] = 8,
    batch_window_ms: Annotated[
        float,
        typer.Option(
            help="Close a batch this long after its first frame even if not full.", rich_help_panel=PANEL_GPU
        ),
    ] = 200.0,
    workers: Annotated[int, typer.Option(help="Batches processed at once.", rich_help_panel=PANEL_GPU)] = 2,
    threads: Annotated[
        int | None,
        typer.Option(
            help="onnxruntime threads per model (default: cores / workers).", rich_help_panel=PANEL_GPU
        ),
    ] = None,
    backend: BackendOpt = "auto",
    gpu_runtime: GpuRuntimeOpt = "torch",
    streams: Annotated[
        int | None,
        typer.Option(
            help="GPU: CUDA streams, one batch worker each (default from the GPU); CPU: as --workers.",
            rich_help_panel=PANEL_GPU,
        ),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="GPUs to render on at once, one process each, e.g. 0,1 (default: GPU 0).",
            rich_help_panel=PANEL_GPU,
        ),
    ] = None,
    max_batch: Annotated[
        int | None,
        typer.Option(
            help="GPU: most frames per model call (TensorRT profile max, default 16); may use fewer.",
            rich_help_panel=PANEL_GPU,
        ),
    ] = None,
    precision: Annotated[
        str,
        typer.Option(
            help="GPU: auto (fp16 where the model allows) | fp32 | fp16 | int8 (tensorrt); CPU: fp32, or "
            "int8 for learned models whose INT8 variant (ffbatch models prepare --int8) holds on real faces.",
            rich_help_panel=PANEL_GPU,
        ),
    ] = "auto",
    encoder: Annotated[
        str,
        typer.Option(
            help="libx264 | libx264rgb | libx265 | libsvtav1 | prores_ks | dnxhd | ffv1 | h264_nvenc | "
            "hevc_nvenc (docs/formats.md gives the containers each fits).",
            rich_help_panel=PANEL_QUALITY,
        ),
    ] = "libx264",
    crf: Annotated[
        int | None,
        typer.Option(
            help="Constant rate factor 0–51, AV1 0–63 (default 18; 0: lossless x264).",
            rich_help_panel=PANEL_QUALITY,
        ),
    ] = None,
    quality: Annotated[
        int | None, typer.Option(help="0–100 (100 best); instead of --crf.", rich_help_panel=PANEL_QUALITY)
    ] = None,
    preset: Annotated[
        str,
        typer.Option(
            help="Encoder preset (x264 names; NVENC p1–p7; AV1 0–13).", rich_help_panel=PANEL_QUALITY
        ),
    ] = "veryfast",
    profile: Annotated[
        str | None,
        typer.Option(
            help="prores_ks: proxy | lt | 422 | hq | 4444 | 4444xq (default hq); "
            "dnxhd: lb | sq | hq | hqx | 444 (default hq); x264/x265: the encoder's own (high, main10...).",
            rich_help_panel=PANEL_QUALITY,
        ),
    ] = None,
    pix_fmt: Annotated[
        str | None,
        typer.Option(
            help="Output pixel format, e.g. yuv422p10le (default: the input's where the encoder takes it, "
            "else the profile's); also accepts a reduction of bit depth or chroma.",
            rich_help_panel=PANEL_QUALITY,
        ),
    ] = None,
    bitrate: Annotated[
        str | None,
        typer.Option(help="Target bitrate, e.g. 20M (instead of --crf).", rich_help_panel=PANEL_QUALITY),
    ] = None,
    maxrate: Annotated[
        str | None,
        typer.Option(help="Peak bitrate, e.g. 30M (with --bufsize).", rich_help_panel=PANEL_QUALITY),
    ] = None,
    bufsize: Annotated[
        str | None, typer.Option(help="Rate-control buffer, e.g. 60M.", rich_help_panel=PANEL_QUALITY)
    ] = None,
    gop: Annotated[
        int | None,
        typer.Option(help="Keyframe interval in frames (1: all intra).", rich_help_panel=PANEL_QUALITY),
    ] = None,
    encoder_opt: Annotated[
        list[str] | None,
        typer.Option(
            help="KEY=VALUE passed to the encoder as ffmpeg's -KEY VALUE (repeatable), e.g. "
            "x264-params=keyint=24 or vendor=apl0; an option the encoder lacks is exit 2.",
            rich_help_panel=PANEL_QUALITY,
        ),
    ] = None,
    allow_reduce: Annotated[
        bool,
        typer.Option(
            help="Accept an output with less than the input: 10/12-bit or HDR processed at 8 bits, "
            "4:2:2/4:4:4 chroma subsampled. Without it such a render is refused (exit 2).",
            rich_help_panel=PANEL_QUALITY,
        ),
    ] = False,
    audio_codec: Annotated[
        str,
        typer.Option(
            help="copy: every track as it is where the container holds it (else re-encoded, with a "
            "warning); pcm: every track to PCM (not in .mp4); aac: every track to AAC.",
            rich_help_panel=PANEL_IO,
        ),
    ] = "copy",
    audio_bitrate: Annotated[
        str | None, typer.Option(help="--audio-codec aac: bitrate, e.g. 256k.", rich_help_panel=PANEL_IO)
    ] = None,
    audio: Annotated[
        bool,
        typer.Option("--audio/--no-audio", help="Carry the input's audio tracks.", rich_help_panel=PANEL_IO),
    ] = True,
    fps: Annotated[
        float | None,
        typer.Option(
            help="Image sequence input (shot/frame.%04d.dpx): its frame rate (default 24).",
            rich_help_panel=PANEL_IO,
        ),
    ] = None,
    start_number: Annotated[
        int | None,
        typer.Option(
            help="Image sequence output (-o shot/frame.%06d.exr, .dpx .tif .png): the first frame's number "
            "(default: the input sequence's first, or 1001 for a video).",
            rich_help_panel=PANEL_IO,
        ),
    ] = None,
    blend: BlendOpt = "multiband",
    eyes_mouth: EyesMouthOpt = "eyes",
    colour: ColourOpt = "local",
    lip_shadow: LipShadowOpt = DEFAULT_LIP_SHADOW,
    swapper: SwapperOpt = "auto",
    swapper_model: SwapperModelOpt = None,
    swapper_weight: SwapperWeightOpt = 0.5,
    pixel_boost: PixelBoostOpt = None,
    enhancer_model: EnhancerModelOpt = None,
    enhancer_blend: EnhancerBlendOpt = 80,
    enhancer_weight: EnhancerWeightOpt = 0.5,
    embedding_convention: EmbeddingConventionOpt = None,
    face_detector_model: FaceDetectorModelOpt = None,
    face_detector_size: FaceDetectorSizeOpt = None,
    detector_angles: DetectorAnglesOpt = None,
    face_landmarker_model: FaceLandmarkerModelOpt = "2dfan4",
    face_landmarker_score: FaceLandmarkerScoreOpt = 0.5,
    mask: MaskOpt = "box",
    mask_blur: MaskBlurOpt = 0.3,
    mask_padding: MaskPaddingOpt = "0",
    mask_regions: MaskRegionsOpt = None,
    mask_areas: MaskAreasOpt = None,
    occluder_model: OccluderModelOpt = "xseg_1",
    parser_model: ParserModelOpt = "bisenet_resnet_34",
    reference_face: ReferenceFaceOpt = None,
    reference_frame: ReferenceFrameOpt = None,
    reference_face_position: ReferenceFacePositionOpt = 0,
    reference_distance: ReferenceDistanceOpt = 0.3,
    score_threshold: ScoreThresholdOpt = 0.6,
    face_order: FaceOrderOpt = None,
    face_index: FaceIndexOpt = None,
    person_map: MapOpt = None,
    map_unmatched: MapUnmatchedOpt = "skip",
    recogniser: RecogniserOpt = "auto",
    face_selector_gender: GenderOpt = None,
    face_selector_race: RaceOpt = None,
    face_selector_age_start: AgeStartOpt = None,
    face_selector_age_end: AgeEndOpt = None,
    smoothing: SmoothingOpt = 1.0,
    face_presence: FacePresenceOpt = DEFAULT_FACE_PRESENCE,
    on_decode_error: Annotated[
        str,
        typer.Option(
            help="fail: a frame that cannot be decoded fails the job (exit 2); skip: it is replaced by "
            "the last good frame (black before the first) at its own timestamp, counted in the report "
            "(whole-file renders only).",
            rich_help_panel=PANEL_IO,
        ),
    ] = "fail",
    hwaccel: Annotated[
        str,
        typer.Option(
            help="none | cuda: decode on the GPU's video decoder (NVDEC; the pictures are the same, the "
            "CPU is left to the encoder). Exit 2 where there is none.",
            rich_help_panel=PANEL_GPU,
        ),
    ] = "none",
    source_face_index: SourceFaceIndexOpt = 0,
    models_dir: ModelsDirOpt = None,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Write a JSON report here (also for a failed or interrupted job).", rich_help_panel=PANEL_IO
        ),
    ] = None,
    matte_output: Annotated[
        Path | None,
        typer.Option(
            help="Also write the alpha each frame's faces were pasted with (0 elsewhere), frame for frame: "
            "FFV1 grey .mkv/.avi (with --frames: a segment for `concat`) or a grey PNG/TIFF sequence "
            "(matte.%06d.png, numbered by input frame from the output's start number). A template of each "
            "input's name with --output-pattern's fields: 'mattes/{stem}.matte.mkv' (several inputs "
            "need one).",
            rich_help_panel=PANEL_IO,
        ),
    ] = None,
    face_only_output: Annotated[
        Path | None,
        typer.Option(
            help="Also write the swapped faces alone with STRAIGHT (not premultiplied) alpha, the matte's: "
            "over the input it gives the output. ProRes 4444 with alpha in .mov, or an RGBA sequence "
            "face.%06d.exr (half) / .png / .tiff, numbered as --matte-output, a template as it is.",
            rich_help_panel=PANEL_IO,
        ),
    ] = None,
    fail_if_no_faces: Annotated[
        bool,
        typer.Option(
            help="Exit 2, writing nothing, when not one face was swapped.", rich_help_panel=PANEL_FACES
        ),
    ] = False,
    fail_on_truncated: Annotated[
        bool,
        typer.Option(
            help="Exit 2 before rendering when the input's video stops before the end its container "
            "declares (a truncated or damaged file; without it: a warning, and the frames that are there).",
            rich_help_panel=PANEL_IO,
        ),
    ] = False,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing output file.", rich_help_panel=PANEL_IO)
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, warnings only.")] = False,
    verbose: VerboseOpt = False,
    facefusion_job: Annotated[
        Path | None,
        typer.Option(
            help="Run a FaceFusion 3 job file's steps, each as a render (no INPUT: each step "
            "names its target and output); other options apply to every step.",
            show_default=False,
            rich_help_panel=PANEL_FACEFUSION,
        ),
    ] = None,
) -> None:
    """Swap the face(s) of SOURCE into every frame of INPUT and write OUTPUT.

    Examples:

    \b
      ffbatch render in.mp4 -s face.jpg -o out.mp4
      ffbatch render shots/*.mov -s face.jpg --output-dir out/ --encoder prores_ks
      ffbatch render in.mp4 -s face.jpg -o out.mp4 --swapper-model inswapper_128
      ffbatch render a.####.png -s face.jpg -o b.####.png --frame-range 1001-1100
    """
    setup_logging(quiet, verbose)
    if facefusion_job is not None:  # read before parsing (main); here only through the app itself
        raise InputError("--facefusion-job runs through `ffbatch render --facefusion-job JOB`")
    inputs, output, frames = farm_paths_and_range(inputs, output, frames, frame_range)
    ctx.params.update(inputs=inputs, output=output)  # shot.####.exr is shot.%04d.exr from here on
    settings, gpus_of_run = render_settings(ctx.params, given=given_options(ctx))
    check_matte_run(settings, len(inputs))
    if gpus_of_run:
        render_on_several_gpus(
            settings, gpus_of_run, inputs=list(inputs), output=output, frames=frames, ray=ray
        )
        return
    code = run_render_command(
        settings,
        list(inputs),
        output=output,
        output_dir=output_dir,
        output_pattern=output_pattern,
        frames=frames,
        ray=ray,
        ray_workers=ray_workers,
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
def plan(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Input video(s), and the `render` options for every chunk (--source ... --crf ...).",
            metavar="INPUT",
            show_default=False,
        ),
    ],
    chunk_frames: Annotated[
        int, typer.Option(help="Frames per chunk (one farm task each).", rich_help_panel=PANEL_FARM)
    ] = 1500,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="json | shell | slurm | opencue | openjd (Open Job Description).",
            rich_help_panel=PANEL_FARM,
        ),
    ] = "shell",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The joined video (one input).", rich_help_panel=PANEL_IO),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(help="Several inputs: one joined video per input in here.", rich_help_panel=PANEL_IO),
    ] = None,
    output_pattern: Annotated[
        str,
        typer.Option(
            help="File names in --output-dir: {stem}, {ext} (with its dot), {name}.", rich_help_panel=PANEL_IO
        ),
    ] = "{stem}-swapped{ext}",
    ffbatch: Annotated[
        str,
        typer.Option(
            "--ffbatch",
            help="How the farm's hosts run ffbatch, e.g. '/opt/venv/bin/ffbatch'.",
            rich_help_panel=PANEL_FARM,
        ),
    ] = "ffbatch",
    sbatch: Annotated[
        list[str] | None,
        typer.Option(
            help="slurm: an extra #SBATCH line, e.g. --sbatch=--gres=gpu:1.", rich_help_panel=PANEL_FARM
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="The joins replace existing outputs.", rich_help_panel=PANEL_IO)
    ] = False,
) -> None:
    """Print the commands that render INPUT(s) in chunks on a farm, and join them.

    Examples:

    \b
      ffbatch plan in.mov -o out.mov -s face.jpg --chunk-frames 500 > jobs.sh
      ffbatch plan in.mov -o out.mov -s face.jpg --format openjd > job.yaml
      ffbatch plan shots/*.mov --output-dir out/ -s face.jpg --format slurm
    """
    setup_logging(True, False)
    text = plan_command(
        list(inputs),
        render_command=typer.main.get_command(app).commands["render"],  # type: ignore[attr-defined]  # a Group
        chunk_frames=chunk_frames,
        fmt=format,
        output=output,
        output_dir=output_dir,
        output_pattern=output_pattern,
        ffbatch=ffbatch,
        sbatch=sbatch,
        overwrite=overwrite,
    )
    typer.echo(text, nl=False)


@app.command(cls=PanelledCommand)
def preview(
    ctx: typer.Context,
    input: Annotated[Path, typer.Argument(help="Input video.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Contact sheet image (.png).", rich_help_panel=PANEL_IO)
    ],
    source: SourceOpt = None,
    frames: Annotated[int, typer.Option(help="How many frames to sample.", rich_help_panel=PANEL_IO)] = 4,
    overwrite: Annotated[
        bool, typer.Option(help="Replace the sheet if it exists.", rich_help_panel=PANEL_IO)
    ] = False,
    faces: FacesOpt = "many",
    blend: BlendOpt = "multiband",
    eyes_mouth: EyesMouthOpt = "eyes",
    colour: ColourOpt = "local",
    lip_shadow: LipShadowOpt = DEFAULT_LIP_SHADOW,
    swapper: SwapperOpt = "auto",
    swapper_model: SwapperModelOpt = None,
    swapper_weight: SwapperWeightOpt = 0.5,
    pixel_boost: PixelBoostOpt = None,
    enhancer_model: EnhancerModelOpt = None,
    enhancer_blend: EnhancerBlendOpt = 80,
    enhancer_weight: EnhancerWeightOpt = 0.5,
    embedding_convention: EmbeddingConventionOpt = None,
    face_detector_model: FaceDetectorModelOpt = None,
    face_detector_size: FaceDetectorSizeOpt = None,
    detector_angles: DetectorAnglesOpt = None,
    face_landmarker_model: FaceLandmarkerModelOpt = "2dfan4",
    face_landmarker_score: FaceLandmarkerScoreOpt = 0.5,
    mask: MaskOpt = "box",
    mask_blur: MaskBlurOpt = 0.3,
    mask_padding: MaskPaddingOpt = "0",
    mask_regions: MaskRegionsOpt = None,
    mask_areas: MaskAreasOpt = None,
    occluder_model: OccluderModelOpt = "xseg_1",
    parser_model: ParserModelOpt = "bisenet_resnet_34",
    reference_face: ReferenceFaceOpt = None,
    reference_frame: ReferenceFrameOpt = None,
    reference_face_position: ReferenceFacePositionOpt = 0,
    reference_distance: ReferenceDistanceOpt = 0.3,
    score_threshold: ScoreThresholdOpt = 0.6,
    face_order: FaceOrderOpt = None,
    face_index: FaceIndexOpt = None,
    person_map: MapOpt = None,
    map_unmatched: MapUnmatchedOpt = "skip",
    recogniser: RecogniserOpt = "auto",
    face_selector_gender: GenderOpt = None,
    face_selector_race: RaceOpt = None,
    face_selector_age_start: AgeStartOpt = None,
    face_selector_age_end: AgeEndOpt = None,
    smoothing: SmoothingOpt = 1.0,
    face_presence: FacePresenceOpt = DEFAULT_FACE_PRESENCE,
    source_face_index: SourceFaceIndexOpt = 0,
    backend: BackendOpt = "auto",
    gpu_runtime: GpuRuntimeOpt = "torch",
    models_dir: ModelsDirOpt = None,
    crops: Annotated[
        bool,
        typer.Option(
            "--crops",
            help="Also show every swapped face at 1:1 (before | after) under its row: seams, lids "
            "and colour as a render writes them, not scaled to the sheet.",
            rich_help_panel=PANEL_IO,
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Write a before/after contact sheet of a few frames of INPUT.

    The swap options are render's (same names, defaults and checks), and each frame is
    rendered with the face tracks' history a render gives it: a preview shows what
    `ffbatch render` with the same options writes at those times.

    Examples:

    \b
      ffbatch preview in.mp4 -s face.jpg -o sheet.png --crops
      ffbatch preview in.mp4 -s face.jpg -o sheet.png --frames 8 --faces one
    """
    setup_logging(quiet, False)
    if not 1 <= frames <= 32:
        raise InputError(f"--frames must be between 1 and 32 (got {frames})")
    # render's schema: the swap, detector and source options mean and check the same
    params = {k: v for k, v in ctx.params.items() if k != "crops"}
    given = given_options(ctx) - {"crops"} | {"workers"}
    settings, _ = render_settings({**params, "workers": 1}, given=given)
    preview_command(settings, frames, output, crops)
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
    the OSError comes out of click's echo). Standard output then becomes /dev/null, so that
    Python's own flush at exit does not fail again."""
    if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
        problem = "the reader went away (broken pipe)"
    elif isinstance(exc, OSError) and any(
        frame.f_code.co_name == "echo" and "click" in frame.f_code.co_filename
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
    owner.enter_context(signal_handlers())
    try:
        owner.enter_context(_private_tmpdir())
        given = list(sys.argv[1:] if argv is None else argv)
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
