"""The registry of crypto engines: :class:`~tpmtop.sessions.modes.Engine` name -> how to build
one on a connection. Apart from :mod:`tpmtop.sessions.engine` (the base class both engines
import), so the base never imports its subclasses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpmtop.sessions.engine import CryptoEngine
from tpmtop.sessions.modes import Engine


def _native(conn: Any) -> CryptoEngine[Any, Any]:
    from tpmtop.sessions.native import NativeEngine  # imported when used: bench may run only esys

    return NativeEngine(conn.transport)


def _esys(conn: Any) -> CryptoEngine[Any, Any]:
    from tpmtop.sessions.esys import EsysEngine  # loads libtss2-esys: only when asked for

    return EsysEngine(conn.transport, conn.esapi())


ENGINE_FACTORIES: dict[Engine, Callable[[Any], CryptoEngine[Any, Any]]] = {Engine.NATIVE: _native, Engine.ESYS: _esys}


def make_engine(engine: str, conn: Any) -> CryptoEngine[Any, Any]:
    try:
        factory = ENGINE_FACTORIES[Engine(engine)]
    except ValueError:
        raise ValueError(f"unknown engine {engine!r}") from None
    return factory(conn)
