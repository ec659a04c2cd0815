"""`tpmtop health --root` on a tree whose files are hostile (issue 50): each is refused with one
short line and exit status 2, in bounded memory, whatever the file is — a link to /dev/zero, a
FIFO, a 2 GB sparse file, random bytes. The files are made in a copy of a saved guest's tree."""

from __future__ import annotations

import os

import pytest

from tests.helpers.bounded import assert_refused, copy_tree, run_measured
from tests.helpers.paths import FIXTURES

TREE = FIXTURES / "health" / "debian-6.12-default"
DMESG = "run/tpmtop/dmesg.txt"
IMA_LIST = "sys/kernel/security/ima/ascii_runtime_measurements"


def _zero(p):
    p.unlink(missing_ok=True)
    p.symlink_to("/dev/zero")


def _fifo(p):
    p.unlink(missing_ok=True)
    os.mkfifo(p)


def _sparse_2g(p):
    with open(p, "wb") as f:
        f.truncate(2 << 30)


def _random(p):
    p.write_bytes(os.urandom(64 << 10) + b"\0")  # a NUL for certain, not only with high odds


CASES = [
    (DMESG, _zero, "is a character device"),
    ("proc/cmdline", _fifo, "is a FIFO"),
    (DMESG, _sparse_2g, "more than the 64 MiB"),
    (DMESG, _random, "binary data, not text"),
    (IMA_LIST, _zero, "is a character device"),
    ("proc/sys/kernel/osrelease", _random, "binary data, not text"),
    ("proc/cmdline", lambda p: p.write_bytes(b"a" * (2 << 20)), "more than the 1 MiB"),
]


@pytest.mark.parametrize("where, make, says", CASES,
                         ids=["dmesg-dev-zero", "cmdline-fifo", "dmesg-sparse-2g", "dmesg-random",
                              "ima-list-dev-zero", "osrelease-random", "cmdline-2mb"])
def test_a_hostile_file_under_root_is_one_line_and_exit_2(tmp_path, where, make, says):
    root = copy_tree(TREE, tmp_path / "root")
    target = root / where
    target.parent.mkdir(parents=True, exist_ok=True)
    make(target)
    m = run_measured("health", "--root", str(root))
    assert_refused(m, says, where.rsplit("/", 1)[-1])


def test_a_one_megabyte_command_line_token_is_read_and_judged(tmp_path):
    """A 1 MB token (under the 1 MiB bound) is parsed, not refused: the report is made and says
    nothing of the token beyond a short excerpt (every line short)."""
    root = copy_tree(TREE, tmp_path / "root")
    (root / "proc/cmdline").write_text("ima_policy=" + "a" * 1_000_000 + " quiet\n")
    m = run_measured("health", "--root", str(root))
    assert m.rc in (0, 1), m.err[-500:]
    assert m.peak_mb < 200
    assert max(len(ln) for ln in (m.out + m.err).splitlines()) < 1000


def test_the_untouched_tree_is_still_read(tmp_path):
    """The same copy without a hostile file: a report, no refusal (the bounds do not fire)."""
    root = copy_tree(TREE, tmp_path / "root")
    m = run_measured("health", "--root", str(root))
    assert m.rc in (0, 1), m.err[-500:]
    assert "refused" not in m.err and "binary data, not text" not in m.err
    assert "dmesg" in m.out


def test_a_list_longer_than_any_bound_is_sampled_from_its_start(tmp_path):
    """IMA's list of 70 MB (over the 64 MiB a whole file may be): its first 8 MiB are read for
    the files measured most, not the whole list, and not a refusal (a busy server's list grows
    all day)."""
    root = copy_tree(TREE, tmp_path / "root")
    line = (b"10 2bc3a403a5a64a5cdc9f12bff2a7b21ba6414cdf ima-sig sha256:941b57d5a9f2c197d3134170f304ce85b0348fd0"
            b"aa029dcdce451e78089952fa /usr/bin/busy \n")
    with open(root / IMA_LIST, "wb") as f:
        for _ in range(70):
            f.write(line * ((1 << 20) // len(line) + 1))
    m = run_measured("health", "--root", str(root), "--ima-sample", "0")
    assert m.rc in (0, 1), m.err[-500:]
    assert "measured" in m.out and "/usr/bin/busy" in m.out, m.out
    assert m.peak_mb < 200
