"""tpmtop.boundedread: the one rule for reading a file tpmtop did not write."""

from __future__ import annotations

import os

import pytest

from tpmtop.boundedread import FileKindError, FileTooLarge, excerpt, read_bounded
from tpmtop.errors import EXIT_USAGE


def test_a_fifo_with_no_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "cmdline"
    os.mkfifo(fifo)
    with pytest.raises(FileKindError) as e:
        read_bounded(fifo, 1024, what="kernel command line")
    assert "is a FIFO" in str(e.value) and e.value.exit_status == EXIT_USAGE


def test_a_character_device_is_refused():
    with pytest.raises(FileKindError, match="character device"):
        read_bounded("/dev/zero", 1024)


def test_a_sparse_file_past_the_limit_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "dmesg.txt"
    with open(big, "wb") as f:
        f.truncate(2 * 1024**3)
    with pytest.raises(FileTooLarge, match="more than the 1 MiB"):
        read_bounded(big, 1024 * 1024, what="dmesg")


def test_a_file_within_the_limit_is_read_whole_and_one_byte_more_is_refused(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"a" * 4096)
    assert read_bounded(f, 4096) == b"a" * 4096
    with pytest.raises(FileTooLarge):
        read_bounded(f, 4095)


def test_procfs_files_report_no_size_and_are_still_read():
    assert read_bounded("/proc/self/status", 1024 * 1024).startswith(b"Name:")


def test_an_excerpt_never_echoes_a_long_value():
    long = "ab" * 1_500_000
    out = excerpt(long)
    assert len(out) < 80 and "3,000,000 characters" in out
    assert excerpt("short") == "'short'"
