"""Seeded fuzzing of `ffbatch render`: corrupted copies of small clips, each outcome classified.

Five small clips are generated (H.264 + AAC in .mp4 and .mkv, H.264 + PCM in .mov, H.264 +
MP2 in MPEG-TS, MPEG-4 Part 2 with B-frames + MP3 in .avi), each also with a keyframe every 5
frames. Case `i` applies class `classes[i % len(classes)]` to clip
`CLIPS[(i // len(classes)) % 5]` with `numpy.random.default_rng(seed + i)`, so any
5 x len(classes) consecutive cases cover every (class, clip) pair, and a case is reproduced by
its number alone. The classes are the byte-level corruptions `CLASSES` (truncate, random bytes,
zero runs, duplicated chunks, header flips, dropped packets) and the stream shapes of real files
`STREAM_CLASSES` (`--classes all`, the default, runs both):

- `gop_cut`: the short-GOP clip without its first 1-4 video packets (a cut mid-GOP), rendered
  with `--on-decode-error skip`: `ok` is one output frame per video packet left;
- `repeated_pts`: remuxed into .mkv with 1-3 frames given the time of the frame before,
  rendered in chunks (`--chunk-frames 6`): `ok` also needs strictly increasing output times;
- `extra_video`: an MJPEG cover (attached picture, .mp4) or a second video stream (.mov,
  .mkv) added: `ok` also needs stderr to say the stream was left out.

Each file is rendered in its own empty directory, and classified:

- `ok`: exit 0 and the output has exactly as many frames as a reference decode of the
  corrupted input with PyAV (every packet decoded, errors skipped, decoder flushed);
- `refused`: exit 2 with an `ffbatch: error:` line, nothing at the output, no other file;
- FAIL, one of: `lost_frames` (exit 0, fewer frames than the reference), `extra_frames`
  (exit 0, more), `traceback`, `exit_N` (any other status), `hang` (over `--timeout`),
  `leftovers` (a file other than the input and a finished output in the directory),
  `harness_error` (the fuzzer itself failed on the case), `repeated_times` (output times not
  strictly increasing), `silent_drop` (a stream left out without a word),
  `unclear` (exit 2 without the error line, or with a file at the output).

Writes `fuzz.json` (every case, and outcomes by class) and `fuzz.png` (a bar chart of
outcomes by class) into `--out` (default out/fuzz). tests/test_fuzz.py runs a fixed 30 cases
through `run_case`.

    python scripts/fuzz.py --cases 300 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import av
import cv2
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

from facefusion_batch.models.assets import asset_path  # noqa: E402

CLASSES = ("truncate", "random_bytes", "zero_run", "duplicate", "header_flip", "packet_drop")
STREAM_CLASSES = ("gop_cut", "repeated_pts", "extra_video")
ALL_CLASSES = CLASSES + STREAM_CLASSES
GOP = 5  # the short-GOP clips' keyframe interval


@dataclass(frozen=True)
class ClipSpec:
    """How one fuzz clip is written: container, codecs and encoder options."""

    name: str
    suffix: str
    format: str
    video: str
    audio: str
    options: tuple[tuple[str, str], ...] = ()


X264 = (("preset", "veryfast"), ("crf", "23"), ("threads", "1"))  # veryfast keeps B-frames
CLIPS = (
    ClipSpec("mp4", ".mp4", "mp4", "libx264", "aac", X264),
    ClipSpec("mkv", ".mkv", "matroska", "libx264", "aac", X264),
    ClipSpec("mov", ".mov", "mov", "libx264", "pcm_s16le", X264),
    ClipSpec("ts", ".ts", "mpegts", "libx264", "mp2", X264),
    ClipSpec("avi", ".avi", "avi", "mpeg4", "libmp3lame", (("bf", "2"), ("qscale", "4"))),
)
FRAMES, SIZE, FPS, RATE = 20, (160, 120), 25, 48000


def this_checkout_env() -> dict[str, str]:
    """The environment for a child `python -m facefusion_batch`: this checkout's package first,
    whatever the child's working directory (an editable install may point elsewhere)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def make_clip(spec: ClipSpec, path: Path) -> Path:
    """A 20-frame 160x120 clip panning across a face photo, with a 440 Hz tone."""
    photo = cv2.imread(str(asset_path("t1.jpg")))
    width, height = SIZE
    scale = max(width * 1.5 / photo.shape[1], height / photo.shape[0])
    photo = cv2.resize(photo, (int(photo.shape[1] * scale) + 1, int(photo.shape[0] * scale) + 1))
    out = av.open(str(path), mode="w", format=spec.format)
    try:
        video = out.add_stream(spec.video, rate=FPS, options=dict(spec.options))
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        audio = out.add_stream(spec.audio, rate=RATE, layout="stereo")
        span = photo.shape[1] - width
        for i in range(FRAMES):
            x = span * i // (FRAMES - 1)
            crop = np.ascontiguousarray(photo[:height, x : x + width])
            frame = av.VideoFrame.from_ndarray(crop, format="bgr24")
            frame.pts = i
            frame.time_base = Fraction(1, FPS)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        _write_tone(out, audio, FRAMES / FPS)
    finally:
        out.close()
    return path


def _write_tone(out, stream, seconds: float) -> None:
    ctx = stream.codec_context
    chunk, total = ctx.frame_size or 1024, int(seconds * RATE)
    fmt = ctx.format
    base = fmt.name.rstrip("p")
    dtype = {"s16": np.int16, "s32": np.int32, "flt": np.float32, "fltp": np.float32}[base]
    scale = {"s16": 32767, "s32": 2**31 - 1}.get(base, 1)
    t = np.arange(total) / RATE
    tone = 0.3 * np.sin(2 * np.pi * 440.0 * t)
    for start in range(0, total, chunk):
        piece = np.stack([tone[start : start + chunk]] * 2) * scale
        data = (piece if fmt.is_planar else piece.T.reshape(1, -1)).astype(dtype)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format=fmt.name, layout="stereo")
        frame.sample_rate, frame.pts, frame.time_base = RATE, start, Fraction(1, RATE)
        out.mux(stream.encode(frame))
    out.mux(stream.encode(None))


def short_gop(spec: ClipSpec) -> ClipSpec:
    """`spec` with a keyframe every GOP frames (the byte-level clips have one keyframe)."""
    keys = (("g", str(GOP)), ("keyint_min", str(GOP)), ("sc_threshold", "0"))
    options = keys if spec.video == "libx264" else (("g", str(GOP)),)
    return ClipSpec(
        f"{spec.name}-gop", spec.suffix, spec.format, spec.video, spec.audio, spec.options + options
    )


def make_clips(folder: Path) -> dict[str, Path]:
    """Every fuzz clip in `folder` (kept: made once per folder): NAME and NAME-gop."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for spec in (*CLIPS, *map(short_gop, CLIPS)):
        path = folder / f"{spec.name}{spec.suffix}"
        if not path.exists():
            make_clip(spec, folder / f"tmp{spec.suffix}").rename(path)
        paths[spec.name] = path
    return paths


def _remux(path: Path, target: Path, fmt: str, keep, change=None, add=None) -> None:
    """Copy `path`'s packets into `target` (format `fmt`): those `keep(i, packet)` accepts, each
    through `change(i, packet)`; `add(dst)` adds streams (and their packets) first."""
    with av.open(str(path)) as src:
        packets = [p for p in src.demux() if p.size]
        with av.open(str(target), mode="w", format=fmt) as dst:
            streams = {s.index: dst.add_stream_from_template(s) for s in src.streams}
            if add is not None:
                add(dst)
            for i, packet in enumerate(packets):
                if not keep(i, packet):
                    continue
                if change is not None:
                    change(i, packet)
                packet.stream = streams[packet.stream.index]
                dst.mux(packet)


def cut_mid_gop(path: Path, target: Path, rng: np.random.Generator) -> tuple[str, int]:
    """Remux without the first 1-4 video packets (decode order), as a cut mid-GOP; what was done
    and the video packets left."""
    with av.open(str(path)) as src:
        fmt = src.format.name.split(",")[0]
        video = [i for i, p in enumerate(p for p in src.demux() if p.size) if p.stream.type == "video"]
    lost = set(video[: int(rng.integers(1, 5))])

    def change(_, packet):
        if fmt == "matroska" and packet.stream.type == "video":
            packet.dts = None  # Matroska stores none: the demuxer's guesses, cut, are refused

    _remux(path, target, fmt, lambda i, p: i not in lost, change)
    return f"the first {len(lost)} video packets cut", len(video) - len(lost)


def repeat_times(path: Path, target: Path, rng: np.random.Generator) -> str:
    """Remux into Matroska with 1-3 video frames given the time of the frame before them."""
    with av.open(str(path)) as src:
        dts = {p.pts: p.dts for p in src.demux(video=0) if p.size and p.pts is not None}
    times = sorted(dts)
    # a frame can take the time before it only where that is not before its decode time (AVI)
    can = [k for k in range(1, len(times)) if dts[times[k]] is None or times[k - 1] >= dts[times[k]]]
    chosen = sorted(
        int(k) for k in rng.choice(can, size=min(len(can), int(rng.integers(1, 4))), replace=False)
    )
    before = {times[k]: times[k - 1] for k in chosen}

    def change(_, packet):
        if packet.stream.type == "video" and packet.pts in before:
            packet.pts = before[packet.pts]

    _remux(path, target, "matroska", lambda i, p: True, change)
    return f"frames {chosen} given the time of the frame before"


def add_video(path: Path, target: Path, rng: np.random.Generator) -> str:
    """Add an MJPEG picture: a cover (attached picture) in .mp4, a second video in .mov and .mkv
    (FFmpeg's .mov muxer leaves a cover out)."""
    fmt = {".mp4": "mp4", ".mov": "mov"}.get(target.suffix, "matroska")
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    jpeg = cv2.imencode(".jpg", np.full((64, 64, 3), colour, np.uint8))[1].tobytes()

    def add(dst):
        art = dst.add_stream("mjpeg", rate=1)
        art.width, art.height, art.pix_fmt = 64, 64, "yuvj420p"
        if fmt == "mp4":
            art.disposition = av.stream.Disposition.attached_pic
        packet = av.Packet(jpeg)
        packet.stream, packet.pts, packet.dts, packet.is_keyframe = art, 0, 0, True
        dst.mux(packet)

    _remux(path, target, fmt, lambda i, p: True, add=add)
    return "a cover added" if fmt == "mp4" else "a second video stream added"


def drop_packets(path: Path, target: Path, rng: np.random.Generator) -> str:
    """Remux `path` into `target` without 1-3 random video packets and maybe an audio one."""
    with av.open(str(path)) as src:
        packets = [p for p in src.demux() if p.size]
        video = [i for i, p in enumerate(packets) if p.stream.type == "video"]
        audio = [i for i, p in enumerate(packets) if p.stream.type == "audio"]
        drop = set(rng.choice(video, size=int(rng.integers(1, 4)), replace=False).tolist())
        if audio and rng.random() < 0.5:
            drop.add(int(rng.choice(audio)))
        dropped_video = sorted(video.index(i) for i in drop if i in video)
        with av.open(str(target), mode="w", format=src.format.name.split(",")[0]) as dst:
            streams = {s.index: dst.add_stream_from_template(s) for s in src.streams}
            for i, packet in enumerate(packets):
                if i in drop:
                    continue
                if dst.format.name == "matroska" and packet.stream.type == "video":
                    packet.dts = None  # Matroska stores none: the demuxer's guesses, cut, are refused
                packet.stream = streams[packet.stream.index]
                dst.mux(packet)
    return f"video packets {dropped_video} dropped" + (
        " and an audio packet" if len(drop) > len(dropped_video) else ""
    )


def corrupt(kind: str, data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    """Byte-level damage of class `kind` (not `packet_drop`): what was done, and the new bytes."""
    buf, n = bytearray(data), len(data)
    if kind == "truncate":
        cut = int(rng.integers(1, n))
        return f"truncated at {cut} of {n}", bytes(buf[:cut])
    if kind == "random_bytes":
        spots = int(rng.integers(1, 20))
        for _ in range(spots):
            at = int(rng.integers(0, n - 32))
            buf[at : at + 32] = rng.integers(0, 256, 32, dtype=np.uint8).tobytes()
        return f"{spots} runs of 32 random bytes", bytes(buf)
    if kind == "zero_run":
        at, length = int(rng.integers(0, n - 1)), int(rng.integers(1, max(2, n // 8)))
        buf[at : at + length] = bytes(min(length, n - at))
        return f"zeros at {at}+{length}", bytes(buf)
    if kind == "duplicate":
        at, length = int(rng.integers(0, n - 1)), int(rng.integers(1, max(2, n // 8)))
        return f"bytes {at}+{length} duplicated", bytes(buf[: at + length] + buf[at:])
    if kind == "header_flip":
        spots = sorted(int(a) for a in rng.integers(0, min(n, 4096), int(rng.integers(1, 5))))
        for at in spots:
            buf[at] ^= int(rng.integers(1, 256))
        return f"header bytes {spots} changed", bytes(buf)
    raise ValueError(f"unknown corruption class {kind!r}")


def reference_frames(path: Path) -> int:
    """Frames PyAV decodes from `path`: every packet, decoder errors skipped, demuxing until it
    fails, then the decoder flushed. 0 when the file does not open or has no video."""
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError):
        return 0
    with container:
        if not container.streams.video or container.streams.video[0].codec_context is None:
            return 0  # no video, or a codec FFmpeg cannot name: nothing decodes
        stream = container.streams.video[0]
        count = 0
        try:
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                try:
                    count += len(stream.codec_context.decode(packet))
                except av.error.FFmpegError:
                    continue
        except av.error.FFmpegError:
            pass
        try:
            count += len(stream.codec_context.decode(None))
        except av.error.FFmpegError:
            pass
        return count


def output_times(path: Path) -> list[int]:
    """The pts of a finished output's frames, in decode order."""
    with av.open(str(path)) as container:
        return [f.pts for f in container.decode(video=0)]


def output_frames(path: Path) -> int | None:
    """Frames of a finished output; None when it does not decode (a failure of its own)."""
    try:
        with av.open(str(path)) as container:
            return sum(1 for _ in container.decode(video=0))
    except (av.error.FFmpegError, IndexError):
        return None


@dataclass
class CaseResult:
    case: int
    seed: int
    kind: str
    clip: str
    what: str
    outcome: str
    ok: bool
    exit: int | None
    reference_frames: int
    output_frames: int | None
    seconds: float
    detail: str = ""


def case_plan(case: int, seed: int = 0, classes: tuple[str, ...] = CLASSES) -> tuple[str, ClipSpec, int]:
    """(class, clip, rng seed) of case number `case`."""
    return classes[case % len(classes)], CLIPS[(case // len(classes)) % len(CLIPS)], seed + case


def run_case(
    case: int,
    clips: dict[str, Path],
    work: Path,
    *,
    seed: int = 0,
    timeout: float = 120.0,
    classes: tuple[str, ...] = CLASSES,
) -> CaseResult:
    """Corrupt (or reshape), render and classify case `case` in a new directory under `work`."""
    kind, spec, case_seed = case_plan(case, seed, classes)
    rng = np.random.default_rng(case_seed)
    folder = work / f"case {case:04d}"  # a space in the path, on purpose
    folder.mkdir(parents=True)
    suffix = (
        ".mkv"
        if kind == "repeated_pts" or (kind == "extra_video" and spec.suffix in (".ts", ".avi"))
        else spec.suffix
    )
    src = folder / f"input{suffix}"
    extra: list[str] = []
    packets_left = None
    if kind == "packet_drop":
        what = drop_packets(clips[spec.name], src, rng)
    elif kind == "gop_cut":
        what, packets_left = cut_mid_gop(clips[f"{spec.name}-gop"], src, rng)
        extra = ["--on-decode-error", "skip"]
    elif kind == "repeated_pts":
        what = repeat_times(clips[spec.name], src, rng)
        extra = ["--chunk-frames", "6"]
    elif kind == "extra_video":
        what = add_video(clips[spec.name], src, rng)
    else:
        what, data = corrupt(kind, clips[spec.name].read_bytes(), rng)
        src.write_bytes(data)
    out = folder / ("out.mp4" if rng.random() < 0.5 else "out.mkv")
    # skip renders one frame per packet (those it cannot decode replaced); else the decoder's frames
    reference = packets_left if packets_left is not None else reference_frames(src)
    cmd = [sys.executable, "-m", "facefusion_batch", "render", str(src), "--source"]
    cmd += [str(asset_path("astronaut.png")), "-o", str(out), "--backend", "cpu", "--quiet", *extra]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=this_checkout_env())  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        code = None
    seconds = round(time.monotonic() - started, 2)
    frames = output_frames(out) if code == 0 and out.exists() else None
    outcome, detail = classify(code, stderr, folder, src, out, reference, frames)
    if outcome == "ok" and kind == "repeated_pts":
        times = output_times(out)
        if any(b <= a for a, b in zip(times, times[1:], strict=False)):
            outcome, detail = "repeated_times", f"output times {times}"
    if outcome == "ok" and kind == "extra_video" and "left out of the output: stream #" not in stderr:
        outcome, detail = "silent_drop", "the added stream was left out without a word"
    return CaseResult(case, case_seed, kind, spec.name, what, outcome, outcome in ("ok", "refused"), code,
                      reference, frames, seconds, detail)  # fmt: skip


def classify(
    code: int | None, stderr: str, folder: Path, src: Path, out: Path, reference: int, frames: int | None
) -> tuple[str, str]:
    """(outcome, detail) of one render, as the module docstring defines them."""
    tail = stderr.strip().splitlines()[-1][-300:] if stderr.strip() else ""
    if code is None:
        return "hang", "killed after the time limit"
    if "Traceback" in stderr:
        return "traceback", stderr[-1500:]
    kept = {src, out} if code == 0 else {src}
    others = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p not in kept)
    if others:
        return "leftovers", f"exit {code}, left: {others}"
    if code == 2:
        if out.exists() or "ffbatch: error:" not in stderr:
            return "unclear", tail
        return "refused", tail
    if code != 0:
        return f"exit_{code}", tail
    if frames is None:
        return "unclear", "exit 0 without a decodable output"
    if frames < reference:
        return "lost_frames", f"{frames} frames out, the reference decode gives {reference}"
    if frames > reference:
        return "extra_frames", f"{frames} frames out, the reference decode gives {reference}"
    return "ok", ""


def by_class(results: list[CaseResult], classes: tuple[str, ...] = ALL_CLASSES) -> dict[str, dict[str, int]]:
    table: dict[str, Counter] = {kind: Counter() for kind in classes if any(r.kind == kind for r in results)}
    for r in results:
        table[r.kind][r.outcome] += 1
    return {kind: dict(sorted(c.items())) for kind, c in table.items()}


def chart(results: list[CaseResult], path: Path) -> None:
    """A stacked bar per corruption class: ok, refused, and each failure outcome."""
    table = by_class(results)
    kinds = list(table)
    outcomes = ["ok", "refused"] + sorted({r.outcome for r in results} - {"ok", "refused"})
    colours = {"ok": "#2e7d32", "refused": "#1565c0"}
    failures = ["#c62828", "#ef6c00", "#6a1b9a", "#ad1457", "#4e342e", "#f9a825", "#000000", "#757575"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    bottom = np.zeros(len(kinds))
    for outcome in outcomes:
        counts = np.array([table[k].get(outcome, 0) for k in kinds])
        colour = colours.get(outcome) or failures[(outcomes.index(outcome) - 2) % len(failures)]
        ax.bar(kinds, counts, bottom=bottom, label=outcome, color=colour)
        bottom += counts
    fails = sum(not r.ok for r in results)
    ax.set_title(f"ffbatch render on {len(results)} corrupted inputs: {fails} failures")
    ax.set_ylabel("cases")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--first", type=int, default=0, help="number of the first case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a render is a hang")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "fuzz")
    parser.add_argument(
        "--classes",
        choices=("all", "bytes", "streams"),
        default="all",
        help="byte-level corruptions, stream shapes of real files (cut mid-GOP, repeated times, "
        "cover art or a second video), or both",
    )
    args = parser.parse_args(argv)
    classes = {"all": ALL_CLASSES, "bytes": CLASSES, "streams": STREAM_CLASSES}[args.classes]
    args.out.mkdir(parents=True, exist_ok=True)
    clips = make_clips(args.out / "clips")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ffbatch-fuzz-") as work:

        def one(case: int) -> CaseResult:
            try:
                result = run_case(
                    case, clips, Path(work), seed=args.seed, timeout=args.timeout, classes=classes
                )
            except Exception as exc:  # the harness's own fault: recorded, the run goes on
                kind, spec, case_seed = case_plan(case, args.seed, classes)
                why = repr(exc)
                result = CaseResult(
                    case, case_seed, kind, spec.name, "", "harness_error", False, None, 0, None, 0.0, why
                )
            mark = "ok  " if result.ok else "FAIL"
            print(f"{mark} case {case} seed {result.seed} {result.kind}/{result.clip}: {result.outcome} "
                  f"({result.what}) {result.detail[:160]}", flush=True)  # fmt: skip
            return result

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(one, range(args.first, args.first + args.cases)))
    fails = [r for r in results if not r.ok]
    report = {
        "cases": len(results),
        "seed": args.seed,
        "classes": list(classes),
        "jobs": args.jobs,
        "wall_seconds": round(time.monotonic() - started, 1),
        "outcomes": dict(Counter(r.outcome for r in results)),
        "by_class": by_class(results, classes),
        "by_clip": {c.name: dict(Counter(r.outcome for r in results if r.clip == c.name)) for c in CLIPS},
        "failures": [asdict(r) for r in fails],
        "results": [asdict(r) for r in results],
    }
    (args.out / "fuzz.json").write_text(json.dumps(report, indent=2))
    chart(results, args.out / "fuzz.png")
    print(json.dumps({k: report[k] for k in ("cases", "wall_seconds", "outcomes", "by_class")}, indent=2))
    print(f"{len(fails)} failures; {args.out / 'fuzz.json'}, {args.out / 'fuzz.png'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
