"""Everything that talks to a TPM: choosing one, starting a simulator, the instrumented
transport, identity, handles. No Textual here."""
