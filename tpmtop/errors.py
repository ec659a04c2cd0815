"""Errors that reach the user as one line and a documented exit status.

Exit statuses: 0 ok, 1 the TPM or the system failed, 2 bad usage or bad input,
130 interrupted (Ctrl-C, SIGTERM, SIGHUP).
"""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class TpmtopError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user. It often quotes a file (a
    member name of a capture, a profile's key), so it is made safe for a terminal here, once
    for every message (see tpmtop.textsafe)."""

    exit_status = EXIT_FAILURE

    def __str__(self) -> str:
        from tpmtop.textsafe import safe

        return safe(super().__str__())


class UsageError(TpmtopError):
    """Bad arguments or bad input files (exit status 2)."""

    exit_status = EXIT_USAGE


class TpmError(TpmtopError):
    """The TPM answered with an error response code."""

    def __init__(self, message: str, rc: int | None = None, command: str | None = None):
        super().__init__(message)
        self.rc = rc
        self.command = command


class TpmConnectionError(TpmtopError):
    """The TPM stopped answering (swtpm killed, device gone, socket closed)."""


class NoTpm(TpmConnectionError):
    """No TPM to use on this machine (no device, no -T, no $TPM2TOOLS_TCTI): a command that can
    work without one (``pcrs --no-tpm``) names its way, matched by type, not by words."""


class TpmTimeout(TpmConnectionError):
    """The TPM did not answer within --timeout: busy (another program holds it) or hung."""


class IntegrityError(TpmtopError):
    """A response failed its HMAC check, or the null primary's name changed."""


class NullNameChanged(IntegrityError):
    """The null primary re-created after a failed ContextLoad has another name: the TPM was
    reset (new null seed) or someone is interfering. The kernel disables the TPM here."""


class Interrupted(KeyboardInterrupt):
    """Raised by tpmtop's signal handler (SIGTERM, SIGHUP, SIGINT) so that clean-up runs.

    A KeyboardInterrupt, not a TpmtopError: like Ctrl-C it must get past every ``except
    Exception`` on its way out (a library's, a lazy import's), or the signal is lost and the
    run goes on. ``str(err)`` says which signal."""

    exit_status = EXIT_INTERRUPTED
