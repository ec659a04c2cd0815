"""`tpmtop pcrs --json` is what tpmtop/schema/pcrs-1.json says, and the schema's closed sets
are the enums tpmtop derives its verdicts from."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from tests.helpers.pcrs import PCR_FIXTURES
from tests.helpers.processes import TcpSwtpm, run_tpmtop
from tpmtop.pcrs.verdict import Health, PcrStatus


def _schema() -> dict:
    return json.loads(resources.files("tpmtop").joinpath("schema/pcrs-1.json").read_text("utf-8"))


def test_schema_sets_are_the_enums():
    s = _schema()["$defs"]
    assert s["status"]["enum"] == [m.value for m in PcrStatus]
    assert s["verdict"]["enum"] == [m.value for m in Health]


@pytest.mark.parametrize(("args", "code"), [
    (("--eventlog", str(PCR_FIXTURES / "ovmf" / "binary_bios_measurements"), "--no-tpm", "--events"), 0),
    # a fresh --sim TPM was never extended: the replay does not match, exit status 1
    (("--eventlog", str(PCR_FIXTURES / "seabios" / "binary_bios_measurements"),
      "--ima", str(PCR_FIXTURES / "seabios" / "ascii_runtime_measurements"), "--sim"), 1),
])
def test_output_validates(args, code):
    r = run_tpmtop("pcrs", "--json", *args)
    assert r.returncode == code, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, _schema())
    assert doc["schema"] == "tpmtop-pcrs/1"


def test_diff_output_validates(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path)}
    log = str(PCR_FIXTURES / "ovmf" / "binary_bios_measurements")
    sw = TcpSwtpm()
    try:
        # the swtpm was never extended: the report (and so --save) exits 1; the snapshot is written
        assert run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", log, "--save", env=env).returncode == 1
        r = run_tpmtop("pcrs", "-T", sw.tcti, "--eventlog", str(PCR_FIXTURES / "seabios" / "binary_bios_measurements"),
                       "--diff", "--json", env=env)
    finally:
        sw.stop()
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, _schema())
    changes = {c["change"] for p in doc["diff"]["pcrs"] for c in p["events"]}
    assert {"added", "removed"} <= changes  # SeaBIOS' events are not OVMF's
