"""`tpmtop kernel`: the trace_pipe parser on text in the documented ftrace output format
(three kernel generations' layouts, lost-event markers, interleaved CPUs, a task migrating
between entry and return), and the live path where this machine allows it."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.helpers.paths import TESTS
from tests.helpers.processes import run_tpmtop
from tpmtop.capture import load_capture
from tpmtop.kernel import probes
from tpmtop.kernel.trace_pipe import Parser, parse_line, parse_text

FIX = TESTS / "fixtures" / "kernel"


def _text(name: str) -> str:
    return (FIX / name).read_text()


def test_linux_6_10_ima_extend_sequence_with_hwrng_and_user_space_interleaved():
    """6.x layout (5 latency chars): per extend ContextLoad → StartAuthSession → FlushContext →
    PCR_Extend from the kworker, hwrng and a /dev/tpmrm0 client on other CPUs in between."""
    cmds, p = parse_text(_text("trace-6.10-ima-hmac.txt"), byteorder="little")
    assert p.lost == 0 and p.orphans == 0 and p.pending() == 0
    kw = [c for c in cmds if c.pid == 97]
    assert [c.cc for c in sorted(kw, key=lambda c: c.t_ns)] == [0x161, 0x176, 0x165, 0x182] * 2
    assert kw[0].comm == "kworker/u8:2-events_unbound"
    sas = next(c for c in kw if c.cc == 0x176)
    assert sas.wire_ns == 84_747_000 and sas.migrated and (sas.cpu, sas.cpu_return) == (1, 3)
    assert sas.path == "session set-up [tpm2_start_auth_session]" and sas.rc == 0
    ext = next(c for c in kw if c.cc == 0x182)
    assert ext.path == "PCR extend (IMA / kernel) [tpm2_pcr_extend]" and ext.tag == 0x8002 and ext.size == 0x79
    assert ext.caller == "tpm2_pcr_extend" and ext.desc == "attempting extend a PCR value"
    hw = next(c for c in cmds if c.comm == "hwrng")
    assert hw.cc == 0x17B and hw.path == "hwrng / get_random [tpm2_get_random]" and hw.wire_ns == 70_700_000
    user = next(c for c in cmds if c.comm == "tpm2_getrandom")
    assert user.path.startswith("user space via /dev/tpm") and user.rc is None and user.wire_ns == 110_000


def test_operation_probes_wrap_the_commands_and_give_the_host_its_share():
    """6.12 with the tpm2_pcr_extend/tpm2_get_random events: each operation holds the commands
    its task sent between entry and return; the rest of its time is the host's. A FlushContext
    outside any operation is the kernel ending its kept session before a user-space command."""
    p = Parser(byteorder="little")
    cmds = []
    for line in _text("trace-6.12-kept-session-ops.txt").splitlines():
        cmds.extend(p.feed(line))
    ops = p.take_ops()
    assert p.op_probes and p.orphans == 0 and p.pending() == 0 and p.take_ops() == []
    assert [(o.kind, [c.cc for c in o.commands]) for o in ops] == [
        ("extend", [0x161, 0x176, 0x165, 0x182]), ("extend", [0x182]), ("extend", [0x182]),
        ("get_random", [0x17B]), ("extend", [0x161, 0x176, 0x165, 0x182]), ("extend", [0x182])]
    first = ops[0]
    assert first.pid == 1200 and first.ret == 0 and not first.estimated
    # entry 200.000000, return 200.151...: the commands' 149.3 ms plus the host's gaps
    assert first.wire_ns == 36_977_000 + 84_747_000 + 3_195_000 + 24_356_000
    assert first.total_ns > first.wire_ns and first.host_ns == first.total_ns - first.wire_ns
    assert ops[3].ret == 32  # tpm2_get_random returns the bytes it got
    end = [c for c in cmds if c.path.startswith("session end")]
    assert [(c.cc, c.comm, c.op) for c in end] == [(0x165, "tpm2_pcrread", None)]
    assert all(c.op is not None for c in cmds if c.cc in (0x182, 0x176))


def test_without_operation_probes_operations_are_assembled_from_the_commands():
    """6.10 text (no operation events): a task's set-up commands and the PCR_Extend that
    closes them are one extend, timed first entry to last return; a user-space command from
    another task is no part of it."""
    from tpmtop.kernel.ops import Assembler, KernelAccounts

    cmds, _p = parse_text(_text("trace-6.10-ima-hmac.txt"), byteorder="little")
    a, acc = Assembler(), KernelAccounts()
    ops = []
    for kc in sorted(cmds, key=lambda c: c.t_ns + c.wire_ns):
        acc.add_command(kc)
        op = a.feed(kc)
        if op is not None:
            ops.append(op)
            acc.add_op(op)
    ext = [o for o in ops if o.kind == "extend"]
    assert len(ext) == 2 and all(o.estimated and [c.cc for c in o.commands] == [0x161, 0x176, 0x165, 0x182]
                                 for o in ext)
    assert ext[0].total_ns == 1038_264_358_000 - 1038_100_002_000
    assert acc.mode() == ("per-command", "a fresh salted session in each of 2 extends (Linux 6.10–6.11 behaviour)")


def test_cli_from_trace_prices_the_kernels_operations():
    r = run_tpmtop("kernel", "--from-trace", str(FIX / "trace-6.12-kept-session-ops.txt"), "-q")
    assert r.returncode == 0, r.stderr
    row = next(line.split() for line in r.stdout.splitlines() if line.startswith("extend "))
    assert row[:3] == ["extend", "5", "2"]  # five extends, two of them set up a session
    assert "sessions: reuse: kept session: 2 of 5 extends set one up" in r.stdout
    assert "set-ups after: user space (tpm2_pcrread) ×1" in r.stdout


def test_5_x_layout_with_tgid_column_and_lost_events():
    """record-tgid's `(  pid)` column and 4 flag chars; a CPU:0 [LOST 4 EVENTS] marker in the
    middle of a command: no latency is invented across the gap."""
    cmds, p = parse_text(_text("trace-5.15-tgid-extend.txt"), byteorder="little")
    assert p.lost == 4
    assert [c.wire_ns for c in cmds] == [6_360_000] * 3
    assert all(c.cc == 0x182 and c.rc == 0 for c in cmds)
    assert p.orphans == 2  # the return and the cmd return whose entries were overwritten
    assert p.pending() == 0


def test_layout_without_irq_info_and_a_comm_with_dashes():
    """Old layout (no irq-info columns); trusted-key unseals failing with TPM_RC_PCR_CHANGED."""
    cmds, _ = parse_text(_text("trace-irqinfo-off-unseal-retry.txt"), byteorder="little")
    assert len(cmds) == 4
    assert {(c.comm, c.pid, c.cc, c.rc, c.path) for c in cmds} == \
        {("systemd-cryptse", 812, 0x15E, 0x128, "trusted keys (unseal) [tpm2_unseal_cmd]")}


@pytest.mark.parametrize("name", ["trace-6.1-debian-qemu-tpmrm.txt", "trace-6.12-debian-qemu-tpmrm.txt"])
def test_real_kernel_trace_names_clients_devices_and_the_resource_manager(name):
    """Captured from Debian's 6.1.0-57 and 6.12.117 kernels (scripts/kernel-vm.sh: qemu, tpm-tis,
    swtpm, ima_policy=tcb) with tpmtop's own probes: tpm2_getrandom through /dev/tpmrm0 and
    /dev/tpm0, a /dev/hwrng read, tpm2_createprimary/readpublic/startauthsession/flushcontext
    through /dev/tpmrm0, and IMA measuring what ran. The kernel runs a client's command in a
    kworker (tpm2-tss opens the device O_NONBLOCK), so the client comes from its write(2); the
    response code of a user-space command from tpm2_commit_space; the resource manager's own
    ContextSave/ContextLoad/FlushContext are named as such, not as session set-up."""
    cmds, p = parse_text(_text(name), byteorder="little")
    assert (p.lost, p.orphans, p.pending(), p.dropped) == (0, 0, 0, 0) and len(cmds) == 105
    ima = [c for c in cmds if c.cc == 0x182]
    assert len(ima) == 56
    assert {(c.path, c.desc, c.tag, c.size, c.rc, c.task) for c in ima} == \
        {("PCR extend (IMA / kernel) [tpm2_pcr_extend]", "attempting extend a PCR value", 0x8002, 203, 0, None)}
    hw = [c for c in cmds if c.caller == "tpm2_get_random"]
    assert sorted(c.comm for c in hw) == ["dd", "hwrng"]  # a /dev/hwrng read, and the hwrng kthread
    assert {(c.cc, c.rc, c.path) for c in hw} == {(0x17B, 0, "hwrng / get_random [tpm2_get_random]")}
    user = [c for c in cmds if c.path.startswith("user space via ")]
    assert all(c.task.startswith("kworker/") and c.rc == 0 for c in user)  # answered, code traced
    by_dev = {}
    for c in user:
        by_dev.setdefault((c.comm, c.pid, c.device), []).append(c.cc)
    getrandoms = [k for k in by_dev if k[0] == "tpm2_getrandom"]
    assert sorted(k[2] for k in getrandoms) == ["/dev/tpm0", "/dev/tpmrm0"]
    assert all(by_dev[k] == [0x17B, 0x17A, 0x17B] for k in getrandoms)
    prim = next(k for k in by_dev if k[0] == "tpm2_createprim")
    assert 0x131 in by_dev[prim] and 0x176 in by_dev[prim]  # CreatePrimary, its StartAuthSession
    rm = [c for c in cmds if c.path.startswith("resource manager")]
    assert {c.cc for c in rm} == {0x162, 0x161, 0x165}  # ContextSave, ContextLoad, FlushContext
    assert all(c.device == "/dev/tpmrm0" and c.task.startswith("kworker/") for c in rm)
    assert {c.path for c in rm} == {"resource manager (/dev/tpmrm0) [tpm2_save_context]",
                                    "resource manager (/dev/tpmrm0) [tpm2_load_context]",
                                    "resource manager (/dev/tpmrm0) [tpm2_flush_context]"}
    assert {c.comm for c in rm} == {"tpm2_createprim", "tpm2_readpublic", "tpm2_startauths", "tpm2_flushconte"}
    # the RM saving a session the TPM had already ended: TPM_RC_REFERENCE_H0, as the TPM answered
    assert sum(1 for c in rm if c.rc == 0x910) == 3
    assert not any(c.desc == "(fault)" for c in cmds)  # desc=NULL is printed (fault): no description
    assert not any(c.path.startswith("session set-up") for c in cmds)  # no HMAC sessions on these kernels


def test_a_user_space_command_without_the_optional_probes_is_known_by_its_task():
    """Where tpm_common_write / tpm2_*_space could not be probed, the command is still counted,
    named by the task that ran it, with its response code unknown (as before)."""
    lines = [ln for ln in _text("trace-6.12-debian-qemu-tpmrm.txt").splitlines()
             if not any(f" {e}: " in ln for e in ("write", "rm_prep", "rm_prep_ret", "rm_commit",
                                                   "rm_commit_ret", "rm_del", "rm_del_ret"))]
    cmds, p = parse_text("\n".join(lines), byteorder="little")
    assert p.orphans == 0 and len(cmds) == 105
    user = [c for c in cmds if c.path.startswith("user space via /dev/tpm*")]
    assert len(user) == 21 and all(c.comm.startswith("kworker/") and c.rc is None and c.task is None for c in user)


def test_parse_line_forms():
    ev = parse_line("  <idle>-0     [002] d.h1.  1234.5678: tx: (tpm_transmit+0x0/0x3a0) tag=0x180 "
                    "size=0xc000000 cc=0x7b010000")
    assert ev.comm == "<idle>" and ev.cpu == 2 and ev.t_ns == 1234_567_800_000
    assert parse_line("CPU:3 [LOST 99 EVENTS]") == (3, 99)
    assert parse_line("# tracer: nop") is None and parse_line("garbage") is None
    # the caller when another kretprobe on tpm_transmit_cmd got there first (seen on 6.1 with two tpmtops)
    two = Parser(byteorder="little")
    two.feed("python-175 [001] ..... 9.0: cmd: (tpm_transmit_cmd+0x0/0x90) desc=\"attempting extend a PCR value\"")
    two.feed("python-175 [001] ..... 9.1: tx: (tpm_transmit+0x0/0x400) tag=0x280 size=0xcb000000 cc=0x82010000")
    two.feed("python-175 [001] ..... 9.2: tx_ret: (tpm_transmit_cmd+0x25/0x90 <- tpm_transmit) ret=19")
    kc, = two.feed("python-175 [001] ..... 9.3: cmd_ret: ([unknown/kretprobe'd] <- tpm_transmit_cmd) rc=0")
    assert kc.caller is None and kc.path == "PCR extend (IMA / kernel)" and kc.rc == 0
    # the line's comm is "<...>" once tracefs's saved_cmdlines forgot the pid: the probe's own comm=$comm
    ev = parse_line('           <...>-301  [000] .....  7.0: write: (tpm_common_write+0x4/0x1a0) cc=0x7b010000 len=12 '
                    'comm="tpm2_getrandom"')
    assert (ev.comm, ev.pid) == ("tpm2_getrandom", 301)
    big = Parser(byteorder="big")
    big.feed("a-1 [000] .... 1.000000: tx: (tpm_transmit+0x0/0x3a0) tag=0x8001 size=0xc cc=0x17b")
    out = big.feed("a-1 [000] .... 1.000100: tx_ret: (x+0x1/0x2 <- tpm_transmit) ret=10")
    assert out[0].cc == 0x17B and out[0].wire_ns == 100_000  # a big-endian CPU reads wire order


def test_cli_from_trace_writes_a_kernel_capture_and_names_the_pattern(tmp_path):
    """Unseal retried with TPM_RC_PCR_CHANGED (0x128) as a capture, and as a pattern."""
    out = tmp_path / "k.json"
    r = run_tpmtop("kernel", "--from-trace", str(FIX / "trace-irqinfo-off-unseal-retry.txt"), "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert sum(1 for line in r.stdout.splitlines() if "  Unseal  " in line and "rc 0x128" in line) == 4
    assert "Unseal       4       4" in r.stdout  # the summary: 4 commands, 4 errors
    assert "pattern: Unseal failing with 0x128" in r.stderr and "4 times, 8.00 ms lost" in r.stderr
    cap = load_capture(out)
    assert [e["origin"] for e in cap["events"]] == ["kernel"] * 4
    e = cap["events"][0]
    assert (e["comm"], e["pid"], e["rc"], e["caller"]) == ("systemd-cryptse", 812, 0x128, "tpm2_unseal_cmd")
    assert cap["runs"][0]["mode"] == "kernel" and cap["runs"][0]["errors"] == 4


def test_cli_from_trace_rejects_text_without_probe_events(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("# tracer: nop\nhello\n")
    r = run_tpmtop("kernel", "--from-trace", str(f))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_boot_cmdline_has_the_probe_definitions():
    r = run_tpmtop("kernel", "--boot-cmdline")
    assert r.returncode == 0
    line = r.stdout.strip()
    assert line.startswith("kprobe_event=p:tpmtop/tx,tpm_transmit,") and " " not in line.split(" trace_event")[0]
    assert "trace_event=tpmtop:*" in line
    assert "trace_clock=global" in line  # a clock switch at late_initcall would empty the buffer


def test_probe_arguments_follow_the_kernel_signature():
    """tpm_transmit lost its tpm_space argument in 5.1: the buffer moved from $arg3 to $arg2."""
    old = probes.probe_lines("g", release="4.19.0-26-amd64")
    new = probes.probe_lines("g", release="6.10.3-200.fc40.x86_64")
    assert "cc=+6($arg3):x32" in old[0] and "desc=+0($arg7):string" in old[2]
    assert "cc=+6($arg2):x32" in new[0] and "desc=+0($arg4):string" in new[2]
    by_event = {d.event: d.line for d in probes.probe_defs("g", release="6.10.3-200.fc40.x86_64")}
    assert all("comm=$comm" in by_event[e] for e in ("tx", "cmd", "write"))
    # the first session's handle after 0, 1 or 2 handles, and the operations around the commands
    assert "s14=+14($arg2):x32 s18=+18($arg2):x32 s22=+22($arg2):x32" in by_event["tx"]
    assert by_event["op_extend"] == "p:g/op_extend tpm2_pcr_extend"
    assert by_event["op_extend_ret"] == "r:g/op_extend_ret tpm2_pcr_extend ret=$retval:s32"


from tests.helpers.kernel_live import live_unavailable as _live_unavailable  # noqa: E402
from tests.helpers.kernel_live import require_live  # noqa: E402


def test_without_kprobes_the_cli_says_why_in_one_line():
    """Wherever live tracing is impossible, `tpmtop kernel` is exit 1 and one line, no traceback."""
    why = _live_unavailable()
    if why is None:
        pytest.skip("live tracing works here; see test_live_kernel_trace")
    r = run_tpmtop("kernel", "--duration", "1")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_live_kernel_trace(tmp_path, tracers):
    """Live: a tpm2_getrandom through /dev/tpmrm0 shows up as a user-space GetRandom; the probe
    group and tpmtop's tracefs instance are gone after SIGTERM, which exits 130."""
    require_live()
    out = tmp_path / "live.json"
    t = tracers("--json", str(out))
    t.wait_armed()
    subprocess.run(["tpm2_getrandom", "-T", "device:/dev/tpmrm0", "8"], check=True, timeout=120,
                   capture_output=True)
    t.wait_line(lambda ln: " GetRandom " in ln and "user space via /dev/tpmrm0 (tpm2_getrandom)" in ln,
                "the GetRandom on tpmtop's stdout")
    assert t.stop(signal.SIGTERM) == 130, t.why()
    assert not t.group_armed() and not t.instance_exists()
    cap = json.loads(out.read_text())
    assert any(e["command"] == "TPM2_CC_GetRandom" for e in cap["events"])


def test_read_pipe_follows_a_pipe_in_pieces_and_stops_when_told(tmp_path):
    """The live reader on a FIFO fed the 6.10 text in odd-sized pieces (lines split across
    reads, as trace_pipe hands them out): the same commands as the file parse, then it stops
    on its condition while the writer keeps the pipe open."""
    import threading

    from tpmtop.kernel.live import read_pipe

    text = _text("trace-6.10-ima-hmac.txt").encode()
    fifo = tmp_path / "trace_pipe"
    os.mkfifo(fifo)
    done = threading.Event()

    def writer():
        fd = os.open(fifo, os.O_WRONLY)
        try:
            for i in range(0, len(text), 97):
                os.write(fd, text[i:i + 97])
            done.wait(60)  # keep the pipe open, as trace_pipe stays open
        finally:
            os.close(fd)

    want, _ = parse_text(text.decode(), byteorder="little")
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    got = []
    parser = Parser(byteorder="little")
    for kc in read_pipe(str(fifo), parser, stop=lambda: len(got) >= len(want) or done.is_set()):
        got.append(kc)
        if len(got) == len(want):
            break
    done.set()
    t.join(30)
    assert [(c.cc, c.pid, c.wire_ns, c.rc) for c in got] == [(c.cc, c.pid, c.wire_ns, c.rc) for c in want]


def test_a_killed_tpmtops_probe_group_is_removed_at_the_next_start(tmp_path, tracers):
    """SIGKILL leaves the group and its tracefs instance behind (nothing can run); the next
    `tpmtop kernel` removes both and says so, and removes its own on exit."""
    require_live()
    first = tracers("-q", name="first")
    first.wait_armed()
    first.kill()
    assert first.group_armed() and first.instance_exists()  # left behind by the SIGKILL
    r = run_tpmtop("kernel", "-q", "--duration", "1", timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"removed stale probe group {first.group}" in r.stderr
    assert not first.group_armed() and not first.instance_exists()
    assert probes.GROUP_PREFIX not in probes.find_tracefs().read("kprobe_events")  # nor the second's


def test_cli_summary_counts_user_space_commands_whose_rc_is_unknown(tmp_path):
    """A /dev/tpmrm0 command's response code is invisible to the probes, but it was answered:
    its latency is in the per-command table and the capture's run, and it is no error."""
    out = tmp_path / "k.json"
    r = run_tpmtop("kernel", "--from-trace", str(FIX / "trace-6.10-ima-hmac.txt"), "-q", "--json", str(out))
    assert r.returncode == 0, r.stderr
    row = next(line.split() for line in r.stdout.splitlines() if line.startswith("GetRandom"))
    assert row[1:3] == ["2", "0"]
    cap = load_capture(out)
    assert cap["runs"][0]["commands"]["TPM2_CC_GetRandom"]["count"] == 2 and cap["runs"][0]["errors"] == 0
    user = next(e for e in cap["events"] if e["comm"] == "tpm2_getrandom")
    assert user["rc"] is None and user["rc_text"] == "response code not traced"


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.one_of(
    st.text(max_size=120),
    st.sampled_from(_text("trace-6.10-ima-hmac.txt").splitlines()).map(lambda s: s[: len(s) // 2]),
    st.sampled_from(_text("trace-5.15-tgid-extend.txt").splitlines()),
    st.sampled_from(_text("trace-6.12-debian-qemu-tpmrm.txt").splitlines())), max_size=30))
def test_parser_never_raises_on_hostile_text(lines):
    """Cut lines, arbitrary text and real lines in any order: the parser never raises."""
    p = Parser(byteorder="little")
    for line in lines:
        for kc in p.feed(line):
            assert kc.wire_ns >= 0
    for kc in p.flush():
        assert kc.wire_ns >= 0


def test_a_return_probe_that_reads_the_response_gives_user_space_its_rc():
    """On 6.10+ tx_ret reads the response header too (rsp_rc=+6($arg2)): a /dev/tpmrm0
    client's Unseal failing with TPM_RC_PCR_CHANGED (0x128) is a failure, not "answered"."""
    lines = [
        "  systemd-cryptse-812     [002] .....   512.000000: tx: (tpm_transmit+0x0/0x3a0) tag=0x280 "
        "size=0x5b000000 cc=0x5e010000",
        "  systemd-cryptse-812     [002] .....   512.002000: tx_ret: (tpm_dev_transmit+0x5e/0x120 <- tpm_transmit) "
        "ret=10 rsp_rc=0x28010000",
        "  systemd-cryptse-812     [002] .....   512.100000: tx: (tpm_transmit+0x0/0x3a0) tag=0x280 "
        "size=0x5b000000 cc=0x5e010000",
        "  systemd-cryptse-812     [002] .....   512.101000: tx_ret: (tpm_dev_transmit+0x5e/0x120 <- tpm_transmit) "
        "ret=-62 rsp_rc=0x28010000",  # -ETIME: no response, whatever the buffer still holds
    ]
    cmds, _ = parse_text("\n".join(lines), byteorder="little")
    assert [(c.cc, c.rc, c.ret) for c in cmds] == [(0x15E, 0x128, 10), (0x15E, None, -62)]
    tx_ret = {d.event: d for d in probes.probe_defs("g", release="6.12.1")}["tx_ret"]
    assert tx_ret.line == "r:g/tx_ret tpm_transmit ret=$retval:s64 rsp_rc=+6($arg2):x32"  # 6.12 takes it
    old = {d.event: d for d in probes.probe_defs("g", release="6.1.0")}["tx_ret"]
    assert old.line == "r:g/tx_ret tpm_transmit ret=$retval:s64"  # 6.1 refuses $argN in a return probe
    live = {d.event: d for d in probes.probe_defs("g", release="6.1.0", live=True)}["tx_ret"]
    assert "rsp_rc" in live.line and live.fallback == old.line  # live: tried, then the plain one


def _le32(v: int) -> str:
    return f"0x{int.from_bytes(v.to_bytes(4, 'big'), 'little'):x}"


def _kernel_command(t: float, comm: str, pid: int, cc: int, caller: str, us: float, session: int | None,
                    handles: int) -> list[str]:
    """One tpm_transmit_cmd → tpm_transmit call as the probes print it (6.x layout), with the
    session handle fetches at the offsets for 0, 1 and 2 handles (only the right one is real)."""
    tag = 0x0280 if session is not None else 0x0180  # TPM_ST_SESSIONS / NO_SESSIONS, CPU order
    fetch = {14: 0, 18: 0, 22: 0}
    if session is not None:
        fetch[10 + 4 * handles + 4] = session
    s = " ".join(f"s{o}={_le32(v)}" for o, v in fetch.items())
    head = f"{comm:>16}-{pid:<7} [001] ....."
    return [f'{head} {t:12.6f}: cmd: (tpm_transmit_cmd+0x0/0x1a0) desc="x"',
            f"{head} {t + 1e-6:12.6f}: tx: (tpm_transmit+0x0/0x3a0) tag=0x{tag:x} size={_le32(64)} cc={_le32(cc)} {s}",
            f"{head} {t + 1e-6 + us / 1e6:12.6f}: tx_ret: (tpm_transmit_cmd+0x3c/0x1a0 <- tpm_transmit) ret=10",
            f"{head} {t + 2e-6 + us / 1e6:12.6f}: cmd_ret: ({caller}+0x10/0x100 <- tpm_transmit_cmd) rc=0"]


def test_session_handles_tell_a_password_extend_from_an_hmac_one():
    """tpm.disable_pcr_integrity=1 (6.12+): get_random still sets up HMAC sessions, PCR
    extends go with TPM_RS_PW. The session handle the probes read says so: the extends' mode
    is none, whatever sessions other operations start."""
    from tpmtop.tpm import wire

    lines, t = [], 10.0
    for _ in range(3):
        for cc, caller, us in ((0x161, "tpm2_load_context", 900), (0x176, "tpm2_start_auth_session", 2000),
                               (0x165, "tpm2_flush_context", 100)):
            lines += _kernel_command(t, "hwrng", 41, cc, caller, us, None, 0)
            t += 0.01
        lines += _kernel_command(t, "hwrng", 41, 0x17B, "tpm2_get_random", 300, 0x02000000, 0)
        t += 0.01
        lines += _kernel_command(t, "systemd", 1, 0x182, "tpm2_pcr_extend", 150, wire.TPM_RS_PW, 1)
        t += 0.01
    from tpmtop.kernel.tap import KernelTap

    tap = KernelTap(trace_path="/dev/null")
    done = tap.feed(lines)
    assert [c.session for c in done if c.cc == 0x182] == [wire.TPM_RS_PW] * 3
    assert [c.hmac for c in done if c.cc == 0x17B] == [True] * 3
    mode, why = tap.accounts.mode()
    assert mode == "none" and "password authorization (TPM_RS_PW)" in why
    assert tap.accounts.by_kind["get_random"].with_setup == 3 and tap.accounts.by_kind["extend"].with_setup == 0


def test_replay_of_a_kernel_capture_shows_untraced_response_codes_as_answered(tmp_path):
    """A user-space command whose response code the probes could not read was answered: the
    dashboard's replay lists it as `rc ?`, not as "no response", and its error book has only
    the real errors: none here — the resource manager's three ContextSave 0x910 in the real
    6.12 trace are the kernel's expected answer for a session the TPM had already ended."""
    from tpmtop.sources.replay import ReplaySource, load
    from tpmtop.viewmodel.rows.latency import ErrorBook
    from tpmtop.viewmodel.rows.stream import captured_rows

    full = tmp_path / "full.txt"
    full.write_text(_text("trace-6.12-debian-qemu-tpmrm.txt"))
    bare = tmp_path / "bare.txt"
    bare.write_text("\n".join(ln for ln in _text("trace-6.10-ima-hmac.txt").splitlines()))
    for trace, errors in ((full, {}), (bare, {})):
        out = tmp_path / f"{trace.stem}.json"
        r = run_tpmtop("kernel", "--from-trace", str(trace), "-q", "--json", str(out))
        assert r.returncode == 0, r.stderr
        src = ReplaySource(load(out), out)
        assert {k: dict(v) for k, v in ErrorBook.of(src.failures).by_key.items()} == errors
        assert not any(row.rc == "no response" for row in captured_rows(src.captured_stream()))
    rows = captured_rows(ReplaySource(load(tmp_path / "bare.json")).captured_stream())
    assert any(row.command == "GetRandom" and row.rc == "rc ?" and row.ok for row in rows)
    full_rows = captured_rows(ReplaySource(load(tmp_path / "full.json")).captured_stream())
    ref = [row for row in full_rows if row.command == "ContextSave" and row.rc.startswith("0x910")]
    assert len(ref) == 3 and all(row.ok and row.origin == "rm" for row in ref)  # shown, not as failures
    r = run_tpmtop("kernel", "--from-trace", str(full), "-q")
    assert "pattern:" not in r.stderr, r.stderr  # nor as a failure pattern


def test_json_to_stdout_is_one_document():
    """`--json -`: the capture alone on stdout; the command lines and tables go to stderr."""
    r = run_tpmtop("kernel", "--from-trace", str(FIX / "trace-6.10-ima-hmac.txt"), "--json", "-")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["events"]) == 10
    assert "PCR_Extend" in r.stderr and "kernel operation" in r.stderr


def test_a_huge_file_is_read_in_bounded_memory(tmp_path):
    """A 1.5 GB file of NULs is one "line": skipped in pieces, not read whole. Under an address
    space limit of 1 GiB, reading it whole fails (MemoryError, exit 1); in pieces it is bad
    input, exit 2."""
    import resource

    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(1536 * 1024 * 1024)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = run_tpmtop("kernel", "--from-trace", str(big), "-q", preexec_fn=limit, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"tpmtop: {big} holds no tpmtop kprobe events"


def test_probe_events_without_a_whole_command_are_said_so(tmp_path):
    """Entries whose returns are missing, and a return timed before its entry: the message
    counts them rather than claiming the file holds no probe events."""
    f = tmp_path / "cut.txt"
    f.write_text(
        "  x-1 [000] ..... 1.000000: tx: (tpm_transmit+0x0/0x3a0) tag=0x180 size=0x10 cc=0x7b010000\n"
        "  y-2 [000] ..... 2.000000: tx: (tpm_transmit+0x0/0x3a0) tag=0x180 size=0x10 cc=0x7b010000\n"
        "  y-2 [000] ..... 1.500000: tx_ret: (tpm_transmit_cmd+0x3c/0x1a0 <- tpm_transmit) ret=10\n")
    r = run_tpmtop("kernel", "--from-trace", str(f))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"tpmtop: {f} holds 3 probe events but no whole command (1 entry whose return "
                                "is not in it, 1 return timed before its entry): a trace that wrapped or was cut?")


def test_entries_that_never_return_are_bounded():
    """A task's entries waiting for returns that never come (a kretprobe out of instances, a
    hostile file) are kept to a few per task and a few thousand tasks."""
    p = Parser(byteorder="little")
    for pid in range(10_000):
        for _ in range(3):
            p.feed(f"  t-{pid} [000] ..... 1.000000: tx: (tpm_transmit+0x0/0x3a0) tag=0x180 size=0x10 cc=0x7b010000")
    assert p.pending() <= 4096 * 8 and p.dropped >= 10_000 * 3 - 4096 * 8


def test_a_trace_files_pid_is_never_tpmtops_own_even_when_it_is_a_thread_of_ours_now():
    """A trace file's pids are another time's: one that happens to be a thread of this process
    now (pid reuse: docs/kernel.md's `tpm2_getrandom-4242` was once shown as "tpmtop's own")
    is shown as what the trace says it was. The fixture's pid is replaced by this process's."""
    from tpmtop.kernel.tap import KernelTap

    me = os.getpid()  # /proc/self/task/<pid> exists for the main thread
    fixture = _text("trace-6.10-ima-hmac.txt")
    lines = fixture.replace("tpm2_getrandom-4242", f"tpm2_getrandom-{me}").splitlines()
    tap = KernelTap(trace_path="/dev/null")
    done = tap.feed(lines)
    ours = [c for c in done if c.pid == me]
    assert ours, "the fixture's user-space GetRandom was not parsed"
    assert [c.path for c in ours if c.path.startswith("tpmtop's own")] == []
