"""systemd's measure log (/run/log/systemd/tpm2-measure.log, CEL-JSON) replayed after the
firmware's events: PCRs 11 and 15, extended from user space where the firmware log cannot
record them, match the swtpm they were extended on, and without the measure log they are
unexplained (exit 1).

How the records were made. Debian's systemd 252 is what this machine has: it has
systemd-pcrphase but no systemd-pcrextend, and run against a private swtpm
(`systemd-pcrphase --tpm2-device=swtpm:host=127.0.0.1,port=P --bank=SHA256 WORD`) it says
"Kernel stub did not measure kernel image into PCR 11, skipping measurement", extends
nothing and writes no log (tried here, 2026-12-07). So the records below are written by
this test, in the shape systemd (253+) writes them, as documented in systemd's
docs/TPM2_PCR_MEASUREMENTS.md and the TCG Canonical Event Log's JSON encoding: one record per
line, each line opened by an ASCII record separator (RFC 7464), with "pcr", "digests" (a list
of {"hashAlg", "digest"} in hex, one per bank), "content_type": "systemd" and "content" with
the measured "string" and its "eventType". The digest of each word is the bank's hash of the
string systemd measures (the phase word, "machine-id:<id>"), and tpm2-tools extends exactly
those digests into the swtpm, as systemd would."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.helpers.pcrs import PCR_FIXTURES, boot, pcrextend
from tests.helpers.processes import TcpSwtpm, run_tpmtop

OVMF_LOG = PCR_FIXTURES / "ovmf" / "binary_bios_measurements"
BANKS = ("sha1", "sha256", "sha384", "sha512")
MEASURED = [(11, "phase", "enter-initrd"), (11, "phase", "leave-initrd"), (11, "phase", "sysinit"),
            (15, "machine-id", "machine-id:4c2d1bd3e9f6411b9b1f3a2e5c6d7e8f"), (11, "phase", "ready")]


def _record(pcr: int, kind: str, text: str) -> bytes:
    rec = {"pcr": pcr, "digests": [{"hashAlg": b, "digest": hashlib.new(b, text.encode()).hexdigest()} for b in BANKS],
           "content_type": "systemd",
           "content": {"string": text, "bootId": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "timestamp": 1765100000000000,
                       "eventType": kind}}
    return b"\x1e" + json.dumps(rec).encode() + b"\n"


@pytest.fixture
def swtpm():
    s = TcpSwtpm()
    yield s
    s.stop()


def test_a_measure_log_replay_of_pcrs_11_and_15_matches_the_swtpm(swtpm, tmp_path):
    boot(swtpm.tcti, OVMF_LOG.read_bytes())
    for pcr, _, text in MEASURED:
        pcrextend(swtpm.tcti, pcr, {b: hashlib.new(b, text.encode()).digest() for b in BANKS})
    mlog = tmp_path / "tpm2-measure.log"
    mlog.write_bytes(b"".join(_record(*m) for m in MEASURED))

    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--measure-log", str(mlog),
                   "--json", "--events")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    doc = json.loads(r.stdout)
    for pcr, n in ((11, 4), (15, 1)):
        rows = [x for x in doc["pcrs"] if x["pcr"] == pcr]
        assert {x["status"] for x in rows} == {"match"} and {x["systemd_records"] for x in rows} == {n}
        assert {x["bank"] for x in rows} == set(BANKS)
    assert all(doc["banks"].values())
    m = doc["measure_log"]
    assert m["records"] == 5 and m["banks"] == list(BANKS) and m["partial"] is False
    first = m["events"][0]
    assert (first["pcr"], first["source"], first["data"]) == (11, "systemd", "phase: enter-initrd")
    text = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--measure-log", str(mlog),
                      "--events").stdout
    assert "   3  15  systemd                          machine-id:" in text
    assert "machine-id: machine-id:4c2d1bd3" in " ".join(text.split())
    assert " 11  sha256  match             4" in text

    # without the measure log the same TPM's PCRs 11 and 15 are unexplained
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert {x["status"] for x in doc["pcrs"] if x["pcr"] in (11, 15)} == {"unexplained"}


def test_a_bad_measure_log_line_stops_there_and_a_missing_bank_is_not_judged(swtpm, tmp_path):
    word = "enter-initrd"
    pcrextend(swtpm.tcti, 11, {b: hashlib.new(b, word.encode()).digest() for b in BANKS})
    rec = json.loads(_record(11, "phase", word)[1:])
    rec["digests"] = [d for d in rec["digests"] if d["hashAlg"] != "sha384"]
    mlog = tmp_path / "tpm2-measure.log"
    mlog.write_bytes(b"\x1e" + json.dumps(rec).encode() + b"\n" + b"\x1e{not json\n")
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--measure-log", str(mlog), "--eventlog", str(tmp_path / "none"),
                   "--json")
    assert r.returncode == 2  # an explicit --eventlog that does not exist is bad input
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--measure-log", str(mlog), "--eventlog", str(OVMF_LOG), "--json")
    doc = json.loads(r.stdout)
    assert doc["measure_log"]["partial"] is True and doc["measure_log"]["stop_line"] == 2
    pcr11 = {x["bank"]: x for x in doc["pcrs"] if x["pcr"] == 11}
    assert pcr11["sha384"]["status"] == "not-judged"
    assert pcr11["sha384"]["reason"] == "not judged: systemd record 0 carries no sha384 digest"
    assert pcr11["sha256"]["status"] == "match"


def test_nv_indices_in_the_nvpcr_range_are_listed(swtpm, tmp_path):
    """An NV index of type extend at 0x01d10200 (systemd 259's first NvPCR), defined by
    tpm2-tools on the private swtpm, is listed by handle (reading it needs its auth); an index
    outside the range is not. With a measure-log record naming it, the record is counted."""
    import subprocess

    for index in ("0x01d10200", "0x01500001"):
        subprocess.run(["tpm2_nvdefine", "-T", swtpm.tcti, index, "-C", "o", "-s", "32", "-g", "sha256",
                        "-a", "nt=extend|ownerread|ownerwrite|authread|authwrite"],
                       check=True, capture_output=True, timeout=60)
    rec = {"nvIndex": 0x01D10200, "digests": [{"hashAlg": "sha256", "digest": hashlib.sha256(b"x").hexdigest()}],
           "content_type": "systemd", "content": {"string": "hardware", "eventType": "nvpcr-extend"}}
    mlog = tmp_path / "tpm2-measure.log"
    mlog.write_bytes(b"\x1e" + json.dumps(rec).encode() + b"\n")
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--measure-log", str(mlog), "--json")
    doc = json.loads(r.stdout)
    assert doc["tpm"]["nvpcr_indices"] == ["0x01d10200"]
    assert doc["measure_log"]["nvpcrs"] == {"0x01d10200": 1}
    text = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--measure-log", str(mlog)).stdout
    assert "NvPCRs     NV indices in systemd's NvPCR range on the TPM: 0x01d10200" in text
    assert "NvPCRs 0x01d10200 (1)" in text


def test_records_written_after_the_pcrs_were_read_are_a_longer_log_not_a_mismatch(swtpm, tmp_path):
    """tpmtop reads the PCRs, then the measure log; systemd appends a record after its extend,
    so a phase that ran in between leaves the log longer than the PCRs. The TPM's value is then
    a prefix of the replay: a match that says how many records came late, as for IMA's list.
    Here PCR 11's last record ("ready") is in the log but not yet extended."""
    boot(swtpm.tcti, OVMF_LOG.read_bytes())
    for pcr, _, text in MEASURED[:-1]:
        pcrextend(swtpm.tcti, pcr, {b: hashlib.new(b, text.encode()).digest() for b in BANKS})
    mlog = tmp_path / "tpm2-measure.log"
    mlog.write_bytes(b"".join(_record(*m) for m in MEASURED))
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--measure-log", str(mlog), "--json")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    pcr11 = [x for x in json.loads(r.stdout)["pcrs"] if x["pcr"] == 11]
    assert {x["status"] for x in pcr11} == {"match"}
    assert {x["reason"] for x in pcr11} == {"the TPM's value is the replay up to systemd record 3 of 4 for PCR 11: "
                                            "the later 1 were written after the PCRs were read"}


def test_a_record_the_tpm_never_saw_in_the_middle_is_still_unexplained(swtpm, tmp_path):
    """Must not fire: a log whose second record was never extended (the later ones were) is no
    prefix of anything the TPM holds: PCR 11 stays unexplained, exit 1."""
    boot(swtpm.tcti, OVMF_LOG.read_bytes())
    for i, (pcr, _, text) in enumerate(MEASURED):
        if i != 1:
            pcrextend(swtpm.tcti, pcr, {b: hashlib.new(b, text.encode()).digest() for b in BANKS})
    mlog = tmp_path / "tpm2-measure.log"
    mlog.write_bytes(b"".join(_record(*m) for m in MEASURED))
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG), "--measure-log", str(mlog), "--json")
    assert r.returncode == 1, r.stdout[-2000:]
    doc = json.loads(r.stdout)
    assert {x["status"] for x in doc["pcrs"] if x["pcr"] == 11} == {"unexplained"}
    assert {x["status"] for x in doc["pcrs"] if x["pcr"] == 15} == {"match"}
