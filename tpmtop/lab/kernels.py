"""Which kernels the lab boots, and where their images and initramfs come from.

- ``6.12-hmac`` / ``6.12-nohmac``: built by ``scripts/lab-kernels.sh`` (``make lab-kernels``)
  from Debian's linux-source-6.12 with a small guest configuration that differs in one option,
  CONFIG_TCG_TPM2_HMAC; everything the guest needs is built in, so their initramfs has no
  modules.
- ``6.12-percmd``: 6.12-hmac with ``scripts/lab-percmd-edit.sh`` applied, 6.10/6.11's session
  per command (the forced continueSession of 6.12's lazy flush taken out), built by the same
  script from 6.12-hmac's objects.
- ``6.1`` / ``6.12``: Debian's binary kernels (``linux-image-*-amd64``, HMAC off), fetched and
  given an initramfs with their 9p/virtio modules by ``scripts/kernel-vm.sh --prepare``.
- a path: any bzImage a user brings (a distribution's, a patched one). It must have the TPM
  (tpm_tis), virtio-pci and 9p built in: the lab's initramfs for it carries no modules.

Both scripts live in the source checkout (the lab is a developer's tool: it builds and boots
kernels); ``repo_root()`` finds it. Layer: lab; no Textual.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

from tpmtop.errors import TpmtopError, UsageError
from tpmtop.lab.guest import KernelSpec

BUILT = ("6.12-percmd", "6.12-hmac", "6.12-nohmac")
HMAC_BUILT = ("6.12-percmd", "6.12-hmac")
NOTES = {
    "6.12-hmac": "built from Debian's linux-source-6.12, the lab's small guest config",
    "6.12-nohmac": "built from Debian's linux-source-6.12, the lab's small guest config",
    "6.12-percmd": "6.12-hmac with scripts/lab-percmd-edit.sh: a session per HMAC command, as 6.10/6.11",
}
DEBIAN = ("6.1", "6.12")
BUSYBOX = "/bin/busybox"


def repo_root() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(root, "scripts", "kernel-vm.sh")):
        raise UsageError(
            "tpmtop lab runs from a source checkout (it needs scripts/kernel-vm.sh and "
            "scripts/lab-kernels.sh beside the tpmtop package)"
        )
    return root


def _script(root: str, args: list[str], what: str) -> str:
    try:
        p = subprocess.run(args, cwd=root, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
    except OSError as e:
        raise TpmtopError(f"cannot run {args[0]}: {e.strerror}") from None
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise TpmtopError(f"{what}: {tail}")
    return p.stdout


def built_initrd(root: str, python: str, cache: str) -> str:
    """The module-less initramfs (busybox and the kernel VM's /init), cached by content."""
    init = os.path.join(root, "scripts", "kernel-vm-init.sh")
    builder = os.path.join(root, "scripts", "kernel_vm_initramfs.py")
    h = hashlib.sha256()
    for p in (init, builder, BUSYBOX):
        with open(p, "rb") as f:
            h.update(f.read())
    out = os.path.join(cache, f"initramfs-builtin-{h.hexdigest()[:12]}.cpio.gz")
    if not os.path.isfile(out):
        os.makedirs(cache, exist_ok=True)
        _script(
            root,
            [python, builder, os.path.join(cache, "no-modules"), BUSYBOX, init, out],
            "could not build the lab's initramfs",
        )
    return out


def resolve(name: str, *, root: str, python: str, cache: str) -> KernelSpec:
    if name in BUILT:
        script = os.path.join(root, "scripts", "lab-kernels.sh")
        p = subprocess.run([script, "--print", name], cwd=root, capture_output=True, text=True)
        image = p.stdout.strip()
        if p.returncode != 0 or not image:
            state = (p.stderr.strip().splitlines() or [""])[-1].removeprefix("lab-kernels: ")
            if state:  # being built, or its build failed: a system state, not a usage error
                raise TpmtopError(f"kernel {name} is not built: {state}")
            cost = (
                "minutes once 6.12-hmac is built, which it builds first"
                if name == "6.12-percmd"
                else "about 45 min on a 2-core machine"
            )
            raise UsageError(
                f"kernel {name} is not built: run `make lab-kernels` (scripts/lab-kernels.sh {name}; {cost})"
            )
        release = None
        try:
            with open(os.path.join(os.path.dirname(image), "release")) as f:
                release = f.read().strip() or None
        except OSError:
            pass
        return KernelSpec(
            name,
            image,
            built_initrd(root, python, cache),
            hmac_built=name in HMAC_BUILT,
            release=release,
            note=NOTES[name],
        )
    if name in DEBIAN:
        out = _script(
            root,
            [os.path.join(root, "scripts", "kernel-vm.sh"), "--prepare", "--kernel", name],
            f"could not prepare Debian's {name} kernel",
        )
        parts = out.strip().splitlines()[-1].split() if out.strip() else []
        if len(parts) != 3:
            raise TpmtopError(f"scripts/kernel-vm.sh --prepare gave no kernel for {name}")
        return KernelSpec(
            name,
            parts[1],
            parts[2],
            hmac_built=False,
            release=os.path.basename(parts[1]).removeprefix("vmlinuz-"),
            note="Debian's binary kernel (CONFIG_TCG_TPM2_HMAC not set)",
        )
    if os.sep in name or os.path.isfile(name):
        if not os.path.isfile(name):
            raise UsageError(f"--kernel {name}: no such file")
        return KernelSpec(
            os.path.basename(name),
            os.path.abspath(name),
            built_initrd(root, python, cache),
            note="brought by the user: needs tpm_tis, virtio-pci and 9p built in",
        )
    raise UsageError(f"unknown kernel {name!r}: use {', '.join(BUILT + DEBIAN)} or a path to a bzImage")
