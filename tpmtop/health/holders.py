"""Who holds the TPM device: the processes with /dev/tpm0 or /dev/tpmrm0 open (read from
/proc/PID/fd by :func:`tpmtop.proxy.holders.tpm_holders`, the reading `tpmtop clients` shows),
and whether tpm2-abrmd runs — the "device busy / permission denied" question (tpm2-tss #2885):
/dev/tpm0 takes one process at a time, and tpm2-abrmd holds it for good."""

from __future__ import annotations

from typing import Any

from tpmtop.health.verdicts import Kind, Level, Verdict

RAW = "/dev/tpm0"


def verdict(info: dict[str, Any]) -> Verdict:
    """From :func:`tpmtop.proxy.holders.tpm_holders`'s dict. Names and paths are other
    processes': the report's text passes every line through :func:`tpmtop.textsafe.safe`."""
    holders = info.get("holders") or []
    ab = info.get("abrmd") or {}
    ev = [f"pid {h['pid']} {h.get('user') or '?'} {h['name']}: {h['device']} (fd {h['fd']}, since {h['since']})"
          + (f" {h['exe']}" if h.get("exe") else "") for h in holders]
    ev.append("tpm2-abrmd: " + (f"running (pid {', '.join(map(str, ab.get('pids', [])))})" if ab.get("running")
                                else "not running"))
    if info.get("unreadable_processes") and not info.get("root"):
        ev.append(f"{info['unreadable_processes']} processes of other users could not be inspected (not root)")
    data: tuple[tuple[str, object], ...] = (("holders", holders), ("abrmd", ab),
                                            ("unreadable_processes", info.get("unreadable_processes", 0)))
    if not info.get("devices"):
        return Verdict(Kind.HOLDERS, Level.INFO, "no /dev/tpm0 or /dev/tpmrm0 to hold", tuple(ev), data)
    raw = [h for h in holders if h["device"] == RAW]
    if raw:
        who = ", ".join(f"{h['name']} (pid {h['pid']})" for h in raw)
        text = f"{RAW} is held by {who}: any other program opening it gets 'device busy'"
        if ab.get("running"):
            text += " (tpm2-abrmd: use its TCTI, or /dev/tpmrm0)"
        return Verdict(Kind.HOLDERS, Level.INFO, text, tuple(ev), data)
    n = len(holders)
    text = (f"{n} process(es) hold {' or '.join(info['devices'])} open" if n
            else f"no process holds {' or '.join(info['devices'])} open")
    if info.get("unreadable_processes") and not info.get("root"):
        text += " (of those this user may inspect)"
    return Verdict(Kind.HOLDERS, Level.INFO, text, tuple(ev), data)


def read(devices: tuple[str, ...] | None = None) -> Verdict:
    from tpmtop.proxy.holders import DEVICES, tpm_holders

    return verdict(tpm_holders(devices or DEVICES))
