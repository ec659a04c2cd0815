"""Captures never contain secrets (issue 8): no session keys, salts or derived keys.

A native-engine workload runs on a real swtpm while tpmtop's own key derivation is
instrumented (``tpmtop.sessions.crypto.ecdh_salt``, ``session_key`` and ``kdfa`` are
wrapped to record what they return — nothing about the TPM is mocked). The capture written
afterwards, and a ``tpmtop bench --sim --json X --events`` run in a subprocess instrumented
the same way, are scanned for every recorded secret in raw, hex (both cases) and base64
(standard and URL-safe, at every byte alignment) forms. Only the native engine's keys can
be seen: the esys engine's live inside tpm2-tss.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from tests.helpers.processes import REPO
from tpmtop.sessions import crypto
from tpmtop.sessions.modes import OPS
from tpmtop.sessions.workload import Workload


def forms(secret: bytes) -> list[bytes]:
    """Ways a secret could appear in a file. Base64 is taken at the three byte alignments,
    with the edge characters that depend on neighbouring bytes cut off."""
    out = [secret, secret.hex().encode(), secret.hex().upper().encode()]
    for skip in range(3):
        part = secret[skip:]
        part = part[: len(part) - len(part) % 3]
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            out.append(enc(part))
    return out


def leaks(blob: bytes, secrets: dict[bytes, str]) -> list[str]:
    found = []
    for s, what in secrets.items():
        for f in forms(s):
            if f in blob:
                found.append(f"{what} {s.hex()[:16]}… as {f[:24]!r}")
                break
    return found


def test_scanner_finds_planted_secret():
    """The scanner itself must be able to fail."""
    key = bytes(range(1, 33))
    for f in forms(key):
        assert leaks(b"xx" + f + b"yy", {key: "k"}), f
    assert not leaks(b"nothing here", {key: "k"})
    assert leaks(json.dumps({"a": base64.b64encode(b"\x00" + key).decode()}).encode(), {key: "k"})


@pytest.fixture
def key_log(monkeypatch):
    log: dict[bytes, str] = {}
    real_salt, real_key, real_kdfa = crypto.ecdh_salt, crypto.session_key, crypto.kdfa

    def ecdh_salt(x, y):
        salt, ex, ey = real_salt(x, y)
        log[salt] = "salt"  # ex, ey are the public encryptedSalt, sent on the wire
        return salt, ex, ey

    def session_key(*a):
        k = real_key(*a)
        log[k] = "session key"
        return k

    def kdfa(*a):
        k = real_kdfa(*a)
        log[k] = "kdfa output"
        return k

    monkeypatch.setattr(crypto, "ecdh_salt", ecdh_salt)
    monkeypatch.setattr(crypto, "session_key", session_key)
    monkeypatch.setattr(crypto, "kdfa", kdfa)
    return log


def test_capture_holds_no_session_keys_or_salts(tpm, key_log, tmp_path):
    from tpmtop.bench import write_capture_file
    from tpmtop.capture import build_capture

    w = Workload(tpm, "native", "reuse", "get_random", param_encryption=True)
    w.ops_log = []
    try:
        for mode in ("reuse", "per-command", "saved"):
            for op in OPS:
                w.set(mode=mode, op=op)
                for _ in range(3):
                    w.run_one()
    finally:
        w.close()
    salts = [s for s, what in key_log.items() if what == "salt"]
    keys = [s for s, what in key_log.items() if what == "session key"]
    # per-command: one session per op (9); reuse and saved: one kept session each
    assert len(salts) >= 9 + 2 and len(keys) >= 9 + 2, (len(salts), len(keys))
    assert all(len(k) == 32 for k in keys)

    events = [e for e in tpm.recorder.events() if e.origin == "workload"]
    assert events
    cap = build_capture(tpm, list(w.accounts.values()), events=events, ops_log=w.ops_log)
    path = tmp_path / "cap.json"
    write_capture_file(str(path), cap)
    blob = path.read_bytes()
    assert b'"events"' in blob and len(blob) > 1000
    assert leaks(blob, key_log) == []


INSTRUMENTED_BENCH = """
import json, sys
from tpmtop.sessions import crypto
log = {}
rs, rk, ra = crypto.ecdh_salt, crypto.session_key, crypto.kdfa
def ecdh_salt(x, y):
    s, ex, ey = rs(x, y); log[s.hex()] = "salt"; return s, ex, ey
def session_key(*a):
    k = rk(*a); log[k.hex()] = "session key"; return k
def kdfa(*a):
    k = ra(*a); log[k.hex()] = "kdfa output"; return k
crypto.ecdh_salt, crypto.session_key, crypto.kdfa = ecdh_salt, session_key, kdfa
from tpmtop.cli import main
try:
    rc = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(log, f)
sys.exit(rc)
"""


@pytest.mark.parametrize("op", ["get_random", "extend"])
def test_bench_json_events_holds_no_secrets(tmp_path, op):
    keys_file, cap_file = tmp_path / "keys.json", tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-c", INSTRUMENTED_BENCH, str(keys_file), "bench", "--sim", "--engine",
                        "native", "--op", op, "-n", "5", "--warmup", "1", "-q", "--json", str(cap_file), "--events"],
                       capture_output=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    secrets = {bytes.fromhex(k): v for k, v in json.loads(keys_file.read_text()).items()}
    assert sum(v == "session key" for v in secrets.values()) >= 5
    blob = cap_file.read_bytes()
    assert b'"events"' in blob
    assert leaks(blob, secrets) == []
    assert leaks(r.stdout + r.stderr, secrets) == []
