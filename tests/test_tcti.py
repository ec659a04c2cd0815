"""Choosing a TPM: tpm2-tools' TCTI strings and precedence, the /dev/tpmrm0 fallback."""

import json
import os

import pytest

from tpmtop.errors import UsageError
from tpmtop.tpm.tcti import choose, parse_tcti
from conftest import run_tpmtop


def test_option_beats_environment():
    t = choose("swtpm:port=2321", False, env={"TPM2TOOLS_TCTI": "mssim:port=9999"})
    assert (t.kind, t.conf, t.source) == ("swtpm", "port=2321", "-T")


def test_environment_used_without_option():
    t = choose(None, False, env={"TPM2TOOLS_TCTI": "tabrmd:bus_name=com.intel.tss2.Tabrmd"})
    assert (t.kind, t.conf, t.source) == ("tabrmd", "bus_name=com.intel.tss2.Tabrmd", "TPM2TOOLS_TCTI")


def test_sim_and_tcti_contradict():
    with pytest.raises(UsageError):
        choose("device:/dev/tpmrm0", True, env={})


def test_fallback_to_sim_when_no_device_says_so():
    t = choose(None, False, env={}, device="/nonexistent/tpmrm0")
    assert t.simulated and t.source == "fallback" and "/nonexistent/tpmrm0" in t.note


@pytest.mark.parametrize("text", ["bogus:x", "swtpm:port=notaport", "swtpm:port=70000", "mssim:colour=blue", " "])
def test_malformed_tcti_is_usage_error(text):
    with pytest.raises(UsageError):
        parse_tcti(text, "-T")


def test_tpm0_refused_without_raw_device():
    with pytest.raises(UsageError, match="resource manager"):
        choose("device:/dev/tpm0", False, env={})
    assert choose("device:/dev/tpm0", False, env={}, raw_device=True).device_path == "/dev/tpm0"


def test_option_and_environment_against_real_swtpms(tcp_swtpm):
    # -T points at a live swtpm; the environment at a dead port: -T must win.
    r = run_tpmtop("info", "--json", "-T", tcp_swtpm.tcti, env={"TPM2TOOLS_TCTI": "swtpm:port=1"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["identity"]["manufacturer"] == "IBM"
    # Without -T the environment is used: the live one works, the dead one fails cleanly.
    r = run_tpmtop("info", "--json", env={"TPM2TOOLS_TCTI": tcp_swtpm.tcti})
    assert r.returncode == 0 and json.loads(r.stdout)["tpm"]["tcti"] == tcp_swtpm.tcti
    r = run_tpmtop("info", env={"TPM2TOOLS_TCTI": "swtpm:port=1"})
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "cannot connect" in r.stderr
    assert "Traceback" not in r.stderr


def test_permission_denied_names_the_group(tmp_path):
    # A device node we cannot open, as an unprivileged user meets /dev/tpmrm0 (root:tss 0660).
    # The tests run as root, so the child drops the capabilities that let root ignore file
    # modes (setpriv, util-linux) instead of switching user (the venv lives under /root).
    dev = tmp_path / "tpmrm0"
    dev.write_bytes(b"")
    os.chown(dev, 65534, 65534)
    os.chmod(dev, 0o660)
    r = run_tpmtop("info", "-T", f"device:{dev}",
                   prefix=["setpriv", "--bounding-set=-dac_override,-dac_read_search"])
    assert r.returncode == 1, r.stderr
    assert "permission denied" in r.stderr and "group" in r.stderr and "Traceback" not in r.stderr
