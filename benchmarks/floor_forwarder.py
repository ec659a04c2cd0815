"""The floor under `tpmtop proxy`'s figures: a bare mssim-to-swtpm forwarder, measured in the same
run by benchmarks/proxy.py.

    python benchmarks/floor_forwarder.py PORT SWTPM_PORT

It listens on PORT (the mssim TPM port) and PORT+1 (the platform port), and forwards each
command whole to the swtpm data channel on SWTPM_PORT, on one thread, from one epoll set; it
answers the platform port's signals with success. It does none of what tpmtop does: no peer
look-up, no access check, no naming, no recording, no accounting, no turns, no deadlines. What a
command costs through it is what any user-space proxy on this machine pays for its two extra
hops (two more wake-ups of a thread); the difference between it and tpmtop is what tpmtop's own
work costs. Not a product: it trusts its clients' framing.
"""

from __future__ import annotations

import select
import signal
import socket
import struct
import sys

U32 = struct.Struct(">I")


def main() -> int:
    port, sw_port = int(sys.argv[1]), int(sys.argv[2])
    up = socket.create_connection(("127.0.0.1", sw_port))
    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listeners = {}
    for p, kind in ((port, "tpm"), (port + 1, "platform")):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", p))
        ls.listen(128)
        listeners[ls.fileno()] = (ls, kind)
    ep = select.epoll()
    for fd in listeners:
        ep.register(fd, select.EPOLLIN)
    conns: dict[int, tuple[socket.socket, str, bytearray]] = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def answer_tpm(sock: socket.socket, buf: bytearray) -> bool:
        while len(buf) >= 4:
            code = U32.unpack_from(buf, 0)[0]
            if code != 8:  # SESSION_END, STOP: done with this connection
                return False
            if len(buf) < 9:
                return True
            size = U32.unpack_from(buf, 5)[0]
            if len(buf) < 9 + size:
                return True
            up.sendall(bytes(buf[9:9 + size]))
            del buf[:9 + size]
            rsp = up.recv(4096)
            while len(rsp) < 10 or len(rsp) < U32.unpack_from(rsp, 2)[0]:
                rsp += up.recv(4096)
            sock.sendall(U32.pack(len(rsp)) + rsp + b"\0\0\0\0")
        return True

    def answer_platform(sock: socket.socket, buf: bytearray) -> bool:
        while len(buf) >= 4:
            code = U32.unpack_from(buf, 0)[0]
            del buf[:4]
            if code == 20:  # SESSION_END
                return False
            sock.sendall(U32.pack(0))
        return True

    while True:
        for fd, _ev in ep.poll():
            if fd in listeners:
                ls, kind = listeners[fd]
                s, _ = ls.accept()
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[s.fileno()] = (s, kind, bytearray())
                ep.register(s.fileno(), select.EPOLLIN)
                continue
            s, kind, buf = conns[fd]
            data = s.recv(65536)
            buf += data
            if data and (answer_tpm if kind == "tpm" else answer_platform)(s, buf):
                if kind == "tpm" and buf:  # Nagle holds the command behind its header: ACK it now
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                continue
            ep.unregister(fd)
            del conns[fd]
            s.close()


if __name__ == "__main__":
    sys.exit(main())
