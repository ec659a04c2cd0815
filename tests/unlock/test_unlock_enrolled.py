"""`tpmtop unlock` on LUKS2 images whose tokens systemd-cryptenroll and clevis enrolled against
a private swtpm: the verdicts before and after tpm2-tools extends PCR 16, the software policy
digest held to what the tools sealed, and the tokens that need more than the PCRs."""

from __future__ import annotations

import json
import subprocess

from tests.helpers.luks import (
    clevis_auth_policy,
    enroll_clevis,
    enroll_systemd,
    file_digest,
    import_token,
    luks_tokens,
    make_image,
)
from tests.helpers.pcrs import pcrextend
from tests.helpers.processes import run_tpmtop


def _unlock(*args: str) -> subprocess.CompletedProcess:
    return run_tpmtop("unlock", *args, timeout=300)


def _by_token(doc: dict) -> dict:
    (dev,) = doc["devices"]
    return {t["token"]: t for t in dev["tokens"]}


def test_both_tools_tokens_unseal_then_pcr_16_moves_and_each_names_it(tcp_swtpm, tmp_path):
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=16")
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16,23"})
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=23")
    peer = luks_tokens(img)
    assert [peer[k]["type"] for k in sorted(peer)] == ["systemd-tpm2", "clevis", "systemd-tpm2"]
    snap = tmp_path / "snap.json"
    r = run_tpmtop("pcrs", "-T", tcp_swtpm.tcti, "--save", str(snap))
    assert snap.exists(), r.stderr
    before = file_digest(img)

    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json", "--trial")
    assert r.returncode == 0, r.stderr
    toks = _by_token(json.loads(r.stdout))
    assert {k: t["verdict"] for k, t in toks.items()} == {"0": "would-unseal", "1": "would-unseal",
                                                           "2": "would-unseal"}
    # the software digest is what each tool sealed to, and what the TPM itself computes
    assert toks["0"]["software_digest"] == peer["0"]["tpm2-policy-hash"]
    assert toks["2"]["software_digest"] == peer["2"]["tpm2-policy-hash"]
    assert toks["1"]["software_digest"] == clevis_auth_policy(peer["1"])
    assert all(t["trial_digest"] == t["software_digest"] for t in toks.values())
    assert (toks["1"]["kind"], toks["1"]["pcrs"], toks["1"]["bank"]) == ("clevis-tpm2", [16, 23], "sha256")

    pcrextend(tcp_swtpm.tcti, 16, {"sha256": bytes(range(32))})
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--since", str(snap))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    # 80 columns, but the device's path is printed whole (under xdist a tmp path alone is longer)
    assert all(len(line) <= 80 for line in lines if line != str(img)), r.stdout
    assert "would not: PCR 16 (sha256) differs" in lines[lines.index(
        "  token 0 (systemd-tpm2) keyslot 1, PCR 16 (sha256):") + 1]
    assert "would not: PCR 16 (sha256) differs" in lines[lines.index(
        "  token 1 (clevis-tpm2) keyslot 2, PCRs 16, 23 (sha256):") + 1]
    assert "would unseal now" in lines[lines.index("  token 2 (systemd-tpm2) keyslot 3, PCR 23 (sha256):") + 1]
    assert r.stdout.count("    PCR 16 moved since the snapshot: extended outside the log\n") == 2

    r = _unlock(img, "-T", tcp_swtpm.tcti, "--since", str(snap), "--json", "--trial")
    toks = _by_token(json.loads(r.stdout))
    assert [(t["verdict"], t["differs"]) for t in toks.values()] == [
        ("would-not", [16]), ("would-not", [16]), ("would-unseal", [])]
    assert all(t["trial_digest"] == t["software_digest"] for t in toks.values())
    assert toks["0"]["software_digest"] != peer["0"]["tpm2-policy-hash"]
    assert set(toks["0"]["moved"]) == set(toks["1"]["moved"]) == {"16"} and toks["2"]["moved"] == {}
    assert file_digest(img) == before  # read, never written


def _key_fingerprint(pem) -> str:
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", str(pem), "-outform", "DER"], check=True,
                         capture_output=True, timeout=60).stdout
    import hashlib

    return "sha256:" + hashlib.sha256(der).hexdigest()[:16]


def test_signed_policy_and_pin_tokens_are_never_would_unseal(tcp_swtpm, tmp_path):
    img = make_image(tmp_path)
    priv, pub = tmp_path / "priv.pem", tmp_path / "pub.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(priv), "2048"], check=True, capture_output=True, timeout=120)
    subprocess.run(["openssl", "rsa", "-in", str(priv), "-pubout", "-out", str(pub)], check=True,
                   capture_output=True, timeout=60)
    enroll_systemd(img, tcp_swtpm.tcti, f"--tpm2-public-key={pub}", "--tpm2-public-key-pcrs=11", "--tpm2-pcrs=23")
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=23", "--tpm2-with-pin=yes", env={"NEWPIN": "4711"})
    enroll_clevis(img, tcp_swtpm.tcti, "sss", {"t": 1, "pins": {"tpm2": [{"pcr_bank": "sha256", "pcr_ids": "23"}]}})
    # a clevis token whose JWE is not base64url: reported and skipped, the others still judged
    import_token(img, {"type": "clevis", "keyslots": [], "jwe": {"protected": "%%not*base64%%", "ciphertext": "",
                                                                  "iv": "", "tag": "", "encrypted_key": ""}})
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json")
    assert r.returncode == 0, r.stderr
    toks = _by_token(json.loads(r.stdout))
    assert toks["0"]["verdict"] == "cannot-judge" and toks["0"]["signed_policy"]
    assert toks["0"]["reason"] == (f"signed policy: PCR 11 (sha256) by signature of key {_key_fingerprint(pub)}; "
                                   "also bound to PCR 23 (sha256)")
    assert toks["1"]["verdict"] == "cannot-judge" and toks["1"]["pin"]
    assert toks["1"]["reason"] == "a PIN is also needed (PCR 23 (sha256) as sealed)"
    assert toks["1"]["software_digest"] == luks_tokens(img)["1"]["tpm2-policy-hash"]
    assert (toks["2/sss[0]"]["kind"], toks["2/sss[0]"]["verdict"]) == ("clevis-tpm2", "would-unseal")
    assert toks["3"]["verdict"] == "unreadable" and "not base64url" in toks["3"]["reason"]

    pcrextend(tcp_swtpm.tcti, 23, {"sha256": bytes(32)})
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json")
    assert r.returncode == 1, r.stderr
    toks = _by_token(json.loads(r.stdout))
    assert toks["0"]["verdict"] == "cannot-judge"  # what a signature allows is not known here
    assert (toks["1"]["verdict"], toks["1"]["differs"]) == ("would-not", [23])  # a PIN cannot help
    assert (toks["2/sss[0]"]["verdict"], toks["2/sss[0]"]["differs"]) == ("would-not", [23])


def test_a_pcrlock_token_cannot_be_judged_here(tcp_swtpm, tmp_path):
    # systemd 252 cannot enroll a pcrlock policy (systemd 255 can): the real token systemd-cryptenroll
    # made here, with the field systemd 255+ sets for one (tpm2_pcrlock), imported by cryptsetup
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=23")
    import_token(img, dict(luks_tokens(img)["0"], tpm2_pcrlock=True))
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json")
    assert r.returncode == 0, r.stderr
    toks = _by_token(json.loads(r.stdout))
    assert toks["0"]["verdict"] == "would-unseal"
    assert toks["1"]["verdict"] == "cannot-judge" and toks["1"]["reason"].startswith("a pcrlock policy")


def test_no_argument_judges_the_devices_crypttab_names(tmp_path):
    from tpmtop.unlock.report import discover

    img = make_image(tmp_path)
    tab = tmp_path / "crypttab"
    tab.write_text(f"# name device key options\nhome {img} none luks,tpm2-device=auto\nbroken\n")
    assert discover(str(tab), str(tmp_path / "no-sys-block")) == [img]


def test_tokens_bound_to_no_pcr_would_unseal_whatever_moves(tcp_swtpm, tmp_path):
    # systemd seals with PolicyPCR over no PCR (its policy hash all zeros); clevis without pcr_ids
    # seals with no policy at all (an empty authPolicy)
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=")
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {})
    pcrextend(tcp_swtpm.tcti, 16, {"sha256": bytes(range(32))})
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json")
    assert r.returncode == 0, r.stderr
    toks = _by_token(json.loads(r.stdout))
    assert [(t["verdict"], t["pcrs"]) for t in toks.values()] == [("would-unseal", []), ("would-unseal", [])]
    assert toks["0"]["sealed_digest"] == "00" * 32 and toks["1"]["sealed_digest"] == ""


def test_sealed_to_values_tpmtop_cannot_see_names_every_bound_pcr_as_a_possible_cause(tcp_swtpm, tmp_path):
    # PCRs 16 and 23 moved before the enrollment, then 16 again: neither the live nor the reset
    # values reproduce the sealed digest, and there is no snapshot
    img = make_image(tmp_path)
    for pcr in (16, 23):
        pcrextend(tcp_swtpm.tcti, pcr, {"sha256": bytes([pcr]) * 32})
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16,23"})
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=16")
    pcrextend(tcp_swtpm.tcti, 16, {"sha256": bytes(range(32))})
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json")
    assert r.returncode == 1, r.stderr
    toks = _by_token(json.loads(r.stdout))
    assert (toks["0"]["verdict"], toks["0"]["differs"]) == ("would-not", [16, 23])
    assert toks["0"]["reason"] == ("PCRs 16, 23 (sha256) are not the values it was sealed to (the token records only "
                                   "their digest: any of them could be the cause)")
    assert (toks["1"]["reason"], toks["1"]["differs"]) == ("PCR 16 (sha256) differs", [16])


def test_on_another_tpm_the_verdict_says_which_tpm_made_the_object_is_not_checked(tcp_swtpm, tmp_path):
    # sealed on one swtpm, judged on a --sim one whose PCRs 16 and 23 are also at their reset
    # values: the policy holds there too, and only the policy can be checked without authorization
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=16")
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16,23"})
    caveat = "its PCR policy holds; that the sealed object was made by this TPM is not checked"
    r = _unlock(img, "--sim")
    assert r.returncode == 0, r.stderr
    assert " ".join(r.stdout.split()).count(f"would unseal now ({caveat})") == 2, r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines() if line != str(img)), r.stdout
    toks = _by_token(json.loads(_unlock(img, "--sim", "--json").stdout))
    assert [(t["verdict"], t["reason"]) for t in toks.values()] == [("would-unseal", caveat)] * 2
    # where the policy does not hold, the verdict says so and claims nothing about the policy holding
    pcrextend(tcp_swtpm.tcti, 16, {"sha256": bytes(range(32))})
    r = _unlock(img, "-T", tcp_swtpm.tcti)
    assert r.returncode == 1 and "would unseal" not in r.stdout and "policy holds" not in r.stdout, r.stdout


def _persist_primary(tcti: str, tmp_path, alg: str) -> None:
    """A primary made persistent at 0x81000001, the SRK's handle, by tpm2-tools (the owner
    hierarchy's empty authorization is the test's to use, never tpmtop's)."""
    ctx = str(tmp_path / f"{alg}.ctx")
    for cmd in (["tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", alg, "-c", ctx],
                ["tpm2_evictcontrol", "-C", "o", "-c", ctx, "0x81000001"], ["tpm2_flushcontext", "-t"]):
        subprocess.run([cmd[0], "-T", tcti, *cmd[1:]], check=True, capture_output=True, timeout=300)


def _image_with_srk_token(tcti: str, tmp_path):
    """An image whose systemd-tpm2 token (PCR 16) records the SRK at 0x81000001, an ECC primary
    made persistent there. systemd 254+ records the SRK (tpm2_srk: the ESYS_TR as tpm2-tss
    serializes it); systemd 252, the one here, does not, so the token gets the SRK tpm2-tools
    serializes the same way."""
    import base64

    _persist_primary(tcti, tmp_path, "ecc")
    tr = tmp_path / "srk.tr"
    subprocess.run(["tpm2_readpublic", "-T", tcti, "-c", "0x81000001", "-t", str(tr)], check=True,
                   capture_output=True, timeout=300)
    img = make_image(tmp_path)
    enroll_systemd(img, tcti, "--tpm2-pcrs=16")
    tok = dict(luks_tokens(img)["0"], tpm2_srk=base64.b64encode(tr.read_bytes()).decode())
    subprocess.run(["cryptsetup", "token", "remove", "--token-id", "0", img], check=True, timeout=120)
    import_token(img, tok)
    return img


def test_a_token_that_records_its_srk_is_held_to_the_key_this_tpm_has_there(tcp_swtpm, tmp_path):
    img = _image_with_srk_token(tcp_swtpm.tcti, tmp_path)

    r = _unlock(img, "-T", tcp_swtpm.tcti)
    assert r.returncode == 0, r.stderr
    assert "would unseal now (its PCR policy holds; its SRK (0x81000001) is this TPM's)" in " ".join(r.stdout.split())
    r = _unlock(img, "--sim")  # a TPM with no key at 0x81000001: unknown, and said so
    assert r.returncode == 0, r.stderr
    assert ("would unseal now (its PCR policy holds; its SRK (0x81000001) is not on this TPM, so that the sealed "
            "object was made by this TPM is not checked)") in " ".join(r.stdout.split()), r.stdout
    subprocess.run(["tpm2_evictcontrol", "-T", tcp_swtpm.tcti, "-C", "o", "-c", "0x81000001"], check=True,
                   capture_output=True, timeout=300)
    _persist_primary(tcp_swtpm.tcti, tmp_path, "rsa")  # another key where the SRK was
    r = _unlock(img, "-T", tcp_swtpm.tcti, "--json")
    assert r.returncode == 1, r.stderr
    (t,) = _by_token(json.loads(r.stdout)).values()
    assert (t["verdict"], t["reason"]) == ("would-not", "its PCR policy holds, but its SRK is not this TPM's "
                                                        "(0x81000001 holds another key)")


def test_the_panel_holds_a_token_to_its_srk_as_tpmtop_unlock_does(tcp_swtpm, tmp_path):
    """The Unlock panel's reading asks the TPM for the key at the token's SRK handle beside the
    PCRs: another key there is "would not", as in `tpmtop unlock` (it said "would unseal now …
    not checked" while the command said "would not")."""
    from tests.helpers.processes import wait_until
    from tpmtop.sources.live import LiveSource
    from tpmtop.unlock.judge import Verdict
    from tpmtop.viewmodel.rows import unlock

    img = _image_with_srk_token(tcp_swtpm.tcti, tmp_path)
    subprocess.run(["tpm2_evictcontrol", "-T", tcp_swtpm.tcti, "-C", "o", "-c", "0x81000001"], check=True,
                   capture_output=True, timeout=300)
    _persist_primary(tcp_swtpm.tcti, tmp_path, "rsa")  # another key where the SRK was

    src = LiveSource(tcp_swtpm.connect(), poll_interval=0.3, start_running=False)
    src.unlock_devices = [str(img)]
    try:
        # the first PCR reading may come before the header's: until the next one (at most
        # SRK_SOON_S later) the token says "not checked"; then the SRK's verdict
        wait_until(lambda: [r.verdict for r in unlock.part(src).rows] == [Verdict.WOULD_NOT],
                   "the panel's reading with the SRK asked", timeout=120)
        (row,) = unlock.part(src).rows
        assert row.verdict is Verdict.WOULD_NOT, row
        assert "its SRK is not this TPM's (0x81000001 holds another key)" in row.text, row.text
    finally:
        src.close()
