"""`tpmtop health`'s text report as a user reads it: within 80 columns whatever $COLUMNS says,
one summary (on stdout), and never "healthy" of a TPM it did not ask."""

from __future__ import annotations

import json
import os

import pytest

from tests.health.conftest import check_schema
from tests.helpers.paths import REPO
from tests.helpers.processes import run_tpmtop


def _over_80(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln) > 80]


@pytest.mark.parametrize("columns", ["40", "200"])
def test_every_line_fits_80_columns_on_a_simulator(columns):
    r = run_tpmtop("health", "--sim", "--ima-sample", "0", "--state", "none", env={"COLUMNS": columns},
                   timeout=300)
    assert r.returncode == 0, r.stderr
    assert "advisories" in r.stdout  # the long evidence (the advisories' sources) is there, wrapped
    assert not _over_80(r.stdout), _over_80(r.stdout)
    # "healthy" speaks for the simulator only: this machine's set-up was not judged
    last = " ".join(r.stdout.split("\n\n")[-1].split())
    assert last == ("healthy: no problem found in the TPM asked (set-up, driver and IMA not judged: "
                    "see the note)"), last
    # the verdict's text is whole in --json
    doc = check_schema(json.loads(run_tpmtop("health", "--sim", "--ima-sample", "0", "--state", "none",
                                             "--json", timeout=300).stdout))
    assert doc["machine_judged"] is False
    adv = next(v for v in doc["verdicts"] if v["kind"] == "advisories")
    assert any(len(e) > 80 for e in adv["evidence"])  # must not fire: --json keeps every character


def test_an_unreachable_tpm_fits_80_columns_and_says_it_once():
    r = run_tpmtop("health", "-T", "swtpm:host=127.0.0.1,port=1", "--ima-sample", "0", "--state", "none",
                   env={"COLUMNS": "200"})
    assert r.returncode == 1, r.stderr
    assert not _over_80(r.stdout), _over_80(r.stdout)
    assert r.stdout.rstrip().endswith("1 problem(s) found"), r.stdout
    assert "problem(s) found" not in r.stderr, r.stderr  # one summary: data on stdout, as `tpmtop pcrs`


@pytest.mark.skipif(os.path.exists("/dev/tpmrm0") or os.path.exists("/dev/tpm0"),
                    reason="this machine has a TPM device: the no-TPM case cannot be seen here")
def test_no_tpm_at_all_is_not_healthy_and_exits_1():
    r = run_tpmtop("health", "--ima-sample", "0", "--state", "none")  # run_tpmtop unsets TPM2TOOLS_TCTI
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "healthy" not in r.stdout, r.stdout
    last = " ".join(r.stdout.split("\n\n")[-1].split())
    assert last.startswith("no problem found in what could be read; not judged: the TPM (no TPM to ask:"), last
    assert not _over_80(r.stdout), _over_80(r.stdout)
    doc = check_schema(json.loads(run_tpmtop("health", "--ima-sample", "0", "--state", "none", "--json").stdout))
    tpm = next(v for v in doc["verdicts"] if v["kind"] == "tpm")
    assert tpm["level"] == "unknown" and tpm["data"]["required"] is True and doc["exit_status"] == 1


def test_a_saved_tree_without_a_tpm_asked_still_exits_0_but_says_what_was_not_judged():
    """Must not fire: --root on a saved tree leaves the TPM out by the user's choice (exit 0),
    yet the last line does not call it healthy: the TPM was not judged."""
    r = run_tpmtop("health", "--root", str(REPO / "tests" / "fixtures" / "health" / "debian-6.12-default"),
                   "--ima-sample", "0", "--state", "none")
    assert r.returncode == 0, (r.stdout, r.stderr)
    last = " ".join(r.stdout.split("\n\n")[-1].split())
    assert last.startswith("no problem found in what could be read; not judged: the TPM (not asked:"), last
    assert not _over_80(r.stdout), _over_80(r.stdout)


def test_healthy_is_said_whole_when_the_tpm_and_the_machine_were_judged():
    """Must not fire: with --root the machine's set-up is judged beside the simulator, so the
    summary is the whole "healthy" and --json says machine_judged."""
    tree = str(REPO / "tests" / "fixtures" / "health" / "debian-6.12-default")
    r = run_tpmtop("health", "--sim", "--root", tree, "--ima-sample", "0", "--state", "none", timeout=300)
    doc = check_schema(json.loads(run_tpmtop("health", "--sim", "--root", tree, "--ima-sample", "0",
                                             "--state", "none", "--json", timeout=300).stdout))
    assert doc["machine_judged"] is True
    last = " ".join(r.stdout.split("\n\n")[-1].split())
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert last == "healthy: no problem found", last
