"""Reading the peers' answers: tpm2-tools' YAML (tpm2_pcrread, the `pcrs:` block of
tpm2_eventlog) as {bank: {pcr: bytes}}; and extending a swtpm's PCRs with tpm2_pcrextend."""

from __future__ import annotations

import re
import subprocess

from tests.helpers.paths import FIXTURES

PCR_FIXTURES = FIXTURES / "pcrs"
FIRMWARES = ("seabios", "ovmf")

_BANK = re.compile(r"^ {2}(sha\w+|sm3_256):\s*$")
_PCR = re.compile(r"^ {4}(\d+)\s*:\s*0x([0-9A-Fa-f]+)\s*$")


def parse_pcr_yaml(text: str, after: str | None = None) -> dict[str, dict[int, bytes]]:
    """The PCR block of tpm2-tools' YAML; ``after``: start after the line that equals it
    (tpm2_eventlog prints its events first, then ``pcrs:``)."""
    lines = text.splitlines()
    if after is not None:
        lines = lines[lines.index(after) + 1:]
    out: dict[str, dict[int, bytes]] = {}
    bank = None
    for line in lines:
        if m := _BANK.match(line):
            bank = m.group(1)
            out[bank] = {}
        elif (m := _PCR.match(line)) and bank is not None:
            out[bank][int(m.group(1))] = bytes.fromhex(m.group(2))
    return out


def eventlog_pcrs(path) -> dict[str, dict[int, bytes]]:
    out = subprocess.run(["tpm2_eventlog", str(path)], capture_output=True, text=True, timeout=60, check=True)
    return parse_pcr_yaml(out.stdout, after="pcrs:")


def guest_pcrs(firmware: str) -> dict[str, dict[int, bytes]]:
    return parse_pcr_yaml((PCR_FIXTURES / firmware / "pcrs.yaml").read_text())


def pcrextend(tcti: str, pcr: int, digests: dict[str, bytes]) -> None:
    """One PCR_Extend by tpm2-tools (not tpmtop) with a digest per bank."""
    spec = ",".join(f"{bank}={d.hex()}" for bank, d in digests.items())
    subprocess.run(["tpm2_pcrextend", "-T", tcti, f"{pcr}:{spec}"], check=True, capture_output=True, timeout=60)
