"""The real firmware logs (tests/fixtures/pcrs, made here under qemu): tpmtop's replay gives
tpm2_eventlog's PCR values for every bank, and the guest TPM's PCR_Read values."""

from __future__ import annotations

import json

import pytest

from tests.helpers.pcrs import FIRMWARES, PCR_FIXTURES, eventlog_pcrs, guest_pcrs
from tests.helpers.processes import run_tpmtop
from tpmtop.pcrs import eventlog, ima, replay


def _replay_json(path) -> dict[str, dict[int, bytes]]:
    r = run_tpmtop("pcrs", "--eventlog", str(path), "--no-tpm", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["eventlog"]["partial"] is False
    return {bank: {int(p): bytes.fromhex(v) for p, v in vals.items()} for bank, vals in doc["replay"].items()}


@pytest.mark.parametrize("firmware", FIRMWARES)
def test_replay_equals_tpm2_eventlog_every_bank(firmware):
    log = PCR_FIXTURES / firmware / "binary_bios_measurements"
    ours = _replay_json(log)
    theirs = eventlog_pcrs(log)
    assert set(theirs) == set(ours) == {"sha1", "sha256", "sha384", "sha512"}
    for bank, pcrs in theirs.items():
        assert pcrs, bank
        for pcr, value in pcrs.items():
            assert ours[bank][pcr] == value, (firmware, bank, pcr)


@pytest.mark.parametrize("firmware", FIRMWARES)
def test_replay_equals_the_guest_tpm(firmware):
    """PCRs 0-9 (the firmware's and the EFI stub's) as the guest read them, every bank."""
    ours = _replay_json(PCR_FIXTURES / firmware / "binary_bios_measurements")
    guest = guest_pcrs(firmware)
    assert set(guest) == set(ours)
    extended = {pcr for bank in guest for pcr in range(10) if guest[bank][pcr] != bytes(len(guest[bank][pcr]))}
    assert set(range(8)) <= extended
    for bank, values in guest.items():
        for pcr in range(10):
            assert ours[bank][pcr] == values[pcr], (firmware, bank, pcr)


@pytest.mark.parametrize("firmware", FIRMWARES)
@pytest.mark.parametrize("listing", ["ascii_runtime_measurements", "binary_runtime_measurements"])
def test_ima_list_explains_pcr_10(firmware, listing):
    """IMA's list, read after the PCRs, holds PCR 10's value as one of its prefixes: SHA-1 from
    either list, SHA-256 from the binary one (its template data hashed again); SHA-384 and
    SHA-512 from the padded SHA-1 digests (the guest kernel had no sha384/sha512 module when IMA
    started, so it extended those banks with SHA-1 template hashes padded with zeros)."""
    folder = PCR_FIXTURES / firmware
    log = eventlog.parse_file(str(folder / "binary_bios_measurements"))
    lst = ima.read(str(folder / listing))
    guest = guest_pcrs(firmware)
    rep = replay.replay(log, lst, list(guest), guest)
    assert len(lst.entries) > 10 and lst.stop_reason is None
    direct = {bank for (bank, pcr) in rep.ima_match_at if pcr == 10}
    padded = {bank for (bank, pcr) in rep.padded_match_at if pcr == 10}
    assert direct == ({"sha1"} if listing.startswith("ascii") else {"sha1", "sha256"})
    assert padded == {"sha384", "sha512"}
    k = rep.ima_match_at[("sha1", 10)]
    assert 0 < k < len(lst.entries)  # the entries after k are the cp that copied the list


def test_ovmf_events_decoded():
    r = run_tpmtop("pcrs", "--eventlog", str(PCR_FIXTURES / "ovmf" / "binary_bios_measurements"),
                   "--no-tpm", "--json", "--events")
    events = json.loads(r.stdout)["events"]
    text = {(e["type"], e["data"]) for e in events}
    assert ("EV_EFI_VARIABLE_DRIVER_CONFIG",
            "SecureBoot {8be4df61-93ca-11d2-aa0d-00e098032b8c (EFI global variable)} = 00") in text
    assert ("EV_EFI_VARIABLE_BOOT",
            "BootOrder {8be4df61-93ca-11d2-aa0d-00e098032b8c (EFI global variable)} = Boot0000") in text
    assert ("EV_EFI_ACTION", "Exit Boot Services Invocation") in text
    assert any(t == "EV_EFI_BOOT_SERVICES_APPLICATION" and d.endswith("/File(kernel)") for t, d in text)
    assert sum(t == "EV_SEPARATOR" and d == "separator" for t, d in text) == 1  # the set dedups 8 of them
    assert sum(e["type"] == "EV_SEPARATOR" for e in events) == 8
