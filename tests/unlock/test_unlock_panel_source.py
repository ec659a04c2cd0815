"""The Unlock panel's reading happens in the live source, off the caller's thread: the
dashboard's view-model (tpmtop.viewmodel.rows.unlock) and ``caps`` open no device and no
/etc/crypttab on the thread that calls them (the screen's, in the dashboard). Opens are seen
through Python's audit hook ("open" is raised by os.open and open() before the syscall), on a
private swtpm; the device is a plain file that is not LUKS, so the panel names it unreadable."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from tests.helpers.processes import wait_until
from tpmtop.connect import open_tpm
from tpmtop.sources.live import LiveSource
from tpmtop.unlock.judge import Verdict
from tpmtop.viewmodel.rows import unlock

_OPENS: list[tuple[str, int]] | None = None  # (path, thread ident) while a test listens
_HOOKED = False


def _hook(event: str, args: tuple[object, ...]) -> None:
    opens = _OPENS
    if opens is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        opens.append((os.fsdecode(args[0]), threading.get_ident()))


@pytest.fixture
def opens():
    """Every file opened while the test runs, with the thread that opened it (an audit hook
    cannot be removed: it is added once and listens only here)."""
    global _OPENS, _HOOKED
    if not _HOOKED:
        sys.addaudithook(_hook)
        _HOOKED = True
    _OPENS = []
    try:
        yield _OPENS
    finally:
        _OPENS = None


@pytest.fixture
def source():
    src = LiveSource(open_tpm(sim=True), start_running=False)
    yield src
    src.close()


def _here(opens: list[tuple[str, int]], want) -> list[str]:
    me = threading.get_ident()
    return [p for p, t in list(opens) if t == me and want(p)]


def test_caps_look_for_no_luks_device_on_the_callers_thread(source, opens):
    """Whether to offer the panel was decided when the source started; asking reads nothing."""
    assert source.caps == source.caps
    assert not _here(opens, lambda p: p.startswith("/dev/") or p.endswith("crypttab"))


def test_the_panel_is_built_from_what_the_source_read_in_the_background(source, opens, tmp_path):
    img = tmp_path / "not-luks.img"
    img.write_bytes(bytes(1 << 16))
    source.unlock_devices = [str(img)]
    opens.clear()  # the write above

    def shown() -> unlock.UnlockPart:
        return unlock.part(source)

    wait_until(lambda: "pcrUpdateCounter" in shown().note and shown().rows, "the header read and the PCRs judged",
               timeout=120)
    part = shown()
    assert [(r.device, r.verdict) for r in part.rows] == [(str(img), Verdict.UNREADABLE)]
    assert "not a LUKS device" in part.rows[0].text
    assert part.note.startswith("0 TPM tokens on 1 device,")
    read = [t for p, t in opens if p == str(img)]
    assert read, "the source read the header"
    assert threading.get_ident() not in read, "the header was read on the view-model's thread"
