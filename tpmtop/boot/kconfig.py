"""Kernel build options that decide how the kernel uses the TPM."""

from __future__ import annotations

import gzip
import re

from tpmtop.boot.rootfs import RootReader, Unavailable

# Options worth showing, with why they matter for boot time.
OPTIONS: dict[str, str] = {
    "CONFIG_TCG_TPM": "TPM core driver",
    "CONFIG_TCG_TPM2_HMAC": "HMAC/encrypted sessions for the kernel's own TPM commands (6.10+)",
    "CONFIG_TCG_TIS": "TIS (LPC/MMIO) TPM driver",
    "CONFIG_TCG_TIS_SPI": "SPI TPM driver (slow bus)",
    "CONFIG_TCG_TIS_I2C": "I2C TPM driver (slow bus)",
    "CONFIG_TCG_CRB": "CRB (firmware/fTPM) driver",
    "CONFIG_HW_RANDOM_TPM": "TPM as a hwrng (its reads ended the kept session before 6.15)",
    "CONFIG_IMA": "IMA: one PCR extend per measurement",
    "CONFIG_IMA_ARCH_POLICY": "architecture IMA policy (measures with Secure Boot on)",
    "CONFIG_IMA_APPRAISE": "IMA appraisal",
    "CONFIG_IMA_DEFAULT_HASH": "IMA hash algorithm",
    "CONFIG_IMA_MEASURE_PCR_IDX": "PCR IMA extends",
}

_SET = re.compile(r"^(CONFIG_\w+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_\w+) is not set\s*$")


def parse_config(text: str) -> dict[str, str]:
    """All options: ``y``/``m``/value, ``n`` for ``# CONFIG_X is not set``. Unknown lines ignored:
    a kernel config is generated, and its comments vary between versions."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _SET.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip().strip('"')
            continue
        m = _UNSET.match(line)
        if m:
            out[m.group(1)] = "n"
    return out


def read_config(reader: RootReader, release: str | None) -> tuple[dict[str, str], str]:
    """``(options, source)`` from /boot/config-<release>, else /proc/config.gz."""
    reasons = []
    if release:
        path = f"/boot/config-{release}"
        try:
            return parse_config(reader.read_text(path)), path
        except Unavailable as e:
            reasons.append(str(e))
    else:
        reasons.append("kernel release unknown, so /boot/config-<release> cannot be named")
    try:
        raw = reader.read_bytes("/proc/config.gz")
    except Unavailable as e:
        reasons.append(f"{e} (CONFIG_IKCONFIG_PROC off?)")
        raise Unavailable("; ".join(reasons)) from None
    try:
        return parse_config(gzip.decompress(raw).decode("utf-8", "replace")), "/proc/config.gz"
    except (OSError, EOFError) as e:
        raise Unavailable("; ".join(reasons + [f"/proc/config.gz is not gzip: {e}"])) from None
