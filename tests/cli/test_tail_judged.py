"""A p99 of a few samples is their largest, not a tail: the tables `bench` and `run` print show
it as "–" with a legend under them until 100 samples are in, then as a figure."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop.stats import NOT_JUDGED, TAIL_MIN_SAMPLES


def _row(out: str, first: str) -> list[str]:
    """The cells of the table row that starts with ``first`` (columns are 2 or more spaces apart)."""
    (line,) = [x for x in out.splitlines() if x.split()[:1] == [first]]
    return re.split(r"\s{2,}", line.strip())


def test_bench_shows_an_op_p99_only_from_enough_operations():
    few = run_tpmtop("bench", "--sim", "-n", "4", "--warmup", "0", "--modes", "none", "--engine", "native",
                     timeout=300)
    assert few.returncode == 0, few.stderr
    header = _row(few.stdout, "engine")
    cells = _row(few.stdout, "native")
    assert cells[header.index("op p99")] == NOT_JUDGED
    assert f"fewer than {TAIL_MIN_SAMPLES['p99']} samples" in few.stdout

    enough = run_tpmtop("bench", "--sim", "-n", str(TAIL_MIN_SAMPLES["p99"]), "--warmup", "0", "--modes", "none",
                        "--engine", "native", timeout=300)
    assert enough.returncode == 0, enough.stderr
    cells = _row(enough.stdout, "native")
    p99 = cells[header.index("op p99")]
    assert p99 != NOT_JUDGED and float(p99.split()[0].replace(",", "")) > 0
    assert "fewer than" not in enough.stdout


@pytest.mark.skipif(not shutil.which("tpm2_getrandom"), reason="tpm2-tools is not installed")
def test_run_shows_a_command_p99_only_from_enough_commands():
    r = run_tpmtop("run", "--sim", "--", "tpm2_getrandom", "4", "--hex", timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    header = _row(out, "command")
    cells = _row(out, "GetRandom")
    assert cells[header.index("p99 µs")] == NOT_JUDGED, out
    assert f"{NOT_JUDGED} under p99: fewer than {TAIL_MIN_SAMPLES['p99']} samples" in out
