"""A TPM health cannot hear from is a failure, never "healthy": nothing listening, or a swtpm
whose one connection another client holds (it takes the connection and never reads). And
"simulated" only when tpmtop started the simulator or the TPM's identity says it is one."""

from __future__ import annotations

import json
import socket

import pytest

from tests.health.conftest import check_schema
from tests.helpers.processes import run_tpmtop
from tpmtop import settings
from tpmtop.tpm.transport import Deadline


def _tpm_verdict(doc: dict) -> dict:
    return next(v for v in doc["verdicts"] if v["kind"] == "tpm")


@pytest.mark.parametrize("json_out", [False, True])
def test_nothing_listening_is_a_failure_not_healthy(json_out):
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = run_tpmtop("health", "-T", f"swtpm:host=127.0.0.1,port={port}", *(["--json"] if json_out else []))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    if json_out:
        doc = check_schema(json.loads(r.stdout))
        v = _tpm_verdict(doc)
        assert v["level"] == "fail" and "Connection refused" in v["text"]
        assert doc["exit_status"] == 1 and not doc["tpm"].get("simulated")
    else:
        assert "healthy" not in r.stdout
        assert "FAIL  TPM" in r.stdout and "Connection refused" in r.stdout
        assert "simulat" not in r.stdout  # it cannot know what did not answer


def test_a_silent_tpm_fails_within_the_deadline_naming_the_command(tcp_swtpm):
    holder = socket.create_connection(("127.0.0.1", tcp_swtpm.port))  # swtpm serves one client at a time
    try:
        # the settings' deadline (3 s here); the subprocess time-out is only a generous backstop
        r = run_tpmtop("health", "-T", tcp_swtpm.tcti, "--json", env={"TPMTOP_TPM_DEADLINE": "3"}, timeout=240)
    finally:
        holder.close()
    assert r.returncode == 1, r.stdout + r.stderr
    doc = check_schema(json.loads(r.stdout))
    v = _tpm_verdict(doc)
    assert v["level"] == "fail"
    assert "did not answer GetCapability within 3 s" in v["text"], v["text"]


def test_simulated_by_identity_in_text_and_json(tcp_swtpm):
    text = run_tpmtop("health", "-T", tcp_swtpm.tcti)
    doc = check_schema(json.loads(run_tpmtop("health", "-T", tcp_swtpm.tcti, "--json").stdout))
    assert doc["tpm"]["simulated"] is True
    assert "identity" in doc["tpm"]["simulated_reason"]
    assert "(simulated)" in text.stdout.splitlines()[0]
    assert "the TPM is a simulator (the TPM's identity" in " ".join(text.stdout.split())  # wrapped at 80


def test_long_commands_get_the_long_deadline():
    from tpmtop.tpm.commands import build

    try:
        settings.use(settings.Settings(tpm_deadline=7.0, tpm_deadline_long=70.0))
        d = Deadline()
        assert d.of(build(0x131)) == 70.0  # CreatePrimary
        assert d.of(build(0x17A)) == 7.0  # GetCapability
        fixed = Deadline(5.0)  # --timeout: every command
        assert fixed.of(build(0x131)) == fixed.of(build(0x17A)) == 5.0
    finally:
        settings.use(None)
