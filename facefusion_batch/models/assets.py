"""Third-party test and example images, fetched and verified through the model store.

They live under `paths.assets_dir()` and are described in
`facefusion_batch.models.catalog` (entries of kind "asset"): `t1.jpg`,
`Tom_Hanks_54745.png`, `astronaut.png`.
"""

from __future__ import annotations

from pathlib import Path

from . import store
from .catalog import CATALOG


def asset_names() -> list[str]:
    return [spec.name for spec in CATALOG.values() if spec.kind == "asset"]


def asset_path(name: str, *, fetch: bool = True) -> Path:
    """A verified local copy of asset `name`, fetched on first use (unless `fetch` is False)."""
    return store.model_path(name, fetch=fetch)


def fetch_assets(names: list[str] | None = None) -> dict[str, Path]:
    """Fetch several assets at once (all of them by default), each wheel downloaded once."""
    return store.fetch_many(asset_names() if names is None else names)
