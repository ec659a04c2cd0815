"""Firmware advisories: the TPM's manufacturer and firmware version against the table in
``advisories.json``, each row with its public source. The verdict says only what a row's
source says: "firmware X is in the range advisory Y names", or that the source names no
firmware version (then nothing is judged); a firmware line the source does not name is not
called safe."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from tpmtop.health.verdicts import Kind, Level, Verdict


@dataclass(frozen=True)
class Advisory:
    id: str
    cves: tuple[str, ...]
    manufacturer: str
    what: str
    ranges: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None  # (line, first version outside)
    ranges_note: str
    sources: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.id} ({', '.join(self.cves)})"


def table() -> list[Advisory]:
    doc = json.loads(resources.files("tpmtop.health").joinpath("advisories.json").read_text(encoding="utf-8"))
    out = []
    for a in doc["advisories"]:
        ranges = None if a["ranges"] is None else tuple((tuple(r["line"]), tuple(r["before"])) for r in a["ranges"])
        out.append(Advisory(a["id"], tuple(a["cves"]), a["manufacturer"], a["what"], ranges, a["ranges_note"],
                            tuple(a["sources"])))
    return out


def _version(firmware: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in firmware.split("."))
    except ValueError:
        return None


def match(adv: Advisory, manufacturer: str, firmware: str) -> str | None:
    """'in' (firmware in a range the source names), 'outside' (on a line the source names, at or
    after its fix), 'unnamed' (a line the source does not name), 'no-range' (the source names no
    version), or None (another manufacturer's)."""
    if adv.manufacturer not in ("*", manufacturer):
        return None
    if adv.ranges is None:
        return "no-range"
    v = _version(firmware)
    if v is None:
        return "unnamed"
    for line, before in adv.ranges:
        if v[:len(line)] == line:
            return "in" if v[:len(before)] < before else "outside"
    return "unnamed"


def _range_text(adv: Advisory) -> str:
    return ", ".join(f"{'.'.join(map(str, line))}.x before {'.'.join(map(str, b))}" for line, b in adv.ranges or ())


def verdict(tpm: dict[str, Any], rows: list[Advisory] | None = None) -> Verdict:
    manufacturer = str(tpm.get("manufacturer", "?"))
    firmware = str(tpm.get("firmware", "?"))
    found: list[str] = []
    ev: list[str] = []
    data: list[dict[str, object]] = []
    for adv in rows if rows is not None else table():
        m = match(adv, manufacturer, firmware)
        if m is None:
            continue
        src = " ".join(adv.sources)
        if m == "in":
            found.append(f"firmware {firmware} is in the range {adv.name} names")
            ev.append(f"{adv.name}: {adv.what}; range {_range_text(adv)}; {adv.ranges_note}; source {src}")
        elif m == "outside":
            ev.append(f"{adv.name}: firmware {firmware} is not in the range it names ({_range_text(adv)}); "
                      f"source {src}")
        elif m == "unnamed":
            ev.append(f"{adv.name}: names ranges for other firmware lines only ({_range_text(adv)}); "
                      f"{adv.ranges_note}; not judged; source {src}")
        else:
            ev.append(f"{adv.name}: the source gives no firmware version range: {adv.ranges_note}; "
                      f"not judged; source {src}")
        data.append({"id": adv.id, "cves": list(adv.cves), "result": m, "sources": list(adv.sources)})
    ev.append(f"manufacturer {manufacturer}, firmware {firmware} (TPM_PT_MANUFACTURER, TPM_PT_FIRMWARE_VERSION_1/2)")
    if found:
        return Verdict(Kind.ADVISORIES, Level.WARN, "; ".join(found), tuple(ev), (("advisories", data),))
    named = [d for d in data if d["result"] == "outside"]
    text = (f"firmware {firmware} is in no range the table's {len(data)} advisories for {manufacturer} name"
            if data else f"no advisory in tpmtop's table names manufacturer {manufacturer}")
    if data and not named:
        text = f"no advisory names a version range for firmware {firmware}: see the evidence"
    return Verdict(Kind.ADVISORIES, Level.INFO, text, tuple(ev), (("advisories", data),))
