"""Encode processed frames into the output video, atomically.

`VideoWriter` encodes on its own thread, fed by a bounded queue, into a
temporary file next to the output (`.{stem}.partial-XXXX{suffix}`, same
extension so the container is the real one) and renames it onto the output
only once everything is written. On any failure, or `abort()`, the temporary
file is removed: nothing is ever left at the output path.

Timing: every frame is encoded with the pts it had in the input and the input's
time base, so frame counts are exact and variable frame rates survive. Each
frame's duration is the gap to the next one (the last frame repeats the
previous gap), which keeps the container duration right.

Pictures: BGR `uint8` in, converted to `settings.pix_fmt` with the colour
matrix the input was tagged with (the output carries the same tags), so colours
round-trip. With 4:2:0/4:2:2 pixel formats an odd width or height is padded to
even by repeating the last column/row (logged once): the output is then one
pixel wider/taller than the input. With `pixel_format="yuv420p"` the frames
arrive as planes in the input's own encoding (video/planes.py) and go to the
encoder unconverted.

Quality: `crf` 0-51 (x264/x265 CRF; NVENC constant-quality `cq`, where 0 means
"automatic" and is raised to 1). `quality` 0-100 (100 best) is the alternative,
mapped linearly: crf = round(51 * (100 - quality) / 100), so quality 100 -> crf
0, 65 -> 18, 0 -> 51. Neither given -> crf 18. NVENC takes its own presets
p1..p7 or the x264 names, mapped ultrafast/superfast -> p1, veryfast -> p2,
faster/fast -> p3, medium -> p4, slow -> p5, slower -> p6, veryslow/placebo ->
p7.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import threading
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np

from facefusion_batch.errors import FfbatchError, InputError, OutputError
from facefusion_batch.fsutil import AtomicFile, ffmpeg_path
from facefusion_batch.video.audio import AudioMuxer
from facefusion_batch.video.planes import BGR24, PIXEL_FORMATS, YUV420P, picture_shape
from facefusion_batch.video.probe import VideoInfo

log = logging.getLogger("ffbatch")

ENCODERS = ("libx264", "libx265", "h264_nvenc", "hevc_nvenc")
X26X_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
NVENC_PRESETS = ("p1", "p2", "p3", "p4", "p5", "p6", "p7")
_X26X_TO_NVENC = {
    "ultrafast": "p1",
    "superfast": "p1",
    "veryfast": "p2",
    "faster": "p3",
    "fast": "p3",
    "medium": "p4",
    "slow": "p5",
    "slower": "p6",
    "veryslow": "p7",
    "placebo": "p7",
}
DEFAULT_CRF = 18

# Output extension -> FFmpeg muxer. WebM is refused: it holds VP8/VP9/AV1 only.
CONTAINERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska"}

# swscale can convert to these YUV matrices (AVColorSpace values).
_CONVERTIBLE_COLORSPACES = {1, 4, 5, 6, 7, 9, 10}
_POLL_S = 0.05


@dataclass(frozen=True)
class EncoderSettings:
    codec: str = "libx264"
    crf: int | None = None
    quality: int | None = None
    preset: str = "veryfast"
    pix_fmt: str = "yuv420p"
    threads: int = 0

    @property
    def is_nvenc(self) -> bool:
        return self.codec.endswith("_nvenc")

    def effective_crf(self) -> int:
        """The CRF (or NVENC cq) used: `crf`, else mapped from `quality`, else 18."""
        if self.crf is not None:
            return int(self.crf)
        if self.quality is not None:
            return quality_to_crf(self.quality)
        return DEFAULT_CRF

    def codec_options(self) -> dict[str, str]:
        """The FFmpeg encoder options these settings translate to."""
        crf = self.effective_crf()
        if self.is_nvenc:
            preset = _X26X_TO_NVENC.get(self.preset, self.preset)
            return {"preset": preset, "rc": "vbr", "cq": str(max(1, crf))}
        options = {"preset": self.preset, "crf": str(crf)}
        if self.codec == "libx265":
            options["x265-params"] = "log-level=error"
        return options


def quality_to_crf(quality: int) -> int:
    """Map quality 0-100 (100 best) linearly onto CRF 51-0."""
    return int(round(51 * (100 - quality) / 100))


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def validate_encoder(settings: EncoderSettings) -> None:
    """Raise InputError, naming the option, unless `settings` can encode here."""
    codec = settings.codec
    if codec not in ENCODERS:
        raise InputError(f"--encoder {codec!r} is not supported; choose one of: {', '.join(ENCODERS)}")
    if settings.crf is not None and settings.quality is not None:
        raise InputError("--crf and --quality are alternatives; give only one of them")
    if settings.crf is not None and (not _is_int(settings.crf) or not 0 <= settings.crf <= 51):
        raise InputError(f"--crf must be a whole number from 0 to 51, not {settings.crf!r}")
    if settings.quality is not None and (not _is_int(settings.quality) or not 0 <= settings.quality <= 100):
        raise InputError(f"--quality must be a whole number from 0 to 100, not {settings.quality!r}")
    presets = NVENC_PRESETS + X26X_PRESETS if settings.is_nvenc else X26X_PRESETS
    if settings.preset not in presets:
        raise InputError(
            f"--preset {settings.preset!r} is not valid for {codec}; choose one of: {', '.join(presets)}"
        )
    if not _is_int(settings.threads) or settings.threads < 0:
        raise InputError(f"encoder threads must be 0 (automatic) or more, not {settings.threads!r}")
    try:
        formats = [f.name for f in av.Codec(codec, "w").video_formats or ()]
    except (av.codec.codec.UnknownCodecError, ValueError, av.error.FFmpegError):
        raise InputError(f"--encoder {codec}: this FFmpeg build has no such encoder") from None
    if settings.pix_fmt not in formats:
        raise InputError(
            f"pixel format {settings.pix_fmt!r} is not supported by --encoder {codec}; "
            f"choose one of: {', '.join(formats)}"
        )
    reason = _open_failure(codec, settings.pix_fmt, tuple(sorted(settings.codec_options().items())))
    if reason is not None:
        hint = " (NVENC needs an NVIDIA GPU with its driver)" if settings.is_nvenc else ""
        raise InputError(f"--encoder {codec} cannot be used here{hint}: {reason}")


@functools.lru_cache(maxsize=32)
def _open_failure(codec: str, pix_fmt: str, options: tuple[tuple[str, str], ...]) -> str | None:
    """Try to open the encoder on a small picture; the reason it fails, or None."""
    try:
        ctx = av.CodecContext.create(codec, "w")
        ctx.width = 256
        ctx.height = 256
        ctx.pix_fmt = pix_fmt
        ctx.time_base = Fraction(1, 25)
        ctx.framerate = Fraction(25)
        ctx.options = dict(options)
        ctx.open()
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    return None


def container_format_for(output: Path) -> str:
    """The FFmpeg muxer for the output's extension; InputError for an unsupported one."""
    suffix = output.suffix.lower()
    if suffix in CONTAINERS:
        return CONTAINERS[suffix]
    if suffix == ".webm":
        raise InputError(
            f"output {output}: WebM holds only VP8/VP9/AV1 video, and ffbatch encodes H.264/HEVC; "
            "use .mp4, .mkv or .mov"
        )
    known = ", ".join(sorted(CONTAINERS))
    shown = f"extension {suffix!r}" if suffix else "no extension"
    raise InputError(f"output {output} has {shown}; the output must end in one of: {known}")


def _even_dims(width: int, height: int, pix_fmt: str) -> tuple[int, int]:
    fmt = av.VideoFormat(pix_fmt)
    sub_w = fmt.chroma_width(2) < 2
    sub_h = fmt.chroma_height(2) < 2
    return width + (width % 2 if sub_w else 0), height + (height % 2 if sub_h else 0)


class _OutputFailure(Exception):
    """Writing the output file failed (disk full, I/O error): reported as OutputError."""


class _Close:
    pass


_CLOSE = _Close()


@dataclass
class _Item:
    image: np.ndarray
    pts: int | None
    time_base: Fraction


class VideoWriter:
    """Encode frames (and the input's audio) into `output`, atomically.

    Use as a context manager: an exception inside the block aborts (nothing is
    left at the output path); a clean exit closes and renames into place.
    """

    def __init__(
        self,
        output: str | Path,
        info: VideoInfo,
        settings: EncoderSettings,
        *,
        audio_from: str | Path | None = None,
        queue_size: int = 32,
        metadata: dict[str, str] | None = None,
        pixel_format: str = BGR24,
    ) -> None:
        """`metadata`: container tags to write (segments record their frame range this way).
        `pixel_format="yuv420p"`: frames are [H*3/2, W] planes, encoded as they are (only for
        inputs `plane_layout_for` accepts: even sides, a yuv420p output)."""
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if pixel_format not in PIXEL_FORMATS:
            raise ValueError(f"pixel_format must be one of {PIXEL_FORMATS}")
        self.pixel_format = pixel_format
        self.output = Path(output)
        self._metadata = dict(metadata or {})
        self.info = info
        self.settings = settings
        self.frames_written = 0
        self._format = container_format_for(self.output)
        validate_encoder(settings)
        self._check_output_path(audio_from)
        self.width, self.height = _even_dims(info.width, info.height, settings.pix_fmt)
        self._pad = (self.height - info.height, self.width - info.width)
        if pixel_format == YUV420P and (any(self._pad) or settings.pix_fmt != YUV420P):
            raise ValueError("yuv420p frames need even sides and a yuv420p output (see plane_layout_for)")
        if any(self._pad):
            log.warning(
                "%s: %s needs even dimensions; padding %dx%d to %dx%d by repeating the last row/column",
                self.output,
                settings.pix_fmt,
                info.width,
                info.height,
                self.width,
                self.height,
            )
        self.time_base = Fraction(info.time_base)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._abort = threading.Event()
        self._error: BaseException | None = None
        self._state = "open"  # open -> closed | aborted
        self._container = None
        self._audio: AudioMuxer | None = None
        self.audio_summary = "none"  # what happened to the audio: none | copied | re-encoded to AAC
        self._last_pts: int | None = None
        self._last_delta: int | None = None
        self._pending = None
        self._warned_pts = False
        self._step = self._default_step()

        self._file = AtomicFile(self.output)  # a hidden temporary name beside the output
        self._temp = self._file.temp
        try:
            self._open_container(audio_from)
            thread = threading.Thread(target=self._run, name="ffbatch-encode", daemon=True)
            thread.start()  # (a Ctrl-C can land in its wait for the thread: discard then too)
            self._thread = thread
        except BaseException:
            self._discard()
            raise

    # -- setup ---------------------------------------------------------------------------------

    def _check_output_path(self, audio_from: str | Path | None) -> None:
        out = self.output
        parent = out.parent if str(out.parent) else Path(".")
        if not parent.exists():
            raise OutputError(f"cannot write {out}: the directory {parent} does not exist")
        if not parent.is_dir():
            raise OutputError(f"cannot write {out}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write {out}: no permission to write in {parent}")
        if out.is_dir():
            raise OutputError(f"cannot write {out}: it is a directory")
        for label, other in (("input video", self.info.path), ("audio source", audio_from)):
            if other is not None and _same_file(out, Path(other)):
                raise InputError(f"output {out} is the {label}; write the result to another file")

    def _default_step(self) -> int:
        """pts increment used when frames come without one: one frame at the average rate."""
        rate = self.info.average_rate
        if rate:
            step = round(1 / (Fraction(rate) * self.time_base))
            return max(1, int(step))
        return 1

    def _open_container(self, audio_from: str | Path | None) -> None:
        options = {}
        if self._format == "matroska":
            # keep every pts as it was: the muxer's default shifts all streams when AAC starts < 0
            options["avoid_negative_ts"] = "disabled"
        if self._format in ("mp4", "mov"):
            # use_metadata_tags: keep our own tag names (the muxer otherwise drops unknown keys)
            options["movflags"] = "+faststart+use_metadata_tags" if self._metadata else "+faststart"
            if self.time_base.numerator == 1 and self.time_base.denominator < 2**31:
                # Keep the input's time base exactly (the muxer would otherwise pick its own).
                options["video_track_timescale"] = str(self.time_base.denominator)
        try:
            self._container = av.open(
                ffmpeg_path(self._temp), mode="w", format=self._format, container_options=options
            )
        except (av.error.FFmpegError, OSError) as exc:
            raise OutputError(f"cannot write {self.output}: {exc}") from None
        self._container.metadata.update(self._metadata)
        settings = self.settings
        rate = Fraction(self.info.average_rate) if self.info.average_rate else None
        stream = self._container.add_stream(settings.codec, rate=rate, options=settings.codec_options())
        stream.width = self.width
        stream.height = self.height
        stream.pix_fmt = settings.pix_fmt
        ctx = stream.codec_context
        ctx.time_base = self.time_base
        stream.time_base = self.time_base
        ctx.thread_count = settings.threads
        info = self.info
        self._colorspace = info.color_space if info.color_space in _CONVERTIBLE_COLORSPACES else None
        if self._colorspace is not None:
            ctx.colorspace = self._colorspace
            ctx.color_range = 1  # limited ("tv") range: what yuv420p & co. are written in
            ctx.color_primaries = info.color_primaries
            ctx.color_trc = info.color_trc
        self._stream = stream
        if audio_from is not None:
            self._audio = AudioMuxer(audio_from, self._container, mux=self._mux, cancel=self._abort)
            if self._audio.tracks:
                self.audio_summary = "re-encoded to AAC" if self._audio.reencoded else "copied"

    # -- producer side -------------------------------------------------------------------------

    def write(self, image: np.ndarray, pts: int | None, time_base: Fraction) -> None:
        """Queue one upright frame (BGR H x W x 3 uint8 at the displayed size; yuv420p: planes).

        `pts` is in `time_base` units (None: one frame after the previous one). The array is
        encoded later, on the encoder thread: do not modify it after handing it over. Raises
        OutputError once writing has failed (the temporary file is then already removed).
        """
        if self._state != "open":
            raise FfbatchError(f"VideoWriter for {self.output} is already {self._state}")
        self._raise_if_failed()
        expected = picture_shape(self.pixel_format, self.info.height, self.info.width)
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != expected:
            got = f"{image.shape} {image.dtype}" if isinstance(image, np.ndarray) else type(image).__name__
            raise FfbatchError(f"VideoWriter for {self.output} expects {expected} uint8 frames, got {got}")
        item = _Item(
            image, None if pts is None else int(pts), Fraction(time_base) if time_base else self.time_base
        )
        while True:
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                pass
            self._raise_if_failed()
            if not self._thread.is_alive():
                raise FfbatchError(f"the encoder thread for {self.output} stopped unexpectedly")

    def close(self) -> None:
        """Flush the encoder, copy the rest of the audio, finish the file and move it into place."""
        if self._state == "closed":
            return
        if self._state == "aborted":
            raise FfbatchError(f"VideoWriter for {self.output} was aborted")
        self._state = "closed"
        try:
            self._put_blocking(_CLOSE)
            self._thread.join()
            self._raise_if_failed()
            self._file.commit()
        except BaseException:
            # Includes KeyboardInterrupt while waiting for the flush: never leave a partial file.
            self._discard()
            raise

    def abort(self) -> None:
        """Stop encoding and remove the temporary file; nothing is left at the output path."""
        if self._state == "closed" and not self._temp.exists():
            return
        self._state = "aborted"
        self._abort.set()
        self._discard()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def _put_blocking(self, item) -> None:
        while self._thread.is_alive():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is None:
            return
        self._state = "aborted"
        self._abort.set()
        self._discard()
        if isinstance(error, FfbatchError):
            raise error
        if isinstance(error, _OutputFailure):
            raise OutputError(f"cannot write {self.output}: {error}") from error.__cause__
        raise FfbatchError(f"encoding {self.output} failed: {error!r}") from error

    def _discard(self) -> None:
        """Stop the thread, close everything quietly and delete the temporary file."""
        self._abort.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        if thread is None or not thread.is_alive():
            # Only once the encoder thread is gone: FFmpeg objects must not be used from two threads.
            # (Were it still busy, it finishes into the unlinked file and the space is freed then.)
            self._close_quietly()
        self._file.abort()

    def _close_quietly(self) -> None:
        if self._audio is not None:
            self._audio.close()
            self._audio = None
        if self._container is not None:
            container, self._container = self._container, None
            with contextlib.suppress(Exception):
                container.close()

    # -- encoder thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._abort.is_set():
                try:
                    item = self._queue.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if item is _CLOSE:
                    self._finish()
                    return
                self._encode_item(item)
        except BaseException as exc:  # noqa: BLE001 - reported to the producer
            self._error = exc

    def _mux(self, packet: av.Packet) -> None:
        try:
            self._container.mux(packet)
        except (av.error.FFmpegError, OSError) as exc:
            raise _OutputFailure(getattr(exc, "strerror", None) or str(exc)) from exc

    def _next_pts(self, item: _Item) -> int:
        pts = item.pts
        if pts is not None and item.time_base != self.time_base:
            pts = int(round(pts * item.time_base / self.time_base))
        last = self._last_pts
        if pts is None:
            pts = 0 if last is None else last + (self._last_delta or self._step)
        elif last is not None and pts <= last:
            if not self._warned_pts:
                self._warned_pts = True
                log.warning("%s: frame timestamps are not increasing; adjusting them", self.output)
            pts = last + 1
        return pts

    def _encode_item(self, item: _Item) -> None:
        pts = self._next_pts(item)
        image = item.image
        if any(self._pad):
            image = np.pad(image, ((0, self._pad[0]), (0, self._pad[1]), (0, 0)), mode="edge")
        if self.pixel_format == YUV420P:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format=YUV420P)
            if self._colorspace is not None:
                frame.colorspace = self._colorspace
                frame.color_range = 1
        else:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
        if self._colorspace is not None and self.pixel_format != YUV420P:
            frame = frame.reformat(
                format=self.settings.pix_fmt, dst_colorspace=self._colorspace, dst_color_range=1
            )
        frame.pts = pts
        frame.time_base = self.time_base
        if self._last_pts is not None:
            self._last_delta = pts - self._last_pts
        self._last_pts = pts
        # Hold one frame back so that its duration (the gap to the next frame) is known.
        previous, self._pending = self._pending, frame
        if previous is not None:
            previous.duration = pts - previous.pts
            self._encode(previous)

    def _encode(self, frame: av.VideoFrame | None) -> None:
        try:
            packets = self._stream.encode(frame)
        except (av.error.FFmpegError, ValueError) as exc:
            raise FfbatchError(f"the {self.settings.codec} encoder failed on {self.output}: {exc}") from exc
        for packet in packets:
            self._mux(packet)
        if frame is not None:
            self.frames_written += 1
            if self._audio is not None:
                self._audio.mux_until(float(frame.pts * self.time_base))

    def _finish(self) -> None:
        if self._pending is not None:
            frame, self._pending = self._pending, None
            frame.duration = self._last_delta or self._step
            self._encode(frame)
        if not self.frames_written:
            raise FfbatchError(f"no frames were written, so {self.output} was not created")
        self._encode(None)
        if self._audio is not None:
            self._audio.finish()
            self._audio.close()
            self._audio = None
        container, self._container = self._container, None
        try:
            container.close()
        except (av.error.FFmpegError, OSError) as exc:
            raise _OutputFailure(getattr(exc, "strerror", None) or str(exc)) from exc


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False
