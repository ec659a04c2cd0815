"""Record the decode corpus: real traffic to a real swtpm, through tpm2-tss's pcap: TCTI.

tpm2-tools runs (createprimary, create, load, sign, verifysignature, hmac, getrandom,
pcrread, pcrextend 16, nvdefine/nvwrite/nvread, startauthsession with policy and HMAC
sessions, policypcr, contextsave/load, flushcontext) and tpmtop's own workloads in all
four session modes with both engines. Used by tests/decode/test_decode_corpus.py (recorded once
per test session) and benchmarks/decode.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO


def _tools() -> list[list[str]]:
    """The tpm2-tools steps, each a command line (files relative to the working dir)."""
    pcr16 = "16:sha256=" + "ab" * 32
    # Without a resource manager a tool leaves its transient objects loaded (and the swtpm
    # has 3 slots): flush them after each tool that loads one (FlushContext is in the corpus).
    flush = ["tpm2_flushcontext", "-t"]
    return [
        ["tpm2_getrandom", "8", "--hex"],
        ["tpm2_pcrread", "sha256:16"],
        ["tpm2_pcrextend", pcr16],
        ["tpm2_createprimary", "-C", "n", "-g", "sha256", "-G", "ecc256", "-c", "prim.ctx"], flush,
        ["tpm2_create", "-C", "prim.ctx", "-G", "ecc256", "-u", "key.pub", "-r", "key.priv"], flush,
        ["tpm2_load", "-C", "prim.ctx", "-u", "key.pub", "-r", "key.priv", "-c", "key.ctx"], flush,
        ["tpm2_sign", "-c", "key.ctx", "-g", "sha256", "-o", "sig.bin", "msg.bin"], flush,
        ["tpm2_verifysignature", "-c", "key.ctx", "-g", "sha256", "-m", "msg.bin", "-s", "sig.bin"], flush,
        ["tpm2_create", "-C", "prim.ctx", "-G", "hmac", "-c", "hmac.ctx"], flush,
        ["tpm2_hmac", "-c", "hmac.ctx", "--hex", "msg.bin"], flush,
        ["tpm2_readpublic", "-c", "key.ctx"], flush,
        ["tpm2_nvdefine", "0x1500016", "-C", "o", "-s", "32", "-a", "ownerread|ownerwrite|authread|authwrite"],
        ["tpm2_nvwrite", "0x1500016", "-C", "o", "-i", "nv.bin"],
        ["tpm2_nvread", "0x1500016", "-C", "o", "-s", "32"],
        ["tpm2_nvundefine", "0x1500016", "-C", "o"],
        ["tpm2_startauthsession", "-S", "trial.ctx"],
        ["tpm2_policypcr", "-S", "trial.ctx", "-l", "sha256:16", "-L", "pcr.policy"],
        ["tpm2_flushcontext", "trial.ctx"],
        ["tpm2_startauthsession", "--policy-session", "-S", "policy.ctx"],
        ["tpm2_policypcr", "-S", "policy.ctx", "-l", "sha256:16"],
        ["tpm2_flushcontext", "policy.ctx"],
        ["tpm2_startauthsession", "--hmac-session", "-c", "prim.ctx", "-S", "hmac-s.ctx"], flush,
        ["tpm2_getrandom", "-S", "hmac-s.ctx", "8", "--hex"],
        ["tpm2_flushcontext", "hmac-s.ctx"],
        ["tpm2_flushcontext", "-t"],
    ]


def record_tools(port: int, workdir: Path) -> tuple[Path, list[str]]:
    """Run the tpm2-tools steps against the swtpm on ``port``; returns the pcap file and the
    steps that failed (with their stderr's last line)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "msg.bin").write_bytes(b"tpmtop decode corpus\n")
    (workdir / "nv.bin").write_bytes(bytes(range(32)))
    pcap = workdir / "tools.pcap"
    env = dict(os.environ, TCTI_PCAP_FILE=str(pcap), TPM2TOOLS_TCTI=f"pcap:swtpm:host=127.0.0.1,port={port}")
    failed = []
    for argv in _tools():
        r = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            failed.append(f"{' '.join(argv)}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return pcap, failed


def record_workloads(port: int, workdir: Path, n: int = 2) -> list[Path]:
    """tpmtop bench, every mode and engine, each op: captures with every command's bytes."""
    out = []
    env = dict(os.environ)
    env.pop("TPM2TOOLS_TCTI", None)
    for op in ("extend", "get_random", "create_primary"):
        cap = workdir / f"bench-{op}.json"
        r = subprocess.run([sys.executable, "-m", "tpmtop", "bench", "-T", f"swtpm:host=127.0.0.1,port={port}",
                            "--op", op, "-n", str(n), "--warmup", "0", "--batch", str(n),
                            "--events", "--json", str(cap), "-q"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"tpmtop bench --op {op}: {r.stderr.strip()[-400:]}")
        out.append(cap)
    return out


def pairs_from(path: Path) -> list[tuple[bytes, bytes | None]]:
    """(command, response) bytes of every event of a pcap or capture file."""
    from tpmtop.sources.replay import load

    pairs = []
    for e in load(str(path)).get("events") or []:
        if isinstance(e.get("command_hex"), str):
            rsp = e.get("response_hex")
            pairs.append((bytes.fromhex(e["command_hex"]), bytes.fromhex(rsp) if isinstance(rsp, str) else None))
    return pairs
