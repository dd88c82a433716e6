"""Carry the audio of the input into the output, lazily and without re-encoding.

`AudioMuxer` opens its own container on the audio source and adds one output
stream per input audio stream. It then demuxes on demand: `mux_until(t)` copies
every audio packet up to `t` seconds, so the writer can interleave audio with
the video as the video is produced and nothing ever buffers the whole file.

Copying is packet for packet (`add_stream_from_template`), timestamps kept.
When the output container cannot hold the codec, or holds it in a way players
rarely understand, the stream is decoded and re-encoded to AAC instead (logged
as a warning): PCM in .mp4 is the common case (FFmpeg can write ISO "ipcm", but
almost no player reads it); that re-encode of lossless audio is a warning naming
the containers that keep it (.mov, .mkv). `codec="pcm"` / `"aac"` re-encode every
track to PCM (24-bit, or 16-bit for 16-bit sources) or to AAC at `bitrate`. MXF
holds PCM only, so audio is PCM there. Every track keeps its language tag.
Subtitle streams are copied where the container takes them; what cannot be kept
(data, attachments, a subtitle format the container refuses) is in `dropped`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error

from facefusion_batch.errors import InputError
from facefusion_batch.fsutil import ffmpeg_path
from facefusion_batch.video.decode.probe import check_readable_file, pick_video_stream
from facefusion_batch.video.decode.timing import ClockMap, has_clock, scan_clock, shift_ticks, timeline_shift

log = logging.getLogger("ffbatch")

# Audio codecs copied as they are into the ISO/QuickTime family; anything else is re-encoded
# to AAC there. Other containers (Matroska) copy whatever their muxer accepts.
_MP4_COPY = frozenset({"aac", "mp3", "ac3", "eac3", "alac", "opus", "flac"})
_MOV_COPY = frozenset({"aac", "mp3", "ac3", "eac3", "alac"})
_REENCODE_CODEC = "aac"
_LOSSLESS = ("pcm_", "flac", "alac", "truehd", "mlp", "wavpack", "tta")
_LOSSLESS_HOLDERS = ".mov or .mkv"
_STREAM_TAGS = ("language", "title")
_DEFAULT_LAYOUTS = {1: "mono", 2: "stereo", 3: "2.1", 4: "quad", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}


def _copyable(codec_name: str, output_format: str) -> bool | None:
    """True/False by policy, None to let the muxer decide."""
    if output_format in ("mp4", "ipod"):
        return codec_name in _MP4_COPY
    if output_format == "mov":
        return codec_name in _MOV_COPY or codec_name.startswith("pcm_")
    if output_format == "mxf":
        return codec_name in ("pcm_s16le", "pcm_s24le")
    return None


def is_lossless(codec_name: str) -> bool:
    return codec_name.startswith(_LOSSLESS)


@dataclass
class _Track:
    source: av.audio.stream.AudioStream
    target: av.audio.stream.AudioStream
    reencode: bool


class AudioMuxer:
    """Copies (or re-encodes) every audio stream of `source` into `output`.

    All methods must be called from the thread that muxes into `output`.
    """

    def __init__(
        self,
        source: str | Path,
        output: av.container.OutputContainer,
        *,
        mux: Callable[[av.Packet], None] | None = None,
        cancel: threading.Event | None = None,
        codec: str = "copy",
        bitrate: str | None = None,
        subtitles: bool = True,
        audio: bool = True,
        clock: ClockMap | None = None,
    ) -> None:
        """`mux` writes one packet to `output` (default `output.mux`); the writer passes its own
        so that write failures are reported the same way for audio and video. Setting `cancel`
        stops a running `mux_until`/`finish` early. `codec`: copy (where the container holds it),
        pcm or aac (every track re-encoded); `bitrate` the AAC rate ("256k"). `clock`: the source's
        clock map when the caller has it (`VideoInfo.clock`), else read here (MPEG-TS/PS only)."""
        self.source = Path(source)
        self.codec = codec
        self.bitrate = bitrate
        self.dropped: list[str] = []  # streams left out, in words
        self._targets: dict[int, str] = {}  # source index -> what it became
        self._wanted = audio
        check_readable_file(self.source, "audio source")
        try:
            self._in = av.open(ffmpeg_path(self.source), mode="r")
        except av.error.FFmpegError as exc:
            raise InputError(f"audio source {self.source} cannot be opened: {exc}") from None
        # the source's timeline moved so that nothing starts before 0, as the video is (timing.py)
        self.shift = timeline_shift(self._in)
        if clock is None:
            clock = self._read_clock() if has_clock(self._in) else ClockMap()
        self._rebaser = clock.rebaser()  # a clock that jumps: each part moved as the video's is
        self._tracks: dict[int, _Track] = {}
        self._subtitles: dict[int, av.stream.Stream] = {}
        self._subtitle_targets: dict[int, av.stream.Stream] = {}
        self._pending: av.Packet | None = None
        self._exhausted = False
        self.packets_copied = 0
        self.packets_encoded = 0
        try:
            if audio:
                self._add_tracks(output)
            if subtitles:
                self._add_subtitles(output)
            streams = [t.source for t in self._tracks.values()] + list(self._subtitles.values())
            self._packets = self._in.demux(*streams) if streams else iter(())
        except BaseException:
            self._in.close()
            raise
        self._write = mux if mux is not None else output.mux
        self._last_dts: dict[int, int] = {}  # per output stream: the last copied packet's dts
        self._cancel = cancel

    def _read_clock(self) -> ClockMap:
        try:
            with av.open(ffmpeg_path(self.source), mode="r") as container:
                video = pick_video_stream(container)
                return scan_clock(container, video.index if video is not None else -1)
        except (av.error.FFmpegError, OSError):
            return ClockMap()

    @property
    def tracks(self) -> int:
        return len(self._tracks)

    @property
    def carried(self) -> set[int]:
        """Indices (in the source) of every stream this muxer writes: audio and subtitles."""
        return set(self._tracks) | set(self._subtitles)

    def summary(self) -> str:
        """What happened to the audio, for the log and the report: "copied", "re-encoded to AAC",
        or per track ("#1 pcm_s24le copied, #2 aac re-encoded to pcm_s24le") when they differ."""
        if not self._targets:
            return "none"
        if not self.reencoded:
            return "copied"
        names = {t.target.codec_context.name for t in self._tracks.values() if t.reencode}
        if names == {_REENCODE_CODEC} and len(self.reencoded) == len(self._tracks):
            return "re-encoded to AAC"
        return ", ".join(f"#{i} {what}" for i, what in sorted(self._targets.items()))

    def stream_map(self) -> list[dict[str, object]]:
        """Every audio and subtitle stream of the source: its output stream and whether it was
        copied or re-encoded, or why it was dropped (for the report)."""
        entries: list[dict[str, object]] = []
        for stream in list(self._in.streams.audio) + list(self._in.streams.subtitles):
            codec = stream.codec_context.name if stream.codec_context else "unknown"
            entry: dict[str, object] = {"input": stream.index, "kind": stream.type, "codec": codec}
            track = self._tracks.get(stream.index)
            target = track.target if track is not None else self._subtitle_targets.get(stream.index)
            if target is not None:
                reencoded = track is not None and track.reencode
                action = f"re-encoded to {target.codec_context.name}" if reencoded else "copied"
                entry |= {"output": target.index, "action": action}
            elif stream.type == "audio" and not self._wanted:
                entry |= {"action": "dropped", "reason": "--no-audio"}
            else:
                why = "cannot be decoded" if stream.type == "audio" else "this container cannot hold it"
                entry |= {"action": "dropped", "reason": why}
            entries.append(entry)
        return entries

    @property
    def reencoded(self) -> list[int]:
        """Indices (in the source) of the audio streams that are re-encoded."""
        return [i for i, t in self._tracks.items() if t.reencode]

    def _add_tracks(self, output: av.container.OutputContainer) -> None:
        out_format = output.format.name
        for stream in self._in.streams.audio:
            # The codec's canonical name ("mp3"), not the decoder's ("mp3float").
            codec = stream.codec_context.codec if stream.codec_context else stream.codec
            codec_name = codec.canonical_name if codec is not None else "unknown"
            policy = _copyable(codec_name, out_format) if self.codec == "copy" else False
            target = None
            if policy is not False:
                try:
                    target = output.add_stream_from_template(stream)
                except (ValueError, av.error.FFmpegError):
                    target = None
            if target is not None:
                self._tracks[stream.index] = _Track(stream, target, reencode=False)
                self._targets[stream.index] = f"{codec_name} copied"
                _copy_tags(stream, target)
                continue
            if stream.codec_context is None:
                log.warning(
                    "%s: audio stream #%d (%s) can neither be copied into .%s nor decoded; it is left out",
                    self.source,
                    stream.index,
                    codec_name,
                    out_format,
                )
                continue
            target = self._add_reencode_stream(output, stream)
            _copy_tags(stream, target)
            new = target.codec_context.name
            self._targets[stream.index] = f"{codec_name} re-encoded to {new}"
            if self.codec == "copy":
                keeps = ""
                if is_lossless(codec_name) and not is_lossless(new):
                    keeps = f" (lossless audio made lossy: {_LOSSLESS_HOLDERS} keeps it as it is)"
                log.warning(
                    "%s: audio stream #%d (%s) cannot be stored as is in this %s output; "
                    "re-encoding it to %s%s",
                    self.source,
                    stream.index,
                    codec_name,
                    out_format,
                    "AAC" if new == _REENCODE_CODEC else new,
                    keeps,
                )
            self._tracks[stream.index] = _Track(stream, target, reencode=True)

    def _add_subtitles(self, output: av.container.OutputContainer) -> None:
        """Copy subtitle streams where the muxer takes them; the rest go to `dropped`."""
        for stream in self._in.streams.subtitles:
            name = stream.codec_context.name if stream.codec_context else "unknown"
            try:
                target = output.add_stream_from_template(stream)
            except (ValueError, av.error.FFmpegError):
                self.dropped.append(
                    f"subtitle stream #{stream.index} ({name}): a {output.format.name} file cannot hold it"
                )
                continue
            _copy_tags(stream, target)
            self._subtitles[stream.index] = stream
            self._subtitle_targets[stream.index] = target

    def _reencode_codec(self, output_format: str, ctx) -> str:
        if self.codec == "pcm" or output_format == "mxf":
            bits = getattr(ctx.format, "bits", 0) if ctx.format is not None else 0
            return "pcm_s16le" if bits and bits <= 16 else "pcm_s24le"
        if output_format == "webm":
            return "libopus"  # WebM holds Opus or Vorbis only
        return _REENCODE_CODEC

    def _add_reencode_stream(self, output: av.container.OutputContainer, stream):
        ctx = stream.codec_context
        codec = self._reencode_codec(output.format.name, ctx)
        rate = ctx.sample_rate or 48000
        channels = int(getattr(ctx, "channels", 0) or 2)
        layout = ctx.layout.name if ctx.layout is not None else ""
        if not layout or "channels" in layout:
            # Unspecified channel order ("2 channels"): AAC needs a real layout; use the default
            # one for that many channels (mono, stereo, 5.1, ...).
            layout = _DEFAULT_LAYOUTS.get(channels, f"{channels}c")
        try:
            target = output.add_stream(codec, rate=rate, layout=layout)
            if codec in (_REENCODE_CODEC, "libopus"):
                default = min(128_000 * max(1, channels), 512_000)
                target.codec_context.bit_rate = _bits_per_second(self.bitrate) if self.bitrate else default
            target.codec_context.open()
        except (ValueError, av.error.FFmpegError) as exc:
            raise InputError(
                f"audio stream #{stream.index} of {self.source} ({ctx.name}, {rate} Hz) cannot be "
                f"re-encoded to {codec} for this output ({exc}); write a .mkv instead"
            ) from None
        return target

    # -- muxing --------------------------------------------------------------------------------

    def _next(self) -> av.Packet | None:
        if self._pending is not None:
            packet, self._pending = self._pending, None
            return packet
        if self._exhausted:
            return None
        try:
            packet = next(self._packets)
            self._rebaser.rebase(packet)
            return packet
        except StopIteration:
            self._exhausted = True
            return None
        except (av.error.FFmpegError, OSError) as exc:
            raise InputError(
                f"the audio of {self.source} cannot be read (truncated or corrupt?): {exc}"
            ) from exc

    def mux_until(self, seconds: float | None) -> None:
        """Mux every audio packet whose timestamp is <= `seconds` (all of them for None)."""
        while self._cancel is None or not self._cancel.is_set():
            packet = self._next()
            if packet is None:
                return
            if seconds is not None:
                ts = packet.pts if packet.pts is not None else packet.dts
                if (
                    ts is not None
                    and packet.time_base is not None
                    and float(ts * packet.time_base + self.shift) > seconds
                ):
                    self._pending = packet
                    return
            self._mux(packet)

    def _mux(self, packet: av.Packet) -> None:
        ticks = shift_ticks(self.shift, Fraction(packet.time_base)) if packet.time_base else 0
        if ticks:
            if packet.pts is not None:
                packet.pts += ticks
            if packet.dts is not None:
                packet.dts += ticks
        track = self._tracks.get(packet.stream.index)
        if track is None:
            subtitle = self._subtitle_targets.get(packet.stream.index)
            if subtitle is not None and packet.size:
                packet.stream = subtitle
                self._write(packet)
            return
        if packet.size == 0:  # demuxer's end-of-stream flush packet; keyframes may lack a DTS, keep them
            return
        if track.reencode:
            self._encode(track, self._decode(track, packet))
            return
        packet.stream = track.target
        last, dts = self._last_dts.get(packet.stream.index), packet.dts
        try:
            self._write(packet)
        except Exception:
            if dts is not None and last is not None and dts <= last:
                # a damaged stream (a repeated or misplaced chunk) that the muxer refuses with a
                # bare "Invalid argument", which would blame the output
                raise InputError(
                    f"audio stream #{track.source.index} of {self.source} is damaged: its timestamps "
                    f"go back or repeat ({last} then {dts}); --no-audio renders the video alone"
                ) from None
            raise
        if dts is not None:
            self._last_dts[packet.stream.index] = dts
        self.packets_copied += 1

    def _decode(self, track: _Track, packet: av.Packet | None) -> list:
        try:
            return track.source.decode(packet)
        except av.error.EOFError:
            return []
        except (av.error.FFmpegError, OSError) as exc:
            raise InputError(
                f"audio stream #{track.source.index} of {self.source} is corrupt and cannot be "
                f"re-encoded: {exc}"
            ) from exc

    def _encode(self, track: _Track, frames) -> None:
        for frame in frames:
            for out_packet in track.target.encode(frame):
                self._write(out_packet)
                self.packets_encoded += 1

    def finish(self) -> None:
        """Mux the rest of the audio and flush the re-encoders."""
        self.mux_until(None)
        for track in self._tracks.values():
            if track.reencode:
                self._encode(track, self._decode(track, None))
                self._encode(track, [None])

    def close(self) -> None:
        try:
            self._in.close()
        except Exception:  # noqa: BLE001 - closing a reader cannot lose data
            pass


def _copy_tags(source, target) -> None:
    for key in _STREAM_TAGS:
        value = source.metadata.get(key)
        if value:
            target.metadata[key] = value


def _bits_per_second(rate: str) -> int:
    """ "256k" -> 256000, "1.5M" -> 1500000."""
    text = str(rate).strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)
