"""The dictionary-attack gauges end to end: a private swtpm one wrong password from lockout
(three tpm2-tools failures of four allowed), `tpmtop exporter --probe` reading it with
GetCapability, and a real Prometheus (Debian's package) scraping it with contrib's rules: the
alert TPMDictionaryAttackNearLockout fires for that host, and not for a host with a clean
counter. (promtool's unit test of the rule, tests/exporter, checks it fires at max−1 and not
before.)"""

from __future__ import annotations

import shutil
import time

import pytest

from tests.exporter.test_exporter_prometheus import PROMETHEUS, WAIT, Prometheus
from tests.helpers.da import tools
from tests.helpers.exporter import Exporter

pytestmark = [pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package is not installed"),
              pytest.mark.skipif(shutil.which("tpm2_unseal") is None, reason="tpm2-tools not installed")]

MAX_TRIES = 4
INTERVAL_S = 3600  # nothing is forgiven while the test runs


def test_prometheus_alerts_one_wrong_password_before_lockout(da_swtpm_factory, tmp_path):
    near = da_swtpm_factory(MAX_TRIES, INTERVAL_S)
    clean = da_swtpm_factory(MAX_TRIES, INTERVAL_S)
    for _ in range(MAX_TRIES - 1):
        r = tools(near, "tpm2_unseal", "-c", "s.ctx", "-p", "wrong", cwd=near.work, check=False)
        assert r.returncode != 0
        tools(near, "tpm2_flushcontext", "-t", cwd=near.work)
    exporters: list[Exporter] = []
    prom = None
    try:
        for s in (near, clean):
            exporters.append(Exporter("--no-kernel", "--probe", "10", "-T", s.tcti))
        prom = Prometheus(tmp_path, {"near": exporters[0].address, "clean": exporters[1].address})
        prom.wait_ready()
        got = prom.until("tpmtop_tpm_da_lockout_counter", lambda g: len(g) == 2, "both hosts' DA counters")
        assert got == {"near": MAX_TRIES - 1.0, "clean": 0.0}
        assert prom.query("tpmtop_tpm_da_max_auth_fail") == {"near": float(MAX_TRIES), "clean": float(MAX_TRIES)}
        assert prom.query("tpmtop_tpm_da_in_lockout") == {"near": 0.0, "clean": 0.0}
        deadline = time.monotonic() + WAIT
        while True:
            alerts = [a for a in prom.api("alerts")["alerts"]
                      if a["labels"]["alertname"] == "TPMDictionaryAttackNearLockout" and a["state"] == "firing"]
            if alerts or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert [a["labels"]["instance"] for a in alerts] == ["near"], alerts
    finally:
        if prom is not None:
            prom.stop()
        for e in exporters:
            e.stop()
