"""Through `tpmtop run`: clevis (its tpm2-tools: tpm2_load, then tpm2_unseal from the saved
context) unlocks the image while the PCRs are as sealed, and after PCR 16 moved its Unseal
fails with 0x99d — and tpmtop names the LUKS2 token whose sealed object that was, and (from the
PCR_Read tpm2_unseal sent first) the PCR that differs."""

from __future__ import annotations

from tests.helpers.luks import enroll_clevis, make_image
from tests.helpers.pcrs import pcrextend
from tests.helpers.processes import run_tpmtop


def test_a_failing_unseal_names_its_token(tcp_swtpm, tmp_path):
    img = make_image(tmp_path)
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16,23"})
    unlock = ["run", "-T", tcp_swtpm.tcti, "--luks", img, "--", "clevis", "luks", "pass", "-d", img, "-s", "1"]
    r = run_tpmtop(*unlock, timeout=300)
    assert r.returncode == 0, r.stderr  # clevis printed the passphrase: nothing to name
    assert "Unseal failed" not in r.stderr

    pcrextend(tcp_swtpm.tcti, 16, {"sha256": bytes(range(32))})
    r = run_tpmtop(*unlock, timeout=300)
    assert r.returncode != 0
    assert "error: Unseal: 1× 0x99d" in r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "Unseal failed" in ln)
    assert line.startswith("tpmtop proxy: client ") and "tpm2_unseal" in line
    assert (f"Unseal failed (0x99d tpm:session(1):a policy check failed) on the sealed object of {img} "
            "token 0 (clevis-tpm2), bound to PCRs 16, 23 (sha256): PCR 16 (sha256) differs (the values the TPM "
            "last answered a PCR_Read through tpmtop)") in line


def test_an_unseal_of_an_object_no_token_holds_names_nothing(tcp_swtpm, tmp_path):
    img = make_image(tmp_path)
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16"})
    other = make_image(tmp_path, "other.img")  # the watch is given a device without that token
    pcrextend(tcp_swtpm.tcti, 16, {"sha256": bytes(range(32))})
    r = run_tpmtop("run", "-T", tcp_swtpm.tcti, "--luks", other, "--", "clevis", "luks", "pass", "-d", img,
                   "-s", "1", timeout=300)
    assert r.returncode != 0 and "error: Unseal: 1× 0x99d" in r.stderr
    assert "Unseal failed" not in r.stderr
