"""``tpmtop lab``: boot each kernel N times with its TPM served by tpmtop, measure, compare.

Per boot: :func:`tpmtop.lab.guest.boot_once` (qemu + the relay + a private swtpm, shaped to a
chip profile), :func:`tpmtop.lab.analysis.boot_stats`, and one ``tpmtop.capture/1`` file of
the kernel's commands (origin ``kernel``, the bytes of each command and response, the
kernel's operations) that ``tpmtop compare``, ``replay``, ``boot --capture`` and ``export``
read. Then the two other ways to the same number, both run here, on this machine, in this run:

- ``tpmtop bench --sim --profile P --op extend --modes none,reuse[,per-command] --engine native``: tpmtop's
  own re-enactment of the kernel's extend sequences; its reuse/none TPM-time ratio beside the
  lab's HMAC-on/HMAC-off per-extend ratio;
- ``tpmtop boot --capture <the HMAC-off boot's capture> --extends N``: the projection of the
  HMAC boot's extra time in the session mode its traffic showed (per-command for a kernel that
  sets up a session per extend, reuse for a kept session), beside the extra the lab measured.

A boot whose guest crashed with ``Oops: int3`` (boot-time kprobes under multi-threaded TCG) is
booted once more; its first attempt's logs stay beside, and the report says so.

Layer: lab; no Textual.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpmtop.errors import UsageError
from tpmtop.lab import DEFAULT_KERNELS, analysis, benchmark, kernels  # noqa: F401 - DEFAULT_KERNELS: the CLI's default
from tpmtop.lab.guest import boot_once

if TYPE_CHECKING:
    from tpmtop.importers.observed import ObservedExchange
    from tpmtop.kernel.trace_pipe import KernelCommand, KernelOp
    from tpmtop.lab.guest import Boot, KernelSpec
    from tpmtop.profiles.profile import Profile


@dataclass
class LabOptions:
    kernels: list[str]
    profile: str | None = "slb9670"
    seed: int | None = 1
    boots: int = 1
    files: int = 100
    out_dir: str | None = None
    timeout_s: float = 900.0
    accel: str | None = None
    cpus: int = 2
    mem_mib: int = 1024
    bench_n: int = 100
    append: str = ""
    trace: bool = True  # arm tpmtop's kprobes in the guest from boot and set what they saw beside the wire


@dataclass
class Projection:
    """``tpmtop boot --capture``'s projection of one HMAC boot's extra time, and the measure."""

    kernel: str
    index: int
    baseline: str
    extends: int
    projected_extra_s: float | None
    measured_extra_s: float
    projected_setups: int  # the projection's set-ups (reuse: one)
    measured_setups: int
    setup_aware_extra_s: float | None  # the same formula with the set-ups the lab counted
    detail: str = ""
    mode: str = "reuse"  # the projection's session mode: the one the boot's traffic showed

    @property
    def error(self) -> float | None:
        if self.projected_extra_s is None or not self.measured_extra_s:
            return None
        return (self.projected_extra_s - self.measured_extra_s) / self.measured_extra_s


@dataclass
class LabResult:
    options: LabOptions
    accel: str
    out_dir: str
    boots: list[analysis.BootStats] = field(default_factory=list)
    bench: dict[str, Any] | None = None
    bench_error: str | None = None
    projections: list[Projection] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "tpmtop.lab/1",
            "machine": self.machine,
            "accel": self.accel,
            "options": self.options.__dict__,
            "baseline": self.baseline,
            "wall_s": round(self.wall_s, 3),
            "boots": [b.to_json() for b in self.boots],
            "bench": self.bench,
            "bench_error": self.bench_error,
            "projections": [p.__dict__ | {"error": p.error} for p in self.projections],
            "benchmark": {m: r.to_json() for m, r in benchmark.rows(self.boots).items()},
        }


def detect_accel() -> str:
    """kvm only with hardware virtualisation: kvm_pvm's /dev/kvm boots only PVM guest kernels."""
    if (os.path.exists("/dev/kvm") and os.access("/dev/kvm", os.R_OK | os.W_OK)
            and (os.path.isdir("/sys/module/kvm_intel") or os.path.isdir("/sys/module/kvm_amd"))):
        return "kvm"
    return "tcg"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        swtpm = (
            subprocess.run(["swtpm", "--version"], capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[0]
            .split(",")[0]
        )
    except (OSError, IndexError):
        swtpm = "unknown"
    try:
        qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout.splitlines()[
            0
        ]
    except (OSError, IndexError):
        qemu = "unknown"
    load = Path("/proc/loadavg").read_text().split()[:3] if os.path.exists("/proc/loadavg") else []
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "swtpm": swtpm,
        "qemu": qemu,
        "loadavg_at_start": load,
    }


def check_environment() -> None:
    if os.geteuid() != 0:
        raise UsageError("tpmtop lab needs root: qemu exports this machine's root read-only to the guest over 9p")
    for prog, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("swtpm", "swtpm")):
        if shutil.which(prog) is None:
            raise UsageError(f"{prog} is not installed (Debian: apt-get install {pkg}; `make lab` installs it)")
    if not os.path.exists(kernels.BUSYBOX):
        raise UsageError("busybox-static is not installed (/bin/busybox; `make lab` installs it)")


def run_lab(opts: LabOptions, log: Callable[[str], None] = print) -> LabResult:
    started = time.monotonic()
    check_environment()
    root = kernels.repo_root()
    cache = os.path.join(root, ".cache", "tpmtop-lab")
    out = opts.out_dir or os.path.join(cache, "runs", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    os.makedirs(out, exist_ok=True)
    profile = None
    if opts.profile:
        from tpmtop.profiles.loader import load_profile

        profile = load_profile(opts.profile)
    specs = [kernels.resolve(k, root=root, python=sys.executable, cache=cache) for k in opts.kernels]
    res = LabResult(opts, opts.accel or detect_accel(), out, machine=machine())
    captures: dict[tuple[str, int], str] = {}
    for spec in specs:
        for i in range(opts.boots):
            run_dir = os.path.join(out, f"{spec.name}-boot{i + 1}")
            os.makedirs(run_dir, exist_ok=True)
            log(f"lab: booting {spec.name} ({i + 1}/{opts.boots}, {res.accel}) …")
            append = opts.append
            if opts.trace:  # tpmtop's kprobes from early boot, read back after the workload
                from tpmtop.kernel.probes import boot_cmdline

                append = f"{append} {boot_cmdline(release=spec.release)}".strip()
            st, b, kcs, xs, ops = _boot_and_read(spec, i, run_dir, cache, root, opts, profile, res.accel, append)
            int3 = analysis.int3_oops(b)
            if not st.ok and int3 is not None:
                # a known hazard of boot-time kprobes under multi-threaded TCG (docs/lab.md): once
                # more, the first attempt's logs kept beside
                log(f"lab: {spec.name} boot {i + 1}: the guest crashed ({int3[:80]}), a kprobe under TCG; "
                    "booting it once more")
                first = f"{run_dir}-attempt1"
                shutil.rmtree(first, ignore_errors=True)
                os.rename(run_dir, first)
                os.makedirs(run_dir, exist_ok=True)
                st, b, kcs, xs, ops = _boot_and_read(spec, i, run_dir, cache, root, opts, profile, res.accel, append)
                st.retried_after = f"{int3} (logs: {first})"
            path = os.path.join(out, f"{spec.name}-boot{i + 1}.capture.json")
            _write_capture(path, st, kcs, xs, ops, spec, profile, res)
            st.capture_path = path
            captures[(spec.name, i + 1)] = path
            res.boots.append(st)
            log(
                f"lab: {spec.name} boot {i + 1}: {'ok' if st.ok else 'FAILED: ' + '; '.join(st.problems)}; "
                f"{sum(st.commands_total.values())} kernel TPM commands, {st.sessions_started} sessions, "
                f"{st.extends} extends, mode {st.mode}"
            )
    res.baseline = baseline_kernel(res.boots)
    res.bench, res.bench_error = run_bench(opts, out, per_command=any(b.mode == "per-command" for b in res.boots))
    res.projections = project(res, captures, out)
    res.wall_s = time.monotonic() - started
    with open(os.path.join(out, "lab.json"), "w") as f:
        json.dump(res.to_json(), f, indent=1, default=str)
    return res


def _boot_and_read(spec: KernelSpec, i: int, run_dir: str, cache: str, root: str, opts: LabOptions,
                   profile: Profile | None, accel: str, append: str
                   ) -> tuple[analysis.BootStats, Boot, list[KernelCommand], list[ObservedExchange], list[KernelOp]]:
    b = boot_once(
        spec,
        i + 1,
        run_dir=run_dir,
        share_parent=os.path.join(cache, "shares"),
        repo=root,
        python=sys.executable,
        files=opts.files,
        profile=profile,
        seed=None if opts.seed is None else opts.seed + i,
        accel=accel,
        cpus=opts.cpus,
        mem_mib=opts.mem_mib,
        append=append,
        timeout_s=opts.timeout_s,
    )
    st, kcs, xs, ops, _ = analysis.boot_stats(b)
    if opts.trace:
        st.probes = analysis.probe_view(os.path.join(run_dir, "trace.txt"), b, kcs)
    return st, b, kcs, xs, ops


def _write_capture(path: str, st: analysis.BootStats, kcs: list[KernelCommand], xs: list[ObservedExchange],
                   ops: list[KernelOp], spec: KernelSpec, profile: Profile | None, res: LabResult) -> None:
    from tpmtop.capture.write import write_capture
    from tpmtop.kernel.capture import kernel_capture

    class _Seen:  # what the kernel capture says about its trace: the relay loses nothing
        lost = 0
        orphans = 0
        op_probes = False

    t0 = xs[0].t_unix_ns if xs else time.time_ns()
    cap = kernel_capture(
        kcs,
        ops,
        t0,
        _Seen(),
        f"tpmtop lab: {spec.name} under qemu ({res.accel}), "
        f"TPM: swtpm behind tpmtop's relay" + (f", profile {profile.name}" if profile else ""),
        st.mode,
        xs=xs,
        simulated=True,
    )
    if profile is not None:
        cap["tpm"]["profile"] = profile.name
    cap["lab"] = {
        "kernel": spec.name,
        "image": spec.image,
        "release": st.release,
        "boot": st.index,
        "accel": res.accel,
        "ok": st.ok,
        "ima_measurements": st.ima_measurements,
        "ima_workload": st.ima_workload,
        "mode": st.mode,
        "mode_why": st.mode_why,
    }
    write_capture(path, cap)


def baseline_kernel(boots: list[analysis.BootStats]) -> str | None:
    """The HMAC-off kernel the HMAC kernels are compared with: of the kernels that started no
    session, one of the HMAC kernels' series (6.12 for 6.12-hmac), else the first."""
    off = [b for b in boots if b.ok and b.sessions_started == 0 and b.extends]
    on = [b for b in boots if b.ok and b.sessions_started]
    if not off:
        return None
    series = {".".join((b.release or "").split(".")[:2]) for b in on}
    for b in off:
        if ".".join((b.release or "").split(".")[:2]) in series:
            return b.kernel
    return off[0].kernel


def run_bench(opts: LabOptions, out: str, per_command: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """``tpmtop bench``'s none and reuse extends (and per-command, when a kernel booted here
    started a session per extend): tpmtop's own re-enactment of the kernels' sequences."""
    path = os.path.join(out, "bench.capture.json")
    modes = ["none", "reuse"] + (["per-command"] if per_command else [])
    cmd = [
        sys.executable,
        "-m",
        "tpmtop",
        "bench",
        "--sim",
        "--op",
        "extend",
        "--modes",
        ",".join(modes),
        "--engine",
        "native",
        "-n",
        str(opts.bench_n),
        "--warmup",
        "5",
        "-q",
        "--json",
        path,
    ]
    if opts.profile:
        cmd += ["--profile", opts.profile] + (["--seed", str(opts.seed)] if opts.seed is not None else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["tpmtop bench failed"])[-1]
    with open(path) as f:
        data = json.load(f)
    runs = {r["mode"]: r for r in data["runs"] if r.get("op") == "extend"}
    if any(m not in runs for m in modes):
        return None, f"tpmtop bench gave no {'/'.join(modes)} extend runs"
    w = {m: runs[m]["wire_us"] for m in modes}
    pc = {}
    if per_command:
        pc = {
            "per_command_wire_us": w["per-command"],
            "per_command_ratio_p50": w["per-command"]["p50"] / w["none"]["p50"],
            "per_command_ratio_mean": w["per-command"]["mean"] / w["none"]["mean"],
            "per_command_commands_per_op": runs["per-command"].get("commands_per_op"),
        }
    return pc | {
        "command": " ".join(["tpmtop"] + cmd[3:]),
        "capture": path,
        "none_wire_us": w["none"],
        "reuse_wire_us": w["reuse"],
        "ratio_p50": w["reuse"]["p50"] / w["none"]["p50"],
        "ratio_mean": w["reuse"]["mean"] / w["none"]["mean"],
        "reuse_commands_per_op": runs["reuse"].get("commands_per_op"),
    }, None


def project(res: LabResult, captures: dict[tuple[str, int], str], out: str) -> list[Projection]:
    """For each HMAC boot: ``tpmtop boot --capture BASELINE --extends N`` (reuse − none) beside
    the lab's measured extra TPM time of its N extends over the baseline's per-extend time."""
    if res.baseline is None:
        return []
    base = [b for b in res.boots if b.kernel == res.baseline and b.ok]
    empty = tempfile.mkdtemp(prefix="tpmtop-lab-root-")  # boot reads no facts: only the capture
    projections = []
    try:
        for b in res.boots:
            if not b.ok or not b.sessions_started or not b.extends:
                continue
            ref = next((x for x in base if x.index == b.index), base[0])
            if ref.capture_path is None:  # its capture was not written: nothing to project from
                continue
            per_off = ref.extend_tpm_s / ref.extends
            measured = b.extend_tpm_s - b.extends * per_off
            cmd = [
                sys.executable,
                "-m",
                "tpmtop",
                "boot",
                "--root",
                empty,
                "--capture",
                ref.capture_path,
                "--extends",
                str(b.extends),
                "--json",
            ]
            p = subprocess.run(cmd, capture_output=True, text=True)
            projected, setup_aware, detail = None, None, ""
            # the projection's mode is the one the boot's traffic showed: a session per extend
            # (6.10/6.11, 6.12-percmd) or a kept one (6.12); reuse counts one set-up
            mode = "per-command" if b.mode == "per-command" else "reuse"
            if p.returncode == 0:
                got = json.loads(p.stdout)["projection"]
                modes = got["modes"]
                r, n = modes[mode].get("total_s"), modes["none"].get("total_s")
                if r is not None and n is not None:
                    projected = r - n
                    detail = f"{mode}: {modes[mode].get('arithmetic')}; none: {modes['none'].get('arithmetic')}"
                comps = got.get("components_us") or {}
                if mode == "per-command":
                    setup_aware = projected  # every extend already priced with its set-up
                elif all(k in comps for k in ("L", "S", "F")) and projected is not None:
                    setup_us = sum(comps[k]["us"] for k in ("L", "S", "F"))
                    setup_aware = projected + (b.extends_with_setup - 1) * setup_us / 1e6
            else:
                detail = (p.stderr.strip().splitlines() or ["tpmtop boot failed"])[-1]
            projections.append(
                Projection(
                    b.kernel,
                    b.index,
                    ref.kernel,
                    b.extends,
                    projected,
                    measured,
                    b.extends if mode == "per-command" else 1,
                    b.extends_with_setup,
                    setup_aware,
                    detail,
                    mode,
                )
            )
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    with open(os.path.join(out, "projections.txt"), "w") as f:
        for pj in projections:
            f.write(f"{pj.kernel} boot {pj.index}: {pj.detail}\n")
    return projections
