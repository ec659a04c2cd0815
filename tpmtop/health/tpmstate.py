"""The TPM's own state, as Windows' ``tpmtool getdeviceinformation`` and ``Get-Tpm`` show it,
read without authorization (:mod:`tpmtop.tpm.status`): TPMA_PERMANENT, TPMA_STARTUP_CLEAR,
the self-test result and the clock; the clock's counters against the last saved state say
whether the TPM was cleared, reset or restarted since.

TPM 2.0 Part 1 (TPM Reset / Restart / Resume) and Part 3 (TPM2_Clear, TPM2_Startup): a TPM
Reset (Startup(CLEAR) without a Shutdown(STATE) before it: a reboot, a power cycle) adds one to
resetCount and sets restartCount to 0; a TPM Restart (Shutdown(STATE), then Startup(CLEAR):
resume from hibernation) adds one to restartCount; TPM2_Clear sets both to 0. Clock only moves
forward on one TPM, so a clock behind the saved one is a cleared TPM (or a different one).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tpmtop.health.verdicts import Kind, Level, Verdict
from tpmtop.tpm import names
from tpmtop.tpm.status import PERMANENT_NAMES, STARTUP_CLEAR_NAMES, ClockInfo, Permanent, StartupClear

TPM_RC_TESTING = 0x90A
TPM_RC_NEEDS_TEST = 0x153
TPM_RC_FAILURE = 0x101


def flags_verdict(permanent: int, startup_clear: int | None) -> Verdict:
    """The flags an operator asks about, each named; INFO (they are settings, not faults):
    the lockout verdict judges inLockout, and a disorderly start is said here."""
    on = [n for f, n in PERMANENT_NAMES.items() if permanent & f]
    off = [n for f, n in PERMANENT_NAMES.items() if not permanent & f]
    ev = [f"TPMA_PERMANENT 0x{permanent:08x}: set {', '.join(on) or 'none'}; clear {', '.join(off) or 'none'}"]
    data: list[tuple[str, object]] = [(n, bool(permanent & f)) for f, n in PERMANENT_NAMES.items()]
    # every flag said yes or no (the set ones first): "no" is an answer too (no lockoutAuth set)
    shown = [n for n in on if n != "inLockout"] + [n for n in off if n != "inLockout"]
    text = ", ".join(f"{n} {'yes' if n in on else 'no'}" for n in shown)
    level = Level.INFO
    if startup_clear is not None:
        sc_on = [n for f, n in STARTUP_CLEAR_NAMES.items() if startup_clear & f]
        ev.append(f"TPMA_STARTUP_CLEAR 0x{startup_clear:08x}: set {', '.join(sc_on) or 'none'}")
        data += [(n, bool(startup_clear & f)) for f, n in STARTUP_CLEAR_NAMES.items()]
        if not startup_clear & StartupClear.ORDERLY:
            # Part 1, 19.8.6: a disorderly shutdown counts as one authorization failure when
            # lockoutAuth is set (systemd #30330: power loss raises the counter)
            text += "; last start followed a disorderly shutdown (orderly clear)"
            if permanent & Permanent.LOCKOUT_AUTH_SET:
                text += ": counted toward DA lockout, lockoutAuth being set"
        if not startup_clear & StartupClear.EH_ENABLE:
            text += "; endorsement hierarchy disabled (ehEnable clear)"
        if not startup_clear & StartupClear.SH_ENABLE:
            text += "; owner hierarchy disabled (shEnable clear)"
    ev.append("source: GetCapability(TPM_PT_PERMANENT, TPM_PT_STARTUP_CLEAR), no authorization")
    return Verdict(Kind.FLAGS, level, text, tuple(ev), tuple(data))


def selftest_verdict(rc: int, out: bytes) -> Verdict:
    ev = (f"GetTestResult: testResult 0x{rc:03x} {names.rc_text(rc) if rc else 'TPM_RC_SUCCESS'}"
          + (f", {len(out)} bytes of vendor data" if out else ""),)
    data = (("test_result", rc),)
    if rc == 0:
        return Verdict(Kind.SELFTEST, Level.OK, "self-test passed", ev, data)
    if rc == TPM_RC_TESTING:
        return Verdict(Kind.SELFTEST, Level.INFO, "self-test still running (TPM_RC_TESTING)", ev, data)
    if rc == TPM_RC_NEEDS_TEST:
        return Verdict(Kind.SELFTEST, Level.WARN, "self-test not run: some functions are not tested "
                       "(TPM_RC_NEEDS_TEST; the next command using them runs it)", ev, data)
    return Verdict(Kind.SELFTEST, Level.FAIL, f"self-test FAILED: 0x{rc:03x} {names.rc_text(rc)} (the TPM "
                   "answers only GetTestResult and GetCapability in failure mode)", ev, data)


@dataclass(frozen=True)
class Saved:
    """What health kept of this TPM's clock, and when (ISO 8601 UTC) and where from."""

    clock: ClockInfo
    saved_at: str
    source: str


def clock_verdict(now: ClockInfo, saved: Saved | None) -> Verdict:
    c = now
    ev = [f"ReadClock: clock {c.clock_ms} ms, resetCount {c.reset_count}, restartCount {c.restart_count}, "
          f"safe {'yes' if c.safe else 'no'}, time {c.time_ms} ms since the last reset or restart"]
    data: list[tuple[str, object]] = list(asdict(c).items())
    tail = "" if c.safe else ("; safe is no: the clock may have run behind a value it reported before "
                              "(a shutdown without Shutdown(STATE))")
    if saved is None:
        return Verdict(Kind.CLOCK, Level.INFO, f"resetCount {c.reset_count}, restartCount {c.restart_count}; "
                       "nothing saved to compare with (the next run compares with this one)" + tail,
                       tuple(ev), tuple(data + [("since", None)]))
    p = saved.clock
    ev.append(f"saved {saved.saved_at} ({saved.source}): clock {p.clock_ms} ms, resetCount {p.reset_count}, "
              f"restartCount {p.restart_count}")
    since = f"since {saved.saved_at}"
    if c.reset_count < p.reset_count or (c.reset_count == p.reset_count and c.restart_count < p.restart_count) \
            or (c.reset_count == p.reset_count and c.restart_count == p.restart_count and c.clock_ms < p.clock_ms):
        what = "cleared"
        text = (f"the TPM was cleared {since} (or is not the same TPM): its counters or clock went back "
                "(TPM2_Clear sets resetCount and restartCount to 0)")
        level = Level.WARN
    elif c.reset_count > p.reset_count:
        # after a disorderly shutdown the clock starts behind the one saved here; safe is no only
        # until the clock next reaches NV (every 4,096 ms on libtpms: docs/health.md), the clock
        # may stay behind longer: the counters are what tell
        what = "reset"
        text = (f"the TPM was reset {c.reset_count - p.reset_count} time(s) {since} (a reboot or power "
                "cycle: Startup(CLEAR) without a Shutdown(STATE))")
        level = Level.INFO
    elif c.restart_count > p.restart_count:
        what = "restarted"
        text = (f"the TPM was restarted {c.restart_count - p.restart_count} time(s) {since} "
                "(Shutdown(STATE), then Startup(CLEAR): resume from hibernation)")
        level = Level.INFO
    else:
        what = "same"
        text = f"not cleared, reset or restarted {since}"
        level = Level.OK
    data += [("since", what), ("saved_at", saved.saved_at)]
    return Verdict(Kind.CLOCK, level, text + tail, tuple(ev), tuple(data))


def clock_json(c: ClockInfo) -> dict[str, Any]:
    return asdict(c)


def clock_from_json(d: object) -> ClockInfo | None:
    """A saved clock (health's state file, a snapshot's ``tpm.clock``), or None if malformed."""
    if not isinstance(d, dict):
        return None
    try:
        vals = [d[k] for k in ("time_ms", "clock_ms", "reset_count", "restart_count")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals):
            return None
        return ClockInfo(vals[0], vals[1], vals[2], vals[3], bool(d.get("safe", True)))
    except KeyError:
        return None
