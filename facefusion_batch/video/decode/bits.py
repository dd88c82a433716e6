"""A bit reader for the few header fields the frame index reads from packets (MPEG-4 Part 2
VOP headers, H.264 parameter sets and slice headers)."""

from __future__ import annotations


class BitReader:
    """The bits of `data` from byte `start` on, most significant first; EOFError past its end."""

    def __init__(self, data: bytes, start: int = 0) -> None:
        self._data = data
        self._pos = start * 8

    def read(self, count: int) -> int:
        """An unsigned number of `count` bits."""
        value = 0
        for _ in range(count):
            byte = self._pos >> 3
            if byte >= len(self._data):
                raise EOFError
            value = (value << 1) | ((self._data[byte] >> (7 - (self._pos & 7))) & 1)
            self._pos += 1
        return value

    def ue(self) -> int:
        """An unsigned Exp-Golomb code (H.264 ue(v))."""
        zeros = 0
        while not self.read(1):
            zeros += 1
            if zeros > 31:
                raise EOFError
        return (1 << zeros) - 1 + self.read(zeros)

    def se(self) -> int:
        """A signed Exp-Golomb code (H.264 se(v))."""
        k = self.ue()
        return (k + 1) // 2 if k % 2 else -(k // 2)
