"""The comparison: per PCR and bank, does the replay explain the TPM's value; per bank, is it
healthy. Each closed set is an enum here, and the text, the JSON and the exporter derive from it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tpmtop.pcrs.eventlog import EventLog
from tpmtop.pcrs.ima import ImaList
from tpmtop.pcrs.measurelog import MeasureLog
from tpmtop.pcrs.replay import NUM_PCRS, Replay, initial, position
from tpmtop.pcrs.tpmread import PcrValues
from tpmtop.textsafe import counted


class PcrStatus(enum.Enum):
    MATCH = "match"  # the replay gives the TPM's value
    BEHIND = "behind"  # the TPM holds the value after an earlier event: later events never reached it
    UNEXPLAINED = "unexplained"  # no prefix of the log gives the TPM's value
    NOT_REPLAYED = "not-replayed"  # no event log (nor IMA's list) was read
    NOT_READ = "not-read"  # no TPM was read (--no-tpm)
    NOT_IN_LOG = "not-in-log"  # the TPM has the bank, the log carries no digests for it: no verdict
    NOT_ON_TPM = "not-on-tpm"  # the log carries the bank, this TPM has no such bank
    NOT_JUDGED = "not-judged"  # an event extending this PCR carries no digest for the bank


# the statuses that judge a PCR (a bank matches when each of its judged PCRs does)
JUDGED = frozenset({PcrStatus.MATCH, PcrStatus.BEHIND, PcrStatus.UNEXPLAINED})


class Health(enum.Enum):
    NEVER_EXTENDED = "never-extended"  # the log extends PCRs of this bank, the TPM's are all at start values
    NOT_IN_LOG = "not-in-log"  # allocated, but the log carries no digests for it
    NOT_ALLOCATED = "not-allocated"  # the log carries it, the TPM has no such bank
    SHA1_ONLY_LOG = "sha1-only-log"  # the log carries SHA-1 alone (TCG 1.2 format or a one-bank header)
    UNEXPLAINED_VALUES = "unexplained-values"  # PCRs whose value no prefix of the log explains
    LOG_PARTIAL = "log-partial"  # the log was read only as far as it goes
    NOTHING_MEASURED = "nothing-measured"  # in every bank, none of the PCRs the log measures left its start value
    BEHIND_VALUES = "behind-values"  # PCRs the TPM holds at an earlier point of the log
    NOT_JUDGED = "not-judged"  # PCRs extended by events without this bank's digest


# the verdicts that fail the bank (exit status 1, gauge 0); the others are facts worth knowing
FAILING = frozenset({Health.NEVER_EXTENDED, Health.UNEXPLAINED_VALUES, Health.NOTHING_MEASURED,
                     Health.BEHIND_VALUES})


HEALTH_TEXT = {
    Health.NEVER_EXTENDED: "never extended: every PCR the log extends in this bank holds its start value "
                           "on the TPM; a policy on this bank enforces nothing",
    Health.NOT_IN_LOG: "allocated, but the event log carries no digests for it: its values are not judged",
    Health.NOT_ALLOCATED: "the event log carries it, but this TPM has no such bank",
    Health.SHA1_ONLY_LOG: "the event log carries SHA-1 digests only",
    Health.UNEXPLAINED_VALUES: "PCR values no prefix of the log explains",
    # {pcrs}: the PCRs the log measures, the only ones this verdict speaks of
    Health.NOTHING_MEASURED: "none of the PCRs the log measures ({pcrs}) left their start values in any bank, "
                             "yet the log has events: this TPM is not the one the firmware measured into, or it "
                             "was reset since",
    Health.LOG_PARTIAL: "the event log was read only up to a bad record: later PCR values may not match",
    Health.BEHIND_VALUES: "PCRs the TPM holds at an earlier point of the log: later events never reached it",
    Health.NOT_JUDGED: "PCRs extended by events without a digest for this bank: not judged",
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
    systemd: int = 0  # records of systemd's measure log that extend it

    def to_json(self) -> dict[str, Any]:
        return {"bank": self.bank, "pcr": self.pcr, "status": self.status.value,
                "tpm": self.tpm.hex() if self.tpm is not None else None,
                "replay": self.replay.hex() if self.replay is not None else None,
                "events": self.events, "ima_entries": self.ima, "systemd_records": self.systemd,
                "reason": self.reason}


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
        """Per bank both the log and the TPM carry, with a PCR judged: whether every judged PCR
        matches and no failing verdict names the bank. A bank only one side carries has no entry
        (neither a match nor an alarm)."""
        out: dict[str, bool] = {}
        for r in self.results:
            if r.status in JUDGED:
                out[r.bank] = out.get(r.bank, True) and r.status is PcrStatus.MATCH
        for h in self.health:
            if h.verdict in FAILING:
                for b in (out if h.bank == "*" else [h.bank]):
                    if b in out:
                        out[b] = False
        return out

    def failing(self) -> list[BankHealth]:
        """The verdicts that make ``tpmtop pcrs`` exit 1."""
        return [h for h in self.health if h.verdict in FAILING]


def compare(log: EventLog | None, ima: ImaList | None, rep: Replay, tpm: PcrValues | None,
            measure: MeasureLog | None = None) -> Report:
    out = Report()
    replayed_any = log is not None or ima is not None or measure is not None
    tpm_banks = list(tpm.allocated) if tpm is not None else []
    banks = list(dict.fromkeys(tpm_banks + rep.banks))
    locality = log.startup_locality if log is not None else None
    prefixes: dict[str, dict[int, tuple[int, int]]] = {}
    for bank in banks:
        values = tpm.values.get(bank, {}) if tpm is not None else {}
        on_tpm = tpm is not None and bank in tpm.allocated
        replayed = bank in rep.values
        for pcr in range(NUM_PCRS):
            actual = values.get(pcr)
            if on_tpm and actual is None:
                continue  # a PCR the bank does not have
            expected = rep.values[bank][pcr] if replayed else None
            nev = len(rep.events_by_pcr.get(pcr, ()))
            nima = rep.ima_by_pcr.get(pcr, 0)
            nsd = rep.measure_by_pcr.get(pcr, 0)
            res = PcrResult(bank, pcr, PcrStatus.MATCH, actual, expected, nev, nima, systemd=nsd)
            if tpm is None:
                res.status, res.reason = PcrStatus.NOT_READ, "no TPM read"
            elif not on_tpm:
                res.status = PcrStatus.NOT_ON_TPM
                res.reason = f"the event log carries {bank}; this TPM has no such bank"
            elif not replayed_any:
                res.status, res.reason = PcrStatus.NOT_REPLAYED, "no event log was read"
            elif not replayed or expected is None:
                res.status = PcrStatus.NOT_IN_LOG
                res.reason = f"the event log carries no {bank} digests: not judged"
            elif (bank, pcr) in rep.missing:
                res.status = PcrStatus.NOT_JUDGED
                res.reason = f"not judged: {rep.missing[(bank, pcr)]} carries no {bank} digest"
            elif actual != expected and (bank, pcr) in rep.padded_match_at and (bank, pcr) not in rep.ima_match_at:
                k = rep.padded_match_at[(bank, pcr)]
                res.replay = rep.padded_values[(bank, pcr)]
                res.reason = (f"IMA extended this bank with SHA-1 template hashes padded with zeros (the kernel had "
                              f"no {bank} hash when IMA started); the replay up to IMA entry {k} of {nima} gives "
                              f"the TPM's value")
            elif (bank, pcr) in rep.incomplete:
                res.status = PcrStatus.NOT_JUDGED
                res.reason = f"not judged: {rep.incomplete[(bank, pcr)]}"
            elif actual != expected and nima == 0 and (bank, pcr) in rep.measure_match_at:
                k = rep.measure_match_at[(bank, pcr)]
                res.reason = (f"the TPM's value is the replay up to systemd record {k} of {nsd} for PCR {pcr}: "
                              f"the later {nsd - k} were written after the PCRs were read")
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
                if nima == 0 and nsd == 0 and at is not None:
                    k = at[0]
                    res.status = PcrStatus.BEHIND
                    res.reason = (f"the TPM holds the value after {k} of the log's {counted(nev, 'event')} for "
                                  f"PCR {pcr}: the last {nev - k} never reached it")
                else:
                    res.status = PcrStatus.UNEXPLAINED
                    what = counted(nev, "event") + (f", {counted(nsd, 'systemd record')}" if nsd else "") + (
                        f" and {counted(nima, 'IMA entry', 'IMA entries')}" if nima else "")
                    res.reason = (f"no event explains this value: replaying {what} gives another; the PCR "
                                  f"was extended by something the log does not record"
                                  if nev or nima or nsd else
                                  f"no event in the log extends PCR {pcr}, yet it is not its start value")
            out.results.append(res)
    out.health = _health(log, rep, tpm, out.results) if replayed_any else []
    return out


def _pcr_list(pcrs: list[int]) -> str:
    return ", ".join(map(str, pcrs))


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
    both = [b for b in rep.banks if b in tpm.allocated]
    never: dict[str, list[int]] = {}  # bank -> the PCRs the log measures in it, all at start values
    if log is not None:
        for bank in both:
            pcrs = sorted(p for p in rep.events_by_pcr if (bank, p) not in rep.missing)
            vals = tpm.values.get(bank, {})
            if pcrs and all(vals.get(p) in (None, initial(bank, p), initial(bank, p, locality)) for p in pcrs):
                never[bank] = pcrs
    # the verdicts judge only the PCRs the log measures, and say which: a PCR outside them (16,
    # say) may have moved, and the table lists it, without contradicting the verdict
    if never and len(never) == len(both):
        measured = sorted({p for pcrs in never.values() for p in pcrs})
        health.append(BankHealth("*", Health.NOTHING_MEASURED,
                                 HEALTH_TEXT[Health.NOTHING_MEASURED].format(pcrs=_pcr_list(measured))))
    else:
        health += [BankHealth(b, Health.NEVER_EXTENDED, f"{HEALTH_TEXT[Health.NEVER_EXTENDED]} (PCR {_pcr_list(p)})")
                   for b, p in never.items()]
    for bank in tpm.allocated:
        if log is not None and bank not in rep.banks:
            health.append(BankHealth(bank, Health.NOT_IN_LOG, HEALTH_TEXT[Health.NOT_IN_LOG]))
        of_bank = [r for r in results if r.bank == bank]
        for status, verdict in ((PcrStatus.UNEXPLAINED, Health.UNEXPLAINED_VALUES),
                                (PcrStatus.BEHIND, Health.BEHIND_VALUES),
                                (PcrStatus.NOT_JUDGED, Health.NOT_JUDGED)):
            if verdict is Health.BEHIND_VALUES and bank in never:
                continue  # every PCR is behind: the never-extended verdict says it once
            bad = [r.pcr for r in of_bank if r.status is status]
            if bad:
                health.append(BankHealth(bank, verdict, f"{HEALTH_TEXT[verdict]}: PCR {_pcr_list(bad)}"))
    for bank in rep.banks:
        if bank not in tpm.allocated:
            health.append(BankHealth(bank, Health.NOT_ALLOCATED, HEALTH_TEXT[Health.NOT_ALLOCATED]))
    return health
