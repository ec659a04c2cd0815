"""#16: what dmesg, systemd-analyze blame/critical-chain and the journal add to ``tpmtop boot``.

Fixture trees (tests/fixtures/boot/<system>/ looks like / of that system), written from the
real formats:
- tpm12-dmesg-only: a TPM 1.2 laptop of which only `dmesg` was saved;
- desktop-6.12-systemd: systemd TPM units on the critical path, and a journal in which
  systemd-cryptsetup retries Unseal 30 times (TPM_RC_PCR_CHANGED, 1.000 s apart) and a
  provisioning script retries NV_DefineSpace 5 times (0x14c, 2.000 s apart).
Expected figures are read off the fixture files by hand.
"""

import json
import subprocess
import sys
from decimal import Decimal

import pytest

from tests.helpers.paths import TESTS
from tpmtop.boot.facts import collect
from tpmtop.boot.journal import parse_journal
from tpmtop.boot.report import build_report, render_text
from tpmtop.boot.rootfs import RootReader
from tpmtop.boot.session_mode import infer
from tpmtop.boot.systemd import parse_blame, parse_critical_chain
from tpmtop.cli import main
from tpmtop.errors import UsageError

TREES = TESTS / "fixtures" / "boot"
D = TREES / "desktop-6.12-systemd"


def report(tree, **kw):
    return build_report(RootReader(str(TREES / tree)), **kw)


# -- a TPM 1.2 machine with only dmesg --------------------------------------------------------

def test_tpm12_facts_come_from_dmesg_and_say_so():
    sf = collect(RootReader(str(TREES / "tpm12-dmesg-only")))
    rel = sf.get("kernel.release")
    assert rel.value == "5.10.0-28-amd64"
    assert rel.source == "/run/tpmtop/dmesg.txt:1 (`Linux version` line)"
    assert rel.others == [{"source": "/proc/sys/kernel/osrelease", "value": None,
                           "reason": "/proc/sys/kernel/osrelease absent"}]
    assert sf.value("tpm.family") == "1.2" and sf.get("tpm.family").source == "/run/tpmtop/dmesg.txt:7"
    assert sf.value("tpm.driver") == "tpm_tis"
    assert sf.value("tpm.device_id") == "0xB (rev-id 16)"
    assert sf.value("tpm.vendor") is None  # a PNP device name (00:0a) names no vendor
    assert sf.value("cmdline.tpm_ima") == {"ima_policy": "tcb", "initcall_debug": None}
    assert [(p.kind, p.rc) for p in sf.kernel_log.problems] == [("polling", None)]


def test_tpm12_no_session_mode_but_initcall_costs():
    rep = report("tpm12-dmesg-only")
    assert rep.session.mode is None and rep.session.applies is False
    assert rep.session.rule == "TPM 1.2: no session mode applies"
    assert set(rep.projection.components) == {"E0"}
    for mode in ("per-command", "reuse", "saved"):
        assert rep.projection.modes[mode].reason == "no HMAC sessions on a TPM 1.2"
        assert rep.projection.modes[mode].estimate_s is None
    # init_ima 575,032 µs → 580 ms (2 figures); init_tis 137,604 µs → 140 ms.
    assert rep.verdict == (
        "This is a TPM 1.2 (/run/tpmtop/dmesg.txt:7): the kernel opens no HMAC sessions on it, so no session "
        "mode applies. Its TPM boot costs are the initcalls: init_ima 580 ms (IMA reads PCRs 0–7 for its "
        "boot aggregate), init_tis 140 ms.")
    assert "No TPM is visible" not in render_text(rep)


def test_tpm12_with_extends_projects_only_the_sessionless_mode(capsys):
    assert main(["boot", "--root", str(TREES / "tpm12-dmesg-only"), "--extends", "100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    none = doc["projection"]["modes"]["none"]
    assert none["arithmetic"] == "100 × 6,360 µs = 636 ms"  # published E0, with its caveat in the notes
    assert doc["session_mode"]["session_modes_apply"] is False
    assert any("a TPM 1.2's TPM_Extend may differ" in n for n in doc["notes"])
    assert doc["verdict"].endswith("Its TPM boot costs are the initcalls: init_ima 580 ms (IMA reads PCRs 0–7 "
                                   "for its boot aggregate), init_tis 140 ms and 100 PCR extends, about 640 ms "
                                   "(costs from published SLB9670 figures, not this TPM).")


def test_response_codes_are_worded_without_importing_tpm2_pytss():
    """libtss2-rc words them (ctypes): `tpmtop boot` stays light over SSH, errors or not."""
    code = (f"import sys; from tpmtop.cli import main; main(['boot', '--root', {str(D)!r}]); "
            "print('tpm2_pytss' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "0x128 tpm:error(2.0): PCR have changed since checked" in p.stdout
    assert p.stderr.strip().splitlines()[-1] == "False"


# -- systemd's TPM units ----------------------------------------------------------------------

def test_tpm_units_time_and_critical_path():
    sf = collect(RootReader(str(D)))
    got = [(u.unit, u.took_text, u.on_critical_path, u.at, u.chain_took_text) for u in sf.units]
    assert got == [
        ("systemd-cryptsetup@data.service", "30.512s", True, Decimal("11.012"), "30.512s"),
        ("dev-tpmrm0.device", "9.412s", True, Decimal("9.601"), None),
        ("systemd-tpm2-setup.service", "1.044s", True, Decimal("9.934"), "1.044s"),
        ("systemd-pcrphase.service", "120ms", False, None, None),
        ("systemd-pcrphase-sysinit.service", "43ms", False, None, None),
        ("tpm2.target", None, True, Decimal("9.930"), None),
    ]
    assert sf.get("systemd.critical-chain").source == "/run/tpmtop/systemd-analyze-critical-chain.txt"


def test_verdict_weighs_systemd_and_the_journal_before_the_kernel():
    rep = report("desktop-6.12-systemd")
    parts = rep.verdict_parts
    assert [p["what"] for p in parts] == ["systemd", "journal", "journal", "kernel"]
    # 30.512 + 1.044 = 31.556 s of the chain's own `+` times; the device wait is named, not added.
    assert parts[0]["seconds"] == 31.556
    assert parts[0]["text"] == (
        "On the critical path of a 53.118s boot, systemd's TPM units took 31.6 s: "
        "systemd-cryptsetup@data.service +30.512s, systemd-tpm2-setup.service +1.044s; "
        "dev-tpmrm0.device waited 9.412s (blame).")
    assert parts[1]["text"] == (
        "systemd-cryptsetup logged the same TPM error 30 times over 29 s, every 1 s (0x128, tpm:error(2.0): "
        "PCR have changed since checked): inside systemd-cryptsetup@data.service, on the critical path.")
    assert parts[2]["seconds"] == 8.0
    assert rep.verdict.startswith(parts[0]["text"])
    text = render_text(rep)
    assert "\nsystemd TPM units\n" in text and "\nTPM errors in the journal" in text


def test_sections_are_left_out_when_there_is_nothing_to_say():
    text = render_text(report("laptop-6.10-hmac"))
    assert "systemd TPM units" not in text and "TPM errors in the journal" not in text


# -- the journal ------------------------------------------------------------------------------

def test_journal_groups_repeats_with_count_first_last_interval():
    j = collect(RootReader(str(D))).journal
    rows = [(e.ident, e.kind, e.count, e.first, e.last, e.interval, e.rc, e.rc_text) for e in j.errors]
    assert rows == [
        ("systemd-cryptsetup", "tss", 30, Decimal("15.912391"), Decimal("44.912391"), Decimal(1), 0x128,
         "tpm:error(2.0): PCR have changed since checked"),
        ("systemd-cryptsetup", "systemd", 29, Decimal("15.912420"), Decimal("43.912420"), Decimal(1), None, None),
        ("tpm2_nvdefine", "tss", 5, Decimal("20.100040"), Decimal("28.100040"), Decimal(2), 0x14c,
         "tpm:error(2.0): NV Index or persistent object already defined"),
        ("tpm2_nvdefine", "other", 5, Decimal("20.100061"), Decimal("28.100061"), Decimal(2), None, None),
        ("tpm2_nvdefine", "other", 5, Decimal("20.100070"), Decimal("28.100070"), Decimal(2), None, None),
        ("kernel", "kernel", 1, Decimal("21.337104"), Decimal("21.337104"), None, 0x902,
         "tpm:warn(2.0): out of memory for object contexts"),
        ("systemd-cryptsetup", "systemd", 1, Decimal("44.912420"), Decimal("44.912420"), None, None, None),
    ]
    assert j.entries == 7 + 30 * 3 + 5 * 4 + 3  # lines before the loops, the two loops, 3 after


def test_journal_kernel_error_is_decoded_in_dmesg_too():
    sf = collect(RootReader(str(D)))
    (p,) = sf.kernel_log.problems
    assert (p.kind, p.rc, p.rc_text, p.time_s) == ("tpm-error", 2306, "tpm:warn(2.0): out of memory for object "
                                                                        "contexts", Decimal("21.337104"))


@pytest.mark.parametrize("name, body, lineno, why", [
    ("journal.txt", "[    1.000000] h a: x\nnot a journal line\n", 2, "not a `journalctl -o short-monotonic` line"),
    ("journal.txt", "[   10.000000] h a: x\n[    2.000000] h b: y\n", 2, "time goes back from 10.000000 s"),
    ("systemd-analyze-blame.txt", "  1.000s a.service\n  soon b.service\n", 2, "not a `systemd-analyze blame` line"),
    ("systemd-analyze-critical-chain.txt", "graphical.target @1.0s\n└─a.service @x +1s\n", 2,
     "unreadable time in a critical-chain line"),
])
def test_bad_saved_output_is_exit_2_file_line(tmp_path, capsys, name, body, lineno, why):
    (tmp_path / "run/tpmtop").mkdir(parents=True)
    (tmp_path / "run/systemd/system").mkdir(parents=True)
    (tmp_path / "run/tpmtop" / name).write_text(body)
    assert main(["boot", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path}/run/tpmtop/{name}:{lineno}: {why}" in err


def test_parsers_name_the_file_and_line():
    with pytest.raises(UsageError, match=r"^f:3: not a `systemd-analyze blame` line"):
        parse_blame("  1s a.service\n\nno-time-here\n", "f")
    with pytest.raises(UsageError, match=r"^f:1: no unit"):
        parse_critical_chain("", "f")
    with pytest.raises(UsageError, match=r"^f:1: not a `journalctl"):
        parse_journal("Dec 01 07:00:00 host a[1]: short, not short-monotonic\n", "f")


# -- kernel version rules ---------------------------------------------------------------------

def _tree(tmp_path, release, config=None, null_name=None):
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(release + "\n")
    if config is not None:
        (tmp_path / "boot").mkdir()
        (tmp_path / f"boot/config-{release}").write_text(config)
    if null_name is not None:
        tpm = tmp_path / "sys/class/tpm/tpm0"
        tpm.mkdir(parents=True)
        (tpm / "tpm_version_major").write_text("2\n")
        if null_name:
            (tpm / "null_name").write_text("000b" + "00" * 32 + "\n")
    return infer(collect(RootReader(str(tmp_path))))


def test_618_default_off_decides_without_config(tmp_path):
    sm = _tree(tmp_path, "6.18.2-arch1-1")
    assert sm.mode == "none" and sm.rule == "6.18+ default: CONFIG_TCG_TPM2_HMAC off"


def test_612y_and_617y_backport_leaves_it_open_without_config(tmp_path):
    sm = _tree(tmp_path, "6.17.4-300.fc43.x86_64")
    assert sm.mode is None and sm.rule == "cannot tell: HMAC build unknown"
    assert any("6.17.y stable kernels from Oct 2025 took 6.18's default" in r for r in sm.reasons)


def test_config_wins_over_the_618_default(tmp_path):
    sm = _tree(tmp_path, "6.18.2-custom", config="CONFIG_TCG_TPM2_HMAC=y\nCONFIG_HW_RANDOM_TPM=y\n")
    assert sm.mode == "reuse" and sm.hwrng_ends_session is False
    assert sm.rule == "CONFIG_TCG_TPM2_HMAC=y in /boot/config-6.18.2-custom, and 6.11.7+ keep the session"
    assert "hwrng reads no longer end the kept session (6.15+)" in sm.reasons


def test_before_615_hwrng_reads_end_the_kept_session(tmp_path):
    sm = _tree(tmp_path, "6.14.2", null_name=True)
    assert sm.mode == "reuse" and sm.hwrng_ends_session is True
    assert sm.rule == "null_name present in sysfs, and 6.11.7+ keep the session"


# -- one reader of sysfs/securityfs for `tpmtop boot` and the dashboard's --passive ------------

def test_pcr_integrity_opt_out_is_read_without_a_command_line(tmp_path):
    (tmp_path / "sys/module/tpm/parameters").mkdir(parents=True)
    (tmp_path / "sys/module/tpm/parameters/disable_pcr_integrity").write_text("Y\n")
    sf = collect(RootReader(str(tmp_path)))
    assert sf.value("tpm.disable_pcr_integrity") == "Y"
    assert sf.get("cmdline").reason == "/proc/cmdline absent"


def test_passive_source_reads_what_boot_reads():
    from tpmtop.sources.passive import Sysfs

    snap = Sysfs(D).read()
    sf = collect(RootReader(str(D)))
    assert (snap.tpm_present, snap.tpm_version, snap.hmac_compiled, snap.disable_pcr_integrity,
            snap.ima_count, snap.kernel) == (True, sf.value("tpm.version"), sf.value("tpm.null_name"),
                                             sf.value("tpm.disable_pcr_integrity"), sf.value("ima.measurements"),
                                             sf.value("kernel.release"))
    assert (snap.tpm_version, snap.ima_count, snap.kernel) == ("2", 64, "6.12.9-200.fc41.x86_64")
    gone = Sysfs(TREES / "tpm12-dmesg-only").read()
    assert not gone.tpm_present and gone.notes[0].startswith("no TPM: /sys/class/tpm absent")


def test_saved_blame_is_read_without_the_systemd_marker(tmp_path):
    (tmp_path / "run/tpmtop").mkdir(parents=True)
    (tmp_path / "run/tpmtop/systemd-analyze-blame.txt").write_text("  4.212s systemd-tpm2-setup.service\n")
    sf = collect(RootReader(str(tmp_path)))
    assert [(u.unit, u.took, u.on_critical_path) for u in sf.units] == [
        ("systemd-tpm2-setup.service", Decimal("4.212"), None)]
    rep = build_report(RootReader(str(tmp_path)))
    assert ("Slow TPM units (no critical-chain read: on the path or not is unknown): "
            "systemd-tpm2-setup.service 4.212s.") in rep.verdict
    assert sf.get("systemd.critical-chain") is None  # not running there: a missing file is no news


@pytest.mark.parametrize("line, kind, rc", [
    ("tpm tpm0: A TPM error (2306) occurred attempting extend a PCR value", "tpm-error", 0x902),
    ("tpm tpm0: tpm2_load_context: failed with a TPM error 0x0901", "context-load", 0x901),
    ("tpm tpm0: NULL name has changed, disabling TPM due to interference", "interference", None),
    ("tpm tpm0: null key integrity check failed", "null-key", None),
    ("tpm tpm0: auth session is active", "auth-session", None),
    ("tpm tpm0: [Firmware Bug]: TPM interrupt not working, polling instead", "polling", None),
    ("tpm tpm0: Operation Timed out", "timeout", None),
    ("tpm tpm0: tpm_try_transmit: send(): error -62", "timeout", None),
    ("tpm_tis 00:05: Adjusting reported timeouts: A 10000->750000us B 10000->2000000us", None, None),
])
def test_kernel_tpm_messages_are_classified(line, kind, rc):
    from tpmtop.boot.dmesg import classify

    p = classify(line)
    assert (p.kind, p.rc) == (kind, rc) if kind else p is None


def test_json_has_the_new_facts_with_their_sources(capsys):
    assert main(["boot", "--root", str(D), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    facts = {f["name"]: f for f in doc["facts"]}
    assert facts["tpm.family"] == {"name": "tpm.family", "value": "2.0",
                                   "source": "/sys/class/tpm/tpm0/tpm_version_major", "reason": None,
                                   "other_sources": [{"source": "/run/tpmtop/dmesg.txt:4", "value": "2.0"}]}
    assert facts["tpm.device_id"]["value"] == "0x1B (rev-id 22)"
    assert facts["journal"]["source"] == "/run/tpmtop/journal.txt"
    units = {u["unit"]: u for u in doc["systemd_tpm_units"]}
    assert units["systemd-tpm2-setup.service"] == {
        "unit": "systemd-tpm2-setup.service", "role": "creates the SRK / NvPCRs (systemd-tpm2-setup)",
        "took_s": 1.044, "took_text": "1.044s", "critical_chain_took_s": 1.044, "active_at_s": 9.934,
        "on_critical_path": True}
    loop = doc["journal_tpm_errors"][0]
    assert (loop["count"], loop["first_s"], loop["last_s"], loop["interval_s"], loop["rc"]) == (
        30, 15.912391, 44.912391, 1.0, "0x128")
    assert doc["kernel_tpm_problems"][0]["rc_text"] == "tpm:warn(2.0): out of memory for object contexts"
    assert doc["session_mode"]["rule"] == ("CONFIG_TCG_TPM2_HMAC=y in /boot/config-6.12.9-200.fc41.x86_64, "
                                           "and 6.11.7+ keep the session")
    assert doc["session_mode"]["hwrng_ends_kept_session"] is True
