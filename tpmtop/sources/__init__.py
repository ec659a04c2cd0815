"""Where the dashboard's data comes from, as plain Python (no Textual): a live TPM
(:mod:`.live`: polling, user actions, the workload loop), a saved capture (:mod:`.replay`),
the kernel's own traffic (:mod:`.kernel`), or the kernel's sysfs/securityfs without a TPM
command (:mod:`.passive`). Each hands up plain data (runs, timings, events, the header's and
the inspector's facts: states, names and numbers) through the roles of :mod:`.protocol`; the
view-model (tpmtop.viewmodel) alone makes the panels' rows and writes their words.
"""

# The front door: the modules the view-model and the CLI use (tests/unit/test_front_doors.py
# keeps it so); live_workload and pacing are the live source's own parts. Listed, not
# imported: the replay source must not load the live one's TPM stack.
__all__ = [
    "export_file",  # where x's capture goes, and writing it
    "gate",  # the workload's gate the dashboard holds while it draws
    "histreads",  # a histogram read as plain numbers
    "inspect",  # what the TPM and the wire tell of one handle (the inspector's facts)
    "kernel",  # tpmtop --kernel: the kernel's own commands (kprobes)
    "live",  # a TPM
    "meters",  # rate and CPU meters
    "passive",  # sysfs only
    "protocol",  # the roles a source has (Feed, Runs, TpmControl, Workload, Export, Where) and Capabilities
    "replay",  # a saved capture
    "runs",  # one run per (engine, mode, op), as plain numbers
    "sysfs",  # a sysfs/securityfs reading
    "timeline",  # operation p50 per second
    "timings",  # what a source knows of the commands' timings
]
