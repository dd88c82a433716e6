"""Build the pipeline from settings: resolve models, load sessions, prepare sources.

Classical (the default on a fresh machine) or learned (FaceFusion's model files):
`--swapper auto` takes the learned model when its files are present, else the
classical swap, and says which in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from facefusion_batch.config import ReferenceSettings, SwapSettings
from facefusion_batch.errors import InputError, ModelError, NoFaceError
from facefusion_batch.faces.align import align_crops, host_lumas, transform_points
from facefusion_batch.faces.classify import FaceClassifier, FaceFilter, FaceFilterSettings
from facefusion_batch.faces.detect import DetectorSettings, YuNetDetector
from facefusion_batch.faces.dlib_resnet import DLIB_INSTALL, DlibRecogniser, dlib_available
from facefusion_batch.faces.facefusion_detectors import FaceFusionDetector, FaceFusionDetectorSettings
from facefusion_batch.faces.facefusion_landmarks import FaceFusionLandmarker, FaceFusionLandmarkerSettings
from facefusion_batch.faces.identity import (
    EMBEDDING_FAMILIES,
    IdentityEncoder,
    MappedIdentity,
    Recogniser,
    read_emap,
    source_identity,
)
from facefusion_batch.faces.mesh import FaceMesh, MeshSettings, eye_frame
from facefusion_batch.faces.persons import AssignPersons, PersonMatcher, SelectionRecogniser
from facefusion_batch.faces.select import FaceSelector, select_faces
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.faces.track import FaceTracker, TrackSettings, TrackStage
from facefusion_batch.kernels.base import Frames
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.models import store
from facefusion_batch.models.catalog import DEFAULT_DETECTOR, DEFAULT_MESH, DEFAULT_TOPOLOGY, tensor_name
from facefusion_batch.models.facefusion import (
    CLASSIFIER,
    FACE_DETECTORS,
    MODELS,
    RECOGNISER,
    LearnedModel,
    learned_model,
)
from facefusion_batch.models.prepare import prepared_path, usable_int8, variant_catalog
from facefusion_batch.models.topology import Topology, load_topology
from facefusion_batch.pipeline.model_resolution import (
    absent_message,
    choose_swapper,
    is_present,
    learned_file,
    model_state,
    require_mask_model,
)
from facefusion_batch.pipeline.stages import FacePipeline
from facefusion_batch.runtime.backends import select_backend
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.engine_cache import declares_fixed_batch
from facefusion_batch.runtime.session import Backend, Session
from facefusion_batch.swap.classical.fit import far_eye_hidden, profile_holds
from facefusion_batch.swap.classical.lids import LidReader, shut_lids
from facefusion_batch.swap.classical.mapped import PersonRouter
from facefusion_batch.swap.classical.rims import rim_visibility, rims_on_photo, without_rims
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.source import SourceFace, prepare_source, with_mirror
from facefusion_batch.swap.classical.stage import (
    OCCLUSION_CROP,
    OCCLUSION_TEMPLATE,
    ClassicalSwapper,
    swap_triangles,
)
from facefusion_batch.swap.enhance import FaceEnhancer
from facefusion_batch.swap.learned import LearnedSettings, LearnedSwapper
from facefusion_batch.swap.masks import AreaMasker, CropMasker, Occluder, RegionParser
from facefusion_batch.swap.regions import FaceRegions
from facefusion_batch.timing import StageTimer
from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.pictures.stills import is_still_image, read_image

log = logging.getLogger("ffbatch")

DETECTOR_MODEL = DEFAULT_DETECTOR
MESH_MODEL = DEFAULT_MESH
TOPOLOGY = DEFAULT_TOPOLOGY


class Models:
    """The sessions every pipeline shares, loaded once.

    The face mesh and its topology are loaded on first use: only the classical swap needs
    them (the learned path aligns faces on the detector's five landmarks), so a learned
    render neither fetches nor loads them. A caller may hand them in ready-made instead
    (sessions of another backend, say).
    """

    def __init__(
        self,
        backend: Backend,
        detector: YuNetDetector | FaceFusionDetector,
        mesh: FaceMesh | None = None,
        triangles: np.ndarray | None = None,
        regions: FaceRegions | None = None,
        paths: dict[str, str] | None = None,
        models_dir: Path | None = None,
        mesh_settings: MeshSettings | None = None,
        policy: BatchPolicy = HOST,
    ) -> None:
        self.backend = backend
        self.policy = policy  # how many items each stage's model calls take
        self.detector = detector
        self.paths = paths if paths is not None else {}
        self.models_dir = models_dir
        self.mesh_settings = mesh_settings or MeshSettings()
        # what is given fills the cached properties below, which then never load
        for name, value in (("mesh", mesh), ("triangles", triangles), ("regions", regions)):
            if value is not None:
                self.__dict__[name] = value

    @cached_property
    def mesh(self) -> FaceMesh:
        path = self._resolve(MESH_MODEL)
        return FaceMesh(
            self.backend.load(path, label=MESH_MODEL),
            self.mesh_settings,
            points=tensor_name(MESH_MODEL, "points"),
            presence=tensor_name(MESH_MODEL, "presence"),
            policy=self.policy,
        )

    @cached_property
    def topology(self) -> Topology:
        return load_topology(self._resolve(TOPOLOGY))

    @cached_property
    def triangles(self) -> np.ndarray:
        return self.topology.triangles

    @cached_property
    def regions(self) -> FaceRegions:
        return FaceRegions.from_topology(self.topology)

    def _resolve(self, name: str) -> Path:
        path = store.model_path(name, models_dir=self.models_dir)
        self.paths[name] = str(path)
        return path


def load_models(
    device: DeviceSettings | str,
    *,
    threads: int | None,
    models_dir: Path | None,
    detector: DetectorSettings = DetectorSettings(),
    mesh: MeshSettings = MeshSettings(),
    policy: BatchPolicy | None = None,
) -> Models:
    """The backend of `device` (or of a backend's name) and the detector; the face mesh and
    topology follow when first used."""
    if isinstance(device, str):
        device = DeviceSettings(backend=device, precision="fp32" if device == "cpu" else "auto")
    backend = select_backend(device, threads=threads)
    path = store.model_path(DETECTOR_MODEL, models_dir=models_dir)
    models = Models(
        backend=backend,
        detector=YuNetDetector(backend.load(path, label=DETECTOR_MODEL), detector),
        paths={DETECTOR_MODEL: str(path)},
        models_dir=models_dir,
        mesh_settings=mesh,
        policy=policy or BatchPolicy(on_gpu=device.on_gpu, max_batch=device.max_batch),
    )
    if detector.facefusion is not None:
        models.detector = facefusion_detector(models, detector.facefusion, detector.facefusion_landmarker)
    return models


def facefusion_detector(
    models: Models,
    settings: FaceFusionDetectorSettings,
    landmarker: FaceFusionLandmarkerSettings | None = None,
) -> YuNetDetector | FaceFusionDetector:
    """FaceFusion's --face-detector-model when its files are here (never fetched: FaceFusion's
    default yolo_face is named by every job file); else ffbatch's own YuNet, saying so. Its
    `landmarker` refines the five points when its files and fan_68_5's are here."""
    files = FACE_DETECTORS[settings.model]
    missing = [f for f in files if model_state(f, models.models_dir) == "missing"]
    if missing:
        log.warning(
            "--face-detector-model %s: %s; detecting with ffbatch's own YuNet instead",
            settings.model,
            absent_message(settings.model, missing, models.models_dir).split(". Fetch")[0],
        )
        return models.detector
    sessions = {learned_model(f).family: load_learned(models, f)[0] for f in files}
    log.info(
        "face detector: FaceFusion's %s (%s), %dx%d, angles %s, score %g",
        settings.model,
        ", ".join(f"{f}.onnx" for f in files),
        settings.size,
        settings.size,
        " ".join(map(str, settings.angles)),
        settings.score,
    )
    if any(settings.margin):
        log.info(
            "face detector margin: %s %% (top, right, bottom, left)", " ".join(map(str, settings.margin))
        )
    return FaceFusionDetector(sessions, settings, facefusion_landmarker(models, landmarker))


def facefusion_landmarker(
    models: Models, settings: FaceFusionLandmarkerSettings | None
) -> FaceFusionLandmarker | None:
    """FaceFusion's --face-landmarker-model when its files are here (FaceFusion's default 2dfan4 is
    named by every job file); else the detector's five points, saying so."""
    if settings is None or settings.score <= 0:
        return None
    files = ["fan_68_5", *(["2dfan4", "peppa_wutz"] if settings.model == "many" else [settings.model])]
    missing = [f for f in files if model_state(f, models.models_dir) == "missing"]
    if missing:
        log.info(
            "--face-landmarker-model %s: %s is not here; the faces keep the detector's five points",
            settings.model,
            ", ".join(f"{f}.onnx" for f in missing),
        )
        return None
    log.info("face landmarker: FaceFusion's %s (and fan_68_5), score %g", settings.model, settings.score)
    return FaceFusionLandmarker({f: load_learned(models, f)[0] for f in files}, settings)


def facefusion_yunet(models: Models) -> YuNetDetector | FaceFusionDetector:
    """The source photos' detector of `--embedding-convention facefusion`: the render's if it is
    FaceFusion's, else ffbatch's YuNet file read as FaceFusion reads it (not enlarged, cls·obj),
    with FaceFusion's landmarker when its files are here."""
    detector = models.detector
    if not isinstance(detector, YuNetDetector):
        return detector
    score = round(detector.settings.score_threshold**2, 6)  # ffbatch's √(cls·obj) → FaceFusion's
    landmarker = facefusion_landmarker(models, detector.settings.facefusion_landmarker)
    return FaceFusionDetector(
        {"yunet": detector.session}, FaceFusionDetectorSettings("yunet", score=score), landmarker
    )


def pick_source_faces(table: FaceTable, paths: list[str], face_index: int = 0) -> FaceTable:
    """Face number `face_index` (faces ordered largest first) of each image of `table`.

    No face at all: `NoFaceError`; fewer faces than `face_index + 1`: `InputError` naming
    --source-face-index, the photo and how many faces it has."""
    if face_index < 0:
        raise InputError(f"--source-face-index must not be negative (got {face_index})")
    if face_index == 0:
        table = select_faces(table, "one", len(paths))  # the largest, as always
    missing = [p for i, p in enumerate(paths) if i not in set(table.frame_index.tolist())]
    if missing:
        raise NoFaceError(f"no face found in source image {', '.join(missing)}")
    if face_index == 0:
        return table
    areas = table.areas()
    rows = []
    for i, path in enumerate(paths):
        mine = np.flatnonzero(table.frame_index == i)
        if face_index >= len(mine):
            raise InputError(
                f"--source-face-index {face_index}: source image {path} has only {len(mine)} "
                f"face{'s' if len(mine) != 1 else ''} (indices 0-{len(mine) - 1}, largest first)"
            )
        rows.append(mine[np.argsort(-areas[mine], kind="stable")][face_index])
    return table.select(np.array(rows))


def detect_sources(
    models: Models,
    source_paths: tuple[Path, ...],
    face_index: int = 0,
    *,
    mesh: bool = False,
    facefusion: bool = False,
):
    """The source photos on the host kernel set (photos of different sizes share one batch: the
    detector letterboxes each) and face `face_index` of each (largest first), meshed if asked;
    `facefusion`: detected as FaceFusion detects them (`facefusion_yunet`)."""
    k = HostKernels()
    frames = k.upload([read_image(p) for p in source_paths])
    detector = facefusion_yunet(models) if facefusion else models.detector
    table = pick_source_faces(detector(k, frames), [str(p) for p in source_paths], face_index)
    if mesh:
        table = models.mesh(k, frames, table)
        missing = [str(p) for i, p in enumerate(source_paths) if i not in set(table.frame_index.tolist())]
        if missing:
            raise NoFaceError(f"no face found in source image {', '.join(missing)}")
    return k, frames, table


def prepare_sources(
    models: Models, source_paths: tuple[Path, ...], settings: ClassicalSettings, face_index: int = 0
) -> list[SourceFace]:
    """Detect and mesh every source image in one batch; keep face `face_index` of each
    (faces ordered largest first: 0, the default, is the largest)."""
    k, frames, table = detect_sources(models, source_paths, face_index, mesh=True)
    rows = [int(np.flatnonzero(table.frame_index == i)[0]) for i in range(frames.count)]
    chosen = table.select(np.array(rows))  # each photo's face, in photo order
    if settings.glasses:  # a source photo's glasses are no part of its face
        frames = sources_without_rims(models, k, frames, chosen, source_paths)
    shut = np.zeros((len(rows), 2))
    if settings.eyes_mouth == "eyes" and settings.lids:  # a photo with shut eyes gives none
        shut = shut_lids(k, frames, chosen, models.regions).astype(np.float64)
        for path, (left, right) in zip(source_paths, shut, strict=True):
            if min(left, right) >= 0.5:
                log.warning(
                    "%s: the source face's eyes are shut: open eyes in the video keep their own, "
                    "so less of the source shows (a photo with open eyes gives them)",
                    path,
                )
            elif max(left, right) >= 0.5 and settings.fit:
                log.warning(
                    "%s: one of the source face's eyes reads shut (a squint or a wink): faces in the "
                    "video keep their own eyes, so less of the source shows (a photo with both eyes "
                    "open gives them)",
                    path,
                )
    surface = np.ascontiguousarray(models.triangles, np.int32)
    for path, r in zip(source_paths, rows, strict=True):
        hidden = far_eye_hidden(table.mesh[r], surface, models.regions)
        if profile_holds(np.array([hidden]))[0] > 0:  # a target so turned would be painted weaker
            log.warning(
                "%s: the source face is in profile (its own nose hides about %d %% of its far eye): the far "
                "half of the face is a guess, painted from the near half mirrored, and faces turned "
                "another way keep their own eyes, so less of the source shows (a frontal photo gives more)",
                path,
                round(100 * hidden),
            )
    sources = [
        prepare_source(frames.pixels[i], table.mesh[r], models.regions, settings, (shut[i, 0], shut[i, 1]))
        for i, r in enumerate(rows)
    ]
    if not settings.mirror_fill:
        return sources
    triangles = swap_triangles(models.triangles, models.regions, settings.eyes_mouth)
    flipped = [np.ascontiguousarray(frames.pixels[i][:, ::-1]) for i in range(frames.count)]
    for i, mesh in enumerate(mirrored_meshes(models, k, flipped, chosen)):
        if mesh is not None:
            # flipped, the photo's left eye is the mirror face's right: its lids swap sides
            mirror = prepare_source(flipped[i], mesh, models.regions, settings, (shut[i, 1], shut[i, 0]))
            # with the fit, a photo with one eye read shut keeps that reading (gives no eyes)
            wink = not settings.fit
            sources[i] = with_mirror(sources[i], mirror, triangles, models.regions, open_wink=wink)
    return sources


def sources_without_rims(
    models: Models, k: HostKernels, frames: Frames, chosen: FaceTable, source_paths: tuple[Path, ...]
) -> Frames:
    """The source photos with the rims of glasses found round their chosen face's eyes painted
    out (swap/classical/rims.py: the swap warps the photo's pixels, and rims left in them would
    be drawn bent onto every target)."""
    crops, affines = align_crops(
        k, frames, chosen.frame_index, chosen.landmarks5, OCCLUSION_TEMPLATE, OCCLUSION_CROP
    )
    meshes = transform_points(chosen.required("mesh")[:, :, :2].astype(np.float64), affines)
    lumas = host_lumas(k, crops)
    visibility = rim_visibility(lumas, meshes, models.regions)
    photos = list(frames.pixels)
    for row, i in enumerate(chosen.frame_index.tolist()):
        if (visibility[row] < 1).any():
            face = (visibility[row], lumas[row], meshes[row], models.regions, affines[row])
            rims = rims_on_photo(*face, photos[i].shape[:2])
            iod = 0.7 * eye_frame(chosen.required("mesh")[row])[1]
            photos[i] = without_rims(photos[i], rims, iod)
            log.info("%s: glasses on the source face: their rims are painted out of it", source_paths[i])
    return k.upload(photos)


def mirrored_meshes(models: Models, k: HostKernels, flipped: list[np.ndarray], chosen: FaceTable) -> list:
    """Per source photo, the mesh of its chosen face in the photo flipped left-right (one
    batch for all photos); None where no face of the flipped photo lies where it should."""
    images = k.upload(flipped)
    table = models.mesh(k, images, models.detector(k, images))
    assert table.mesh is not None  # the mesh stage's column
    out: list = []
    for i, box in enumerate(chosen.box):
        mine = np.flatnonzero(table.frame_index == i)
        centre = np.array([flipped[i].shape[1] - 1 - (box[0] + box[2]) / 2, (box[1] + box[3]) / 2])
        centres = (table.box[mine, :2] + table.box[mine, 2:]) / 2
        distance = np.linalg.norm(centres - centre, axis=1)
        near = int(np.argmin(distance)) if len(mine) else -1
        out.append(
            table.mesh[mine[near]] if near >= 0 and distance[near] < 0.25 * (box[2] - box[0]) else None
        )
    return out


def meshing(models: Models, *, keep_all: bool) -> FaceMesh:
    """The face mesh stage; `keep_all`: no face dropped for a low presence (someone else decides)."""
    mesh = models.mesh
    if not keep_all:
        return mesh
    settings = replace(mesh.settings, presence_threshold=-np.inf)
    return FaceMesh(
        mesh.session, settings, points=mesh.points_name, presence=mesh.presence_name, policy=mesh.policy
    )


def build_pipeline(
    models: Models,
    source_paths: tuple[Path, ...],
    settings: SwapSettings,
    faces_mode: str,
    timer: StageTimer | None = None,
    source_face_index: int = 0,
    tracking: TrackSettings | None = TrackSettings(),
) -> FacePipeline:
    """The face pipeline of these settings: its stages, their sessions and the prepared sources.

    One pipeline serves every kernel set (each executor worker passes its own). `tracking`:
    faces linked into tracks and swapped per track (None: every frame on its own). Each step
    below loads its own models and checks its own options, in this order."""
    swapper_name = choose_swapper(settings, models.models_dir)
    refuse_skin_mask_with_a_learned_swapper(settings, swapper_name)  # before any model is loaded
    recogniser = swap_recogniser(models, swapper_name)  # ArcFace, when the swap itself needs embeddings
    chooser, reference = face_chooser(models, settings, faces_mode, recogniser)
    stages: list = face_filters(models, settings.face_filter, source_paths)
    stages.append(face_selector(settings, faces_mode, chooser, reference))
    sources = SourcePhotos(source_paths, mapped_sources(settings, source_paths), source_face_index)
    matcher, assign = person_stages(models, settings, chooser)
    stages += matcher
    track = [TrackStage(FaceTracker(tracking))] if tracking is not None else []
    occluder, parser = mask_models(models, settings, swapper_name)
    if settings.swapper == "none":  # the enhancer alone (FaceFusion's face_enhancer step)
        stages += track
    elif swapper_name is None:
        stages += classical_stages(models, settings, sources, occluder, track, assign)
    else:
        stages += learned_stages(
            models, settings, swapper_name, sources, recogniser, occluder, parser, track, assign
        )
    stages += enhancer_stages(models, settings.learned, occluder)
    shown = "none" if settings.swapper == "none" else swapper_name or "classical"
    return FacePipeline(models.detector, stages, timer, swapper=shown)


# --- the steps of build_pipeline, in its order -----------------------------------------------


def refuse_skin_mask_with_a_learned_swapper(settings: SwapSettings, swapper_name: str | None) -> None:
    """`--mask skin` reads the face mesh, which only the classical swap has."""
    if swapper_name is not None and "skin" in settings.learned.masks.types:
        raise InputError(
            "--mask skin is the classical swap's occlusion without a model (it reads the face mesh); "
            "a learned swapper takes --mask occlusion or --mask region"
        )


def swap_recogniser(models: Models, swapper_name: str | None) -> Recogniser | None:
    """ArcFace, when the learned swapper's identity is an embedding; else None."""
    family = learned_model(swapper_name).family if swapper_name else None
    if family in EMBEDDING_FAMILIES:
        return load_recogniser(models, required_by=f"the learned swapper {swapper_name}")
    return None


def face_chooser(
    models: Models, settings: SwapSettings, faces_mode: str, recogniser: Recogniser | None
) -> tuple[SelectionRecogniser | None, np.ndarray | None]:
    """The recogniser that chooses faces (`--faces reference`, `--map`; else None) and, with
    `--faces reference`, the reference face's vector."""
    if faces_mode != "reference" and not settings.mapping:
        return None, None
    why = "--faces reference" if faces_mode == "reference" else "--map"
    chooser = selection_recogniser(models, settings.recogniser, recogniser, required_by=why)
    reference = (
        reference_embedding(models, chooser, settings.reference) if faces_mode == "reference" else None
    )
    return chooser, reference


def face_selector(
    settings: SwapSettings,
    faces_mode: str,
    chooser: SelectionRecogniser | None,
    reference: np.ndarray | None,
) -> FaceSelector:
    return FaceSelector(
        faces_mode,
        chooser,
        reference,
        settings.reference.distance,
        settings.face_order,
        settings.face_indices,
    )


@dataclass(frozen=True)
class SourcePhotos:
    """The photos a swap takes its faces from: `--source`'s, and with `--map` each person's."""

    paths: tuple[Path, ...]
    per_person: tuple[tuple[Path, ...], ...]  # none without --map
    face_index: int = 0  # --source-face-index: which face of each photo (largest first)


def mapped_sources(settings: SwapSettings, source_paths: tuple[Path, ...]) -> tuple[tuple[Path, ...], ...]:
    """--map: whose source each face gets (the photos of each person; the plain --source last)."""
    person_sources: list[tuple[Path, ...]] = [(src,) for _, src in settings.mapping]
    if settings.mapping and settings.map_unmatched == "source":
        person_sources.append(tuple(source_paths))
    return tuple(person_sources)


def person_stages(
    models: Models, settings: SwapSettings, chooser: SelectionRecogniser | None
) -> tuple[list[PersonMatcher], list[AssignPersons]]:
    """--map: the stage that measures each face's distance to each person, and the one that
    assigns the faces to them (after the tracker, which averages the distances along each track)."""
    if not settings.mapping or chooser is None:
        return [], []
    matcher = PersonMatcher(chooser, map_references(models, chooser, settings.mapping))
    return [matcher], [AssignPersons(settings.reference.distance, settings.map_unmatched)]


def mask_models(
    models: Models, settings: SwapSettings, swapper_name: str | None
) -> tuple[Occluder | None, RegionParser | None]:
    """The occlusion model (the learned swap's masks, the enhancer's, the classical paint's) and the
    region parser (a learned swapper's) that `--mask` asks for; the masks only a learned swapper
    takes are refused without one."""
    masks = settings.learned.masks
    occluder = parser = None
    if "occlusion" in masks.types:
        require_mask_model(settings, "--mask occlusion", "--occluder-model", masks.occluder_model, models)
        occluder = Occluder(
            load_learned(models, masks.occluder_model)[0], MODELS[masks.occluder_model].size, models.policy
        )
    if "region" in masks.types and swapper_name:
        require_mask_model(settings, "--mask region", "--parser-model", masks.parser_model, models)
        model = MODELS[masks.parser_model]
        parser = RegionParser(
            load_learned(models, masks.parser_model)[0],
            masks.regions,
            model.size,
            model.mean,
            model.std,
            models.policy,
        )
    for learned_only in ("region", "area"):
        if swapper_name is None and learned_only in masks.types:
            raise InputError(
                f"--mask {learned_only} needs a learned swapper (it masks the swapped crop); "
                "the classical swap takes --mask occlusion or --mask skin"
            )
    return occluder, parser


def classical_stages(
    models: Models,
    settings: SwapSettings,
    sources: SourcePhotos,
    occluder: Occluder | None,
    track: list[TrackStage],
    assign: list[AssignPersons],
) -> list:
    """The classical swap: the face mesh, the lids read from the picture, the tracker and --map's
    assignment, then the swapper (one per person with --map)."""
    classical = settings.classical
    # with tracks, the tracker decides per track which faces are present
    mesh = meshing(models, keep_all=bool(track))

    def swapper_for(paths: tuple[Path, ...]) -> ClassicalSwapper:
        prepared = prepare_sources(models, paths, classical, sources.face_index)
        skin = "skin" in settings.learned.masks.types
        return ClassicalSwapper(prepared, models.triangles, models.regions, classical, occluder, skin)

    swapper: PersonRouter | ClassicalSwapper
    if sources.per_person:
        swapper = PersonRouter([swapper_for(paths) for paths in sources.per_person])
    else:
        swapper = swapper_for(sources.paths)
    # closed eyes the mesh keeps open, read before the tracker so it averages them per track
    lids = [LidReader(models.regions)] if classical.eyes_mouth == "eyes" and classical.lids else []
    return [mesh, *lids, *track, *assign, swapper]


def learned_stages(
    models: Models,
    settings: SwapSettings,
    swapper_name: str,
    sources: SourcePhotos,
    recogniser: Recogniser | None,
    occluder: Occluder | None,
    parser: RegionParser | None,
    track: list[TrackStage],
    assign: list[AssignPersons],
) -> list:
    """A learned swapper: the face mesh when the area mask draws from it, the tracker and --map's
    assignment, the target faces' embeddings when the swap weighs them, then the swapper with
    its masks."""
    learned, masks = settings.learned, settings.learned.masks
    model = learned_model(swapper_name)
    session, base_path = load_learned(models, swapper_name)
    identity = learned_identity(models, learned, model, base_path, sources, recogniser)
    stages: list = []
    area = AreaMasker(models.regions, masks.areas) if "area" in masks.types else None
    if area is not None:  # the area mask is drawn from the mesh; every face keeps its place
        stages.append(meshing(models, keep_all=True))
    stages += [*track, *assign]
    if identity.needs_target_embeddings:
        if recogniser is None:
            raise ValueError("a swapper weight other than 0.5 needs the target faces' embeddings")
        stages.append(recogniser)
    stages.append(
        LearnedSwapper(
            session,
            model,
            identity,
            CropMasker(masks, occluder, parser, area),
            learned.pixel_boost,
            models.policy,
        )
    )
    return stages


def learned_identity(
    models: Models,
    learned: LearnedSettings,
    model: LearnedModel,
    base_path: Path,
    sources: SourcePhotos,
    recogniser: Recogniser | None,
) -> IdentityEncoder | MappedIdentity:
    """The source identity the learned swapper `model` (its file at `base_path`) takes: the
    source photos' embedding, or per person with --map."""
    emap = read_emap(base_path) if model.family == "inswapper" else None
    converter = load_learned(models, model.converter)[0] if model.converter else None

    def encoder(paths: tuple[Path, ...]) -> IdentityEncoder:
        return IdentityEncoder(
            model,
            learned_sources(
                models,
                paths,
                recogniser,
                sources.face_index,
                model.family,
                facefusion=learned.embedding_convention == "facefusion",
            ),
            weight=learned.weight,
            emap=emap,
            converter=converter,
            convention=learned.embedding_convention,
        )

    if sources.per_person:
        return MappedIdentity([encoder(paths) for paths in sources.per_person])
    return encoder(sources.paths)


def enhancer_stages(
    models: Models, learned: LearnedSettings, occluder: Occluder | None
) -> list[FaceEnhancer]:
    """`--enhancer-model`'s stage, when one is named; its files must be here (never fetched)."""
    if not learned.enhancer_model:
        return []
    name = learned.enhancer_model.partition("@")[0]
    if model_state(name, models.models_dir) == "missing":  # named: never fetched behind the user's back
        raise ModelError(absent_message(f"--enhancer-model {name}", [name], models.models_dir))
    return [
        FaceEnhancer(
            load_learned(models, learned.enhancer_model)[0],
            learned_model(learned.enhancer_model),
            blend=learned.enhancer_blend,
            mask_blur=learned.masks.blur,
            occluder=occluder,
            policy=models.policy,
            weight=learned.enhancer_weight,
        )
    ]


# --- learned models ------------------------------------------------------------------------


def load_learned(models: Models, name: str) -> tuple[Session, Path]:
    """A session over `name` that takes any batch, and the path of the original file.

    A model published with a fixed batch of 1 runs from its `@batch` copy, made
    once beside it in the store (and checked: a batch equals single runs).
    """
    base_name, _, variant = name.partition("@")
    base = learned_file(models, base_name)
    catalog = variant_catalog(base_name)
    if not variant and models.backend.name == "cpu" and getattr(models.backend, "precision", "") == "int8":
        int8, why = usable_int8(base_name, models.models_dir)
        if int8 is not None:
            models.paths[name] = str(int8)
            return models.backend.load(int8, label=f"{base_name}@int8"), base
        log.warning("--precision int8: %s runs in fp32: %s", base_name, why)
    if not variant:
        # TensorRT builds an engine per file: a fixed-batch file goes to its batch copy before one is built
        if store.verify(f"{base_name}@batch", catalog=catalog, validate=False).ok or (
            models.backend.name == "tensorrt" and declares_fixed_batch(base)
        ):
            variant = "batch"
        else:
            session = models.backend.load(base, label=base_name)
            if not any(len(t.shape) >= 2 and isinstance(t.shape[0], int) for t in session.inputs):
                models.paths[name] = str(base)
                return session, base
            log.info("%s declares a fixed batch; using its dynamic-batch copy (made once)", base_name)
            variant = "batch"
    path = prepared_path(f"{base_name}@{variant}", models_dir=models.models_dir, catalog=catalog)
    models.paths[name] = str(path)
    return models.backend.load(path, label=f"{base_name}@{variant}"), base


def load_recogniser(models: Models, *, required_by: str) -> Recogniser:
    """The ArcFace recogniser; for choosing faces it must already be here (never fetched)."""
    if required_by in ("--faces reference", "--map") and not is_present(RECOGNISER, models.models_dir):
        raise InputError(
            f"{required_by} needs the face recogniser {RECOGNISER}, which is not here: "
            f"fetch it with `ffbatch models fetch {RECOGNISER}`, or point --models-dir at a "
            f"directory holding {RECOGNISER}.onnx (FaceFusion's .assets/models)"
        )
    return Recogniser(load_learned(models, RECOGNISER)[0], MODELS[RECOGNISER], models.policy)


def face_filters(
    models: Models, settings: FaceFilterSettings, source_paths: tuple[Path, ...]
) -> list[FaceFilter]:
    """The gender / race / age filter stage, when one is asked for; its model must be here
    (exit 2 naming it and how to get it otherwise). `auto` classifies the first source photo."""
    if not settings.active:
        return []
    if not is_present(CLASSIFIER, models.models_dir):
        asked = [
            option
            for option, value in (
                ("--face-selector-gender", settings.gender),
                ("--face-selector-race", settings.race),
                ("--face-selector-age-start", settings.age_start),
                ("--face-selector-age-end", settings.age_end),
            )
            if value is not None
        ]
        raise InputError(
            f"{', '.join(asked)} needs FaceFusion's gender-age model {CLASSIFIER} "
            f"({CLASSIFIER}.onnx), which is not here: fetch it with `ffbatch models fetch "
            f"{CLASSIFIER}`, or point --models-dir at a directory holding {CLASSIFIER}.onnx and "
            f"{CLASSIFIER}.hash (FaceFusion's .assets/models)"
        )
    classifier = FaceClassifier(load_learned(models, CLASSIFIER)[0], MODELS[CLASSIFIER], models.policy)
    source = None
    if "auto" in (settings.gender, settings.race):
        k, frames, table = detect_sources(models, source_paths[:1])
        source = classifier.classify(k, frames, table)
    return [FaceFilter(classifier, settings, source)]


def selection_recogniser(
    models: Models, choice: str, arcface: Recogniser | None, *, required_by: str
) -> SelectionRecogniser:
    """The recogniser that chooses faces: ArcFace (already loaded for the swap, or present in
    the store; never fetched), or dlib's ResNet from its wheels. `auto`: ArcFace when it is here,
    else dlib when installed, else exit 2 naming both ways."""
    if choice == "dlib":
        return DlibRecogniser()
    if arcface is not None:
        return arcface
    if choice == "arcface" or is_present(RECOGNISER, models.models_dir):
        return load_recogniser(models, required_by=required_by)
    if dlib_available():
        log.info("%s: %s is not here, choosing faces with dlib's recogniser", required_by, RECOGNISER)
        return DlibRecogniser()
    raise InputError(
        f"{required_by} needs the face recogniser {RECOGNISER}, which is not here (fetch it with "
        f"`ffbatch models fetch {RECOGNISER}`, or point --models-dir at FaceFusion's .assets/models), "
        f"or dlib's, which is not installed ({DLIB_INSTALL})"
    )


def map_references(
    models: Models, chooser: SelectionRecogniser, mapping: tuple[tuple[Path, Path], ...]
) -> np.ndarray:
    """[P,D]: each --map reference photo's largest face, one recogniser call for all of them."""
    refs = tuple(ref for ref, _ in mapping)
    try:
        k, frames, table = detect_sources(models, refs)
    except NoFaceError as exc:
        raise NoFaceError(f"--map reference: {exc}") from None
    return chooser.embed(k, frames, table)


def learned_sources(
    models: Models,
    source_paths: tuple[Path, ...],
    recogniser: Recogniser | None,
    face_index: int = 0,
    family: str | None = None,
    *,
    facefusion: bool = False,
):
    k, frames, table = detect_sources(models, source_paths, face_index, facefusion=facefusion)
    return source_identity(k, frames, table, recogniser, family)


def read_frame(video: Path, index: int) -> np.ndarray:
    with FrameReader(video) as reader:
        for i, frame in enumerate(reader):
            if i == index:
                return frame.image
    raise InputError(f"--reference-frame {index}: {video} has only {index if index else 0} frames or fewer")


def reference_embedding(
    models: Models, recogniser: SelectionRecogniser, reference: ReferenceSettings
) -> np.ndarray:
    """The recogniser's vector of the reference face: the `position`-th largest face of the picture."""
    if reference.image is not None:
        image, what = read_image(reference.image, "--reference-face"), f"--reference-face {reference.image}"
    elif reference.video is None or reference.frame is None:
        raise ValueError("--faces reference needs --reference-face or a frame of the input")
    elif reference.frame == 0 and is_still_image(reference.video):  # a photo input: its one picture
        image, what = read_image(reference.video, "input"), f"the input {reference.video}"
    else:
        image, what = read_frame(reference.video, reference.frame), f"frame {reference.frame} of the input"
    k = HostKernels()
    frames = k.upload([image])
    table = models.detector(k, frames)
    if len(table) == 0:
        raise NoFaceError(f"no face found in {what}")
    order = np.argsort(-table.areas(), kind="stable")
    row = order[min(reference.position, len(order) - 1)]
    return recogniser.embed(k, frames, table.select(np.array([row])))[0]
