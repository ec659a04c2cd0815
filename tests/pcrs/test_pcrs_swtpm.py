"""`tpmtop pcrs` against private swtpms whose PCRs tpm2-tools extended (tpm2_pcrextend over the
swtpm's socket; tpmtop only reads): the log's events → every PCR matches; one more extend of
PCR 9 → PCR 9 unexplained in each bank; a bank the "firmware" never extended → its verdict;
a saved snapshot, then a boot whose kernel image changed → --diff names the PCR and the event."""

from __future__ import annotations

import json
import struct

import pytest

from tests.helpers.pcrs import PCR_FIXTURES, pcrextend
from tests.helpers.processes import TcpSwtpm, run_tpmtop
from tpmtop.pcrs import eventlog

OVMF_LOG = PCR_FIXTURES / "ovmf" / "binary_bios_measurements"
BANKS = {"sha1", "sha256", "sha384", "sha512"}


@pytest.fixture
def swtpm():
    s = TcpSwtpm()
    yield s
    s.stop()


def _boot(tpm: TcpSwtpm, log_path, banks=None) -> None:
    """What the firmware did: extend every event of the log, with tpm2-tools."""
    for ev in eventlog.parse_file(str(log_path)).events:
        if ev.type == eventlog.EV_NO_ACTION:
            continue
        pcrextend(tpm.tcti, ev.pcr, {b: d for b, d in ev.digests.items() if banks is None or b in banks})


def _pcrs(tpm: TcpSwtpm, *args, env=None, code=0) -> dict:
    r = run_tpmtop("pcrs", "-T", tpm.tcti, "--eventlog", str(args[0]), "--json", *args[1:], env=env)
    assert r.returncode == code, r.stderr
    return json.loads(r.stdout)


def test_every_pcr_matches_then_an_extra_extend_of_pcr_9_is_named(swtpm):
    _boot(swtpm, OVMF_LOG)
    doc = _pcrs(swtpm, OVMF_LOG)
    assert set(doc["banks"]) == BANKS and all(doc["banks"].values()), doc["banks"]
    assert {r["status"] for r in doc["pcrs"]} == {"match"}
    assert doc["health"] == []
    assert doc["update_counter"] > 0

    pcrextend(swtpm.tcti, 9, {"sha1": b"\x09" * 20, "sha256": b"\x09" * 32, "sha384": b"\x09" * 48,
                              "sha512": b"\x09" * 64})
    doc = _pcrs(swtpm, OVMF_LOG, code=1)
    bad = {(r["bank"], r["pcr"]) for r in doc["pcrs"] if r["status"] != "match"}
    assert bad == {(b, 9) for b in BANKS}
    assert {r["status"] for r in doc["pcrs"] if r["pcr"] == 9} == {"unexplained"}
    assert not any(doc["banks"].values())
    verdicts = {(h["bank"], h["verdict"]) for h in doc["health"]}
    assert verdicts == {(b, "unexplained-values") for b in BANKS}
    text = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(OVMF_LOG)).stdout
    # prose wraps at 80 columns: the reason is read with its line breaks as spaces
    assert "  9  sha256  unexplained" in text
    assert "was extended by something the log does not record" in " ".join(text.split())


def test_a_bank_the_firmware_never_extended_gets_its_verdict(swtpm):
    _boot(swtpm, OVMF_LOG, banks={"sha256"})
    doc = _pcrs(swtpm, OVMF_LOG, code=1)
    never = {h["bank"] for h in doc["health"] if h["verdict"] == "never-extended"}
    assert never == {"sha1", "sha384", "sha512"}
    assert doc["banks"]["sha256"] is True and doc["banks"]["sha1"] is False
    # the log carries sha1 digests the TPM never got: the TPM is behind, at event 0 of n
    pcr7 = next(r for r in doc["pcrs"] if r["bank"] == "sha1" and r["pcr"] == 7)
    assert pcr7["status"] == "behind" and "after 0 of the log's 6 events for PCR 7" in pcr7["reason"]


def _kernel_changed(tmp_path):
    """The OVMF log with the kernel image's digests changed (a new kernel at the same path)."""
    log = eventlog.parse_file(str(OVMF_LOG))
    ev = next(e for e in log.events if e.type == 0x80000003)
    buf = bytearray(OVMF_LOG.read_bytes())
    p = ev.offset + 12
    for d in ev.digests.values():
        p += 2
        buf[p:p + len(d)] = bytes(b ^ 0xFF for b in d)
        p += len(d)
    assert struct.unpack_from("<I", buf, p)[0] == len(ev.data)
    out = tmp_path / "new-kernel.log"
    out.write_bytes(bytes(buf))
    return out


def test_save_then_diff_names_the_pcr_and_the_changed_event(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    first = TcpSwtpm()
    try:
        _boot(first, OVMF_LOG)
        r = run_tpmtop("pcrs", "-T", first.tcti, "--eventlog", str(OVMF_LOG), "--save", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        first.stop()
    saved = list((tmp_path / "data" / "tpmtop" / "pcrs").glob("pcrs-*.json"))
    assert len(saved) == 1
    new_log = _kernel_changed(tmp_path)
    second = TcpSwtpm()
    try:
        _boot(second, new_log)
        doc = _pcrs(second, new_log, "--diff", env=env)
        text = run_tpmtop("pcrs", "-T", second.tcti, "--eventlog", str(new_log), "--diff", env=env).stdout
    finally:
        second.stop()
    assert [p["pcr"] for p in doc["diff"]["pcrs"]] == [4]
    pcr4 = doc["diff"]["pcrs"][0]
    assert set(pcr4["banks"]) == BANKS
    changes = [(c["change"], c["type"]) for c in pcr4["events"]]
    assert changes == [("digest changed", "EV_EFI_BOOT_SERVICES_APPLICATION")]
    assert pcr4["events"][0]["data"].endswith("/File(kernel)")
    assert "PCR 4: value changed" in text and "digest changed: EV_EFI_BOOT_SERVICES_APPLICATION" in text


def test_exporter_gauge_says_per_bank_whether_the_log_replays(swtpm, tmp_path):
    """`tpmtop exporter --probe` with a root whose securityfs holds the OVMF log: 1 per bank
    while the TPM holds the log's values, 0 after one more extend of PCR 9."""
    import time

    from tests.helpers.exporter import Exporter, value

    log_dir = tmp_path / "root" / "sys" / "kernel" / "security" / "tpm0"
    log_dir.mkdir(parents=True)
    (log_dir / "binary_bios_measurements").write_bytes(OVMF_LOG.read_bytes())
    _boot(swtpm, OVMF_LOG)
    exp = Exporter("--no-kernel", "--probe", "10", "--root", str(tmp_path / "root"), "-T", swtpm.tcti)
    try:
        def served(cond):
            deadline = time.monotonic() + 120
            while True:
                text = exp.scrape()[1]
                if cond(text):
                    return text
                assert time.monotonic() < deadline, text[-2000:]
                time.sleep(0.2)

        text = served(lambda t: "tpmtop_pcr_replay_matches{" in t)
        assert {b: value(text, "tpmtop_pcr_replay_matches", bank=b) for b in BANKS} == {b: 1.0 for b in BANKS}
        pcrextend(swtpm.tcti, 9, {"sha256": b"\x09" * 32})
        text = served(lambda t: 'tpmtop_pcr_replay_matches{bank="sha256"} 0.0' in t)
        assert value(text, "tpmtop_pcr_replay_matches", bank="sha1") == 1.0  # only sha256 was extended
    finally:
        exp.stop()


def test_the_save_unit_verifies(tmp_path):
    """contrib/systemd/tpmtop-pcrs-save.service passes `systemd-analyze verify` (ExecStart
    pointed at this venv's tpmtop) and saves read-only."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers.paths import REPO

    unit = (REPO / "contrib" / "systemd" / "tpmtop-pcrs-save.service").read_text()
    assert "ExecStart=/usr/local/bin/tpmtop pcrs --read-only --save --snapshot-dir /var/lib/tpmtop/pcrs" in unit
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    here = tmp_path / "tpmtop-pcrs-save.service"
    here.write_text(unit.replace("/usr/local/bin/tpmtop", str(Path(sys.executable).with_name("tpmtop"))))
    r = subprocess.run([tool, "verify", str(here)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


SEABIOS_LOG = PCR_FIXTURES / "seabios" / "binary_bios_measurements"
_PCR16 = {"sha1": b"\x16" * 20, "sha256": b"\x16" * 32, "sha384": b"\x16" * 48, "sha512": b"\x16" * 64}


def _row(text: str, pcr: int, bank: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:2] == [str(pcr), bank])


def test_without_a_log_text_and_json_give_pcr_16_the_same_status_word(swtpm):
    pcrextend(swtpm.tcti, 16, _PCR16)
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--json")
    assert r.returncode == 0, r.stderr
    status = next(p["status"] for p in json.loads(r.stdout)["pcrs"] if p["bank"] == "sha256" and p["pcr"] == 16)
    assert status == "not-replayed"
    r = run_tpmtop("pcrs", "-T", swtpm.tcti)
    assert r.returncode == 0, r.stderr
    assert _row(r.stdout, 16, "sha256")[2] == status


def test_nothing_measured_names_the_pcrs_the_log_measures_not_pcr_16(swtpm):
    """A fresh TPM with PCR 16 extended, against SeaBIOS's log (PCRs 0-7): PCR 16 is
    unexplained in the table, and the bank-health line speaks only of the log's PCRs."""
    pcrextend(swtpm.tcti, 16, _PCR16)
    measured = sorted({e.pcr for e in eventlog.parse_file(str(SEABIOS_LOG)).events})
    assert 16 not in measured
    doc = _pcrs(swtpm, SEABIOS_LOG, code=1)
    assert next(p["status"] for p in doc["pcrs"] if p["bank"] == "sha256" and p["pcr"] == 16) == "unexplained"
    nothing = [h["detail"] for h in doc["health"] if h["verdict"] == "nothing-measured"]
    assert len(nothing) == 1
    assert "no bank's PCRs" not in nothing[0]
    assert nothing[0].startswith(f"none of the PCRs the log measures ({', '.join(map(str, measured))}) left "
                                 "their start values in any bank")
    text = " ".join(run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(SEABIOS_LOG)).stdout.split())
    assert "16 sha256 unexplained" in text
    assert f"none of the PCRs the log measures ({', '.join(map(str, measured))}) left" in text
