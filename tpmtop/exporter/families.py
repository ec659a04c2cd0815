"""Every metric ``tpmtop exporter`` serves: its name, type, labels and buckets, defined once.

docs/exporter.md ("The metrics"), the Prometheus rules in ``contrib/prometheus/`` and the
Grafana dashboard use these names; a test checks that each name they use is served here.

Prometheus' naming conventions: base units (seconds), ``_seconds`` for durations, ``_total``
for counters, ``_info`` for the value-1 series that carry identity labels, and bounded
label sets — every label takes its values from a closed set (:class:`Operation`,
:class:`SessionMode`, the kernel path words of :func:`tpmtop.kernel.trace_pipe.path_label`,
TPM command names) or from this machine's identity (one series). No pid, comm, handle or
file path is ever a label: a fleet of a few hundred hosts must not grow a series per process.
"""

from __future__ import annotations

import enum

PREFIX = "tpmtop"

# Fixed histogram buckets (seconds), the same on every host so that histograms add up across
# a fleet (sum by (le)). From 50 µs (a swtpm on loopback answers in ~100 µs) to 10 s (a slow
# chip's RSA CreatePrimary); 1-2.5-5 steps, so an SLB9670's 6.4 ms PCR_Extend, its 37 ms
# ContextLoad and its 85 ms StartAuthSession each fall in a bucket of their own.
BUCKETS: tuple[float, ...] = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                              0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Operation(enum.StrEnum):
    """The kernel operations tpmtop times whole (:mod:`tpmtop.kernel.ops`)."""

    EXTEND = "extend"  # tpm2_pcr_extend: one IMA measurement, with its session set-up if any
    GET_RANDOM = "get_random"  # tpm2_get_random: hwrng, the kernel's entropy


class SessionMode(enum.StrEnum):
    """The kernel's HMAC session behaviour, from the extends seen (:meth:`KernelAccounts.mode`)."""

    NONE = "none"  # no HMAC session (CONFIG_TCG_TPM2_HMAC off, tpm.disable_pcr_integrity=1)
    PER_COMMAND = "per-command"  # a fresh salted session per extend: Linux 6.10–6.11
    REUSE = "reuse"  # a kept session (6.12+), set up again after whatever ended it
    UNKNOWN = "unknown"  # no extend seen yet, or the extends seen do not decide it


class RcLabel(enum.StrEnum):
    """The ``rc`` label's values that are not a response code."""

    NO_RESPONSE = "no_response"  # tpm_transmit returned -errno: the TPM gave no answer
    NOT_TRACED = "not_traced"  # answered, but the probes could not read the code (user space, old kernels)
    OTHER = "other"  # a value outside TPM 2.0's 12-bit codes (a garbled header): one bucket for all


class Pattern(enum.StrEnum):
    """The failure patterns of :mod:`tpmtop.patterns` (its ``Pattern.kind``)."""

    REPEATED_FAILURE = "repeated-failure"  # one command failing with one rc again and again (0x128, 0x14c loops)
    SLOTS_FULL = "slots-full"  # TPM_RC_OBJECT_MEMORY 0x902, SESSION_MEMORY 0x903, SESSION_HANDLES 0x905
    CONTEXT_GAP = "context-gap"  # TPM_RC_CONTEXT_GAP 0x901
    SESSION_CHURN = "session-churn"  # sessions started over and over
    PCR_CHANGED = "pcr-changed"  # a policy session failed with TPM_RC_PCR_CHANGED 0x128


class SlotKind(enum.StrEnum):
    """TPM slots ``--probe`` reads (TPM2_PT_HR_* properties)."""

    TRANSIENT = "transient"  # HR_TRANSIENT_AVAIL
    LOADED_SESSION = "loaded_session"  # HR_LOADED_AVAIL
    ACTIVE_SESSION = "active_session"  # HR_ACTIVE_AVAIL


class ConnectionEnd(enum.StrEnum):
    """Why the exporter's HTTP(S) endpoint ended a connection before serving it
    (:mod:`tpmtop.exporter.http`)."""

    LIMIT = "limit"  # max_connections open already: refused at accept
    PEER_LIMIT = "peer_limit"  # this user (loopback) or address already holds its share
    HANDSHAKE_TIMEOUT = "handshake_timeout"  # no finished TLS handshake within the deadline (silent client)
    HANDSHAKE_FAILED = "handshake_failed"  # a TLS alert, no certificate, not TLS at all
    READ_TIMEOUT = "read_timeout"  # no whole request head within the deadline
    BAD_REQUEST = "bad_request"  # not HTTP, or a head over the limit


UNKNOWN_COMMAND = "unknown"  # a command code outside tpm2-pytss's table (garbled, or vendor)


def name(short: str) -> str:
    return f"{PREFIX}_{short}"


# (name, type, labels, help): the whole exposition, as docs/exporter.md lists it.
FAMILIES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # -- the kernel's TPM traffic (kprobes on tpm_transmit, or a saved trace) --------------------
    (name("kernel_command_duration_seconds"), "histogram", ("command", "path"),
     "Time the TPM took to answer one command the kernel sent (tpm_transmit entry to return), "
     "by command and kernel path."),
    (name("kernel_command_responses_total"), "counter", ("command", "rc"),
     "Kernel TPM commands by response code (0x000 success; no_response, not_traced, other)."),
    (name("kernel_operation_duration_seconds"), "histogram", ("operation",),
     "One whole kernel operation (a PCR extend with its session set-up, a get_random)."),
    (name("kernel_operation_tpm_duration_seconds"), "histogram", ("operation",),
     "The TPM's share of one kernel operation: its commands' time on the wire."),
    (name("kernel_operation_host_duration_seconds"), "histogram", ("operation",),
     "The host's share of one kernel operation (ECDH salt, KDFs, HMACs, waiting for the chip), "
     "where the trace shows it (operation probes)."),
    (name("kernel_operation_failures_total"), "counter", ("operation",),
     "Kernel operations that returned an error."),
    (name("kernel_session_setups_total"), "counter", ("operation",),
     "Kernel operations that set up a salted HMAC session (sent StartAuthSession)."),
    (name("kernel_session_mode"), "gauge", ("mode",),
     "The kernel's HMAC session behaviour from the extends seen: 1 for the current mode, 0 for the others."),
    (name("kernel_pattern_commands_total"), "counter", ("pattern",),
     "Kernel TPM commands inside a failure pattern (retry loop, full slots, context gap, session churn)."),
    (name("kernel_pattern_lost_seconds_total"), "counter", ("pattern",),
     "TPM time spent on the commands of a failure pattern."),
    (name("kernel_pcr_changed_total"), "counter", ("pcr",),
     "Commands that failed with TPM_RC_PCR_CHANGED (0x128), by the PCR whose extend came between the session's "
     "PolicyPCR and the command (\"unknown\" when the trace does not show which PCR: the kernel view has no "
     "command bytes)."),
    (name("kernel_trace_lost_events_total"), "counter", (),
     "Trace events the kernel dropped (its ring buffer was full): commands may be missing."),
    (name("kernel_trace_up"), "gauge", (),
     "1 while the kernel's TPM traffic is being read, 0 when it cannot be (why: on stderr)."),
    # -- sysfs, securityfs, the kernel config, systemd (what `tpmtop boot` reads) ---------------
    (name("host_info"), "gauge", ("kernel_release",), "This machine's kernel release (value 1)."),
    (name("tpm_info"), "gauge", ("family", "driver", "vendor", "manufacturer", "firmware"),
     "The TPM this machine has (value 1); manufacturer and firmware only with --probe."),
    (name("kernel_config_tpm2_hmac"), "gauge", (),
     "1 when the kernel was built with CONFIG_TCG_TPM2_HMAC=y, 0 when not; absent when unknown."),
    (name("kernel_pcr_integrity_disabled"), "gauge", (),
     "1 when tpm.disable_pcr_integrity is set (6.12+: extends without an HMAC session), 0 when not."),
    (name("ima_measurements"), "gauge", (), "IMA measurements since boot (runtime_measurements_count)."),
    (name("boot_phase_seconds"), "gauge", ("phase",),
     "systemd-analyze's boot phases (firmware, loader, kernel, initrd, userspace)."),
    (name("boot_duration_seconds"), "gauge", (), "systemd-analyze's whole boot time."),
    (name("boot_tpm_units_critical_path_seconds"), "gauge", (),
     "Start-up time of systemd's TPM units on the boot's critical path (systemd-analyze critical-chain)."),
    # -- --probe: read-only TPM properties --------------------------------------------------------
    (name("tpm_slots_available"), "gauge", ("kind",),
     "Free TPM slots (TPM2_PT_HR_*_AVAIL), read with --probe."),
    (name("tpm_probe_success"), "gauge", (), "1 when the last --probe read the TPM, 0 when it failed."),
    (name("pcr_replay_matches"), "gauge", ("bank",),
     "1 when the boot's event log (with systemd's measure log and IMA's list) replays to every judged PCR of the "
     "bank, 0 when not or when the bank was never extended; read with --probe (PCR_Read), absent for a bank only "
     "the log or only the TPM carries, and without a readable event log."),
    # -- --probe: the dictionary-attack state (GetCapability, no authorization; tpmtop health) ----
    (name("tpm_da_lockout_counter"), "gauge", (),
     "Authorization failures the TPM currently counts towards lockout (TPM2_PT_LOCKOUT_COUNTER), with --probe."),
    (name("tpm_da_max_auth_fail"), "gauge", (),
     "Failures at which the TPM locks out (TPM2_PT_MAX_AUTH_FAIL), with --probe."),
    (name("tpm_da_lockout_interval_seconds"), "gauge", (),
     "Seconds after which the TPM forgives one counted failure (TPM2_PT_LOCKOUT_INTERVAL), with --probe."),
    (name("tpm_da_lockout_recovery_seconds"), "gauge", (),
     "Seconds the lockout hierarchy waits after a failed lockout authorization (TPM2_PT_LOCKOUT_RECOVERY)."),
    (name("tpm_da_in_lockout"), "gauge", (),
     "1 while the TPM is in dictionary-attack lockout (TPMA_PERMANENT inLockout), 0 when not; with --probe."),
    # -- --probe: the TPM's clock counters and NV room (ReadClock, GetCapability; tpmtop health) --
    (name("tpm_clock_resets"), "gauge", (),
     "TPM Resets since the TPM was last cleared (ReadClock resetCount: one per reboot; TPM2_Clear sets it "
     "to 0), with --probe."),
    (name("tpm_clock_restarts"), "gauge", (),
     "TPM Restarts since the last TPM Reset (ReadClock restartCount: resume from hibernation), with --probe."),
    (name("tpm_nv_persistent_available"), "gauge", (),
     "The TPM's estimate of how many more persistent objects fit in its NV (TPM2_PT_HR_PERSISTENT_AVAIL: it "
     "shrinks as NV indices take space), with --probe."),
    # -- the exporter itself (plus prometheus_client's process_* families) --------------------------
    (name("exporter_info"), "gauge", ("version", "source"), "tpmtop's version and what feeds it (value 1)."),
    (name("exporter_connections_ended_total"), "counter", ("reason",),
     "Connections to /metrics ended before a request was served, by why (over the limit or this user's "
     "share, TLS handshake time-out or failure, no whole request in time, a bad request)."),
    (name("exporter_connections_open"), "gauge", (), "Connections to /metrics open now (TLS handshakes included)."),
    (name("exporter_tls_handshakes_pending"), "gauge", (),
     "TLS handshakes under way now (a client that sent its first bytes and has not finished)."),
)

FAMILY_NAMES = frozenset(n for n, _t, _l, _h in FAMILIES)
HELP = {n: h for n, _t, _l, h in FAMILIES}
LABELS = {n: labels for n, _t, labels, _h in FAMILIES}
