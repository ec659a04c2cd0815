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


UNSEAL_AFTER_AN_EXTEND = """set -e
tpm2_createprimary -Q -C o -g sha256 -G ecc -c primary.ctx
tpm2_load -Q -C primary.ctx -u pub -r priv -c obj.ctx
tpm2_flushcontext -t
tpm2_startauthsession --policy-session -S s.ctx
tpm2_policypcr -Q -S s.ctx -l sha256:16,23
tpm2_pcrextend 9:sha256=0909090909090909090909090909090909090909090909090909090909090909
tpm2_unseal -c obj.ctx -p session:s.ctx || { tpm2_flushcontext s.ctx; exit 3; }
"""


def test_an_unseal_after_an_extend_between_policy_and_use_names_its_token(tcp_swtpm, tmp_path):
    # clevis's sealed object (its jwk_pub and jwk_priv) loaded by tpm2-tools under clevis's
    # primary; PCR 9 extended between the PolicyPCR and the Unseal: 0x128 (PCR 9 moves the
    # update counter; 16 and 23 do not). A private swtpm: PCR 9 is nobody's here.
    import base64
    import json

    from tests.helpers.luks import luks_tokens

    img = make_image(tmp_path)
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16,23"})
    prot = luks_tokens(img)["0"]["jwe"]["protected"]
    pin = json.loads(base64.urlsafe_b64decode(prot + "=" * (-len(prot) % 4)))["clevis"]["tpm2"]
    for field, name in (("jwk_pub", "pub"), ("jwk_priv", "priv")):
        (tmp_path / name).write_bytes(base64.urlsafe_b64decode(pin[field] + "=" * (-len(pin[field]) % 4)))
    (tmp_path / "unseal.sh").write_text(UNSEAL_AFTER_AN_EXTEND)
    r = run_tpmtop("run", "-T", tcp_swtpm.tcti, "--luks", img, "--", "sh", "-c", f"cd {tmp_path} && sh unseal.sh",
                   timeout=300)
    assert r.returncode == 3, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "Unseal failed" in ln)
    assert (f"Unseal failed (0x128 tpm:error(2.0): PCR have changed since checked) on the sealed object of {img} "
            "token 0 (clevis-tpm2), bound to PCRs 16, 23 (sha256): a PCR was extended between its PolicyPCR and "
            "the Unseal") in line
    assert "PCR_Extend of PCR 9 by tpm2_pcrextend" in r.stderr  # the PCR_CHANGED report beside it
