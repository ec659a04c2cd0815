"""Safety on real hardware (issue 8): boot PCRs, --read-only, /dev/tpm0, the DA counter.

Every TPM here is a real swtpm. PCR values are read with a raw TPM2_PCR_Read (no session,
no authorization) and handle lists with GetCapability, before and after each refused
action. Each refusal has a positive control showing the same action, allowed, does change
what is checked, so the before/after comparison can fail.
"""

from __future__ import annotations

import struct

import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop.errors import UsageError
from tpmtop.sessions.modes import ENGINES, MODES, OPS, check_pcr
from tpmtop.sessions.workload import Workload
from tpmtop.tpm import commands
from tpmtop.tpm.handles import list_handles
from tpmtop.tpm.identity import read_variable

CC_PCR_READ = 0x17E
SHA256 = 0x000B


def pcr_read(transport, pcr: int) -> bytes:
    sel = bytearray(3)
    sel[pcr // 8] |= 1 << (pcr % 8)
    body = commands.check(transport.transact(commands.build(CC_PCR_READ, struct.pack(">IHB", 1, SHA256, 3) + sel)),
                          CC_PCR_READ)
    # updateCounter, TPML_PCR_SELECTION (count, hash, sizeofSelect, select), TPML_DIGEST
    off = 4
    count = struct.unpack_from(">I", body, off)[0]
    off += 4
    for _ in range(count):
        size = body[off + 2]
        off += 3 + size
    n = struct.unpack_from(">I", body, off)[0]
    assert n == 1, f"PCR {pcr} not returned"
    dlen = struct.unpack_from(">H", body, off + 4)[0]
    return body[off + 6: off + 6 + dlen]


def pcrs(transport, which=range(24)) -> dict[int, bytes]:
    return {i: pcr_read(transport, i) for i in which}


def handles(transport) -> set[int]:
    return {e.handle for e in list_handles(transport)}


def lockout_counter(transport) -> int:
    return read_variable(transport)["LOCKOUT_COUNTER"]


def tcp_state(sw) -> tuple[dict[int, bytes], set[int]]:
    """PCRs and handles of a TCP swtpm. It serves one connection at a time, so the
    connection is closed again before the CLI (another process) connects."""
    conn = sw.connect()
    try:
        return pcrs(conn.transport), handles(conn.transport)
    finally:
        conn.close()


# -- boot PCRs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("pcr", range(16))
def test_check_pcr_refuses_boot_pcrs(pcr):
    with pytest.raises(UsageError, match="--allow-pcr"):
        check_pcr(pcr, allow_pcr=False)
    check_pcr(pcr, allow_pcr=True)


def test_check_pcr_allows_debug_pcrs_and_rejects_nonexistent():
    for pcr in range(16, 24):
        check_pcr(pcr, allow_pcr=False)
    for pcr in (-1, 24, 99):
        with pytest.raises(UsageError):
            check_pcr(pcr, allow_pcr=True)


def test_bench_refuses_boot_pcrs_without_allow_pcr(tcp_swtpm):
    before, h_before = tcp_state(tcp_swtpm)
    for pcr in (0, 7, 10, 15):
        r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "--pcr", str(pcr), "-n", "2", "--warmup", "0", "-q",
                       "--engine", "native")
        assert r.returncode == 2, r.stderr
        assert "--allow-pcr" in r.stderr
    assert tcp_state(tcp_swtpm) == (before, h_before)
    # positive control: allowed, the same bench does extend PCR 15
    r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "--pcr", "15", "--allow-pcr", "-n", "2", "--warmup", "0",
                   "-q", "--engine", "native", "--modes", "none")
    assert r.returncode == 0, r.stderr
    after, _ = tcp_state(tcp_swtpm)
    assert after[15] != before[15]
    assert {i: v for i, v in after.items() if i != 15} == {i: v for i, v in before.items() if i != 15}


# -- --read-only --------------------------------------------------------------------------------
def test_read_only_refuses_bench(tcp_swtpm):
    p_before, h_before = tcp_state(tcp_swtpm)
    r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "--read-only", "-n", "2", "--warmup", "0", "-q")
    assert r.returncode == 2 and "--read-only" in r.stderr, r.stderr
    r = run_tpmtop("--read-only", "bench", "-T", tcp_swtpm.tcti, "-n", "2", "--warmup", "0", "-q")
    assert r.returncode == 2 and "--read-only" in r.stderr, r.stderr
    assert tcp_state(tcp_swtpm) == (p_before, h_before)
    # positive control: without --read-only the bench extends PCR 16
    r = run_tpmtop("bench", "-T", tcp_swtpm.tcti, "-n", "2", "--warmup", "0", "-q", "--engine", "native",
                   "--modes", "none")
    assert r.returncode == 0, r.stderr
    assert tcp_state(tcp_swtpm)[0][16] != p_before[16]


def test_read_only_refuses_flush(tcp_swtpm):
    from tpmtop.sessions.native import NativeEngine

    conn = tcp_swtpm.connect()
    try:
        e = NativeEngine(conn.transport)
        e.create_null_primary()
        h = e.load_null()  # a transient object that outlives the connection (swtpm has no RM)
    finally:
        conn.close()
    before = tcp_state(tcp_swtpm)
    assert h in before[1]
    for argv in (["flush", f"0x{h:08x}", "--read-only"], ["--read-only", "flush", f"0x{h:08x}"]):
        r = run_tpmtop(*argv, "-T", tcp_swtpm.tcti)
        assert r.returncode == 2 and "--read-only" in r.stderr, (argv, r.stderr)
        assert tcp_state(tcp_swtpm) == before
    # positive control: without --read-only it is flushed
    r = run_tpmtop("flush", f"0x{h:08x}", "-T", tcp_swtpm.tcti)
    assert r.returncode == 0, r.stderr
    assert h not in tcp_state(tcp_swtpm)[1]


def test_read_only_refuses_profile_record(tcp_swtpm):
    before = tcp_state(tcp_swtpm)
    r = run_tpmtop("profile", "record", "--read-only", "-T", tcp_swtpm.tcti, "-n", "1", "--warmup", "0", "-q")
    assert r.returncode == 2 and "--read-only" in r.stderr, r.stderr
    assert tcp_state(tcp_swtpm) == before


def test_read_only_still_reads(tcp_swtpm):
    for cmd in ("info", "handles"):
        r = run_tpmtop(cmd, "--read-only", "-T", tcp_swtpm.tcti)
        assert r.returncode == 0, r.stderr


# -- /dev/tpm0 ---------------------------------------------------------------------------------
def test_raw_device_refused_without_flag():
    from tpmtop.tpm.tcti import choose

    for spec in ("device:/dev/tpm0", "device:/dev/tpm1"):
        with pytest.raises(UsageError, match="--raw-device"):
            choose(spec, sim=False, env={})
        assert choose(spec, sim=False, env={}, raw_device=True).device_path.endswith(spec.rsplit("/", 1)[1])
    with pytest.raises(UsageError, match="--raw-device"):
        choose(None, sim=False, env={"TPM2TOOLS_TCTI": "device:/dev/tpm0"})
    choose("device:/dev/tpmrm0", sim=False, env={})  # the resource manager is fine


@pytest.mark.parametrize("via", ["-T", "env"])
def test_cli_refuses_dev_tpm0(via):
    args, env = (["-T", "device:/dev/tpm0"], None) if via == "-T" else ([], {"TPM2TOOLS_TCTI": "device:/dev/tpm0"})
    for cmd in ("info", "handles"):
        r = run_tpmtop(cmd, *args, env=env)
        assert r.returncode == 2, r.stderr
        assert "--raw-device" in r.stderr and "resource manager" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    # with --raw-device the refusal goes (here there is no /dev/tpm0, so opening it fails: 1)
    r = run_tpmtop("info", "--raw-device", *args, env=env)
    assert "--raw-device" not in r.stderr
    assert r.returncode != 2 or "resource manager" not in r.stderr


# -- everything the workload does ----------------------------------------------------------------
def test_every_mode_op_engine_leaves_da_counter_and_boot_pcrs(tpm):
    t = tpm.transport
    boot_before = pcrs(t, range(16))
    pcr16_before = pcr_read(t, 16)
    assert lockout_counter(t) == 0
    w = Workload(tpm, ENGINES[0], MODES[0], OPS[0])
    try:
        for engine in ENGINES:
            for mode in MODES:
                for op in OPS:
                    w.set(engine=engine, mode=mode, op=op)
                    for _ in range(2):
                        w.run_one()
                    assert lockout_counter(t) == 0, (engine, mode, op)
    finally:
        w.close()
    assert pcrs(t, range(16)) == boot_before
    assert pcr_read(t, 16) != pcr16_before  # the extends did happen, on PCR 16
    assert lockout_counter(t) == 0
    assert not [h for h in handles(t) if h >> 24 in (0x02, 0x03, 0x80)], "handles left behind"


def test_da_counter_can_move_positive_control(tcp_swtpm):
    """The check above reads TPM2_PT_LOCKOUT_COUNTER and expects 0: show that the same reading
    does rise when an authorization on a DA-protected object fails — so a 0 there means
    nothing was counted, not that the counter is not read. In a throwaway swtpm, through
    tpm2-tss's own swtpm TCTI (never tpmtop's transport or workload), on an object without
    noDA in the null hierarchy (no hierarchy authorization needed)."""
    from tpm2_pytss import ESAPI, TPM2B_MAX_BUFFER, TPM2B_PUBLIC, TPM2B_SENSITIVE_CREATE
    from tpm2_pytss.constants import ESYS_TR, TPM2_ALG
    from tpm2_pytss.TCTILdr import TCTILdr
    from tpm2_pytss.TSS2_Exception import TSS2_Exception

    def counter() -> int:
        conn = tcp_swtpm.connect()  # swtpm serves one connection at a time: closed again
        try:
            return lockout_counter(conn.transport)
        finally:
            conn.close()

    assert counter() == 0
    tcti = TCTILdr("swtpm", f"host=127.0.0.1,port={tcp_swtpm.port}")
    esys = ESAPI(tcti)
    try:
        pub = TPM2B_PUBLIC.parse("hmac:sha256",
                                 objectAttributes="userwithauth|sign|fixedtpm|fixedparent|sensitivedataorigin")
        sens = TPM2B_SENSITIVE_CREATE()
        sens.sensitive.userAuth = b"right"
        key = esys.create_primary(sens, pub, primary_handle=ESYS_TR.NULL)[0]
        esys.tr_set_auth(key, b"wrong")
        with pytest.raises(TSS2_Exception) as failed:
            esys.hmac(key, TPM2B_MAX_BUFFER(b"x"), TPM2_ALG.SHA256)
        assert int(failed.value.rc) == 0x98E  # TPM_RC_AUTH_FAIL, session 1: "DA counter incremented"
        esys.flush_context(key)
    finally:
        esys.close()
    assert counter() == 1


def test_workload_itself_refuses_boot_pcrs(tpm):
    # The rule holds for every caller of the session engine, not only the CLI.
    from tpmtop.errors import UsageError
    from tpmtop.sessions.workload import Workload

    for pcr in (0, 7, 15):
        with pytest.raises(UsageError):
            Workload(tpm, "native", "none", "extend", pcr=pcr)
    assert [e for e in tpm.recorder.events() if e.name == "TPM2_CC_PCR_Extend"] == []
