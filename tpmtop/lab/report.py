"""The lab's result as text: the kernels side by side, the two ratios, the projection's error.

Every string that came from the guest (its release, its console) is made terminal-safe
here. Layer: lab; no Textual.
"""

from __future__ import annotations

from tpmtop.lab import benchmark
from tpmtop.lab.analysis import BootStats
from tpmtop.lab.run import LabResult
from tpmtop.textsafe import safe


def _f(v: object, fmt: str = "{:.2f}", none: str = "—") -> str:
    return none if v is None else fmt.format(v)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    w = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()

    return [line(header), line(["-" * x for x in w])] + [line(r) for r in rows]


def per_extend_ms(b: BootStats) -> float | None:
    return b.extend_tpm_s / b.extends * 1000 if b.extends else None


def ratio(res: LabResult) -> list[tuple[BootStats, BootStats, float]]:
    """(HMAC boot, baseline boot, per-extend TPM time HMAC-on / HMAC-off)."""
    out = []
    base = [b for b in res.boots if b.kernel == res.baseline and b.ok]
    for b in res.boots:
        if b.ok and b.sessions_started and b.extends and base:
            ref = next((x for x in base if x.index == b.index), base[0])
            on, off = per_extend_ms(b), per_extend_ms(ref)
            if on is not None and off:
                out.append((b, ref, on / off))
    return out


def render(res: LabResult) -> str:
    o = res.options
    m = res.machine
    L = [
        f"# tpmtop lab: {len(o.kernels)} kernels × {o.boots} boot(s), qemu {res.accel.upper()}, "
        f"{o.cpus} vCPUs, {o.mem_mib} MiB; TPM: swtpm behind tpmtop's relay"
        + (
            f", profile {o.profile}" + (f" (seed {o.seed})" if o.seed is not None else "")
            if o.profile
            else ", no profile"
        ),
        f"# host: {m.get('cpu')}, {m.get('cpus')} CPUs, Linux {m.get('kernel')}, "
        f"load {' '.join(m.get('loadavg_at_start', []))} "
        f"at start; {m.get('swtpm')}; {safe(m.get('qemu', ''))}",
        f"# workload: IMA tcb policy, {o.files} files read once by root from a 9p file system; "
        f"captures and logs in {res.out_dir}",
        "",
    ]
    rows = []
    for b in res.boots:
        rows.append(
            [
                f"{b.kernel} #{b.index}",
                safe(b.release or "?"),
                b.hmac_config or "?",
                _f(b.host_to_kernel_s),
                _f(b.host_to_init_s),
                _f(b.guest_init_s),
                _f(b.host_to_workload_end_s),
                _f(b.guest_workload_s),
                _f(b.host_total_s),
                f"{_f(b.ima_measurements, '{}')}/{_f(b.ima_workload, '{}')}",
                "ok" if b.ok else "FAILED",
            ]
        )
    L.append(
        "Boot (seconds; host = this machine's clock from qemu's start, guest = the emulated guest's uptime; "
        "HMAC = CONFIG_TCG_TPM2_HMAC from the guest's /proc/config.gz, ? without IKCONFIG_PROC):"
    )
    L += _table(
        [
            "kernel",
            "release",
            "HMAC",
            "host→kernel",
            "host→/init",
            "guest /init",
            "host→work end",
            "guest work",
            "host total",
            "IMA all/work",
            "",
        ],
        rows,
    )
    L.append("")
    rows = []
    for b in res.boots:
        rows.append(
            [
                f"{b.kernel} #{b.index}",
                str(sum(b.commands_at_boot.values())),
                str(sum(b.commands_total.values())),
                f"{b.sessions_started}/{b.salted_sessions}",
                str(b.null_primaries),
                b.mode or "?",
                f"{b.extends}/{b.extends_with_setup}",
                _f(per_extend_ms(b)),
                _f(b.workload_extend_tpm_p50_us / 1000 if b.workload_extend_tpm_p50_us else None),
                _f(b.tpm_time_boot_s, "{:.3f}"),
                _f(b.tpm_time_total_s, "{:.3f}"),
                _f(b.firmware_tpm_time_s, "{:.3f}"),
            ]
        )
    L.append("Kernel TPM traffic (timed at tpmtop's end of the wire, profile holds included):")
    L += _table(
        [
            "kernel",
            "cmds to /work",
            "cmds all",
            "sessions/salted",
            "null primary",
            "session mode",
            "extends/set-up",
            "ms/extend",
            "p50 work ms",
            "TPM s to work",
            "TPM s all",
            "firmware TPM s",
        ],
        rows,
    )
    L.append("")
    L.append("Commands the kernel sent before the workload, by code:")
    for b in res.boots:
        L.append(f"  {b.kernel} #{b.index}: " + ", ".join(f"{k} {v}" for k, v in sorted(b.commands_at_boot.items())))
    L.append("")
    L.append(
        "Each workload extend's commands (sequence × extends; a FlushContext before a set-up ends a hwrng "
        "read's session):"
    )
    for b in res.boots:
        shapes = "; ".join(f"{k} ×{v}" for k, v in b.extend_shapes.items()) or "none seen"
        L.append(f"  {b.kernel} #{b.index}: {shapes}")
    L.append("")
    traced = [b for b in res.boots if b.probes is not None]
    if traced:
        L.append(
            "Inside the guest: tpmtop's kprobes from boot (`tpmtop kernel --trace`) against the wire, "
            "up to the moment the trace was read:"
        )
        for b in traced:
            pv = b.probes
            assert pv is not None
            verdict = "agree" if pv.agrees else "DIFFER: " + "; ".join(pv.differences)
            L.append(
                f"  {b.kernel} #{b.index}: {pv.commands} commands, {pv.extends} extends ({pv.extends_with_setup} "
                f"with a set-up), {pv.sessions} StartAuthSession, mode {pv.mode or '?'} — {verdict}"
            )
        untraced = [f"{b.kernel} #{b.index}" for b in res.boots if b.probes is None]
        if untraced:
            L.append(f"  no trace from {', '.join(untraced)} (kprobe events missing, or the boot failed)")
        L.append("")
    rs = ratio(res)
    if rs:
        L.append(f"HMAC on / HMAC off, per-extend TPM time (baseline {res.baseline}):")
        for b, ref, r in rs:
            L.append(
                f"  {b.kernel} #{b.index} ({b.mode or '?'}): {per_extend_ms(b):.2f} ms / {per_extend_ms(ref):.2f} ms "
                f"= {r:.2f}× "
                f"({b.extends} vs {ref.extends} extends; {b.extends_with_setup} of the HMAC kernel's extends "
                "set up a session)"
            )
    else:
        L.append("HMAC on / HMAC off: no pair to compare (needs a kernel that started sessions and one that did not)")
    if res.bench:
        bn = res.bench
        L.append(
            f"  bench (`{safe(bn['command'])}`): reuse/none TPM time per extend = "
            f"{bn['reuse_wire_us']['p50'] / 1000:.2f} / {bn['none_wire_us']['p50'] / 1000:.2f} ms (p50) = "
            f"{bn['ratio_p50']:.2f}×; means {bn['ratio_mean']:.2f}×"
        )
        if "per_command_wire_us" in bn:
            L.append(
                f"  bench: per-command/none TPM time per extend = {bn['per_command_wire_us']['p50'] / 1000:.2f} / "
                f"{bn['none_wire_us']['p50'] / 1000:.2f} ms (p50) = {bn['per_command_ratio_p50']:.2f}×; means "
                f"{bn['per_command_ratio_mean']:.2f}×"
            )
        L.append(
            "  The bench's reuse run keeps one session for every extend (its set-up is outside the counted "
            "operations); the kernel's is ended and set up again as the table's set-up count says, and each "
            "set-up adds ContextLoad + StartAuthSession + FlushContext to that extend."
        )
    elif res.bench_error:
        L.append(f"  bench: {safe(res.bench_error)}")
    L.append("")
    if res.projections:
        L.append(
            "`tpmtop boot --capture <HMAC-off boot's capture> --extends N` against the lab's measure "
            "(extra TPM time of the HMAC boot's extends):"
        )
        rows = []
        for p in res.projections:
            rows.append(
                [
                    f"{p.kernel} #{p.index}",
                    p.mode,
                    p.baseline,
                    str(p.extends),
                    _f(p.projected_extra_s, "{:.3f}"),
                    _f(p.measured_extra_s, "{:.3f}"),
                    _f(p.error * 100 if p.error is not None else None, "{:+.0f} %"),
                    f"{p.measured_setups}",
                    _f(p.setup_aware_extra_s, "{:.3f}"),
                ]
            )
        L += _table(
            [
                "HMAC boot",
                "projected as",
                "baseline",
                "N",
                "projected s",
                "measured s",
                "error",
                "set-ups seen",
                "with those set-ups s",
            ],
            rows,
        )
        L.append(
            "  measured = the HMAC boot's extend TPM time − N × the baseline's TPM time per extend; projected as "
            "the session mode the boot's traffic showed (per-command − none, or reuse − none); the reuse mode "
            'counts one set-up, "with those set-ups" prices each one the lab saw.'
        )
        L.append("")
    L += benchmark.table(res.boots, o.profile)
    L.append("")
    for b in res.boots:
        if b.retried_after:
            L.append(f"{b.kernel} #{b.index} is a second attempt: the first crashed: {safe(b.retried_after)}")
    L.append(
        "Notes: the profile governs TPM time only (each command held until the chip's figure has passed since "
        "the send); guest times are an emulated CPU's"
        + (" (TCG), not a hardware figure" if res.accel == "tcg" else "")
        + ". A loaded shared machine: compare ratios from one run."
    )
    return "\n".join(L) + "\n"
