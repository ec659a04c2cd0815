"""The kernel command line and the parameters that change TPM session and IMA behaviour."""

from __future__ import annotations

import shlex

# name -> why it matters. tpm.* parameters also reach a modular tpm via /sys/module.
PARAMS: dict[str, str] = {
    "tpm.disable_pcr_integrity": "1 = PCR extends skip the HMAC session (6.12+)",
    "tpm_tis.interrupts": "TIS interrupt mode (polling is slower)",
    "tpm_tis.force": "force-probe a TIS TPM",
    "ima_policy": "built-in IMA policies (tcb measures every file root reads)",
    "ima_appraise": "IMA appraisal mode",
    "ima_hash": "IMA hash algorithm",
    "ima_template": "IMA template",
    "ima_tcb": "old spelling of ima_policy=tcb",
    "ima": "ima=off disables IMA on some distributions",
    "lsm": "LSM order (must include integrity for IMA)",
    "initcall_debug": "logs every initcall's duration to dmesg",
}


def parse_cmdline(text: str) -> dict[str, list[str | None]]:
    """Parameters in order of appearance; a bare flag maps to ``[None]``. Arguments after
    ``--`` belong to init, not the kernel, so they are dropped."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: the kernel itself splits on spaces then
        words = text.split()
    out: dict[str, list[str | None]] = {}
    for w in words:
        if w == "--":
            break
        name, eq, value = w.partition("=")
        # The kernel treats '-' and '_' in parameter names alike.
        out.setdefault(name.replace("-", "_"), []).append(value if eq else None)
    return out


def relevant(params: dict[str, list[str | None]]) -> dict[str, str | None]:
    """The TPM/IMA parameters present; a repeated parameter's last value wins, as in the kernel."""
    return {k: params[k][-1] for k in PARAMS if k in params}


def truthy(value: str | None) -> bool | None:
    if value is None:
        return True
    v = value.strip().lower()
    if v in ("1", "y", "yes", "on", "true"):
        return True
    if v in ("0", "n", "no", "off", "false"):
        return False
    return None
