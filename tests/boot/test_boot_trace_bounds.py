"""`tpmtop boot --trace` and `tpmtop kernel --trace` on files that are no trace (issue 50): a
1 GB sparse file, random bytes, /dev/zero, a 100 MB line of zeros (a FIFO is still read as it
is written: tests/boot/test_boot_ftrace.py). Each is one short line and
exit status 2 in bounded memory; random bytes are not called an ftrace trace."""

from __future__ import annotations

import os

import pytest

from tests.helpers.bounded import assert_refused, run_measured
from tests.helpers.paths import TRACES


def _sparse(p, size):
    with open(p, "wb") as f:
        f.truncate(size)


@pytest.mark.parametrize("make, says", [
    (lambda p: _sparse(p, 1 << 30), "more than the 512 MiB"),
    (lambda p: _sparse(p, 100 << 20), "a line longer than 64 KiB"),
    # random bytes from the first byte on: 0xff is never UTF-8, so the first line is binary in
    # every run (with os.urandom alone, about one run in 200 drew a first line that was text,
    # and that file is rightly called neither ftrace nor bpftrace)
    (lambda p: p.write_bytes(b"\xff" + os.urandom(1 << 20) + b"\0"), "not a text trace"),
    (lambda p: p.symlink_to("/dev/zero"), "is a character device"),
], ids=["sparse-1g", "one-100mb-line", "random", "dev-zero"])
def test_boot_trace_refuses_what_is_no_trace(tmp_path, make, says):
    path = tmp_path / "trace.txt"
    make(path)
    assert_refused(run_measured("boot", "--trace", str(path)), says, str(path))


def test_kernel_trace_does_not_call_random_bytes_an_ftrace_trace(tmp_path):
    """Random bytes hold '|' and '}' somewhere; before, that was an ftrace function_graph trace."""
    path = tmp_path / "random.bin"
    # lines that hold a '|' and a '}' (what the old sniffer took for ftrace), between random
    # bytes; each opens with "@ " (what a sniffer that took any "@" line for a bpftrace map,
    # as this one did until a CI run drew one, calls bpftrace)
    path.write_bytes(b"".join(b"@ " + os.urandom(200).replace(b"\n", b" ") + b" | x } \n" for _ in range(2000)))
    m = run_measured("kernel", "--trace", str(path))
    assert_refused(m, "holds no tpmtop kprobe events")
    assert "ftrace" not in m.err


def test_kernel_trace_still_names_a_real_ftrace_trace():
    """The sniffer still fires where it must: a real function_graph trace given to kernel --trace."""
    path = TRACES / "ftrace-graph-extend-hmac-slb9670.txt"
    m = run_measured("kernel", "--trace", str(path))
    assert m.rc == 2
    assert "an ftrace function_graph trace, which tpmtop boot --trace" in m.err
