"""The unlock room: LUKS2 images as plain files, formatted by cryptsetup and enrolled by the
real tools (systemd-cryptenroll, clevis luks bind) against a private swtpm (tcp_swtpm);
`tpmtop unlock` only reads them. PCRs are moved by tpm2-tools, never by tpmtop. Helpers:
tests/helpers/luks.py."""
