"""Who holds the device, from /proc: no character device can be made here, so the reading is
tested on a process that holds a known file open (the same readlink of /proc/PID/fd), under a
name built to drive a terminal — the report must show it escaped."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.helpers.processes import wait_until
from tpmtop.health import holders
from tpmtop.health.report import HealthReport, render_text


def test_a_process_holding_the_file_is_listed_and_its_name_is_terminal_safe(tmp_path):
    held = tmp_path / "tpm-stand-in"
    held.write_bytes(b"")
    path = os.path.realpath(held)
    evil = tmp_path / "ev\x1b[31mil"  # a program name with an escape sequence in it
    evil.symlink_to(shutil.which("sleep"))
    # fd 3 holds the file for the life of the process, as a TPM client holds /dev/tpmrm0
    proc = subprocess.Popen(["sh", "-c", 'exec 3<"$1"; exec "$2" 600', "sh", path, str(evil)])
    try:
        def listed():
            return [h for h in holders.read((path,)).data[0][1] if h["pid"] == proc.pid]
        wait_until(lambda: bool(listed()), "the holder to show in /proc", timeout=60)
        v = holders.read((path,))
        h = next(h for h in dict(v.data)["holders"] if h["pid"] == proc.pid)
        assert h["device"] == path and h["fd"] == 3 and h["name"].startswith("ev\x1b")  # as the kernel has it
        assert f"1 process(es) hold {path} open" == v.text
        text = render_text(HealthReport({"reason": "test"}, [v]))
        assert "\x1b" not in text and f"pid {proc.pid}" in text
    finally:
        proc.kill()
        proc.wait()
    # must not fire: once it has gone, nobody holds the file
    wait_until(lambda: not [h for h in dict(holders.read((path,)).data)["holders"] if h["pid"] == proc.pid],
               "the holder to be gone", timeout=60)
    assert holders.read((path,)).text == f"no process holds {path} open"
