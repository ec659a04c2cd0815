"""Per TPM command code: how many handles its command carries, and whether its response
carries one — what :mod:`tpmtop.tpm.wire` needs to find the authorization area — and its name
(what :mod:`tpmtop.tpm.names` shows).

Generated from tpm2-pytss's command parser (``python -m tpmtop.tpm.cc_table`` prints it
again) rather than imported from it at run time: importing ``tpm2_pytss.command_parser``
costs ~150 ms, which every ``tpmtop info`` over SSH paid before it sent a command.
tests/tpm/test_transport.py checks every entry against the installed tpm2-pytss; a code missing
here (a newer spec's command) is looked up in the library, once.
"""

from __future__ import annotations

# command code: (handles in the command's handle area, the response has a handle)
HANDLES: dict[int, tuple[int, bool]] = {
    0x11F: (2, False),  # nv_undefinespacespecial
    0x120: (2, False),  # evictcontrol
    0x121: (1, False),  # hierarchycontrol
    0x122: (2, False),  # nv_undefinespace
    0x124: (1, False),  # changeeps
    0x125: (1, False),  # changepps
    0x126: (1, False),  # clear
    0x127: (1, False),  # clearcontrol
    0x128: (1, False),  # clockset
    0x129: (1, False),  # hierarchychangeauth
    0x12A: (1, False),  # nv_definespace
    0x12B: (1, False),  # pcr_allocate
    0x12C: (1, False),  # pcr_setauthpolicy
    0x12D: (1, False),  # pp_commands
    0x12E: (1, False),  # setprimarypolicy
    0x12F: (2, False),  # fieldupgradestart
    0x130: (1, False),  # clockrateadjust
    0x131: (1, True),  # createprimary
    0x132: (1, False),  # nv_globalwritelock
    0x133: (2, False),  # getcommandauditdigest
    0x134: (2, False),  # nv_increment
    0x135: (2, False),  # nv_setbits
    0x136: (2, False),  # nv_extend
    0x137: (2, False),  # nv_write
    0x138: (2, False),  # nv_writelock
    0x139: (1, False),  # dictionaryattacklockreset
    0x13A: (1, False),  # dictionaryattackparameters
    0x13B: (1, False),  # nv_changeauth
    0x13C: (1, False),  # pcr_event
    0x13D: (1, False),  # pcr_reset
    0x13E: (1, False),  # sequencecomplete
    0x13F: (1, False),  # setalgorithmset
    0x140: (1, False),  # setcommandcodeauditstatus
    0x141: (0, False),  # fieldupgradedata
    0x142: (0, False),  # incrementalselftest
    0x143: (0, False),  # selftest
    0x144: (0, False),  # startup
    0x145: (0, False),  # shutdown
    0x146: (0, False),  # stirrandom
    0x147: (2, False),  # activatecredential
    0x148: (2, False),  # certify
    0x149: (3, False),  # policynv
    0x14A: (2, False),  # certifycreation
    0x14B: (2, False),  # duplicate
    0x14C: (2, False),  # gettime
    0x14D: (3, False),  # getsessionauditdigest
    0x14E: (2, False),  # nv_read
    0x14F: (2, False),  # nv_readlock
    0x150: (2, False),  # objectchangeauth
    0x151: (2, False),  # policysecret
    0x152: (2, False),  # rewrap
    0x153: (1, False),  # create
    0x154: (1, False),  # ecdh_zgen
    0x155: (1, False),  # hmac
    0x156: (1, False),  # import
    0x157: (1, True),  # load
    0x158: (1, False),  # quote
    0x159: (1, False),  # rsa_decrypt
    0x15B: (1, True),  # hmac_start
    0x15C: (1, False),  # sequenceupdate
    0x15D: (1, False),  # sign
    0x15E: (1, False),  # unseal
    0x160: (2, False),  # policysigned
    0x161: (0, True),  # contextload
    0x162: (1, False),  # contextsave
    0x163: (1, False),  # ecdh_keygen
    0x164: (1, False),  # encryptdecrypt
    0x165: (0, False),  # flushcontext
    0x167: (0, True),  # loadexternal
    0x168: (1, False),  # makecredential
    0x169: (1, False),  # nv_readpublic
    0x16A: (1, False),  # policyauthorize
    0x16B: (1, False),  # policyauthvalue
    0x16C: (1, False),  # policycommandcode
    0x16D: (1, False),  # policycountertimer
    0x16E: (1, False),  # policycphash
    0x16F: (1, False),  # policylocality
    0x170: (1, False),  # policynamehash
    0x171: (1, False),  # policyor
    0x172: (1, False),  # policyticket
    0x173: (1, False),  # readpublic
    0x174: (1, False),  # rsa_encrypt
    0x176: (2, True),  # startauthsession
    0x177: (1, False),  # verifysignature
    0x178: (0, False),  # ecc_parameters
    0x179: (0, False),  # firmwareread
    0x17A: (0, False),  # getcapability
    0x17B: (0, False),  # getrandom
    0x17C: (0, False),  # gettestresult
    0x17D: (0, False),  # hash
    0x17E: (0, False),  # pcr_read
    0x17F: (1, False),  # policypcr
    0x180: (1, False),  # policyrestart
    0x181: (0, False),  # readclock
    0x182: (1, False),  # pcr_extend
    0x183: (1, False),  # pcr_setauthvalue
    0x184: (3, False),  # nv_certify
    0x185: (2, False),  # eventsequencecomplete
    0x186: (0, True),  # hashsequencestart
    0x187: (1, False),  # policyphysicalpresence
    0x188: (1, False),  # policyduplicationselect
    0x189: (1, False),  # policygetdigest
    0x18A: (0, False),  # testparms
    0x18B: (1, False),  # commit
    0x18C: (1, False),  # policypassword
    0x18D: (1, False),  # zgen_2phase
    0x18E: (0, False),  # ec_ephemeral
    0x18F: (1, False),  # policynvwritten
    0x190: (1, False),  # policytemplate
    0x191: (1, True),  # createloaded
    0x192: (3, False),  # policyauthorizenv
    0x193: (1, False),  # encryptdecrypt2
    0x194: (1, False),  # ac_getcapability
    0x195: (3, False),  # ac_send
    0x196: (1, False),  # policy_ac_sendselect
    0x197: (2, False),  # certifyx509
    0x198: (1, False),  # act_settimeout
    0x199: (1, False),  # ecc_encrypt
    0x19A: (1, False),  # ecc_decrypt
    0x19B: (1, False),  # policycapability
    0x19C: (1, False),  # policyparameters
}


# command code: its name in tpm2-pytss's TPM2_CC (the spec's TPM_CC_ name without the prefix;
# of two spellings of one code, the first in dir() order, as tpmtop.tpm.names always chose)
NAMES: dict[int, str] = {
    0x11F: "NV_UndefineSpaceSpecial",
    0x120: "EvictControl",
    0x121: "HierarchyControl",
    0x122: "NV_UndefineSpace",
    0x124: "ChangeEPS",
    0x125: "ChangePPS",
    0x126: "Clear",
    0x127: "ClearControl",
    0x128: "ClockSet",
    0x129: "HierarchyChangeAuth",
    0x12A: "NV_DefineSpace",
    0x12B: "PCR_Allocate",
    0x12C: "PCR_SetAuthPolicy",
    0x12D: "PP_Commands",
    0x12E: "SetPrimaryPolicy",
    0x12F: "FieldUpgradeStart",
    0x130: "ClockRateAdjust",
    0x131: "CreatePrimary",
    0x132: "NV_GlobalWriteLock",
    0x133: "GetCommandAuditDigest",
    0x134: "NV_Increment",
    0x135: "NV_SetBits",
    0x136: "NV_Extend",
    0x137: "NV_Write",
    0x138: "NV_WriteLock",
    0x139: "DictionaryAttackLockReset",
    0x13A: "DictionaryAttackParameters",
    0x13B: "NV_ChangeAuth",
    0x13C: "PCR_Event",
    0x13D: "PCR_Reset",
    0x13E: "SequenceComplete",
    0x13F: "SetAlgorithmSet",
    0x140: "SetCommandCodeAuditStatus",
    0x141: "FieldUpgradeData",
    0x142: "IncrementalSelfTest",
    0x143: "SelfTest",
    0x144: "Startup",
    0x145: "Shutdown",
    0x146: "StirRandom",
    0x147: "ActivateCredential",
    0x148: "Certify",
    0x149: "PolicyNV",
    0x14A: "CertifyCreation",
    0x14B: "Duplicate",
    0x14C: "GetTime",
    0x14D: "GetSessionAuditDigest",
    0x14E: "NV_Read",
    0x14F: "NV_ReadLock",
    0x150: "ObjectChangeAuth",
    0x151: "PolicySecret",
    0x152: "Rewrap",
    0x153: "Create",
    0x154: "ECDH_ZGen",
    0x155: "HMAC",
    0x156: "Import",
    0x157: "Load",
    0x158: "Quote",
    0x159: "RSA_Decrypt",
    0x15B: "HMAC_Start",
    0x15C: "SequenceUpdate",
    0x15D: "Sign",
    0x15E: "Unseal",
    0x160: "PolicySigned",
    0x161: "ContextLoad",
    0x162: "ContextSave",
    0x163: "ECDH_KeyGen",
    0x164: "EncryptDecrypt",
    0x165: "FlushContext",
    0x167: "LoadExternal",
    0x168: "MakeCredential",
    0x169: "NV_ReadPublic",
    0x16A: "PolicyAuthorize",
    0x16B: "PolicyAuthValue",
    0x16C: "PolicyCommandCode",
    0x16D: "PolicyCounterTimer",
    0x16E: "PolicyCpHash",
    0x16F: "PolicyLocality",
    0x170: "PolicyNameHash",
    0x171: "PolicyOR",
    0x172: "PolicyTicket",
    0x173: "ReadPublic",
    0x174: "RSA_Encrypt",
    0x176: "StartAuthSession",
    0x177: "VerifySignature",
    0x178: "ECC_Parameters",
    0x179: "FirmwareRead",
    0x17A: "GetCapability",
    0x17B: "GetRandom",
    0x17C: "GetTestResult",
    0x17D: "Hash",
    0x17E: "PCR_Read",
    0x17F: "PolicyPCR",
    0x180: "PolicyRestart",
    0x181: "ReadClock",
    0x182: "PCR_Extend",
    0x183: "PCR_SetAuthValue",
    0x184: "NV_Certify",
    0x185: "EventSequenceComplete",
    0x186: "HashSequenceStart",
    0x187: "PolicyPhysicalPresence",
    0x188: "PolicyDuplicationSelect",
    0x189: "PolicyGetDigest",
    0x18A: "TestParms",
    0x18B: "Commit",
    0x18C: "PolicyPassword",
    0x18D: "ZGen_2Phase",
    0x18E: "EC_Ephemeral",
    0x18F: "PolicyNvWritten",
    0x190: "PolicyTemplate",
    0x191: "CreateLoaded",
    0x192: "PolicyAuthorizeNV",
    0x193: "EncryptDecrypt2",
    0x194: "AC_GetCapability",
    0x195: "AC_Send",
    0x196: "Policy_AC_SendSelect",
    0x197: "CertifyX509",
    0x198: "ACT_SetTimeout",
    0x199: "ECC_Encrypt",
    0x19A: "ECC_Decrypt",
    0x19B: "PolicyCapability",
    0x19C: "PolicyParameters",
    0x20000000: "Vendor_TCG_Test",
}

def from_library() -> dict[int, tuple[int, bool]]:
    """The same table, asked of tpm2-pytss (slow: imports its command parser)."""
    from tpm2_pytss.command_parser import tpm2_command, tpm2_response
    from tpm2_pytss.constants import TPM2_CC

    out = {}
    for cc in TPM2_CC:
        if TPM2_CC.FIRST <= cc <= TPM2_CC.LAST and int(cc) not in out:
            out[int(cc)] = (tpm2_command.lookup_command_class(TPM2_CC(cc)).num_handles(),
                            tpm2_response.lookup_response_class(TPM2_CC(cc)).has_handle())
    return out


def names_from_library() -> dict[int, str]:
    """NAMES, asked of tpm2-pytss's TPM2_CC (slow: imports tpm2-pytss)."""
    from tpm2_pytss.constants import TPM2_CC

    out: dict[int, str] = {}
    for attr in dir(TPM2_CC):
        if attr.startswith("_") or not attr[0].isupper() or attr in ("FIRST", "LAST"):
            continue
        value = getattr(TPM2_CC, attr)
        if isinstance(value, int):
            out.setdefault(int(value), attr)
    return out


if __name__ == "__main__":
    from tpm2_pytss.constants import TPM2_CC

    for code, (n, has) in sorted(from_library().items()):
        print(f"    0x{code:03X}: ({n}, {has}),  # {TPM2_CC(code)}")
    for code, name in sorted(names_from_library().items()):
        print(f'    0x{code:03X}: "{name}",')
