"""Decode a video on a background thread into upright BGR frames.

`FrameReader` opens its own container on a decode thread (FFmpeg's frame
threading on top, `thread_type = "AUTO"`), converts every picture to a
C-contiguous BGR `uint8` array (OpenCV's channel order), turns it upright
according to the stream's display matrix and hands it to the consumer through a
bounded queue: memory stays flat however long the video is. With
`pixel_format="yuv420p"` it hands over the decoder's planes instead, unconverted
(see video/pictures/planes.py: for pipelines that convert on the GPU).

Errors in the decode thread are re-raised in the consumer: FFmpeg read/decode
errors as `InputError` ("... is truncated or corrupt at frame N ..."), anything
else as `FfbatchError`.

Frames are counted, never estimated: every video packet the demuxer hands over
(less those an edit list hides) must give a frame. One the decoder drops without
an error (undecodable leading frames, damage) fails the read with `InputError`
at the end of the stream; a `frames=` range checks every frame's pts against the
frame index instead. Timestamps are the decoder's, put in display order
(video/decode/timing.py: packed B-frames in AVI).

A file cut short does *not* raise: FFmpeg's demuxers treat an early end of file
as the end of the stream, so the reader yields the frames that were complete and
stops cleanly, logging a warning when the packets stop well before the end the
container declares for the video (`VideoInfo.declared_end_s`; files that declare
none, such as MPEG-TS, cannot tell). A stream that stops early in a file that holds
every byte its container declares (video/decode/stream_end.py) was not cut short: the
demuxer gave up at damage, which is an `InputError` (containers that declare no
size: when much of the file is left after the last video packet). (An .mp4/.mov
cut short before its index, the `moov` box, is refused earlier, by `probe`.) Other
damage inside a file either raises the `InputError` above or is concealed by the
decoder, depending on where it is.

`on_decode_error="skip"` (whole-file reads only, not `frames=` ranges) keeps going
past damage instead: an error from the decoder is logged and decoding continues
with the next packet, and every frame the stream promised but did not deliver is
filled in with the last good picture (black before the first one), at its own pts
and flagged `Frame.replaced`. "Promised" means: a demuxed video packet with a pts
(not marked discard) whose pts the decoder never returned by the time it returned
a later one, or by the end of the stream. This catches packets the decoder rejects
with an error *and* packets it silently drops. It cannot catch damage the decoder
conceals (a smeared picture still comes out, and is kept as is), and damage to the
container itself (a demuxer error) still ends the read with `InputError`.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, get_args

import av
import av.error
import cv2
import numpy as np

from facefusion_batch.errors import FfbatchError, InputError
from facefusion_batch.video.decode.hwaccel import HWACCELS
from facefusion_batch.video.decode.probe import VideoInfo, open_input, probe
from facefusion_batch.video.decode.segments import FrameIndex, FramePackets, frame_index
from facefusion_batch.video.decode.stream_end import PacketEnd, judge_end
from facefusion_batch.video.decode.timing import DisplayTimes, strictly_after
from facefusion_batch.video.pictures.colour import ViewTransform, is_float_format
from facefusion_batch.video.pictures.native import NativePicture, view8
from facefusion_batch.video.pictures.planes import BGR24, NATIVE, PIXEL_FORMATS, YUV420P, blank_picture

log = logging.getLogger("ffbatch")

_ROTATE_CODES = {
    90: cv2.ROTATE_90_CLOCKWISE,
    180: cv2.ROTATE_180,
    270: cv2.ROTATE_90_COUNTERCLOCKWISE,
}

_POLL_S = 0.05


@dataclass
class Frame:
    """One decoded picture, upright, ready for the face pipeline."""

    index: int  # 0-based sequence number in the order the decoder returned frames
    pts: int | None  # presentation timestamp in `time_base` units (None if the file has none)
    time_base: Fraction
    image: np.ndarray  # H x W x 3 uint8 BGR, C-contiguous, upright (yuv420p: [H*3/2, W] planes)
    replaced: bool = False  # on_decode_error="skip": not decoded, a copy of the last good picture
    concealed: bool = False  # on_decode_error="skip": decoded from damaged data, the damage concealed
    warmup: bool = False  # before a segment's first frame: analysed (face tracks) but not written
    native: NativePicture | None = None  # pixel_format="native": the picture at its own precision


class _End:
    pass


@dataclass
class _Failure:
    exc: BaseException
    index: int


_END = _End()

DecodeErrorMode = Literal["fail", "skip"]
DECODE_ERROR_MODES: tuple[DecodeErrorMode, ...] = get_args(DecodeErrorMode)


def rotate_upright(image: np.ndarray, rotation: int) -> np.ndarray:
    """Rotate `image` clockwise by `rotation` (0/90/180/270); always C-contiguous."""
    code = _ROTATE_CODES.get(rotation % 360)
    if code is None:
        return image if image.flags.c_contiguous else np.ascontiguousarray(image)
    return cv2.rotate(image, code)


class FrameReader:
    """Iterate the frames of one video, decoded on a background thread.

    Use as a context manager (or call `close()`), iterate once::

        with FrameReader(path) as reader:
            for frame in reader:
                ...
    """

    def __init__(
        self,
        path: str | Path,
        *,
        queue_size: int = 32,
        info: VideoInfo | None = None,
        frames: tuple[int, int] | None = None,
        index: FrameIndex | None = None,
        on_decode_error: str = "fail",
        pixel_format: str = BGR24,
        hwaccel: str = "none",
        view: ViewTransform | None = None,
    ) -> None:
        """`frames=(start, end)` yields only frames start..end-1 (0-based, presentation order),
        seeking to the keyframe before `start` when the stream's timestamps allow it (`index`,
        computed here when not given); frames keep their absolute `index` and pts.
        `pixel_format="yuv420p"`: frames as planes, for inputs `plane_layout_for` accepts.
        `pixel_format="native"`: BGR frames, each with its decoded picture in `Frame.native`
        (for inputs `native_reason` accepts).
        `hwaccel="cuda"`: decoded by NVDEC (frames come back to host memory as nv12; a stream
        NVDEC cannot decode falls back to the software decoder).
        `view`: how a floating-point (EXR) picture is shown as 8-bit BGR (video/pictures/colour.py)."""
        if hwaccel not in HWACCELS:
            raise ValueError(f"hwaccel must be one of {HWACCELS}")
        self.hwaccel = hwaccel
        if pixel_format not in PIXEL_FORMATS:
            raise ValueError(f"pixel_format must be one of {PIXEL_FORMATS}")
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if on_decode_error not in DECODE_ERROR_MODES:
            raise ValueError(f"on_decode_error must be one of {DECODE_ERROR_MODES}")
        if on_decode_error == "skip" and frames is not None:
            raise ValueError('on_decode_error="skip" reads whole files only, not frame ranges')
        self.on_decode_error = on_decode_error
        self.pixel_format = pixel_format
        self.view = view
        self.path = Path(path)
        self.info = info if info is not None else probe(self.path)
        self.frames = frames
        self.index = index
        if frames is not None:
            if index is None:
                index = self.index = frame_index(self.path, self.info.video_stream_index)
            self.frames = index.resolve(frames[0], frames[1])
            if index.end is not None:  # a range of a file whose demuxer gave up: as a whole read
                last = self.frames[1] == index.count
                judge_end(self.info, index.end, index.count, fail=True, warn=last)
        self.seeked = False  # whether the range was reached by seeking (for tests and logs)
        self.frames_read = 0
        self.frames_replaced = 0  # frames filled in by on_decode_error="skip"
        self.frames_concealed = 0  # frames the decoder flagged damaged and concealed ("skip" keeps them)
        self.decode_errors = 0  # errors the decoder raised and "skip" stepped over
        self.frames_surplus = 0  # pictures "skip" left out: more than the stream's packets, a time repeated
        self.frames_promised = 0  # video packets that should each give a frame (not hidden by an edit list)
        self._end = PacketEnd()  # where they stop (video/decode/stream_end.py)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._iterated = False
        self._warned_depth = pixel_format == NATIVE  # the native path keeps the depth
        self._warned_size = False
        self._native: NativePicture | None = None  # the last picture decoded (native path)
        self._spare: NativePicture | None = None  # on_decode_error="skip": its untouched copy

    # -- consumer side -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Frame]:
        if self._iterated:
            raise FfbatchError(f"FrameReader for {self.path} can only be iterated once")
        self._iterated = True
        if self._stop.is_set():
            return iter(())
        self._thread = threading.Thread(target=self._run, name="ffbatch-decode", daemon=True)
        self._thread.start()
        return self._consume()

    def _consume(self) -> Iterator[Frame]:
        try:
            while True:
                try:
                    item = self._queue.get(timeout=0.5)
                except queue.Empty:
                    thread = self._thread
                    if self._stop.is_set() or thread is None or not thread.is_alive():
                        if self._queue.empty():
                            return
                    continue
                if item is _END:
                    self._check_count()
                    if self.frames_replaced:
                        log.warning(
                            "%s: %d frame(s) could not be decoded (%d decoder error(s)); each was replaced "
                            "by the last good frame (black before the first) at its own timestamp",
                            self.path,
                            self.frames_replaced,
                            self.decode_errors,
                        )
                    if self.frames_surplus:
                        log.warning(
                            "%s: %d picture(s) the decoder gave beyond the stream's frames, each at a time "
                            "already shown (pictures of a lost reference), were left out",
                            self.path,
                            self.frames_surplus,
                        )
                    if self.frames_concealed:
                        log.warning(
                            "%s: %d frame(s) were decoded from damaged data (the decoder concealed the "
                            "damage); they are kept as decoded",
                            self.path,
                            self.frames_concealed,
                        )
                    return
                if isinstance(item, _Failure):
                    raise self._translate(item) from item.exc
                self.frames_read += 1
                self.frames_replaced += item.replaced
                self.frames_concealed += item.concealed
                yield item
        finally:
            self.close()

    def _translate(self, failure: _Failure) -> FfbatchError:
        exc = failure.exc
        if isinstance(exc, FfbatchError):
            return exc
        if isinstance(exc, av.error.FFmpegError | OSError | EOFError):
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            return InputError(
                f"input video {self.path} is truncated or corrupt at frame {failure.index}: {reason}"
            )
        return FfbatchError(f"decoding {self.path} failed at frame {failure.index}: {exc!r}")

    def _check_count(self) -> None:
        """Count, never estimate: every packet the stream holds must have given a frame
        (else exit 2 under on_decode_error="fail"); warn when the packets themselves stop well
        before the container says the stream ends (the file was cut short)."""
        if self.frames is not None:
            return  # a range checks each frame against the frame index (see _run_range)
        dropped = self.frames_promised - self.frames_read
        if dropped > 0 and self.on_decode_error == "fail":
            raise InputError(
                f"input video {self.path}: the decoder returned {self.frames_read} frames of the "
                f"{self.frames_promised} the stream holds ({dropped} undecodable or damaged, dropped "
                "without an error); --on-decode-error skip renders it with those frames replaced"
            )
        judge_end(self.info, self._end, self.frames_read, fail=self.on_decode_error == "fail")

    def close(self) -> None:
        """Stop the decode thread (promptly, even mid-stream) and release the file."""
        self._stop.set()
        self._drain()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: never leave a decode thread spinning
        try:
            self._stop.set()
        except Exception:
            pass

    # -- decode thread -------------------------------------------------------------------------

    def _put(self, item) -> bool:
        if self.pixel_format == NATIVE and isinstance(item, Frame):
            # each frame its own picture (composition changes it in place): a replaced frame gets
            # a copy of the last one as it was decoded
            spare = self._spare
            item.native = (spare.copy() if spare is not None else None) if item.replaced else self._native
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        index = 0
        try:
            container = open_input(self.info, hwaccel=self._hwaccel())
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(_Failure(exc, index))
            return
        try:
            stream = container.streams[self.info.video_stream_index]
            if not isinstance(stream, av.VideoStream):
                raise InputError(f"input video {self.path} changed since it was probed")
            stream.thread_type = "AUTO"
            time_base = Fraction(stream.time_base) if stream.time_base else self.info.time_base
            if self.frames is not None:
                self._run_range(container, stream, time_base)
                return
            if self.on_decode_error == "skip":
                self._run_skipping(container, stream, time_base)
                return
            for av_frame, pts in self._displayed(container, stream):
                if not self._emit(av_frame, index, pts, time_base):
                    return
                index += 1
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(_Failure(exc, index))
        finally:
            container.close()

    def _hwaccel(self):
        if self.hwaccel == "none":
            return None
        from av.codec.hwaccel import HWAccel

        return HWAccel(device_type=self.hwaccel, allow_software_fallback=True)

    def _run_skipping(self, container, stream, time_base: Fraction) -> None:
        """Decode the whole stream; step over decoder errors and fill every promised frame."""
        pending: list[int] = []  # pts of demuxed packets not yet seen decoded (a min-heap)
        decoded: set[int] = set()
        last: np.ndarray | None = None
        number = 0
        shown: int | None = None  # the pts of the last frame emitted

        def fill(up_to: int | None) -> bool:
            """Emit a replacement for every pending pts below `up_to` (all of them if None)."""
            nonlocal last, number, shown
            while pending and (up_to is None or pending[0] < up_to):
                pts = heapq.heappop(pending)
                if pts in decoded:
                    decoded.discard(pts)
                    continue
                if last is None:
                    last = blank_picture(self.pixel_format, self.info.height, self.info.width)
                log.debug("%s: frame %d (pts %d) was not decoded; replaced", self.path, number, pts)
                frame = Frame(index=number, pts=pts, time_base=time_base, image=last.copy(), replaced=True)
                if not self._put(frame):
                    return False
                shown = pts if shown is None else max(shown, pts)
                number += 1
            return True

        def show(ready: list[tuple[av.VideoFrame, int | None]]) -> bool:
            """Emit decoded frames (in display order, with display pts), replacements first."""
            nonlocal last, number, shown
            for av_frame, pts in ready:
                if pts is not None:
                    if not fill(pts):
                        return False
                    if shown is not None and pts <= shown and not (pending and pending[0] == pts):
                        # a picture no packet is left for, stamped with a time already shown (a
                        # stream cut mid-GOP: MPEG-4 part 2 hands one over for its lost reference)
                        self.frames_surplus += 1
                        log.debug("%s: a surplus picture at pts %d left out", self.path, pts)
                        continue
                    shown = pts
                    if pending and pending[0] == pts:
                        heapq.heappop(pending)
                    else:
                        decoded.add(pts)  # its packet is still to come, or had no pts
                image = self._to_image(av_frame)
                last = image
                tb = Fraction(av_frame.time_base) if av_frame.time_base else time_base
                frame = Frame(number, pts, tb, image, concealed=bool(av_frame.is_corrupt))
                if not self._put(frame):
                    return False
                number += 1
            return True

        times: DisplayTimes[av.VideoFrame] = DisplayTimes()
        rebaser = self.info.clock.rebaser()
        counts = FramePackets(stream)
        for packet in container.demux(stream):
            if self._stop.is_set():
                return
            rebaser.rebase(packet)
            gives = counts(packet)
            self._note(packet, gives)
            if gives and packet.pts is not None:
                heapq.heappush(pending, packet.pts)
            try:
                av_frames = packet.decode()
            except av.error.FFmpegError as exc:
                self.decode_errors += 1
                log.warning("%s: decode error near pts %s, skipped: %s", self.path, packet.pts, exc)
                continue
            for av_frame in av_frames:
                if not show(times.push(av_frame, av_frame.pts)):
                    return
        if counts.at_end():  # a last N-VOP: its picture comes with the flush
            self.frames_promised += 1
            if counts.held is not None:
                heapq.heappush(pending, counts.held)
        if show(times.finish()) and fill(None):
            self._put(_END)

    def _range(self) -> tuple[int, int]:
        assert self.frames is not None  # the range reads run only for `frames`
        return self.frames

    def _run_range(self, container, stream, time_base: Fraction) -> None:
        """Deliver frames start..end-1 exactly."""
        start, end = self._range()
        seek = self.index.seek_pts(start) if self.index is not None else None
        byte = self.index.seek_byte(start) if self.index is not None else None
        if seek is not None or byte is not None:
            if byte is not None:  # a clock that jumps: the keyframe by its place in the file
                container.seek(byte, unsupported_byte_offset=True)
            else:
                container.seek(seek, stream=stream, backward=True, any_frame=False)
            if self._decode_range_by_pts(container, stream, time_base):
                self.seeked = True
                return
            # The seek landed after the range (an index without that keyframe): count instead,
            # from a freshly opened file so that frame 0 is the one a full decode starts with.
            fresh = open_input(self.info)
            try:
                stream = fresh.streams[self.info.video_stream_index]
                stream.thread_type = "AUTO"
                self._decode_range_by_count(fresh, stream, time_base)
            finally:
                fresh.close()
            return
        self._decode_range_by_count(container, stream, time_base)

    def _displayed(self, container, stream) -> Iterator[tuple[av.VideoFrame, int | None]]:
        """Every decoded picture in the decoder's (display) order, with its display pts: the
        stream's pts in increasing order (video/decode/timing.py), whatever order the demuxer guessed."""
        times: DisplayTimes[av.VideoFrame] = DisplayTimes()
        rebaser = self.info.clock.rebaser()  # a clock that jumps: each part after the one before
        counts = FramePackets(stream)
        last: int | None = None
        moved = 0

        def one_tick_on(ready: list[tuple[av.VideoFrame, int | None]]):
            # A frame that repeats the pts before it goes one tick later (`strictly_after`, the
            # writer's rule), here, where every read of the file counts from frame 0: a chunk or
            # range starting on it gives it the whole render's time, and segments never overlap.
            nonlocal last, moved
            for av_frame, pts in ready:
                if pts is not None:
                    kept = strictly_after(last, pts)
                    moved += int(kept != pts)
                    pts = last = kept
                yield av_frame, pts

        for packet in container.demux(stream):
            if self._stop.is_set():
                return
            rebaser.rebase(packet)
            self._note(packet, counts(packet))
            for av_frame in packet.decode():
                yield from one_tick_on(times.push(av_frame, av_frame.pts))
        if counts.at_end():  # a last N-VOP: its picture comes with the flush
            self.frames_promised += 1
        yield from one_tick_on(times.finish())
        if moved:
            log.warning(
                "%s: %d frame(s) repeat the timestamp of the frame before; each is written one tick "
                "(%s s) after it",
                self.path,
                moved,
                self.info.time_base,
            )
        if times.reordered:
            log.debug(
                "%s: %d frame timestamps were out of display order; reordered", self.path, times.reordered
            )

    def _note(self, packet: av.Packet, gives_frame: bool) -> None:
        """Count a demuxed packet that stands for a frame; note where the stream's data ends (time,
        byte), N-VOPs included (an encoder's dropped last frame is no early end)."""
        if gives_frame:
            self.frames_promised += 1
        if packet.size and not packet.is_discard:
            self._end.note(packet)

    def _emit(self, av_frame, number: int, pts: int | None, time_base: Fraction) -> bool:
        if av_frame.is_corrupt:  # decoded from damaged data: its damage concealed, not repaired
            raise InputError(
                f"input video {self.path}: frame {number} is damaged (the decoder concealed the "
                "damage with neighbouring pictures); --on-decode-error skip renders it as decoded, counted"
            )
        tb = Fraction(av_frame.time_base) if av_frame.time_base else time_base
        image = self._to_image(av_frame)
        return self._put(Frame(index=number, pts=pts, time_base=tb, image=image))

    def _decode_range_by_pts(self, container, stream, time_base: Fraction) -> bool:
        """After a seek: drop frames before the range, check every pts against the index.
        False (nothing delivered) when the first frame of the range never came."""
        start, end = self._range()
        assert self.index is not None  # a range read by seeking has its index
        wanted = self.index.pts[start:end]
        k = 0
        for av_frame, pts in self._displayed(container, stream):
            if self._stop.is_set():
                return True
            if pts is None or pts < wanted[0]:
                continue
            if pts != wanted[k]:
                if k == 0:
                    return False
                raise InputError(
                    f"input video {self.path}: frame {start + k} should have pts {wanted[k]} but the "
                    f"decoder returned {pts}; the file is damaged around there"
                )
            if not self._emit(av_frame, start + k, pts, time_base):
                return True
            k += 1
            if k == len(wanted):
                self._put(_END)
                return True
        if k == 0:
            return False
        raise InputError(f"input video {self.path} ended at frame {start + k}, inside --frames {start}:{end}")

    def _decode_range_by_count(self, container, stream, time_base: Fraction) -> None:
        start, end = self._range()
        number = 0
        index = self.index if self.index is not None and self.index.exact else None
        for av_frame, pts in self._displayed(container, stream):
            if self._stop.is_set():
                return
            if index is not None and number < index.count and pts != index.pts[number]:
                raise InputError(
                    f"input video {self.path}: frame {number} should have pts {index.pts[number]} but the "
                    f"decoder returned {pts}; a frame before it was dropped (undecodable or damaged)"
                )
            if number >= start and not self._emit(av_frame, number, pts, time_base):
                return
            number += 1
            if number == end:
                self._put(_END)
                return
        raise InputError(f"input video {self.path} ended at frame {number}, inside --frames {start}:{end}")

    def _to_image(self, av_frame: av.VideoFrame) -> np.ndarray:
        info = self.info
        if info.bit_depth > 8 and not self._warned_depth:
            self._warned_depth = True
            log.warning(
                "%s is %d-bit (%s); frames are processed as 8-bit BGR, so the output holds 8-bit precision",
                self.path,
                info.bit_depth,
                info.pix_fmt,
            )
        kwargs: dict[str, Any] = {}  # to_ndarray's and reformat's size, where the frame's differs
        if (av_frame.width, av_frame.height) != (info.coded_width, info.coded_height):
            # The stream changed resolution mid-way: scale back to the probed size so every
            # frame the pipeline sees (and the encoder receives) has the same dimensions.
            if not self._warned_size:
                self._warned_size = True
                log.warning(
                    "%s changes resolution mid-stream (%dx%d -> %dx%d); scaling frames back to %dx%d",
                    self.path,
                    info.coded_width,
                    info.coded_height,
                    av_frame.width,
                    av_frame.height,
                    info.coded_width,
                    info.coded_height,
                )
            kwargs = {"width": info.coded_width, "height": info.coded_height}
        if self.pixel_format == YUV420P:
            # the planes as decoded (plane_layout_for admits only upright 8-bit limited yuv420p)
            if kwargs or av_frame.format.name != YUV420P:
                av_frame = av_frame.reformat(format=YUV420P, **kwargs)
            return av_frame.to_ndarray()
        if self.pixel_format == NATIVE:
            self._native = NativePicture.from_av(av_frame, info.pix_fmt, info.coded_width, info.coded_height)
            self._native.view = self.view
            if self.on_decode_error == "skip":  # kept apart for the frames that may replace it later
                self._spare = self._native.copy()
            if is_float_format(info.pix_fmt):
                return view8(self._native)
        elif self.view is not None and is_float_format(av_frame.format.name):  # EXR into a video
            picture = NativePicture.from_av(
                av_frame, av_frame.format.name, info.coded_width, info.coded_height
            )
            picture.view = self.view
            return rotate_upright(view8(picture), info.rotation)
        # Honour the frame's own colour tags: the matrix (BT.601/709/2020) and the range
        # (limited/full); untagged frames get FFmpeg's defaults, as a player would use.
        image = av_frame.to_ndarray(format="bgr24", src_color_range=int(av_frame.color_range), **kwargs)
        return rotate_upright(image, info.rotation)
