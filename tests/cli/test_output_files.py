"""Output files (-o, bench --json/--openmetrics, profile -o), as a user meets them: devices
and FIFOs are written through and never replaced, '-' and pipes work, the input is not
overwritten by accident, and an unwritable destination is refused before any work (exit 2,
one line) or, if writing fails at the end, the data is kept in a fallback file (exit 1)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from tests.helpers.paths import TESTS
from tests.helpers.processes import run_tpmtop
from tpmtop.capture import load_capture

SAMPLE = TESTS / "captures" / "sample-1.0.json"
BENCH = ["bench", "--sim", "-n", "3", "--warmup", "0", "--engine", "native", "--modes", "none", "-q"]


def _one_line(proc, status: int) -> str:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _assert_char_device(path, rdev: int) -> None:
    st = os.stat(path)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev, f"{path} is no longer the character device"


def char_device(tmp_path: Path, name: str, system: str) -> tuple[Path, Path, int]:
    """(what to pass as -o, the device node to check afterwards, its device number) for a
    character device like ``system`` (/dev/null, /dev/full), reached through a symlink.

    As root the node is a private copy made with mknod in tmp_path: even a regression that
    renames over the target could then only replace that copy, never the system's /dev/null
    (a root process can rename over /dev/null). A non-root user cannot replace anything in
    /dev, so there the symlink points at the system's node itself."""
    rdev = os.stat(system).st_rdev
    node = Path(system)
    if os.geteuid() == 0:
        node = tmp_path / f"{name}.node"
        os.mknod(node, stat.S_IFCHR | 0o666, rdev)
    link = tmp_path / name
    link.symlink_to(node)
    return link, node, rdev


# -- devices, FIFOs, stdout --------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["openmetrics", "chrome-trace"])
def test_symlink_to_dev_null_is_written_through_not_replaced(tmp_path, fmt):
    link, node, rdev = char_device(tmp_path, "out", "/dev/null")
    before = sorted(os.listdir(tmp_path))
    proc = run_tpmtop("export", str(SAMPLE), "-f", fmt, "-o", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(node)
    _assert_char_device(node, rdev)
    assert sorted(os.listdir(tmp_path)) == before  # no temporary file left either
    _assert_char_device("/dev/null", rdev)


def test_bench_json_and_openmetrics_to_a_device(tmp_path):
    link, node, rdev = char_device(tmp_path, "null", "/dev/null")
    link2, node2, _ = char_device(tmp_path, "null2", "/dev/null")
    proc = run_tpmtop(*BENCH, "--json", str(link), "--openmetrics", str(link2), timeout=120)
    assert proc.returncode == 0, proc.stderr
    _assert_char_device(node, rdev)
    _assert_char_device(node2, rdev)
    assert link.is_symlink() and link2.is_symlink()


def _fifo_reader(path: Path, got: list) -> threading.Thread:
    def read():
        with open(path, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("fmt", ["openmetrics", "chrome-trace"])
def test_fifo_gets_the_data_and_stays_a_fifo(tmp_path, fmt):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list = []
    reader = _fifo_reader(fifo, got)
    proc = run_tpmtop("export", str(SAMPLE), "-f", fmt, "-o", str(fifo))
    reader.join(60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    text = got[0].decode()
    if fmt == "chrome-trace":
        assert len(json.loads(text)["traceEvents"]) > 60
    else:
        assert text.rstrip().endswith("# EOF")


@pytest.mark.parametrize("fmt", ["openmetrics", "chrome-trace"])
@pytest.mark.parametrize("dash", ["-", "/dev/stdout"])
def test_stdout_and_pipes(fmt, dash):
    proc = run_tpmtop("export", str(SAMPLE), "-f", fmt, "-o", dash)  # stdout is a pipe here
    assert proc.returncode == 0, proc.stderr
    if fmt == "chrome-trace":
        assert json.loads(proc.stdout)["traceEvents"]
    else:
        assert "tpmtop_operation_seconds_count" in proc.stdout and proc.stdout.rstrip().endswith("# EOF")


@pytest.mark.parametrize("dest", ["-", "/dev/stdout"])
def test_bench_json_to_stdout_keeps_stdout_parseable(dest):
    proc = run_tpmtop(*BENCH, "--json", dest, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)  # the report table went to stderr
    assert cap["schema"] == "tpmtop.capture/1" and cap["runs"][0]["ops"] == 3
    assert "op p50" in proc.stderr


# -- the input itself ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["same", "symlink"])
def test_export_onto_its_input_is_refused_without_force(tmp_path, how):
    cap = tmp_path / "cap.json"
    cap.write_bytes(SAMPLE.read_bytes())
    out = cap
    if how == "symlink":
        out = tmp_path / "link.json"
        out.symlink_to(cap)
    proc = run_tpmtop("export", str(cap), "-f", "openmetrics", "-o", str(out))
    line = _one_line(proc, 2)
    assert "is the input" in line and "--force" in line
    assert cap.read_bytes() == SAMPLE.read_bytes()
    forced = run_tpmtop("export", str(cap), "-f", "openmetrics", "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert cap.read_text().rstrip().endswith("# EOF")


def test_profile_from_capture_onto_its_input_is_refused(tmp_path):
    cap = tmp_path / "cap.json"
    cap.write_bytes(SAMPLE.read_bytes())
    proc = run_tpmtop("profile", "from-capture", str(cap), "-o", str(cap))
    assert "is the input" in _one_line(proc, 2)
    assert cap.read_bytes() == SAMPLE.read_bytes()


# -- unwritable destinations: refused before the work ------------------------------------------

def _unwritable(tmp_path: Path) -> dict[str, tuple[str, str]]:
    (tmp_path / "adir").mkdir()
    return {
        "missing parent": (str(tmp_path / "no" / "such" / "out.json"), "no such directory"),
        "empty name": ("", "empty file name"),
        "a directory": (str(tmp_path / "adir"), "is a directory"),
        "newdir/": (str(tmp_path / "newdir") + "/", "names a directory"),
        "existing dir/": (str(tmp_path / "adir") + "/", "names a directory"),
    }


CASES = ["missing parent", "empty name", "a directory", "newdir/", "existing dir/"]


@pytest.mark.parametrize("case", CASES)
def test_export_to_an_unwritable_destination(tmp_path, case):
    out, expect = _unwritable(tmp_path)[case]
    before = sorted(os.listdir(tmp_path))
    proc = run_tpmtop("export", str(SAMPLE), "-f", "openmetrics", "-o", out)
    assert expect in _one_line(proc, 2)
    assert sorted(os.listdir(tmp_path)) == before  # -o newdir/ creates neither a dir nor a file
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("opt", ["--json", "--openmetrics"])
def test_bench_checks_its_outputs_before_opening_the_tpm(tmp_path, case, opt):
    out, expect = _unwritable(tmp_path)[case]
    proc = run_tpmtop(*BENCH, opt, out, timeout=120)
    assert expect in _one_line(proc, 2)
    assert proc.stdout == ""  # no "# IBM SWTPM …" header: the TPM was never opened
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize("case", ["missing parent", "newdir/", "a directory"])
def test_profile_checks_its_output_first(tmp_path, case):
    out, expect = _unwritable(tmp_path)[case]
    proc = run_tpmtop("profile", "from-capture", str(SAMPLE), "-o", out)
    assert expect in _one_line(proc, 2)
    assert proc.stdout == ""


def test_a_late_write_failure_keeps_the_capture(tmp_path):
    """/dev/full accepts the open and fails every write (ENOSPC): the measurements are kept
    in a fallback file named on stderr, and the exit status says the system failed (1)."""
    link, node, rdev = char_device(tmp_path, "full.json", "/dev/full")
    keep = tmp_path / "tmp"
    keep.mkdir()
    proc = run_tpmtop(*BENCH, "--events", "--json", str(link), env={"TMPDIR": str(keep)}, timeout=120)
    line = _one_line(proc, 1)
    assert "No space left on device" in line and "kept in" in line
    fallback = line.rsplit("kept in ", 1)[1].strip()
    assert Path(fallback).parent == keep
    cap = load_capture(fallback)
    assert cap["runs"][0]["ops"] == 3 and cap["events"]
    _assert_char_device(node, rdev)


def test_export_write_failure_is_one_line(tmp_path):
    link, node, rdev = char_device(tmp_path, "full.prom", "/dev/full")
    proc = run_tpmtop("export", str(SAMPLE), "-f", "openmetrics", "-o", str(link))
    assert "No space left on device" in _one_line(proc, 1)
    _assert_char_device(node, rdev)


def test_dev_stdout_on_an_appended_file_appends(tmp_path):
    """`tpmtop export … -o /dev/stdout >> log`: the shell's descriptor is written through
    (its O_APPEND holds), not the file renamed over or rewritten from its start."""
    import subprocess

    from tests.helpers.processes import REPO, TPMTOP

    log = tmp_path / "log.prom"
    log.write_text("# earlier run\n")
    with open(log, "ab") as f:
        proc = subprocess.run(TPMTOP + ["export", str(SAMPLE), "-f", "openmetrics", "-o", "/dev/stdout"],
                              stdout=f, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert text.startswith("# earlier run\n# TYPE tpmtop_operation_seconds histogram")
    assert text.rstrip().endswith("# EOF")
