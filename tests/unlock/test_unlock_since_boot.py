"""`tpmtop unlock --since` across a reboot whose kernel changed: a private swtpm "boots" the
OVMF log made here (tpm2-tools extends each event), a token is enrolled on PCRs 4 and 7 and a
snapshot saved; the swtpm is reset (swtpm_ioctl --init, TPM2_Startup(CLEAR): the PCRs start
again, the seeds and so the token stay) and boots the same log with the kernel image's digest
changed. The token would not unseal, PCR 4 is named, and the event behind it."""

from __future__ import annotations

import json
import struct
import subprocess

from tests.helpers.luks import enroll_systemd, make_image
from tests.helpers.pcrs import PCR_FIXTURES, pcrextend
from tests.helpers.processes import run_tpmtop
from tpmtop.pcrs import eventlog

OVMF_LOG = PCR_FIXTURES / "ovmf" / "binary_bios_measurements"
EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000003


def _boot(tcti: str, log_path) -> None:
    for ev in eventlog.parse_file(str(log_path)).events:
        if ev.type != eventlog.EV_NO_ACTION:
            # every bank the log carries: a bank left at zeros while the log has events for it is
            # a failure of `tpmtop pcrs` (never-extended), and its --save would exit 1
            pcrextend(tcti, ev.pcr, dict(ev.digests))


def _reboot(swtpm) -> None:
    subprocess.run(["swtpm_ioctl", "--tcp", f"127.0.0.1:{swtpm.port + 1}", "-i"], check=True, capture_output=True,
                   timeout=60)
    subprocess.run(["tpm2_startup", "-c", "-T", swtpm.tcti], check=True, capture_output=True, timeout=60)


def _new_kernel(tmp_path):
    """The OVMF log with the kernel image's digests inverted (a new kernel at the same path)."""
    ev = next(e for e in eventlog.parse_file(str(OVMF_LOG)).events if e.type == EV_EFI_BOOT_SERVICES_APPLICATION)
    buf = bytearray(OVMF_LOG.read_bytes())
    p = ev.offset + 12  # pcrIndex, eventType, digest count
    for d in ev.digests.values():
        p += 2  # the digest's algorithm
        buf[p:p + len(d)] = bytes(b ^ 0xFF for b in d)
        p += len(d)
    assert struct.unpack_from("<I", buf, p)[0] == len(ev.data)  # the walk ended at the event's data size
    out = tmp_path / "new-kernel.log"
    out.write_bytes(bytes(buf))
    return out


def test_a_new_kernel_names_pcr_4_and_its_event(tcp_swtpm, tmp_path):
    _boot(tcp_swtpm.tcti, OVMF_LOG)
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=4+7")
    snap = tmp_path / "snap.json"
    r = run_tpmtop("pcrs", "-T", tcp_swtpm.tcti, "--eventlog", str(OVMF_LOG), "--save", str(snap))
    assert r.returncode == 0, r.stderr
    r = run_tpmtop("unlock", img, "-T", tcp_swtpm.tcti, "--since", str(snap), "--eventlog", str(OVMF_LOG))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "would unseal now" in r.stdout and "no bound PCR changed since the snapshot" in r.stdout

    _reboot(tcp_swtpm)
    new_log = _new_kernel(tmp_path)
    _boot(tcp_swtpm.tcti, new_log)
    r = run_tpmtop("unlock", img, "-T", tcp_swtpm.tcti, "--since", str(snap), "--eventlog", str(new_log), "--json")
    assert r.returncode == 1, r.stderr
    (tok,) = json.loads(r.stdout)["devices"][0]["tokens"]
    assert (tok["verdict"], tok["reason"], tok["differs"]) == ("would-not", "PCR 4 (sha256) differs", [4])
    assert list(tok["moved"]) == ["4"]
    assert tok["moved"]["4"].startswith("EV_EFI_BOOT_SERVICES_APPLICATION ")
    assert tok["moved"]["4"].endswith("/File(kernel): digest changed")
