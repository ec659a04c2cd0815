"""`tpmtop unlock --json` is what tpmtop/schema/unlock-1.json says, and the schema's closed
sets are the enums tpmtop's verdicts come from."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema

from tests.helpers.luks import enroll_clevis, enroll_systemd, import_token, make_image
from tests.helpers.processes import run_tpmtop
from tpmtop.unlock.judge import Verdict
from tpmtop.unlock.tokens import TokenKind


def _schema() -> dict:
    return json.loads(resources.files("tpmtop").joinpath("schema/unlock-1.json").read_text("utf-8"))


def test_schema_sets_are_the_enums():
    s = _schema()["$defs"]
    assert s["verdict"]["enum"] == [v.value for v in Verdict]
    assert s["kind"]["enum"] == [k.value for k in TokenKind]


def test_output_validates(tcp_swtpm, tmp_path):
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=16")
    enroll_clevis(img, tcp_swtpm.tcti, "sss", {"t": 1, "pins": {"tpm2": [{"pcr_ids": "23"}]}})
    import_token(img, {"type": "example-hardware-key", "keyslots": []})
    bad = tmp_path / "junk.img"
    bad.write_bytes(bytes(8192))
    snap = tmp_path / "snap.json"
    assert run_tpmtop("pcrs", "-T", tcp_swtpm.tcti, "--save", str(snap)).returncode == 0
    r = run_tpmtop("unlock", img, str(bad), "-T", tcp_swtpm.tcti, "--json", "--trial", "--since", str(snap))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, _schema())
    assert [d["error"] is None for d in doc["devices"]] == [True, False]
    assert {t["verdict"] for t in doc["devices"][0]["tokens"]} == {"would-unseal", "not-tpm"}
