"""Concurrent real clients through `tpmtop proxy`, as they pass against the TPM itself.

Each worker repeats: tpm2-tools runs that hand an encrypting HMAC session from process to
process (startauthsession, sessionconfig, getrandom -S, flushcontext), then a tpm2-tss ESAPI
program (tpm2-pytss) that holds a primary, a loaded key and an HMAC session at once and
flushes them. Four workers at once need up to eight object slots if their commands are
interleaved; a raw swtpm has three. Over a raw TPM the proxy serves one client (process) at a
time, so they all succeed; over tpm2-abrmd each client gets its own upstream connection.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tests.helpers.processes import run_tpmtop
from tests.helpers.proxy import TIMEOUT, Proxy

pytestmark = pytest.mark.skipif(shutil.which("tpm2_getrandom") is None, reason="tpm2-tools not installed")

WORKERS = 4
ROUNDS = 2

HOLDER = r"""
import sys
from tpm2_pytss import (ESAPI, ESYS_TR, TCTILdr, TPM2_ALG, TPM2_SE, TPM2B_PUBLIC, TPM2B_SENSITIVE_CREATE,
                        TPMA_OBJECT, TPMT_SYM_DEF)
name, conf = sys.argv[1].split(":", 1)
ectx = ESAPI(TCTILdr(name, conf))
prim = ectx.create_primary(TPM2B_SENSITIVE_CREATE(), "ecc256")[0]
sess = ectx.start_auth_session(ESYS_TR.NONE, ESYS_TR.NONE, TPM2_SE.HMAC, TPMT_SYM_DEF(algorithm=TPM2_ALG.NULL),
                               TPM2_ALG.SHA256)
tmpl = TPM2B_PUBLIC.parse("ecc256:ecdsa-sha256",
                          objectAttributes=TPMA_OBJECT.DEFAULT_TPM2_TOOLS_CREATE_ATTRS & ~TPMA_OBJECT.DECRYPT)
priv, pub = ectx.create(prim, TPM2B_SENSITIVE_CREATE(), tmpl, session1=sess)[:2]
key = ectx.load(prim, priv, pub, session1=sess)
for h in (sess, key, prim):
    ectx.flush_context(h)
ectx.close()
"""

WORKER = """set -e
i=0
while [ $i -lt "$ROUNDS" ]; do
  tpm2_startauthsession --hmac-session -S s.ctx
  tpm2_sessionconfig --enable-encrypt s.ctx
  tpm2_getrandom -S s.ctx --hex 16
  tpm2_flushcontext s.ctx
  "$PY" "$HOLDER" "$TCTI"
  i=$((i+1))
done
"""


def run_workers(tcti: str, tmp_path, env: dict | None = None) -> list[tuple[int, str]]:
    """WORKERS workers at once, each ROUNDS rounds: [(exit status, output)]."""
    holder = tmp_path / "holder.py"
    holder.write_text(HOLDER)
    results: list = [None] * WORKERS

    def one(i: int) -> None:
        d = tmp_path / f"w{i}"
        d.mkdir()
        e = dict(os.environ, TPM2TOOLS_TCTI=tcti, TCTI=tcti, TSS2_LOG="all+NONE", PY=sys.executable,
                 HOLDER=str(holder), ROUNDS=str(ROUNDS), **(env or {}))
        r = subprocess.run(["sh", "-c", WORKER], cwd=d, env=e, capture_output=True, text=True, timeout=TIMEOUT * 4)
        results[i] = (r.returncode, r.stdout + r.stderr)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(WORKERS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def _failures(cap: dict) -> list:
    """Error responses other than TPM_RC_RETRY (0x922: swtpm asks for a retry of a Create now and
    then, and tpm2-tss's ESAPI retries by itself)."""
    return [(x["name"], e) for x in cap["programs"] for e in x["errors_by_code"] if e["rc"] != 0x922]


def _transient(tcti: str, env: dict | None = None) -> list[str]:
    r = run_tpmtop("handles", "--json", "-T", tcti, env=env)
    assert r.returncode == 0, r.stderr
    return [h["handle"] for h in json.loads(r.stdout)["handles"] if h["handle"].startswith("0x80")]


@pytest.mark.parametrize("protocol", ["swtpm", "mssim"])
def test_concurrent_clients_take_turns_on_a_raw_tpm(tcp_swtpm, tmp_path, protocol):
    p = Proxy(tcp_swtpm.tcti, protocol, tmp_path)
    try:
        p.wait_line("clients take turns")
        results = run_workers(p.tcti, tmp_path)
        assert [rc for rc, _ in results] == [0] * WORKERS, "\n".join(out for rc, out in results if rc)
        status, _, cap = p.stop()
        assert status == 130
    finally:
        p.kill()
    programs = {x["name"]: x for x in cap["programs"]}
    assert programs["tpm2_getrandom"]["clients"] == WORKERS * ROUNDS
    assert programs["tpm2_getrandom"]["errors"] == 0
    assert _failures(cap) == []
    # the TPM was shared by taking turns: someone waited, and nothing is left loaded
    assert any(x["turn_waits"]["count"] for x in cap["programs"])
    assert _transient(tcp_swtpm.tcti) == []


@pytest.fixture
def abrmd(tcp_swtpm):
    """tpm2-abrmd on a private D-Bus in front of the test's swtpm: (tcti, env)."""
    if not os.path.exists("/usr/sbin/tpm2-abrmd") or shutil.which("dbus-daemon") is None:
        pytest.skip("tpm2-abrmd and dbus-daemon are needed (scripts/bootstrap.sh --test)")
    d = tempfile.mkdtemp(prefix="tpmtop-test-dbus-")
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=d)
    procs = [bus]
    try:
        address = bus.stdout.readline().strip()
        assert address, "dbus-daemon gave no address"
        env = {"DBUS_SESSION_BUS_ADDRESS": address}
        name = f"com.intel.tss2.Tabrmd.t{os.getpid()}x{tcp_swtpm.port}"
        ab = subprocess.Popen(["/usr/sbin/tpm2-abrmd", f"--tcti={tcp_swtpm.tcti}", "--session", "--allow-root",
                               f"--dbus-name={name}"], env=dict(os.environ, **env),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(ab)
        tcti = f"tabrmd:bus_name={name},bus_type=session"
        deadline = time.monotonic() + TIMEOUT
        while True:  # until it has claimed its name on the bus
            r = subprocess.run(["tpm2_getrandom", "--hex", "4"], env=dict(os.environ, TPM2TOOLS_TCTI=tcti,
                                                                           TSS2_LOG="all+NONE", **env),
                               capture_output=True, timeout=TIMEOUT)
            if r.returncode == 0:
                break
            assert ab.poll() is None and time.monotonic() < deadline, "tpm2-abrmd did not start"
            time.sleep(0.1)
        yield tcti, env
    finally:
        for pr in reversed(procs):
            pr.terminate()
            try:
                pr.wait(10)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait()
        shutil.rmtree(d, ignore_errors=True)


def test_concurrent_clients_over_tpm2_abrmd(abrmd, tmp_path, monkeypatch):
    """Directly through tpm2-abrmd and through the proxy in front of it: the same workers pass
    both ways (the proxy gives each client its own abrmd connection)."""
    tcti, env = abrmd
    direct = run_workers(tcti, tmp_path / "direct" if (tmp_path / "direct").mkdir() is None else tmp_path, env)
    assert [rc for rc, _ in direct] == [0] * WORKERS, "\n".join(out for rc, out in direct if rc)
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # the proxy process reaches abrmd on the private bus
    p = Proxy(tcti, "swtpm", tmp_path)
    try:
        p.wait_line("its own upstream connection")
        through = run_workers(p.tcti, tmp_path / "proxied" if (tmp_path / "proxied").mkdir() is None else tmp_path)
        assert [rc for rc, _ in through] == [0] * WORKERS, "\n".join(out for rc, out in through if rc)
        status, _, cap = p.stop()
        assert status == 130
    finally:
        p.kill()
    assert _failures(cap) == []
    assert {x["name"] for x in cap["programs"]} >= {"tpm2_getrandom", "tpm2_flushcontext"}


# a daemon that asks the TPM for a few random bytes every half second, for up to 120 s
_POLLER = """
import sys, time
from tpm2_pytss import ESAPI, TCTILdr
ectx = ESAPI(TCTILdr("swtpm", sys.argv[1]))
ectx.get_random(8)
print("polling", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    ectx.get_random(8)
    time.sleep(0.5)
"""


def test_a_polling_client_cannot_hold_the_turn_past_the_longest_turn(tcp_swtpm, tmp_path, monkeypatch):
    """Issue 50: a client that polls every half second is never idle for --turn-idle, and kept
    the raw TPM's turn until it exited (a bystander waited 48 s). With proxy_max_turn_s 3 the
    bystander is served while the poller still runs, and the poller goes on being served."""
    monkeypatch.setenv("TPMTOP_PROXY_MAX_TURN_S", "3")
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--turn-idle", "2"))
    poller = None
    try:
        p.wait_line("clients take turns", "has held it 3 s")
        poller = subprocess.Popen([sys.executable, "-c", _POLLER, f"host=127.0.0.1,port={p.port}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, TSS2_LOG="all+NONE"))
        assert poller.stdout.readline() == "polling\n", poller.stderr.read()
        got = p.tool("tpm2_getrandom", "--hex", "8")
        assert len(got.stdout.strip()) == 16
        assert poller.poll() is None, poller.stderr.read()  # served while the poller still holds on
        poller.kill()
        poller.wait()
        status, _, cap = p.stop()
        assert status == 130
    finally:
        if poller is not None and poller.poll() is None:
            poller.kill()
            poller.wait()
        p.kill()
    programs = {x["name"]: x for x in cap["programs"]}
    assert programs["tpm2_getrandom"]["commands"] >= 1 and programs["tpm2_getrandom"]["errors"] == 0
    assert programs["tpm2_getrandom"]["turn_waits"]["count"] >= 1  # it did wait for the poller's turn
