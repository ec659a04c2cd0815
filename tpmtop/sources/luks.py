"""The Unlock panel's input, read off the screen's thread: this machine's LUKS2 devices (the
ones given, else /etc/crypttab's and the block devices with a LUKS2 header), their headers
read again at most every :data:`HEADERS_EVERY_S` (they change when someone enrolls a token),
and their tokens judged against each PCR reading the live source makes.

Judged here rather than in the view-model: judging writes each report's judgements
(tpmtop.unlock.report.judge_all), so the reports judged must be the reader's own copies, made
under its lock while the header and PCR readers may replace them; and a PCR reading is judged
once, when it arrives, instead of being compared every frame with the last one judged. The
view-model gets an immutable :class:`tpmtop.sources.protocol.UnlockReading` and only makes
rows of it. No Textual here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from tpmtop.sources.protocol import UnlockReading

if TYPE_CHECKING:
    from tpmtop.pcrs.tpmread import PcrValues
    from tpmtop.unlock.report import DeviceReport

HEADERS_EVERY_S = 30.0
# How long the live source's start waits for the first look (discovery opens every block
# device to read its header: one that hangs costs the Unlock panel, not the dashboard).
FIRST_LOOK_S = 5.0


class LuksReader:
    """``devices()``: the devices to read (None: discover them), asked at each refresh so that a
    list given after construction is read at the next one."""

    def __init__(self, devices: Callable[[], list[str] | None]) -> None:
        self._devices = devices
        self._lock = threading.Lock()
        self._busy = False
        self._read_at = float("-inf")
        self._read_for: tuple[str, ...] | None = None  # the devices given to the last reading (None: discovered)
        self._headers: list[DeviceReport] | None = None  # as read, not judged
        self._values: PcrValues | None = None  # the latest PCR reading
        # persistent handle -> the name of the key this TPM holds there (None: none), read with
        # the PCRs for the handles the tokens name as their SRK; None: not asked
        self._srk: dict[int, bytes | None] | None = None
        self._reading: UnlockReading | None = None
        self._first = threading.Event()

    def refresh(self) -> None:
        """Start a header reading in a thread when the last one is :data:`HEADERS_EVERY_S` old
        or was of other devices. Never blocks on a device."""
        devices = self._devices()
        key = tuple(devices) if devices is not None else None
        with self._lock:
            now = time.monotonic()
            if self._busy or (key == self._read_for and now - self._read_at < HEADERS_EVERY_S):
                return
            self._busy, self._read_at, self._read_for = True, now, key
        threading.Thread(target=self._read, args=(devices,), name="tpmtop-luks", daemon=True).start()

    def found(self, wait: float) -> bool:
        """Whether the first reading found a device; False too when it took longer than ``wait``."""
        self._first.wait(wait)
        reading = self._reading
        return reading is not None and bool(reading.devices)

    def srk_handles(self) -> list[int]:
        """The persistent handles the tokens read so far name as their SRK (systemd 254+'s
        ``tpm2_srk``): the PCR reader asks the TPM what it holds there (ReadPublic, no
        authorization), as ``tpmtop unlock`` does."""
        from tpmtop.unlock.report import srk_handles

        with self._lock:
            return srk_handles(self._headers) if self._headers else []

    def needs_srk(self) -> bool:
        """Headers read whose tokens name an SRK handle the last PCR reading did not ask about
        (the headers came after it): until the next reading those tokens say "not checked"."""
        from tpmtop.unlock.report import srk_handles

        with self._lock:
            if not self._headers:
                return False
            asked = self._srk or {}
            return any(h not in asked for h in srk_handles(self._headers))

    def judge(self, values: PcrValues, srk: dict[int, bytes | None] | None = None) -> None:
        """A new PCR reading (on the source's PCR reader thread), with the keys at the SRK
        handles read beside it: the tokens judged against both."""
        with self._lock:
            self._values, self._srk = values, srk
            self._judge()

    def reading(self) -> UnlockReading | None:
        """The latest judged reading; None until the first header reading is done."""
        return self._reading

    def _read(self, devices: list[str] | None) -> None:
        from tpmtop.unlock.report import discover, load

        try:
            headers = [load(p) for p in (devices if devices is not None else discover())]
            with self._lock:
                self._headers = headers
                self._judge()
        finally:
            with self._lock:
                self._busy = False
            self._first.set()

    def _judge(self) -> None:
        """Under the lock: fresh copies of the headers, judged against the latest PCR values."""
        from tpmtop.unlock.report import judge_all

        if self._headers is None:
            return
        reports = [replace(r) for r in self._headers]
        values = self._values
        if values is not None:
            judge_all(reports, values.values, None, self._srk)
        self._reading = UnlockReading(tuple(reports), values.update_counter if values is not None else None)
