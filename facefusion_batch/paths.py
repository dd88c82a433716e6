"""Where ffbatch keeps its cache: models, fetched assets, engines."""

from __future__ import annotations

import os
from pathlib import Path


def ffbatch_home() -> Path:
    """`$FFBATCH_HOME`, else `~/.cache/ffbatch`."""
    env = os.environ.get("FFBATCH_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ffbatch"


def models_dir() -> Path:
    return ffbatch_home() / "models"


def assets_dir() -> Path:
    return ffbatch_home() / "assets"
