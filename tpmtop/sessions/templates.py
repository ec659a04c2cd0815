"""The null-hierarchy primary the kernel creates at probe (tpm2-sessions.c, tpm2_create_null_primary):
ECC NIST P-256, nameAlg SHA-256, objectAttributes 0x00030472 (fixedTPM|fixedParent|
sensitiveDataOrigin|userWithAuth|noDA|restricted|decrypt), AES-128-CFB, empty unique."""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any

# Spelled (spec Part 2), not taken from tpm2_pytss.constants: the dashboard's workload creates
# this primary in every mode (the kernel's null primary handling), and importing tpm2-pytss
# (with the cryptography it imports) leaves ~10,000 objects the cyclic GC walks on every full
# collection. tests/tpm/test_transport.py pins both to their names there.
# TPMA_OBJECT FIXEDTPM | FIXEDPARENT | SENSITIVEDATAORIGIN | USERWITHAUTH | NODA | RESTRICTED | DECRYPT
NULL_PRIMARY_ATTRS = 0x00030472
TPM_RH_NULL = 0x40000007  # TPM2_RH.NULL


@lru_cache(maxsize=1)
def null_primary_public() -> Any:  # a tpm2-pytss TPM2B_PUBLIC
    from tpm2_pytss.types import TPM2B_PUBLIC

    return TPM2B_PUBLIC.parse("ecc256:aes128cfb", objectAttributes=NULL_PRIMARY_ATTRS, nameAlg="sha256")


# The same template marshalled (Part 2 §12.2.4 TPMT_PUBLIC in a TPM2B), what the native engine
# sends: marshalled here rather than by tpm2-pytss for the import above; the test that pins the
# numbers also checks these bytes against tpm2-pytss's marshal() of null_primary_public().
_TPMT_PUBLIC = struct.pack(
    ">HHIH" "HHH" "HHH" "HH",
    0x0023, 0x000B, NULL_PRIMARY_ATTRS, 0,  # type ECC, nameAlg SHA-256, objectAttributes, empty authPolicy
    0x0006, 128, 0x0043,  # symmetric: AES, 128 bits, CFB
    0x0010, 0x0003, 0x0010,  # scheme NULL, curveID NIST_P256, kdf NULL
    0, 0)  # unique: empty x, empty y


def null_primary_public_bytes() -> bytes:
    """The template as a TPM2B_PUBLIC's bytes (the native engine's CreatePrimary)."""
    return struct.pack(">H", len(_TPMT_PUBLIC)) + _TPMT_PUBLIC
