"""Everything that talks to a TPM: choosing one, starting a simulator, the instrumented
transport, identity, handles. No Textual here."""

# The front door: the modules the rest of tpmtop uses (tests/unit/test_front_doors.py keeps it
# so); the others are this package's own parts. Listed, not imported: importing a submodule
# must not load them all (tpm2-pytss is seconds of start-up on a slow machine).
__all__ = [
    "busypoll",  # the kernel's busy-poll knob and its cost
    "commands",  # the commands tpmtop sends (read-only ones, PCR_Extend on a test PCR)
    "connection",  # a TPM connection: transport, owner thread, recorder, reconnect
    "exchange",  # one command and its response, timed; Origin, the labels of who sent it
    "handles",  # listing and flushing handles
    "identity",  # what the TPM says it is, and its variable properties
    "interrupts",  # signals while a command is on the wire
    "names",  # command and response code names
    "owner",  # the thread that owns the TPM
    "rcformat",  # response codes as text
    "sim",  # a private swtpm
    "status",  # the TPM's own state without authorization: flags, clock, self-test, NV publics
    "tcti",  # choosing a TPM: a TCTI string, a device, a simulator
    "transport",  # the instrumented transport
    "wire",  # the wire format of commands and responses
]
