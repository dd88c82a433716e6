"""Recipe "facefusion_download": a FaceFusion model from its publisher, checked by its CRC32."""

from __future__ import annotations

import logging
import zlib
from typing import Any

from .facefusion import MODELS, read_crc32
from .sources import DeriveContext, SourceError, copy_stream, open_url

log = logging.getLogger(__name__)


def derive_download(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "facefusion_download": fetch ``<name>.onnx`` and check it against its ``.hash``.

    `ctx.base_path` is the verified ``.hash`` file (the entry this one is derived from).
    """
    model = MODELS[ctx.spec.name]
    assert ctx.base_path is not None
    expected = read_crc32(ctx.base_path)
    crc = 0

    def update(chunk: bytes) -> None:
        nonlocal crc
        crc = zlib.crc32(chunk, crc)

    log.info("%s: downloading %s", model.name, model.url)
    with open_url(model.url) as src, open(ctx.out_path, "wb") as dst:
        size = copy_stream(src, dst, update)
    actual = f"{crc:08x}"
    if actual != expected:
        raise SourceError(f"CRC32 {actual} does not match the publisher's {expected} ({model.hash_url})")
    return {"url": model.url, "crc32": actual, "crc32_source": model.hash_url, "bytes": size}
