"""The classical face pipeline with the frames resident on the device.

Frames cross to the device once (one pinned staging buffer, a non-blocking
copy) and back once. In between, on the worker's own CUDA stream:

- detection: letterbox → YuNet → anchor decoding and the score threshold on
  the device; only the candidates (a few dozen numbers per frame) go to the
  host for NMS;
- mesh: each face's crop is warped out of the resident frames (grid_sample)
  and the 468 points come back (small);
- swap: the rasteriser still runs on the host (it produces per-face warp maps,
  not pictures); the source textures live on the device; texture sampling,
  colour transfer, blending and the paste into the frame run on the device,
  for all the faces of a batch at once (runtime/device_paint.py).

With yuv420p planes (`planes=`, video/planes.py) the decoder's planes cross
instead, at half the bytes; the device converts them to BGR, and after the swap
converts back only the rectangles it painted, so every other pixel leaves
exactly as it was decoded.

It reuses the host stages' settings, sources and pure functions, so both paths
compute the same thing; tests/test_gpu_device_pipeline.py holds them to that on
the CPU. The Poisson blend has no device twin: for `--blend poisson` that one
step round-trips the face region through OpenCV.
"""

from __future__ import annotations

import numpy as np
import torch

from facefusion_batch.faces.detect import STRIDES, YuNetDetector
from facefusion_batch.faces.mesh import (
    MESH_SIZE,
    FaceMesh,
    invert_affines,
    roi_affines,
    roi_from_detection,
    roi_from_mesh,
)
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.pipeline.report import StageTimer
from facefusion_batch.runtime import device_ops as D
from facefusion_batch.runtime.device_paint import FaceRegion, paint_faces
from facefusion_batch.runtime.streams import DeviceTimer, download, is_cuda, on_thread_stream
from facefusion_batch.video.planes import PlaneLayout


def _run_device(session, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    run = getattr(session, "run_device", None)
    if run is not None:
        return run(feeds)
    # a host session (onnxruntime): still correct, just not resident
    out = session.run({k: v.detach().cpu().numpy() for k, v in feeds.items()})
    device = next(iter(feeds.values())).device
    return {k: D.to_device(v, device) for k, v in out.items()}


def stage_frames(images: list[np.ndarray], device) -> torch.Tensor:
    """Same-sized frames (BGR, or packed planes) → one uint8 [B, ...] device tensor: one pinned
    buffer, one copy."""
    first = images[0]
    if not is_cuda(device):
        return torch.from_numpy(np.stack(images))
    pinned = torch.empty((len(images), *first.shape), dtype=torch.uint8, pin_memory=True)
    host = pinned.numpy()
    for i, image in enumerate(images):
        host[i] = image
    return pinned.to(device, non_blocking=True)


def decode_device(
    outputs: dict[str, torch.Tensor], batch: int, height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """faces.detect.decode on device tensors: scores [N,A], boxes [N,A,4], landmarks [N,A,5,2]."""
    scores, boxes, landmarks = [], [], []
    device = next(iter(outputs.values())).device
    for stride in STRIDES:
        rows, cols = height // stride, width // stride
        anchors = rows * cols
        cls = outputs[f"cls_{stride}"].reshape(batch, anchors)
        obj = outputs[f"obj_{stride}"].reshape(batch, anchors)
        bbox = outputs[f"bbox_{stride}"].reshape(batch, anchors, 4)
        kps = outputs[f"kps_{stride}"].reshape(batch, anchors, 5, 2)
        a = torch.arange(anchors, device=device)
        grid = torch.stack([a % cols, a // cols], dim=-1).to(torch.float32)
        scores.append(torch.sqrt(torch.clamp(cls, 0, 1) * torch.clamp(obj, 0, 1)))
        centre = (grid + bbox[..., :2]) * stride
        wh = torch.exp(bbox[..., 2:4]) * stride
        boxes.append(torch.cat([centre - wh / 2, centre + wh / 2], dim=-1))
        landmarks.append((kps + grid[None, :, None, :]) * stride)
    return torch.cat(scores, 1), torch.cat(boxes, 1), torch.cat(landmarks, 1)


def detect_device(detector: YuNetDetector, frames: torch.Tensor, timer: DeviceTimer) -> FaceTable:
    """YuNetDetector.__call__ on resident frames; NMS on the host over the candidates only."""
    import cv2

    settings = detector.settings
    n = frames.shape[0]
    with timer.stage("device:letterbox", frames.device):
        batch, scales = D.letterbox(frames, settings.input_size)
    outputs = _run_device(detector.session, {detector.input_name: batch})
    with timer.stage("device:decode", frames.device):
        scores, boxes, landmarks = decode_device(outputs, n, batch.shape[2], batch.shape[3])
        keep = scores >= settings.score_threshold
        frame_of, anchor = torch.nonzero(keep, as_tuple=True)
    found = download(
        {
            "frame": frame_of,
            "score": scores[frame_of, anchor],
            "box": boxes[frame_of, anchor],
            "landmarks": landmarks[frame_of, anchor],
        }
    )
    frame_of = found["frame"]
    box = found["box"] / scales[frame_of][:, None]
    lm = found["landmarks"] / scales[frame_of][:, None, None]
    score = found["score"]
    frame_index, rows = [], []
    for i in range(n):
        cand = np.flatnonzero(frame_of == i)
        if cand.size == 0:
            continue
        xywh = box[cand].astype(np.float64)
        xywh[:, 2:] -= xywh[:, :2]
        kept = cv2.dnn.NMSBoxes(
            xywh.tolist(), score[cand].tolist(), settings.score_threshold, settings.nms_iou
        )
        kept = np.asarray(kept, dtype=np.int64).reshape(-1)[: settings.max_faces_per_frame]
        chosen = cand[kept]
        chosen = chosen[np.argsort(-score[chosen], kind="stable")]
        frame_index.append(np.full(chosen.shape, i, np.int32))
        rows.append(chosen)
    if not rows:
        return FaceTable.empty()
    r = np.concatenate(rows)
    return FaceTable(
        frame_index=np.concatenate(frame_index),
        box=box[r].astype(np.float32),
        landmarks5=lm[r].astype(np.float32),
        score=score[r].astype(np.float32),
    )


def mesh_device(mesh: FaceMesh, frames: torch.Tensor, table: FaceTable, timer: DeviceTimer) -> FaceTable:
    """FaceMesh.__call__ with the crops warped out of the resident frames."""
    if len(table) == 0:
        return table.with_columns(mesh=np.zeros((0, 468, 3), np.float32), presence=np.zeros((0,), np.float32))
    settings = mesh.settings

    def run_pass(roi: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
        affines = roi_affines(*roi)
        with timer.stage("device:crop", frames.device):
            m = D.to_device(affines, frames.device, torch.float64)
            crops = D.warp_affine(frames, table.frame_index, m, (MESH_SIZE, MESH_SIZE))
            # the host path stores crops as uint8, RGB, then scales to [0, 1]
            batch = torch.clamp(torch.round(crops), 0, 255).flip(1) / 255.0
        out = download(_run_device(mesh.session, {mesh.input_name: batch}))
        f = len(table)
        points = out[mesh.points_name].reshape(f, 468, 3).astype(np.float64)
        presence = out[mesh.presence_name].reshape(f).astype(np.float32)
        inverse = invert_affines(affines)
        xy = np.einsum("fij,fnj->fni", inverse[:, :, :2], points[:, :, :2]) + inverse[:, None, :, 2]
        z = points[:, :, 2] * (roi[1][:, None] / MESH_SIZE)
        return np.concatenate([xy, z[..., None]], axis=-1).astype(np.float32), presence

    points, presence = run_pass(roi_from_detection(table, settings.box_scale))
    for _ in range(settings.passes - 1):
        points, presence = run_pass(roi_from_mesh(points, settings.mesh_scale))
    table = table.with_columns(mesh=points, presence=presence)
    return table.select(presence > settings.presence_threshold)


Rect = tuple[int, int, int, int, int]  # frame, x, y, width, height


def planes_to_bgr(staged: torch.Tensor, layout: PlaneLayout) -> torch.Tensor:
    """Packed yuv420p frames [B, H*3/2, W] → BGR uint8 [B, H, W, 3] (a new tensor)."""
    y, u, v = D.i420_planes(staged, layout.height, layout.width)
    return D.yuv420p_to_bgr(y, u, v, matrix=layout.matrix, full_range=layout.full_range)


def write_back_planes(
    staged: torch.Tensor, frames: torch.Tensor, layout: PlaneLayout, rects: list[Rect]
) -> None:
    """Convert the painted rectangles of `frames` (widened to even bounds) back into the packed
    yuv420p `staged` frames, in place; the rest of `staged` keeps the decoder's values."""
    height, width = layout.height, layout.width
    quarter = (height // 2) * (width // 2)
    for fi, x, y, w, h in rects:
        x0, y0 = x - x % 2, y - y % 2
        x1, y1 = min(width, x + w + (x + w) % 2), min(height, y + h + (y + h) % 2)
        if x1 <= x0 or y1 <= y0:
            continue
        luma, cb, cr = D.bgr_to_yuv420p(
            frames[fi : fi + 1, y0:y1, x0:x1], matrix=layout.matrix, full_range=layout.full_range
        )
        staged[fi, y0:y1, x0:x1] = luma[0]
        chroma = staged[fi, height:].view(-1)  # U then V, each (H/2, W/2): views, written in place
        u = chroma[:quarter].view(height // 2, width // 2)
        v = chroma[quarter : 2 * quarter].view(height // 2, width // 2)
        u[y0 // 2 : y1 // 2, x0 // 2 : x1 // 2] = cb[0]
        v[y0 // 2 : y1 // 2, x0 // 2 : x1 // 2] = cr[0]


class DeviceClassicalSwap:
    """ClassicalSwapper.__call__ painting into resident frames."""

    def __init__(self, swapper, device) -> None:
        self.swapper = swapper
        self.settings = swapper.settings
        self.device = device
        with on_thread_stream(device):
            self.textures = [
                torch.from_numpy(np.ascontiguousarray(s.texture.transpose(2, 0, 1))).to(device)
                for s in swapper.sources
            ]
            if is_cuda(device):  # uploaded once on this thread's stream; every worker stream reads them
                torch.cuda.current_stream(device).synchronize()

    def __call__(self, frames: torch.Tensor, table: FaceTable, timer: DeviceTimer) -> list[Rect]:
        """Paint every face of `table` into `frames`; returns the rectangles painted."""
        from facefusion_batch.swap.classical import eye_frame, warp_map
        from facefusion_batch.swap.raster import rasterize

        if len(table) == 0:
            return []
        sw = self.swapper
        choice = sw.choose_sources(table)
        src_mesh = np.stack([sw.sources[c].mesh[:, :2] for c in choice])
        height, width = frames.shape[1:3]
        # the host swapper's geometry, step for step: per-face raster scale, warp maps on the host
        scales = sw.raster_scales(table)
        shapes = np.tile(np.array([[height, width]], np.float64), (len(table), 1))
        bounds = np.ceil(shapes * scales[:, None]).astype(np.int64)
        dst = table.mesh[:, :, :2] * scales[:, None, None]
        cov = rasterize(dst, src_mesh, table.mesh[:, :, 2], sw.triangles, bounds)
        order = np.argsort(cov.face, kind="stable")
        bounds = np.searchsorted(cov.face[order], np.arange(len(table) + 1))
        regions: list[FaceRegion] = []
        for f in range(len(table)):
            rows = order[bounds[f] : bounds[f + 1]]
            if rows.size < 16:
                continue
            map_x, map_y, (x0, y0) = warp_map(
                cov.x[rows], cov.y[rows], cov.src_x[rows], cov.src_y[rows], float(scales[f]), (height, width)
            )
            iod = 0.7 * eye_frame(table.mesh[f])[1]
            sigma = max(1.0, self.settings.shading_scale * iod)
            regions.append(
                FaceRegion(int(table.frame_index[f]), int(x0), int(y0), map_x, map_y, int(choice[f]), sigma)
            )
        with timer.stage("device:paint", frames.device):
            paint_faces(frames, regions, self.textures, self.settings, host_blend=self._host_blend)
        return [(r.frame, r.x0, r.y0, r.width, r.height) for r in regions]

    def _host_blend(self, target, face, alpha):
        from facefusion_batch.swap.blend import blend

        host = download({"t": target.permute(1, 2, 0), "f": face.permute(1, 2, 0), "a": alpha})
        out = blend(self.settings.blend, host["t"].copy(), host["f"].copy(), host["a"].copy())
        return D.to_device(np.ascontiguousarray(out), target.device).permute(2, 0, 1)


class ResidentPipeline:
    """What the device twins share: frames (BGR, or yuv420p planes) cross to the device once,
    the stages of `_swap` paint into them there, and they come back once. Same call and
    BatchResult as the host pipelines."""

    def __init__(self, host_pipeline, backend) -> None:
        from facefusion_batch.runtime.device_learned import DeviceEnhancer

        self.host = host_pipeline
        self.backend = backend
        self.device = torch.device(backend.device)
        self.device_timer: DeviceTimer = getattr(backend, "timer", None) or DeviceTimer()
        enhancer = getattr(host_pipeline, "enhancer", None)
        self.enhancer = DeviceEnhancer(enhancer) if enhancer is not None else None

    @property
    def timer(self) -> StageTimer:
        return self.host.timer

    @timer.setter
    def timer(self, value: StageTimer) -> None:
        self.host.timer = value

    @property
    def accepts_planes(self) -> bool:
        """Whether yuv420p planes may come in and go out: only when no host stage needs BGR
        frames (the reference selector's recogniser)."""
        return self.host.selector.mode != "reference"

    def _swap(self, frames: torch.Tensor, images: list[np.ndarray]) -> tuple[FaceTable, int, list[Rect]]:
        """Detect, select and paint the faces of `frames`: (faces kept, faces found, rectangles)."""
        raise NotImplementedError

    def __call__(self, images: list[np.ndarray], planes: PlaneLayout | None = None):
        """Swap a batch of BGR frames, or of packed yuv420p frames of layout `planes` (returned in
        the same form)."""
        from facefusion_batch.pipeline.stages import BatchResult

        timer = self.host.timer
        if not images:
            return BatchResult(frames=[], faces_found=0, faces_swapped=0, frames_with_faces=0)
        if planes is not None and not self.accepts_planes:
            raise ValueError("this pipeline has host stages that need BGR frames")
        with torch.inference_mode(), on_thread_stream(self.device):
            with timer.stage("upload"):
                staged = stage_frames(images, self.device)
            if planes is None:
                frames = staged
            else:
                with self.device_timer.stage("device:yuv_to_bgr", self.device):
                    frames = planes_to_bgr(staged, planes)
            table, found, painted = self._swap(frames, images)
            if self.enhancer is not None and len(table):
                with timer.stage("enhance"):
                    painted += self.enhancer(frames, table, self.device_timer)
            if planes is not None:
                with self.device_timer.stage("device:bgr_to_yuv", self.device):
                    write_back_planes(staged, frames, planes, painted)
                frames = staged
            with timer.stage("download"):
                out = download({"frames": frames})["frames"]
        return BatchResult(
            frames=[out[i] for i in range(len(images))],
            faces_found=found,
            faces_swapped=len(table),
            frames_with_faces=int(np.count_nonzero(table.counts_per_frame(len(images)))),
        )


class DeviceFaceSwapPipeline(ResidentPipeline):
    """The classical FaceSwapPipeline on a device backend."""

    def __init__(self, host_pipeline, backend) -> None:
        super().__init__(host_pipeline, backend)
        self.swap = DeviceClassicalSwap(host_pipeline.swapper, self.device)

    def _swap(self, frames, images):
        host, timer = self.host, self.host.timer
        with timer.stage("detect"):
            table = detect_device(host.detector, frames, self.device_timer)
        found = len(table)
        table, _ = host.selector(images, table)
        with timer.stage("mesh"):
            table = mesh_device(host.mesh, frames, table, self.device_timer)
        with timer.stage("swap"):
            painted = self.swap(frames, table, self.device_timer)
        return table, found, painted


class DeviceLearnedPipeline(ResidentPipeline):
    """The learned LearnedFacePipeline on a device backend (runtime/device_learned.py)."""

    def __init__(self, host_pipeline, backend) -> None:
        from facefusion_batch.runtime.device_learned import DeviceLearnedSwap

        super().__init__(host_pipeline, backend)
        self.swap = DeviceLearnedSwap(host_pipeline)

    @property
    def accepts_planes(self) -> bool:
        """Target embeddings (a swapper weight other than 0.5) come from BGR frames too."""
        return super().accepts_planes and not self.host.identity.needs_target_embeddings

    def _swap(self, frames, images):
        host, timer = self.host, self.host.timer
        with timer.stage("detect"):
            table = detect_device(host.detector, frames, self.device_timer)
        found = len(table)
        with timer.stage("select"):
            table, embeddings = host.selector(images, table)
        if not len(table):
            return table, found, []
        if host.identity.needs_target_embeddings and embeddings is None:
            with timer.stage("recognise"):
                embeddings = host.recogniser(images, table)
        return table, found, self.swap(frames, table, embeddings, timer)


def device_pipeline_for(pipeline, backend):
    """The device-resident twin of `pipeline` when the backend has a device; otherwise
    `pipeline` unchanged."""
    from facefusion_batch.pipeline.stages import FaceSwapPipeline, LearnedFacePipeline

    if getattr(backend, "device", None) is None:
        return pipeline
    if type(pipeline) is FaceSwapPipeline:
        return DeviceFaceSwapPipeline(pipeline, backend)
    if type(pipeline) is LearnedFacePipeline:
        return DeviceLearnedPipeline(pipeline, backend)
    return pipeline
