"""A private swtpm: started on connected socket pairs, stopped and wiped on every exit path.

swtpm gets one end of two ``socketpair``s (``--server type=tcp,fd=N --ctrl
type=unixio,clientfd=M``): no port to race for, and swtpm exits by itself when tpmtop's ends
close — even if tpmtop is SIGKILLed. On Linux it is also given PR_SET_PDEATHSIG so the kernel
sends it SIGTERM when tpmtop dies. ``stop()`` closes, waits, then escalates; the state
directory is removed unless the caller passed one in.
"""

from __future__ import annotations

import atexit
import queue
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import weakref
from typing import Any

from tpmtop.errors import TpmConnectionError, TpmtopError
from tpmtop.settings import current
from tpmtop.tpm.names import RC_INITIALIZE
from tpmtop.tpm.placement import FollowCaller
from tpmtop.tpm.transport import DEFAULT_TIMEOUT, SocketBackend

# swtpm control channel commands (swtpm's tpm_ioctl.h)
EXIT_WAIT_S = 1.0  # how long a reconnection's note waits for a swtpm that is ending (exit_note)
CMD_INIT = 0x02
CMD_SHUTDOWN = 0x03
TPM2_STARTUP_CLEAR = bytes.fromhex("80010000000c000001440000")
GET_RANDOM_8 = bytes.fromhex("80010000000c0000017b0008")

_live: weakref.WeakSet[Swtpm] = weakref.WeakSet()


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# (Popen args, Popen kwargs, done, [the Popen or the exception])
_spawn_q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawn_loop() -> None:
    while True:
        args, kwargs, done, out = _spawn_q.get()
        try:
            out.append(subprocess.Popen(*args, **kwargs))
        except BaseException as e:
            out.append(e)
        done.set()


def _popen_lasting(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """Popen from a thread that lives as long as the process. PR_SET_PDEATHSIG fires when the
    *thread* that forked the child exits, not the process: a swtpm started from a worker or a
    proxy's recovery thread (the owner's fast path runs jobs on the asking thread) was killed
    the moment that thread ended. The main thread lasts; any other asks one daemon thread."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(*args, **kwargs)
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawn_loop, name="tpmtop-spawner", daemon=True)
            _spawner.start()
    done, out = threading.Event(), list[Any]()
    _spawn_q.put((args, kwargs, done, out))
    done.wait()
    if isinstance(out[0], BaseException):
        raise out[0]
    proc: subprocess.Popen[Any] = out[0]
    return proc


class Swtpm:
    binary = "swtpm"

    def __init__(self, state_dir: str | None = None, startup: bool = True) -> None:
        """``startup`` False: swtpm answers but is not started up (TPM2_Startup is the
        caller's, as on a platform whose firmware sends it: ``tpmtop lab``'s guests)."""
        self._own_dir = state_dir is None
        self.startup = startup
        self.state_dir = state_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.data: socket.socket | None = None
        self.ctrl: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 10.0) -> Swtpm:
        if shutil.which(self.binary) is None:
            raise TpmtopError("swtpm is not installed (Debian/Ubuntu: apt-get install swtpm swtpm-tools; "
                              "or run `make run`, which installs it)")
        if self.state_dir is None:
            self.state_dir = tempfile.mkdtemp(prefix="tpmtop-swtpm-")
        data_ours, data_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ctrl_ours, ctrl_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = (data_theirs.fileno(), ctrl_theirs.fileno())
        cmd = [self.binary, "socket", "--tpm2", "--tpmstate", f"dir={self.state_dir}",
               "--server", f"type=tcp,fd={fds[0]}", "--ctrl", f"type=unixio,clientfd={fds[1]}",
               "--flags", "not-need-init,startup-clear" if self.startup else "not-need-init"]
        try:
            # Its own process group, so that a terminal's Ctrl-C reaches tpmtop alone (which
            # flushes its handles, then stops swtpm) — but tpmtop's session: with the kernel's
            # autogroup scheduling a new session is a scheduling group of its own, and under
            # load each command then waited for that group's turn (esys `reuse`, 2026-12-06:
            # op p50 7.1–7.5 ms for swtpm in a session of its own, 5.2 ms in the client's).
            self.proc = _popen_lasting(cmd, pass_fds=fds, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   preexec_fn=_set_pdeathsig, process_group=0)
        except OSError as e:
            data_ours.close()
            ctrl_ours.close()
            raise TpmtopError(f"cannot start swtpm: {e.strerror}") from None
        finally:
            data_theirs.close()
            ctrl_theirs.close()
        self.data, self.ctrl = data_ours, ctrl_ours
        _live.add(self)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.data is not None
        self.data.settimeout(timeout)
        try:
            rsp = SocketBackend(self.data, "swtpm").transact(GET_RANDOM_8)
        except (TpmConnectionError, OSError) as e:
            err = self._stderr_tail()
            self.stop()
            raise TpmtopError(f"swtpm did not answer: {e}{'; ' + err if err else ''}") from None
        finally:
            if self.data is not None:
                self.data.settimeout(None)
        # not started up: TPM_RC_INITIALIZE (0x100) is the answer that shows it is there
        if rsp[6:10] != (b"\0\0\0\0" if self.startup else b"\0\0\x01\0"):
            self.stop()
            raise TpmtopError(f"swtpm answered with error 0x{rsp[6:10].hex()}")

    def _stderr_tail(self) -> str:
        if self.proc and self.proc.poll() is not None and self.proc.stderr:
            lines = self.proc.stderr.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        return ""

    def exit_note(self) -> str:
        """What became of this swtpm, for a reconnection's mark: how it ended and the last line
        it wrote on stderr, or that it still runs (then tpmtop gave up on it: no answer in time)."""
        proc = self.proc
        if proc is None:
            return "no swtpm process"
        code = proc.poll()
        if code is None:
            # Its sockets close while it exits, before it can be reaped, so the lost connection
            # is often seen first; and poll() says "running" while another thread is reaping it
            # (Popen's waitpid lock). A dying swtpm was once named as still running.
            try:
                code = proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                return f"swtpm pid {proc.pid} was still running"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        err = self._stderr_tail()
        return f"swtpm pid {proc.pid} ended ({how}){': ' + err if err else ''}"

    def backend(self, timeout: float | None = DEFAULT_TIMEOUT) -> SocketBackend:
        if self.data is None or self.proc is None:
            raise TpmConnectionError("swtpm is not running")
        # swtpm is tpmtop's own: with the placement knob on it follows the thread that sends it
        # a command to its CPU (off by default: tpmtop.settings says why)
        follow = FollowCaller(self.proc) if current().placement else None
        return SocketBackend(self.data, f"private swtpm, pid {self.pid}", timeout, follow=follow)

    def control(self, cmd: int, payload: bytes = b"") -> int:
        """Send one control-channel command; return swtpm's result code."""
        if self.ctrl is None:
            raise TpmConnectionError("swtpm control channel is closed")
        self.ctrl.sendall(struct.pack(">I", cmd) + payload)
        rsp = self.ctrl.recv(4)
        return struct.unpack(">I", rsp)[0] if len(rsp) == 4 else -1

    def reset(self) -> None:
        """A power cycle: the TPM loses its volatile state (sessions, transient objects, the
        null hierarchy seed) exactly as a real one at reboot; then TPM2_Startup(CLEAR)."""
        rc = self.control(CMD_INIT, struct.pack(">I", 0))
        if rc != 0:
            raise TpmConnectionError(f"swtpm CMD_INIT failed with {rc}")
        rsp = self.backend().transact(TPM2_STARTUP_CLEAR)
        if int.from_bytes(rsp[6:10], "big") not in (0, RC_INITIALIZE):  # INITIALIZE: already started
            raise TpmConnectionError(f"TPM2_Startup after reset failed: 0x{rsp[6:10].hex()}")

    def kill(self) -> None:
        """SIGKILL, as a crash would (tests use it); sockets stay open on our side."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, timeout: float = 10.0) -> Swtpm:
        """A new swtpm process on the same state directory (NV state survives)."""
        self._close_sockets()
        self.kill()
        return self.start(timeout)

    def _close_sockets(self) -> None:
        for s in (self.data, self.ctrl):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self.data = self.ctrl = None

    def stop(self) -> None:
        with self._lock:
            proc = self.proc
            self._close_sockets()  # swtpm exits when its peer closes
            if proc is not None:
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    try:
                        proc.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                if proc.stderr:
                    proc.stderr.close()
            self.proc = None
            if self._own_dir and self.state_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)
                self.state_dir = None
            _live.discard(self)

    def __enter__(self) -> Swtpm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for s in list(_live):
        s.stop()
