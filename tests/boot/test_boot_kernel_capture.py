"""`tpmtop boot` imports what `tpmtop kernel` recorded (its boot-time probes, issue #14), and
says how to arm them for the next boot."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.paths import TESTS

FIX = TESTS / "fixtures" / "kernel" / "trace-6.10-ima-hmac.txt"
TPMTOP = [sys.executable, "-m", "tpmtop"]


def run(*args):
    return subprocess.run(TPMTOP + list(args), capture_output=True, text=True, timeout=120)


def test_boot_prices_the_session_steps_from_a_kernel_capture(tmp_path):
    cap = tmp_path / "k.json"
    r = run("kernel", "--from-trace", str(FIX), "--json", str(cap), "-q")
    assert r.returncode == 0, r.stderr
    cmds = json.loads(cap.read_text())["runs"][0]["commands"]
    (tmp_path / "empty-root").mkdir(exist_ok=True)
    r = run("boot", "--root", str(tmp_path / "empty-root"), "--capture", str(cap), "--extends", "1000", "--json")
    assert r.returncode == 0, r.stderr
    comps = json.loads(r.stdout)["projection"]["components_us"]
    for letter, name in (("L", "ContextLoad"), ("S", "StartAuthSession"), ("F", "FlushContext"),
                         ("Eh", "PCR_Extend")):
        # the kernel started sessions, so its extends are priced as HMAC extends (Eh)
        assert comps[letter]["source"] == f"kernel capture {cap}", (letter, comps[letter])
        assert abs(comps[letter]["us"] - cmds[f"TPM2_CC_{name}"]["p50"]) < 0.01
    assert "published" in comps["E0"]["source"]


def test_boot_says_how_to_arm_the_probes_for_the_next_boot(tmp_path):
    (tmp_path / "empty-root").mkdir(exist_ok=True)
    r = run("boot", "--root", str(tmp_path / "empty-root"), "--extends", "10")
    assert r.returncode == 0, r.stderr
    assert "tpmtop kernel --boot-cmdline" in r.stdout and "tpmtop boot --capture k.json" in r.stdout
    armed = run("kernel", "--boot-cmdline")
    assert armed.returncode == 0 and armed.stdout.startswith("kprobe_event=")


def test_boot_prices_only_the_kernels_own_commands_from_a_real_kernel_capture(tmp_path):
    """The real Debian 6.12 trace (no HMAC sessions: CONFIG_TCG_TPM2_HMAC off) also holds
    tpm2-tools' StartAuthSession through /dev/tpmrm0 and the resource manager's
    ContextLoad/FlushContext. Those are not the kernel's session steps: its 56 IMA extends
    price E0 (no session), and L, S, F stay the published figures."""
    real = TESTS / "fixtures" / "kernel" / "trace-6.12-debian-qemu-tpmrm.txt"
    cap = tmp_path / "k.json"
    r = run("kernel", "--from-trace", str(real), "--json", str(cap), "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads(cap.read_text())
    own = doc["kernel_trace"]["kernel_commands"]
    assert set(own) == {"TPM2_CC_PCR_Extend", "TPM2_CC_GetRandom"} and own["TPM2_CC_PCR_Extend"]["count"] == 56
    assert "TPM2_CC_StartAuthSession" in doc["runs"][0]["commands"]  # seen, from user space
    (tmp_path / "empty-root").mkdir(exist_ok=True)
    r = run("boot", "--root", str(tmp_path / "empty-root"), "--capture", str(cap), "--extends", "1000", "--json")
    assert r.returncode == 0, r.stderr
    comps = json.loads(r.stdout)["projection"]["components_us"]
    assert comps["E0"]["source"] == f"kernel capture {cap}"
    assert abs(comps["E0"]["us"] - own["TPM2_CC_PCR_Extend"]["p50"]) < 0.01
    for letter in ("L", "S", "F", "Eh"):
        assert "kernel capture" not in comps[letter]["source"], (letter, comps[letter])
