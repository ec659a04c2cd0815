"""Faults a production TPM throws at tpmtop, each against a real swtpm: the TPM killed
mid-run, reset under tpmtop, object and session slots exhausted, a handle flushed by
someone else, a TPM that takes 150 ms a command while the user presses Ctrl-C."""

import json
import signal
import struct

import psutil
import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop.bench import BenchPlan, run_bench
from tpmtop.capture import build_capture
from tpmtop.sessions.native import NativeEngine
from tpmtop.sessions.workload import Workload
from tpmtop.tpm.handles import flush, list_handles


@pytest.mark.parametrize("engine", ["native", "esys"])
def test_bench_survives_tpm_killed_and_saves_what_it_had(tcp_swtpm, tmp_path, bench, engine):
    out = tmp_path / "partial.json"
    b = bench("-T", tcp_swtpm.tcti, "-n", "1000000", "--warmup", "0", "--modes", "none,per-command",
              "--engine", engine, "--json", str(out))
    b.working(tpm_pid=tcp_swtpm.proc.pid, cpu_s=0.3)
    tcp_swtpm.proc.kill()  # the TPM dies mid-run
    rc, stdout, stderr = b.finish()
    assert rc == 1, stderr
    assert "Traceback" not in stderr
    stopped = [line for line in stderr.splitlines() if line.startswith("tpmtop: stopped: ")]
    # what happened, not a follow-on error (esys used to say "Function called in the wrong order")
    assert len(stopped) == 1 and "TPM connection lost" in stopped[0], stderr
    assert f"127.0.0.1:{tcp_swtpm.port}" in stopped[0]
    cap = json.loads(out.read_text())
    assert cap["bench"]["complete"] is False and cap["runs"][0]["ops"] > 0
    assert engine in stdout  # the table of what was completed


@pytest.mark.parametrize("engine,mode", [("esys", "per-command"), ("esys", "reuse"), ("native", "per-command")])
def test_tpm_gone_is_connection_lost_in_every_call(tcp_swtpm, engine, mode):
    """In-process, so the TPM dies exactly between two operations: the next operation and the
    clean-up both say the connection is lost, for ESAPI as for the native engine."""
    from tpmtop.errors import TpmConnectionError

    conn = tcp_swtpm.connect()
    try:
        wl = Workload(conn, engine, mode, "extend")
        for _ in range(3):
            wl.run_one()
        tcp_swtpm.proc.kill()
        tcp_swtpm.proc.wait()
        with pytest.raises(TpmConnectionError, match="TPM connection lost"):
            wl.run_one()
        with pytest.raises(TpmConnectionError, match="TPM connection lost"):
            wl.close()
    finally:
        conn.close()


def test_reset_mid_bench_is_noticed_and_periods_kept_apart(tpm):
    said = []

    def progress(done, total):
        if done == 25:
            tpm.sim.reset()  # power cycle: new null seed, sessions gone

    plan = BenchPlan(op="extend", modes=["per-command", "reuse", "saved"], engines=["native", "esys"],
                     n=10, warmup=1, batch=5)
    res = run_bench(tpm, plan, progress=progress, notice=said.append)
    assert res.error is None and not res.interrupted
    assert len(res.resets) == 1 and "name has changed" in res.resets[0]
    assert said and "kept apart" in said[0]
    before = sum(a.ops for a in res.periods[0])
    after = sum(a.ops for a in res.accounts)
    assert before == 25 and after > 0
    cap = build_capture(tpm, res.accounts, periods=res.periods)
    assert {r["period"] for r in cap["runs"]} == {0, 1}
    assert any("TPM reset" in m["text"] for m in cap["marks"])
    assert list_handles(tpm.transport) == []


def _leave_transient_objects(tcp_swtpm, n):
    with tcp_swtpm.connect() as conn:
        e = NativeEngine(conn.transport)
        e.create_null_primary()
        return [e.load_null() for _ in range(n)]


def test_object_slots_exhausted_is_explained(tcp_swtpm):
    leaked = _leave_transient_objects(tcp_swtpm, 3)  # a swtpm has 3 transient slots
    r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "-n", "3", "--modes", "per-command", "--engine", "native")
    assert r.returncode == 1
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("tpmtop: ")][-1]
    assert "0x902" in line and "tpmtop flush" in line, r.stderr
    # Flushing the leaked objects lets it run.
    with tcp_swtpm.connect() as conn:
        for h in leaked:
            flush(conn.transport, h)
    r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "-n", "3", "--modes", "per-command", "--engine", "native")
    assert r.returncode == 0, r.stderr


def _start_sessions(transport, n):
    """Unsalted, unbound HMAC sessions, as any client might leave them."""
    out = []
    for _ in range(n):
        body = struct.pack(">II", 0x40000007, 0x40000007) + struct.pack(">H", 16) + b"\1" * 16 + b"\0\0" \
            + b"\0" + struct.pack(">H", 0x0010) + struct.pack(">H", 0x000B)  # symmetric TPM_ALG_NULL
        rsp = transport.transact(struct.pack(">HII", 0x8001, 10 + len(body), 0x176) + body)
        assert rsp[6:10] == b"\0\0\0\0", rsp.hex()
        out.append(int.from_bytes(rsp[10:14], "big"))
    return out


def test_session_slots_full_of_foreign_sessions_is_explained(tcp_swtpm):
    with tcp_swtpm.connect() as conn:
        _start_sessions(conn.transport, 3)  # another client fills the 3 loaded-session slots
    r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "-n", "3", "--modes", "per-command", "--engine", "native")
    assert r.returncode == 1
    assert "0x903" in r.stderr and "loaded-session slots are full" in r.stderr


def test_session_slots_full_of_our_own_strays_recovers(tpm):
    strays = _start_sessions(tpm.transport, 3)  # ours: an earlier interrupted run
    wl = Workload(tpm, "native", "per-command", "extend")
    wl.run_one()
    held = {h.handle for h in list_handles(tpm.transport)}
    assert not held & set(strays)


@pytest.mark.parametrize("engine", ["native", "esys"])
@pytest.mark.parametrize("mode", ["reuse", "saved"])
def test_session_flushed_by_someone_else_is_recreated_and_counted(tpm, engine, mode):
    wl = Workload(tpm, engine, mode, "extend")
    wl.run_one()
    (victim,) = [h.handle for h in list_handles(tpm.transport) if h.kind.endswith("session")]
    flush(tpm.transport, victim)  # someone else flushes the session tpmtop keeps
    wl.run_one()
    acct = wl.accounts[(engine, mode, "extend")]
    assert acct.sessions_lost == 1 and acct.ops == 2 and acct.errors == 0
    wl.close()
    assert list_handles(tpm.transport) == []


def test_slow_tpm_ctrl_c_stops_the_run(bench):
    """Ctrl-C on a chip that takes 151 ms per operation: the run stops after the operation in
    hand (how quickly is benchmarks' business, not a bound here), clean-up finishes on the
    slow chip, and the swtpm goes."""
    b = bench("--sim", "--profile", "slb9670", "-n", "1000", "--warmup", "0", "--modes", "per-command",
              "--engine", "native")
    sw = b.swtpm()
    b.working(cpu_s=0.01)  # inside 85 ms StartAuthSession holds (the held swtpm is mostly idle)
    b.proc.send_signal(signal.SIGINT)
    rc, out, err = b.finish()
    assert rc == 130, err
    assert err.splitlines() == ["tpmtop: interrupted: partial results above"], err
    row = next(ln.split() for ln in out.splitlines() if ln.startswith("native "))
    assert row[:2] == ["native", "per-command"] and int(row[2]) < 1000, out  # stopped early
    sw.wait(timeout=60)
    assert not psutil.pid_exists(sw.pid) or sw.status() == psutil.STATUS_ZOMBIE


def test_context_gap_from_an_old_saved_session_is_recovered(tpm):
    """A long-lived saved session while many short ones come and go: the TPM's context
    counter cannot run more than CONTEXT_GAP_MAX past the oldest saved context."""
    from tpmtop.tpm.identity import read_identity

    gap_max = read_identity(tpm.transport).fixed["CONTEXT_GAP_MAX"]
    t = tpm.transport
    save = lambda h: t.transact(struct.pack(">HII", 0x8001, 14, 0x162) + struct.pack(">I", h))  # noqa: E731
    load = lambda ctx: t.transact(struct.pack(">HII", 0x8001, 10 + len(ctx), 0x161) + ctx)  # noqa: E731
    old, churn = _start_sessions(t, 2)
    assert save(old)[6:10] == b"\0\0\0\0"  # left saved by an earlier run, and never touched again
    wl = Workload(tpm, "native", "saved", "extend")
    wl.run_one()
    rec = tpm.recorder
    rec.enabled = False  # 65,000 churn commands need not fill the ring
    rc = 0
    for _ in range(gap_max + 2):
        rsp = save(churn)
        rc = int.from_bytes(rsp[6:10], "big")
        if rc:
            break
        load(rsp[10:])
    rec.enabled = True
    assert rc == 0x901  # TPM_RC_CONTEXT_GAP: the short-lived sessions are blocked now
    wl.run_one()  # tpmtop's own save hits the gap, flushes its stray sessions, goes on
    assert wl.accounts[("native", "saved", "extend")].sessions_lost == 1
    left = {h.handle for h in list_handles(t)}
    assert old not in left and churn not in left
    wl.close()
