"""Where the dashboard's data comes from, as plain Python (no Textual): a live TPM
(:mod:`.live`: polling, user actions, the workload loop), a saved capture (:mod:`.replay`),
or the kernel's sysfs/securityfs without a TPM command (:mod:`.passive`); and what the
panels show, as plain data built the same way from any of them (:mod:`.model`).
"""
