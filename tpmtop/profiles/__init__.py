"""Chip latency profiles: make a simulator answer as slowly as a real chip (issue 7)."""

from tpmtop.profiles.loader import BUILTIN, load_profile, write_profile
from tpmtop.profiles.profile import Figure, Profile

__all__ = ["BUILTIN", "Figure", "Profile", "load_profile", "write_profile"]
