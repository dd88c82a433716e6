"""A farm's frame ranges and a facility's plates: `--frame-range` (inclusive, in the input's own
numbers, as Deadline and OpenJD substitute them), image sequences rendered by range with every
frame at its final name, `####`/`@` padding, and the timecode of every join.

Every output is decoded: frame numbers (drawn into synthetic frames), pixels against a whole
render, timecode tracks and segment tags.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from media import frame_number, synthetic_frame
from test_cli import ffbatch_here

from facefusion_batch.errors import InputError
from facefusion_batch.models.assets import asset_path
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.decode.segments import TAG_FRAMES, parse_frame_range, read_tags
from facefusion_batch.video.encode.sequence import printf_pattern
from facefusion_batch.video.encode.writer import shift_timecode

SIZE = (160, 128)


def ffbatch(*args, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`): no test here is
    about the process itself; the plan's own command lines still run as shell children."""
    proc = ffbatch_here(*args, cwd=cwd)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("farm ranges")  # a space in every path


@pytest.fixture(scope="module")
def numbered_plate(work) -> Path:
    """Frames 1001-1012 of a plate as PNG files, each with its index (0-11) drawn in."""
    folder = work / "numbered"
    folder.mkdir()
    for i in range(12):
        cv2.imwrite(str(folder / f"plate.{1001 + i:04d}.png"), synthetic_frame(i, SIZE))
    return folder / "plate.%04d.png"


@pytest.fixture(scope="module")
def face_plate(work) -> Path:
    """Frames 1001-1008 of a pan over six real faces, as PNG files."""
    folder = work / "faces"
    folder.mkdir()
    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (320, 224), interpolation=cv2.INTER_AREA)
    for i in range(8):
        cv2.imwrite(str(folder / f"plate.{1001 + i:04d}.png"), np.roll(photo, 3 * i, axis=1))
    return folder / "plate.%04d.png"


def make_timecoded(path: Path, frames: int = 12, timecode: str = "01:00:00:00", rate: int = 25) -> Path:
    """A clip with a start timecode on its video stream (a tmcd track in .mov) and numbered frames."""
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=rate, options={"preset": "ultrafast", "crf": "0"})
        stream.width, stream.height = SIZE
        stream.pix_fmt = "yuv420p"
        stream.metadata["timecode"] = timecode
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, SIZE), format="bgr24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def decoded_numbers(path: Path) -> list[int]:
    with av.open(str(path)) as container:
        return [frame_number(f.to_ndarray(format="bgr24")) for f in container.decode(video=0)]


def timecode_tracks(path: Path) -> list[str]:
    """The start timecode of every tmcd (data) track, as FFmpeg's demuxer reads it."""
    with av.open(str(path)) as container:
        return [s.metadata.get("timecode", "") for s in container.streams if s.type == "data"]


# -- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1001-1100", (1001, 1100)),  # Deadline's <STARTFRAME>-<ENDFRAME>, filled in
        ("0001-0010", (1, 10)),  # Deadline's <STARTFRAME%4>-<ENDFRAME%4>
        ("1001", (1001, 1001)),  # a one-frame task
        (" 1001 - 1010 ", (1001, 1010)),  # OpenJD allows whitespace
        ("1-5,6-10", (1, 10)),  # an OpenJD chunk given as pieces, contiguous
        ("10-1:-1", (1, 10)),  # descending, step -1
        ("1-10:1", (1, 10)),
        ("5-6:3", (5, 5)),  # a step longer than the range: its first frame
        ("-5--1", (-5, -1)),
    ],
)
def test_parse_frame_range_takes_what_farms_substitute(text, expected):
    assert parse_frame_range(text) == expected


@pytest.mark.parametrize(
    "text, words",
    [
        ("1-10:2", "skips frames"),
        ("1-5,7-10", "6-6 are left out"),
        ("1-5,5-10", "listed twice"),
        ("<STARTFRAME>-<ENDFRAME>", "did not fill in"),
        ("{{Task.Param.Frame}}", "did not fill in"),
        ("1:10", "FIRST-LAST"),
        ("1-10:0", "non-zero"),
        ("10-1:1", "toward LAST"),
    ],
)
def test_parse_frame_range_refuses_what_a_task_cannot_render(text, words):
    with pytest.raises(InputError, match=words):
        parse_frame_range(text)


def test_hash_and_at_padding_read_as_printf():
    assert printf_pattern("shot/plate.####.exr") == "shot/plate.%04d.exr"
    assert printf_pattern(Path("plate.@@@.dpx")) == Path("plate.%03d.dpx")
    assert printf_pattern("plate.%04d.exr") == "plate.%04d.exr"
    assert printf_pattern("clip.mp4") == "clip.mp4"
    assert printf_pattern("a#b.##.png") == "a#b.##.png"  # two runs: not read as a sequence


def test_shift_timecode_non_drop_and_drop_frame():
    assert shift_timecode("01:00:00:00", 1500, 25) == "01:01:00:00"
    assert shift_timecode("23:59:59:24", 1, 25) == "00:00:00:00"
    ntsc = Fraction(30000, 1001)
    assert shift_timecode("00:00:59;29", 1, ntsc) == "00:01:00;02"  # frames 0 and 1 dropped
    assert shift_timecode("00:09:59;29", 1, ntsc) == "00:10:00;00"  # not every tenth minute
    assert shift_timecode("00:00:00;00", 17982, ntsc) == "00:10:00;00"
    assert shift_timecode("not a timecode", 1, 25) is None


# -- image sequences by range ----------------------------------------------------------------------


def test_a_sequence_range_writes_its_frames_at_their_final_names(work, face_plate, source):
    whole = work / "whole"
    whole.mkdir()
    ffbatch("render", face_plate, "-s", source, "-o", whole / "out.%04d.png", "-q")
    task = work / "task"
    task.mkdir()
    report = work / "task.json"
    ffbatch(
        "render", str(face_plate).replace("%04d", "####"), "-s", source, "--frame-range", "1004-1006",
        "-o", task / "out.####.png", "-q", "--report", report,
    )  # fmt: skip
    assert sorted(p.name for p in task.iterdir()) == ["out.1004.png", "out.1005.png", "out.1006.png"]
    for n in (1004, 1005, 1006):
        got = cv2.imread(str(task / f"out.{n}.png"), cv2.IMREAD_UNCHANGED)
        want = cv2.imread(str(whole / f"out.{n}.png"), cv2.IMREAD_UNCHANGED)
        plate = cv2.imread(str(face_plate).replace("%04d", str(n)))
        assert got.dtype == np.uint8 and got.shape == want.shape
        assert np.abs(got.astype(int) - plate.astype(int)).max() > 30  # faces really swapped
        # the range starts with the tracks' warm-up frames, so it renders what a whole render does
        assert np.array_equal(got, want)
    data = json.loads(report.read_text())
    assert data["status"] == "ok" and data["frames_in"] == 3 and data["frames_out"] == 3
    assert data["faces_swapped"] > 0


def test_sequence_ranges_joined_hold_every_plate_frame_once(work, numbered_plate, source):
    a, b = work / "seg a.mp4", work / "seg b.mp4"
    ffbatch("render", numbered_plate, "-s", source, "--frame-range", "1001-1005", "-o", a, "--crf", "0", "-q")
    ffbatch("render", numbered_plate, "-s", source, "--frame-range", "1006-1012", "-o", b, "--crf", "0", "-q")
    assert read_tags(a)[TAG_FRAMES] == "0:5" and read_tags(b)[TAG_FRAMES] == "5:12"
    joined = work / "joined.mp4"
    ffbatch("concat", b, a, "-o", joined, "-q")
    assert decoded_numbers(joined) == list(range(12))


def test_a_video_range_counts_frames_from_zero(work, source):
    clip = make_timecoded(work / "count.mp4")
    seg = work / "count seg.mp4"
    ffbatch("render", clip, "-s", source, "--frame-range", "3-7", "-o", seg, "--crf", "0", "-q")
    assert read_tags(seg)[TAG_FRAMES] == "3:8"
    assert decoded_numbers(seg) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--frame-range", "1010-1020"], "holds frames 1001-1012"),
        (["--frame-range", "990-1002"], "starts at frame 1001"),
        (["--frame-range", "1001-1010:2"], "skips frames"),
        (["--frame-range", "1001-1002", "--frames", "0:2"], "not both"),
    ],
)
def test_bad_ranges_are_exit_2_before_rendering(work, numbered_plate, source, args, words):
    proc = ffbatch("render", numbered_plate, "-s", source, *args, "-o", work / "never.mp4", check=False)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
    assert not (work / "never.mp4").exists()


# -- timecode through every join --------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".mov", ".mp4"])
def test_a_join_carries_its_first_segments_timecode(work, source, suffix):
    clip = make_timecoded(work / f"tc{suffix}")
    assert probe(clip).timecode == "01:00:00:00"
    first, second = work / f"tc a{suffix}", work / f"tc b{suffix}"
    ffbatch("render", clip, "-s", source, "--frame-range", "0-5", "-o", first, "-q")
    ffbatch("render", clip, "-s", source, "--frame-range", "6-11", "-o", second, "-q")
    assert probe(second).timecode == "01:00:00:06"  # a segment starts at its own first frame's
    joined = work / f"tc joined{suffix}"
    ffbatch("concat", first, second, "-o", joined, "--audio-from", clip, "-q")
    assert timecode_tracks(joined) == ["01:00:00:00"]
    assert decoded_numbers(joined) == list(range(12))
    partial = work / f"tc partial{suffix}"
    ffbatch("concat", second, "-o", partial, "--audio-from", clip, "-q")
    assert timecode_tracks(partial) == ["01:00:00:06"]


def test_a_chunked_render_keeps_the_timecode_track(work, source):
    clip = make_timecoded(work / "chunked.mov", timecode="10:00:00:00")
    out = work / "chunked out.mov"
    ffbatch("render", clip, "-s", source, "-o", out, "--chunk-frames", "5", "-q")
    assert timecode_tracks(out) == ["10:00:00:00"]
    assert decoded_numbers(out) == list(range(12))


# -- plan: sequences and reports ---------------------------------------------------------------------

PYTHON_FFBATCH = f"{sys.executable} -m facefusion_batch"


def run_plan_lines(text: str) -> None:
    for line in text.splitlines():
        if line and not line.startswith("#"):
            proc = subprocess.run(line, shell=True, capture_output=True, text=True)
            assert proc.returncode == 0, (line, proc.stderr)


@pytest.fixture(scope="module")
def whole_faces(work, face_plate, source) -> Path:
    """The face plate rendered whole, one process: what every farm split must give."""
    folder = work / "whole faces"
    folder.mkdir()
    ffbatch("render", face_plate, "-s", source, "-o", folder / "out.%04d.png", "-q")
    return folder / "out.%04d.png"


@pytest.mark.slow
def test_plan_over_a_sequence_writes_every_frame_at_its_name_without_a_join(
    work, face_plate, source, whole_faces
):
    out = work / "planned seq"
    out.mkdir()
    args = [face_plate, "-s", source, "--chunk-frames", "3", "-o", out / "comp.####.png", "--report",
            work / "seq.json", "--ffbatch", PYTHON_FFBATCH]  # fmt: skip
    data = json.loads(ffbatch("plan", *args, "--format", "json").stdout)
    assert data["tasks"] == {"chunks": 3, "joins": 0} and data["jobs"][0]["join"] is None
    argv = [c["argv"] for c in data["jobs"][0]["chunks"]]
    assert [a[a.index("--frame-range") + 1] for a in argv] == ["1001-1003", "1004-1006", "1007-1008"]
    assert all(a[a.index("-o") + 1] == str(out / "comp.%04d.png") for a in argv)
    slurm = ffbatch("plan", *args, "--format", "slurm").stdout
    assert "#SBATCH --array=0-2" in slurm and "no join" in slurm and "concat" not in slurm
    template = json.loads(ffbatch("plan", *args, "--format", "openjd").stdout)
    assert [step["name"] for step in template["steps"]] == ["Render"]  # no Join step to wait for
    run_plan_lines(ffbatch("plan", *args, "--format", "shell").stdout)
    assert sorted(p.name for p in out.iterdir()) == [f"comp.{n}.png" for n in range(1001, 1009)]
    for n in range(1001, 1009):
        got = cv2.imread(str(out / f"comp.{n}.png"), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(got, cv2.imread(str(whole_faces).replace("%04d", str(n)), cv2.IMREAD_UNCHANGED))
    reports = [
        json.loads((work / f"seq.{a:08d}-{b:08d}.json").read_text()) for a, b in ((0, 3), (3, 6), (6, 8))
    ]
    assert [r["status"] for r in reports] == ["ok"] * 3 and [r["frames_out"] for r in reports] == [3, 3, 2]


@pytest.mark.slow
def test_plan_gives_each_task_its_report_and_the_join_a_merged_one(work, source):
    clip = make_timecoded(work / "reported.mp4", frames=10)
    out, report = work / "reported out.mp4", work / "run.json"
    text = ffbatch("plan", clip, "-s", source, "--chunk-frames", "4", "-o", out, "--report", report,
                   "--ffbatch", PYTHON_FFBATCH).stdout  # fmt: skip
    renders = [line for line in text.splitlines() if " render " in line and not line.startswith("#")]
    assert len(renders) == 3 and all("--report" in line for line in renders)
    run_plan_lines("\n".join(renders))
    chunk_reports = [work / f"run.{a:08d}-{b:08d}.json" for a, b in ((0, 4), (4, 8), (8, 10))]
    assert [json.loads(p.read_text())["frames"] for p in chunk_reports] == [[0, 4], [4, 8], [8, 10]]
    kept = chunk_reports[1].read_text()
    chunk_reports[1].unlink()  # a task whose report went missing: the job is not reported ok
    join = next(line for line in text.splitlines() if " concat " in line and not line.startswith("#"))
    join = join.replace(" --clean", "")
    run_plan_lines(join)
    data = json.loads(report.read_text())
    assert data["status"] == "incomplete" and data["unfinished_tasks"] == [str(chunk_reports[1])]
    assert data["frames_out"] == 6 and data["join"]["packets"] == 10
    assert decoded_numbers(out) == list(range(10))
    chunk_reports[1].write_text(kept)
    run_plan_lines(join + " --overwrite")
    data = json.loads(report.read_text())
    assert data["status"] == "ok" and data["frames_in"] == data["frames_out"] == 10
    assert [t["status"] for t in data["tasks"]] == ["ok", "ok", "ok"]
    for key in ("faces_not_swapped", "swap_decisions"):  # by name, summed over the tasks
        summed: dict[str, int] = {}
        for task in data["tasks"]:
            for name, n in task[key].items():
                summed[name] = summed.get(name, 0) + n
        assert data[key] == summed, key
    assert sum(data["swap_decisions"].values()) == data["faces_swapped"]


def test_the_merged_report_sums_faces_by_reason_and_decision(tmp_path):
    """The join's report adds the tasks' faces not swapped (by reason) and swapped faces (by the
    swap's decision) as it adds their frames; a task without them adds nothing."""
    from facefusion_batch.farm.task_reports import merged_report

    tasks = [tmp_path / f"run.{i}.json" for i in range(3)]
    written = [
        {"faces_swapped": 5, "swap_decisions": {"full": 3, "own_eyes_lids": 2},
         "faces_not_swapped": {"track_not_swapping": 1}},
        {"faces_swapped": 4, "swap_decisions": {"full": 4},
         "faces_not_swapped": {"track_not_swapping": 2, "too_small": 1}},
    ]  # fmt: skip
    for task, record in zip(tasks, written, strict=False):
        task.write_text(json.dumps({"status": "ok", **record}))
    tasks[2].write_text(json.dumps({"status": "ok", "faces_swapped": 0}))
    data = merged_report(tmp_path / "out.mp4", None, tasks)
    assert data["faces_swapped"] == 9
    assert data["swap_decisions"] == {"full": 7, "own_eyes_lids": 2}
    assert data["faces_not_swapped"] == {"too_small": 1, "track_not_swapping": 3}
