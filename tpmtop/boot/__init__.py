"""``tpmtop boot``: is the TPM what makes this boot slow, and what would change it?

Pure data and text: nothing here imports Textual or talks to a TPM, so the CLI, the
dashboard's Boot tab and the tests share one implementation.
"""
