"""The session engine against a real swtpm: command sequences counted on the wire,
native sessions accepted by the TPM, tampering detected, no handle left behind."""

import json

import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop.errors import IntegrityError
from tpmtop.sessions.modes import ENGINES, EXPECTED_COMMANDS_PER_OP, MODES, OPS
from tpmtop.sessions.workload import Workload
from tpmtop.tpm.handles import list_handles

SEQUENCES = {
    "none": ["{cmd}"],
    "per-command": ["ContextLoad", "StartAuthSession", "FlushContext", "{cmd}"],
    "reuse": ["{cmd}"],
    "saved": ["ContextLoad", "{cmd}", "ContextSave"],
}
OP_COMMANDS = {"extend": ["PCR_Extend"], "get_random": ["GetRandom"],
               # the object it creates is flushed within the operation
               "create_primary": ["CreatePrimary", "FlushContext"]}


def _wire_sequences(recorder, n_ops):
    by_op = {}
    for e in recorder.events():
        if e.origin == "workload" and e.op_seq is not None:
            by_op.setdefault(e.op_seq, []).append(e.name.removeprefix("TPM2_CC_"))
    seqs = [by_op[k] for k in sorted(by_op)]
    return seqs[-n_ops:]


def _expected(mode, op):
    out = []
    for item in SEQUENCES[mode]:
        out.extend(OP_COMMANDS[op] if item == "{cmd}" else [item])
    return out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mode", MODES)
def test_commands_per_operation_on_the_wire(shared_tpm, mode, op):
    seqs = {}
    for engine in ENGINES:
        wl = Workload(shared_tpm, engine, mode, op)
        for _ in range(3):
            wl.run_one()
        seqs[engine] = _wire_sequences(shared_tpm.recorder, 3)
        acct = wl.accounts[(engine, mode, op)]
        extra = 1 if op == "create_primary" else 0
        assert sum(acct.commands.values()) / acct.ops == EXPECTED_COMMANDS_PER_OP[mode] + extra
        wl.close()
    assert seqs["native"] == seqs["esys"] == [_expected(mode, op)] * 3
    assert list_handles(shared_tpm.transport) == []


def test_native_session_attributes_accepted_by_tpm(tpm):
    wl = Workload(tpm, "native", "reuse", "get_random")
    for _ in range(3):
        wl.run_one()
    evs = [e for e in tpm.recorder.events() if e.name == "TPM2_CC_GetRandom"]
    assert all(e.rc == 0 and e.sessions[0][1] == 0x41 and e.sessions[0][0] >> 24 == 0x02 for e in evs)
    wl.close()


class _Tamper:
    """Wraps the real swtpm backend and alters one byte of chosen responses in transit."""

    def __init__(self, inner, cc, offset_from_end):
        self.inner, self.cc, self.off = inner, cc, offset_from_end
        self.description = inner.description
        self.hits = 0

    def transact(self, cmd):
        rsp = self.inner.transact(cmd)
        if int.from_bytes(cmd[6:10], "big") == self.cc and rsp[6:10] == b"\0\0\0\0":
            b = bytearray(rsp)
            b[-self.off] ^= 0x01
            self.hits += 1
            return bytes(b)
        return rsp

    def close(self):
        self.inner.close()


@pytest.mark.parametrize("op,cc,where", [("extend", 0x182, 1),       # last byte of the response HMAC
                                         ("get_random", 0x17B, 60)])  # inside the encrypted random bytes
def test_tampered_response_is_rejected(tpm, op, cc, where):
    wl = Workload(tpm, "native", "reuse", op)
    wl.run_one()
    tpm.transport.backend = tamper = _Tamper(tpm.transport.backend, cc, where)
    with pytest.raises(IntegrityError, match="HMAC"):
        wl.run_one()
    assert tamper.hits == 1 and wl.integrity_failures == 1
    tpm.transport.backend = tamper.inner
    wl.close()


def test_null_primary_name_change_stops_native_engine(tpm):
    wl = Workload(tpm, "native", "per-command", "extend")
    wl.run_one()
    tpm.sim.reset()  # new null seed: the saved null primary no longer loads, its name changes
    with pytest.raises(IntegrityError, match="name has changed"):
        wl.run_one()


def test_mode_switches_and_interruption_leak_no_handle(tpm):
    from tpmtop.bench import BenchPlan, run_bench

    before = list_handles(tpm.transport)
    calls = []

    def progress(done, total):
        calls.append(done)
        if done == 37:
            raise KeyboardInterrupt  # as Ctrl-C would, mid-run, between two modes' batches

    plan = BenchPlan(op="extend", modes=list(MODES), engines=list(ENGINES), n=20, warmup=1, batch=3)
    res = run_bench(tpm, plan, progress=progress)
    assert res.interrupted and calls[-1] == 37
    assert list_handles(tpm.transport) == before == []


def test_bench_json_contract(tmp_path):
    out = tmp_path / "cap.json"
    r = run_tpmtop("bench", "--sim", "-n", "4", "--warmup", "1", "--modes", "none,per-command,reuse,saved",
                   "--engine", "native,esys", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "engine" in r.stdout and "per-command" in r.stdout
    cap = json.loads(out.read_text())
    assert cap["schema"] == "tpmtop.capture/1"
    assert set(cap["tool"]) >= {"version"} and set(cap["host"]) >= {"hostname", "kernel"}
    assert set(cap["tpm"]) >= {"tcti", "manufacturer", "vendor", "firmware", "simulated"}
    assert len(cap["runs"]) == 8
    for run in cap["runs"]:
        assert run["ops"] == 4
        for k in ("op_us", "wire_us", "host_us"):
            assert set(run[k]) >= {"count", "p50", "p90", "p99", "max", "mean"} and run[k]["count"] == 4
        assert run["op_us"]["p50"] >= run["wire_us"]["p50"] > 0
        want = {"none": {"TPM2_CC_PCR_Extend": 1.0}, "reuse": {"TPM2_CC_PCR_Extend": 1.0},
                "per-command": {"TPM2_CC_ContextLoad": 1.0, "TPM2_CC_StartAuthSession": 1.0,
                                "TPM2_CC_FlushContext": 1.0, "TPM2_CC_PCR_Extend": 1.0},
                "saved": {"TPM2_CC_ContextLoad": 1.0, "TPM2_CC_PCR_Extend": 1.0, "TPM2_CC_ContextSave": 1.0}}
        assert run["commands_per_op"] == want[run["mode"]]
        for name, c in run["commands"].items():
            assert name in want[run["mode"]]
            assert sum(n for _, n in c["histogram"]) == c["count"] == 4 * want[run["mode"]][name]


@pytest.mark.parametrize("args", [["--pcr", "7"], ["--modes", "fast"], ["--engine", "openssl"], ["-n", "0"],
                                  ["--op", "sign"], ["--read-only"], ["--events"]])
def test_bench_refuses_bad_or_unsafe_arguments(args):
    r = run_tpmtop("bench", "--sim", *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_bench_writes_openmetrics_from_a_live_run(tmp_path):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    out = tmp_path / "tpmtop.prom"
    r = run_tpmtop("bench", "--sim", "-n", "5", "--warmup", "0", "--modes", "none,reuse", "--engine", "native",
                   "--openmetrics", str(out))
    assert r.returncode == 0, r.stderr
    fams = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    ops = [s for s in fams["tpmtop_operation_seconds"].samples if s.name.endswith("_count")] \
        if "tpmtop_operation_seconds" in fams else []
    assert ops, list(fams)
    assert {s.labels["mode"] for s in ops} == {"none", "reuse"} and all(s.value == 5 for s in ops)
    assert all(s.labels["manufacturer"] == "IBM" for s in ops)
