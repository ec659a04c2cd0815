"""Which HMAC-session behaviour the running kernel has, from its version, config and parameters.

Versions from the domain notes §1–2: HMAC sessions arrived in 6.10 (CONFIG_TCG_TPM2_HMAC);
6.10–6.11.6 start a fresh salted session per command; 6.11.7/6.12+ keep it; 6.12 added
``tpm.disable_pcr_integrity`` (PCR extends without a session).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpmtop.boot.cmdline import truthy
from tpmtop.boot.facts import SystemFacts, parse_release

HMAC_SINCE = (6, 10, 0)
KEPT_SINCE = (6, 11, 7)
OPT_OUT_SINCE = (6, 12, 0)


@dataclass
class SessionMode:
    mode: str | None  # "none" | "per-command" | "reuse" | None (cannot tell)
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"mode": self.mode, "reasons": self.reasons}


def _v(t: tuple[int, int, int]) -> str:
    return f"{t[0]}.{t[1]}" + (f".{t[2]}" if t[2] else "")


def infer(sf: SystemFacts) -> SessionMode:
    sm = SessionMode(None)
    why = sm.reasons
    release = sf.value("kernel.release")
    v = parse_release(release)
    if v is None:
        why.append("kernel release unknown")
    elif v < HMAC_SINCE:
        why.append(f"kernel {release} predates HMAC sessions ({_v(HMAC_SINCE)})")
        sm.mode = "none"
        return sm

    built: bool | None = None
    # A readable config without the option means "not set" (or a kernel from before it existed).
    opt = sf.config.get("CONFIG_TCG_TPM2_HMAC", "n") if sf.config is not None else None
    if opt is not None:
        built = opt == "y"
        why.append(f"CONFIG_TCG_TPM2_HMAC={opt}")
    elif sf.get("tpm.null_name") is not None and sf.get("tpm.null_name").ok:
        built = bool(sf.value("tpm.null_name"))
        why.append("/sys/class/tpm/tpm0/null_name " + ("present (HMAC built in)" if built
                                                        else "absent (HMAC not built in)"))
    else:
        why.append("kernel config unreadable and no TPM in sysfs to tell whether HMAC is built in")
    if built is False:
        sm.mode = "none"
        return sm

    param = sf.value("tpm.disable_pcr_integrity")
    cmd = (sf.params or {}).get("tpm.disable_pcr_integrity")
    opted_out = None
    if param is not None:
        opted_out = truthy(param)
        why.append(f"/sys/module/tpm/parameters/disable_pcr_integrity={param}")
    elif cmd is not None:
        if v is not None and v < OPT_OUT_SINCE:
            why.append(f"tpm.disable_pcr_integrity on the command line is ignored before {_v(OPT_OUT_SINCE)}")
            opted_out = False
        else:
            opted_out = truthy(cmd[-1])
            why.append(f"tpm.disable_pcr_integrity={cmd[-1]} on the command line")
    if opted_out:
        sm.mode = "none"
        return sm
    if built is None or v is None:
        return sm
    if v < KEPT_SINCE:
        why.append(f"{release} starts a fresh session for every command ({_v(HMAC_SINCE)} – 6.11.6)")
        sm.mode = "per-command"
    else:
        why.append(f"{release} keeps the session between commands ({_v(KEPT_SINCE)}+)")
        sm.mode = "reuse"
    return sm
