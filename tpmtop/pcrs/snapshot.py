"""``tpmtop pcrs --save`` and ``--diff``: this boot's PCRs and events kept as JSON in tpmtop's
data directory, and compared with another boot's: which PCR changed, and which events differ
(added, removed, digest changed), named by type and decoded data.

Events are aligned per PCR by (type, decoded data) with difflib's sequence matcher, so an
event whose data stayed the same but whose digest changed (a new shim, same path) reads as
"digest changed", and one inserted in the middle does not shift every later one.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from pathlib import Path
from typing import Any

from tpmtop.errors import UsageError

PREFIX = "pcrs-"


def save(doc: dict[str, Any], directory: Path, path: str | None = None, *, this_boot: bool = True) -> Path:
    """Write ``doc`` to ``path``, or to a new file in ``directory`` (created 0700: a snapshot
    names this machine's boot chain). ``this_boot``: the log and the TPM are this host's, so
    its boot_id is stamped; False (a log file, a remote or simulated TPM) stamps none."""
    from tpmtop.atomic import write_atomic

    boot_id = _boot_id() if this_boot else None
    if path is None:
        d = directory
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = d / f"{PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{(boot_id or 'elsewhere')[:8]}.json"
    else:
        target = Path(path)
    doc = dict(doc, saved_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), boot_id=boot_id)
    write_atomic(target, json.dumps(doc, indent=1) + "\n")
    return target


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def latest(d: Path) -> Path:
    found = sorted(d.glob(f"{PREFIX}*.json")) if d.is_dir() else []
    if not found:
        raise UsageError(f"no saved snapshot in {d} (tpmtop pcrs --save makes one)")
    return found[-1]


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such snapshot") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a tpmtop pcrs snapshot ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pcrs"), list):
        raise UsageError(f"{path}: not a tpmtop pcrs snapshot (no pcrs list)")
    return doc


def _values(doc: dict[str, Any]) -> dict[tuple[str, int], str]:
    """(bank, pcr) -> value: the TPM's where read, else the replay's."""
    out: dict[tuple[str, int], str] = {}
    for r in doc.get("pcrs", []):
        v = r.get("tpm") or r.get("replay")
        if v is not None:
            out[(r["bank"], int(r["pcr"]))] = v
    return out


def _key(ev: dict[str, Any]) -> tuple[str, str]:
    return (ev.get("type", ""), ev.get("data", ""))


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    ov, nv = _values(old), _values(new)
    changed = sorted({(b, p) for b, p in ov.keys() | nv.keys() if ov.get((b, p)) != nv.get((b, p))},
                     key=lambda k: (k[1], k[0]))
    pcrs: dict[int, dict[str, Any]] = {}
    for bank, pcr in changed:
        e = pcrs.setdefault(pcr, {"pcr": pcr, "banks": {}, "events": []})
        e["banks"][bank] = {"old": ov.get((bank, pcr)), "new": nv.get((bank, pcr))}
    oe, ne = old.get("events", []), new.get("events", [])
    for pcr in sorted({int(ev["pcr"]) for ev in oe + ne}):
        a = [ev for ev in oe if int(ev["pcr"]) == pcr and ev.get("type") != "EV_NO_ACTION"]
        b = [ev for ev in ne if int(ev["pcr"]) == pcr and ev.get("type") != "EV_NO_ACTION"]
        changes = _event_changes(a, b)
        if changes:
            pcrs.setdefault(pcr, {"pcr": pcr, "banks": {}, "events": []})["events"] = changes
    same_log = bool(oe or ne) and not any(e["events"] for e in pcrs.values())
    for e in pcrs.values():
        if same_log and e["banks"]:
            e["hint"] = ("the event log is identical: this PCR moved outside it (extended after the log was "
                         "read, or by something the log does not record)")
    return {"old": {"saved_at": old.get("saved_at"), "boot_id": old.get("boot_id")},
            "new": {"saved_at": new.get("saved_at"), "boot_id": new.get("boot_id")},
            "tpm": tpm_change(old.get("tpm"), new.get("tpm")),
            "same_event_log": same_log,
            "pcrs": [pcrs[p] for p in sorted(pcrs)]}


def tpm_change(old: Any, new: Any) -> dict[str, Any]:
    """What happened to the TPM between two snapshots, from what each saved of it: another
    TPM (manufacturer, firmware or EK name differ), cleared (resetCount went back: TPM2_Clear
    sets it to 0), reset (resetCount grew: a reboot), restarted (restartCount grew: resume or
    restart), or the same boot of the same TPM. ``verdict`` is None when either snapshot holds
    no clock (saved with --no-tpm, or by an older tpmtop)."""
    out: dict[str, Any] = {"verdict": None, "detail": ""}
    if not isinstance(old, dict) or not isinstance(new, dict):
        out["detail"] = "a snapshot read no TPM: nothing to say about the TPM between them"
        return out
    for key in ("manufacturer", "firmware"):
        if old.get(key) and new.get(key) and old[key] != new[key]:
            out.update(verdict="other-tpm", detail=f"another TPM, or new firmware: {key} {old[key]} then {new[key]}")
            return out
    oek, nek = old.get("ek_names") or {}, new.get("ek_names") or {}
    for handle in sorted(set(oek) & set(nek)):
        if oek[handle].get("name") != nek[handle].get("name"):
            out.update(verdict="other-tpm", detail=f"the endorsement key at {handle} changed: another TPM, or its "
                                                   f"endorsement hierarchy was reset")
            return out
    oc, nc = old.get("clock"), new.get("clock")
    if not isinstance(oc, dict) or not isinstance(nc, dict):
        out["detail"] = "a snapshot holds no TPM clock (saved with --no-tpm or by an older tpmtop)"
        return out
    ro, rn = oc.get("reset_count", 0), nc.get("reset_count", 0)
    so, sn = oc.get("restart_count", 0), nc.get("restart_count", 0)
    if rn < ro:
        out.update(verdict="cleared", detail=f"the TPM was cleared between them (resetCount {ro} then {rn}): "
                                             f"TPM2_Clear, or another TPM")
    elif rn > ro:
        out.update(verdict="reset", detail=f"the TPM was reset between them (resetCount {ro} then {rn}: "
                                           f"{rn - ro} boot{'s' if rn - ro != 1 else ''})")
    elif sn != so:
        out.update(verdict="restarted", detail=f"the TPM was restarted or resumed between them (restartCount {so} "
                                               f"then {sn})")
    else:
        out.update(verdict="same-boot", detail=f"the same boot of the TPM (resetCount {rn}, restartCount {sn})")
    return out


def _event_changes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    sm = difflib.SequenceMatcher(a=[_key(e) for e in a], b=[_key(e) for e in b], autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            for x, y in zip(a[i1:i2], b[j1:j2], strict=True):
                if x.get("digests") != y.get("digests"):
                    out.append(_change("digest changed", y, x))
            continue
        if op == "replace" and i2 - i1 == j2 - j1:
            for x, y in zip(a[i1:i2], b[j1:j2], strict=True):
                if x.get("type") == y.get("type"):
                    out.append(_change("data changed", y, x))
                else:
                    out += [_change("removed", x), _change("added", y)]
            continue
        out += [_change("removed", x) for x in a[i1:i2]]
        out += [_change("added", y) for y in b[j1:j2]]
    return out


def _change(kind: str, ev: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    c = {"change": kind, "type": ev.get("type"), "data": ev.get("data"), "digests": ev.get("digests")}
    if old is not None:
        c["old_data"] = old.get("data")
        c["old_digests"] = old.get("digests")
    return c


def diff_text(d: dict[str, Any], path: str) -> str:
    from tpmtop.textsafe import safe

    boot = d["old"].get("boot_id")
    lines = [f"compared with {safe(path)} (saved {d['old'].get('saved_at')}"
             + (f", boot {safe(boot)})" if boot else ")")]
    tpm = d.get("tpm") or {}
    if tpm.get("detail"):
        lines.append(f"TPM: {safe(tpm['detail'])}")
    if not d["pcrs"]:
        lines.append("no PCR and no event changed")
    for e in d["pcrs"]:
        banks = ", ".join(sorted(e["banks"]))
        lines.append(f"PCR {e['pcr']}: " + (f"value changed ({banks})" if banks else "value unchanged"))
        if e.get("hint"):
            lines.append(f"  {safe(e['hint'])}")
        for c in e["events"]:
            dig = c.get("digests") or {}
            first = ("sha256", dig["sha256"]) if "sha256" in dig else next(iter(sorted(dig.items())), None)
            dtext = f" ({first[0]} {first[1][:16]}…)" if first else ""
            line = f"  {c['change']}: {c['type']} {safe(c.get('data') or '')}{dtext}"
            if c["change"] == "data changed":
                line += f" (was {safe(c.get('old_data') or '')})"
            lines.append(line)
    return "\n".join(lines)
