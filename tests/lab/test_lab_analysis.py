"""What the lab makes of a kernel's commands and a guest's console, without a VM (part of
`make test`): the per-command kernel's extends named as 6.10/6.11's, each extend's command
sequence and cost, a crashed guest reported as failed, the benchmark table beside the thread's
figures. The inputs are command streams as the relay records them (code, TPM time, order) and
console lines: data the lab reads, not a TPM."""

from __future__ import annotations

import pytest

from tpmtop.kernel.trace_pipe import KernelCommand, kernel_path
from tpmtop.lab import analysis, benchmark
from tpmtop.lab.guest import Boot, KernelSpec

CL, SAS, FC, EXT, RND = 0x161, 0x176, 0x165, 0x182, 0x17B
# the slb9670 profile's figures, ms (domain notes §3)
MS = {CL: 36.977, SAS: 84.747, FC: 3.195, EXT: 24.356, RND: 3.195}


def _stream(ccs: list[int], e0_ms: float | None = None) -> list[KernelCommand]:
    out, t = [], 0
    for cc in ccs:
        ms = e0_ms if (cc == EXT and e0_ms is not None) else MS[cc]
        out.append(KernelCommand(t_ns=t, wire_ns=int(ms * 1e6), pid=0, comm="guest", cpu=0, cpu_return=0, cc=cc,
                                 tag=0x8002, size=0, rc=0, ret=10, desc=None,
                                 path=kernel_path(cc, None, "guest", True)))
        t += int(ms * 1e6) + 1000
    return out


PER_COMMAND = [CL, SAS, FC, EXT]


def test_a_fresh_session_in_every_extend_is_the_per_command_mode_and_each_extend_shows_its_four_commands():
    # three extends as 6.10/6.11 (and 6.12-percmd) send them, a hwrng read between the first two:
    # its own set-up, GetRandom, and the FlushContext that ends its session
    ccs = PER_COMMAND + [CL, SAS, FC, RND, FC] + PER_COMMAND + PER_COMMAND
    ops, acc = analysis.operations(_stream(ccs))
    ext = [op for op in ops if op.kind == "extend"]
    assert len(ext) == 3 and acc.by_kind["extend"].with_setup == 3
    assert acc.mode()[0] == "per-command"
    shapes, cost = analysis.shapes_and_costs(ext)
    assert shapes == {
        "ContextLoad StartAuthSession FlushContext PCR_Extend": 2,
        "FlushContext ContextLoad StartAuthSession FlushContext PCR_Extend": 1,
    }
    assert cost["StartAuthSession"] == pytest.approx(84.747, abs=0.001)
    assert cost["ContextLoad"] == pytest.approx(36.977, abs=0.001)
    # one extend's TPM time: ContextLoad + StartAuthSession + FlushContext + the HMAC PCR_Extend
    assert ext[0].wire_ns / 1e6 == pytest.approx(149.275, abs=0.001)


def test_a_kept_session_sets_up_once_and_its_extends_are_one_command():
    ops, acc = analysis.operations(_stream(PER_COMMAND + [EXT] * 5))
    ext = [op for op in ops if op.kind == "extend"]
    assert acc.mode()[0] == "reuse"
    shapes, _ = analysis.shapes_and_costs(ext)
    assert shapes == {"ContextLoad StartAuthSession FlushContext PCR_Extend": 1, "PCR_Extend": 5}


def _boot(console: list[str], marks: dict) -> Boot:
    b = Boot(KernelSpec("6.12-hmac", "/nonexistent/bzImage", "/nonexistent/initrd"), 1, qemu_status=0)
    b.console = [(i * 1000, line) for i, line in enumerate(console)]
    b.marks = marks
    return b


def test_a_guest_that_crashed_is_a_failed_boot_that_says_why_and_an_int3_oops_is_named():
    oops = "[    1.812345] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"
    # the workload's end was seen: without the console's crash the boot would count as ok
    marks = {"workload-start": (10, "3.0 20"), "workload-end": (20, "4.0 40")}
    st = analysis.boot_stats(_boot(["Linux version 6.12.118-tpmtop-hmac", oops], marks))[0]
    assert not st.ok
    assert any("crashed" in p and "Oops: int3" in p for p in st.problems)
    assert analysis.int3_oops(_boot([oops], {})) == oops.strip()
    panic = "Kernel panic - not syncing: Attempted to kill init!"
    b = _boot([panic], marks)
    assert analysis.int3_oops(b) is None and analysis.panic_line(b) == panic
    assert analysis.boot_stats(_boot(["Linux version 6.12.118-tpmtop-hmac", "all fine"], marks))[0].ok


def _stats(kernel: str, mode: str, extends: int, ext_ms: float, host_s: float, setups: int, cmd_ms: dict):
    b = analysis.boot_stats(_boot([], {"workload-start": (0, "1 0"), "workload-end": (1, "2 0")}))[0]
    b.kernel, b.mode, b.ok = kernel, mode, True
    b.workload_extends, b.workload_extend_tpm_us = extends, ext_ms * 1000
    b.host_workload_s, b.workload_extends_with_setup, b.extend_command_ms = host_s, setups, cmd_ms
    return b


def _three():
    return [
        _stats("6.12", "none", 1000, 6.40, 40.0, 0, {"PCR_Extend": 6.40}),
        _stats("6.12-percmd", "per-command", 1000, 149.30, 220.0, 1000,
               {"ContextLoad": 36.98, "StartAuthSession": 84.75, "FlushContext": 3.20, "PCR_Extend": 24.37}),
        _stats("6.12-hmac", "reuse", 1000, 26.40, 70.0, 18,
               {"ContextLoad": 36.98, "StartAuthSession": 84.75, "FlushContext": 3.20, "PCR_Extend": 24.37}),
    ]


def test_the_benchmark_table_sets_each_session_mode_beside_the_threads_seconds_and_ratios():
    text = "\n".join(benchmark.table(_three(), "slb9670"))
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("6.12")}
    assert set(rows) == {"6.12", "6.12-percmd", "6.12-hmac"}
    pc = rows["6.12-percmd"]
    # 149.30 / 6.40 = 23.33 over HMAC off in TPM time, 220 / 40 = 5.50 in the guest's wall time,
    # 149.30 ms × 12,313 = 1,838.3 s, beside the thread's 1,941.71 s (157.70 ms) and ×18.9
    for cell in ("1,000", "149.30", "23.33", "5.50", "1,838.3", "1,941.71", "157.70"):
        assert cell in pc.split(), (cell, pc)
    assert pc.endswith("18.9 (18.89)")
    assert "4.12" in rows["6.12-hmac"].split() and "3.93 (3.93)" in rows["6.12-hmac"]
    assert "102.80" in rows["6.12"].split() and "8.35" in rows["6.12"].split()
    # the explanation, from the measured commands: the thread's loop spent 8.35 − 6.40 = 1.95 ms
    # per extend outside the TPM; added to every row, the ratios become (149.30 + 1.95) / (6.40 + 1.95)
    assert "~1.95 ms per extend went outside the TPM" in text
    d = 102.8 / 12_313 * 1000 - 6.40
    assert f"×{(149.30 + d) / (6.40 + d):.2f} (thread ×18.9)" in text and "×18.12" in text
    assert "6.12-percmd: 1,000 of 1,000 extends set up a session" in text
    assert "18 set-ups in 1,000 extends" in text


def test_without_a_profile_the_table_sets_no_chip_arithmetic_against_the_thread():
    text = "\n".join(benchmark.table(_three(), None))
    assert "no profile: swtpm" in text and "neither says what a chip costs" in text
    assert "went outside the TPM" not in text and "added to every kernel" not in text


def test_the_benchmark_table_says_what_is_missing_instead_of_a_ratio_without_a_baseline():
    text = benchmark.table(_three()[1:], "slb9670")
    assert len(text) == 1 and "needs an HMAC-off kernel" in text[0]
    assert "per-command (6.12-percmd)" in text[0] and "reuse (6.12-hmac)" in text[0]
