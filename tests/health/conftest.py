"""The health room: `tpmtop health` against private swtpm processes (dictionary-attack state,
who caused it), and its set-up/driver verdicts on trees saved from real guest kernels."""
