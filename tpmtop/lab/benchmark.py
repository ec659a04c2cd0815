"""The thread's benchmark beside the lab's: N IMA extends on HMAC off, a session per command
(6.10/6.11) and a kept session (6.12).

The thread (linux-integrity, the lazy-flush series' discussion) extended a PCR with the 12,313
entries of an IMA measurement list: 102.8 s without HMAC, 1,941.71 s with HMAC as 6.10/6.11 do
it, 404.4 s with the lazy-flush patches (what became 6.12) — ×18.9 and ×3.93 over no HMAC, on
a TPM the thread does not name. Those are one loop's wall times; the lab's figures are the TPM
time of the workload's extends at tpmtop's end of the wire (the chip's share, which a profile
sets), and the guest's wall time on the host clock (an emulated CPU under TCG: not a hardware
figure). The differences are explained from the measured commands, in :func:`explain`.

Layer: lab; no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpmtop.lab.analysis import BootStats

THREAD_N = 12_313
# seconds for THREAD_N extends, by the session mode the kernel had
THREAD_S = {"none": 102.8, "per-command": 1941.71, "reuse": 404.4}
THREAD_RATIO = {"per-command": 18.9, "reuse": 3.93}  # as the thread rounded them
MODE_WORDS = {"none": "HMAC off", "per-command": "session per command (6.10/6.11)", "reuse": "kept session (6.12)"}
ORDER = ("none", "per-command", "reuse")


@dataclass
class Row:
    kernel: str
    mode: str
    boots: int
    extends: int  # the workload's extends (N), per boot
    tpm_s: float  # their TPM time, per boot (mean over the kernel's boots)
    host_s: float | None  # the workload's wall time on the host clock, per boot
    setups: int  # workload extends that set up a session, per boot (the first boot's)
    command_ms: dict[str, float]  # command name -> mean TPM ms inside the workload's extends

    @property
    def ms_per_extend(self) -> float:
        return self.tpm_s / self.extends * 1000

    @property
    def scaled_s(self) -> float:
        """The TPM time this kernel would spend on the thread's 12,313 extends at this rate."""
        return self.ms_per_extend * THREAD_N / 1000

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"ms_per_extend": self.ms_per_extend, "scaled_to_thread_n_s": self.scaled_s}


def rows(boots: list[BootStats]) -> dict[str, Row]:
    """One row per session mode: the first kernel of that mode whose boots ran the workload."""
    out: dict[str, Row] = {}
    by_kernel: dict[str, list[BootStats]] = {}
    for b in boots:
        if b.ok and b.mode in ORDER and b.workload_extends and b.workload_extend_tpm_s is not None:
            by_kernel.setdefault(b.kernel, []).append(b)
    for kernel, bs in by_kernel.items():
        mode = bs[0].mode
        assert mode is not None
        if mode in out or any(b.mode != mode for b in bs):
            continue
        hosts = [b.host_workload_s for b in bs if b.host_workload_s is not None]
        out[mode] = Row(
            kernel,
            mode,
            len(bs),
            bs[0].workload_extends,
            sum(b.workload_extend_tpm_s or 0.0 for b in bs) / len(bs),
            sum(hosts) / len(hosts) if hosts else None,
            bs[0].workload_extends_with_setup,
            bs[0].extend_command_ms,
        )
    return out


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def table(boots: list[BootStats], profile: str | None) -> list[str]:
    rs = rows(boots)
    if "none" not in rs or not ({"per-command", "reuse"} & rs.keys()):
        have = ", ".join(f"{m} ({r.kernel})" for m, r in rs.items()) or "none"
        return [
            "The thread's benchmark: needs an HMAC-off kernel and a per-command or kept-session kernel that "
            f"ran the workload (this run: {have})"
        ]
    none = rs["none"]
    header = [
        "kernel",
        "sessions",
        "N",
        "TPM s for N",
        "ms/extend",
        "× off",
        "host s for N",
        "× off",
        f"TPM s ×{THREAD_N:,}/N",
        f"thread s ({THREAD_N:,})",
        "thread ms/extend",
        "thread ×",
    ]
    body = []
    for mode in ORDER:
        r = rs.get(mode)
        if r is None:
            continue
        t = THREAD_S[mode]
        body.append(
            [
                r.kernel,
                MODE_WORDS[mode],
                f"{r.extends:,}",
                f"{r.tpm_s:,.2f}",
                f"{r.ms_per_extend:.2f}",
                "1" if mode == "none" else f"{r.ms_per_extend / none.ms_per_extend:.2f}",
                _f(r.host_s, "{:,.2f}"),
                "1"
                if mode == "none"
                else _f(r.host_s / none.host_s if r.host_s and none.host_s else None, "{:.2f}"),
                f"{r.scaled_s:,.1f}",
                f"{t:,.2f}",
                f"{t / THREAD_N * 1000:.2f}",
                "1" if mode == "none" else f"{THREAD_RATIO[mode]} ({t / THREAD_S['none']:.2f})",
            ]
        )
    w = [max(len(x[i]) for x in [header] + body) for i in range(len(header))]
    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()

    lines = [
        f"The thread's benchmark, N IMA extends as fast as the guest makes them (TPM time at tpmtop's end of the "
        f"wire, {'profile ' + profile if profile else 'no profile: swtpm'}; host s = the workload's wall time on "
        "this machine's clock):",
        fmt(header),
        fmt(["-" * x for x in w]),
    ]
    lines += [fmt(r) for r in body]
    lines += ["  " + x for x in explain(rs, profile)]
    return lines


def explain(rs: dict[str, Row], profile: str | None) -> list[str]:
    """Where the lab's ratios and the thread's differ, and why, from the measured commands."""
    none = rs["none"]
    e0 = none.command_ms.get("PCR_Extend")
    out = []
    for mode in ("per-command", "reuse"):
        r = rs.get(mode)
        if r is None:
            continue
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r.command_ms.items())
        out.append(
            f"{r.kernel}: {r.setups:,} of {r.extends:,} extends set up a session; TPM ms per command inside "
            f"them: {parts}"
        )
    thread_none_ms = THREAD_S["none"] / THREAD_N * 1000
    if e0 is not None and profile:  # against swtpm's microseconds the thread's loop time means nothing
        d = thread_none_ms - e0
        out.append(
            f"The thread's ratios are wall time of a loop: its HMAC-off run spent {thread_none_ms:.2f} ms per "
            f"extend where a bare PCR_Extend here took {e0:.2f} ms of TPM time, so ~{d:.2f} ms per extend went "
            "outside the TPM (its own loop, IMA, a slower chip for that command) in every run, which shrinks its "
            "ratios; the lab's TPM-time ratios leave that out."
        )
        adj = []
        for mode in ("per-command", "reuse"):
            r = rs.get(mode)
            if r is not None and d > 0:
                adj.append(
                    f"{MODE_WORDS[mode]} ×{(r.ms_per_extend + d) / (none.ms_per_extend + d):.2f} "
                    f"(thread ×{THREAD_RATIO[mode]})"
                )
        if adj:
            out.append(f"With those {d:.2f} ms added to every kernel's per-extend time: " + "; ".join(adj) + ".")
    kept = rs.get("reuse")
    if kept is not None and kept.setups:
        out.append(
            f"The kept session is set up again after each hwrng read before 6.15 ({kept.setups} set-ups in "
            f"{kept.extends:,} extends here, at the guest's hwrng pace): its ratio depends on how many extends "
            "share one set-up, which the thread does not give."
        )
    out.append(
        "Host seconds are the emulated guest's pace and its kernel's configuration as much as HMAC's: compare them "
        "only between kernels built alike (the lab's three 6.12s, not Debian's binary beside them)."
    )
    if profile:
        out.append(
            f"The {profile} profile holds each command to that chip's published time, so the per-command row's "
            "ms/extend follows from those figures (ContextLoad + StartAuthSession + FlushContext + the HMAC "
            "PCR_Extend): it checks the kernel's command sequence, not a chip."
        )
    else:
        out.append(
            "Without a profile the TPM is swtpm on this machine (microseconds per command) and the guest's own "
            "work (under TCG, emulated: the salt's ECDH, the KDFs) dominates the host seconds: neither says what a "
            "chip costs."
        )
    return out
