"""Deterministic test clips, made with PyAV alone (no ffmpeg binary needed).

`make_clip` writes a small video whose content is known exactly:

* `size` is the size *as displayed*. With `rotation` (clockwise degrees a
  player must turn the stored picture to show it upright, like a phone clip)
  the stored pictures are the upright ones turned counter-clockwise, and the
  stream carries the display matrix; a reader that honours it gets back the
  upright picture of `size`.
* Synthetic content (no `image`): smooth colour gradients that drift with the
  frame number, a moving bar, light seeded noise (sigma 1.5), a red marker square in the
  top-left corner and a green one in the top-right (to check orientation), and
  the frame number written as 8 black/white blocks along the bottom edge
  (`frame_number(image)` reads it back).
* With `image`: crops of `size` panning across the image (scaled up to cover
  the frame if needed), like a camera moving over a photo; `pan=False` keeps
  the centre crop.
* Audio: a 440 Hz sine tone (stereo, 48 kHz) for the length of the video, in
  `audio` ("aac", "mp3", "pcm_s16le"), or none.
* `vfr=True`: irregular frame gaps (20 to 80 ms, seeded) in a 1/1000 s time base.

`bt709=True` converts with the BT.709 matrix and tags the stream so (HD-style
colour metadata). Odd sizes are written as yuv444p (x264 cannot store odd sizes in 4:2:0).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

MARKER = 16  # size of the corner markers and of the frame-number blocks, in pixels
AUDIO_RATE = 48000
_CONTAINERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska"}


def synthetic_frame(index: int, size: tuple[int, int], seed: int = 0) -> np.ndarray:
    """The upright BGR picture of frame `index` (deterministic)."""
    width, height = size
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = index * 0.15 + seed
    image = np.empty((height, width, 3), np.float32)
    image[..., 0] = 128 + 90 * np.sin(xx / max(width, 1) * 3.0 + phase)
    image[..., 1] = 128 + 90 * np.cos(yy / max(height, 1) * 2.5 - phase * 0.7)
    image[..., 2] = 128 + 80 * np.sin((xx + yy) / max(width + height, 1) * 4.0 + phase * 0.5)
    bar = int(index * 7) % max(width - 8, 1)
    image[:, bar : bar + 8, :] = (30, 200, 230)
    noise = np.random.default_rng(seed * 100003 + index).normal(0, 1.5, image.shape)
    image = np.clip(image + noise, 0, 255).astype(np.uint8)
    m = min(MARKER, width // 4, height // 4)
    image[:m, :m] = (0, 0, 255)  # red, top-left
    image[:m, width - m :] = (0, 255, 0)  # green, top-right
    _draw_number(image, index)
    return image


def _draw_number(image: np.ndarray, value: int) -> None:
    height, width = image.shape[:2]
    m = min(MARKER, width // 8, height // 4)
    for bit in range(8):
        on = (value >> bit) & 1
        image[height - m :, bit * m : (bit + 1) * m] = 255 if on else 0


def frame_number(image: np.ndarray) -> int:
    """Read back the number `synthetic_frame` drew along the bottom edge."""
    height, width = image.shape[:2]
    m = min(MARKER, width // 8, height // 4)
    value = 0
    for bit in range(8):
        block = image[height - m + 2 : height - 2, bit * m + 2 : (bit + 1) * m - 2]
        if block.mean() > 128:
            value |= 1 << bit
    return value


def dominant_colour(image: np.ndarray) -> str:
    """'red', 'green', 'blue' or 'other' for a BGR patch."""
    b, g, r = (float(c) for c in image.reshape(-1, 3).mean(axis=0))
    if r > 180 and g < 80 and b < 80:
        return "red"
    if g > 180 and r < 80 and b < 80:
        return "green"
    if b > 180 and r < 80 and g < 80:
        return "blue"
    return "other"


def _pan_frames(image: np.ndarray, size: tuple[int, int], frames: int, pan: bool):
    width, height = size
    src_h, src_w = image.shape[:2]
    scale = max(width / src_w, height / src_h, 1.0)
    if scale > 1.0:
        image = cv2.resize(image, (int(np.ceil(src_w * scale)), int(np.ceil(src_h * scale))))
        src_h, src_w = image.shape[:2]
    max_x, max_y = src_w - width, src_h - height
    for i in range(frames):
        t = i / max(frames - 1, 1) if pan else 0.5
        x, y = int(round(max_x * t)), int(round(max_y * t))
        yield np.ascontiguousarray(image[y : y + height, x : x + width])


def _timestamps(frames: int, fps: int, vfr: bool, seed: int) -> tuple[list[int], Fraction]:
    if not vfr:
        return list(range(frames)), Fraction(1, fps)
    rng = np.random.default_rng(seed + 7)
    gaps = rng.integers(20, 81, size=frames)
    pts = [0]
    for gap in gaps[:-1]:
        pts.append(pts[-1] + int(gap))
    return pts, Fraction(1, 1000)


def make_clip(
    path: str | Path,
    *,
    frames: int = 30,
    size: tuple[int, int] = (320, 240),
    fps: int = 25,
    audio: str | None = "aac",
    vfr: bool = False,
    rotation: int = 0,
    image: np.ndarray | None = None,
    pan: bool = True,
    seed: int = 0,
    codec: str = "libx264",
    pix_fmt: str | None = None,
    crf: int = 12,
    bt709: bool = False,
    first: int = 0,
) -> Path:
    """Write a deterministic clip to `path` (container from its extension); returns the path.
    `first`: the number drawn into the first frame (synthetic content)."""
    path = Path(path)
    if rotation % 90:
        raise ValueError("rotation must be a multiple of 90")
    rotation %= 360
    width, height = size
    coded = (height, width) if rotation in (90, 270) else (width, height)
    if pix_fmt is None:
        pix_fmt = "yuv444p" if coded[0] % 2 or coded[1] % 2 else "yuv420p"
    pts_list, time_base = _timestamps(frames, fps, vfr, seed)
    duration_s = float((pts_list[-1] + (pts_list[-1] - pts_list[-2] if frames > 1 else 1)) * time_base)

    fmt = _CONTAINERS.get(path.suffix.lower())
    out = av.open(str(path), mode="w", format=fmt)
    try:
        options = {"preset": "ultrafast", "crf": str(crf)} if codec in ("libx264", "libx265") else {}
        if codec == "libx265":
            options["x265-params"] = "log-level=error"
        stream = out.add_stream(codec, rate=fps, options=options)
        stream.width, stream.height = coded
        stream.pix_fmt = pix_fmt
        stream.codec_context.time_base = time_base
        stream.time_base = time_base
        if bt709:
            ctx = stream.codec_context
            ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = 1, 1, 1, 1
        if rotation:
            # PyAV takes the counter-clockwise angle that VideoFrame.rotation reads back.
            stream.set_display_rotation(-rotation)
        audio_stream = None
        if audio is not None:
            audio_stream = out.add_stream(audio, rate=AUDIO_RATE, layout="stereo")

        pictures = (
            _pan_frames(image, size, frames, pan)
            if image is not None
            else (synthetic_frame(first + i, size, seed) for i in range(frames))
        )
        rotate_ccw = {90: cv2.ROTATE_90_COUNTERCLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_CLOCKWISE}
        for pts, picture in zip(pts_list, pictures, strict=True):
            if rotation:
                picture = cv2.rotate(picture, rotate_ccw[rotation])
            frame = av.VideoFrame.from_ndarray(picture, format="bgr24")
            if bt709:
                frame = frame.reformat(format=pix_fmt, dst_colorspace=1, dst_color_range=1)
            frame.pts = pts
            frame.time_base = time_base
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
        if audio_stream is not None:
            _write_tone(out, audio_stream, duration_s)
    finally:
        out.close()
    return path


def _write_tone(out, stream, duration_s: float) -> None:
    total = int(round(duration_s * AUDIO_RATE))
    t = np.arange(total, dtype=np.float64) / AUDIO_RATE
    tone = (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    fmt = stream.codec_context.format
    chunk = stream.codec_context.frame_size or 1024
    scale = {"s16": 32767, "s32": 2**31 - 1}.get(fmt.name.rstrip("p"))
    dtype = {"s16": np.int16, "s32": np.int32, "flt": np.float32, "dbl": np.float64}[fmt.name.rstrip("p")]
    for start in range(0, total, chunk):
        piece = tone[start : start + chunk].astype(np.float64)
        planar = np.stack([piece, piece]) * (scale or 1)
        data = (planar if fmt.is_planar else planar.T.reshape(1, -1)).astype(dtype)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format=fmt.name, layout="stereo")
        frame.sample_rate = AUDIO_RATE
        frame.pts = start
        frame.time_base = Fraction(1, AUDIO_RATE)
        out.mux(stream.encode(frame))
    out.mux(stream.encode(None))


def encode_image(frame: av.VideoFrame, codec: str) -> bytes:
    """One still image file (png, dpx, tiff, exr) as FFmpeg's `codec` encoder writes it, in the
    frame's own pixel format (the time base does not reach the bytes)."""
    ctx = av.CodecContext.create(codec, "w")
    ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = (
        frame.width,
        frame.height,
        frame.format.name,
        Fraction(1, 25),
    )
    return b"".join(bytes(p) for p in ctx.encode(frame) + ctx.encode(None))


def decode_all(path: str | Path) -> tuple[list[tuple[int | None, np.ndarray]], Fraction]:
    """(pts, BGR image) of every frame of the first video stream, *not* rotated; and its time base."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [(f.pts, f.to_ndarray(format="bgr24")) for f in container.decode(stream)]
        return frames, Fraction(stream.time_base)


def audio_packets(path: str | Path, stream: int = 0) -> list[tuple[int | None, bytes]]:
    """(pts, payload) of every non-empty packet of audio stream number `stream`."""
    with av.open(str(path)) as container:
        audio = container.streams.audio[stream]
        return [(p.pts, bytes(p)) for p in container.demux(audio) if p.size]


def audio_codecs(path: str | Path) -> list[str]:
    with av.open(str(path)) as container:
        return [s.codec_context.name for s in container.streams.audio]


def display_rotation(path: str | Path) -> int:
    """The display-matrix angle (PyAV's counter-clockwise convention) of the first frame; 0 if none."""
    with av.open(str(path)) as container:
        for frame in container.decode(container.streams.video[0]):
            return int(frame.rotation)
    return 0


def make_audio_only(path: str | Path, *, seconds: float = 0.5, codec: str = "aac") -> Path:
    """A file with a sine tone and no video stream."""
    path = Path(path)
    out = av.open(str(path), mode="w", format=_CONTAINERS.get(path.suffix.lower()))
    try:
        stream = out.add_stream(codec, rate=AUDIO_RATE, layout="stereo")
        _write_tone(out, stream, seconds)
    finally:
        out.close()
    return path


def make_wrapped_ts(path: str | Path, *, frames: int = 30, before_wrap_s: float = 0.5, **clip) -> Path:
    """An MPEG-TS (H.264 + AAC, 25 fps) whose 33-bit 90 kHz clock wraps `before_wrap_s` seconds
    into the clip: `make_clip`'s packets remuxed with every timestamp moved to just below 2**33.
    FFmpeg's demuxer unwraps it into timestamps that start below 0 and rise through it."""
    return _clip_as_ts(path, 2**33 - round(before_wrap_s * 90000), frames=frames, **clip)


def make_spliced_ts(
    path: str | Path,
    *,
    frames: tuple[int, ...] = (10, 10, 10),
    clocks_s: tuple[float, ...] = (36000, 3600, 50000),
    **clip,
) -> Path:
    """MPEG-TS recordings spliced byte for byte (as a broadcast capture cut together): part k holds
    `frames[k]` frames (numbered on from the part before) on a clock that starts at `clocks_s[k]`
    seconds, so the clock jumps back or far forward at each splice (a discontinuity, not a wrap)."""
    path = Path(path)
    data = b""
    first = 0
    for k, (count, clock) in enumerate(zip(frames, clocks_s, strict=True)):
        part = _clip_as_ts(
            path.with_suffix(f".part{k}.ts"), round(clock * 90000), frames=count, first=first, **clip
        )
        data += part.read_bytes()
        part.unlink()
        first += count
    path.write_bytes(data)
    return path


def _clip_as_ts(path: str | Path, offset: int, *, frames: int, **clip) -> Path:
    """`make_clip`'s packets remuxed into MPEG-TS with every timestamp moved by `offset` 90 kHz ticks."""
    path = Path(path)
    source = make_clip(path.with_suffix(".src.mkv"), frames=frames, **clip)
    ts = Fraction(1, 90000)
    with av.open(str(source)) as inp, av.open(str(path), mode="w", format="mpegts") as out:
        streams = {s.index: out.add_stream_from_template(s) for s in inp.streams}
        for packet in inp.demux():
            if packet.pts is None and packet.dts is None:
                continue
            tb = Fraction(packet.time_base)
            packet.stream = streams[packet.stream.index]
            if packet.pts is not None:
                packet.pts = round(packet.pts * tb / ts) + offset
            if packet.dts is not None:
                packet.dts = round(packet.dts * tb / ts) + offset
            packet.time_base = ts
            out.mux(packet)
    source.unlink()
    return path


_DIVX_USER_DATA = b"\x00\x00\x01\xb2DivX503b1393p"  # "p": the decoder unpacks packed B-frames


def _not_coded_vop(increment_bits: int) -> bytes:
    """An MPEG-4 N-VOP (vop_coded 0): the placeholder chunk that follows a packed P+B chunk."""
    bits = "01" + "0" + "1" + "0" * increment_bits + "1" + "0"  # P, time base, marker, increment, marker
    bits += "0" + "1" * ((8 - (len(bits) + 1) % 8) % 8)  # stuffing to the byte
    return b"\x00\x00\x01\xb6" + int(bits, 2).to_bytes(len(bits) // 8, "big")


def _mpeg4_packets(frames: int, size: tuple[int, int], rate: Fraction, b_frames: int) -> list:
    """`frames` synthetic frames encoded as MPEG-4 part 2 (GOP 12), in decode order."""
    encoder = av.CodecContext.create("mpeg4", "w")
    encoder.width, encoder.height = size
    encoder.pix_fmt = "yuv420p"
    encoder.time_base = 1 / rate
    encoder.framerate = rate
    encoder.max_b_frames = b_frames
    encoder.gop_size = 12
    encoder.open()
    packets = []
    for i in range(frames):
        picture = av.VideoFrame.from_ndarray(synthetic_frame(i, size), format="bgr24").reformat(
            format="yuv420p"
        )
        picture.pts = i
        packets += encoder.encode(picture)
    return packets + list(encoder.encode(None))


def make_packed_avi(
    path: str | Path, *, frames: int = 80, size: tuple[int, int] = (128, 96), audio: str | None = "mp3"
) -> Path:
    """A DivX-style AVI at 24000/1001 fps: MPEG-4 part 2 with one B-frame after each P-frame,
    *packed* (each P-frame and its B-frame in one chunk, then an N-VOP chunk), timestamps only
    by chunk number, mp3 audio from 0. The frames are numbered as in `synthetic_frame`."""
    path = Path(path)
    rate = Fraction(24000, 1001)
    packets = _mpeg4_packets(frames, size, rate, b_frames=1)
    data = [bytes(p) for p in packets]
    first_vop = data[0].find(b"\x00\x00\x01\xb6")
    data[0] = data[0][:first_vop] + _DIVX_USER_DATA + data[0][first_vop:]
    chunks, i = [], 0
    while i < len(data):
        b_frame_next = i + 1 < len(packets) and packets[i + 1].pts < packets[i].pts
        if b_frame_next:
            chunks += [(data[i] + data[i + 1], False), (_not_coded_vop(15), False)]  # 24000 Hz: 15 bits
            i += 2
        else:
            chunks.append((data[i], packets[i].is_keyframe))
            i += 1
    with av.open(str(path), mode="w", format="avi") as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.codec_tag = "DX50"
        audio_stream = out.add_stream(audio, rate=AUDIO_RATE, layout="stereo") if audio else None
        for n, (chunk, keyframe) in enumerate(chunks):
            packet = av.Packet(chunk)
            packet.stream = stream
            packet.pts = packet.dts = n
            packet.time_base = 1 / rate
            packet.is_keyframe = keyframe
            out.mux(packet)
        if audio_stream is not None:
            _write_tone(out, audio_stream, float(frames / rate))
    return path


def make_dropped_frames_avi(
    path: str | Path,
    *,
    frames: int = 20,
    dropped_after: tuple[int, ...] = (5, 11),
    size: tuple[int, int] = (128, 96),
) -> Path:
    """An Xvid-style AVI at 25 fps (MPEG-4 part 2, no B-frames, mp3 audio) whose encoder dropped
    a frame after each frame in `dropped_after`: an N-VOP chunk ("the previous picture again")
    stands in its place, so the stream holds `frames + len(dropped_after)` chunks and a decoder
    returns `frames` pictures, each at its own chunk's time. The frames are numbered as in
    `synthetic_frame`."""
    path = Path(path)
    rate = Fraction(25)
    packets = _mpeg4_packets(frames, size, rate, b_frames=0)
    chunks = []
    for i, packet in enumerate(packets):
        chunks.append((bytes(packet), packet.is_keyframe))
        if i in dropped_after:
            chunks.append((_not_coded_vop(5), False))  # a time base of 1/25: 5 bits of increment
    with av.open(str(path), mode="w", format="avi") as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.codec_tag = "XVID"
        audio_stream = out.add_stream("mp3", rate=AUDIO_RATE, layout="stereo")
        for n, (chunk, keyframe) in enumerate(chunks):
            packet = av.Packet(chunk)
            packet.stream = stream
            packet.pts = packet.dts = n
            packet.time_base = 1 / rate
            packet.is_keyframe = keyframe
            out.mux(packet)
        _write_tone(out, audio_stream, float(len(chunks) / rate))
    return path


def make_trimmed_mp4(path: str | Path, *, frames: int = 40, lead: int = 5, fps: int = 25) -> Path:
    """An .mp4 whose edit list hides its first `lead` frames and the audio under them: `make_clip`'s
    packets (H.264 + AAC) remuxed `lead` frames earlier, so they start below 0. A decoder returns
    frames `lead`.. (by their drawn number), from pts 0."""
    path = Path(path)
    source = make_clip(path.with_suffix(".src.mkv"), frames=frames, size=(128, 96), fps=fps)
    early = Fraction(lead, fps)
    with av.open(str(source)) as inp, av.open(str(path), mode="w", format="mp4") as out:
        streams = {s.index: out.add_stream_from_template(s) for s in inp.streams}
        for packet in inp.demux():
            if packet.pts is None and packet.dts is None:
                continue
            ticks = round(early / Fraction(packet.time_base))
            packet.stream = streams[packet.stream.index]
            if packet.pts is not None:
                packet.pts -= ticks
            if packet.dts is not None:
                packet.dts -= ticks
            out.mux(packet)
    source.unlink()
    return path


def make_headless_h264(path: str | Path, *, frames: int = 25, gop: int = 6) -> Path:
    """A Matroska H.264 clip (128x96, 25 fps, no audio) that lost its first keyframe: the
    `gop - 1` P-frames before the next keyframe cannot be decoded, and the decoder drops them
    without an error. Frames are numbered from 1 (`frame_number`)."""
    path = Path(path)
    size = (128, 96)
    options = {"preset": "ultrafast", "g": str(gop), "keyint_min": str(gop), "bf": "0", "sc_threshold": "0"}
    with av.open(str(path), mode="w", format="matroska") as out:
        stream = out.add_stream("libx264", rate=25, options=options)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        packets = []
        for i in range(frames + 1):
            picture = av.VideoFrame.from_ndarray(synthetic_frame(i, size), format="bgr24")
            picture.pts = i
            packets += stream.encode(picture)
        packets += stream.encode(None)
        for packet in packets[1:]:  # the first keyframe is lost
            out.mux(packet)
    return path
