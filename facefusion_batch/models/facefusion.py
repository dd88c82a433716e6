"""FaceFusion 3.x's learned models, as plain data, and how their files are fetched and checked.

Names and file names are FaceFusion's, so ``--models-dir`` can point at an existing
FaceFusion ``.assets/models`` directory. Files come from the publisher's GitHub
releases (``facefusion/facefusion-assets``, tag ``models-3.x.0``), each with a
``<name>.hash`` sidecar holding the CRC32 of the file as 8 hex digits.

Integrity: no trustworthy sha256 is published for any of these files, so none is
pinned. Each model's catalogue entry is derived from its ``.hash`` entry: the
recipe downloads the ``.onnx`` and refuses it unless its CRC32 matches the
sidecar; the store then records the file's sha256 in its own
``<file>.verified.json`` and refuses any later mismatch. A file found in
``--models-dir`` (or put into the store by hand) is checked against the
``.hash`` lying beside it, as FaceFusion keeps them.

This module holds data and the CRC32 check; the download recipe lives in
`fetch_facefusion.py` (the store resolves recipes by name when it first needs one).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facefusion_batch.errors import InputError, ModelError
from facefusion_batch.models import records

log = logging.getLogger(__name__)

RELEASES_URL = "https://github.com/facefusion/facefusion-assets/releases/download"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
ZERO = (0.0, 0.0, 0.0)
ONE = (1.0, 1.0, 1.0)


@dataclass(frozen=True)
class LearnedModel:
    """What a FaceFusion model file expects and returns.

    `family` says how the model is driven: for swappers inswapper, hyperswap,
    simswap, ghost, blendswap or uniface; for enhancers gfpgan, gpen or codeformer.
    Crops are RGB scaled to 0–1, then ``(x - mean) / std``; `output_denormalise`
    says whether the output is mapped back by ``x * std + mean`` (else it is 0–1).
    """

    name: str
    role: str
    release: str
    licence: str
    family: str = ""
    template: str | None = None
    size: int = 0
    mean: tuple[float, float, float] = ZERO
    std: tuple[float, float, float] = ONE
    output_denormalise: bool = False
    converter: str | None = None  # an embedding converter model, for simswap / ghost / hififace
    # the embedding convention of the model's publisher: "insightface" (inswapper: the latent
    # renormalised, as InsightFace's own code does) or "facefusion" (FaceFusion's formulas)
    convention: str = "facefusion"
    note: str = ""

    @property
    def file(self) -> str:
        return f"{self.name}.onnx"

    @property
    def url(self) -> str:
        return f"{RELEASES_URL}/{self.release}/{self.name}.onnx"

    @property
    def hash_name(self) -> str:
        return f"{self.name}.hash"

    @property
    def hash_url(self) -> str:
        return f"{RELEASES_URL}/{self.release}/{self.name}.hash"


_INSIGHTFACE = "InsightFace: non-commercial research only"


def _swapper(
    name: str, release: str, licence: str, family: str, template: str, size: int, **kw
) -> LearnedModel:
    return LearnedModel(name, "swapper", release, licence, family, template, size, **kw)


def _enhancer(name: str, licence: str, family: str, template: str, size: int) -> LearnedModel:
    """FaceFusion's enhancers all take RGB (x/255 − 0.5)/0.5 and return [−1, 1]."""
    return LearnedModel(
        name, "enhancer", "models-3.0.0", licence, family, template, size, HALF, HALF, output_denormalise=True
    )


# Facts from FaceFusion 3.x's model sets (face_swapper, face_recognizer, face_enhancer,
# face_masker), checked against models.md. Where they differ, FaceFusion's is kept and
# the difference noted.
MODELS: dict[str, LearnedModel] = {
    m.name: m
    for m in (
        _swapper(
            "inswapper_128",
            "models-3.0.0",
            _INSIGHTFACE,
            "inswapper",
            "arcface_128",
            128,
            convention="insightface",
            note="inputs target [1,3,128,128] RGB 0-1 and source [1,512] = (e/|e|) @ emap (emap: the "
            "graph's last initializer); output 0-1. Batch fixed at 1 in the published file.",
        ),
        _swapper(
            "inswapper_128_fp16",
            "models-3.0.0",
            _INSIGHTFACE,
            "inswapper",
            "arcface_128",
            128,
            convention="insightface",
        ),
        _swapper(
            "hififace_unofficial_256",
            "models-3.1.0",
            "unknown (GuijiAI)",
            "hififace",
            "mtcnn_512",
            256,
            mean=HALF,
            std=HALF,
            output_denormalise=True,
            converter="crossface_hififace",
            note="embedding via crossface_hififace, then normalised; output de-normalised",
        ),
        *(
            _swapper(
                f"hyperswap_1{v}_256",
                "models-3.3.0",
                "ResearchRAIL (FaceFusion)",
                "hyperswap",
                "arcface_128",
                256,
                mean=HALF,
                std=HALF,
                output_denormalise=True,
                note="takes the normalised ArcFace embedding directly; FaceFusion's default swapper",
            )
            for v in "abc"
        ),
        _swapper(
            "simswap_256",
            "models-3.0.0",
            "non-commercial (neuralchen)",
            "simswap",
            "arcface_112_v1",
            256,
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
            converter="crossface_simswap",
            note="input ImageNet mean/std, output 0-1 (not de-normalised)",
        ),
        _swapper(
            "simswap_unofficial_512",
            "models-3.0.0",
            "non-commercial (neuralchen)",
            "simswap",
            "arcface_112_v1",
            512,
            converter="crossface_simswap",
            note="input RGB 0-1 (mean 0, std 1), output 0-1 (not de-normalised)",
        ),
        *(
            _swapper(
                f"ghost_{v}_256",
                "models-3.0.0",
                "Apache-2.0 (ai-forever)",
                "ghost",
                "arcface_112_v1",
                256,
                mean=HALF,
                std=HALF,
                output_denormalise=True,
                converter="crossface_ghost",
            )
            for v in "123"
        ),
        _swapper(
            "blendswap_256",
            "models-3.0.0",
            "non-commercial (mapooon)",
            "blendswap",
            "ffhq_512",
            256,
            note="source input is the source face itself: arcface_112_v2 crop, 112 px, RGB 0-1",
        ),
        _swapper(
            "uniface_256",
            "models-3.0.0",
            "unknown (xc-csc101)",
            "uniface",
            "ffhq_512",
            256,
            mean=HALF,
            std=HALF,
            output_denormalise=True,
            note="source input is the source face itself: ffhq_512 crop, 256 px, RGB 0-1",
        ),
        LearnedModel(
            "crossface_simswap",
            "converter",
            "models-3.4.0",
            "see the publisher (FaceFusion)",
            note="maps a raw ArcFace embedding [N,512] into simswap's identity space",
        ),
        LearnedModel(
            "crossface_hififace",
            "converter",
            "models-3.4.0",
            "see the publisher (FaceFusion)",
            note="maps a raw ArcFace embedding [N,512] into hififace's identity space",
        ),
        LearnedModel(
            "crossface_ghost",
            "converter",
            "models-3.4.0",
            "see the publisher (FaceFusion)",
            note="maps a raw ArcFace embedding [N,512] into ghost's identity space",
        ),
        LearnedModel(
            "arcface_w600k_r50",
            "recogniser",
            "models-3.0.0",
            _INSIGHTFACE,
            "arcface",
            "arcface_112_v2",
            112,
            mean=HALF,
            std=HALF,
            note="input RGB x/127.5 - 1, 112x112; output the 512-d embedding",
        ),
        LearnedModel(
            "fairface",
            "classifier",
            "models-3.0.0",
            "CC-BY-4.0 (dchen236)",
            "fairface",
            "arcface_112_v2",
            224,
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
            note="gender, age and race of a face: input RGB ImageNet-normalised 224x224; outputs "
            "race_id, gender_id, age_id (class ids), in that order",
        ),
        *(
            _enhancer(f"gfpgan_{v}", "Apache-2.0 (TencentARC)", "gfpgan", "ffhq_512", 512)
            for v in ("1.2", "1.3", "1.4")
        ),
        LearnedModel(
            "gpen_bfr_256",
            "enhancer",
            "models-3.0.0",
            "non-commercial (yangxy)",
            "gpen",
            "arcface_128",
            256,
            mean=HALF,
            std=HALF,
            output_denormalise=True,
            note="FaceFusion crops it with arcface_128 (models.md says ffhq_512); FaceFusion's is kept",
        ),
        LearnedModel(
            "gpen_bfr_512",
            "enhancer",
            "models-3.0.0",
            "non-commercial (yangxy)",
            "gpen",
            "ffhq_512",
            512,
            mean=HALF,
            std=HALF,
            output_denormalise=True,
        ),
        *(_enhancer(f"gpen_bfr_{n}", "non-commercial (yangxy)", "gpen", "ffhq_512", n) for n in (1024, 2048)),
        _enhancer(
            "restoreformer_plus_plus",
            "Apache-2.0 (wzhouxiff)",
            "restoreformer",
            "ffhq_512",
            512,
        ),
        LearnedModel(
            "codeformer",
            "enhancer",
            "models-3.0.0",
            "S-Lab-1.0 (sczhou)",
            "codeformer",
            "ffhq_512",
            512,
            mean=HALF,
            std=HALF,
            output_denormalise=True,
            note="has a second input 'weight' (float64 [1], fidelity 0-1)",
        ),
        *(
            LearnedModel(
                f"xseg_{v}",
                "occluder",
                release,
                "see the publisher (XSeg, DeepFaceLab)",
                "xseg",
                None,
                256,
                note="NHWC BGR /255 in, [N,256,256,1] occlusion probability out",
            )
            for v, release in (("1", "models-3.1.0"), ("2", "models-3.1.0"), ("3", "models-3.2.0"))
        ),
        *(
            LearnedModel(name, "detector", release, licence, family, None, 640, note=note)
            for name, release, licence, family, note in (
                (
                    "retinaface_10g",
                    "models-3.0.0",
                    _INSIGHTFACE,
                    "retinaface",
                    "input BGR (x-127.5)/128 [1,3,S,S]; outputs scores, boxes, 5 points per stride 8/16/32, "
                    "2 anchors a cell, as distances from the anchor",
                ),
                ("scrfd_2.5g", "models-3.0.0", _INSIGHTFACE, "scrfd", "as retinaface_10g"),
                (
                    "yoloface_8n",
                    "models-3.0.0",
                    "GPL-3.0 (derronqi)",
                    "yolo_face",
                    "input BGR /255 [1,3,640,640]; output [1,20,8400]: cx cy w h, score, "
                    "5 × (x, y, visibility)",
                ),
                (
                    "yunet_2023_mar",
                    "models-3.4.0",
                    "MIT (OpenCV)",
                    "yunet",
                    "input BGR 0-255; cls, obj, bbox, kps per stride 8/16/32 (FaceFusion scores cls·obj)",
                ),
            )
        ),
        *(
            LearnedModel(name, "landmarker", "models-3.0.0", licence, name, None, size, note=note)
            for name, licence, size, note in (
                (
                    "2dfan4",
                    "MIT (breadbread1984)",
                    256,
                    "68 points: crop [1,3,256,256] RGB 0-1 → points [1,68,3] on a 64 grid, "
                    "heatmaps [1,68,64,64]",
                ),
                ("peppa_wutz", "Apache-2.0 (vendor unknown)", 256, "68 points: crop [1,3,256,256] → [1,204]"),
                (
                    "fan_68_5",
                    "OpenRAIL-M (FaceFusion)",
                    0,
                    "68 points from 5 (ffhq_512 space), double",
                ),
            )
        ),
        *(
            LearnedModel(
                f"bisenet_resnet_{v}",
                "parser",
                release,
                "see the publisher (face-parsing BiSeNet)",
                "bisenet",
                None,
                512,
                mean=IMAGENET_MEAN,
                std=IMAGENET_STD,
                note="19 face-parsing classes as logits [N,19,512,512]",
            )
            for v, release in (("18", "models-3.1.0"), ("34", "models-3.0.0"))
        ),
    )
}

SWAPPERS = tuple(n for n, m in MODELS.items() if m.role == "swapper")
ENHANCERS = tuple(n for n, m in MODELS.items() if m.role == "enhancer")
OCCLUDERS = tuple(n for n, m in MODELS.items() if m.role == "occluder")
PARSERS = tuple(n for n, m in MODELS.items() if m.role == "parser")
RECOGNISER = "arcface_w600k_r50"
# FaceFusion's --face-detector-model values: the model files each runs (`many`: three at once)
FACE_DETECTORS = {m.family: (n,) for n, m in MODELS.items() if m.role == "detector"} | {
    "many": ("retinaface_10g", "scrfd_2.5g", "yoloface_8n")
}
# FaceFusion's --face-detector-size choices per model (choices.face_detector_set; its default the last)
FACE_DETECTOR_SIZES = {
    "many": ("640x640",),
    "retinaface": ("160x160", "320x320", "480x480", "512x512", "640x640"),
    "scrfd": ("160x160", "320x320", "480x480", "512x512", "640x640"),
    "yolo_face": ("640x640",),
    "yunet": ("640x640",),
}
CLASSIFIER = "fairface"


def learned_model(name: str) -> LearnedModel:
    """The facts for `name`, also for a prepared variant such as ``inswapper_128@fp16``."""
    base = name.split("@", 1)[0]
    try:
        return MODELS[base]
    except KeyError:
        raise KeyError(f"unknown learned model {name!r} (known: {', '.join(sorted(MODELS))})") from None


# --- the CRC32 sidecar ---------------------------------------------------------------


def read_crc32(path: Path) -> str:
    """The CRC32 a ``.hash`` sidecar holds, as 8 lower-case hex digits."""
    text = Path(path).read_text(encoding="ascii", errors="replace").strip().lower()
    if len(text) != 8 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"{path} does not hold a CRC32 (8 hex digits): {text[:40]!r}")
    return text


def crc32_file(path: Path) -> str:
    crc = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def validate_crc32(path: Path, cached: Any = None) -> dict[str, Any]:
    """Validator "facefusion_crc32": the CRC32 of `path` matches the ``.hash`` beside it.

    A file without a ``.hash`` beside it (a temporary file the recipe already
    checked, or a file copied by hand without its sidecar) passes with a warning.
    """
    path = Path(path)
    sidecar = path.with_suffix(".hash")
    if not sidecar.is_file():
        if not path.name.startswith("."):
            log.warning("%s: no %s beside it; its integrity cannot be checked", path, sidecar.name)
        return {"crc32": "no .hash sidecar beside the file"}
    expected = read_crc32(sidecar)
    actual = crc32_file(path)
    if actual != expected:
        raise ValueError(f"CRC32 {actual} does not match {expected} in {sidecar}")
    return {"crc32": actual, "crc32_source": str(sidecar)}


_CRC_MEMO: dict[tuple[str, int, int, int], str] = {}


def check_beside(path: Path) -> str | None:
    """The file's CRC32 checked against the ``.hash`` beside it, re-read on every call.

    The store's memo says a file was verified once; a sidecar edited (or a file swapped)
    after that must still be noticed, so the sidecar is read again each run. The file's CRC32
    is kept in its store record (`records.recorded_digest`) and recomputed whenever the file's
    size, mtime or inode moved. A mismatch or an unreadable sidecar is `ModelError` (exit 2)
    naming the file and both hashes; no sidecar: None.
    """
    path = Path(path)
    sidecar = path.with_suffix(".hash")
    if not sidecar.is_file():
        return None
    try:
        expected = read_crc32(sidecar)
    except (ValueError, OSError) as exc:
        raise ModelError(f"{path}: its sidecar {sidecar} is unreadable ({exc})") from None
    st = path.stat()
    key = (str(path.absolute()), st.st_size, st.st_mtime_ns, st.st_ino)
    actual = _CRC_MEMO.get(key) or records.recorded_digest(path, "crc32")
    if actual is None:
        actual = crc32_file(path)
        records.record_digest(path, "crc32", actual)
    _CRC_MEMO[key] = actual
    if actual != expected:
        raise ModelError(
            f"{path} fails verification: CRC32 {actual}, but {sidecar} expects {expected}. "
            f"Replace the file (or its .hash) with the publisher's, or fetch it again with "
            f"`ffbatch models fetch --force {path.stem}`"
        )
    return actual


# FaceFusion keeps its models here, under the root of its checkout
FACEFUSION_MODELS = Path(".assets") / "models"
MODEL_SUFFIXES = (".onnx", ".tflite", ".dat")


def resolve_models_dir(path: Path | None) -> Path | None:
    """--models-dir as given, or FaceFusion's `.assets/models` when it names FaceFusion's root;
    a directory that does not exist or holds no model file is exit 2, never a silent fall-back to
    the store."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise InputError(f"--models-dir {path} {what}")
    if (path / FACEFUSION_MODELS).is_dir():
        logging.getLogger("ffbatch").info(
            "--models-dir %s is FaceFusion's root: using its %s", path, FACEFUSION_MODELS
        )
        path = path / FACEFUSION_MODELS
    if not any(p.suffix in MODEL_SUFFIXES for p in path.iterdir() if p.is_file()):
        raise InputError(
            f"--models-dir {path} holds no model file ({', '.join(MODEL_SUFFIXES)}); FaceFusion keeps "
            f"them in its {FACEFUSION_MODELS}"
        )
    return path
