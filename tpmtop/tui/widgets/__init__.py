"""The dashboard's panels, one module each."""
