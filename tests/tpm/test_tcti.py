"""Choosing a TPM: tpm2-tools' TCTI strings and precedence, the /dev/tpmrm0 fallback."""

import json
import os
import stat

import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop.errors import TpmConnectionError, UsageError
from tpmtop.tpm.tcti import choose, parse_tcti


def test_option_beats_environment():
    t = choose("swtpm:port=2321", False, env={"TPM2TOOLS_TCTI": "mssim:port=9999"})
    assert (t.kind, t.conf, t.source) == ("swtpm", "port=2321", "-T")


def test_environment_used_without_option():
    t = choose(None, False, env={"TPM2TOOLS_TCTI": "tabrmd:bus_name=com.intel.tss2.Tabrmd"})
    assert (t.kind, t.conf, t.source) == ("tabrmd", "bus_name=com.intel.tss2.Tabrmd", "TPM2TOOLS_TCTI")


def test_sim_and_tcti_contradict():
    with pytest.raises(UsageError):
        choose("device:/dev/tpmrm0", True, env={})


def test_fallback_to_sim_only_when_allowed_and_it_says_why():
    """The dashboard (fallback=True) may open on a simulator, with the reason; a headless
    command may not."""
    t = choose(None, False, env={}, device="/nonexistent/tpmrm0", fallback=True)
    assert t.simulated and t.source == "fallback" and "/nonexistent/tpmrm0" in t.note
    assert t.simulated_reason is not None and "/nonexistent/tpmrm0" in t.simulated_reason
    with pytest.raises(TpmConnectionError, match=r"no /nonexistent/tpmrm0.*--sim"):
        choose(None, False, env={}, device="/nonexistent/tpmrm0")
    assert choose(None, True, env={}).simulated_reason == "--sim was given"


def test_raw_device_never_falls_back():
    with pytest.raises(TpmConnectionError, match="no /nonexistent/tpmrm0; no /nonexistent/tpm0"):
        choose(None, False, env={}, raw_device=True, device="/nonexistent/tpmrm0", raw="/nonexistent/tpm0",
               fallback=True)


@pytest.mark.skipif(os.path.exists("/dev/tpmrm0") or os.path.exists("/dev/tpm0"), reason="this machine has a TPM")
@pytest.mark.parametrize("argv", [("info",), ("--raw-device", "info"), ("handles",)])
def test_headless_without_a_tpm_exits_1_with_one_line(argv):
    r = run_tpmtop(*argv)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no /dev/tpmrm0" in lines[0] and "--sim" in lines[0], lines
    assert r.stdout == "" and "Traceback" not in r.stderr


@pytest.mark.parametrize("text", ["bogus:x", "swtpm:port=notaport", "swtpm:port=70000", "mssim:colour=blue", " "])
def test_malformed_tcti_is_usage_error(text):
    with pytest.raises(UsageError):
        parse_tcti(text, "-T")


def test_tpm0_refused_without_raw_device():
    with pytest.raises(UsageError, match="resource manager"):
        choose("device:/dev/tpm0", False, env={})
    assert choose("device:/dev/tpm0", False, env={}, raw_device=True).device_path == "/dev/tpm0"


def test_option_and_environment_against_real_swtpms(tcp_swtpm):
    # A port that refuses connections for the whole test: bound here, never listening (a fixed
    # "dead" port such as 1 may be anyone's on a shared machine).
    import socket

    with socket.socket() as refuser:
        refuser.bind(("127.0.0.1", 0))
        dead = f"swtpm:host=127.0.0.1,port={refuser.getsockname()[1]}"
        # -T points at a live swtpm; the environment at a dead port: -T must win.
        r = run_tpmtop("info", "--json", "-T", tcp_swtpm.tcti, env={"TPM2TOOLS_TCTI": dead})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["identity"]["manufacturer"] == "IBM"
        # Without -T the environment is used: the live one works, the dead one fails cleanly.
        r = run_tpmtop("info", "--json", env={"TPM2TOOLS_TCTI": tcp_swtpm.tcti})
        assert r.returncode == 0 and json.loads(r.stdout)["tpm"]["tcti"] == tcp_swtpm.tcti
        r = run_tpmtop("info", env={"TPM2TOOLS_TCTI": dead})
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "cannot connect" in r.stderr
        assert "Traceback" not in r.stderr


def test_permission_denied_names_the_group(tmp_path):
    # A device node we cannot open, as an unprivileged user meets /dev/tpmrm0 (root:tss 0660).
    # The tests run as root, so the child drops the capabilities that let root ignore file
    # modes (setpriv, util-linux) instead of switching user (the venv lives under /root).
    # The node is a real character device (a file is refused before anything is opened);
    # with no TPM driver here it has the raw TPM's number, hence --raw-device.
    dev = tmp_path / "tpmrm0"
    os.mknod(dev, 0o660 | stat.S_IFCHR, os.makedev(10, 224))
    os.chown(dev, 65534, 65534)
    r = run_tpmtop("info", "--raw-device", "-T", f"device:{dev}",
                   prefix=["setpriv", "--bounding-set=-dac_override,-dac_read_search"])
    assert r.returncode == 1, r.stderr
    assert "permission denied" in r.stderr and "group" in r.stderr and "Traceback" not in r.stderr


# -- the /dev/tpm0 guard decides by device number, not by name (issue 12, item 14) ------------
# Device nodes made with mknod (the tests run as root): 10:224 is what the kernel gives the
# first TPM's /dev/tpm0. No TPM driver is loaded here, so the nodes cannot be opened by
# accident; the refusal must come before any open anyway.
def _node(path, major, minor):
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    return str(path)


@pytest.mark.parametrize("disguise", ["symlink", "renamed", "char-dir"])
def test_raw_tpm_refused_whatever_it_is_called(tmp_path, disguise):
    raw = _node(tmp_path / "tpm0", 10, 224)
    if disguise == "symlink":
        path = tmp_path / "tpmrm0"
        path.symlink_to(raw)
    elif disguise == "renamed":
        path = _node(tmp_path / "tpmrm3", 10, 224)
    else:  # /dev/char/10:224, as udev names it
        (tmp_path / "char").mkdir()
        path = tmp_path / "char" / "10:224"
        path.symlink_to(raw)
    with pytest.raises(UsageError, match=r"raw TPM device.*--raw-device"):
        choose(f"device:{path}", False, env={})
    assert choose(f"device:{path}", False, env={}, raw_device=True).device_path == str(path)
    r = run_tpmtop("handles", "-T", f"device:{path}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "raw TPM device" in r.stderr and "--raw-device" in r.stderr
    assert r.stdout == ""


def test_other_nodes_refused(tmp_path):
    null = _node(tmp_path / "tpmrm0", 1, 3)  # /dev/null's number, named like a resource manager
    with pytest.raises(UsageError, match="not a TPM"):
        choose(f"device:{null}", False, env={})
    plain = tmp_path / "tpmrm1"
    plain.write_bytes(b"")  # a regular file would have TPM commands written into it
    with pytest.raises(UsageError, match="not a character device"):
        choose(f"device:{plain}", False, env={})
    assert plain.read_bytes() == b""


def test_device_class_reads_the_kernel_numbers(tmp_path):
    from tpmtop.tpm.tcti import device_class

    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n  1 mem\n 10 misc\n253 tpm\n\nBlock devices:\n259 blkext\n")
    nosys = str(tmp_path / "nosysfs")
    kw = dict(sysfs=nosys, proc_devices=str(devices))
    assert device_class(_node(tmp_path / "a", 253, 65536), **kw) == "rm"   # tpmrm0
    assert device_class(_node(tmp_path / "b", 253, 65537), **kw) == "rm"   # tpmrm1
    assert device_class(_node(tmp_path / "c", 253, 1), **kw) == "raw"      # tpm1
    assert device_class(_node(tmp_path / "d", 10, 224), **kw) == "raw"     # tpm0
    assert device_class(_node(tmp_path / "e", 254, 65536), **kw) == "other"
    assert device_class(str(tmp_path / "missing"), **kw) is None
    # sysfs, when it has the number, names the device whatever the node is called
    sysfs = tmp_path / "sys"
    (tmp_path / "devs" / "tpmrm0").mkdir(parents=True)
    (tmp_path / "devs" / "tpm0").mkdir(parents=True)
    sysfs.mkdir()
    (sysfs / "10:224").symlink_to(tmp_path / "devs" / "tpmrm0")
    (sysfs / "253:1").symlink_to(tmp_path / "devs" / "tpm0")
    kw = dict(sysfs=str(sysfs), proc_devices=str(devices))
    assert device_class(str(tmp_path / "d"), **kw) == "rm"
    assert device_class(str(tmp_path / "c"), **kw) == "raw"
