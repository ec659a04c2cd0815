"""`tpmtop kernel` live, on a real kernel with a real TPM: what each kernel path is called,
who a command is for, that it shows up while tpmtop runs (not only at the end), that Ctrl-C
leaves nothing behind, that the capture reads back, and that tpmtop itself sends nothing.

They skip, saying why, where tracing is impossible (this project's development machine:
no kprobes, no tracefs, no TPM). `make test-kernel-vm` runs them in a VM (Debian's 6.1 and
6.12 kernels, qemu tpm-tis, swtpm, ima_policy=tcb), where a skip counts as a failure."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.kernel_live import require_live, run, wait_for
from tests.helpers.processes import run_tpmtop
from tpmtop.capture import load_capture

pytestmark = pytest.mark.usefixtures("_live")


@pytest.fixture
def _live():
    require_live()


def _events(path: Path) -> list[dict]:
    return load_capture(path)["events"]


def test_user_space_commands_are_named_by_their_client_and_device_while_tracing(tracers, tmp_path):
    """tpm2_getrandom through /dev/tpmrm0 and through /dev/tpm0: each command is printed while
    tpmtop runs, for the tpm2_getrandom pid that wrote it (the kernel runs it in a kworker),
    with the device and the response code; Ctrl-C exits 130 and removes the probes and the
    tracefs instance; the capture reads back in replay and compare."""
    out = tmp_path / "k.json"
    t = tracers("--json", str(out))
    t.wait_armed()
    rm = run("tpm2_getrandom", "-T", "device:/dev/tpmrm0", "8")
    t.wait_line(lambda ln: f"tpm2_getrandom-{rm.pid}" in ln and " GetRandom " in ln
                and "user space via /dev/tpmrm0" in ln, "the /dev/tpmrm0 GetRandom on tpmtop's stdout")
    raw = run("tpm2_getrandom", "-T", "device:/dev/tpm0", "8")
    t.wait_line(lambda ln: f"tpm2_getrandom-{raw.pid}" in ln and "user space via /dev/tpm0 " in ln,
                "the /dev/tpm0 GetRandom on tpmtop's stdout")
    assert t.stop(signal.SIGINT) == 130, t.why()
    assert "interrupted (stopped by SIGINT)" in t.stderr()
    assert not t.group_armed() and not t.instance_exists()

    evs = _events(out)
    for client, device in ((rm, "/dev/tpmrm0"), (raw, "/dev/tpm0")):
        mine = [e for e in evs if e["pid"] == client.pid and e["path"].startswith("user space via")]
        assert "TPM2_CC_GetRandom" in {e["command"] for e in mine}, mine
        assert all(e["comm"] == "tpm2_getrandom" and e["device"] == device and e["rc"] == 0 for e in mine), mine
        # tpm2-tss writes O_NONBLOCK: the kernel runs the command as work, in a kworker
        assert all(e.get("task") is None or e["task"].startswith("kworker/") for e in mine)
    assert not any(e["pid"] == raw.pid and e["path"].startswith("resource manager") for e in evs)  # no RM

    from tpmtop.sources.replay import ReplaySource, load
    from tpmtop.viewmodel.rows.stream import captured_rows

    src = ReplaySource(load(out), out)
    assert any(r.command == "GetRandom" and r.ok for r in captured_rows(src.captured_stream()))
    r = run_tpmtop("compare", str(out), str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert "TPM2_CC_GetRandom" in r.stdout or "GetRandom" in r.stdout


def test_sigterm_exits_130_and_writes_the_capture(tracers, tmp_path):
    out = tmp_path / "k.json"
    t = tracers("--json", str(out))
    t.wait_armed()
    g = run("tpm2_getrandom", "-T", "device:/dev/tpmrm0", "4")
    t.wait_line(lambda ln: f"tpm2_getrandom-{g.pid}" in ln, "the GetRandom on tpmtop's stdout")
    assert t.stop(signal.SIGTERM) == 130, t.why()
    assert "interrupted (stopped by SIGTERM)" in t.stderr() and f"the capture is in {out}" in t.stderr()
    assert not t.group_armed() and not t.instance_exists()
    assert json.loads(out.read_text())["runs"][0]["mode"] == "kernel"


def test_a_hwrng_read_is_the_kernels_get_random_for_the_reader(tracers, tmp_path):
    rng = Path("/sys/class/misc/hw_random/rng_current")
    if not rng.exists() or not rng.read_text().startswith("tpm-rng"):
        pytest.skip(f"the TPM is not the current hwrng here ({rng.read_text().strip() if rng.exists() else 'none'})")
    out = tmp_path / "k.json"
    t = tracers("--json", str(out))
    t.wait_armed()
    dd = run("dd", "if=/dev/hwrng", "of=/dev/null", "bs=32", "count=1")
    line = t.wait_line(lambda ln: f"dd-{dd.pid} " in ln and " GetRandom " in ln, "dd's GetRandom")
    assert "hwrng / get_random [tpm2_get_random]" in line and "rc 0x0" in line
    assert t.stop() == 130
    ev = [e for e in _events(out) if e["pid"] == dd.pid and e["command"] != "TPM2_CC_PCR_Extend"]  # (IMA: dd ran)
    assert {(e["command"], e["caller"], e["desc"], e["rc"]) for e in ev} == \
        {("TPM2_CC_GetRandom", "tpm2_get_random", "attempting get random", 0)}


def _measured_dir(tmp_path: Path) -> Path:
    """A writable folder on a file system IMA's tcb policy measures (not tmpfs/ramfs)."""
    for d in (os.environ.get("KERNEL_VM_RESULTS"), str(tmp_path)):
        if not d:
            continue
        fs = subprocess.run(["stat", "-f", "-c", "%T", d], capture_output=True, text=True).stdout.strip()
        if fs not in ("tmpfs", "ramfs"):
            return Path(d)
    pytest.skip("no writable folder here on a file system that ima_policy=tcb measures (all tmpfs)")


def test_ima_extends_pcr_10_for_a_new_binary_in_the_context_of_the_exec(tracers, tmp_path):
    """Under ima_policy=tcb, running a binary never seen before makes the kernel send a
    PCR_Extend itself, from the task doing the exec, via tpm2_pcr_extend."""
    if "ima_policy=tcb" not in Path("/proc/cmdline").read_text():
        pytest.skip("IMA does not measure executables here (no ima_policy=tcb on the kernel command line)")
    exe = _measured_dir(tmp_path) / f"true-{uuid.uuid4().hex[:8]}"
    shutil.copy("/bin/true", exe)
    os.chmod(exe, 0o755)
    try:
        log = Path("/sys/kernel/security/ima/ascii_runtime_measurements")
        out = tmp_path / "k.json"
        t = tracers("--json", str(out))
        t.wait_armed()
        p = run(str(exe))
        t.wait_line(lambda ln: f"-{p.pid} " in ln and " PCR_Extend " in ln, "the PCR_Extend for the exec")
        assert t.stop() == 130
        assert str(exe) in log.read_text()  # what IMA measured
        ev = [e for e in _events(out) if e["pid"] == p.pid and e["command"] == "TPM2_CC_PCR_Extend"]
        assert ev and {(e["path"], e["caller"], e["desc"], e["rc"]) for e in ev} == \
            {("PCR extend (IMA / kernel) [tpm2_pcr_extend]", "tpm2_pcr_extend", "attempting extend a PCR value", 0)}
    finally:
        exe.unlink(missing_ok=True)


def test_the_resource_managers_context_traffic_is_named_for_its_client(tracers, tmp_path):
    """A transient object through /dev/tpmrm0: after CreatePrimary the kernel's resource
    manager saves and flushes it (ContextSave, FlushContext), and loads it back for the next
    command (ContextLoad) — named as the resource manager's, for the client that caused it."""
    out = tmp_path / "k.json"
    ctx = tmp_path / "primary.ctx"
    t = tracers("--json", str(out), "-q")
    t.wait_armed()
    prim = run("tpm2_createprimary", "-T", "device:/dev/tpmrm0", "-C", "o", "-G", "ecc", "-c", str(ctx))
    pub = run("tpm2_readpublic", "-T", "device:/dev/tpmrm0", "-c", str(ctx))
    assert t.stop() == 130
    evs = _events(out)

    def rm(pid):
        return [e for e in evs if e["pid"] == pid and e["path"].startswith("resource manager (/dev/tpmrm0) [")]

    assert "TPM2_CC_CreatePrimary" in {e["command"] for e in evs if e["pid"] == prim.pid}
    assert {"TPM2_CC_ContextSave", "TPM2_CC_FlushContext"} <= {e["command"] for e in rm(prim.pid)}
    assert "TPM2_CC_ContextLoad" in {e["command"] for e in rm(pub.pid)}
    assert "TPM2_CC_ReadPublic" in {e["command"] for e in evs if e["pid"] == pub.pid
                                    and e["path"].startswith("user space via /dev/tpmrm0")}
    for e in rm(prim.pid) + rm(pub.pid):
        assert e["caller"] in ("tpm2_save_context", "tpm2_load_context", "tpm2_flush_context")
        assert e["path"] == f"resource manager (/dev/tpmrm0) [{e['caller']}]"
    assert not any(e["path"].startswith("session set-up") for e in evs)  # not the kernel's own sessions


def test_tpmtop_sends_no_tpm_command_of_its_own_and_two_tpmtops_see_the_same(tracers, tmp_path):
    """One tpmtop watches another: the second holds no /dev/tpm* open, no user-space or
    resource-manager command is for its pid (only IMA's measurements of the files it opens,
    which the kernel sends), and both see the same tpm2_getrandom — each reads its own
    tracefs instance, so neither takes events from the other."""
    a_out, b_out = tmp_path / "a.json", tmp_path / "b.json"
    a = tracers("--json", str(a_out), "-q", name="a")
    a.wait_armed()
    b = tracers("--json", str(b_out), "-q", name="b")
    b.wait_armed()
    fds = [os.readlink(f"/proc/{b.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{b.pid}/fd")]
    assert not any(f.startswith("/dev/tpm") for f in fds), fds
    g = run("tpm2_getrandom", "-T", "device:/dev/tpmrm0", "8")
    assert b.stop() == 130 and a.stop() == 130
    a_evs, b_evs = _events(a_out), _events(b_out)
    own = [e for e in a_evs if e["pid"] == b.pid]
    # (with two tpmtops, two kretprobes sit on tpm_transmit_cmd and the outer one sees the
    # inner's trampoline as the caller: the path is then named from desc, without [function])
    assert all(e["command"] == "TPM2_CC_PCR_Extend" and e["path"].startswith("PCR extend (IMA / kernel)")
               and e["desc"] == "attempting extend a PCR value" for e in own), own
    # its own trace has nothing for its pid: what it reads while tracing was read before
    assert not [e for e in b_evs if e["pid"] == b.pid]
    for evs in (a_evs, b_evs):
        assert "TPM2_CC_GetRandom" in {e["command"] for e in evs if e["pid"] == g.pid}
    assert [e["command"] for e in a_evs if e["pid"] == g.pid] == [e["command"] for e in b_evs if e["pid"] == g.pid]


def test_the_boot_time_probes_record_the_drivers_start_up_and_ima(tmp_path):
    """Booted with `tpmtop kernel --boot-cmdline` (scripts/kernel-vm.sh does): the kernel
    accepted the definitions, the top-level buffer holds the TPM driver's start-up and IMA's
    boot aggregate from before user space ran, `--from-trace` imports it, and `tpmtop boot
    --capture` prices this kernel's extends from it (no HMAC session: PCR_Extend alone)."""
    if "kprobe_event=p:tpmtop/" not in Path("/proc/cmdline").read_text():
        pytest.skip("booted without the boot-time probes (tpmtop kernel --boot-cmdline)")
    from tpmtop.kernel import probes

    t = probes.find_tracefs()
    assert "p:tpmtop/tx tpm_transmit" in t.read("kprobe_events")  # the boot group, not a stale one
    assert "[global]" in t.read("trace_clock")  # trace_clock=global: the buffer was not emptied
    trace = tmp_path / "boot-trace.txt"
    trace.write_text(t.read("trace"))
    out = tmp_path / "boot.json"
    r = run_tpmtop("kernel", "--from-trace", str(trace), "-q", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    evs = sorted(_events(out), key=lambda e: e["t_ns"])
    first_user = next((i for i, e in enumerate(evs) if e["path"].startswith("user space via")), len(evs))
    early = {(e["command"], e["path"]) for e in evs[:first_user]}
    assert ("TPM2_CC_SelfTest", "self test [tpm2_do_selftest]") in early
    assert ("TPM2_CC_GetCapability", "TPM properties [tpm2_get_tpm_pt]") in early
    assert ("TPM2_CC_PCR_Read", "PCR read [tpm2_pcr_read]") in early  # IMA's boot aggregate
    assert ("TPM2_CC_PCR_Extend", "PCR extend (IMA / kernel) [tpm2_pcr_extend]") in early
    assert all(e["rc"] == 0 for e in evs[:first_user])
    (tmp_path / "root").mkdir()
    r = run_tpmtop("boot", "--root", str(tmp_path / "root"), "--capture", str(out), "--extends", "100", "--json",
                   timeout=300)
    assert r.returncode == 0, r.stderr
    comps = json.loads(r.stdout)["projection"]["components_us"]
    assert comps["E0"]["source"] == f"kernel capture {out}"
    assert "kernel capture" not in comps["S"]["source"]  # the kernel started no session


def _new_binary(tmp_path: Path) -> Path:
    exe = _measured_dir(tmp_path) / f"true-{uuid.uuid4().hex[:8]}"
    shutil.copy("/bin/true", exe)
    os.chmod(exe, 0o755)
    return exe


def test_an_ima_extend_is_one_operation_split_into_tpm_and_host_time(tracers, tmp_path):
    """The operation probes (tpm2_pcr_extend entry and return) are armed; an exec under
    ima_policy=tcb is one extend operation holding its PCR_Extend, whose time is at least its
    command's; the session handle read from the command says password or HMAC, and the summary
    names the session behaviour from it."""
    if "ima_policy=tcb" not in Path("/proc/cmdline").read_text():
        pytest.skip("IMA does not measure executables here (no ima_policy=tcb on the kernel command line)")
    exe = _new_binary(tmp_path)
    try:
        out = tmp_path / "k.json"
        t = tracers("--json", str(out))
        t.wait_armed()
        assert "operations tpm2_pcr_extend and tpm2_get_random" in t.stderr(), t.why()
        assert f"p:{t.group}/op_extend tpm2_pcr_extend" in t.t.read("kprobe_events")
        assert "[mono]" in t.t.read("instances", t.group, "trace_clock")  # perf_counter's clock
        p = run(str(exe))
        t.wait_line(lambda ln: f"-{p.pid} " in ln and " PCR_Extend " in ln, "the PCR_Extend for the exec")
        assert t.stop() == 130
    finally:
        exe.unlink(missing_ok=True)
    cap = load_capture(out)
    ops = [o for o in cap["ops"] if o["pid"] == p.pid and o["op"] == "extend"]
    assert ops, cap["ops"]
    mine = [e for e in cap["events"] if e.get("op_seq") in {o["op_seq"] for o in ops}]
    assert mine and all(e["command"] == "TPM2_CC_PCR_Extend" for e in mine)
    assert all(o["total_ns"] >= o["wire_ns"] > 0 and o["ok"] for o in ops)
    run_ = next(r for r in cap["runs"] if r["engine"] == "kernel" and r["op"] == "extend")
    assert run_["timing"] == "extend function entry to return (kprobes)"
    # the session handle after PCR_Extend's one handle: these Debian kernels have
    # CONFIG_TCG_TPM2_HMAC off, so it is the password session, and the mode says so
    hmac_on = Path("/sys/class/tpm/tpm0/null_name").exists()
    sessions = {e["session"] for e in mine}
    if hmac_on:
        assert all(int(s, 16) >> 24 == 0x02 for s in sessions), sessions
    else:
        assert sessions == {"0x40000009"}, sessions
        assert run_["mode"] == "none"
        assert "sessions: none:" in t.stdout() and "password authorization (TPM_RS_PW)" in t.stdout()


def test_a_failing_user_space_command_has_its_response_code(tracers, tmp_path):
    """tpm2_readpublic of a persistent handle that holds nothing: the TPM refuses the
    ReadPublic (TPM_RC_HANDLE; a persistent handle is not the resource manager's to refuse, a
    transient one would be refused by it before the TPM sees it), through /dev/tpmrm0 and
    /dev/tpm0 alike: tpm2_commit_space's entry reads the response (for /dev/tpm0 too, whose
    space is NULL), and on 6.10+ tpm_transmit's return probe does as well (rsp_rc; 6.1 refuses
    that definition, and the plain one is armed)."""
    from tpmtop.kernel.probes import RETURN_ARGS_SINCE, _release

    out = tmp_path / "k.json"
    t = tracers("--json", str(out), "-q")
    t.wait_armed()
    new_enough = _release() >= RETURN_ARGS_SINCE
    assert ("rsp_rc=+6($arg2)" in t.t.read("kprobe_events")) == new_enough
    clients = {}
    for dev in ("/dev/tpmrm0", "/dev/tpm0"):
        p = subprocess.Popen(["tpm2_readpublic", "-T", f"device:{dev}", "-c", "0x81000ffe"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode != 0  # the TPM refused it
        clients[dev] = p.pid
    assert t.stop() == 130
    evs = _events(out)
    for dev, pid in clients.items():
        mine = [e for e in evs if e["pid"] == pid and e["path"].startswith("user space via")]
        assert mine and all(e["device"] == dev for e in mine), [e for e in evs if e["pid"] == pid]
        # the refusal, with its code: TPM_RC_HANDLE for the first handle (0x18b)
        assert [e["rc"] for e in mine if e["command"] == "TPM2_CC_ReadPublic"] == [0x18B], mine


async def test_the_dashboard_shows_the_kernels_commands_live(tmp_path, monkeypatch):
    """`tpmtop --kernel` in-process: the probes armed by the dashboard's own path, a client's
    GetRandom through /dev/tpmrm0 appears in Latency under its path while it runs, the header
    says tpmtop sends nothing, and closing removes the probes and the instance."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    from argparse import Namespace

    from tpmtop.cli.dashboard_args import watch_source
    from tpmtop.kernel import probes
    from tpmtop.sources.kernel import KernelSource
    from tpmtop.tui.app import TpmtopApp

    src, _notices = watch_source(Namespace(kernel=True, passive=False, kernel_trace=None))
    assert isinstance(src, KernelSource)
    group = src.tap.probes.group
    t = probes.find_tracefs()
    try:
        src.tap.start()
        app = TpmtopApp(src, theme="dark", remember=False, export_dir=str(tmp_path))
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one("#latency-table")
            g = subprocess.Popen(["tpm2_getrandom", "-T", "device:/dev/tpmrm0", "8"], stdout=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 180
                while "GetRandom · user" not in {str(c[0]).strip() for c in table._shadow.values()}:
                    assert time.monotonic() < deadline, list(table._shadow)
                    await pilot.pause(0.2)
            finally:
                g.wait(120)
            header = str(app.screen.query_one("#header").render())
            assert "tpmtop sends no TPM command" in header and group in src.header().tcti
            assert app.screen.query_one("#system").display  # this machine's kernel: its sysfs beside it
    finally:
        src.close()
    assert group not in t.read("kprobe_events") and not os.path.isdir(t.path("instances", group))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP])
def test_the_kernel_dashboard_removes_its_probes_on_a_signal(sig):
    """`tpmtop --kernel` in a terminal (a pty, drained as a terminal would be): SIGTERM,
    SIGHUP, and SIGQUIT — whose default would kill it and leave the probes — end it with
    status 130, and its group and tracefs instance are gone."""
    import pty
    import threading

    from tests.helpers.kernel_live import WAIT_S
    from tests.helpers.processes import REPO, TPMTOP
    from tpmtop.kernel import probes

    t = probes.find_tracefs()
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "TPM2TOOLS_TCTI"}
    p = subprocess.Popen(TPMTOP + ["--kernel"], stdin=slave, stdout=slave, stderr=subprocess.PIPE, cwd=REPO,
                         env=env, text=True)
    os.close(slave)

    def drain():
        try:
            while os.read(master, 65536):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    group = f"{probes.GROUP_PREFIX}{p.pid}"
    try:
        wait_for(lambda: (group in t.read("kprobe_events") and os.path.isdir(t.path("instances", group)))
                 or p.poll() is not None, "the dashboard to arm its probes")
        assert p.poll() is None, p.stderr.read()
        p.send_signal(sig)
        rc = p.wait(WAIT_S)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
        probes.clean_stale(t)
    assert rc == 130, err
    assert "Traceback" not in err, err
    assert group not in t.read("kprobe_events") and not os.path.isdir(t.path("instances", group))
