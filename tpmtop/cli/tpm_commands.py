"""``tpmtop info``, ``tpmtop handles``, ``tpmtop flush``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, cast

from tpmtop.cli.common import notice, print_json, refuse_if_read_only, table, tpm_from_args

if TYPE_CHECKING:
    from tpmtop.recorder import Recorder


def _tpm_args(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    add_tpm_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def add_info_arguments(p: argparse.ArgumentParser) -> None:
    _tpm_args(p)


def add_handles_arguments(p: argparse.ArgumentParser) -> None:
    _tpm_args(p)


def add_flush_arguments(p: argparse.ArgumentParser) -> None:
    _tpm_args(p)
    p.add_argument("handle", help="handle to flush, e.g. 0x80000000 (transient object or session)")


def run_info(args: argparse.Namespace) -> int:
    from tpmtop.tpm.identity import SESSION_FIXED, SESSION_PROPS, read_variable

    with tpm_from_args(args) as conn:
        ident = conn.identity()
        var = conn.call(read_variable)
        if args.json:
            print_json({"tpm": conn.tpm_json(), "identity": ident.to_json(),
                        "properties": {k: var[k] for k in SESSION_PROPS if k in var}
                        | {k: ident.fixed[k] for k in SESSION_FIXED if k in ident.fixed}})
            return 0
        print(f"TPM          {conn.target.tcti}{'  (simulated)' if conn.simulated else ''}")
        print(f"manufacturer {ident.manufacturer}")
        print(f"vendor       {ident.vendor or '-'}")
        print(f"firmware     {ident.firmware}  ({ident.firmware_raw})")
        print(f"spec         TPM {ident.spec_family} level {ident.spec_level} revision {ident.spec_revision}"
              f" ({ident.spec_date})")
        print()
        rows = [[f"TPM2_PT_{k}", str(var[k])] for k in SESSION_PROPS if k in var]
        rows += [[f"TPM2_PT_{k}", str(ident.fixed[k])] for k in SESSION_FIXED if k in ident.fixed]
        print(table(rows, ["property", "value"], right={1}))
    return 0


def run_handles(args: argparse.Namespace) -> int:
    from tpmtop.tpm.handles import list_handles

    with tpm_from_args(args) as conn:
        entries = conn.call(list_handles, cast("Recorder", conn.recorder).owned_handles())
        rm_note = ("through the kernel resource manager (/dev/tpmrm0) a client sees only its own "
                   "transient objects, renumbered; other programs' and the kernel's are hidden")
        if args.json:
            out = {"tpm": {"tcti": conn.target.tcti, "simulated": conn.simulated},
                   "handles": [e.to_json() for e in entries]}
            if conn.is_kernel_rm:
                out["note"] = rm_note
            print_json(out)
            return 0
        if entries:
            print(table([[f"0x{e.handle:08x}", e.kind, e.session_type or "", "yes" if e.ours else ""]
                         for e in entries], ["handle", "kind", "session", "tpmtop"]))
        else:
            print("no transient objects, sessions or persistent objects loaded")
        if conn.is_kernel_rm:
            notice(rm_note)
    return 0


def _names_nothing_loaded(rc: int) -> bool:
    """FlushContext's answers for a handle that holds nothing, on its one parameter:
    TPM_RC_HANDLE (0x1cb: swtpm, for the first transient slot) or TPM_RC_VALUE (0x1c4: swtpm,
    for a handle past the slots it has)."""
    if not rc & 0x080:  # a format-0 code is about something else
        return False
    return rc & 0xBF in (0x08B, 0x084)


def run_flush(args: argparse.Namespace) -> int:
    from tpmtop.errors import TpmError, TpmtopError
    from tpmtop.tpm.handles import check_flushable, flush, parse_handle

    handle = parse_handle(args.handle)
    check_flushable(handle)
    refuse_if_read_only(args, f"flush 0x{handle:08x}")
    with tpm_from_args(args) as conn:
        try:
            conn.call(flush, handle)
        except TpmError as e:
            if e.rc is not None and _names_nothing_loaded(e.rc):
                # exit 1 as before (the TPM's answer), in words rather than its response code
                raise TpmtopError(f"0x{handle:08x} is not loaded: the TPM holds no object or session there "
                                  f"(TPM rc 0x{e.rc:x}; tpmtop handles lists what is loaded)") from None
            raise
        if args.json:
            print_json({"flushed": f"0x{handle:08x}"})
        else:
            print(f"flushed 0x{handle:08x}")
    return 0
