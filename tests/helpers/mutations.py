"""The edits the fuzz tests make to real inputs (hypothesis strategies and the functions that
apply them): byte edits of a buffer or file, and one value replaced somewhere in a JSON
document. Shared by tests/unit/test_fuzz_parsers.py, tests/cli/test_fuzz_cli.py and
tests/decode/test_decode.py, so each fuzzes with the same edits."""

from __future__ import annotations

import json

from hypothesis import strategies as st


def _mutate(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for kind, pos, val in edits:
        if not b and kind != "insert":
            continue
        i = pos % (len(b) + 1)
        if kind == "flip" and i < len(b):
            b[i] ^= 1 << (val % 8)
        elif kind == "set" and i < len(b):
            b[i] = val
        elif kind == "insert":
            b[i:i] = bytes([val])
        elif kind == "delete" and i < len(b):
            del b[i]
        elif kind == "truncate":
            del b[i:]
    return bytes(b)


EDITS = st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
                           st.integers(0, 4096), st.integers(0, 255)), min_size=1, max_size=8)


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=20))
JSON = st.recursive(JSON_LEAF, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
                    max_leaves=20)


def _mutate_json(doc, data):
    """Replace one randomly chosen value somewhere in a real document."""
    doc = json.loads(json.dumps(doc))
    node = doc
    for _ in range(data.draw(st.integers(0, 5))):
        if isinstance(node, dict) and node:
            k = data.draw(st.sampled_from(sorted(node)))
            if not isinstance(node[k], (dict, list)) or data.draw(st.booleans()):
                action = data.draw(st.sampled_from(["replace", "delete"]))
                if action == "delete":
                    del node[k]
                else:
                    node[k] = data.draw(JSON)
                return doc
            node = node[k]
        elif isinstance(node, list) and node:
            i = data.draw(st.integers(0, len(node) - 1))
            if not isinstance(node[i], (dict, list)) or data.draw(st.booleans()):
                node[i] = data.draw(JSON)
                return doc
            node = node[i]
        else:
            break
    if isinstance(doc, dict):
        doc[data.draw(st.text(max_size=8))] = data.draw(JSON)
    return doc
