"""The null-hierarchy primary the kernel creates at probe (tpm2-sessions.c, tpm2_create_null_primary):
ECC NIST P-256, nameAlg SHA-256, objectAttributes 0x00030472 (fixedTPM|fixedParent|
sensitiveDataOrigin|userWithAuth|noDA|restricted|decrypt), AES-128-CFB, empty unique."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from tpm2_pytss.constants import TPM2_RH, TPMA_OBJECT

NULL_PRIMARY_ATTRS = int(TPMA_OBJECT.FIXEDTPM | TPMA_OBJECT.FIXEDPARENT | TPMA_OBJECT.SENSITIVEDATAORIGIN
                         | TPMA_OBJECT.USERWITHAUTH | TPMA_OBJECT.NODA | TPMA_OBJECT.RESTRICTED
                         | TPMA_OBJECT.DECRYPT)  # 0x00030472
TPM_RH_NULL = int(TPM2_RH.NULL)


@lru_cache(maxsize=1)
def null_primary_public() -> Any:  # a tpm2-pytss TPM2B_PUBLIC
    from tpm2_pytss.types import TPM2B_PUBLIC

    return TPM2B_PUBLIC.parse("ecc256:aes128cfb", objectAttributes=NULL_PRIMARY_ATTRS, nameAlg="sha256")


@lru_cache(maxsize=1)
def null_primary_public_bytes() -> bytes:
    return bytes(null_primary_public().marshal())
