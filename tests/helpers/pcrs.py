"""Reading the peers' answers: tpm2-tools' YAML (tpm2_pcrread, the `pcrs:` block of
tpm2_eventlog) as {bank: {pcr: bytes}}; and extending a swtpm's PCRs with tpm2_pcrextend."""

from __future__ import annotations

import hashlib
import re
import struct
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


ALG_IDS = {"sha1": 0x0004, "sha256": 0x000B, "sha384": 0x000C, "sha512": 0x000D}
SIZES = {"sha1": 20, "sha256": 32, "sha384": 48, "sha512": 64}


def spec_id_header(banks) -> bytes:
    """A crypto-agile log's first record (TCG PC Client PFP §10.4.5.1): a SHA-1-format
    EV_NO_ACTION whose data is TCG_EfiSpecIdEvent listing ``banks`` (names, repeats allowed)."""
    algs = b"".join(struct.pack("<HH", ALG_IDS[b], SIZES[b]) for b in banks)
    data = (b"Spec ID Event03\0" + struct.pack("<IBBBB", 0, 0, 2, 0, 2) + struct.pack("<I", len(banks))
            + algs + b"\0")
    return struct.pack("<II", 0, 3) + bytes(20) + struct.pack("<I", len(data)) + data


def agile_event(pcr: int, etype: int, digests: dict[str, bytes], data: bytes) -> bytes:
    """One TCG_PCR_EVENT2 with ``digests`` (bank -> digest) in their order."""
    body = b"".join(struct.pack("<H", ALG_IDS[b]) + d for b, d in digests.items())
    return struct.pack("<III", pcr, etype, len(digests)) + body + struct.pack("<I", len(data)) + data


def build_log(banks, events) -> bytes:
    """A crypto-agile log: the header for ``banks``, then ``events`` as (pcr, type, data, digests)
    where digests (bank -> digest) defaults to each bank's hash of the data."""
    out = [spec_id_header(banks)]
    for pcr, etype, data, digests in events:
        if digests is None:
            digests = {b: hashlib.new(b, data).digest() for b in banks}
        out.append(agile_event(pcr, etype, digests, data))
    return b"".join(out)


def boot(tcti: str, log: bytes, banks=None) -> None:
    """What the firmware did: extend every event of ``log`` (parsed by tpmtop's parser, extended
    by tpm2-tools), in ``banks`` only when given."""
    from tpmtop.pcrs import eventlog

    for ev in eventlog.parse(log).events:
        if ev.type == eventlog.EV_NO_ACTION:
            continue
        digests = {b: d for b, d in ev.digests.items() if banks is None or b in banks}
        if digests:
            pcrextend(tcti, ev.pcr, digests)
