"""Build the kernel-vm initramfs: busybox, an /init, and the modules the VM needs.

Used by scripts/kernel-vm.sh. The kernel's own .deb has no modules.dep (depmod runs at
install), so dependencies are read from each module's ``.modinfo`` ELF section
(``depends=``), modules built in are found in ``modules.builtin``, and compressed modules
(.ko.xz/.ko.zst/.ko.gz) are decompressed here so busybox's insmod can load any of them.

    python3 kernel_vm_initramfs.py MODULES_DIR BUSYBOX INIT OUT.cpio.gz [MODULE...]   (none: all built in)

A module that is neither built in nor in MODULES_DIR is an error (one line, exit 1).
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import stat
import struct
import sys


def _decompress(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".xz"):
        return lzma.decompress(data)
    if path.endswith(".gz"):
        return gzip.decompress(data)
    if path.endswith(".zst"):
        import zstandard  # not in Debian's 6.1/6.12 kernels, which use .ko / .ko.xz

        return zstandard.ZstdDecompressor().decompress(data)
    return data


def modinfo(elf: bytes) -> dict[str, str]:
    """The key=value strings of an ELF64 little-endian module's .modinfo section."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not an ELF64 little-endian module")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def section(i):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        end = elf.index(b"\0", stroff + name)
        if elf[stroff + name:end] == b".modinfo":
            out = {}
            for item in elf[off:off + size].split(b"\0"):
                k, sep, v = item.decode("utf-8", "replace").partition("=")
                if sep:
                    out.setdefault(k, v)
            return out
    return {}


def index(moddir: str) -> tuple[dict[str, str], set[str]]:
    """{module name: path} (a module's name uses '_' where its file may use '-') and the
    names of the modules built in."""
    files = {}
    for root, _, names in os.walk(os.path.join(moddir, "kernel")):
        for n in names:
            base = n.split(".ko", 1)[0]
            if ".ko" in n:
                files[base.replace("-", "_")] = os.path.join(root, n)
    builtin = set()
    try:
        with open(os.path.join(moddir, "modules.builtin")) as f:
            for line in f:
                builtin.add(os.path.basename(line.strip()).split(".ko", 1)[0].replace("-", "_"))
    except OSError:
        pass
    return files, builtin


def resolve(wanted: list[str], files: dict[str, str], builtin: set[str]) -> list[tuple[str, bytes]]:
    """The modules to load, dependencies first, as (name, decompressed image)."""
    order: list[tuple[str, bytes]] = []
    seen: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        name = name.replace("-", "_")
        if name in seen or name in builtin:
            return
        if name not in files:
            via = f" (needed by {' → '.join(chain)})" if chain else ""
            raise SystemExit(f"kernel-vm: module {name} is neither built in nor in the kernel package{via}")
        seen.add(name)
        image = _decompress(files[name])
        for dep in filter(None, modinfo(image).get("depends", "").split(",")):
            visit(dep, chain + (name,))
        order.append((name, image))

    for w in wanted:
        visit(w, ())
    return order


class Cpio:
    """A newc cpio archive (what the kernel unpacks as an initramfs)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1) -> None:
        nb = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08x}" for v in (
            self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(nb), 0))
        self.ino += 1
        self.buf.write(hdr.encode() + nb)
        self.buf.write(b"\0" * (-(110 + len(nb)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755, nlink=2)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def node(self, name: str, major: int, minor: int) -> None:
        nb = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08x}" for v in (
            self.ino, stat.S_IFCHR | 0o600, 0, 0, 1, 0, 0, 0, 0, major, minor, len(nb), 0))
        self.ino += 1
        self.buf.write(hdr.encode() + nb + b"\0" * (-(110 + len(nb)) % 4))

    def close(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    moddir, busybox, init, out, *wanted = argv
    files, builtin = index(moddir)
    mods = resolve(wanted, files, builtin)
    c = Cpio()
    for d in ("bin", "dev", "proc", "sys", "newroot", "results", "modules"):
        c.dir(d)
    c.node("dev/console", 5, 1)
    with open(busybox, "rb") as f:
        c.file("bin/busybox", f.read(), 0o755)
    with open(init, "rb") as f:
        c.file("init", f.read(), 0o755)
    for name, image in mods:
        c.file(f"modules/{name}.ko", image)
    c.file("modules/order", "".join(f"{n}.ko\n" for n, _ in mods).encode())
    tmp = out + ".tmp"
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(c.close())
    os.replace(tmp, out)
    print(" ".join(n for n, _ in mods) or "(all built in)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
