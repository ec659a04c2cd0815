"""`tpmtop handles` and `tpmtop flush` as a user runs them, against a swtpm that outlives
each tpmtop process (so a handle created by one client can be listed and flushed by another)."""

import json

from tests.helpers.processes import run_tpmtop
from tpmtop.sessions.native import NativeEngine


def _leak_a_primary(tcp_swtpm) -> int:
    with tcp_swtpm.connect() as conn:  # another client leaves a transient object behind
        e = NativeEngine(conn.transport)
        e.create_null_primary()
        return e.load_null()


def test_handles_then_flush_then_gone(tcp_swtpm):
    h = _leak_a_primary(tcp_swtpm)
    r = run_tpmtop("handles", "--json", "-T", tcp_swtpm.tcti)
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)["handles"]
    assert {"handle": f"0x{h:08x}", "kind": "transient", "created_by_tpmtop": False} in listed

    r = run_tpmtop("flush", f"0x{h:08x}", "-T", tcp_swtpm.tcti)
    assert r.returncode == 0 and r.stdout.strip() == f"flushed 0x{h:08x}"
    r = run_tpmtop("handles", "--json", "-T", tcp_swtpm.tcti)
    assert json.loads(r.stdout)["handles"] == []


def test_flush_missing_handle_is_tpm_error(tcp_swtpm):
    # swtpm answers TPM_RC_VALUE (0x1c4) for an unused handle past its slots, TPM_RC_HANDLE
    # (0x1cb) for an empty slot: both "not loaded" in words (issue 24), exit 1 (the TPM's answer)
    for h, rc in (("0x80000005", "0x1c4"), ("0x80000000", "0x1cb")):
        r = run_tpmtop("flush", h, "-T", tcp_swtpm.tcti)
        assert r.returncode == 1
        assert r.stderr == (f"tpmtop: {h} is not loaded: the TPM holds no object or session there "
                            f"(TPM rc {rc}; tpmtop handles lists what is loaded)\n")


def test_flush_malformed_and_unflushable_handles_are_usage_errors(tcp_swtpm):
    for bad in ("nothex", "0x1234567890", "0x81000001", "0x00000010"):
        r = run_tpmtop("flush", bad, "-T", tcp_swtpm.tcti)
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_flush_refused_in_read_only(tcp_swtpm):
    h = _leak_a_primary(tcp_swtpm)
    r = run_tpmtop("flush", hex(h), "--read-only", "-T", tcp_swtpm.tcti)
    assert r.returncode == 2 and "read-only" in r.stderr
    r = run_tpmtop("handles", "--json", "-T", tcp_swtpm.tcti)
    assert [x["handle"] for x in json.loads(r.stdout)["handles"]] == [f"0x{h:08x}"]


def test_info_reports_identity_and_session_properties():
    r = run_tpmtop("info", "--sim", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["identity"]["manufacturer"] == "IBM" and d["tpm"]["simulated"] is True
    assert d["properties"]["HR_TRANSIENT_AVAIL"] == 3 and d["properties"]["CONTEXT_GAP_MAX"] > 0


def test_flush_takes_a_decimal_handle_as_tpm2_tools_does(tcp_swtpm):
    """33554432 is 0x02000000 and 2147483648 is 0x80000000 (tpm2-tools reads plain digits as
    decimal); eight digits that only make sense as hex are refused with the hex spelling."""
    h = _leak_a_primary(tcp_swtpm)
    r = run_tpmtop("flush", f"{h:08x}", "-T", tcp_swtpm.tcti)
    assert r.returncode == 2 and f"write 0x{h:08x}" in r.stderr
    r = run_tpmtop("flush", str(h), "-T", tcp_swtpm.tcti)
    assert r.returncode == 0, r.stderr
    listed = json.loads(run_tpmtop("handles", "--json", "-T", tcp_swtpm.tcti).stdout)["handles"]
    assert f"0x{h:08x}" not in [e["handle"] for e in listed]
