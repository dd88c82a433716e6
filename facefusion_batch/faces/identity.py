"""Who a face is: ArcFace embeddings for a batch of faces, the source identity, reference matching.

Conventions (FaceFusion 3.x where it has one):

- the recogniser sees an arcface_112_v2 crop, RGB, x/127.5 − 1; its raw 512-d
  output is kept, and normalised where a unit vector is wanted;
- several source photos: raw embeddings are averaged (what the embedding
  converters take) and the normalised ones averaged; the `insightface` convention
  normalises that mean again (a unit identity direction), `facefusion` keeps it as
  FaceFusion does (hyperswap then gets a shorter vector);
- two embedding conventions (`--embedding-convention`): `insightface` renormalises
  inswapper's latent (its publisher's inference code) and blends the swapper weight
  in ArcFace space before the mapping; `facefusion` is FaceFusion 3.x exactly: no
  renormalising, the weight blended after the mapping against the target's embedding
  (normalised except for ghost). The default is the model publisher's (the catalogue's
  `convention`): insightface for inswapper, facefusion for the rest;
- distance between faces: (1 − cos) / 2, from 0 (same direction) to 1;
  `--reference-distance` is a threshold on it (FaceFusion's scale; default 0.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, get_args

import numpy as np

from facefusion_batch.faces.align import align_crops, crop_model_input
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.models import onnx_stream
from facefusion_batch.models.facefusion import MODELS, RECOGNISER, LearnedModel
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session, run_chunked

# InsightFace (inswapper's publisher) normalises the latent (e/|e|) @ emap once more before
# feeding it; FaceFusion does not. The publisher's own inference code defines what the model
# was built for, so its convention is followed.
RENORMALISE_INSWAPPER_LATENT = True
EMBEDDING_FAMILIES = ("inswapper", "hyperswap", "simswap", "ghost", "hififace")
Convention = Literal["insightface", "facefusion"]
CONVENTIONS: tuple[Convention, ...] = get_args(Convention)
CONVERTED_RAW = ("ghost",)  # converter output and target side kept raw (FaceFusion's balance)
IMAGE_SOURCE_CROPS = {"blendswap": ("arcface_112_v2", 112), "uniface": ("ffhq_512", 256)}


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    v = np.asarray(vectors, np.float32)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.maximum(norm, 1e-12)


def face_distance(embeddings: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """(1 − cos) / 2 between each embedding [F,512] and `reference` [512]: 0 same, 1 opposite."""
    return (1.0 - normalise(embeddings) @ normalise(reference)) / 2.0


class Recogniser:
    """A stage: frames + face table → raw ArcFace embeddings [F,512], one model call per chunk.

    As a pipeline stage (`Recognise`) it adds them to the table as its `embedding` column."""

    name = "recognise"
    kind = "arcface"
    feeds_swap = True  # its embeddings are the swappers' identity space

    def __init__(
        self, session: Session, model: LearnedModel = MODELS[RECOGNISER], policy: BatchPolicy = HOST
    ) -> None:
        self.session = session
        self.model = model
        self.input_name, self.max_batch = crop_model_input(session, model, policy)

    def embed(self, k: Kernels, frames: Frames, table: FaceTable) -> np.ndarray:
        if len(table) == 0:
            return np.zeros((0, 512), np.float32)
        m = self.model
        crops, _ = align_crops(k, frames, table.frame_index, table.landmarks5, m.template, m.size)
        out = k.run(self.session, {self.input_name: k.model_input(crops, m.mean, m.std)}, self.max_batch)
        return k.to_host(out[self.session.outputs[0].name]).reshape(len(table), -1)

    @staticmethod
    def distance(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
        return face_distance(vectors, reference)

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        """The table with its `embedding` column (computed only where it is missing)."""
        if table.embedding is not None or len(table) == 0:
            return table
        return table.with_columns(embedding=self.embed(k, frames, table))


@dataclass(frozen=True)
class SourceIdentity:
    """The face to put in, from one or more photos."""

    embedding: np.ndarray | None  # [512] unit: the normalised embeddings averaged, normalised again
    raw: np.ndarray | None  # [512] the raw embeddings averaged
    face: np.ndarray | None = None  # [3,S,S] RGB 0–1: the first photo's face (blendswap / uniface)
    unit_mean: np.ndarray | None = None  # [512] the normalised embeddings averaged (FaceFusion's)


def source_identity(
    k: Kernels,
    frames: Frames,
    table: FaceTable,
    recogniser: Recogniser | None,
    family: str | None = None,
) -> SourceIdentity:
    """`table` holds one face per source photo (row i ↔ photo i); one recogniser call for all of
    them. Image-source families (blendswap, uniface) also get the first photo's face crop."""
    embedding = raw = face = unit_mean = None
    if recogniser is not None:
        raw_all = recogniser.embed(k, frames, table)
        raw = raw_all.mean(axis=0)
        unit_mean = normalise(raw_all).mean(axis=0)
        embedding = normalise(unit_mean)
    if family in IMAGE_SOURCE_CROPS:
        template, size = IMAGE_SOURCE_CROPS[family]
        first = table.select(np.flatnonzero(table.frame_index == 0)[:1])
        crops, _ = align_crops(k, frames, first.frame_index, first.landmarks5, template, size)
        # the source face goes in as RGB 0–1, whatever the target's normalisation
        face = k.to_host(k.model_input(crops))[0]
    return SourceIdentity(embedding=embedding, raw=raw, face=face, unit_mean=unit_mean)


def read_emap(model_path: Path) -> np.ndarray:
    """inswapper's embedding map: the graph's last initializer, 512×512 (read alone from the
    file, models/onnx_stream.last_initializer; one stored outside the file: the whole model
    loaded)."""
    import onnx
    from onnx import numpy_helper

    try:
        last = onnx_stream.last_initializer(model_path)
    except onnx_stream.WireError as exc:
        raise ValueError(f"{model_path}: {exc}, so no emap") from exc
    if last.data_location == onnx.TensorProto.EXTERNAL:
        last = onnx.load(str(model_path)).graph.initializer[-1]
    emap = numpy_helper.to_array(last).astype(np.float32)
    if emap.shape != (512, 512):
        raise ValueError(f"{model_path}: the last initializer is {emap.shape}, not the 512×512 emap")
    return emap


def inswapper_latent(embeddings: np.ndarray, emap: np.ndarray) -> np.ndarray:
    """(e/‖e‖) @ emap for each row, normalised again (see RENORMALISE_INSWAPPER_LATENT)."""
    latent = normalise(embeddings) @ emap
    return normalise(latent) if RENORMALISE_INSWAPPER_LATENT else latent


def weight_to_lambda(weight: float) -> float:
    """FaceFusion's --face-swapper-weight: 0–1, 0.5 = the source alone; mapped to a target share.

    λ = 0.35 − 0.7·weight: weight 0 moves 35% toward the target's own identity,
    weight 1 moves 35% away from it (exaggerating the source).
    """
    return 0.35 - 0.7 * float(weight)


class IdentityEncoder:
    """Per target face, the swapper's identity input [F,D] (or [F,3,S,S] for image-source models).

    `insightface` convention: the weight blends source and target identity in the space
    the model's mapping starts from (the normalised or raw ArcFace embedding), before emap
    or a converter, so both sides are in the same space. `facefusion`: FaceFusion's exact
    formulas (the mapped source blended with the target's embedding, nothing renormalised),
    so a user moving over gets the same face from the same file.
    """

    def __init__(
        self,
        model: LearnedModel,
        source: SourceIdentity,
        *,
        weight: float = 0.5,
        emap: np.ndarray | None = None,
        converter: Session | None = None,
        convention: str | None = None,
    ) -> None:
        self.model = model
        self.family = model.family
        self.convention = convention or model.convention
        if self.convention not in CONVENTIONS:
            raise ValueError(f"embedding convention {self.convention!r} is not one of {CONVENTIONS}")
        self.lam = weight_to_lambda(weight) if self.family in EMBEDDING_FAMILIES else 0.0
        self.emap = emap
        self.converter = converter
        if self.family in EMBEDDING_FAMILIES and source.embedding is None:
            raise ValueError(f"{model.name} needs the source's face embedding (a face recogniser)")
        if self.family == "inswapper" and emap is None:
            raise ValueError("inswapper needs its emap")
        if self.family in ("simswap", "ghost", "hififace") and converter is None:
            raise ValueError(f"{model.name} needs its embedding converter {model.converter}")
        if self.family in IMAGE_SOURCE_CROPS and source.face is None:
            raise ValueError(f"{model.name} takes the source face itself; source_identity() crops it")
        self.source = source
        if self.family not in EMBEDDING_FAMILIES:
            self._source_input = source.face
        elif self.convention == "facefusion":
            self._source_input = self._facefusion_source()
        else:
            self._source_input = self._map(self._source_side()[None])[0]

    @property
    def needs_target_embeddings(self) -> bool:
        return self.lam != 0.0

    def _uses_raw(self) -> bool:
        return self.family in ("simswap", "ghost", "hififace")

    def _facefusion_source(self) -> np.ndarray:
        """FaceFusion's source embedding per family, from the photos' averaged embeddings."""
        raw = _present(self.source.raw, "the source's raw embedding")
        if self.family == "inswapper":
            return (normalise(raw[None]) @ _present(self.emap, "inswapper's emap"))[0]
        if self.family == "hyperswap":
            mean = self.source.unit_mean if self.source.unit_mean is not None else self.source.embedding
            return np.asarray(mean, np.float32)
        converted = self._convert(raw[None])
        return converted[0] if self.family in CONVERTED_RAW else normalise(converted)[0]

    def _convert(self, vectors: np.ndarray) -> np.ndarray:
        converter = _present(self.converter, f"{self.model.name}'s embedding converter")
        out = run_chunked(converter, {_input_name(converter): vectors.astype(np.float32)}, 4096)
        return out[converter.outputs[0].name].reshape(len(vectors), -1)

    def _source_side(self) -> np.ndarray:
        side = self.source.raw if self._uses_raw() else self.source.embedding
        return _present(side, "the source's face embedding")

    def _map(self, vectors: np.ndarray) -> np.ndarray:
        """From the blended ArcFace-space vectors [F,512] to the swapper's source input."""
        if self.family == "inswapper":
            return inswapper_latent(vectors, _present(self.emap, "inswapper's emap"))
        if self.family == "hyperswap":
            return normalise(vectors)
        converted = self._convert(vectors)
        return converted if self.family in CONVERTED_RAW else normalise(converted)

    def for_table(self, table: FaceTable) -> np.ndarray:
        """The identity rows of every face of `table` (the swapper's source input)."""
        return self(len(table), table.embedding)

    def __call__(self, count: int, target_embeddings: np.ndarray | None = None) -> np.ndarray:
        source_input = _present(self._source_input, "the source face")
        if self.lam == 0.0 or target_embeddings is None:
            return np.repeat(source_input[None], count, axis=0)
        if self.convention == "facefusion":
            # FaceFusion's balance: after the mapping, against the target's embedding as it is
            target = target_embeddings if self.family in CONVERTED_RAW else normalise(target_embeddings)
            blended = (1.0 - self.lam) * source_input[None] + self.lam * target
            return blended.astype(np.float32)
        target = target_embeddings if self._uses_raw() else normalise(target_embeddings)
        blended = (1.0 - self.lam) * self._source_side()[None] + self.lam * target
        return self._map(blended.astype(np.float32))


class MappedIdentity:
    """`--map`: one IdentityEncoder per mapped person (row p ↔ the table's `person` p), so every
    face of the batch still goes through the swapper in one call, each with its own source."""

    def __init__(self, encoders: list[IdentityEncoder]) -> None:
        if not encoders:
            raise ValueError("a mapped identity needs at least one person's encoder")
        self.encoders = list(encoders)
        self.model = encoders[0].model

    @property
    def needs_target_embeddings(self) -> bool:
        return any(e.needs_target_embeddings for e in self.encoders)

    def for_table(self, table: FaceTable) -> np.ndarray:
        if table.person is None:
            raise ValueError("per-person sources need the table's `person` column (AssignPersons)")
        rows: list[np.ndarray | None] = [None] * len(table)
        for p, encoder in enumerate(self.encoders):
            mine = np.flatnonzero(table.person == p)
            if len(mine):
                target = None if table.embedding is None else table.embedding[mine]
                for i, row in zip(mine, encoder(len(mine), target), strict=True):
                    rows[i] = row
        filled = [r for r in rows if r is not None]
        if len(filled) < len(rows):
            raise ValueError(f"faces mapped to no person: {sorted(set(table.person.tolist()))}")
        return np.stack(filled).astype(np.float32)


T = TypeVar("T")


def _present(value: T | None, what: str) -> T:
    """`value`, which the identity's family needs (checked when it was made)."""
    if value is None:
        raise ValueError(f"the identity needs {what}")
    return value


def _input_name(session: Session) -> str:
    names = [t.name for t in session.inputs]
    return "input" if "input" in names else names[0]


def match_reference(embeddings: np.ndarray, reference: np.ndarray, max_distance: float) -> np.ndarray:
    """Bool [F]: faces within `max_distance` ((1 − cos) / 2) of the reference embedding."""
    if len(embeddings) == 0:
        return np.zeros((0,), bool)
    return face_distance(embeddings, reference) < max_distance
