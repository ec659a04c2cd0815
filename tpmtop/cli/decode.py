"""``tpmtop decode COMMAND [RESPONSE]``: a TPM command and its response, field by field
(:mod:`tpmtop.decode`; JSON form: ``tpmtop/schema/decode-1.json``)."""

from __future__ import annotations

import argparse
import os

EXAMPLES = """Each buffer is hex (spaces, colons and a 0x prefix are ignored) or a file holding
the raw bytes or their hex. A lone response needs --cc to say which command it answers.
A capture (tpmtop bench --events --json, tpmtop import) with --event N decodes its event N
(counted from 0; captures keep the bytes of their newest 16,384 commands).

Every field is shown with its offset, spec name (TPM 2.0 Part 2/3), type, bytes and meaning:
enumerations by name, attribute bits spelled out, unions resolved by their selector, TPM2B
sizes checked. A parameter encrypted by a session is shown as ciphertext with the session
that encrypted it. --json gives the same tree (schema tpmtop/schema/decode-1.json).

exit status: 0 every buffer decoded fully; 2 bad input, or a buffer that does not follow
the TPM 2.0 layout (the partial decode is still printed: where it stopped, why, and the
rest of the buffer raw).

examples:
  tpmtop decode 80010000000c0000017b0008
  tpmtop decode cmd.bin rsp.bin --json
  tpmtop decode --cc GetRandom 800100000014000000000008dbecfe91abd2b12f
  tpmtop decode --event 42 run.json"""


def add_decode_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("buffers", nargs="+", metavar="HEX|FILE",
                   help="the command, then optionally its response")
    p.add_argument("--cc", metavar="CODE", help="the command a lone response answers "
                   "(name such as GetRandom, or a number such as 0x17b)")
    p.add_argument("--event", type=int, metavar="N", help="with a capture file: decode its event N")
    p.add_argument("--json", action="store_true", help="the decode as JSON on stdout")
    p.add_argument("--no-hex", action="store_true", help="leave out the hex view")


def _read(arg: str) -> bytes:
    from tpmtop.errors import UsageError

    if os.path.exists(arg):
        try:
            with open(arg, "rb") as f:
                data = f.read(1 << 20)
        except OSError as e:
            raise UsageError(f"cannot read {arg}: {e.strerror}") from None
        text = data.strip()
        try:
            return _hex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return data
    try:
        return _hex(arg)
    except ValueError:
        raise UsageError(f"{arg!r} is neither a file nor hex") from None


def _from_capture(paths: list[str], n: int) -> list[bytes]:
    from tpmtop.capture import load_capture
    from tpmtop.errors import UsageError

    if len(paths) != 1:
        raise UsageError("--event takes one capture file")
    events = load_capture(paths[0]).get("events") or []
    if not 0 <= n < len(events):
        raise UsageError(f"{paths[0]} has events 0..{len(events) - 1}, not {n}"
                         if events else f"{paths[0]} has no events (record with --events)")
    e = events[n]
    if not isinstance(e.get("command_hex"), str):
        raise UsageError(f"event {n} of {paths[0]} kept no bytes "
                         "(captures keep them for the newest 16,384 commands)")
    try:
        out = [bytes.fromhex(e["command_hex"])]
        if isinstance(e.get("response_hex"), str):
            out.append(bytes.fromhex(e["response_hex"]))
    except ValueError:
        raise UsageError(f"event {n} of {paths[0]}: its bytes are not hex") from None
    return out


def _hex(text: str) -> bytes:
    t = text.strip().lower().removeprefix("0x")
    for ch in " \t\r\n:-":
        t = t.replace(ch, "")
    if not t:
        raise ValueError("empty")
    return bytes.fromhex(t)


def _cc(text: str) -> int:
    from tpmtop.errors import UsageError
    from tpmtop.tpm.names import cc_from_name

    try:
        return int(text, 0)
    except ValueError:
        cc = cc_from_name(text)
        if cc is None:
            raise UsageError(f"unknown command {text!r}") from None
        return cc


def run_decode(args: argparse.Namespace) -> int:
    import sys

    from tpmtop import decode
    from tpmtop.cli.common import print_json
    from tpmtop.decode.plaintext import provider
    from tpmtop.errors import EXIT_USAGE, UsageError

    if len(args.buffers) > 2:
        raise UsageError("give a command and at most one response")
    bufs = _from_capture(args.buffers, args.event) if args.event is not None else [_read(b) for b in args.buffers]
    cc = _cc(args.cc) if args.cc else None
    if len(bufs) == 1 and (cc is not None or decode.looks_like_response(bufs[0])):
        if cc is None:
            raise UsageError("that is a response; say which command it answers with --cc")
        d = decode.decode(None, bufs[0], cc, plaintext=provider(None))
    else:
        d = decode.decode(bufs[0], bufs[1] if len(bufs) > 1 else None, plaintext=provider(None))
    if args.json:
        print_json(d.to_json())
    else:
        print(decode.render(d, hexdump=not args.no_hex))
    if not d.complete:
        stop = d.first_stop
        why = stop.text() if stop else "bytes left after the declared size"
        print(f"tpmtop: partial decode: {why}", file=sys.stderr)
        return EXIT_USAGE
    return 0
