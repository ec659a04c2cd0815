"""Atomic writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tpmtop.atomic import open_atomic, write_atomic


def test_write_atomic_creates_and_replaces(tmp_path):
    p = tmp_path / "f.txt"
    write_atomic(p, "one")
    assert p.read_text() == "one"
    write_atomic(p, b"two\xff")
    assert p.read_bytes() == b"two\xff"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_new_file_gets_umask_mode_and_existing_mode_is_kept(tmp_path):
    p = tmp_path / "f.prom"
    old = os.umask(0o027)
    try:
        write_atomic(p, "x")
    finally:
        os.umask(old)
    assert p.stat().st_mode & 0o777 == 0o640  # not mkstemp's 0600: node_exporter must read it
    os.chmod(p, 0o604)
    write_atomic(p, "y")
    assert p.stat().st_mode & 0o777 == 0o604


def test_exception_leaves_the_old_file_and_no_temp(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("old")
    with pytest.raises(RuntimeError), open_atomic(p) as f:
        f.write("new, half")
        raise RuntimeError("writer failed")
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.json"]


def test_symlink_target_is_replaced(tmp_path):
    real = tmp_path / "real.prom"
    real.write_text("old")
    link = tmp_path / "link.prom"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_background_sync_stream(tmp_path):
    p = tmp_path / "big.bin"
    block = os.urandom(1 << 20)
    with open_atomic(p, text=False, background_sync=True) as f:
        for _ in range(70):  # crosses the 32 MB background-sync threshold twice
            f.write(block)
    assert p.stat().st_size == 70 << 20
    with open(p, "rb") as f:
        assert f.read(1 << 20) == block


WRITER = textwrap.dedent("""
    import sys
    from tpmtop.atomic import open_atomic
    path = sys.argv[1]
    size = 16 * 1024 * 1024
    i = 0
    while True:
        ch = b"AB"[i % 2:i % 2 + 1]
        with open_atomic(path, text=False) as f:
            for k in range(size // 65536):
                f.write(ch * 65536)
                if i == 0 and k == 8:
                    sys.stdout.write("writing\\n"); sys.stdout.flush()
        i += 1
""")


def test_sigkill_mid_write_never_leaves_half_a_file(tmp_path):
    """Kill the writer at random moments, over and over: the file is always one whole version."""
    target = tmp_path / "capture.json"
    target.write_bytes(b"O" * 1000)  # the original
    rng = random.Random(7)
    seen_temp = 0
    for round_ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"writing\n"  # it is inside a write now
        time.sleep(rng.uniform(0.0, 0.4))
        seen_temp += any(n.endswith(".tmp") for n in os.listdir(tmp_path))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = target.read_bytes()
        kinds = set(data)
        assert len(kinds) == 1, f"round {round_}: a mixed file of {len(data)} bytes"
        if data[:1] == b"O":
            assert len(data) == 1000
        else:
            assert len(data) == 16 * 1024 * 1024, f"round {round_}: a half-written file"
        # leftovers are dot-files ending .tmp (never read by node_exporter's *.prom glob)
        for n in os.listdir(tmp_path):
            if n != "capture.json":
                assert n.startswith(".capture.json.") and n.endswith(".tmp")
                os.unlink(tmp_path / n)
    assert seen_temp, "the kills never hit a write in progress: the test proved nothing"


# -- non-regular targets: never renamed over ----------------------------------------------------

def _private_null(tmp_path):
    """A symlink to a character device with /dev/null's numbers. As root the device node is a
    private mknod copy in tmp_path, so even a regression could replace only that copy, never
    the system's /dev/null; a non-root user cannot replace /dev/null at all."""
    import stat

    rdev = os.stat("/dev/null").st_rdev
    node = "/dev/null"
    if os.geteuid() == 0:
        node = tmp_path / "null.node"
        os.mknod(node, stat.S_IFCHR | 0o666, rdev)
    link = tmp_path / "out.prom"
    link.symlink_to(node)
    return link, node, rdev


def _is_char_device(path, rdev) -> bool:
    import stat

    st = os.stat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev


def test_open_atomic_refuses_a_character_device(tmp_path):
    link, node, rdev = _private_null(tmp_path)
    with pytest.raises(OSError, match="not a regular file"):
        write_atomic(link, "x")
    assert _is_char_device(node, rdev) and _is_char_device("/dev/null", rdev)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_output_writes_through_a_character_device(tmp_path):
    from tpmtop.output import Output

    link, node, rdev = _private_null(tmp_path)
    out = Output(link).check()
    assert out.kind == "stream"
    out.write("tpmtop_x 1\n# EOF\n")
    assert _is_char_device(node, rdev) and link.is_symlink()


def test_fifo_is_written_through_with_a_reader_and_stays_a_fifo(tmp_path):
    import stat
    import threading

    from tpmtop.output import Output

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_atomic(fifo, "x")  # open_atomic never renames over it
    got = []

    def reader():
        with open(fifo, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    data = os.urandom(3 << 20)  # more than a pipe buffer: the writer must wait for the reader
    Output(fifo).check().write(data)
    t.join(60)
    assert got == [data]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
