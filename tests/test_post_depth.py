"""High bit depth end to end and untouched pixels (issue 12): frames keep the decoder's own
pictures (video/pictures/native.py); only what the swap changed is composed back in, at the input's
precision. Clips are made here with PyAV; the checks decode the outputs plane by plane.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from media import encode_image, synthetic_frame
from test_cli import ffbatch_here

from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.encode.encoder_policy import EncoderSettings, check_output
from facefusion_batch.video.pictures.native import NativePicture, compose, native_format, rgb_box

SIZE = (128, 96)


def planes_of(frame: av.VideoFrame) -> list[np.ndarray]:
    """The frame's planes as they are stored (uint8 or uint16), without row padding."""
    if frame.format.name == "gray":  # a matte
        plane = frame.planes[0]
        return [np.frombuffer(plane, np.uint8).reshape(plane.height, -1)[:, : plane.width].astype(np.int64)]
    fmt = native_format(frame.format.name)
    out = []
    for plane in frame.planes[: fmt.planes]:
        rows = np.frombuffer(plane, fmt.dtype).reshape(plane.height, -1)
        out.append(rows[:, : plane.width * fmt.components].astype(np.int64))
    return out


def decoded_planes(path: Path) -> tuple[str, list[list[np.ndarray]], list[int]]:
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    return frames[0].format.name, [planes_of(f) for f in frames], [f.pts for f in frames]


def deep_picture(pix_fmt: str, index: int = 0, size: tuple[int, int] = SIZE) -> av.VideoFrame:
    """A synthetic picture in `pix_fmt` whose low bits carry detail 8 bits cannot hold."""
    frame = av.VideoFrame.from_ndarray(synthetic_frame(index, size), format="bgr24")
    frame = frame.reformat(format=pix_fmt, dst_colorspace=1, dst_color_range=1)
    fmt = native_format(pix_fmt)
    if fmt.bits > 8:
        picture = NativePicture.from_av(frame, pix_fmt, *size)
        rng = np.random.default_rng(index)
        for values in picture.planes:
            low = rng.integers(0, 1 << (fmt.bits - 8), values.shape)
            values[...] = np.clip(values.astype(np.int64) + low, 0, (1 << fmt.bits) - 1)
        frame = picture.to_av()
    frame.colorspace, frame.color_range = 1, 1
    return frame


def write_clip(
    path: Path, pix_fmt: str, codec: str = "ffv1", frames: int = 4, size: tuple[int, int] = SIZE, **options
) -> Path:
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=25, options={"level": "3"} if codec == "ffv1" else options)
        stream.width, stream.height = size
        stream.pix_fmt = pix_fmt
        ctx = stream.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = 1, 1, 1, 1
        for i in range(frames):
            frame = deep_picture(pix_fmt, i, size)
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


# -- composing the swap back into the native picture ------------------------------------------

RECTS = [(0, 10, 8, 30, 20), (0, 30, 20, 25, 30), (0, 90, 60, 20, 20)]


@pytest.mark.parametrize(
    "pix_fmt", ["yuv422p10le", "yuv420p10le", "yuv444p12le", "yuv420p", "rgb48le", "rgb48be", "gbrp16le"]
)
def test_compose_changes_only_the_painted_pixels_and_keeps_the_low_bits(pix_fmt):
    frame = deep_picture(pix_fmt)
    picture = NativePicture.from_av(frame, pix_fmt, *SIZE)
    before = [p.astype(np.int64) for p in picture.planes]
    original8 = frame.to_ndarray(format="bgr24")
    swapped8 = original8.copy()
    swapped8[10:26, 12:38] = (40, 180, 90)  # a "face" across the first two (overlapping) rectangles
    swapped8[22:45, 32:52] = (40, 180, 90)
    swapped8[70:75, 100:105] //= 2  # and a small change inside the third
    out = compose(picture, original8, swapped8, RECTS)
    after = [p.astype(np.int64) for p in out.planes]
    assert out is picture  # in place: the reader hands every frame a picture of its own
    fmt = native_format(pix_fmt)
    sx, sy = fmt.chroma_shift
    n = fmt.components
    changed = np.any(swapped8 != original8, axis=2)
    for index, (b, a) in enumerate(zip(before, after, strict=True)):
        mask = changed
        if fmt.kind == "yuv" and index:
            h, w = changed.shape
            mask = changed.reshape(h >> sy, 1 << sy, w >> sx, 1 << sx).any(axis=(1, 3))
        if n > 1:
            mask = np.repeat(mask, n, axis=1)
        assert np.array_equal(a[~mask], b[~mask]), f"plane {index}: an unpainted value changed"
        assert np.any(a[mask] != b[mask]), f"plane {index}: the painted pixels did not change"
    # The result, seen in 8 bits, is the swap; in full precision it keeps the input's fine detail.
    seen = out.to_av().to_ndarray(format="bgr24")
    # (the interior: a 4:2:0 picture shown in RGB blends chroma across the edge, as any would)
    assert np.abs(seen[24:43, 34:50].astype(int) - (40, 180, 90)).max() <= 3
    if fmt.bits > 8:
        luma = after[0] if n == 1 else after[0].reshape(SIZE[1], SIZE[0], n)[..., 1]
        assert len(np.unique(luma[22:45, 32:52] % (1 << (fmt.bits - 8)))) > 1


@pytest.mark.parametrize("pix_fmt", ["yuv444p12le", "yuv422p10le", "gbrp16le", "rgb48le"])
def test_rgb_box_reads_back_what_compose_added(pix_fmt):
    """native.rgb_box (the deep face layer's plate) is compose's arithmetic backwards: a change
    composed in reads back as that change, at the picture's precision (chroma kept per pixel
    where the format has it), and limited-range black and white are 0 and 1."""
    frame = deep_picture(pix_fmt)
    picture = NativePicture.from_av(frame, pix_fmt, *SIZE)
    box = (8, 10, 40, 30)
    before = rgb_box(picture, box)
    original8 = frame.to_ndarray(format="bgr24")
    swapped8 = original8.copy()
    swapped8[10:30, 8:40] = np.clip(swapped8[10:30, 8:40].astype(int) + (0, 12, -20), 0, 255)
    change = (swapped8.astype(float) - original8)[10:30, 8:40, ::-1] / 255
    after = rgb_box(compose(picture, original8, swapped8, [(0, 8, 10, 32, 20)]), box)
    step = 1 / ((1 << native_format(pix_fmt).bits) - 1)
    assert np.abs(after - before - change).max() < 4 * step
    black_white = NativePicture(
        "yuv444p10le",
        2,
        1,
        [np.array([[64, 940]], "<u2"), np.full((1, 2), 512, "<u2"), np.full((1, 2), 512, "<u2")],
    )
    assert np.allclose(rgb_box(black_white, (0, 0, 2, 1)), [[[0, 0, 0], [1, 1, 1]]], atol=1e-6)


def test_nothing_painted_returns_the_picture_itself():
    frame = deep_picture("yuv422p10le")
    picture = NativePicture.from_av(frame, "yuv422p10le", *SIZE)
    image = frame.to_ndarray(format="bgr24")
    assert compose(picture, image, image, []) is picture


# -- the checks before a render -------------------------------------------------------------------


def test_deep_inputs_into_deep_outputs_need_no_word_and_reductions_still_do(tmp_path):
    src = write_clip(tmp_path / "in.mkv", "yuv422p10le", frames=1, size=(256, 144))
    info = probe(src)
    assert check_output(EncoderSettings(codec="ffv1"), info, tmp_path / "o.mkv") == []
    assert check_output(EncoderSettings(codec="prores_ks", profile="hq"), info, tmp_path / "o.mov") == []
    assert check_output(EncoderSettings(codec="dnxhd", profile="hqx"), info, tmp_path / "o.mxf") == []
    with pytest.raises(Exception, match=r"10-bit .* holds 8 bits.*--allow-reduce"):
        check_output(EncoderSettings(codec="dnxhd", profile="hq"), info, tmp_path / "o.mxf")
    deep = write_clip(tmp_path / "rgb.mkv", "gbrp16le")
    assert check_output(EncoderSettings(codec="ffv1"), probe(deep), tmp_path / "o.mkv") == []
    assert check_output(EncoderSettings(), probe(deep), tmp_path / "o.%04d.png") == []
    assert check_output(EncoderSettings(), probe(deep), tmp_path / "o.%04d.tif") == []


def test_hdr_stays_hdr_without_allow_reduce(tmp_path):
    src = tmp_path / "pq.mkv"
    with av.open(str(src), "w") as out:
        stream = out.add_stream(
            "libx265", rate=25, options={"preset": "ultrafast", "x265-params": "log-level=0"}
        )
        stream.width, stream.height = SIZE
        stream.pix_fmt = "yuv420p10le"
        ctx = stream.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = 9, 1, 9, 16
        for i in range(2):
            frame = deep_picture("yuv420p10le", i)
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    info = probe(src)
    assert info.color_trc == 16
    assert check_output(EncoderSettings(codec="libx265"), info, tmp_path / "o.mkv") == []
    with pytest.raises(Exception, match="8 bits; choose a 10-bit"):
        check_output(
            EncoderSettings(codec="libx265", pix_fmt="yuv420p", allow_reduce=True), info, tmp_path / "o.mkv"
        )


# -- end to end -------------------------------------------------------------------------------------


MASTER_FRAMES = 4  # a swap in every one; the 2000-pixel floors below are met in each frame


@pytest.fixture(scope="module")
def face_master(tmp_path_factory, face_clip) -> Path:
    """The first 4 frames of the face clip as 10-bit 4:2:2 FFV1 (BT.709), with detail in the
    two low bits of every plane, so an 8-bit pass would show."""
    path = tmp_path_factory.mktemp("depth") / "master.mkv"
    rng = np.random.default_rng(7)
    with av.open(str(face_clip)) as src, av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=25, options={"level": "3"})
        stream.width, stream.height = 640, 360
        stream.pix_fmt = "yuv422p10le"
        ctx = stream.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = 1, 1, 1, 1
        for i, frame in enumerate(src.decode(video=0)):
            if i == MASTER_FRAMES:
                break
            deep = frame.reformat(format="yuv422p10le", dst_colorspace=1, dst_color_range=1)
            picture = NativePicture.from_av(deep, "yuv422p10le", 640, 360)
            for values in picture.planes:
                values[...] = np.clip(values.astype(np.int64) + rng.integers(0, 4, values.shape), 0, 1023)
            deep = picture.to_av()
            deep.colorspace, deep.color_range = 1, 1
            deep.pts = i
            out.mux(stream.encode(deep))
        out.mux(stream.encode(None))
    return path


def test_ten_bit_422_into_ffv1_is_untouched_outside_the_faces(face_master, astronaut_path, tmp_path):
    out, report = tmp_path / "out.mkv", tmp_path / "report.json"
    proc = ffbatch_here(
        "render", face_master, "-s", astronaut_path, "-o", out, "--encoder", "ffv1",
        "--backend", "cpu", "--report", report, "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["reduced"] == [] and data["faces_swapped"] > 0
    assert data["frames_as"].startswith("native yuv422p10le")
    fmt_in, frames_in, pts_in = decoded_planes(face_master)
    fmt_out, frames_out, pts_out = decoded_planes(out)
    assert (fmt_out, pts_out) == (fmt_in, pts_in) and fmt_in == "yuv422p10le" and len(pts_in) == MASTER_FRAMES
    made = probe(out)
    assert (made.color_space, made.color_primaries, made.color_trc) == (1, 1, 1)
    same = changed = 0
    for before, after in zip(frames_in, frames_out, strict=True):
        luma_changed = before[0] != after[0]
        chroma_changed = (before[1] != after[1]) | (before[2] != after[2])
        # chroma changes only beside changed luma (an equal-luminance tint moves chroma alone)
        near = cv2.dilate(luma_changed.astype(np.uint8), np.ones((9, 9), np.uint8))[:, ::2]
        assert not np.any(chroma_changed & (near == 0))
        same += int((~luma_changed).sum())
        changed += int(luma_changed.sum())
        ys, xs = np.nonzero(luma_changed)
        if len(ys):  # inside the faces the two low bits still vary: 10-bit, not 8-bit * 4
            assert len(np.unique(after[0][ys, xs] % 4)) == 4
    assert changed > 2000, "the faces were swapped"
    assert same > 0.8 * MASTER_FRAMES * 640 * 360, "everything else left bit for bit as decoded"


def test_eight_bit_ffv1_is_untouched_outside_the_faces(face_clip, astronaut_path, tmp_path):
    """The CPU path no longer round-trips whole frames through BGR: an 8-bit 4:2:0 input into a
    lossless output keeps every pixel the swap did not paint."""
    out = tmp_path / "out.mkv"
    proc = ffbatch_here(
        "render", face_clip, "-s", astronaut_path, "-o", out, "--encoder", "ffv1", "--backend", "cpu",
        "--frames", "0:6", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    fmt_in, frames_in, _ = decoded_planes(face_clip)
    fmt_out, frames_out, _ = decoded_planes(out)
    assert fmt_out == fmt_in == "yuv420p" and len(frames_out) == 6
    same = changed = 0
    for before, after in zip(frames_in[:6], frames_out, strict=True):
        luma = before[0] != after[0]
        chroma = (before[1] != after[1]) | (before[2] != after[2])
        luma |= np.repeat(np.repeat(chroma, 2, axis=0), 2, axis=1)
        same += int((~luma).sum())
        changed += int(luma.sum())
    assert changed > 1000 and same > 0.8 * 6 * 640 * 360


def test_sixteen_bit_png_sequence_keeps_sixteen_bits(tmp_path, astronaut_path):
    """A 16-bit RGB sequence (no face in it) through a render into a 16-bit PNG sequence comes
    out identical, every bit (it used to become 8-bit silently)."""
    folder = tmp_path / "plate"
    folder.mkdir()
    for i in range(3):
        (folder / f"p.{i + 1:04d}.png").write_bytes(encode_image(deep_picture("rgb48be", i), "png"))
    out = tmp_path / "out.%04d.png"
    proc = ffbatch_here(
        "render", folder / "p.%04d.png", "-s", astronaut_path, "-o", out, "--fps", "25",
        "--backend", "cpu", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for i in range(3):
        with (
            av.open(str(folder / f"p.{i + 1:04d}.png")) as a,
            av.open(str(tmp_path / f"out.{i + 1:04d}.png")) as b,
        ):
            fa, fb = next(a.decode(video=0)), next(b.decode(video=0))
        assert fb.format.name == "rgb48be"
        assert np.array_equal(fa.to_ndarray(), fb.to_ndarray())
    # into FFV1: 16-bit planar RGB, the same values
    video = tmp_path / "out.mkv"
    proc = ffbatch_here(
        "render", folder / "p.%04d.png", "-s", astronaut_path, "-o", video, "--fps", "25",
        "--encoder", "ffv1", "--backend", "cpu", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with av.open(str(video)) as container:
        frames = list(container.decode(video=0))
    assert [f.format.name for f in frames] == ["gbrp16le"] * 3
    for i, frame in enumerate(frames):
        with av.open(str(folder / f"p.{i + 1:04d}.png")) as a:
            expected = next(a.decode(video=0)).to_ndarray(format="rgb48le")
        assert np.array_equal(frame.to_ndarray(format="rgb48le"), expected)


# -- the matte --------------------------------------------------------------------------------------


def render_with_matte(face_master: Path, astronaut_path: Path, tmp_path: Path, matte: Path, *extra):
    out = tmp_path / "out.mkv"
    proc = ffbatch_here(
        "render", face_master, "-s", astronaut_path, "-o", out, "--encoder", "ffv1", "--backend", "cpu",
        "--matte-output", matte, "-q", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("blend", ["feather", "multiband"])
def test_matte_is_the_paste_alpha_frame_for_frame(face_master, astronaut_path, tmp_path, blend):
    """Frame for frame with the output's timestamps; nonzero wherever the output differs from the
    input and, where the alpha is strong, the output differs (multiband: its widest level)."""
    matte = tmp_path / "matte.mkv"
    out = render_with_matte(face_master, astronaut_path, tmp_path, matte, "--blend", blend)
    _, frames_in, _ = decoded_planes(face_master)
    _, frames_out, pts_out = decoded_planes(out)
    fmt, mattes, pts_matte = decoded_planes(matte)
    assert fmt == "gray" and pts_matte == pts_out and len(mattes) == MASTER_FRAMES
    assert probe(matte).average_rate == probe(out).average_rate
    inside = outside = strong = strong_changed = 0
    for before, after, (alpha,) in zip(frames_in, frames_out, mattes, strict=True):
        changed = before[0] != after[0]
        outside += int((changed & (alpha == 0)).sum())
        inside += int((changed & (alpha > 0)).sum())
        strong += int((alpha > 64).sum())
        strong_changed += int((changed & (alpha > 64)).sum())
    assert inside > 2000 and strong_changed > 0.9 * strong
    assert outside == 0


def test_matte_as_a_png_sequence_numbered_as_the_output(face_master, astronaut_path, tmp_path):
    out = render_with_matte(
        face_master, astronaut_path, tmp_path, tmp_path / "m.%04d.png", "--start-number", "7"
    )
    names = sorted(p.name for p in tmp_path.glob("m.*.png"))
    assert names == [f"m.{n:04d}.png" for n in range(7, 7 + MASTER_FRAMES)]
    _, frames_in, _ = decoded_planes(face_master)
    _, frames_out, _ = decoded_planes(out)
    with av.open(str(tmp_path / "m.0010.png")) as image:
        alpha = image.decode(video=0).__next__().to_ndarray()
    assert alpha.dtype == np.uint8 and alpha.shape == (360, 640)
    changed = frames_in[3][0] != frames_out[3][0]
    assert changed.any() and not np.any(changed & (alpha == 0))


def test_a_deep_inputs_face_layer_keeps_its_low_bits(face_master, astronaut_path, tmp_path):
    """The 16-bit face layer of a 10-bit input takes its plate from the frame's own picture: where
    its alpha is full it is the 10-bit output's colour (low bits and all, not an 8-bit value
    times 257), and over the input it gives the output back. (RGB of the 10-bit pictures by
    native.rgb_box: swscale's rgb48 scales 10 bits by 64 · 1.004, white is 65283, not 65535.)"""
    layer = tmp_path / "face.%04d.png"
    out = render_with_matte(
        face_master, astronaut_path, tmp_path, tmp_path / "m.%04d.png", "--blend", "feather",
        "--face-only-output", layer,
    )  # fmt: skip

    def rgb16(path: Path) -> list[np.ndarray]:
        with av.open(str(path)) as container:
            pictures = [NativePicture.from_av(f, f.format.name, 640, 360) for f in container.decode(video=0)]
        return [rgb_box(p, (0, 0, 640, 360)).astype(np.float64) * 65535 for p in pictures]

    full = deep = 0
    for n, (plate, output) in enumerate(zip(rgb16(face_master), rgb16(out), strict=True)):
        with av.open(str(tmp_path / f"face.{1001 + n:04d}.png")) as image:
            face = image.decode(video=0).__next__().to_ndarray(format="rgba64le").astype(np.float64)
        alpha = face[..., 3] / 65535
        opaque = alpha == 1
        full += int(opaque.sum())
        deep += int((face[opaque][:, :3] % 257 != 0).sum())
        # luma (BT.709): the output's chroma holds the mean change of the two pixels it covers
        luma = np.array([0.2126, 0.7152, 0.0722])
        d = np.abs(face[opaque][:, :3] @ luma - output[opaque] @ luma)
        assert np.median(d) < 0.25 * 257 and np.percentile(d, 99) < 257, (np.median(d), np.percentile(d, 99))
        inside = alpha > 0
        back = alpha[..., None] * face[..., :3] + (1 - alpha[..., None]) * plate
        assert np.percentile(np.abs(back @ luma - output @ luma)[inside], 99) < 257
    assert full > 2000 and deep > 0.5 * 3 * full


def test_matte_refused_in_formats_it_is_not_written_in(face_clip, astronaut_path, tmp_path):
    base = ("render", face_clip, "-s", astronaut_path, "-o", tmp_path / "o.mkv", "--encoder", "ffv1")
    for extra, words in (
        (("--matte-output", tmp_path / "m.%04d.jpg"), "a matte sequence is written as"),
        (("--matte-output", tmp_path / "m.mp4"), "FFV1 in .mkv or .avi"),
        (("--matte-output", tmp_path / "m.%04d.exr"), "a matte sequence is written as"),
    ):
        proc = ffbatch_here(*base, *extra)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# -- interlaced -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interlaced_master(tmp_path_factory, face_clip) -> Path:
    """6 frames of 10-bit 4:2:2 FFV1 tagged top field first whose fields are two moments of the
    face clip's pan (top rows from picture 2i, bottom rows from 2i+1), as a camera records them."""
    path = tmp_path_factory.mktemp("fields") / "tff.mkv"
    with av.open(str(face_clip)) as src:
        pictures = [
            f.to_ndarray(format="bgr24") for f, _ in zip(src.decode(video=0), range(12), strict=False)
        ]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=25, options={"level": "3"})
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv422p10le"
        stream.codec_context.field_order = 2
        for i in range(6):
            woven = pictures[2 * i].copy()
            woven[1::2] = pictures[2 * i + 1][1::2]
            frame = av.VideoFrame.from_ndarray(woven, format="bgr24").reformat(format="yuv422p10le")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def test_interlaced_input_is_swapped_per_field_and_keeps_its_field_order(
    interlaced_master, astronaut_path, tmp_path
):
    out, report, matte = tmp_path / "out.mkv", tmp_path / "r.json", tmp_path / "m.mkv"
    proc = ffbatch_here(
        "render", interlaced_master, "-s", astronaut_path, "-o", out, "--encoder", "ffv1",
        "--backend", "cpu", "--report", report, "--matte-output", matte, "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert "swapped per field (top first)" in data["frames_as"] and data["faces_swapped"] > 0
    assert probe(out).field_order == 2
    _, frames_in, pts_in = decoded_planes(interlaced_master)
    fmt, frames_out, pts_out = decoded_planes(out)
    _, mattes, _ = decoded_planes(matte)
    assert fmt == "yuv422p10le" and pts_out == pts_in
    top = bottom = 0
    for before, after, (alpha,) in zip(frames_in, frames_out, mattes, strict=True):
        changed = before[0] != after[0]
        assert not np.any(changed & (alpha == 0)), "only where faces were pasted"
        top += int(changed[0::2].sum())
        bottom += int(changed[1::2].sum())
    assert top > 1000 and bottom > 1000, "both fields swapped"


def test_interlaced_input_into_x264_is_coded_interlaced_in_its_field_order(
    interlaced_master, astronaut_path, tmp_path
):
    out, report = tmp_path / "out.mov", tmp_path / "r.json"
    proc = ffbatch_here(
        "render", interlaced_master, "-s", astronaut_path, "-o", out, "--encoder", "libx264",
        "--pix-fmt", "yuv422p10le", "--backend", "cpu", "--report", report, "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert probe(out).field_order == 2
    assert "tff=1" in json.loads(report.read_text())["encoder_parameters"]["options"]["x264-params"]
    with av.open(str(out)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 6 and all(f.interlaced_frame for f in frames)  # frame flags, not only the tag
