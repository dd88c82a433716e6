"""Gender, age and race of faces (FaceFusion's fairface model), and FaceFusion's filters on them:
`--face-selector-gender`, `--face-selector-race`, `--face-selector-age-start/-end`.

Conventions are FaceFusion 3.x's: the crop is arcface_112_v2 at 224 px, RGB ImageNet-normalised;
the model returns race, gender and age class ids in that order; gender 1 is female; the age id
is a band (0–2, 3–9, 10–19, ..., 70–100 years, each `range(lo, hi)` as FaceFusion has it) and a
face passes the age filter when its band overlaps `range(start, end)`; races 3 and 4 are both
asian. `auto` (gender, race) takes the largest source face's. Filters run before the order and
the index, as FaceFusion filters before choosing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from facefusion_batch.faces.align import align_crops, crop_model_input
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.models.facefusion import CLASSIFIER, MODELS, LearnedModel
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session

Gender = Literal["male", "female"]
Race = Literal["white", "black", "latino", "asian", "indian", "arabic"]
GenderFilter = Literal["auto", Gender]  # auto: the source face's
RaceFilter = Literal["auto", Race]
GENDERS: tuple[Gender, ...] = get_args(Gender)  # by class id
RACES: tuple[Race, ...] = ("white", "black", "latino", "asian", "asian", "indian", "arabic")  # by class id
RACE_NAMES: tuple[Race, ...] = get_args(Race)
AGE_BANDS = ((0, 2), (3, 9), (10, 19), (20, 29), (30, 39), (40, 49), (50, 59), (60, 69), (70, 100))
AGE_LIMIT = 100


@dataclass(frozen=True)
class FaceFilterSettings:
    gender: GenderFilter | None = None  # None: no filter
    race: RaceFilter | None = None  # None: no filter
    age_start: int | None = None  # years, FaceFusion's range(start, end)
    age_end: int | None = None

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.gender, self.race, self.age_start, self.age_end))


@dataclass(frozen=True)
class FaceClasses:
    gender: np.ndarray  # [F] int64: GENDERS index
    age: np.ndarray  # [F] int64: AGE_BANDS index
    race: np.ndarray  # [F] int64: RACES index


class FaceClassifier:
    """Frames + face table → gender, age band and race of every face, one model call per chunk."""

    def __init__(
        self, session: Session, model: LearnedModel = MODELS[CLASSIFIER], policy: BatchPolicy = HOST
    ) -> None:
        self.session = session
        self.model = model
        self.input_name, self.max_batch = crop_model_input(session, model, policy)

    def classify(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceClasses:
        count = len(table)
        if count == 0:
            empty = np.zeros((0,), np.int64)
            return FaceClasses(empty, empty, empty)
        m = self.model
        crops, _ = align_crops(k, frames, table.frame_index, table.landmarks5, m.template, m.size)
        out = k.run(self.session, {self.input_name: k.model_input(crops, m.mean, m.std)}, self.max_batch)
        race, gender, age = (_class_ids(k.to_host(out[o.name]), count) for o in self.session.outputs[:3])
        return FaceClasses(gender=gender, age=age, race=race)


def _class_ids(values: np.ndarray, count: int) -> np.ndarray:
    """Class ids [F] from a model output: ids as they are, or per-class scores → their argmax."""
    values = np.asarray(values).reshape(count, -1)
    return (values[:, 0] if values.shape[1] == 1 else values.argmax(axis=1)).astype(np.int64)


def keep_mask(
    classes: FaceClasses, settings: FaceFilterSettings, source: FaceClasses | None = None
) -> np.ndarray:
    """Bool [F]: the faces that pass every filter of `settings` (`auto` resolved from `source`)."""
    keep = np.ones(len(classes.gender), bool)
    gender, race = settings.gender, settings.race
    if gender == "auto":
        gender = GENDERS[int(source.gender[0])] if source is not None and len(source.gender) else None
    if race == "auto":
        race = RACES[int(source.race[0])] if source is not None and len(source.race) else None
    if gender is not None:
        keep &= classes.gender == GENDERS.index(gender)
    if race is not None:
        keep &= np.array([RACES[int(r)] == race for r in classes.race], bool)
    if settings.age_start is not None or settings.age_end is not None:
        start = settings.age_start or 0
        end = AGE_LIMIT if settings.age_end is None else settings.age_end
        bands = np.asarray(AGE_BANDS)[np.clip(classes.age, 0, len(AGE_BANDS) - 1)]
        keep &= np.maximum(bands[:, 0], start) < np.minimum(bands[:, 1], end)
    return keep


class FaceFilter:
    """A stage: only the faces of the chosen gender, race and age (one classifier call)."""

    name = "classify"

    def __init__(
        self, classifier: FaceClassifier, settings: FaceFilterSettings, source: FaceClasses | None = None
    ) -> None:
        self.classifier = classifier
        self.settings = settings
        self.source = source

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        classes = self.classifier.classify(k, frames, table)
        return table.select(keep_mask(classes, self.settings, self.source))
