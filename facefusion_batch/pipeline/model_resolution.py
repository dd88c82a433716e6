"""Model resolution: which model files a run needs, whether each is here and sound, and which
learned swapper runs (never fetching behind the user's back, never mistaking a corrupt file for
an absent one). Loading the sessions is pipeline/build.py's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from facefusion_batch.errors import ModelError
from facefusion_batch.faces.identity import EMBEDDING_FAMILIES
from facefusion_batch.models import store
from facefusion_batch.models.facefusion import RECOGNISER, check_beside, learned_model
from facefusion_batch.models.prepare import variant_catalog
from facefusion_batch.settings.types import SwapSettings
from facefusion_batch.swap.learned import AUTO_ORDER

log = logging.getLogger("ffbatch")


class HasModelsDir(Protocol):
    """What resolution reads of the loaded models (pipeline/build.py's `Models`)."""

    models_dir: Path | None


def required_models(name: str) -> list[str]:
    """The files a learned swapper needs: itself, the recogniser and its converter if any."""
    model = learned_model(name)
    needed = [name]
    if model.family in EMBEDDING_FAMILIES:
        needed.append(RECOGNISER)
    if model.converter:
        needed.append(model.converter)
    return needed


def model_state(name: str, models_dir: Path | None) -> str:
    """ "present" or "missing" for a learned model's file (never fetches); a file that is there
    but fails verification (its sha256 record, or the CRC32 in the ``.hash`` beside it, re-read
    now) is `ModelError`: a corrupt file is never mistaken for an absent one."""
    base, _, variant = name.partition("@")
    if variant:
        catalog = variant_catalog(base)
        try:
            return "present" if store.verify(name, models_dir=models_dir, catalog=catalog).ok else "missing"
        except (ModelError, OSError):
            return "missing"
    res = store.verify(base, models_dir=models_dir)
    if res.reason == "missing":
        return "missing"
    if not res.ok:
        raise ModelError(
            f"{base}: {res.path} fails verification ({res.reason}; expected {res.expected or 'no record'}, "
            f"actual {res.actual or 'unknown'}). Replace it with the publisher's file, or fetch it again "
            f"with `ffbatch models fetch --force {base}`"
        )
    check_beside(res.path)
    return "present"


def is_present(name: str, models_dir: Path | None) -> bool:
    """Whether `name`'s file is here and verifies (never fetches; a corrupt file raises)."""
    return model_state(name, models_dir) == "present"


def choose_swapper(settings: SwapSettings, models_dir: Path | None) -> str | None:
    """The learned swapper to run, or None for the classical swap.

    `auto` falls back to the classical swap only when learned files are absent, and says
    which; a file that is there but fails verification stops the run (exit 2) in every mode."""
    named = settings.learned.swapper_model
    if settings.swapper in ("classical", "none"):
        return None
    if settings.swapper == "learned":
        return named or AUTO_ORDER[0]
    absent: list[str] = []
    for name in [named] if named else AUTO_ORDER:
        missing = [n for n in required_models(name) if model_state(n, models_dir) == "missing"]
        if not missing:
            log.info("swapper auto: %s is present, using the learned swapper", name)
            return name
        if named:  # a model the user named is never silently replaced
            raise ModelError(absent_message(f"--swapper-model {named}", missing, models_dir))
        absent.append(f"{name} (absent: {', '.join(missing)})")
    # one short line every run on a machine without them; the files each lacks only with -v
    log.warning(
        "swapper auto: no learned swapper model here, using the classical swap "
        "(--swapper learned fetches %s)",
        AUTO_ORDER[0],
    )
    log.debug("swapper auto: absent: %s", "; ".join(absent))
    return None


def require_mask_model(
    settings: SwapSettings, mask: str, option: str, name: str, models: HasModelsDir
) -> None:
    """A mask's model that is not here is exit 2 naming it, as a named swapper's is; only
    --swapper learned (fetched if missing) fetches what the run needs."""
    if settings.swapper != "learned" and model_state(name, models.models_dir) == "missing":
        message = absent_message(f"{mask} ({option} {name})", [name], models.models_dir)
        raise ModelError(
            message.replace("only --swapper auto", "--swapper learned fetches it; only --swapper auto")
        )


def absent_message(what: str, missing: list[str], models_dir: Path | None) -> str:
    """Exit 2's message for named model files that are not here: each file, where it was looked
    for, and how to get it."""
    files = []
    for name in missing:
        stored = store.store_path(name)
        places = [str(Path(models_dir) / stored.name)] if models_dir else []
        places.append(str(stored))
        file = stored.name
        files.append(f"{file} (looked for at {' and '.join(places)}; `ffbatch models fetch {name}`)")
    return (
        f"{what} needs {'; '.join(files)}. Fetch it, or point --models-dir at a directory holding it "
        "(FaceFusion's .assets/models); only --swapper auto without a model named falls back to the "
        "classical swap"
    )


def learned_file(models: HasModelsDir, name: str) -> Path:
    """The verified file of a FaceFusion model (fetched when absent); a present file that fails
    its check is `ModelError` naming it and both hashes, never silently replaced or skipped."""
    model_state(name, models.models_dir)
    path = store.model_path(name, models_dir=models.models_dir)
    check_beside(path)
    return path
