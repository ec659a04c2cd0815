"""Snapshots know their TPM (issue 51): manufacturer, firmware, the EK's name where one is
persistent, and the clock (resetCount, restartCount); --diff says when the TPM was reset or
cleared between two snapshots, and when the event log is identical and a PCR moved outside
it. A snapshot of a log file, or of a TPM that is not this host's, carries no boot_id.

One private swtpm lives through the test: tpm2-tools makes its EK persistent, extends, and
clears it; swtpm_ioctl -i power-cycles it (a TPM Reset: resetCount + 1) and tpm2_startup
starts it again. tpmtop only reads."""

from __future__ import annotations

import json
import subprocess

from tests.helpers.pcrs import PCR_FIXTURES, boot, pcrextend
from tests.helpers.processes import TcpSwtpm, run_tpmtop

OVMF_LOG = PCR_FIXTURES / "ovmf" / "binary_bios_measurements"


def _tool(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout


def test_snapshots_name_the_tpm_and_diff_says_reset_cleared_and_outside_the_log(tmp_path):
    sw = TcpSwtpm()
    try:
        boot(sw.tcti, OVMF_LOG.read_bytes())
        _tool("tpm2_createek", "-T", sw.tcti, "-c", "0x81010001", "-G", "rsa", "-u", str(tmp_path / "ek.pub"))
        ek_name = next(line.split()[1] for line in _tool("tpm2_readpublic", "-T", sw.tcti, "-c", "0x81010001")
                       .splitlines() if line.startswith("name:"))
        first = tmp_path / "first.json"
        r = run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(OVMF_LOG), "--save", str(first))
        assert r.returncode == 0, r.stderr
        saved = json.loads(first.read_text())
        assert saved["boot_id"] is None  # a log file and a TPM across a socket: not this host's boot
        tpm = saved["tpm"]
        assert tpm["manufacturer"] == "IBM" and tpm["firmware"] and tpm["local"] is False
        assert tpm["ek_names"] == {"0x81010001": {"kind": "rsa", "name": ek_name}}
        # the clock as tpm2-tools reads it (tpm2_readclock, after tpmtop's read: the counts do not move)
        peer = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in
                                                  _tool("tpm2_readclock", "-T", sw.tcti).splitlines() if ":" in line)}
        resets = int(peer["reset_count"])
        assert (tpm["clock"]["reset_count"], tpm["clock"]["restart_count"]) == (resets, int(peer["restart_count"]))

        # the same log, one more extend of PCR 9: the PCR moved outside the log
        pcrextend(sw.tcti, 9, {"sha256": b"\x09" * 32})
        r = run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(OVMF_LOG), "--diff", str(first), "--json")
        d = json.loads(r.stdout)["diff"]
        assert d["tpm"]["verdict"] == "same-boot" and d["same_event_log"] is True
        assert [p["pcr"] for p in d["pcrs"]] == [9] and "moved outside it" in d["pcrs"][0]["hint"]
        text = run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(OVMF_LOG), "--diff", str(first)).stdout
        assert f"TPM: the same boot of the TPM (resetCount {resets}, restartCount" in text
        assert "the event log is identical: this PCR moved outside it" in " ".join(text.split())
        assert max(len(line) for line in text.splitlines()) <= 80

        # a power cycle: a TPM Reset, then the firmware measures the same log again
        _tool("swtpm_ioctl", "--tcp", f"127.0.0.1:{sw.port + 1}", "-i")
        _tool("tpm2_startup", "-T", sw.tcti, "-c")
        boot(sw.tcti, OVMF_LOG.read_bytes())
        second = tmp_path / "second.json"
        assert run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(OVMF_LOG), "--save", str(second)).returncode == 0
        r = run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(OVMF_LOG), "--diff", str(first), "--json")
        d = json.loads(r.stdout)["diff"]
        assert d["tpm"]["verdict"] == "reset" and f"resetCount {resets} then {resets + 1}" in d["tpm"]["detail"]
        assert d["pcrs"] == []  # the same boot chain measured again

        # TPM2_Clear sets resetCount back to 0 (and evicts the EK)
        _tool("tpm2_clear", "-T", sw.tcti, "-c", "p")
        r = run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(OVMF_LOG), "--diff", str(second), "--json")
        d = json.loads(r.stdout)["diff"]
        assert d["tpm"]["verdict"] == "cleared", d["tpm"]
    finally:
        sw.stop()
