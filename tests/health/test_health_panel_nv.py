"""The dashboard's Health panel (its view-model part) says "NV nearly full" from the variable
properties its poll reads anyway, and nothing about NV while there is room."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers.da import tools
from tpmtop.connect import open_tpm
from tpmtop.health.verdicts import Kind, Level
from tpmtop.sources.live import LiveSource
from tpmtop.viewmodel.rows import health

pytestmark = pytest.mark.skipif(shutil.which("tpm2_nvdefine") is None, reason="tpm2-tools not installed")


def _nv_lines(src) -> list:
    return [ln for ln in health.part(src).lines if ln.kind is Kind.NV]


def test_health_panel_warns_when_nv_is_nearly_full(tcp_swtpm, tmp_path):
    src = LiveSource(open_tpm(tcti=tcp_swtpm.tcti, env={}), start_running=False, poll_interval=0.3)
    try:
        src.poll()  # the dashboard's timer does this every poll_interval
        assert src.da_properties() is not None
        assert _nv_lines(src) == []  # must not fire: an empty NV
    finally:
        src.close()  # a swtpm serves one client at a time: tpm2-tools fills it meanwhile
    for i in range(200):
        r = tools(tcp_swtpm, "tpm2_nvdefine", "-C", "o", "-s", "2048", "-a", "ownerread|ownerwrite",
                  hex(0x01500000 + i), cwd=tmp_path, check=False)
        if r.returncode:
            break
    src = LiveSource(open_tpm(tcti=tcp_swtpm.tcti, env={}), start_running=False, poll_interval=0.3)
    try:
        src.poll()
        line = _nv_lines(src)[0]
        assert line.level is Level.WARN and line.text.startswith("NV nearly full"), line
    finally:
        src.close()
