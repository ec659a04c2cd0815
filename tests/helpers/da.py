"""A private swtpm with dictionary-attack parameters the test sets and a DA-protected sealed
object (the health room's and the dashboard's Health panel tests)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.processes import TcpSwtpm


def tools(swtpm: TcpSwtpm, *argv: str, cwd, check: bool = True, stdin: str | None = None):
    """A tpm2-tools command on ``swtpm`` (the test's own simulator)."""
    env = dict(os.environ, TPM2TOOLS_TCTI=swtpm.tcti, TSS2_LOG="all+NONE")
    return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, input=stdin,
                          check=check, timeout=120)


@pytest.fixture
def da_swtpm_factory(tmp_path):
    """da_swtpm_factory(max_tries, interval_s) -> a TcpSwtpm whose dictionary-attack parameters
    the test set (TPM2_DictionaryAttackParameters with the lockout hierarchy's empty auth: the
    test setting up its own simulator, never tpmtop), holding a sealed object with password
    "right" and DA protection (no noDA), saved as s.ctx in its own folder (``.work``). Every
    one is stopped."""
    started: list[TcpSwtpm] = []

    def make(max_tries: int, interval_s: int) -> TcpSwtpm:
        s = TcpSwtpm()
        started.append(s)
        work = s.work = tmp_path / f"tpm{len(started)}"  # type: ignore[attr-defined]
        work.mkdir()
        tools(s, "tpm2_dictionarylockout", "-s", "-n", str(max_tries), "-t", str(interval_s), "-l", str(interval_s),
              cwd=work)
        tools(s, "tpm2_createprimary", "-Q", "-c", "p.ctx", cwd=work)
        tools(s, "tpm2_flushcontext", "-t", cwd=work)
        tools(s, "tpm2_create", "-Q", "-C", "p.ctx", "-p", "right", "-i-", "-u", "s.pub", "-r", "s.priv",
              cwd=work, stdin="sealed")
        tools(s, "tpm2_flushcontext", "-t", cwd=work)
        tools(s, "tpm2_load", "-Q", "-C", "p.ctx", "-u", "s.pub", "-r", "s.priv", "-c", "s.ctx", cwd=work)
        tools(s, "tpm2_flushcontext", "-t", cwd=work)
        attrs = tools(s, "tpm2_readpublic", "-c", "s.ctx", cwd=work).stdout
        tools(s, "tpm2_flushcontext", "-t", cwd=work)
        assert "noda" not in attrs.lower()  # DA-protected: a wrong password counts
        return s

    try:
        yield make
    finally:
        for s in started:
            s.stop()
