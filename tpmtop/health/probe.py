"""One pass over the TPM for ``tpmtop health``, no authorization anywhere: the properties, the
clock, the self-test result, the NV indices' public areas and the EK certificates' data, the
loaded objects and sessions. A command the TPM refuses (a TPM_RC) leaves that part unknown with
its reason; a TPM that stops answering (the deadline) ends the pass: the caller fails it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tpmtop.errors import TpmError
from tpmtop.tpm.commands import CC_READ_PUBLIC, Transacts, build, check, get_handles, get_properties
from tpmtop.tpm.identity import PT_FIXED, read_variable
from tpmtop.tpm.status import ClockInfo, NvPublic, get_test_result, nv_indices, nv_read, nv_read_public, read_clock

TRANSIENT_FIRST = 0x80000000
LOADED_SESSION_FIRST = 0x02000000
# The TCG EK Credential Profile's certificate indices (2.2.1.4 low range, 2.2.1.5 high range)
EK_CERT_INDICES = {
    0x01C00002: "RSA 2048 EK certificate", 0x01C0000A: "ECC NIST P-256 EK certificate",
    0x01C00012: "RSA 2048 EK certificate (high range)", 0x01C00014: "ECC NIST P-256 EK certificate (high range)",
    0x01C00016: "ECC NIST P-384 EK certificate", 0x01C00018: "ECC NIST P-521 EK certificate",
    0x01C0001A: "ECC SM2 P-256 EK certificate", 0x01C0001C: "RSA 3072 EK certificate",
    0x01C0001E: "RSA 4096 EK certificate",
}
# TCG EK Credential Profile 2.2.1.5: where an EK made persistent lives (ReadPublic needs no authorization)
EK_PERSISTENT = {0x81010001: "RSA", 0x81010002: "ECC"}
PERSISTENT_FIRST = 0x81000000


@dataclass
class TpmFacts:
    var: dict[str, int]
    fixed: dict[int, int] = field(default_factory=dict)
    clock: ClockInfo | None = None
    test: tuple[int, bytes] | None = None
    nv: list[NvPublic] | None = None
    ek_data: dict[int, bytes] = field(default_factory=dict)
    ek_public: dict[int, bytes] = field(default_factory=dict)  # persistent EK handle -> SubjectPublicKeyInfo DER
    transients: list[int] | None = None
    sessions: list[int] | None = None
    errors: dict[str, str] = field(default_factory=dict)  # part -> why it is unknown


def probe(transport: Transacts) -> TpmFacts:
    f = TpmFacts(read_variable(transport))
    def fixed() -> None:
        f.fixed = get_properties(transport, PT_FIXED)

    def clock() -> None:
        f.clock = read_clock(transport)

    def test() -> None:
        f.test = get_test_result(transport)

    def nv() -> None:
        f.nv = []
        for h in nv_indices(transport):
            try:
                f.nv.append(nv_read_public(transport, h))
            except TpmError as e:  # one index the TPM will not describe: said, the rest listed
                f.errors[f"0x{h:08x}"] = str(e)

    def slots() -> None:
        f.transients = get_handles(transport, TRANSIENT_FIRST)
        f.sessions = get_handles(transport, LOADED_SESSION_FIRST)

    for part, run in (("fixed", fixed), ("clock", clock), ("self-test", test), ("nv", nv), ("slots", slots)):
        try:
            run()
        except TpmError as e:
            f.errors[part] = str(e)
    try:
        persistent = get_handles(transport, PERSISTENT_FIRST)
    except TpmError as e:
        f.errors["ek-public"] = str(e)
        persistent = []
    for h in persistent:
        if h in EK_PERSISTENT:
            try:
                f.ek_public[h] = _public_der(transport, h)
            except TpmError as e:
                f.errors[f"0x{h:08x}"] = str(e)
    for pub in f.nv or []:
        if pub.index in EK_CERT_INDICES and pub.readable_unauthorized:
            try:
                f.ek_data[pub.index] = nv_read(transport, pub)
            except TpmError as e:
                f.errors[f"0x{pub.index:08x}"] = str(e)
    return f


def _public_der(transport: Transacts, handle: int) -> bytes:
    """ReadPublic (no authorization) of a persistent key: its public key as SubjectPublicKeyInfo
    DER, what an X.509 certificate carries, so the two compare byte for byte."""
    import struct

    from tpm2_pytss.types import TPM2B_PUBLIC

    body = check(transport.transact(build(CC_READ_PUBLIC, struct.pack(">I", handle))), CC_READ_PUBLIC)
    try:
        pub, _ = TPM2B_PUBLIC.unmarshal(body)
        return bytes(pub.publicArea.to_der())
    except (ValueError, TypeError, RuntimeError) as e:  # a key type the library cannot convert
        raise TpmError(f"ReadPublic 0x{handle:08x}: {e}", None, "TPM2_CC_ReadPublic") from None
