"""LUKS2 keeps two copies of its header; `tpmtop unlock` reads the one cryptsetup reads: the
secondary when the primary is damaged, the higher seqid when both are sound, and says so.
Images made by cryptsetup, damaged (or given a newer secondary) here, and read back by
cryptsetup itself as the peer. cryptsetup repairs a damaged header in place when it may write
the image, so it is always given a copy; tpmtop is given the image and must leave it as is."""

from __future__ import annotations

import json
import shutil
import subprocess

from tests.helpers.luks import file_digest, import_token, make_image
from tests.helpers.processes import run_tpmtop
from tpmtop.unlock.header import read_header

NO_TPM = ("-T", "swtpm:host=127.0.0.1,port=9")  # only non-TPM tokens here: no TPM is asked


def _cryptsetup_metadata(img: str, tmp_path) -> dict:
    copy = tmp_path / "for-cryptsetup.img"
    shutil.copyfile(img, copy)
    out = subprocess.run(["cryptsetup", "luksDump", "--dump-json-metadata", str(copy)], check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)


def _image_with_token(tmp_path, name: str = "disk.img") -> str:
    img = make_image(tmp_path, name)
    import_token(img, {"type": "example-hardware-key", "keyslots": []})
    return img


def _damage(img: str, offset: int) -> None:
    with open(img, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x55]))


def test_a_damaged_primary_is_read_from_the_secondary(tmp_path):
    img = _image_with_token(tmp_path)
    for offset, why in ((4200, "checksum mismatch"), (0, "not a LUKS device")):  # its JSON area; its magic
        cs = str(tmp_path / f"cs{offset}.img")
        shutil.copyfile(img, cs)
        _damage(cs, offset)
        before = file_digest(cs)
        want = _cryptsetup_metadata(cs, tmp_path)
        assert want["tokens"]["0"]["type"] == "example-hardware-key"  # cryptsetup read it, from the secondary
        hdr = read_header(cs)
        assert hdr.metadata == want
        r = run_tpmtop("unlock", cs, *NO_TPM)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (r.stdout, r.stderr)  # nothing TPM-sealed
        flat = " ".join(r.stdout.split())
        assert "the primary header is damaged" in flat and why in flat, r.stdout
        assert "the secondary header at 0x4000 was read" in flat, r.stdout
        assert "token 0 (example-hardware-key)" in r.stdout and "not a TPM token" in r.stdout
        doc = json.loads(run_tpmtop("unlock", cs, "--json", *NO_TPM).stdout)
        assert "the primary header is damaged" in doc["devices"][0]["header_note"]
        assert file_digest(cs) == before  # read, never repaired


def test_the_newer_secondary_is_read_as_cryptsetup_reads_it(tmp_path):
    img = make_image(tmp_path)
    newer = str(tmp_path / "newer.img")
    shutil.copyfile(img, newer)
    import_token(newer, {"type": "example-hardware-key", "keyslots": []})  # both its copies: seqid + 1
    with open(newer, "rb") as f:
        f.seek(0x4000)
        secondary = f.read(0x4000)
    with open(img, "r+b") as f:  # the old primary, the newer secondary: both pass their checksums
        f.seek(0x4000)
        f.write(secondary)
    want = _cryptsetup_metadata(img, tmp_path)
    assert "0" in want["tokens"]
    hdr = read_header(img)
    assert hdr.metadata == want
    assert hdr.note is not None and "newer than the primary" in hdr.note
    r = run_tpmtop("unlock", img, *NO_TPM)
    assert "token 0 (example-hardware-key)" in r.stdout and "newer than the primary" in " ".join(r.stdout.split())


def test_an_intact_header_says_nothing_of_its_copies(tmp_path):
    img = _image_with_token(tmp_path)
    assert read_header(img).metadata == _cryptsetup_metadata(img, tmp_path)
    r = run_tpmtop("unlock", img, *NO_TPM)
    assert "token 0 (example-hardware-key)" in r.stdout
    assert "primary header" not in r.stdout and "secondary header" not in r.stdout, r.stdout
    doc = json.loads(run_tpmtop("unlock", img, "--json", *NO_TPM).stdout)
    assert doc["devices"][0]["header_note"] is None
