"""Input format x output format: what a render keeps (issue 12's closing table).

Makes one small clip with a face (scripts/bench.py's pan over the astronaut portrait, 640x360,
8 frames), writes it in several facility formats, renders each into several outputs with
`--matte-output`, and prints per pair: pixel format and bit depth in and out, the largest
|difference| of any plane sample outside the faces (where the matte is 0; in the input's code
values, after converting the output back to the input's pixel format if it differs) and the
colour tags kept.

    python scripts/fidelity_table.py [--out out/fidelity]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import make_clip  # noqa: E402

from facefusion_batch.models.assets import asset_path  # noqa: E402
from facefusion_batch.video.decode.probe import probe  # noqa: E402
from facefusion_batch.video.pictures.native import NativePicture, native_format  # noqa: E402

SIZE = (640, 360)
# name -> (suffix, codec, pix_fmt, options, (colorspace, range, primaries, transfer))
INPUTS = {
    "H.264 8-bit 4:2:0": (".mp4", "libx264", "yuv420p", {"crf": "12", "preset": "ultrafast"}, (1, 1, 1, 1)),
    "ProRes HQ 10-bit 4:2:2": (".mov", "prores_ks", "yuv422p10le", {"profile": "3"}, (1, 1, 1, 1)),
    "FFV1 10-bit 4:2:2": (".mkv", "ffv1", "yuv422p10le", {"level": "3"}, (1, 1, 1, 1)),
    "FFV1 12-bit 4:4:4": (".mkv", "ffv1", "yuv444p12le", {"level": "3"}, (1, 1, 1, 1)),
    "x265 10-bit PQ": (".mkv", "libx265", "yuv420p10le", {"preset": "ultrafast", "crf": "8"}, (9, 1, 9, 16)),
    "16-bit PNG sequence": (".png", "png", "rgb48be", {}, None),
}
OUTPUTS = {
    "FFV1 .mkv": ("out.mkv", ["--encoder", "ffv1"]),
    "ProRes HQ .mov": ("out.mov", ["--encoder", "prores_ks", "--profile", "hq"]),
    "ProRes 4444 .mov": ("out.mov", ["--encoder", "prores_ks", "--profile", "4444"]),
    "x265 .mkv": ("out.mkv", ["--encoder", "libx265", "--crf", "4"]),
    "16-bit TIFF seq": ("out.%04d.tif", []),
}


def write_input(clip: Path, folder: Path, name: str) -> Path:
    suffix, codec, pix_fmt, options, colour = INPUTS[name]
    with av.open(str(clip)) as src:
        frames = [f for f, _ in zip(src.decode(video=0), range(8), strict=False)]
    if codec == "png":
        seq = folder / "seq"
        seq.mkdir(parents=True, exist_ok=True)
        for i, frame in enumerate(frames):
            ctx = av.CodecContext.create("png", "w")
            ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = *SIZE, pix_fmt, Fraction(1, 25)
            packets = ctx.encode(frame.reformat(format=pix_fmt)) + ctx.encode(None)
            (seq / f"p.{i + 1:04d}.png").write_bytes(b"".join(bytes(p) for p in packets))
        return seq / "p.%04d.png"
    path = folder / f"in{suffix}"
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=25, options=options)
        stream.width, stream.height, stream.pix_fmt = *SIZE, pix_fmt
        ctx = stream.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = colour
        for i, frame in enumerate(frames):
            deep = frame.reformat(format=pix_fmt, dst_colorspace=colour[0], dst_color_range=1)
            deep.pts, deep.time_base = i, Fraction(1, 25)
            out.mux(stream.encode(deep))
        out.mux(stream.encode(None))
    return path


def pictures(path: Path, pix_fmt: str) -> list[list[np.ndarray]]:
    """Every frame's planes, converted to `pix_fmt` first where it was written in another."""
    if "%" in path.name:
        files = sorted(path.parent.glob(path.name.replace("%04d", "*")))
    else:
        files = [path]
    out = []
    for file in files:
        with av.open(str(file)) as container:
            for frame in container.decode(video=0):
                if pix_fmt == "gray":  # a matte
                    plane = frame.planes[0]
                    rows = np.frombuffer(plane, np.uint8).reshape(plane.height, -1)[:, : frame.width]
                    out.append([rows.astype(np.int64)])
                    continue
                picture = NativePicture.from_av(frame, pix_fmt, frame.width, frame.height)
                out.append([p.astype(np.int64) for p in picture.planes])
    return out


def outside_diff(before, after, mattes, pix_fmt: str) -> int:
    fmt = native_format(pix_fmt)
    worst = 0
    for b, a, m in zip(before, after, mattes, strict=True):
        outside = m[0] == 0
        for index, (pb, pa) in enumerate(zip(b, a, strict=True)):
            mask = outside
            if fmt.kind == "yuv" and index:
                sx, sy = fmt.chroma_shift
                mask = (
                    cv2.erode(outside.astype(np.uint8), np.ones((3, 3), np.uint8))[:: 1 << sy, :: 1 << sx] > 0
                )
            if fmt.components > 1:
                mask = np.repeat(mask, fmt.components, axis=1)
            if mask.any():
                worst = max(worst, int(np.abs(pa - pb)[mask].max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "fidelity")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    clip = make_clip(args.out / "clip.mp4", 1, SIZE, 8)
    source = asset_path("astronaut.png")
    print("| input | output | pix_fmt in → out | bits in → out | max abs diff outside faces | colour tags |")
    print("|---|---|---|---|---|---|")
    for name in INPUTS:
        folder = args.out / name.replace(" ", "_")
        folder.mkdir(exist_ok=True)
        src = write_input(clip, folder, name)
        info = probe(src, fps=25 if "%" in src.name else None)
        for out_name, (out_file, options) in OUTPUTS.items():
            work = folder / out_name.replace(" ", "_").replace(".", "")
            work.mkdir(exist_ok=True)
            out, matte = work / out_file, work / "matte.mkv"
            command = [sys.executable, "-m", "facefusion_batch", "render", str(src), "-s", str(source)]
            command += ["-o", str(out), "--backend", "cpu", "--matte-output", str(matte), "--overwrite", "-q"]
            command += options + (["--fps", "25"] if "%" in src.name else [])
            proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                reason = proc.stderr.strip().splitlines()[-1][:90]
                print(f"| {name} | {out_name} | {info.pix_fmt} → refused | | | `{reason}` |")
                continue
            made = probe(out, fps=25 if "%" in out.name else None)
            before, after = pictures(src, info.pix_fmt), pictures(out, info.pix_fmt)
            diff = outside_diff(before, after, pictures(matte, "gray"), info.pix_fmt)
            tags = (made.color_space, made.color_primaries, made.color_trc) == (
                info.color_space,
                info.color_primaries,
                info.color_trc,
            )
            print(
                f"| {name} | {out_name} | {info.pix_fmt} → {made.pix_fmt} "
                f"| {info.bit_depth} → {made.bit_depth} "
                f"| {diff} (of {(1 << info.bit_depth) - 1}) | {'yes' if tags else 'no'} |"
            )


if __name__ == "__main__":
    main()
