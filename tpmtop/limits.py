"""Process limits a server raises for itself. Layer: core; no Textual."""

from __future__ import annotations


def raise_nofile(want: int) -> None:
    """Room for ``want`` descriptors if the hard limit allows (the soft one is often 1,024, and
    a server's connection cap counts one descriptor each)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError):
            pass
