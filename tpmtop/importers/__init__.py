"""Readers of TPM traffic recorded by other tools (pcap files); no Textual."""
