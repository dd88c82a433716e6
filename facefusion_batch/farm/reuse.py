"""Whether finished work may be reused instead of rendered: made from this input with these
settings by this code (the ffbatch version and its RENDER_REVISION, both in the settings digest),
and still holding the bytes it was written with (video/encode/written.py).

Outputs and segments carry, beside the digest (`ffbatch_settings`), who rendered them
(`ffbatch_rendered_by`) and the digest of the settings alone (`ffbatch_settings_alone`): work of
another version with the same settings is rendered again with a warning saying so, or, with
`--reuse-across-versions`, reused with a warning saying so.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from facefusion_batch import RENDER_REVISION, __version__
from facefusion_batch.config import RenderSettings
from facefusion_batch.farm.manifest import settings_digest
from facefusion_batch.video.decode.segments import TAG_SETTINGS, read_tags
from facefusion_batch.video.encode.written import forget_written, written_problem

log = logging.getLogger("ffbatch")

TAG_RENDERED_BY = "ffbatch_rendered_by"
TAG_SETTINGS_ALONE = "ffbatch_settings_alone"
RENDERED_BY = f"ffbatch {__version__}, render revision {RENDER_REVISION}"


def input_tag(settings: RenderSettings) -> str:
    """The input's file name as a container tag holds it: UTF-8 text (a name in another encoding,
    café in Latin-1, keeps a replacement character where its bytes are not UTF-8)."""
    return os.fsencode(Path(settings.input).name).decode("utf-8", "replace")


def code_tags(settings: RenderSettings) -> dict[str, str]:
    """The tags that say which code rendered an output, and its settings' digest without it."""
    return {TAG_RENDERED_BY: RENDERED_BY, TAG_SETTINGS_ALONE: settings_digest(settings, code=False)}


def made_here(tags: dict[str, str], settings: RenderSettings, what: Path | str) -> bool:
    """Whether tags read from `what` say it was made by this job: its digest; or, where only the
    code differs, with --reuse-across-versions (each case said in a warning)."""
    if tags.get(TAG_SETTINGS) == settings_digest(settings):
        return True
    alone = tags.get(TAG_SETTINGS_ALONE)
    if not alone or alone != settings_digest(settings, code=False):
        return False
    return across_versions(what, tags.get(TAG_RENDERED_BY) or "another ffbatch", settings)


def across_versions(what: Path | str, rendered_by: str, settings: RenderSettings) -> bool:
    """Work made with these settings by other code: reused only with --reuse-across-versions."""
    if settings.reuse_across_versions:
        log.warning(
            "%s was rendered by %s, this is %s; reusing it as it is (--reuse-across-versions)",
            what,
            rendered_by,
            RENDERED_BY,
        )
        return True
    log.warning(
        "%s was rendered by %s, this is %s; rendering it again (--reuse-across-versions would reuse it)",
        what,
        rendered_by,
        RENDERED_BY,
    )
    return False


def intact(path: Path) -> bool:
    """Whether `path` holds the bytes recorded when it was written; a warning naming it if not."""
    problem = written_problem(path)
    if problem:
        log.warning("%s: %s; rendering it again", path, problem)
    return not problem


def ours(tags: dict[str, str], settings: RenderSettings) -> bool:
    """Whether tags say this job made the file, by this or another ffbatch version."""
    alone = tags.get(TAG_SETTINGS_ALONE)
    return tags.get(TAG_SETTINGS) == settings_digest(settings) or (
        bool(alone) and alone == settings_digest(settings, code=False)
    )


def drop_stale(path: Path, settings: RenderSettings) -> None:
    """A file this job made that is not reused (other code, cut short, bytes changed) is removed,
    so that the job writes it again as it would a new one (never --overwrite's business: it is
    no other job's file)."""
    path = Path(path)
    if path.is_file() and ours(read_tags(path), settings):
        path.unlink(missing_ok=True)
        forget_written(path)
