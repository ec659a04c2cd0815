"""Field-level decode of TPM 2.0 commands and responses (docs/decode.md).

``decode(command, response)`` gives a :class:`~tpmtop.decode.model.Decoded`: per buffer a tree
of fields with spec names, types, values, offsets and bytes; ``render`` prints it; ``to_json``
is the stable form (``tpmtop/schema/decode-1.json``). The same decode serves ``tpmtop decode``,
Enter in the dashboard and ``--decode`` of import/replay.
Core package (below ``sources``): no Textual, no Rich.
"""

from tpmtop.decode.model import SCHEMA, Decoded, Field, Part, Stop
from tpmtop.decode.text import hex_view, one_line, render
from tpmtop.decode.walk import decode, decode_command, decode_response, handle_name, looks_like_response

__all__ = ["SCHEMA", "Decoded", "Field", "Part", "Stop", "decode", "decode_command", "decode_response",
           "handle_name", "hex_view", "looks_like_response", "one_line", "render"]
