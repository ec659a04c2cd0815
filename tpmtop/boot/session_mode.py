"""Which HMAC-session behaviour the running kernel has, from its version, config and parameters.

Versions from the domain notes §1–2: HMAC sessions arrived in 6.10 (CONFIG_TCG_TPM2_HMAC,
default y on x86_64); 6.10–6.11.6 start a fresh salted session per command; 6.11.7/6.12+ keep
it; 6.12 added ``tpm.disable_pcr_integrity`` (PCR extends without a session); 6.15 stopped
hwrng reads from ending the kept session; 6.18 turned CONFIG_TCG_TPM2_HMAC off by default
(backported to 6.12.y and 6.17.y in Oct 2025). HMAC sessions are TPM 2.0 only: on a TPM 1.2
no session mode applies. ``rule`` names the one rule that decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpmtop.boot.cmdline import truthy
from tpmtop.boot.facts import SystemFacts, parse_release

HMAC_SINCE = (6, 10, 0)
KEPT_SINCE = (6, 11, 7)
OPT_OUT_SINCE = (6, 12, 0)
HWRNG_KEEPS_SINCE = (6, 15, 0)
DEFAULT_OFF_SINCE = (6, 18, 0)
DEFAULT_OFF_BACKPORTS = ((6, 12), (6, 17))  # stable series that took the 6.18 default (Oct 2025)


@dataclass
class SessionMode:
    mode: str | None  # "none" | "per-command" | "reuse" | None (cannot tell, or TPM 1.2)
    reasons: list[str] = field(default_factory=list)
    rule: str | None = None  # the rule that decided, in words
    family: str | None = None  # "1.2" | "2.0" | None
    applies: bool = True  # False on a TPM 1.2: the kernel has no HMAC sessions for it
    hwrng_ends_session: bool | None = None  # only meaningful with a kept session

    def decide(self, mode: str | None, rule: str) -> SessionMode:
        self.mode, self.rule = mode, rule
        return self

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "reasons": self.reasons, "rule": self.rule, "tpm_family": self.family,
                "session_modes_apply": self.applies, "hwrng_ends_kept_session": self.hwrng_ends_session}


def _v(t: tuple[int, int, int]) -> str:
    return f"{t[0]}.{t[1]}" + (f".{t[2]}" if t[2] else "")


def infer(sf: SystemFacts) -> SessionMode:
    sm = SessionMode(None, family=sf.tpm_family)
    why = sm.reasons
    if sm.family == "1.2":
        fam = sf.fact("tpm.family")
        why.append(f"TPM 1.2 ({fam.source}): the kernel's HMAC sessions (tpm2-sessions.c) are for TPM 2.0 "
                   "only; PCR extends go to the chip without a session")
        sm.applies = False
        return sm.decide(None, "TPM 1.2: no session mode applies")
    release = sf.value("kernel.release")
    v = parse_release(release)
    if v is None:
        why.append("kernel release unknown")
    elif v < HMAC_SINCE:
        why.append(f"kernel {release} predates HMAC sessions ({_v(HMAC_SINCE)})")
        return sm.decide("none", f"kernel older than {_v(HMAC_SINCE)}")

    built: bool | None = None
    rule = ""  # set by whichever rule decides
    # A readable config without the option means "not set" (or a kernel from before it existed).
    opt = sf.config.get("CONFIG_TCG_TPM2_HMAC", "n") if sf.config is not None else None
    if opt is not None:
        built = opt == "y"
        why.append(f"CONFIG_TCG_TPM2_HMAC={opt}")
        rule = f"CONFIG_TCG_TPM2_HMAC={opt} in {sf.fact('kernel.config').source}"
    elif (null_name := sf.get("tpm.null_name")) is not None and null_name.ok:
        built = bool(sf.value("tpm.null_name"))
        why.append("/sys/class/tpm/tpm0/null_name " + ("present (HMAC built in)" if built
                                                        else "absent (HMAC not built in)"))
        rule = "null_name " + ("present" if built else "absent") + " in sysfs"
    elif v is not None and v >= DEFAULT_OFF_SINCE:
        why.append(f"kernel config unreadable; since {_v(DEFAULT_OFF_SINCE)} CONFIG_TCG_TPM2_HMAC is off by "
                   "default (a distribution may still turn it on)")
        built, rule = False, f"{_v(DEFAULT_OFF_SINCE)}+ default: CONFIG_TCG_TPM2_HMAC off"
    else:
        why.append("kernel config unreadable and no TPM in sysfs to tell whether HMAC is built in")
        if v is not None and v[:2] in DEFAULT_OFF_BACKPORTS:
            why.append(f"{v[0]}.{v[1]}.y stable kernels from Oct 2025 took {_v(DEFAULT_OFF_SINCE)}'s default "
                       "(HMAC off), earlier ones default to on: the release alone does not say")
        elif v is not None:
            why.append(f"{_v(HMAC_SINCE)} – 6.17 default CONFIG_TCG_TPM2_HMAC to y on x86_64, but the build "
                       "is not known")
    if built is False:
        return sm.decide("none", rule)

    param = sf.value("tpm.disable_pcr_integrity")
    cmd = (sf.params or {}).get("tpm.disable_pcr_integrity")
    opted_out = None
    if param is not None:
        opted_out = truthy(param)
        why.append(f"/sys/module/tpm/parameters/disable_pcr_integrity={param}")
        if opted_out:
            rule = f"disable_pcr_integrity={param} in sysfs"
    elif cmd is not None:
        if v is not None and v < OPT_OUT_SINCE:
            why.append(f"tpm.disable_pcr_integrity on the command line is ignored before {_v(OPT_OUT_SINCE)}")
            opted_out = False
        else:
            opted_out = truthy(cmd[-1])
            why.append(f"tpm.disable_pcr_integrity={cmd[-1]} on the command line")
            if opted_out:
                rule = f"tpm.disable_pcr_integrity={cmd[-1]} on the command line"
    if opted_out:
        return sm.decide("none", rule)
    if built is None or v is None:
        return sm.decide(None, "cannot tell: " + ("release unknown" if v is None else "HMAC build unknown"))
    if v < KEPT_SINCE:
        why.append(f"{release} starts a fresh session for every command ({_v(HMAC_SINCE)} – 6.11.6)")
        return sm.decide("per-command", f"{rule}, and {_v(HMAC_SINCE)} – 6.11.6 start a session per command")
    why.append(f"{release} keeps the session between commands ({_v(KEPT_SINCE)}+)")
    hwrng = sf.config.get("CONFIG_HW_RANDOM_TPM") if sf.config is not None else None
    if v >= HWRNG_KEEPS_SINCE:
        sm.hwrng_ends_session = False
        why.append(f"hwrng reads no longer end the kept session ({_v(HWRNG_KEEPS_SINCE)}+)")
    elif hwrng == "n":
        sm.hwrng_ends_session = False
        why.append("CONFIG_HW_RANDOM_TPM=n: no hwrng reads to end the kept session")
    else:
        sm.hwrng_ends_session = True
        why.append(f"before {_v(HWRNG_KEEPS_SINCE)} every hwrng read from the TPM ends the kept session, so the "
                   "next extend pays the setup again" + (" (CONFIG_HW_RANDOM_TPM=" + hwrng + ")" if hwrng else ""))
    return sm.decide("reuse", f"{rule}, and {_v(KEPT_SINCE)}+ keep the session")
