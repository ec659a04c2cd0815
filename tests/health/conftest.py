"""The health room: `tpmtop health` against private swtpm processes (dictionary-attack state,
who caused it), and its set-up/driver verdicts on trees saved from real guest kernels."""

from __future__ import annotations

from tests.helpers.da import da_swtpm_factory, tools  # noqa: F401 (fixtures of this room)


def check_schema(doc: dict) -> dict:
    """``tpmtop health --json`` as its published schema (tpmtop/schema/health-1.json) says."""
    import json
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("tpmtop").joinpath("schema/health-1.json").read_text())
    jsonschema.validate(doc, schema)
    return doc
