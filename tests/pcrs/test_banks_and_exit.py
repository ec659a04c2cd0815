"""Issue 51: which banks are judged, and an exit status a script can gate on. Each log is made
here (tests/helpers/pcrs.build_log, the PC Client PFP crypto-agile format) and "booted" on a
private swtpm by tpm2-tools (tpm2_pcrextend); tpmtop only reads the TPM.

- a sha256-only log against a TPM whose sha1 bank something else extended: sha1 is "not in
  log" (no verdict, no alarm), sha256 matches, exit 0;
- a sha1+sha256 log against a TPM whose sha1 bank was never extended: a FAIL in bank health,
  sha1 never a match, the exporter's gauge 0 for sha1, exit 1;
- an event without a sha384 digest: that PCR is "not judged" in sha384, the others judged;
- exit 1 for each kind of mismatch (unexplained, behind, never extended, data against digest),
  exit 0 when every judged bank matches."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from tests.helpers.exporter import Exporter, value
from tests.helpers.pcrs import PCR_FIXTURES, boot, build_log, pcrextend
from tests.helpers.processes import TcpSwtpm, run_tpmtop
from tpmtop.pcrs import eventlog

EV_SEPARATOR, EV_EFI_ACTION, EV_POST_CODE = 0x4, 0x80000007, 0x1
OVMF_LOG = PCR_FIXTURES / "ovmf" / "binary_bios_measurements"


def _events(banks):
    """Events shaped like a firmware's: an action and separators in PCRs 0-7, a post code."""
    evs = [(0, EV_POST_CODE, b"ACPI DATA", None), (4, EV_EFI_ACTION, b"Calling EFI Application from Boot Option", None)]
    evs += [(p, EV_SEPARATOR, b"\0\0\0\0", None) for p in range(8)]
    return build_log(banks, evs)


@pytest.fixture
def swtpm():
    s = TcpSwtpm()
    yield s
    s.stop()


def _run(tpm, log_path, *more):
    r = run_tpmtop("pcrs", "-T", tpm.tcti, "--eventlog", str(log_path), *more)
    assert "Traceback" not in r.stderr
    return r


def _json(tpm, log_path, code):
    r = _run(tpm, log_path, "--json")
    assert r.returncode == code, (r.returncode, r.stderr, r.stdout[-3000:])
    return json.loads(r.stdout)


def _status(doc, bank, pcr):
    return next(r for r in doc["pcrs"] if r["bank"] == bank and r["pcr"] == pcr)


def test_a_sha256_only_log_leaves_an_extended_sha1_bank_not_in_log_and_exits_0(swtpm, tmp_path):
    log = tmp_path / "sha256-only.log"
    log.write_bytes(_events(["sha256"]))
    boot(swtpm.tcti, log.read_bytes())
    # something the log does not record extended sha1 (the firmware measured sha1 too, say)
    for p in range(9):
        pcrextend(swtpm.tcti, p, {"sha1": hashlib.sha1(b"firmware %d" % p).digest()})
    doc = _json(swtpm, log, 0)
    assert doc["banks"] == {"sha256": True}  # no verdict for sha1, neither match nor alarm
    assert {_status(doc, "sha1", p)["status"] for p in range(24)} == {"not-in-log"}
    assert {_status(doc, "sha256", p)["status"] for p in range(24)} == {"match"}
    assert ("sha1", "not-in-log") in {(h["bank"], h["verdict"]) for h in doc["health"]}
    assert not [h for h in doc["health"] if h["verdict"] in ("unexplained-values", "never-extended")]
    text = _run(swtpm, log).stdout
    assert "unexplained" not in text and "replay sha256: matches" in text
    assert "sha1    not-in-log" in text


def test_a_never_extended_sha1_bank_fails_in_health_gauge_and_exit_status(swtpm, tmp_path):
    raw = _events(["sha1", "sha256"])
    log = tmp_path / "sha1-sha256.log"
    log.write_bytes(raw)
    boot(swtpm.tcti, raw, banks={"sha256"})  # the firmware never extended sha1
    doc = _json(swtpm, log, 1)
    assert doc["banks"] == {"sha1": False, "sha256": True}
    assert ("sha1", "never-extended") in {(h["bank"], h["verdict"]) for h in doc["health"]}
    assert {_status(doc, "sha1", p)["status"] for p in range(8)} == {"behind"}
    text = _run(swtpm, log).stdout
    assert "FAIL sha1    never-extended" in text and "sha1: DOES NOT MATCH" in text
    # the exporter's gauge agrees: 0 for sha1, 1 for sha256
    log_dir = tmp_path / "root" / "sys" / "kernel" / "security" / "tpm0"
    log_dir.mkdir(parents=True)
    (log_dir / "binary_bios_measurements").write_bytes(raw)
    exp = Exporter("--no-kernel", "--probe", "10", "--root", str(tmp_path / "root"), "-T", swtpm.tcti)
    try:
        deadline = time.monotonic() + 120
        while "tpmtop_pcr_replay_matches{" not in (metrics := exp.scrape()[1]):
            assert time.monotonic() < deadline, metrics[-2000:]
            time.sleep(0.2)
        assert value(metrics, "tpmtop_pcr_replay_matches", bank="sha1") == 0.0
        assert value(metrics, "tpmtop_pcr_replay_matches", bank="sha256") == 1.0
        assert 'tpmtop_pcr_replay_matches{bank="sha384"}' not in metrics  # not in the log: no series
    finally:
        exp.stop()


def test_an_event_without_a_sha384_digest_leaves_its_pcr_not_judged(swtpm, tmp_path):
    banks = ["sha256", "sha384"]
    events = [(7, EV_EFI_ACTION, b"one", None),
              (7, EV_EFI_ACTION, b"two", {"sha256": hashlib.sha256(b"two").digest()}),  # no sha384
              (4, EV_EFI_ACTION, b"three", None)]
    raw = build_log(banks, events)
    log = tmp_path / "short.log"
    log.write_bytes(raw)
    boot(swtpm.tcti, raw)
    doc = _json(swtpm, log, 0)
    pcr7 = _status(doc, "sha384", 7)
    assert pcr7["status"] == "not-judged" and pcr7["reason"] == "not judged: event 2 carries no sha384 digest"
    assert _status(doc, "sha256", 7)["status"] == "match" and _status(doc, "sha384", 4)["status"] == "match"
    assert doc["banks"] == {"sha256": True, "sha384": True}
    at = eventlog.parse(raw).events[2].offset
    assert doc["eventlog"]["notes"] == [f"1 event carries fewer banks than the header lists (first: event 2 "
                                        f"(byte {at}) carries sha256); the PCRs they extend are not judged in "
                                        f"the banks they lack"]


def test_every_bank_matching_exits_0_and_each_mismatch_kind_exits_1(swtpm, tmp_path):
    raw = OVMF_LOG.read_bytes()
    boot(swtpm.tcti, raw)
    assert _run(swtpm, OVMF_LOG).returncode == 0
    # behind: the log has one more event than the TPM got
    extra = eventlog.parse(raw).events[-1]
    longer = tmp_path / "longer.log"
    longer.write_bytes(raw + raw[extra.offset:])
    doc = _json(swtpm, longer, 1)
    assert _status(doc, "sha256", extra.pcr)["status"] == "behind"
    assert {(h["bank"], h["verdict"]) for h in doc["health"]} >= {("sha256", "behind-values")}
    assert not [h for h in doc["health"] if h["verdict"] == "unexplained-values"]  # behind is not unexplained
    # unexplained: an extend the log does not record
    pcrextend(swtpm.tcti, 9, {"sha256": b"\x09" * 32})
    doc = _json(swtpm, OVMF_LOG, 1)
    assert _status(doc, "sha256", 9)["status"] == "unexplained"
    assert doc["banks"]["sha256"] is False and doc["banks"]["sha1"] is True


def test_crafted_headers_and_counts_are_exit_2_or_one_counted_note(tmp_path):
    """issue 50 item 7: a header listing sha256 sixteen times was an internal error; 20,000
    events carrying fewer banks than the header were 20,000 notes."""
    dup = tmp_path / "dup.log"
    dup.write_bytes(build_log(["sha256"] * 16, [(0, EV_SEPARATOR, b"\0\0\0\0", None)]))
    r = run_tpmtop("pcrs", "--no-tpm", "--eventlog", str(dup))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "the Spec ID header lists sha256 more than once" in r.stderr
    short = {"sha256": hashlib.sha256(b"x").digest()}
    many = tmp_path / "many.log"
    many.write_bytes(build_log(["sha256", "sha384"], [(1, EV_EFI_ACTION, b"x", short)] * 20_000))
    r = run_tpmtop("pcrs", "--no-tpm", "--eventlog", str(many), "--json")
    assert r.returncode == 0, r.stderr
    notes = json.loads(r.stdout)["eventlog"]["notes"]
    assert len(notes) == 1 and notes[0].startswith("20000 events carry fewer banks than the header")
