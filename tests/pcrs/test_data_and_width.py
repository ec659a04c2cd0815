"""Issue 51: event data checked against its digest (an edited boot-loader command line with an
intact digest chain is named, exit 1; a named firmware quirk is accepted, exit 0), and text
output that fits 80 columns (every line of every mode read).

The EV_IPL events are shaped as the boot loaders write them: grub 2 logs
"kernel_cmdline: …" / "grub_cmd: …" with a NUL and extends the string without its prefix
and NUL (grub-core/commands/tpm.c, grub_tpm_verify_string); systemd-boot logs the UTF-16
command line it extends. The quirk event is logged one byte short of its UTF-16 NUL, its
digest over the whole string (the shape of the real Arch log issue 51 cites)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.helpers.pcrs import PCR_FIXTURES, boot, build_log
from tests.helpers.processes import TcpSwtpm, run_tpmtop

EV_IPL, EV_SEPARATOR = 0xD, 0x4
BANKS = ["sha1", "sha256", "sha384", "sha512"]
GRUB_CMDLINE = b"/vmlinuz-6.1.0 root=/dev/sda1 ro quiet"
MENUENTRY = b"menuentry 'Debian GNU/Linux' --class debian {\n\tlinux /vmlinuz-6.1.0 root=/dev/sda1 ro\n}"
SDBOOT = "initrd=\\initrd.img root=UUID=0b2a9f6c-4f3e-4c55-9d0e-1b2c3d4e5f60 rw".encode("utf-16-le") + b"\0"


def _digests(data: bytes) -> dict[str, bytes]:
    return {b: hashlib.new(b, data).digest() for b in BANKS}


def _log(edit: bool = False) -> bytes:
    cmdline = b"kernel_cmdline: " + (GRUB_CMDLINE.replace(b" ro ", b" rw ") if edit else GRUB_CMDLINE) + b"\0"
    events = [(p, EV_SEPARATOR, b"\0\0\0\0", None) for p in range(8)]
    events += [
        (8, EV_IPL, b"grub_cmd: " + MENUENTRY + b"\0", _digests(MENUENTRY)),
        (8, EV_IPL, cmdline, _digests(GRUB_CMDLINE)),  # the digest of what grub measured
        (12, EV_IPL, SDBOOT, _digests(SDBOOT + b"\0")),  # one byte short: the quirk
        (9, EV_IPL, b"/boot/vmlinuz-6.1.0\0", _digests(b"the file's content")),  # a name: not checked
    ]
    return build_log(BANKS, events)


@pytest.fixture
def swtpm():
    s = TcpSwtpm()
    yield s
    s.stop()


def test_an_edited_ev_ipl_string_is_named_and_exits_1_the_unedited_log_exits_0(swtpm, tmp_path):
    good, bad = tmp_path / "good.log", tmp_path / "edited.log"
    good.write_bytes(_log())
    bad.write_bytes(_log(edit=True))
    boot(swtpm.tcti, good.read_bytes())

    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(good), "--json", "--events")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert all(doc["banks"].values()) and doc["data_check"]["mismatch"] == []
    assert doc["data_check"]["checked"] == 11  # 8 separators, 2 grub strings, the UTF-16 line
    assert list(doc["data_check"]["quirks"]) == ["11"]
    assert "one more NUL byte" in doc["events"][11]["data_check"]
    text = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(good), "--events").stdout
    assert "1 by a firmware quirk (event 11" in " ".join(text.split())

    # the same digests, one word of the command line changed: the replay still matches the
    # TPM, and only the data check sees it
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(bad), "--json", "--events")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert all(doc["banks"].values())
    assert doc["data_check"]["mismatch"] == [10]
    assert doc["events"][10]["data_check"] == "mismatch" and " rw quiet" in doc["events"][10]["data"]
    text = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(bad), "--events").stdout
    assert "1 DO NOT HASH TO THEIR DIGEST (event 10)" in " ".join(text.split())
    row = next(line for line in text.splitlines() if line.startswith("  10   8  EV_IPL"))
    assert "kernel_cmdline" in row


def test_real_firmware_logs_pass_the_data_check():
    for fw in ("seabios", "ovmf"):
        r = run_tpmtop("pcrs", "--no-tpm", "--json", "--eventlog", str(PCR_FIXTURES / fw / "binary_bios_measurements"))
        assert r.returncode == 0, r.stderr
        check = json.loads(r.stdout)["data_check"]
        assert check["mismatch"] == [] and check["checked"] >= 10, (fw, check)


@pytest.mark.parametrize("more", [(), ("--events",), ("--all",), ("--all", "--events")])
def test_every_line_fits_80_columns(swtpm, tmp_path, more):
    """On the OVMF log against a TPM that was never extended (every PCR behind, long reasons),
    on the EV_IPL log, and with a crafted note; --wide alone may be wider."""
    ovmf = PCR_FIXTURES / "ovmf" / "binary_bios_measurements"
    ipl = tmp_path / "ipl.log"
    ipl.write_bytes(_log(edit=True))
    outputs = [run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(ovmf), *more),
               run_tpmtop("pcrs", "--no-tpm", "--eventlog", str(ipl), *more),
               run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(ipl), *more)]
    for r in outputs:
        assert r.returncode == 1 and r.stdout, r.stderr
        wide = [line for line in r.stdout.splitlines() if len(line) > 80]
        assert wide == [], wide
    r = run_tpmtop("pcrs", "-T", swtpm.tcti, "--eventlog", str(ovmf), "--wide", *more)
    assert any(len(line) > 80 for line in r.stdout.splitlines())  # whole digests


def test_multi_line_grub_strings_and_post_code_blobs_are_decoded(tmp_path):
    import struct

    log = tmp_path / "decode.log"
    blob = struct.pack("<QQ", 0xFFE00000, 0x200000)
    log.write_bytes(build_log(BANKS, [(8, EV_IPL, b"grub_cmd: " + MENUENTRY + b"\0", _digests(MENUENTRY)),
                                      (0, 0x1, blob, _digests(b"the code itself"))]))
    r = run_tpmtop("pcrs", "--no-tpm", "--json", "--events", "--eventlog", str(log))
    assert r.returncode == 0, r.stderr
    data = [e["data"] for e in json.loads(r.stdout)["events"][1:]]
    assert data == ["grub_cmd: menuentry 'Debian GNU/Linux' --class debian { ⏎ linux /vmlinuz-6.1.0 "
                    "root=/dev/sda1 ro ⏎ }", "POST code at 0xffe00000 (2097152 bytes)"]


def test_no_tpm_line_names_no_tpm(tmp_path):
    import os

    if os.path.exists("/dev/tpmrm0"):
        pytest.skip("this machine has a TPM")
    r = run_tpmtop("pcrs", "--eventlog", str(PCR_FIXTURES / "ovmf" / "binary_bios_measurements"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "no TPM to use" in r.stderr and "--no-tpm replays the event log alone" in r.stderr
