"""`tpmtop health --root` on trees saved from real Debian guests (tests/fixtures/health/README.md
says how each was made): the set-up and driver verdicts, as a user runs the command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.health.conftest import check_schema
from tests.helpers.paths import REPO
from tests.helpers.processes import run_tpmtop

FIXTURES = REPO / "tests" / "fixtures" / "health"


def health(root: Path) -> tuple[int, dict[str, dict]]:
    r = run_tpmtop("health", "--root", str(root), "--ima-sample", "0", "--json")
    assert r.returncode in (0, 1), r.stderr
    doc = check_schema(json.loads(r.stdout))
    return r.returncode, {v["kind"]: v for v in doc["verdicts"]}


@pytest.mark.parametrize("series", ["6.1", "6.12"])
def test_interrupts_verdict_differs_with_tpm_tis_interrupts_0(series):
    _, default = health(FIXTURES / f"debian-{series}-default")
    _, polling = health(FIXTURES / f"debian-{series}-polling")
    d, p = default["interrupts"], polling["interrupts"]
    assert d["data"]["mode"] != p["data"]["mode"], (d, p)
    assert p["data"]["mode"] == "polling-off-cmdline"
    assert "/proc/cmdline: tpm_tis.interrupts=0" in p["evidence"]
    # what each default is: 6.1 allows interrupts (-1) and qemu's TIS declares no IRQ; 6.12's is N
    assert d["data"]["mode"] == {"6.1": "polling-no-irq", "6.12": "polling-off-default"}[series]
    assert d["data"]["param"] == {"6.1": "-1", "6.12": "N"}[series]


@pytest.mark.parametrize("series", ["6.1", "6.12"])
def test_an_interrupt_that_never_fires_is_the_drivers_fallback_not_a_choice(series):
    """acpi=off tpm_tis.force=1: the driver's own device probes for an interrupt; qemu's TIS
    raises none the guest sees, and the kernel says so ("TPM interrupt not working, polling
    instead"). With tpm_tis.interrupts=0 the same guest polls by choice."""
    status, irq = health(FIXTURES / f"debian-{series}-forced-irq")
    v = irq["interrupts"]
    assert v["data"]["mode"] == "polling-fallback" and v["level"] == "warn"
    assert any("TPM interrupt not working, polling instead" in e for e in v["evidence"])
    assert status == 1  # a problem: every command pays the polling
    dev = irq["device"]
    assert dev["level"] == "ok" and "forced by tpm_tis.force=1" in dev["text"]
    assert "declared by firmware" not in dev["text"]
    if series == "6.12":
        status, off = health(FIXTURES / "debian-6.12-forced-polling")
        assert off["interrupts"]["data"]["mode"] == "polling-off-cmdline" and status == 0
        assert not any("polling instead" in e for e in off["interrupts"]["evidence"])


def test_interrupts_allowed_without_an_irq_is_said_as_such():
    _, v = health(FIXTURES / "debian-6.12-irq-on")
    assert v["interrupts"]["data"]["mode"] == "polling-no-irq"
    assert v["interrupts"]["data"]["param"] == "Y"


@pytest.mark.parametrize("tree", ["debian-6.1-default", "debian-6.12-default", "debian-6.12-polling"])
def test_the_hwrng_line_names_tpm_rng_0(tree):
    status, v = health(FIXTURES / tree)
    hw = v["hwrng"]
    assert hw["data"]["current"] == "tpm-rng-0" and hw["data"]["tpm"] is True
    assert "tpm-rng-0" in hw["text"]
    assert v["device"]["level"] == "ok" and "ACPI TPM2" in v["device"]["text"]
    assert status == 0  # a healthy guest


def test_a_declared_tpm_without_dev_tpm0_is_explained_by_its_dmesg_lines():
    status, v = health(FIXTURES / "debian-6.12-dead-tpm")
    dev = v["device"]
    assert status == 1 and dev["level"] == "fail"
    assert any("ACPI TPM2 table" in e for e in dev["evidence"])
    assert any("A TPM error (9) occurred attempting to determine the timeouts" in e for e in dev["evidence"])
    assert v["ima"]["level"] == "warn" and "TPM-bypass" in v["ima"]["text"]
    assert v["hwrng"]["data"]["current"] == "none"
    assert v["interrupts"]["level"] == "unknown"  # no TPM bound: nothing to judge


def _edited_copy(tmp_path: Path, tree: str, after: str, lines: list[str], drop_tpm: bool = False,
                 hmac: bool = False) -> Path:
    """A copy of a real guest's tree with ``lines`` (the kernel's wording, time-stamped after the
    line containing ``after``) inserted into its kernel log: messages these Debian kernels never
    print (CONFIG_TCG_TPM2_HMAC off) in the place a kernel that has it prints them. ``hmac``:
    its config says CONFIG_TCG_TPM2_HMAC=y, as a kernel that prints them is built."""
    root = tmp_path / tree
    shutil.copytree(FIXTURES / tree, root)
    if hmac:
        for cfg in (root / "boot").glob("config-*"):
            cfg.write_text(cfg.read_text().replace("# CONFIG_TCG_TPM2_HMAC is not set", "CONFIG_TCG_TPM2_HMAC=y"))
    log = root / "run" / "tpmtop" / "dmesg.txt"
    out = []
    for ln in log.read_text().splitlines():
        out.append(ln)
        if after in ln:
            t = float(ln[1:ln.index("]")])
            out += [f"[{t + 0.0001 * (i + 1):12.6f}] {x}" for i, x in enumerate(lines)]
    log.write_text("\n".join(out) + "\n")
    if drop_tpm:
        for p in ("dev/tpm0", "dev/tpmrm0"):
            (root / p).unlink()
        shutil.rmtree(root / "sys" / "class" / "tpm" / "tpm0")
    return root


HMAC_ERA = [
    "tpm tpm0: NULL name has changed, disabling TPM due to interference",
    "tpm tpm0: null key integrity check failed",
    "tpm tpm0: TPM: HMAC check failed",
    "tpm tpm0: session state malformed",
    "tpm tpm0: invalid handle 0x80000001",
    "tpm tpm0: could not find HMAC session",
]


def test_hmac_era_messages_are_recognised_and_explain_a_missing_device(tmp_path):
    root = _edited_copy(tmp_path, "debian-6.12-default", "tpm_tis MSFT0101:00: 2.0 TPM", HMAC_ERA, drop_tpm=True,
                        hmac=True)
    status, v = health(root)
    msgs = v["hmac-messages"]
    assert status == 1 and msgs["level"] == "fail"
    assert set(msgs["data"]["kinds"]) == {"interference", "null-key", "hmac", "session-state"}
    for line in HMAC_ERA:  # each one quoted, with its line in the log
        assert any(line in e and e.startswith("dmesg:") for e in msgs["evidence"]), line
    dev = v["device"]
    assert dev["level"] == "fail"
    assert any("NULL name has changed" in e for e in dev["evidence"])


def test_hmac_messages_on_a_kernel_built_without_hmac_say_it_cannot_print_them(tmp_path):
    root = _edited_copy(tmp_path, "debian-6.12-default", "tpm_tis MSFT0101:00: 2.0 TPM", HMAC_ERA[:1])
    _, v = health(root)
    msgs = v["hmac-messages"]
    assert msgs["level"] == "warn" and msgs["data"]["hmac_built"] is False, msgs
    assert "built without HMAC sessions" in msgs["text"] and "cannot print these lines" in msgs["text"]


def test_pcr_integrity_on_a_kernel_without_hmac_says_it_has_no_effect(tmp_path):
    _, v = health(FIXTURES / "debian-6.12-dead-tpm")  # CONFIG_TCG_TPM2_HMAC off, disable_pcr_integrity N
    assert v["hmac-build"]["data"]["hmac"] is False
    text = v["pcr-integrity"]["text"]
    assert "has no effect" in text and "use the HMAC session" not in text, text
    # must not fire where HMAC is built: there the parameter decides
    root = _edited_copy(tmp_path, "debian-6.12-dead-tpm", "Command line", [], hmac=True)
    _, v = health(root)
    assert v["pcr-integrity"]["text"] == "PCR extends use the HMAC session (tpm.disable_pcr_integrity=0)"


def test_ima_counts_agree_and_the_command_line_is_not_a_python_dict():
    r = run_tpmtop("health", "--root", str(FIXTURES / "debian-6.12-dead-tpm"), "--ima-sample", "0")
    ima = " ".join(r.stdout[r.stdout.index("\nima\n"):].split())  # lines wrap at 80 columns
    assert "{" not in ima and "ima_policy=tcb" in ima, ima
    # the count file (read first) says 30, the list read after it holds 33: one figure, explained
    assert "33 measurements" in ima and "in the 33 entries of the list" in ima
    assert "runtime_measurements_count: 30 (read first; the list, read after it, holds 33" in ima


def test_the_kernels_amd_ftpm_hwrng_line_is_ruled(tmp_path):
    line = "tpm tpm0: AMD fTPM version 0x3005700000004 causes system stutter; hwrng disabled"
    root = _edited_copy(tmp_path, "debian-6.12-default", "tpm_tis MSFT0101:00: 2.0 TPM", [line])
    (root / "sys" / "class" / "misc" / "hw_random" / "rng_current").write_text("none\n")
    _, v = health(root)
    hw = v["hwrng"]
    assert hw["level"] == "ok" and "turned the AMD fTPM's off" in hw["text"], hw
    assert any(line in e for e in hw["evidence"]) and hw["data"]["amd_ftpm_disabled"] is True
    _, plain = health(FIXTURES / "debian-6.12-default")  # must not fire without the line
    assert "AMD" not in plain["hwrng"]["text"]


def test_timeouts_after_a_resume_are_marked(tmp_path):
    root = _edited_copy(tmp_path, "debian-6.12-default", "tpm_tis MSFT0101:00: 2.0 TPM", [
        "PM: suspend entry (deep)", "PM: suspend exit", "tpm tpm0: Operation Timed out",
        "tpm tpm0: invalid TPM_STS.x 0xff, dumping stack for forensics",
        "tpm tpm0: tpm_try_transmit: send(): error -62"])
    status, v = health(root)
    to = v["timeouts"]
    assert status == 1 and to["level"] == "warn"
    assert to["data"] == {"count": 3, "after_resume": 3}
    assert any("invalid TPM_STS.x 0xff" in e and "after `suspend exit`" in e for e in to["evidence"])


def test_a_clean_real_log_has_no_timeouts_nor_hmac_messages():
    _, v = health(FIXTURES / "debian-6.12-default")
    assert v["timeouts"]["level"] == "ok" and v["hmac-messages"]["level"] == "ok"
