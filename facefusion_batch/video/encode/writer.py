"""Encode processed frames into the output video, atomically.

`VideoWriter` encodes on its own thread, fed by a bounded queue, into a
temporary file next to the output (`.{stem}.partial-XXXX{suffix}`, same
extension so the container is the real one) and renames it onto the output
only once everything is written. On any failure, or `abort()`, the temporary
file is removed: nothing is ever left at the output path.

Timing: every frame is encoded with the pts it had in the input and the input's
time base, so frame counts are exact and variable frame rates survive. Each
frame's duration is the gap to the next one (the last frame repeats the
previous gap), which keeps the container duration right. A pts that repeats the one before
goes one tick after it (`video/decode/timing.strictly_after`, the reader's rule too).

Pictures: BGR `uint8` in, converted to the output pixel format (`output_pix_fmt`:
--pix-fmt, else the input's own where the encoder takes it) with the colour
matrix and range the input was tagged with (the output carries the same tags,
its SAR, language and timecode tags), so colours round-trip. With 4:2:0/4:2:2
pixel formats an odd width or height is padded to even by repeating the last
column/row (logged once): the output is then one pixel wider/taller than the
input. With `pixel_format="yuv420p"` the frames arrive as planes in the input's
own encoding (video/pictures/planes.py) and go to the encoder unconverted. With
`pixel_format="native"` they arrive as `NativePicture`s (video/pictures/native.py: the input's
own pixel format and precision, changed only where faces were painted) and go to the
encoder as they are, or converted by swscale at full precision when the output's pixel
format differs (10-bit 4:2:0 into ProRes 4:2:2, say).

The encoder's settings and what they mean for an input (pixel format, options, the checks
before any frame) are video/encode/encoder_policy.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import re
import threading
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.container
import av.error
import numpy as np

from facefusion_batch.errors import FfbatchError, InputError, OutputError
from facefusion_batch.fsutil import AtomicFile, ffmpeg_path
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.decode.segments import TAG_SETTINGS
from facefusion_batch.video.decode.timing import shift_ticks, strictly_after
from facefusion_batch.video.encode.audio import AudioMuxer
from facefusion_batch.video.encode.encoder_policy import (
    EncoderSettings,
    even_dims,
    output_pix_fmt,
    stream_options,
    validate_encoder,
)
from facefusion_batch.video.encode.formats import (
    CONTAINERS,
    ENCODERS,
    NVENC_PRESETS,
    X26X_PRESETS,
    check_fits,
    container_format_for,
)
from facefusion_batch.video.encode.written import record_written
from facefusion_batch.video.pictures.native import NativePicture
from facefusion_batch.video.pictures.planes import BGR24, NATIVE, PIXEL_FORMATS, YUV420P, picture_shape

log = logging.getLogger("ffbatch")

# re-exported: older callers import the table's names from here
__all__ = ["CONTAINERS", "ENCODERS", "NVENC_PRESETS", "X26X_PRESETS", "container_format_for"]
# swscale can convert to these YUV matrices (AVColorSpace values).
_CONVERTIBLE_COLORSPACES = {1, 4, 5, 6, 7, 9, 10}
_POLL_S = 0.05


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
        check_fits(settings.codec, self.output)
        self._check_output_path(audio_from)
        self.pix_fmt = output_pix_fmt(settings, info)
        self.dropped: list[str] = []  # what of the input this output could not keep, in words
        self.width, self.height = even_dims(info.width, info.height, self.pix_fmt)
        self._pad = (self.height - info.height, self.width - info.width)
        if pixel_format == YUV420P and (any(self._pad) or self.pix_fmt != YUV420P):
            raise ValueError("yuv420p frames need even sides and a yuv420p output (see plane_layout_for)")
        if pixel_format == NATIVE and any(self._pad):
            raise ValueError("native frames need an output of the input's size (see native_layout)")
        if any(self._pad):
            log.warning(
                "%s: %s needs even dimensions; padding %dx%d to %dx%d by repeating the last row/column",
                self.output,
                self.pix_fmt,
                info.width,
                info.height,
                self.width,
                self.height,
            )
        self.time_base = avi_time_base(info) if self._format == "avi" else Fraction(info.time_base)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._abort = threading.Event()
        self._error: BaseException | None = None
        self._state = "open"  # open -> closed | aborted
        self._container: av.container.OutputContainer | None = None
        self._audio: AudioMuxer | None = None
        self.audio_summary = "none"  # what happened to the audio: none | copied | re-encoded to AAC
        self._last_pts: int | None = None
        self._last_delta: int | None = None
        self._pending: av.VideoFrame | None = None
        self._warned_pts = False
        self._step = self._default_step()
        self._shift = shift_ticks(info.start_shift, self.time_base)  # the input's timeline moved to >= 0

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
        if self._format in ("matroska", "avi"):
            # keep every pts as it was: the muxer's default shifts all streams when AAC starts < 0
            # (AVI: every video frame but the first came 1024 samples, 21.3 ms, late)
            options["avoid_negative_ts"] = "disabled"
        if self._format in ("mp4", "mov"):
            # use_metadata_tags: keep our own tag names (the muxer otherwise drops unknown keys)
            options["movflags"] = "+faststart+use_metadata_tags" if self._metadata else "+faststart"
            if self.info.timecode:
                options["write_tmcd"] = "1"  # a timecode track, which .mp4 otherwise leaves out
            options.update(iso_timescales(self.time_base))
        try:
            self._container = av.open(
                ffmpeg_path(self._temp), mode="w", format=self._format, container_options=options
            )
        except (av.error.FFmpegError, OSError) as exc:
            raise OutputError(f"cannot write {self.output}: {exc}") from None
        info = self.info
        self._container.metadata.update(carried_tags(info.container_tags, self._format))
        self._container.metadata.update(self._metadata)
        settings = self.settings
        rate = Fraction(info.average_rate) if info.average_rate else None
        stream = self._container.add_stream(settings.codec, rate=rate, options=stream_options(settings, info))
        if not isinstance(stream, av.VideoStream):
            raise InputError(f"--codec {settings.codec} is not a video encoder")
        stream.width = self.width
        stream.height = self.height
        stream.pix_fmt = self.pix_fmt
        ctx = stream.codec_context
        ctx.time_base = self.time_base
        stream.time_base = self.time_base
        ctx.thread_count = settings.threads
        if settings.spec.family == "hevc" and self._format in ("mp4", "mov"):
            ctx.codec_tag = "hvc1"  # QuickTime and Final Cut play only hvc1-tagged HEVC
        if info.sample_aspect_ratio is not None:
            ctx.sample_aspect_ratio = info.sample_aspect_ratio  # anamorphic: displays as the input
            if self._format in ("matroska", "webm", "avi"):
                # Matroska takes the SAR from the stream, which PyAV 18 cannot set
                sar = info.sample_aspect_ratio
                self.dropped.append(
                    f"sample aspect ratio {sar.numerator}:{sar.denominator} (this {self._format} output "
                    "displays square pixels; .mov or .mp4 keep it)"
                )
        for key, value in info.video_tags:
            if key in _STREAM_TAGS:
                stream.metadata[key] = value
        if info.timecode:
            stream.metadata["timecode"] = info.timecode
        if info.field_order >= 2:
            ctx.field_order = info.field_order  # the container's flag (mov fiel, Matroska FieldOrder)
        self._rgb = not self.pix_fmt.startswith(("yuv", "nv", "gray"))
        self._colorspace = info.color_space if info.color_space in _CONVERTIBLE_COLORSPACES else None
        # the input's range is kept (a full-range source stays full range); untagged means limited
        self._range = 2 if info.color_range == 2 else 1
        if self._rgb:
            ctx.colorspace = 0  # RGB: no matrix
            ctx.color_range = 2
            self._colorspace = None
        elif self._colorspace is not None or self._range == 2:
            if self._colorspace is not None:
                ctx.colorspace = self._colorspace
            ctx.color_range = self._range
        if info.color_primaries != 2:
            ctx.color_primaries = info.color_primaries
        if info.color_trc != 2:
            ctx.color_trc = info.color_trc
        tagged = info.color_space not in (0, 2) or info.color_primaries != 2 or info.color_trc != 2
        if self._format == "avi" and tagged:
            self.dropped.append("colour tags (AVI cannot store them; players assume BT.601)")
        self._stream = stream
        subtitles = any(kind == "subtitle" for _, kind, _ in info.other_streams)
        if audio_from is not None and (settings.audio or subtitles):
            self._audio = AudioMuxer(
                audio_from,
                self._container,
                mux=self._mux,
                cancel=self._abort,
                codec=settings.audio_codec,
                bitrate=settings.audio_bitrate,
                audio=settings.audio,
                clock=info.clock if Path(audio_from) == info.path else None,  # read once, by probe
            )
            self.dropped.extend(self._audio.dropped)
            if self._audio.tracks:
                self.audio_summary = self._audio.summary()
        if audio_from is not None and info.audio_streams and not settings.audio:
            self.audio_summary = "left out (--no-audio)"
        for index, kind, codec in info.other_streams:
            if kind == "subtitle" and self._audio is not None:
                continue  # copied, or in the muxer's own `dropped` with the reason
            if self._audio is None or index not in self._audio.carried:
                if not (kind == "data" and info.timecode):  # a tmcd track: rewritten from the timecode
                    self.dropped.append(f"stream #{index} ({kind}, {codec}): not carried into {self._format}")
        for item in self.dropped:
            log.warning("%s: left out of the output: %s", self.output, item)
        self.streams = self._stream_map()

    def _stream_map(self) -> list[dict[str, object]]:
        """Each input stream and what became of it: re-encoded, copied or dropped (with why)."""
        info = self.info
        video = {"input": info.video_stream_index, "kind": "video", "codec": info.codec}
        video |= {"output": self._stream.index, "action": f"re-encoded to {self.settings.codec}"}
        streams: list[dict[str, object]] = [video]
        if self._audio is not None:
            streams += self._audio.stream_map()
        elif info.audio_streams:
            why = "--no-audio" if not self.settings.audio else "this output holds video only"
            streams.append({"input": None, "kind": "audio", "count": info.audio_streams,
                            "action": "dropped", "reason": why})  # fmt: skip
        carried = self._audio.carried if self._audio is not None else set()
        for index, kind, codec in info.other_streams:
            if index in carried or (kind == "subtitle" and self._audio is not None):
                continue  # in the muxer's own map
            if kind == "data" and info.timecode:
                action, why = "rewritten", "a timecode track, written again from the timecode"
            else:
                action, why = "dropped", f"not carried into {self._format}"
            streams.append({"input": index, "kind": kind, "codec": codec, "action": action, "reason": why})
        return streams

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
        if isinstance(image, NativePicture) and self.pixel_format == NATIVE:
            check_native(image, self.info, self.output)
        elif not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != expected:
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
        if TAG_SETTINGS in self._metadata:  # tagged: may be reused later, if its bytes still match
            with contextlib.suppress(OSError):  # without a record it is rendered again, never trusted
                record_written(self.output)

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
        assert self._container is not None  # open from the first frame to the end
        try:
            self._container.mux(packet)
        except (av.error.FFmpegError, OSError) as exc:
            raise _OutputFailure(getattr(exc, "strerror", None) or str(exc)) from exc

    def _next_pts(self, item: _Item) -> int:
        pts = item.pts
        if pts is not None and item.time_base != self.time_base:
            pts = int(round(pts * item.time_base / self.time_base))
        if pts is not None:
            pts += self._shift
        last = self._last_pts
        if pts is None:
            return 0 if last is None else last + (self._last_delta or self._step)
        kept = strictly_after(last, pts)  # a repeated pts one tick later, as the reader reads it
        if kept != pts and not self._warned_pts:
            self._warned_pts = True
            log.warning("%s: frame timestamps are not increasing; adjusting them", self.output)
        return kept

    def _encode_item(self, item: _Item) -> None:
        pts = self._next_pts(item)
        image = item.image
        if any(self._pad):
            image = np.pad(image, ((0, self._pad[0]), (0, self._pad[1]), (0, 0)), mode="edge")
        if isinstance(image, NativePicture):
            frame = self._from_native(image)
        elif self.pixel_format == YUV420P:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format=YUV420P)
            if self._colorspace is not None:
                frame.colorspace = self._colorspace
                frame.color_range = 1
        else:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
            if self._rgb:
                frame = frame.reformat(format=self.pix_fmt)
            elif self._colorspace is not None:
                frame = frame.reformat(
                    format=self.pix_fmt, dst_colorspace=self._colorspace, dst_color_range=self._range
                )
            else:
                frame = frame.reformat(format=self.pix_fmt, dst_color_range=self._range)
        frame.pts = pts
        frame.time_base = self.time_base
        self._tag_colours(frame)
        if self._last_pts is not None:
            self._last_delta = pts - self._last_pts
        self._last_pts = pts
        # Hold one frame back so that its duration (the gap to the next frame) is known.
        previous, self._pending = self._pending, frame
        if previous is not None:
            assert previous.pts is not None  # every frame is given its pts
            previous.duration = pts - previous.pts
            self._encode(previous)

    def _tag_colours(self, frame: av.VideoFrame) -> None:
        """The stream's colour tags on the frame too: ProRes (and DNxHR) write each frame's own
        into its frame header, where players and NLEs read them, not the container's."""
        ctx = self._stream.codec_context
        if ctx.color_primaries != 2:
            frame.color_primaries = ctx.color_primaries
        if ctx.color_trc != 2:
            frame.color_trc = ctx.color_trc
        if not self._rgb and self._colorspace is not None:
            frame.colorspace = self._colorspace

    def _from_native(self, picture: NativePicture) -> av.VideoFrame:
        """The picture as it is when the output takes its pixel format, else converted at full
        precision into the output's (same matrix, the output's range)."""
        frame = picture.to_av()
        if frame.format.name == self.pix_fmt:
            return frame
        if self._rgb:
            return frame.reformat(format=self.pix_fmt, dst_color_range=2)
        return frame.reformat(
            format=self.pix_fmt,
            src_colorspace=self._colorspace,
            dst_colorspace=self._colorspace,
            src_color_range=2 if picture.color_range == 2 else 1,
            dst_color_range=self._range,
        )

    def _encode(self, frame: av.VideoFrame | None) -> None:
        try:
            packets = self._stream.encode(frame)
        except (av.error.FFmpegError, ValueError) as exc:
            raise FfbatchError(f"the {self.settings.codec} encoder failed on {self.output}: {exc}") from exc
        for packet in packets:
            self._mux(packet)
        if frame is not None:
            self.frames_written += 1
            if self._audio is not None and frame.pts is not None:
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
        assert container is not None  # open from the first frame to the end
        try:
            container.close()
        except (av.error.FFmpegError, OSError) as exc:
            raise _OutputFailure(getattr(exc, "strerror", None) or str(exc)) from exc


def avi_time_base(info: VideoInfo) -> Fraction:
    """The video tick of an .avi output. AVI times a frame by its chunk's place, one chunk a tick,
    and FFmpeg's muxer takes a tick of 1 ms or longer as it is, else 1/600 s: exact for 24, 25, 30,
    50 and 60 fps, not for the NTSC rates, whose frame duration is then the tick."""
    time_base = Fraction(info.time_base)
    if time_base >= Fraction(1, 1000):
        return time_base
    rate = Fraction(info.average_rate) if info.average_rate else None
    if rate is not None and rate.denominator == 1001 and rate <= 1000:
        return 1 / rate
    return Fraction(1, 600)


def iso_timescales(time_base: Fraction) -> dict[str, str]:
    """.mp4/.mov options that keep every pts exact: the video track counts in the input's time base
    (1001/24000 in 1/24000), and so does the movie, whose edit list says when the video starts
    (in the default 1/1000 a start at 1/23.976 s would move every frame by 0.4 ms)."""
    scale = time_base.denominator
    if scale >= 2**31:
        return {}
    return {"video_track_timescale": str(scale), "movie_timescale": str(scale)}


# Container tags carried from the input; the muxer writes its own brand/encoder tags.
_MUXER_TAGS = frozenset({"major_brand", "minor_version", "compatible_brands", "encoder", "duration"})
# Tags the ISO/QuickTime muxer writes without use_metadata_tags (others it drops).
_ISO_TAGS = frozenset(
    {
        "title",
        "comment",
        "copyright",
        "artist",
        "author",
        "description",
        "date",
        "creation_time",
        "album",
        "genre",
        "composer",
        "timecode",
        "location",
        "make",
        "model",
    }
)
_STREAM_TAGS = frozenset({"language", "title"})


def carried_tags(tags: tuple[tuple[str, str], ...], output_format: str) -> dict[str, str]:
    """The input's container tags the output keeps (title, timecode, copyright, ...)."""
    kept = {k: v for k, v in tags if k.lower() not in _MUXER_TAGS and not k.lower().startswith("ffbatch")}
    if output_format in ("mp4", "mov"):
        kept = {k: v for k, v in kept.items() if k.lower() in _ISO_TAGS}
    return kept


def check_native(picture: NativePicture, info: VideoInfo, output: Path) -> None:
    """A NativePicture handed to a writer must be a picture of the input it was opened for."""
    if (picture.pix_fmt, picture.width, picture.height) != (info.pix_fmt, info.width, info.height):
        raise FfbatchError(
            f"the writer for {output} expects {info.width}x{info.height} {info.pix_fmt} pictures, got "
            f"{picture.width}x{picture.height} {picture.pix_fmt}"
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


_TIMECODE = re.compile(r"^(\d{1,2}):(\d{2}):(\d{2})([:;.,])(\d{2,3})$")


def shift_timecode(timecode: str, frames: int, rate: Fraction | float | None) -> str | None:
    """The SMPTE timecode `frames` frames after `timecode` at `rate` (drop-frame with `;` or `.`
    before the frames, as FFmpeg writes 29.97/59.94 drop-frame, the other rates non-drop); None
    when it cannot be read or there is no rate."""
    match = _TIMECODE.match(timecode.strip())
    if match is None or not rate or float(rate) <= 0:
        return None
    h, m, s, sep, f = int(match[1]), int(match[2]), int(match[3]), match[4], int(match[5])
    fps = round(float(rate))
    drop = fps // 15 if sep in ";.," and fps % 30 == 0 else 0  # frames numbers 0..drop-1 skipped
    minutes = 60 * h + m
    number = (minutes * 60 + s) * fps + f - drop * (minutes - minutes // 10) + frames
    number %= 24 * 3600 * fps - drop * (24 * 60 - 24 * 6)  # a day wraps
    if drop:
        per_ten = 600 * fps - 9 * drop
        tens, rest = divmod(number, per_ten)
        number += 9 * drop * tens + (drop * ((rest - drop) // (60 * fps - drop)) if rest > drop else 0)
    f, seconds = number % fps, number // fps
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{sep}{f:02d}"


def from_frame(info: VideoInfo, frame: int) -> VideoInfo:
    """`info` for output that starts at `frame` of the input: its timecode moved on by as many
    frames (a segment of frames 1500:3000 starts at the timecode of frame 1500)."""
    moved = shift_timecode(info.timecode, frame, info.average_rate) if info.timecode and frame else None
    if moved is None:
        return info

    def retimed(tags: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        return tuple((k, moved if k.lower() == "timecode" else v) for k, v in tags)

    return dataclasses.replace(
        info, container_tags=retimed(info.container_tags), video_tags=retimed(info.video_tags)
    )
