"""The kernel protocol: every operation on pixels the face stages need, over whole batches.

Stages (faces/, swap/) are written once against `Kernels`; two kernel sets implement it:
`HostKernels` (OpenCV/numpy: the fastest on a CPU) and `TorchKernels` (torch on CUDA: frames
stay on the device). Geometry, rasterisation, warp maps, footprints, canvas planning and
NMS are shared numpy above them (kernels/geometry.py, kernels/canvas.py, the stages).

Arrays a kernel set hands out (frames, crops, masks, model tensors) are its own kind —
numpy arrays for the host set, device tensors for the torch set — and only its own
operations look inside them. What comes back to the stages as numpy goes through
`to_host`, and is small: detections, mesh points, embeddings.

Conventions, the same in both sets:

- frames: same-sized uint8 BGR pictures of one batch (a `Frames` object);
- crops: uint8-valued BGR crops of faces (`warp_crops`), and float BGR crops 0–255 of
  what a model painted (`model_output`);
- model tensors: float32 NCHW (or NHWC where asked), as the model takes them;
- masks: float32 [F, S, S] in 0–1, one per crop.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

import numpy as np
from numpy.typing import ArrayLike

BlendMode = Literal["multiband", "feather", "poisson"]
BLEND_MODES: tuple[BlendMode, ...] = get_args(BlendMode)
LUMA_BGR = (0.114, 0.587, 0.299)  # grey from B, G, R (BT.601 luma)
ColourMode = Literal["local", "global", "none"]
COLOUR_MODES: tuple[ColourMode, ...] = get_args(ColourMode)
# colour transfer: the std ratio is clipped (a noisy region cannot blow it up). Its upper end is
# also how far a flat-lit source's shading contrast is stretched to a contrasty target's, which
# carries identity (docs/default-swap.md, "How the constants were chosen")
STD_RATIO_RANGE = (0.7, 1.4)
# local colour: where that stretch darkens a pixel (a socket, a lash line, the source's dark
# eye), its chroma about neutral (8-bit LAB a*/b* 128) darkens by the same share, as it would
# under less light; at full chroma a brown eye came out maroon (docs/default-swap.md)
LAB_NEUTRAL = 128.0
# local colour: after the shading, the tint (a*, b*) of the swapped skin may still differ from
# the target's by at most TINT_LIMIT (8-bit LAB) at TINT_SCALE of the shading's scale, so the
# source's own red lids or sallow cheeks show no patches; lightness is left alone, it carries
# identity (docs/default-swap.md)
TINT_LIMIT = 3.0
TINT_SCALE = 0.5
# local colour: how much darker than the target's own skin (8-bit L levels, at TINT_SCALE) the
# source's shading may paint before its local mean is lifted (transfer_colour, both kernel
# sets): only the darkest of a goatee or a deep-set brow root is clipped, the rest is the source
# person (docs/default-swap.md). The two limits are measured over different masks (the tint's
# also covers the ring round the features, swap/classical/source.py TINT_RING): each has its own blur
SHADE_LIMIT = 34.0
# the source texture's skin channel: above 0.5 the face's skin (its colour statistics, shading
# and shade limit), above TINT_LEVEL also where its tint is held to the target's (the ring round
# the eyes, brows and lips that the statistics leave out: swap/classical/source.py TINT_RING)
TINT_LEVEL = 0.2
# the weight of a painted face falls to 0 over this share of its eye distance toward the edge of
# what its warp map covers: the source's own soft edge lands inside the target's outline when a
# turned source's far side is mirrored, the mesh is reshaped or the map is rasterised coarser,
# and a hard step there showed the source's temple hair as a dark line along a cheek
EDGE_RAMP = 0.04
# relighting (kernels/formulas.py relight): the ridge added to the spherical harmonics' normal
# equations, as a share of their mean diagonal (a face's normals cover a half sphere at most)
SH_RIDGE = 1e-3
# relighting: the fit takes every SH_FIT_STEP-th pixel each way (9 smooth terms; a quarter of the
# cost; kept within the CPU budget of docs/default-swap.md)
SH_FIT_STEP = 2
# relighting: a fitted shading is held above this share of its mean over the skin, and the
# target's over the source's within 1/SH_RATIO–SH_RATIO (a quadratic fit dips toward 0, and
# a ratio blows up, at normals the skin hardly covers: a turned face's side, its nose's)
SH_FLOOR, SH_RATIO = 0.3, 3.0
MODEL_MASK_BLUR = 5.0  # px: occlusion and region masks are blurred this much at crop size

Array = Any  # a kernel set's own array: np.ndarray (host) or torch.Tensor (torch)
Rect = tuple[int, int, int, int, int]  # frame, x, y, width, height


@dataclass(frozen=True)
class PaintSettings:
    """How a classical face region is painted: recoloured to the target, then blended in."""

    colour: str = "local"  # local (target light and tint) | global (LAB mean/std) | none
    colour_strength: float = 1.0
    blend: str = "multiband"  # multiband | feather | poisson
    # how far `local` colour may move the source's low frequencies toward the target's, in 8-bit
    # LAB units (L scaled to 0–255): light (L) and tint (a, b)
    shading_limit: tuple[float, float, float] = (60.0, 30.0, 30.0)
    # how far `local` colour lets the tint stay off the target's at the finer scale (TINT_LIMIT;
    # inf: not held)
    tint_limit: float = TINT_LIMIT
    # how much darker than the target's own skin `local` colour lets the source's lightness paint
    # at that finer scale (SHADE_LIMIT; inf: free): a source's beard or deep-set brow root
    shade_limit: float = SHADE_LIMIT
    # the source texture blurred to the target face's own sharpness (a defocused or soft face
    # does not get a crisp pasted one); never sharpened
    match_sharpness: bool = True
    # the target's own fine grain (sensor noise, film grain) carried onto the skin of a face
    # smoother than its target, so a noisy shot gets no clean, pasted-looking face
    match_grain: bool = True
    # `local` colour relights the source first (formulas.relight): the target's shading over the
    # source's, spherical harmonics through the mesh's normals (regions with a rotation and a
    # texture with normals only: the classical swap's)
    relight: bool = False


# blur widths (px) tried when matching sharpness, and the scale at which detail is measured
SHARPNESS_SIGMAS = (0.5, 0.8, 1.2, 1.7, 2.4, 3.4, 4.8)
DETAIL_SIGMA = 1.0
# the face may keep this much more fine detail than its target: its features (what makes it
# read as the source person) stay legible on a slightly soft shot, a defocused one still blurs
SHARPNESS_SLACK = 1.15


# a face smeared by the shutter less than this (px) is painted as it is: the line kernel of a
# shorter smear is a sub-pixel shift and blur that the sharpness match already covers
STREAK_MIN = 1.0


def streak_kernel(streak: ArrayLike) -> np.ndarray:
    """[k, k] float32 summing to 1: a line of the length and direction of `streak` (x, y in px),
    centred, its samples spread bilinearly: the box kernel of a motion blur over the time the
    shutter was open."""
    dx, dy = np.asarray(streak, np.float64)
    length = float(np.hypot(dx, dy))
    half = int(np.ceil(length / 2)) + 1
    kernel = np.zeros((2 * half + 1, 2 * half + 1))
    for t in np.linspace(-0.5, 0.5, max(2, int(np.ceil(4 * length)) + 1)):
        x, y = half + t * dx, half + t * dy
        x0, y0 = int(np.floor(x)), int(np.floor(y))
        fx, fy = x - x0, y - y0
        kernel[y0, x0] += (1 - fx) * (1 - fy)
        kernel[y0, x0 + 1] += fx * (1 - fy)
        kernel[y0 + 1, x0] += (1 - fx) * fy
        kernel[y0 + 1, x0 + 1] += fx * fy
    out: np.ndarray = (kernel / kernel.sum()).astype(np.float32)
    return out


# the target's fine residual is carried up to this many times its mean size: grain passes, the
# strong edges of the target's own features (what would ghost its identity) are cut
GRAIN_CLIP = 3.0
# a face this much smoother than its target gets no grain: on a clean shot the difference is
# the source photo's own softness, and the target's fine residual there is its features (its
# identity: measured, carrying it cost up to 8 points of transfer), not noise
GRAIN_SLACK = 1.3


def grain_gain(have: ArrayLike, goal: ArrayLike) -> np.ndarray:
    """How much of the target's fine residual to add to a face whose fine detail is `have`
    (independent parts add in quadrature), counting GRAIN_SLACK times `have` against the
    target's `goal`; 0 for a face within that of its target's detail."""
    have, goal = np.asarray(have, np.float64), np.asarray(goal, np.float64)
    gain: np.ndarray = np.sqrt(np.maximum(goal**2 - (GRAIN_SLACK * have) ** 2, 0.0)) / np.maximum(goal, 1e-6)
    return gain


def sharpness_weights(detail: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """[F, 1+S] weights of the unblurred face and of each blur in SHARPNESS_SIGMAS, given each
    face's measured detail at every blur ([F, 1+S], falling) and its target's (`goal`, [F]):
    the two blurs around the goal, mixed linearly, so the choice never jumps."""
    faces, n = detail.shape
    out = np.zeros((faces, n))
    for f in range(faces):
        below = np.flatnonzero(detail[f] <= goal[f] * SHARPNESS_SLACK)
        if not below.size or below[0] == 0:
            out[f, 0 if below.size else n - 1] = 1.0
            continue
        i = int(below[0])
        hi, lo = detail[f, i - 1], detail[f, i]
        t = float(np.clip((hi - goal[f] * SHARPNESS_SLACK) / max(hi - lo, 1e-9), 0.0, 1.0))
        out[f, i - 1], out[f, i] = 1.0 - t, t
    return out


@dataclass(frozen=True)
class FaceRegion:
    """One face to paint: its frame, the top-left of its warp map in the frame, the map itself
    (source texture pixels; NaN where the face does not cover), its source, the blur width
    of the shading carried by `local` colour and how much of its eyes stay the target's."""

    frame: int
    x0: int
    y0: int
    map_x: np.ndarray
    map_y: np.ndarray
    source: int
    sigma: float
    # how much of each eye (subject's left, right) stays the target's (0: the source's eye,
    # 1: the target's own, through the texture's eye channels 5 and 6): closed eyes stay closed
    hold_eyes: tuple[float, float] = (0.0, 0.0)
    # [h,w] float32 0–1 over the region: how visible the target face is there (an occlusion
    # model's mask: hair, hands, glasses in front stay in front); None: visible everywhere
    visible: np.ndarray | None = None
    # px over which the face's weight falls to 0 toward the edge of what its map covers
    # (`inset_ramp`): the source texture's own soft edge does not always land there
    edge: int = 1
    # how this frame's colour statistics are corrected toward its track's (swap/classical/colour_track.py):
    # [2, 3] the factor on the target's LAB spread over the source's and the shift added to the
    # difference of their means; None: the frame's own statistics as they are
    colour_fix: np.ndarray | None = None
    face: int = -1  # its row of the batch's face table
    # [3, 3] the turn of the source's pose onto this face's (relighting: the source's normals,
    # texture channels 7–9, turned to the target's pose); None: not relit
    rotation: np.ndarray | None = None
    # how much of the swap is painted over the target (1 all, toward 0 the target shows through):
    # less for a face in profile, its far eye hidden by its own face (swap/classical/fit.strengths)
    strength: float = 1.0
    # the smear of the camera's shutter over this face, px (x, y) in the frame: the texture is
    # blurred along a line of that length and direction, as the plate's own motion blur
    # (streak_kernel; ClassicalSettings.shutter); (0, 0): not smeared
    streak: tuple[float, float] = (0.0, 0.0)

    @property
    def height(self) -> int:
        return int(self.map_x.shape[0])

    @property
    def width(self) -> int:
        return int(self.map_x.shape[1])


@dataclass
class Frames:
    """A batch of same-sized frames owned by one kernel set, and what has been painted on it.

    `pixels` is the kernel set's own array (a list of numpy frames, or a device tensor);
    `painted` lists the rectangles written so far (planes are converted back only there)."""

    pixels: Any
    count: int
    height: int
    width: int
    painted: list[Rect] = field(default_factory=list)
    shapes: np.ndarray | None = None  # [B, 2] (height, width) per frame (the host set allows mixed sizes)
    staged: Any = None  # the uploaded planes, when frames came as yuv420p (PlaneLayout in `layout`)
    layout: Any = None
    owned: set[int] = field(default_factory=set)  # host: frames already copied for writing
    # {frame: [H, W] float32 0–1}: the paste alpha used, the largest where faces overlap
    # (recorded only when not None: --matte-output)
    mattes: dict[int, Any] | None = None  # the kernel set's own arrays until `download`
    seq: int | None = None  # the batch's number in its job (None: a batch on its own)
    # the default swap's do-no-harm decisions (swap/classical/fit.py): name -> [B] faces of each frame
    decisions: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.shapes is None:
            self.shapes = np.tile(np.array([[self.height, self.width]], np.int64), (self.count, 1))

    @property
    def sizes(self) -> np.ndarray:
        """[B, 2] (height, width) per frame."""
        shapes = self.shapes
        assert shapes is not None  # set by __post_init__
        return shapes

    def size_of(self, index: int) -> tuple[int, int]:
        return int(self.sizes[index, 0]), int(self.sizes[index, 1])


class Kernels(Protocol):
    """The pixel operations of the face stages. One instance per executor worker."""

    name: str
    accepts_planes: bool  # whether `upload` takes yuv420p planes (and `download` returns them)

    def scope(self) -> AbstractContextManager[None]: ...  # around one batch: the device's stream, no autograd

    # frames in and out
    def upload(self, images: list[np.ndarray], planes: Any = None) -> Frames: ...
    def download(self, frames: Frames) -> list[np.ndarray]: ...

    # models
    def run(self, session: Any, feeds: dict[str, Array], max_items: int | None) -> dict[str, Array]: ...
    # an array as numpy, or a dict of arrays as a dict of numpy arrays (one wait)
    def to_host(self, array: Array | dict[str, Array]) -> Any: ...
    def from_host(self, array: np.ndarray) -> Array: ...

    # model inputs and outputs
    def letterbox(self, frames: Frames, size: int) -> tuple[Array, np.ndarray]: ...
    def warp_crops(
        self, frames: Frames, frame_index: np.ndarray, affines: np.ndarray, size: int, border: str
    ) -> Array: ...
    def resize_crops(self, crops: Array, size: int, *, levels: bool = True) -> Array:
        """Crops resized to `size`² bilinearly (as FaceFusion's cv2.resize), kept at whole levels
        when `levels` (a uint8 crop's resize) or as they come (a float crop's)."""
        ...

    def model_input(
        self, crops: Array, mean: Any = 0.0, std: Any = 1.0, *, rgb: bool = True, nhwc: bool = False
    ) -> Array: ...
    def model_output(
        self, out: Array, mean: Any, std: Any, *, denormalise: bool, pre_clip: bool = False
    ) -> Array: ...
    def split_tiles(self, batch: Array, k: int) -> Array: ...
    def join_tiles(self, batch: Array, k: int) -> Array: ...
    def repeat_rows(self, array: Array, times: int) -> Array: ...
    def thumbnails(self, frames: Frames, size: tuple[int, int]) -> np.ndarray: ...  # [B,h,w] grey
    def crops_to_uint8(self, crops: Array) -> Array: ...

    # masks
    def constant_masks(self, mask: np.ndarray, count: int) -> Array: ...
    def soften_masks(self, masks: Array, size: int) -> Array: ...
    def class_masks(self, logits: Array, classes: np.ndarray) -> Array: ...
    def min_masks(self, masks: list[Array]) -> Array: ...
    def scale_masks(self, masks: Array, factor: float) -> Array: ...

    # painting
    def paste(
        self, frames: Frames, frame_index: np.ndarray, crops: Array, alpha: Array, affines: np.ndarray
    ) -> None: ...
    def textures(self, textures: list[np.ndarray]) -> Any: ...
    def paint_faces(
        self, frames: Frames, regions: list[FaceRegion], textures: Any, settings: PaintSettings
    ) -> None: ...
    # [R, 4, 3] per region: LAB mean and spread of the warped source and of the target on the
    # skin the paint would match, on every other pixel (swap/classical/colour_track.py)
    def colour_stats(self, frames: Frames, regions: list[FaceRegion], textures: Any) -> np.ndarray: ...
