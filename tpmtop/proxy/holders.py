"""Who holds the TPM open without the proxy: processes with /dev/tpm0 or /dev/tpmrm0 open
(read from /proc/PID/fd, which needs root for other users' processes), and tpm2-abrmd."""

from __future__ import annotations

import os
import time
from typing import Any

DEVICES = ("/dev/tpm0", "/dev/tpmrm0")


def tpm_holders(devices: tuple[str, ...] = DEVICES) -> dict[str, Any]:
    import psutil

    holders = []
    unreadable = 0
    abrmd = []
    boot = psutil.boot_time()
    for p in psutil.process_iter(["pid", "name", "username", "exe", "create_time", "cmdline"]):
        info = p.info
        if info["name"] in ("tpm2-abrmd", "tpm2_abrmd"):
            abrmd.append(info["pid"])
        d = f"/proc/{info['pid']}/fd"
        try:
            fds = os.listdir(d)
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{d}/{fd}")
            except OSError:
                continue
            if target in devices:
                ct = info["create_time"] or boot
                holders.append({"pid": info["pid"], "user": info["username"], "name": info["name"],
                                "exe": info["exe"] or "", "device": target, "fd": int(fd),
                                "since": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ct))})
    return {"devices": [d for d in devices if os.path.exists(d)], "holders": holders,
            "abrmd": {"running": bool(abrmd), "pids": abrmd},
            "unreadable_processes": unreadable, "root": os.geteuid() == 0}
