"""ffbatch: an offline, batched face-swap renderer for video files."""

__version__ = "0.1.0"
