"""Replay: what each PCR of each bank should hold after the log's events.

Start values (PC Client Platform Firmware Profile; TPM 2.0 Part 1 §17): zeros, except PCRs
17–22 (all-ones: the dynamic-launch PCRs hold that until a DRTM resets them) and PCR 0, whose
last byte is the locality a ``StartupLocality`` EV_NO_ACTION event names (3 or 4: an H-CRTM
or a locality-3 start). Every event extends its PCR with its digest for that bank, except
EV_NO_ACTION, which the firmware never extended. IMA's entries follow the firmware's events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from tpmtop.pcrs.eventlog import ALGORITHMS, EV_NO_ACTION, PROGRESS_EVERY, EventLog, Progress
from tpmtop.pcrs.ima import ImaList
from tpmtop.pcrs.measurelog import MeasureLog

NUM_PCRS = 24
DRTM_PCRS = range(17, 23)
DIGEST_SIZES = {name: size for name, size in ALGORITHMS.values()}


def initial(bank: str, pcr: int, locality: int | None = None) -> bytes:
    size = DIGEST_SIZES[bank]
    if pcr in DRTM_PCRS:
        return b"\xff" * size
    if pcr == 0 and locality:
        return bytes(size - 1) + bytes([locality & 0xFF])
    return bytes(size)


@dataclass
class Replay:
    banks: list[str]
    values: dict[str, list[bytes]]  # bank -> 24 expected values
    # pcr -> the firmware events' indices (log order) that extended it; IMA's counted apart
    events_by_pcr: dict[int, list[int]] = field(default_factory=dict)
    ima_by_pcr: dict[int, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # events not replayed, with why (the first few)
    skipped_count: int = 0  # every one of them (a crafted log can name PCR 0xFFFFFFFF a million times)
    # (bank, pcr) -> the first event ("event 12", "systemd record 3") extending that PCR without
    # a digest for the bank: the bank's value of that PCR cannot be replayed, so it is not judged
    missing: dict[tuple[str, int], str] = field(default_factory=dict)
    measure_by_pcr: dict[int, int] = field(default_factory=dict)  # systemd's records per PCR
    # (bank, pcr) -> why the replay cannot be complete there (IMA's list lacks the bank)
    incomplete: dict[tuple[str, int], str] = field(default_factory=dict)
    # (bank, pcr) -> after how many IMA entries the running value last equalled the TPM's:
    # the list is read after the PCRs, so files measured in between make it longer, never shorter
    ima_match_at: dict[tuple[str, int], int] = field(default_factory=dict)
    # the same for systemd's measure log, which also only grows and is read after the PCRs:
    # (bank, pcr) -> after how many of its records for that PCR the value equalled the TPM's
    measure_match_at: dict[tuple[str, int], int] = field(default_factory=dict)
    # the same for the kernel's fallback: a bank whose hash the kernel lacks (no crypto module
    # for it at IMA's start) is extended with the SHA-1 template hash padded with zeros
    # (security/integrity/ima/ima_crypto.c, ima_calc_field_array_hash): (bank, pcr) -> (entries
    # seen, final value) of that chain, and where it met the TPM's value
    padded_values: dict[tuple[str, int], bytes] = field(default_factory=dict)
    padded_match_at: dict[tuple[str, int], int] = field(default_factory=dict)


MAX_SKIPPED_LINES = 5  # the events past PCR 23 named one by one; the rest are counted


def replay(log: EventLog | None, ima: ImaList | None = None, banks: list[str] | None = None,
           targets: dict[str, dict[int, bytes]] | None = None, progress: Progress | None = None,
           measure: MeasureLog | None = None) -> Replay:
    """Replay ``log``, then systemd's ``measure`` log, then ``ima``, for ``banks`` (default: the
    firmware log's own, else the measure log's, else IMA's).
    ``targets``: the TPM's values (bank -> pcr -> value), looked for among the prefixes of IMA's
    list and of systemd's measure log (both only grow, and are read after the PCRs).

    Only the banks the log carries are replayed: a bank it lacks has no replay (a replay of no
    event would be the start values, a false verdict either way)."""
    carried = list(log.banks) if log is not None else list(measure.banks) if measure is not None else None
    if banks is None:
        banks = carried if carried is not None else list(ima.banks if ima else [])
    elif carried is not None:
        banks = [b for b in banks if b in carried]
    banks = [b for b in banks if b in DIGEST_SIZES and _hashable(b)]
    locality = log.startup_locality if log is not None else None
    r = Replay(banks, {b: [initial(b, p, locality) for p in range(NUM_PCRS)] for b in banks})
    ctors = {b: _ctor(b) for b in banks}
    total = (len(log.events) if log is not None else 0) + (len(ima.entries) if ima is not None else 0)
    if log is not None:
        # the layout every event carrying the header's banks shares (eventlog.Event.layout)
        full = next((e.layout for e in log.events if e.index and e.banks == tuple(log.banks)), None) \
            if log.format == "crypto-agile" else log.events[0].layout
        for ev in log.events:
            if progress is not None and not ev.index % PROGRESS_EVERY:
                progress("replaying", ev.index, total)
            if ev.type == EV_NO_ACTION:
                continue
            if ev.pcr >= NUM_PCRS:
                r.skipped_count += 1
                if len(r.skipped) < MAX_SKIPPED_LINES:
                    r.skipped.append(f"event {ev.index} (byte {ev.offset}) names PCR {ev.pcr}, which no TPM "
                                     "has: not replayed")
                continue
            r.events_by_pcr.setdefault(ev.pcr, []).append(ev.index)
            raw = ev.raw
            layout = ev.layout
            if layout is not full:  # not the header's banks in its order: look for the ones it lacks
                have = {b for b, _, _ in layout}
                for b in banks:
                    if b not in have:
                        r.missing.setdefault((b, ev.pcr), f"event {ev.index}")
            for b, lo, hi in layout:
                ctor = ctors.get(b)
                if ctor is not None:
                    vals = r.values[b]
                    vals[ev.pcr] = ctor(vals[ev.pcr] + raw[lo:hi]).digest()
    if measure is not None:
        goal = targets or {}
        for rec in measure.records:
            if rec.pcr is None:
                continue  # an NvPCR: listed with its records, not a PCR
            if rec.pcr >= NUM_PCRS:
                r.skipped_count += 1
                if len(r.skipped) < MAX_SKIPPED_LINES:
                    r.skipped.append(f"systemd record {rec.index} (line {rec.line}) names PCR {rec.pcr}: not replayed")
                continue
            k = r.measure_by_pcr[rec.pcr] = r.measure_by_pcr.get(rec.pcr, 0) + 1
            for b in banks:
                d = rec.digests.get(b)
                if d is None:
                    r.missing.setdefault((b, rec.pcr), f"systemd record {rec.index}")
                else:
                    v = r.values[b][rec.pcr] = ctors[b](r.values[b][rec.pcr] + d).digest()
                    if v == goal.get(b, {}).get(rec.pcr):
                        r.measure_match_at[(b, rec.pcr)] = k
    if ima is not None:
        targets = targets or {}
        done = total - len(ima.entries)
        for i, e in enumerate(ima.entries):
            if progress is not None and not i % PROGRESS_EVERY:
                progress("replaying", done + i, total)
            if e.pcr >= NUM_PCRS:
                continue
            n = r.ima_by_pcr[e.pcr] = r.ima_by_pcr.get(e.pcr, 0) + 1
            digests = e.digests
            sha1 = digests.get("sha1")
            for b in banks:
                target = targets.get(b, {}).get(e.pcr)
                if sha1 is not None and b != "sha1" and target is not None:
                    key = (b, e.pcr)
                    pad = sha1 + bytes(DIGEST_SIZES[b] - 20) if not e.violation else b"\xff" * DIGEST_SIZES[b]
                    start = r.padded_values.get(key)
                    if start is None:  # the first IMA entry on this PCR: from the firmware's value
                        start = r.values[b][e.pcr]
                    pv = r.padded_values[key] = ctors[b](start + pad).digest()
                    if pv == target:
                        r.padded_match_at[key] = n
                d = digests.get(b)
                if d is not None:
                    v = r.values[b][e.pcr] = ctors[b](r.values[b][e.pcr] + d).digest()
                    if v == target:
                        r.ima_match_at[(b, e.pcr)] = n
                else:
                    r.incomplete.setdefault((b, e.pcr), f"IMA's list ({ima.source}) carries no {b} digests")
    return r


def position(log: EventLog, bank: str, wanted: dict[int, bytes]) -> dict[int, tuple[int, int]]:
    """For each PCR in ``wanted`` (pcr -> the TPM's value), whether the log's replay held that
    value before its first event for the PCR or after one of them: pcr -> (k, n), the value
    after k of the PCR's n events. One pass for one bank, made only when a mismatch asks."""
    ctor = _ctor(bank)
    cur = {p: initial(bank, p, log.startup_locality) for p in wanted}
    count = dict.fromkeys(wanted, 0)
    found = {p: 0 for p, v in wanted.items() if cur[p] == v}
    for ev in log.events:
        p = ev.pcr
        if p not in cur or ev.type == EV_NO_ACTION:
            continue
        d = ev.digests.get(bank)
        if d is None:
            continue
        cur[p] = ctor(cur[p] + d).digest()
        count[p] += 1
        if cur[p] == wanted[p]:
            found[p] = count[p]
    return {p: (k, count[p]) for p, k in found.items()}


def _hashable(bank: str) -> bool:
    try:
        hashlib.new(bank)
    except ValueError:
        return False
    return True


def _ctor(bank: str) -> Callable[[bytes], hashlib._Hash]:
    fn: Callable[[bytes], hashlib._Hash] | None = getattr(hashlib, bank, None)
    if fn is not None:
        return fn
    return lambda b: hashlib.new(bank, b)
