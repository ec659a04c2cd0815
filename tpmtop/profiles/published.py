"""The built-in chip profiles other than slb9670, derived from wolfTPM's published benchmarks.

wolfTPM's ``docs/benchmarks.md`` (wolfSSL/wolfTPM on GitHub) times whole operations on nine
chips: RSA-2048 key generation, RSA-2048 private (RSA_Decrypt), ECDSA P-256 sign and verify,
and for the SLB9672 also ECC P-256 key generation, ECDH P-256 and RSA-2048 public. None of it
is a kernel PCR extend, so a chip's profile is that table plus stated rules:

- a command that *is* a published operation takes its figure (kind ``published``):
  Sign ≈ ECDSA sign, VerifySignature ≈ ECDSA verify, RSA_Decrypt ≈ RSA private,
  RSA_Encrypt ≈ RSA public, ECDH_ZGen ≈ ECDH, CreatePrimary (the kernel's ECC P-256 null
  primary) ≈ ECC key generation, salted StartAuthSession (an ECDH under the null key) ≈ ECDH;
- a salted StartAuthSession without a published ECDH: the SLB9670's published 84,747 µs
  scaled by the chip's ECDSA-sign time over the SLB9670's (one P-256 scalar multiplication
  each, as in ECDH) — kind ``estimated``;
- the commands that do no asymmetric work (PCR_Extend with and without an HMAC session,
  ContextLoad, ContextSave, FlushContext, GetRandom): the SLB9670's figure (the seeds'
  breakdown, domain notes §3) scaled by the chip's *speed factor*, the geometric mean of its
  RSA-private, ECDSA-sign and ECDSA-verify times over the SLB9670's (RSA key generation is
  left out: its prime search is random, wolfTPM's figure one draw of it) — ``estimated``,
  and the roughest figure here: bus and firmware dispatch, not crypto, dominate those;
- anything else (CreatePrimary without an ECC key-generation figure, …): ``not_published``.

Why a module and not only JSON: the eight files are generated from :data:`CHIPS` (one place
for each published figure) by ``python -m tpmtop.profiles.published --write``;
tests/profiles/test_chip_profiles.py checks the files equal what this module makes, and
each figure against the table in docs/profiles.md.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

SOURCE = "wolfTPM docs/benchmarks.md (github.com/wolfSSL/wolfTPM), as quoted in the project's domain notes §10"
CREATED = "2026-12-07"

# The SLB9670's figures the rules scale (µs): the seeds' published breakdown (domain notes §3)
# and the slb9670 profile's estimates (ContextSave, GetRandom), as in tpmtop/profiles/slb9670.json.
SLB9670_US = {
    ("PCR_Extend", "no_session"): 6360, ("PCR_Extend", "hmac_session"): 24356,
    ("ContextLoad", "any"): 36977, ("StartAuthSession", "any"): 84747, ("FlushContext", "any"): 3195,
    ("ContextSave", "any"): 36977, ("GetRandom", "no_session"): 3195, ("GetRandom", "hmac_session"): 21191,
}
SLB9670_KIND = {("ContextSave", "any"): "estimated", ("GetRandom", "no_session"): "estimated",
                ("GetRandom", "hmac_session"): "estimated"}
SLB9670_WHAT = {"PCR_Extend": "PCR_Extend", "ContextLoad": "ContextLoad of the null primary",
                "StartAuthSession": "salted StartAuthSession", "FlushContext": "FlushContext",
                "ContextSave": "ContextSave", "GetRandom": "GetRandom"}

# wolfTPM operation -> (what it is, the TPM command it is, key words for the detail)
OPS = {
    "rsa_keygen": "RSA-2048 key generation",
    "rsa_private": "RSA-2048 private (RSA_Decrypt)",
    "rsa_public": "RSA-2048 public (RSA_Encrypt)",
    "ecdsa_sign": "ECDSA P-256 sign",
    "ecdsa_verify": "ECDSA P-256 verify",
    "ecc_keygen": "ECC P-256 key generation",
    "ecdh": "ECDH P-256",
}
# command -> the published operation it is (first available wins)
DIRECT = {
    "Sign": ("ecdsa_sign", "an ECC P-256 key's Sign (an RSA key's costs about RSA private; a capture does not "
                           "say which key)"),
    "VerifySignature": ("ecdsa_verify", "an ECDSA P-256 signature's VerifySignature"),
    "RSA_Decrypt": ("rsa_private", "RSA_Decrypt with an RSA-2048 key"),
    "RSA_Encrypt": ("rsa_public", "RSA_Encrypt with an RSA-2048 key"),
    "ECDH_ZGen": ("ecdh", "ECDH_ZGen on P-256"),
    "CreatePrimary": ("ecc_keygen", "CreatePrimary of the kernel's ECC P-256 null primary (an RSA-2048 "
                                     "primary costs about RSA key generation)"),
}
FACTOR_OPS = ("rsa_private", "ecdsa_sign", "ecdsa_verify")
SCALED = ("PCR_Extend", "ContextLoad", "FlushContext", "ContextSave", "GetRandom")


@dataclass(frozen=True)
class Chip:
    name: str
    model: str
    maker: str
    ms: dict[str, float]  # wolfTPM operation -> ms per operation
    chip: dict[str, Any] = field(default_factory=dict)  # extra identity (manufacturer id, interface)


# domain notes §10 (wolfTPM docs/benchmarks.md), ms per operation.
CHIPS: tuple[Chip, ...] = (
    Chip("slb9670", "OPTIGA SLB9670", "Infineon",
         {"rsa_keygen": 2196, "rsa_private": 163, "ecdsa_sign": 68.9, "ecdsa_verify": 113.5},
         {"manufacturer": "IFX", "interface": "SPI"}),
    Chip("slb9672", "OPTIGA SLB9672", "Infineon",
         {"rsa_keygen": 1568, "rsa_private": 77, "ecdsa_sign": 35.6, "ecdsa_verify": 24.1, "ecc_keygen": 136,
          "ecdh": 66, "rsa_public": 9.1}, {"manufacturer": "IFX"}),
    Chip("slb9673", "OPTIGA SLB9673", "Infineon",
         {"rsa_keygen": 1911, "rsa_private": 168, "ecdsa_sign": 72.1, "ecdsa_verify": 57.9},
         {"manufacturer": "IFX", "interface": "I2C"}),
    Chip("st33ktpm2x", "ST33KTPM2X", "STMicroelectronics",
         {"rsa_keygen": 1944, "rsa_private": 90.8, "ecdsa_sign": 25.3, "ecdsa_verify": 36.5},
         {"manufacturer": "STM"}),
    Chip("st33tphf2x", "ST33TPHF2X", "STMicroelectronics",
         {"rsa_keygen": 7455, "rsa_private": 248, "ecdsa_sign": 42.3, "ecdsa_verify": 74.0},
         {"manufacturer": "STM"}),
    Chip("attpm20", "ATTPM20", "Microchip",
         {"rsa_keygen": 5276, "rsa_private": 118, "ecdsa_sign": 58.7, "ecdsa_verify": 43.0}),
    Chip("npct650", "NPCT650", "Nuvoton",
         {"rsa_keygen": 4479, "rsa_private": 541, "ecdsa_sign": 190, "ecdsa_verify": 265},
         {"manufacturer": "NTC"}),
    Chip("npct750", "NPCT750", "Nuvoton",
         {"rsa_keygen": 3409, "rsa_private": 70.3, "ecdsa_sign": 56.4, "ecdsa_verify": 39.2},
         {"manufacturer": "NTC"}),
    Chip("jetson-orin-ftpm", "Jetson Orin fTPM", "NVIDIA",
         {"rsa_keygen": 736, "rsa_private": 11.9, "ecdsa_sign": 45.1, "ecdsa_verify": 31.7},
         {"interface": "firmware TPM"}),
)
BY_NAME = {c.name: c for c in CHIPS}
BASE = BY_NAME["slb9670"]


def speed_factor(chip: Chip) -> float:
    """Geometric mean of the chip's RSA-private, ECDSA-sign and -verify times over the SLB9670's."""
    return math.prod(chip.ms[o] / BASE.ms[o] for o in FACTOR_OPS) ** (1 / len(FACTOR_OPS))


def _ms(v: float) -> str:
    return f"{v:,g} ms"


def _published(chip: Chip, op: str, what: str) -> dict[str, Any]:
    us = chip.ms[op] * 1000
    return {"median_us": _num(us), "source": {
        "kind": "published", "operation": OPS[op],
        "detail": f"published: wolfTPM's {OPS[op]} on the {chip.model}, {_ms(chip.ms[op])}; taken as {what} "
                  f"({SOURCE})"}}


def _num(v: float) -> int | float:
    v = round(v)
    return int(v)


def commands_of(chip: Chip) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The profile's ``commands`` and ``not_published`` members for a chip other than the SLB9670."""
    cmds: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    f = speed_factor(chip)
    ratios = ", ".join(f"{OPS[o]} {chip.ms[o]:g}/{BASE.ms[o]:g}" for o in FACTOR_OPS)
    for cc, (op, what) in DIRECT.items():
        if op in chip.ms:
            cmds[cc] = {"any": _published(chip, op, what)}
        else:
            missing[cc] = f"wolfTPM publishes no {OPS[op]} for the {chip.model} ({what})"
    if "ecdh" in chip.ms:
        cmds["StartAuthSession"] = {"any": _published(
            chip, "ecdh", "the kernel's salted StartAuthSession (an ECDH under the null primary; the session's "
                          "KDF and nonces left out)")}
    else:
        e = chip.ms["ecdsa_sign"] / BASE.ms["ecdsa_sign"]
        us = SLB9670_US[("StartAuthSession", "any")] * e
        cmds["StartAuthSession"] = {"any": {"median_us": _num(us), "source": {
            "kind": "estimated", "scaled_from": "slb9670 StartAuthSession", "factor": round(e, 4),
            "detail": f"estimated: no ECDH published for the {chip.model}; the SLB9670's salted StartAuthSession "
                      f"(84,747 µs, published, Sept 2024 ftrace) × {e:.4f}, the chip's ECDSA P-256 sign over the "
                      f"SLB9670's ({chip.ms['ecdsa_sign']:g}/{BASE.ms['ecdsa_sign']:g} ms, wolfTPM): both are one "
                      f"P-256 scalar multiplication = {_num(us):,} µs"}}}
    for (cc, variant), base_us in SLB9670_US.items():
        if cc not in SCALED:
            continue
        us = base_us * f
        base_kind = SLB9670_KIND.get((cc, variant), "published")
        sess = {"no_session": " without a session", "hmac_session": " in an HMAC session"}.get(variant, "")
        cmds.setdefault(cc, {})[variant] = {"median_us": _num(us), "source": {
            "kind": "estimated", "scaled_from": f"slb9670 {cc} {variant}", "factor": round(f, 4),
            "detail": f"estimated: no figure published for the {chip.model}; the SLB9670's {SLB9670_WHAT[cc]}{sess} "
                      f"({base_us:,} µs, {base_kind}) × {f:.4f}, the chip's speed factor (geometric mean of "
                      f"{ratios} ms, wolfTPM) = {_num(us):,} µs; this command does no asymmetric crypto, so "
                      f"bus and firmware, which the factor does not measure, may dominate"}}
    return cmds, missing


def profile_doc(chip: Chip) -> dict[str, Any]:
    cmds, missing = commands_of(chip)
    published = ", ".join(f"{OPS[o]} {_ms(v)}" for o, v in chip.ms.items())
    return {
        "schema": "tpmtop.profile/1",
        "name": chip.name,
        "description": f"{chip.maker} {chip.model}: per-command latencies derived from wolfTPM's published "
                       f"per-operation benchmarks and the SLB9670's published session breakdown; no per-command "
                       f"figure of this chip is published.",
        "created": CREATED,
        "chip": {"model": chip.model, "maker": chip.maker, **chip.chip, "simulated": False},
        "commands": cmds,
        "not_published": missing,
        "notes": [
            f"Source: {SOURCE}. Published for this chip (ms per operation): {published}.",
            f"Speed factor {speed_factor(chip):.4f}: geometric mean of its RSA-2048 private, ECDSA P-256 sign and "
            "verify times over the SLB9670's; RSA key generation left out (its prime search is random).",
            "Estimated figures scale the SLB9670's (tpmtop profile show slb9670), so they carry its measurement "
            "(kernel 6.11-rc2 ftrace, Sept 2024) and the factor's error: use them for the order of magnitude.",
        ],
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def builtin_text(name: str) -> str:
    return resources.files("tpmtop.profiles").joinpath(f"{name}.json").read_text("utf-8")


def main(argv: list[str]) -> int:
    """``--write``: (re)write the generated profile files next to this module; ``--check``:
    exit 1 when one differs."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    bad = 0
    for chip in CHIPS:
        if chip is BASE:
            continue
        text = dumps(profile_doc(chip))
        path = os.path.join(here, f"{chip.name}.json")
        if "--write" in argv:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        elif builtin_text(chip.name) != text:
            print(f"{path}: differs from what tpmtop.profiles.published makes", file=sys.stderr)
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
