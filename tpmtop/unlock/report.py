"""``tpmtop unlock``'s report: the devices found, their tokens judged, what moved since a
snapshot, the text (80 columns) and the JSON (schema tpmtop-unlock/1), and the exit status."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tpmtop.errors import EXIT_FAILURE, EXIT_USAGE, UsageError
from tpmtop.textsafe import safe
from tpmtop.unlock.header import HeaderError, is_luks2, read_header
from tpmtop.unlock.judge import Judgement, Verdict, judge, pcr_words
from tpmtop.unlock.tokens import Token, TokenKind, parse_tokens

SCHEMA = "tpmtop-unlock/1"
CRYPTTAB = "/etc/crypttab"
TPM_VERDICTS = frozenset({Verdict.WOULD_UNSEAL, Verdict.WOULD_NOT, Verdict.CANNOT_JUDGE})


@dataclass
class DeviceReport:
    path: str
    uuid: str = ""
    error: str | None = None  # the header could not be read: one line
    header_note: str | None = None  # the secondary header was read, and why
    tokens: list[Token] = field(default_factory=list)
    judgements: list[Judgement] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.path, "uuid": self.uuid, "error": self.error, "header_note": self.header_note,
                "tokens": [j.to_json() for j in self.judgements]}


def discover(crypttab: str = CRYPTTAB, sys_block: str = "/sys/class/block") -> list[str]:
    """Every LUKS2 device this machine lists: /etc/crypttab's (its second field: a path,
    UUID=, PARTUUID=, LABEL=), then the block devices whose header is LUKS2."""
    from tpmtop.boundedread import LIMIT_SMALL, read_bounded

    out: list[str] = []
    try:
        lines = read_bounded(crypttab, LIMIT_SMALL, what="crypttab").decode("utf-8", "replace").splitlines()
    except (OSError, UsageError):
        lines = []
    by = {"UUID": "/dev/disk/by-uuid/", "PARTUUID": "/dev/disk/by-partuuid/", "LABEL": "/dev/disk/by-label/"}
    for line in lines:
        f = line.split()
        if len(f) < 2 or f[0].startswith("#"):
            continue
        dev = f[1]
        key, _, val = dev.partition("=")
        if key in by and val:
            dev = by[key] + val
        if dev.startswith("/") and os.path.exists(dev):
            out.append(os.path.realpath(dev))
    try:
        names = sorted(os.listdir(sys_block))
    except OSError:
        names = []
    for name in names:
        dev = f"/dev/{name}"
        if dev not in out and is_luks2(dev):
            out.append(dev)
    return list(dict.fromkeys(out))


def load(path: str) -> DeviceReport:
    """The device's header and tokens, or the one line that says why not (no TPM needed)."""
    try:
        hdr = read_header(path)
    except HeaderError as e:
        return DeviceReport(path, error=str(e))
    return DeviceReport(path, uuid=hdr.uuid, header_note=hdr.note, tokens=parse_tokens(hdr.metadata))


def needs_tpm(reports: list[DeviceReport]) -> bool:
    return any(t.kind in (TokenKind.SYSTEMD_TPM2, TokenKind.CLEVIS_TPM2) for r in reports for t in r.tokens)


def judge_all(reports: list[DeviceReport], live: dict[str, dict[int, bytes]],
              snapshot: dict[tuple[str, int], bytes] | None, srk: dict[int, bytes | None] | None = None) -> None:
    for r in reports:
        r.judgements = [judge(t, live, snapshot, srk) for t in r.tokens]


def srk_handles(reports: list[DeviceReport]) -> list[int]:
    """The persistent handles the tokens say their SRK is at (systemd 254+'s tpm2_srk)."""
    return sorted({t.srk_handle for r in reports for t in r.tokens if t.srk_handle is not None})


def add_moved(reports: list[DeviceReport], diff: dict[str, Any]) -> None:
    """For every judged token, its bound PCRs that changed since the snapshot, and why (the
    pcrs diff's events for that PCR; none: extended outside the log)."""
    by_pcr = {int(e["pcr"]): e for e in diff.get("pcrs", [])}
    for r in reports:
        for j in r.judgements:
            if j.verdict not in TPM_VERDICTS:
                continue
            t = j.token
            for p in sorted(set(t.pcrs) | set(t.pubkey_pcrs)):
                e = by_pcr.get(p)
                if e is None or (t.bank not in e["banks"] and not e["events"]):
                    continue
                j.moved[p] = _why(e)


def _why(e: dict[str, Any]) -> str:
    if not e["events"]:
        return "extended outside the log"  # its value changed, and no event of the log for it
    c = e["events"][0]
    more = f" (and {len(e['events']) - 1} more event changes)" if len(e["events"]) > 1 else ""
    data = f" {c['data']}" if c.get("data") else ""
    return f"{c['type']}{data}: {c['change']}{more}"


def exit_status(reports: list[DeviceReport]) -> int:
    """1 any TPM token would not unseal; 2 nothing could be judged (no header read, no TPM
    token, or only tokens that need more than the PCRs); else 0."""
    verdicts = [j.verdict for r in reports for j in r.judgements]
    if Verdict.WOULD_NOT in verdicts:
        return EXIT_FAILURE
    if Verdict.WOULD_UNSEAL not in verdicts and Verdict.CANNOT_JUDGE not in verdicts:
        return EXIT_USAGE
    return 0


def to_json(reports: list[DeviceReport], tpm: dict[str, Any] | None, snapshot: str | None) -> dict[str, Any]:
    return {"schema": SCHEMA, "tpm": tpm, "snapshot": snapshot, "devices": [r.to_json() for r in reports],
            "exit_status": exit_status(reports)}


def _wrap(first: str, text: str, width: int = 80, indent: str = "      ") -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=indent) or [first]


def text(reports: list[DeviceReport], snapshot: str | None, trial: bool) -> str:
    lines: list[str] = []
    for r in reports:
        if r.error is not None:
            lines += _wrap("", safe(r.error), indent="  ")
            continue
        lines += [safe(r.path), f"  LUKS2 UUID {safe(r.uuid)}"]  # a path can be long: the UUID on its own line
        if r.header_note is not None:
            lines += _wrap("  ", safe(r.header_note), indent="    ")
        if not r.judgements:
            lines.append("  no tokens")
        for j in r.judgements:
            t = j.token
            slots = f" keyslot {','.join(t.keyslots)}" if t.keyslots else ""
            bound = f", {pcr_words(t.pcrs, t.bank)}" if t.pcrs and j.verdict in TPM_VERDICTS else ""
            lines += _wrap("  ", f"{safe(t.label)}{slots}{bound}:", indent="    ")
            lines += _wrap("    ", safe(j.text))
            if trial and j.trial_digest is not None:
                same = "equals" if j.trial_digest == j.software_digest else "DIFFERS FROM"
                lines += _wrap("    ", f"the TPM's trial PolicyPCR digest {same} the software one")
            for p, why in sorted(j.moved.items()):
                lines += _wrap("    ", f"PCR {p} moved since the snapshot: {safe(why)}", indent="      ")
            if snapshot is not None and not j.moved and j.verdict in TPM_VERDICTS and t.pcrs:
                lines += _wrap("    ", "no bound PCR changed since the snapshot")
    return "\n".join(lines)
