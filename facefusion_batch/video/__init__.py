"""Video input/output: probing, threaded decoding, threaded atomic encoding, audio carry-over.

The `probe()` function is deliberately not re-exported here: a package attribute named
`probe` would shadow the `facefusion_batch.video.decode.probe` module. Import it from there.
"""

from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.decode.reader import Frame, FrameReader
from facefusion_batch.video.encode.encoder_policy import EncoderSettings, quality_to_crf, validate_encoder
from facefusion_batch.video.encode.writer import VideoWriter

__all__ = [
    "EncoderSettings",
    "Frame",
    "FrameReader",
    "VideoInfo",
    "VideoWriter",
    "quality_to_crf",
    "validate_encoder",
]
