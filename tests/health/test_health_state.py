"""The TPM's own state, read without authorization, on private swtpm processes the tests set up
(the test's own simulator: its empty platform/owner/lockout auth is the test's to use, never
tpmtop's): flags, the clock against the saved state, EK certificates in NV, NV room."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import time

import pytest

from tests.health.conftest import check_schema
from tests.helpers.da import tools
from tests.helpers.processes import TcpSwtpm, _listening_ports, run_tpmtop

pytestmark = pytest.mark.skipif(shutil.which("tpm2_nvdefine") is None, reason="tpm2-tools not installed")


def _health(s: TcpSwtpm, *extra: str) -> tuple[int, dict, str]:
    r = run_tpmtop("health", "-T", s.tcti, "--json", *extra)
    assert r.returncode in (0, 1), r.stderr
    text = run_tpmtop("health", "-T", s.tcti, *extra).stdout if "--state" not in extra else ""
    return r.returncode, check_schema(json.loads(r.stdout)), text


def _verdict(doc: dict, kind: str) -> dict:
    return next(v for v in doc["verdicts"] if v["kind"] == kind)


def test_lockout_auth_and_disable_clear_are_shown(tcp_swtpm, tmp_path):
    _, doc, _ = _health(tcp_swtpm, "--state", "none")
    flags = _verdict(doc, "flags")["data"]
    assert flags["lockoutAuthSet"] is False and flags["disableClear"] is False  # must not fire on a fresh TPM
    tools(tcp_swtpm, "tpm2_changeauth", "-c", "lockout", "test-lockout", cwd=tmp_path)
    tools(tcp_swtpm, "tpm2_clearcontrol", "-C", "p", "s", cwd=tmp_path)
    r = run_tpmtop("health", "-T", tcp_swtpm.tcti, "--state", "none")
    doc = check_schema(json.loads(run_tpmtop("health", "-T", tcp_swtpm.tcti, "--json", "--state", "none").stdout))
    flags = _verdict(doc, "flags")
    assert flags["data"]["lockoutAuthSet"] is True and flags["data"]["disableClear"] is True
    assert flags["data"]["ownerAuthSet"] is False
    text = " ".join(r.stdout.split())  # the flags line may wrap at 80 columns
    assert "lockoutAuthSet yes" in text and "disableClear yes" in text and "ownerAuthSet no" in text, r.stdout


def _restart(s: TcpSwtpm) -> None:
    """The same swtpm (its state directory, its ports) stopped and started again."""
    s.proc.terminate()
    s.proc.wait(60)
    s.proc = subprocess.Popen(
        ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={s.dir}", "--server", f"type=tcp,port={s.port}",
         "--ctrl", f"type=tcp,port={s.port + 1}", "--flags", "not-need-init,startup-clear"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not {s.port, s.port + 1} <= _listening_ports(s.proc.pid):
        assert s.proc.poll() is None and time.monotonic() < deadline, "swtpm did not listen again"
        time.sleep(0.05)


def test_restart_and_reset_are_reported_against_the_saved_state(tcp_swtpm, tmp_path):
    state = str(tmp_path / "state.json")
    _, doc, _ = _health(tcp_swtpm, "--state", state)
    first = _verdict(doc, "clock")["data"]
    assert first["since"] is None  # nothing saved yet
    _, doc, _ = _health(tcp_swtpm, "--state", state)
    assert _verdict(doc, "clock")["data"]["since"] == "same"  # must not fire: nothing happened

    # Shutdown(STATE), then swtpm's Startup(CLEAR): a TPM Restart (resume from hibernation)
    tools(tcp_swtpm, "tpm2_shutdown", cwd=tmp_path)
    _restart(tcp_swtpm)
    _, doc, _ = _health(tcp_swtpm, "--state", state)
    v = _verdict(doc, "clock")
    assert v["data"]["since"] == "restarted", v
    assert v["data"]["restart_count"] == first["restart_count"] + 1
    assert v["data"]["reset_count"] == first["reset_count"]
    assert "restarted 1 time(s) since" in v["text"]

    # no Shutdown(STATE) before Startup(CLEAR): a TPM Reset (a reboot)
    _restart(tcp_swtpm)
    _, doc, _ = _health(tcp_swtpm, "--state", state)
    v = _verdict(doc, "clock")
    assert v["data"]["since"] == "reset", v
    assert v["data"]["reset_count"] == first["reset_count"] + 1 and v["data"]["restart_count"] == 0


def _self_made_cert() -> tuple[bytes, str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    issuer = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tpmtop test CA"),
                        x509.NameAttribute(NameOID.COMMON_NAME, "Test EK Issuer")])
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test EK 0001")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(0x1234).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER), issuer.rfc4514_string(), subject.rfc4514_string()


def test_an_ek_certificate_in_nv_is_shown_with_issuer_and_subject(tcp_swtpm, tmp_path):
    _, doc, _ = _health(tcp_swtpm, "--state", "none")
    assert _verdict(doc, "ek-certs")["data"]["certificates"] == []  # must not fire: none defined
    der, issuer, subject = _self_made_cert()
    (tmp_path / "ek.der").write_bytes(der + b"\xff" * 16)  # padded, as chips' indices often are
    size = str(len(der) + 16)
    tools(tcp_swtpm, "tpm2_nvdefine", "-C", "p", "-s", size, "-a",
          "ppwrite|ppread|ownerread|authread|no_da|platformcreate", "0x01c00002", cwd=tmp_path)
    tools(tcp_swtpm, "tpm2_nvwrite", "-C", "p", "-i", "ek.der", "0x01c00002", cwd=tmp_path)
    # an index at the ECC certificate's place that a wrong password would count against: not read
    tools(tcp_swtpm, "tpm2_nvdefine", "-C", "o", "-s", "32", "-a", "ownerread|ownerwrite|authread|authwrite",
          "0x01c0000a", cwd=tmp_path)
    tools(tcp_swtpm, "tpm2_nvwrite", "-C", "o", "-i-", "0x01c0000a", cwd=tmp_path, stdin="x" * 32)
    r = run_tpmtop("health", "-T", tcp_swtpm.tcti, "--state", "none")
    doc = check_schema(json.loads(run_tpmtop("health", "-T", tcp_swtpm.tcti, "--json", "--state", "none").stdout))
    v = _verdict(doc, "ek-certs")
    rsa = next(c for c in v["data"]["certificates"] if c["index"] == 0x01C00002)
    assert rsa["issuer"] == issuer and rsa["subject"] == subject and rsa["valid_now"] is True
    ecc = next(c for c in v["data"]["certificates"] if c["index"] == 0x01C0000A)
    assert ecc["read"] is False
    text = " ".join(r.stdout.split())  # lines wrap at 80 columns
    assert f"issuer: {issuer}" in text and f"subject: {subject}" in text
    nv = _verdict(doc, "nv")
    assert {row["index"]: row["owner"] for row in nv["data"]["indices"]}[0x01C00002] == "RSA 2048 EK certificate"
    # nothing compared it with the TPM's key (no persistent EK), and it signed itself: said, not "ok"
    assert rsa["matches_ek"] is None and rsa["self_signed"] is True
    assert v["level"] == "warn" and not text.startswith("ok EK certs"), v
    assert "not checked against the TPM's endorsement key" in v["text"] and "self-signed" in v["text"], v
    assert "not checked against the TPM's endorsement key" in text and "self-signed" in text


def _cert_for(key_pem: bytes) -> bytes:
    """A certificate for *key_pem* signed by a separate CA key (not self-signed), as DER."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test EK")]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test EK CA")]))
            .public_key(serialization.load_pem_public_key(key_pem))  # type: ignore[arg-type]
            .serial_number(7).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365)).sign(ca, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


def test_an_ek_certificate_is_compared_with_a_persistent_ek(tcp_swtpm, tmp_path):
    """The test's own sim: an RSA EK made persistent at 0x81010001 (its empty endorsement auth is
    the test's to use); health reads it with ReadPublic and compares keys."""
    tools(tcp_swtpm, "tpm2_createek", "-c", "0x81010001", "-G", "rsa", "-u", "ek.pub", cwd=tmp_path)
    tools(tcp_swtpm, "tpm2_readpublic", "-c", "0x81010001", "-f", "pem", "-o", "ek.pem", cwd=tmp_path)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    other, _, _ = _self_made_cert()  # an ECC key, signed by itself
    for name, der in (("match", _cert_for((tmp_path / "ek.pem").read_bytes())), ("mismatch", _cert_for(stranger)),
                      ("other", other)):
        (tmp_path / "ek.der").write_bytes(der)
        tools(tcp_swtpm, "tpm2_nvdefine", "-C", "p", "-s", str(len(der)), "-a",
              "ppwrite|ppread|ownerread|authread|no_da|platformcreate", "0x01c00002", cwd=tmp_path)
        tools(tcp_swtpm, "tpm2_nvwrite", "-C", "p", "-i", "ek.der", "0x01c00002", cwd=tmp_path)
        _, doc, _ = _health(tcp_swtpm, "--state", "none")
        v = _verdict(doc, "ek-certs")
        cert = v["data"]["certificates"][0]
        if name == "match":
            assert cert["matches_ek"] is True and cert["self_signed"] is False, v
            assert v["level"] == "ok" and "matches the TPM's RSA EK at 0x81010001" in v["text"], v
        elif name == "mismatch":  # another RSA key, CA-signed: compared and found wrong
            assert cert["matches_ek"] is False and cert["self_signed"] is False, v
            assert v["level"] == "warn" and "does NOT match the TPM's RSA EK at 0x81010001" in v["text"], v
        else:  # an ECC certificate: compared with the ECC EK's place, where there is none
            assert cert["matches_ek"] is None and "no persistent ECC EK at 0x81010002" in v["text"], v
            assert v["level"] == "warn"  # self-signed
        tools(tcp_swtpm, "tpm2_nvundefine", "-C", "p", "0x01c00002", cwd=tmp_path)


def _nv_block(text: str) -> list[str]:
    """The NV verdict's lines in the text report: its first line and those indented under it."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln[8:].startswith("NV "))
    block = [lines[start]]
    for ln in lines[start + 1:]:
        if not ln.startswith(" " * 23):
            break
        block.append(ln)
    return block


def test_nv_filled_close_to_its_limit_warns(tcp_swtpm, tmp_path):
    status, doc, _ = _health(tcp_swtpm, "--state", "none")
    assert _verdict(doc, "nv")["level"] == "info"  # must not fire on an empty NV
    # an EK certificate's index (the test's own sim, its platform auth) defined before the fill:
    # its handle sorts after the 0x0150.... ones, and the text must still show it among the first
    der, _, _ = _self_made_cert()
    (tmp_path / "ek.der").write_bytes(der)
    tools(tcp_swtpm, "tpm2_nvdefine", "-C", "p", "-s", str(len(der)), "-a",
          "ppwrite|ppread|ownerread|authread|no_da|platformcreate", "0x01c00002", cwd=tmp_path)
    tools(tcp_swtpm, "tpm2_nvwrite", "-C", "p", "-i", "ek.der", "0x01c00002", cwd=tmp_path)
    for i in range(200):  # 2 KB indices until the TPM refuses one (TPM_RC_NV_SPACE)
        r = tools(tcp_swtpm, "tpm2_nvdefine", "-C", "o", "-s", "2048", "-a", "ownerread|ownerwrite",
                  hex(0x01500000 + i), cwd=tmp_path, check=False)
        if r.returncode:
            assert "0x14B" in r.stderr or "insufficient space" in r.stderr, r.stderr
            break
    status, doc, _ = _health(tcp_swtpm, "--state", "none")
    v = _verdict(doc, "nv")
    assert status == 1 and v["level"] == "warn" and v["text"].startswith("NV nearly full"), v
    count = v["data"]["index_count"]
    assert count == i + 1 == len(v["data"]["indices"])  # the fill and the certificate's index
    # --json's evidence lists every index, the certificate's first
    listed = [e for e in v["evidence"] if e.startswith("0x01")]
    assert len(listed) == count and listed[0].startswith("0x01c00002"), v["evidence"][:3]
    # the text: the lines shown and the "… N more" add up to the evidence, and the EK index is shown
    block = _nv_block(run_tpmtop("health", "-T", tcp_swtpm.tcti, "--state", "none").stdout)
    more = int(next(ln for ln in block if "more (--json has them all)" in ln).split()[1])
    shown = [ln for ln in block if ln.lstrip().startswith("0x01")]
    assert any(ln.lstrip().startswith("0x01c00002") for ln in shown), block
    assert len(shown) + more == count, block
    assert all(len(ln) <= 80 for ln in block), block


def _readclock(s: TcpSwtpm) -> tuple[int, int, bool]:
    """(clock ms, resetCount, safe) as tpm2_readclock reports them."""
    import yaml

    got = yaml.safe_load(tools(s, "tpm2_readclock", cwd="/tmp").stdout)["clock_info"]
    return int(got["clock"]), int(got["reset_count"]), got["safe"] in (True, "yes", 1)


def test_safe_turns_yes_again_while_the_clock_is_behind(tcp_swtpm, tmp_path):
    """What docs/health.md says of a swtpm restarted without Shutdown(STATE): safe is no at
    first, yes again once the clock reaches NV (a 4,096 ms boundary), the clock still behind."""
    deadline = time.monotonic() + 300
    while (before := _readclock(tcp_swtpm))[0] < 9000:  # a clock well past the 4,096 ms boundary
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert before[2] is True
    _restart(tcp_swtpm)
    clock, resets, safe = _readclock(tcp_swtpm)
    assert resets == before[1] + 1 and clock < before[0]
    if clock < 4096:  # read before the first NV write of the clock: not yet safe (must not fire early)
        assert safe is False, (clock, safe)
    while not safe:
        clock, _, safe = _readclock(tcp_swtpm)
        assert time.monotonic() < deadline, "safe never turned yes"
        time.sleep(0.2)
    assert clock >= 4096
    # safe is yes while the clock is still behind the one reported before the restart
    assert clock < before[0], "the machine was too slow to see the clock still behind"


def test_restart_is_reported_against_a_pcrs_snapshot(tcp_swtpm, tmp_path):
    snap = tmp_path / "snap.json"
    r = run_tpmtop("pcrs", "-T", tcp_swtpm.tcti, "--save", str(snap), env={"XDG_DATA_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    saved = json.loads(snap.read_text())["tpm"]["clock"]
    tools(tcp_swtpm, "tpm2_shutdown", cwd=tmp_path)
    _restart(tcp_swtpm)
    _, doc, _ = _health(tcp_swtpm, "--state", "none", "--against", str(snap))
    v = _verdict(doc, "clock")
    assert v["data"]["since"] == "restarted" and v["data"]["restart_count"] == saved["restart_count"] + 1, v
    assert any(str(snap) in e for e in v["evidence"])
    # must not fire: a snapshot without the clock (written before it was kept) says so and compares nothing
    doc_old = json.loads(snap.read_text())
    del doc_old["tpm"]["clock"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc_old))
    _, doc, _ = _health(tcp_swtpm, "--state", "none", "--against", str(old))
    assert _verdict(doc, "clock")["data"]["since"] is None
    assert any("carries no TPM clock" in n for n in doc["notes"])
