"""The published JSON form of a decode: ``tpmtop/schema/decode-1.json``."""

from __future__ import annotations

import json
from importlib import resources


def load_schema() -> dict:
    return json.loads(resources.files("tpmtop").joinpath("schema/decode-1.json").read_text("utf-8"))
