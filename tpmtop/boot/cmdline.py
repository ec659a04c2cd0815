"""The kernel command line and the parameters that change TPM session and IMA behaviour."""

from __future__ import annotations

import re

from tpmtop.boundedread import excerpt

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


# One word as the kernel splits them (lib/cmdline.c, next_arg): runs of non-space characters,
# where double quotes join spaces into the word (an unclosed quote runs to the end). Each
# alternative starts with a different character, so the match is linear in the text; shlex,
# used before, built each token a character at a time (a 1 MB token took 14 s).
_WORD = re.compile(r'(?:[^\s"]+|"[^"]*(?:"|$))+')


def parse_cmdline(text: str) -> dict[str, list[str | None]]:
    """Parameters in order of appearance; a bare flag maps to ``[None]``. Arguments after
    ``--`` belong to init, not the kernel, so they are dropped. Quotes are removed as the
    kernel does (``ima_policy="appraise_tcb"`` is ``appraise_tcb``)."""
    words = [m.group().replace('"', "") for m in _WORD.finditer(text)]
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


SHOWN_WIDTH = 60


def shown(value: object) -> str:
    """A parameter's value for a report line: as it is when short, else a short excerpt (a
    command line's token can be a megabyte; a line must not)."""
    text = str(value)
    return text if len(text) <= SHOWN_WIDTH else excerpt(text, SHOWN_WIDTH)
