"""Bad input to `tpmtop unlock`: each one a clear line (exit status 2, nothing on stdout, no
traceback) or the token named and skipped, and the file unchanged. Headers made by cryptsetup
itself where it can make them (LUKS1, a 4 MiB metadata area, a token of an unknown type); the
truncated and garbage ones are cut from or written instead of a real header."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.luks import file_digest, import_token, make_image
from tests.helpers.processes import run_tpmtop


def _one_line_exit_2(path: str, *words: str) -> None:
    before = file_digest(path)
    r = run_tpmtop("unlock", path, "-T", "swtpm:host=127.0.0.1,port=9")  # no TPM is needed to refuse
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert file_digest(path) == before


def test_a_truncated_header_is_one_line(tmp_path):
    img = make_image(tmp_path)
    with open(img, "rb") as f:
        head = f.read(10000)
    for n, words in ((3000, ("shorter than a LUKS2 header",)), (10000, ("truncated LUKS2 header (10000 of 16384",))):
        cut = tmp_path / f"cut{n}.img"
        cut.write_bytes(head[:n])
        _one_line_exit_2(str(cut), *words)


def test_garbage_is_not_a_luks_device(tmp_path):
    junk = tmp_path / "junk.img"
    junk.write_bytes(bytes(range(256)) * 256)
    _one_line_exit_2(str(junk), "not a LUKS device")


def test_damaged_json_areas_fail_the_checksum(tmp_path):
    img = make_image(tmp_path)
    with open(img, "r+b") as f:  # both copies (the primary's and the secondary's, at 0x4000 + 4096)
        for off in (4096 + 10, 0x4000 + 4096 + 10):
            f.seek(off)
            f.write(b"X")
    _one_line_exit_2(img, "checksum mismatch")


def test_luks1_has_no_tokens(tmp_path):
    img = make_image(tmp_path, "luks1.img", luks_type="luks1")
    _one_line_exit_2(img, "LUKS1", "no tokens")


def test_a_json_area_of_several_mib_is_refused(tmp_path):
    img = make_image(tmp_path, "big.img", "--luks2-metadata-size=4096k", size_mib=32)
    _one_line_exit_2(img, "a JSON area of 4.0 MiB", "more than the 1 MiB")


def test_an_unknown_token_type_is_named_and_nothing_is_judged(tmp_path):
    img = make_image(tmp_path)
    import_token(img, {"type": "example-hardware-key", "keyslots": []})
    before = file_digest(img)
    r = run_tpmtop("unlock", img, "-T", "swtpm:host=127.0.0.1,port=9", "--json")
    assert r.returncode == 2, r.stderr
    (tok,) = json.loads(r.stdout)["devices"][0]["tokens"]
    assert (tok["type"], tok["verdict"]) == ("example-hardware-key", "not-tpm")
    r = run_tpmtop("unlock", img, "-T", "swtpm:host=127.0.0.1,port=9")
    assert "token 0 (example-hardware-key):\n    not a TPM token" in r.stdout
    assert file_digest(img) == before


def test_a_clevis_jwe_with_broken_base64_is_skipped(tmp_path):
    img = make_image(tmp_path)
    import_token(img, {"type": "clevis", "keyslots": [], "jwe": {"protected": "eyJhbGciOi!!", "ciphertext": "",
                                                                  "iv": "", "tag": "", "encrypted_key": ""}})
    r = run_tpmtop("unlock", img, "-T", "swtpm:host=127.0.0.1,port=9")
    assert r.returncode == 2, r.stderr
    assert "unreadable, skipped: clevis JWE: not base64url: 'eyJhbGciOi!!'" in r.stdout


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_device_without_read_permission_is_one_line(tmp_path):
    # root reads any file: the child drops the capabilities that let it ignore file modes
    img = make_image(tmp_path)
    os.chown(img, 65534, 65534)
    os.chmod(img, 0o600)
    before = file_digest(img)
    r = run_tpmtop("unlock", img, "-T", "swtpm:host=127.0.0.1,port=9",
                   prefix=["setpriv", "--bounding-set=-dac_override,-dac_read_search"])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"tpmtop: {img}: permission denied (reading a LUKS2 header needs read access " \
                               "to the device; run as root)"
    assert file_digest(img) == before


def _rewrite_json_area(img: str, text: bytes) -> None:
    """A hostile header by hand: the real header's JSON areas (the primary's and the
    secondary's, which would stand in for it) replaced, each checksum made right again
    (SHA-256 over the binary header with the checksum zeroed, then the area)."""
    import hashlib

    with open(img, "r+b") as f:
        size = int.from_bytes(f.read(16)[8:16], "big")
        for off in (0, size):
            f.seek(off)
            hdr = bytearray(f.read(4096))
            area = text.ljust(size - 4096, b"\0")
            hdr[448:448 + 64] = bytes(64)
            hdr[448:448 + 32] = hashlib.sha256(bytes(hdr) + area).digest()
            f.seek(off)
            f.write(bytes(hdr) + area)


def test_json_nested_past_the_stack_is_one_line(tmp_path):
    img = make_image(tmp_path)
    _rewrite_json_area(img, b"[" * 12000)
    _one_line_exit_2(img, "the LUKS2 JSON area is not JSON")


def test_a_clevis_header_nested_past_the_stack_is_skipped(tmp_path):
    import base64

    img = make_image(tmp_path)
    deep = base64.urlsafe_b64encode(b"[" * 6000).decode().rstrip("=")
    import_token(img, {"type": "clevis", "keyslots": [], "jwe": {"protected": deep, "ciphertext": "", "iv": "",
                                                                  "tag": "", "encrypted_key": ""}})
    r = run_tpmtop("unlock", img, "-T", "swtpm:host=127.0.0.1,port=9")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "unreadable, skipped: clevis JWE:" in r.stdout


def test_help_states_unlocks_own_exit_statuses_as_the_docs_do():
    # the generic epilog's "1 the TPM or the system failed" would hide the 1 a script tests for
    r = run_tpmtop("unlock", "--help")
    assert r.returncode == 0, r.stderr
    help_text = " ".join(r.stdout.split())
    docs = " ".join((Path(__file__).parents[2] / "docs" / "unlock.md").read_text().replace("**", "").split())
    assert "the TPM or the system failed" not in help_text
    for words in ("0 no TPM token would fail to unseal", "1 any would not unseal, or the TPM failed",
                  "2 bad usage, bad input or nothing that could be judged (no header read, no TPM token)",
                  "130 interrupted"):
        assert words in help_text and words in docs, words
