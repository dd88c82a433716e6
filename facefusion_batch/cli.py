"""The `ffbatch` command line: render, preview, models, doctor.

Exit codes: 0 done, 1 internal error, 2 bad input or usage, 130 interrupted
(SIGINT), 143 terminated (SIGTERM). Logs go to stderr; stdout carries only
what a script may want to read (the output path, model lists, JSON).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from facefusion_batch import __version__
from facefusion_batch.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, FfbatchError, InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Batched, offline face swapping for video files.",
)
models_app = typer.Typer(no_args_is_help=True, help="List, fetch and verify model files.")
app.add_typer(models_app, name="models")

log = logging.getLogger("ffbatch")


def setup_logging(quiet: bool, verbose: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ffbatch: %(message)s"))
    root = logging.getLogger("ffbatch")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ffbatch {__version__}")
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
    list[Path],
    typer.Option(
        "--source",
        "-s",
        help="Photo of the face to put in; "
        "repeat for several photos of the same person "
        "(each target face uses the closest head pose).",
    ),
]


def _settings(**kw):
    from facefusion_batch.config import RenderSettings
    from facefusion_batch.faces.detect import DetectorSettings
    from facefusion_batch.swap.classical import ClassicalSettings
    from facefusion_batch.video.writer import EncoderSettings

    try:
        swap = ClassicalSettings(
            blend=kw.pop("blend"), eyes_mouth=kw.pop("eyes_mouth"), colour=kw.pop("colour")
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    encoder = EncoderSettings(
        codec=kw.pop("encoder"), crf=kw.pop("crf"), quality=kw.pop("quality"), preset=kw.pop("preset")
    )
    detector = DetectorSettings(score_threshold=kw.pop("score_threshold"))
    return RenderSettings(swap=swap, encoder=encoder, detector=detector, **kw)


@app.command()
def render(
    input: Annotated[Path, typer.Argument(help="Input video.")],
    source: SourceOpt,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Output video; container from its "
            "extension. Written to a temporary name, renamed when done.",
        ),
    ],
    faces: Annotated[
        str, typer.Option(help="many: every face; one: the largest face of each frame.")
    ] = "many",
    batch_size: Annotated[
        int, typer.Option(help="Frames per batch (every model call takes the batch).")
    ] = 16,
    batch_window_ms: Annotated[
        float, typer.Option(help="Close a batch this long after its first frame even if not full.")
    ] = 200.0,
    workers: Annotated[int, typer.Option(help="Batches processed at once.")] = 2,
    threads: Annotated[
        int | None, typer.Option(help="onnxruntime threads per model [default: cores / workers].")
    ] = None,
    backend: Annotated[str, typer.Option(help="auto | cpu | cuda | tensorrt.")] = "auto",
    encoder: Annotated[str, typer.Option(help="libx264 | libx265 | h264_nvenc | hevc_nvenc.")] = "libx264",
    crf: Annotated[int | None, typer.Option(help="Constant rate factor 0–51 [default 18].")] = None,
    quality: Annotated[int | None, typer.Option(help="0–100 (100 best); instead of --crf.")] = None,
    preset: Annotated[str, typer.Option(help="Encoder preset.")] = "veryfast",
    blend: Annotated[str, typer.Option(help="multiband | feather | poisson.")] = "multiband",
    eyes_mouth: Annotated[
        str,
        typer.Option(
            help="target: keep the target's eyes and mouth (its expression); source: paint the source's."
        ),
    ] = "target",
    colour: Annotated[
        str,
        typer.Option(
            "--colour",
            help="local | global | none: how the face is recoloured to the target's skin and light.",
        ),
    ] = "local",
    score_threshold: Annotated[float, typer.Option(help="Face detector score threshold.")] = 0.6,
    models_dir: Annotated[Path | None, typer.Option(help="Look here for model files first.")] = None,
    report: Annotated[Path | None, typer.Option(help="Write a JSON report here.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output file.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, warnings only.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Swap the face(s) of SOURCE into every frame of INPUT and write OUTPUT."""
    setup_logging(quiet, verbose)
    from facefusion_batch.pipeline.render import render as run_render
    from facefusion_batch.progress import Progress

    settings = _settings(
        input=input,
        output=output,
        sources=tuple(source),
        faces=faces,
        batch_size=batch_size,
        batch_window_ms=batch_window_ms,
        workers=workers,
        threads=threads,
        backend=backend,
        encoder=encoder,
        crf=crf,
        quality=quality,
        preset=preset,
        blend=blend,
        eyes_mouth=eyes_mouth,
        colour=colour,
        score_threshold=score_threshold,
        models_dir=models_dir,
        report=report,
        overwrite=overwrite,
        quiet=quiet,
    )
    with Progress(enabled=not quiet) as progress:
        result = run_render(settings, on_progress=progress.update, on_start=progress.start)
    summary = result.summary()
    log.info(
        "done: %d frames in %.1f s (%.1f fps), %d faces swapped, audio %s",
        result.frames_out,
        result.wall_seconds,
        summary["fps"],
        result.faces_swapped,
        result.audio,
    )
    typer.echo(str(output))


@app.command()
def preview(
    input: Annotated[Path, typer.Argument(help="Input video.")],
    source: SourceOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="Contact sheet image (.png).")],
    frames: Annotated[int, typer.Option(help="How many frames to sample.")] = 4,
    faces: Annotated[str, typer.Option(help="many | one.")] = "many",
    blend: Annotated[str, typer.Option(help="multiband | feather | poisson.")] = "multiband",
    eyes_mouth: Annotated[str, typer.Option(help="target | source.")] = "target",
    colour: Annotated[str, typer.Option("--colour", help="local | global | none.")] = "local",
    backend: Annotated[str, typer.Option(help="auto | cpu | cuda | tensorrt.")] = "auto",
    models_dir: Annotated[Path | None, typer.Option(help="Look here for model files first.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Write a before/after contact sheet of a few frames of INPUT."""
    setup_logging(quiet, False)
    from facefusion_batch.config import FACE_MODES, validate_choices
    from facefusion_batch.pipeline.build import build_pipeline, load_models
    from facefusion_batch.pipeline.preview import contact_sheet, sample_frames, write_image_atomically
    from facefusion_batch.swap.classical import ClassicalSettings
    from facefusion_batch.video.probe import probe

    if not 1 <= frames <= 32:
        raise InputError(f"--frames must be between 1 and 32 (got {frames})")
    validate_choices("--faces", faces, FACE_MODES)
    try:
        swap = ClassicalSettings(blend=blend, eyes_mouth=eyes_mouth, colour=colour)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    info = probe(input)
    models = load_models(backend, threads=None, models_dir=models_dir)
    pipeline = build_pipeline(models, tuple(source), swap, faces)
    sampled = sample_frames(info, frames)
    result = pipeline([image for _, image in sampled])
    rows = [(f"t={t:.2f}s", before, after) for (t, before), after in zip(sampled, result.frames, strict=True)]
    write_image_atomically(output, contact_sheet(rows))
    log.info("%d frames sampled, %d faces swapped", len(sampled), result.faces_swapped)
    typer.echo(str(output))


@models_app.command("list")
def models_list() -> None:
    """Every model and asset ffbatch knows, with its state in the store."""
    from facefusion_batch.models import store

    for spec, status in store.list_models():
        typer.echo(f"{spec.name:24s} {spec.kind:6s} {status:10s} {spec.licence}")


@models_app.command("fetch")
def models_fetch(
    names: Annotated[list[str] | None, typer.Argument(help="Model names [default: the default set].")] = None,
    force: Annotated[bool, typer.Option(help="Fetch again even if present and valid.")] = False,
) -> None:
    """Fetch models (verified by sha256) into the store."""
    setup_logging(False, False)
    from facefusion_batch.models import store
    from facefusion_batch.pipeline.build import DETECTOR_MODEL, MESH_MODEL, TOPOLOGY

    for name in names or [DETECTOR_MODEL, MESH_MODEL, TOPOLOGY]:
        typer.echo(f"{name}: {store.fetch(name, force=force)}")


@models_app.command("verify")
def models_verify(
    names: Annotated[
        list[str] | None, typer.Argument(help="Model names [default: all in the store].")
    ] = None,
) -> None:
    """Check the sha256 of models in the store; exit 2 if any is wrong."""
    from facefusion_batch.models import store

    bad = 0
    targets = names or [spec.name for spec, status in store.list_models() if status != "missing"]
    for name in targets:
        result = store.verify(name)
        typer.echo(f"{name}: {'ok' if result.ok else 'FAILED'} {result.reason}")
        bad += not result.ok
    if bad:
        raise typer.Exit(EXIT_USAGE)


@app.command()
def doctor() -> None:
    """What this machine offers: backends, GPUs, codecs, and what `auto` would choose."""
    from facefusion_batch.doctor import report_lines

    for line in report_lines():
        typer.echo(line)


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps every failure to a message on stderr and an exit status."""
    debug = bool(os.environ.get("FFBATCH_DEBUG"))
    try:
        code = app(args=argv, standalone_mode=False, prog_name="ffbatch")
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        print("ffbatch: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except typer.TyperException as exc:  # usage errors: bad option, missing argument
        if hasattr(exc, "show"):
            exc.show()
        else:
            print(f"ffbatch: error: {exc.format_message()}", file=sys.stderr)
        code = exc.exit_code
    except FfbatchError as exc:
        if debug:
            log.exception("details")
        print(f"ffbatch: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("ffbatch: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # the last line of defence: a message, not a traceback
        if debug:
            import traceback

            traceback.print_exc()
        print(
            f"ffbatch: internal error: {type(exc).__name__}: {exc} (set FFBATCH_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
