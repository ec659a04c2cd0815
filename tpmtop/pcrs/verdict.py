"""The comparison: per PCR and bank, does the replay explain the TPM's value; per bank, is it
healthy. Each closed set is an enum here, and the text, the JSON and the exporter derive from it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tpmtop.pcrs.eventlog import EventLog
from tpmtop.pcrs.ima import ImaList
from tpmtop.pcrs.replay import NUM_PCRS, Replay, initial, position
from tpmtop.pcrs.tpmread import PcrValues
from tpmtop.textsafe import counted

FIRMWARE_PCRS = range(8)


class PcrStatus(enum.Enum):
    MATCH = "match"  # the replay gives the TPM's value
    BEHIND = "behind"  # the TPM holds the value after an earlier event: later events never reached it
    UNEXPLAINED = "unexplained"  # no prefix of the log gives the TPM's value
    NOT_REPLAYED = "not-replayed"  # the log (or IMA's list) does not carry this bank
    NOT_READ = "not-read"  # no TPM was read (--no-tpm), or the bank is not allocated


class Health(enum.Enum):
    NEVER_EXTENDED = "never-extended"  # allocated, PCRs 0-7 at their start values, another bank has values
    NOT_IN_LOG = "not-in-log"  # allocated, but the log carries no digests for it
    NOT_ALLOCATED = "not-allocated"  # the log carries it, the TPM has no such bank
    SHA1_ONLY_LOG = "sha1-only-log"  # the log carries SHA-1 alone (TCG 1.2 format or a one-bank header)
    UNEXPLAINED_VALUES = "unexplained-values"  # PCRs whose value no event explains
    LOG_PARTIAL = "log-partial"  # the log was read only as far as it goes
    NOTHING_MEASURED = "nothing-measured"  # the log has events, no bank's PCRs 0-7 left their start values


HEALTH_TEXT = {
    Health.NEVER_EXTENDED: "allocated but never extended by the firmware: PCRs 0-7 hold their start values "
                           "while another bank has measurements; a policy on this bank enforces nothing",
    Health.NOT_IN_LOG: "allocated, but the event log carries no digests for it: its values cannot be checked",
    Health.NOT_ALLOCATED: "the event log carries it, but the TPM has no such bank",
    Health.SHA1_ONLY_LOG: "the event log carries SHA-1 digests only",
    Health.UNEXPLAINED_VALUES: "PCR values the log does not explain",
    Health.NOTHING_MEASURED: "no bank's PCRs 0-7 left their start values, yet the log has events: this TPM is "
                             "not the one the firmware measured into, or it was reset since",
    Health.LOG_PARTIAL: "the event log was read only up to a bad record: later PCR values may not match",
}


@dataclass
class PcrResult:
    bank: str
    pcr: int
    status: PcrStatus
    tpm: bytes | None
    replay: bytes | None
    events: int  # firmware events that extend it
    ima: int  # IMA entries that extend it
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"bank": self.bank, "pcr": self.pcr, "status": self.status.value,
                "tpm": self.tpm.hex() if self.tpm is not None else None,
                "replay": self.replay.hex() if self.replay is not None else None,
                "events": self.events, "ima_entries": self.ima, "reason": self.reason}


@dataclass
class BankHealth:
    bank: str
    verdict: Health
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"bank": self.bank, "verdict": self.verdict.value, "detail": self.detail}


@dataclass
class Report:
    results: list[PcrResult] = field(default_factory=list)
    health: list[BankHealth] = field(default_factory=list)

    def bank_matches(self) -> dict[str, bool]:
        """Per bank read from the TPM: whether every PCR the replay covers matches."""
        out: dict[str, bool] = {}
        for r in self.results:
            if r.status is not PcrStatus.NOT_READ:
                out[r.bank] = out.get(r.bank, True) and r.status is PcrStatus.MATCH
        return out


def compare(log: EventLog | None, ima: ImaList | None, rep: Replay, tpm: PcrValues | None) -> Report:
    out = Report()
    tpm_banks = list(tpm.allocated) if tpm is not None else []
    banks = list(dict.fromkeys(tpm_banks + rep.banks))
    locality = log.startup_locality if log is not None else None
    prefixes: dict[str, dict[int, tuple[int, int]]] = {}
    for bank in banks:
        values = tpm.values.get(bank, {}) if tpm is not None else {}
        for pcr in range(NUM_PCRS):
            actual = values.get(pcr)
            expected = rep.values[bank][pcr] if bank in rep.values else None
            nev = len(rep.events_by_pcr.get(pcr, ()))
            nima = rep.ima_by_pcr.get(pcr, 0)
            res = PcrResult(bank, pcr, PcrStatus.MATCH, actual, expected, nev, nima)
            if actual is None:
                if tpm is not None and bank in tpm.allocated:
                    continue  # a PCR the bank does not have
                res.status = PcrStatus.NOT_READ
                res.reason = "no TPM read" if tpm is None else "the TPM has no such bank"
            elif actual != expected and (bank, pcr) in rep.padded_match_at and (bank, pcr) not in rep.ima_match_at:
                k = rep.padded_match_at[(bank, pcr)]
                res.replay = rep.padded_values[(bank, pcr)]
                res.reason = (f"IMA extended this bank with SHA-1 template hashes padded with zeros (the kernel had "
                              f"no {bank} hash when IMA started); the replay up to IMA entry {k} of {nima} gives "
                              f"the TPM's value")
            elif log is None and ima is None:
                res.status = PcrStatus.NOT_REPLAYED
                res.reason = "no event log was read"
            elif expected is None:
                res.status = PcrStatus.NOT_REPLAYED
                res.reason = "the event log carries no digests for this bank"
            elif (bank, pcr) in rep.incomplete:
                res.status = PcrStatus.NOT_REPLAYED
                res.reason = rep.incomplete[(bank, pcr)]
            elif actual != expected and (bank, pcr) in rep.ima_match_at:
                k = rep.ima_match_at[(bank, pcr)]
                res.reason = (f"the TPM's value is the replay up to IMA entry {k} of {nima}: the later "
                              f"{nima - k} were measured after the PCRs were read")
            elif actual != expected:
                if log is not None and bank not in prefixes:
                    wanted = {p: v for p, v in values.items() if p < NUM_PCRS and v != rep.values[bank][p]}
                    prefixes[bank] = position(log, bank, wanted)
                at = prefixes.get(bank, {}).get(pcr) if log is not None else \
                    ((0, 0) if actual == initial(bank, pcr, locality) else None)
                if nima == 0 and at is not None:
                    k = at[0]
                    res.status = PcrStatus.BEHIND
                    res.reason = (f"the TPM holds the value after {k} of the log's {counted(nev, 'event')} for "
                                  f"PCR {pcr}: the last {nev - k} never reached it")
                else:
                    res.status = PcrStatus.UNEXPLAINED
                    what = counted(nev, "event") + (f" and {counted(nima, 'IMA entry', 'IMA entries')}" if nima else "")
                    res.reason = (f"no event explains this value: replaying {what} gives another; the PCR "
                                  f"was extended by something the log does not record"
                                  if nev or nima else
                                  f"no event in the log extends PCR {pcr}, yet it is not its start value")
            out.results.append(res)
    out.health = _health(log, rep, tpm, out.results) if log is not None or ima is not None else []
    return out


def _health(log: EventLog | None, rep: Replay, tpm: PcrValues | None, results: list[PcrResult]) -> list[BankHealth]:
    health: list[BankHealth] = []
    if log is not None:
        if log.banks == ["sha1"]:
            health.append(BankHealth("sha1", Health.SHA1_ONLY_LOG,
                                     f"{HEALTH_TEXT[Health.SHA1_ONLY_LOG]} ({log.format} format)"))
        if log.partial:
            health.append(BankHealth("*", Health.LOG_PARTIAL,
                                     f"{HEALTH_TEXT[Health.LOG_PARTIAL]}: byte {log.stop_offset}: {log.stop_reason}"))
    if tpm is None:
        return health
    locality = log.startup_locality if log is not None else None
    extended = {b for b, vals in tpm.values.items()
                if any(vals.get(p) not in (None, initial(b, p, locality)) for p in FIRMWARE_PCRS)}
    if not extended and log is not None and any(p in FIRMWARE_PCRS for p in rep.events_by_pcr):
        health.append(BankHealth("*", Health.NOTHING_MEASURED, HEALTH_TEXT[Health.NOTHING_MEASURED]))
    for bank in tpm.allocated:
        if extended and bank not in extended and tpm.values.get(bank):
            health.append(BankHealth(bank, Health.NEVER_EXTENDED,
                                     f"{HEALTH_TEXT[Health.NEVER_EXTENDED]} ({', '.join(sorted(extended))})"))
        if log is not None and bank not in rep.banks:
            health.append(BankHealth(bank, Health.NOT_IN_LOG, HEALTH_TEXT[Health.NOT_IN_LOG]))
        bad = [r.pcr for r in results if r.bank == bank and r.status in (PcrStatus.UNEXPLAINED, PcrStatus.BEHIND)]
        if bad:
            health.append(BankHealth(bank, Health.UNEXPLAINED_VALUES,
                                     f"{HEALTH_TEXT[Health.UNEXPLAINED_VALUES]}: PCR {', '.join(map(str, bad))}"))
    for bank in rep.banks:
        if bank not in tpm.allocated:
            health.append(BankHealth(bank, Health.NOT_ALLOCATED, HEALTH_TEXT[Health.NOT_ALLOCATED]))
    return health
