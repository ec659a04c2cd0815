"""The published JSON form of a decode: ``tpmtop/schema/decode-1.json``."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files("tpmtop").joinpath("schema/decode-1.json").read_text("utf-8"))
    return schema
