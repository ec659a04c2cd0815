"""``tpmtop boot``: is the TPM what makes this boot slow, and what would change it?

Pure data and text: nothing here imports Textual or talks to a TPM, so the CLI, the
dashboard's Boot tab and the tests share one implementation.
"""

# The front door: the modules the rest of tpmtop uses (tests/unit/test_front_doors.py keeps it
# so); the parsers behind traces, and the report's parts, are this package's own. Listed, not
# imported.
__all__ = [
    "cmdline",  # the kernel command line
    "dmesg",  # the kernel log's TPM lines
    "facts",  # what was read, and from where
    "projection",  # the boot projection
    "report",  # tpmtop boot's report
    "rootfs",  # a system's files under a root
    "series",  # a kernel trace's data model
    "traces",  # loading a kernel trace (sniff the format, parse)
]
