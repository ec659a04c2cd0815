# Two commands set everything up: `make run` and `make test`. Both bootstrap first.
.PHONY: bootstrap run test test-stress upgrade test-kernel-vm lab-kernels lab test-lab bench screenshots man completions docs clean

VENV := .venv
PY := $(VENV)/bin/python
TPMTOP := $(VENV)/bin/tpmtop

bootstrap:
	@scripts/bootstrap.sh

run: bootstrap
	$(TPMTOP) --sim

# One pytest worker per CPU (pytest-xdist): most tests wait on a TPM, a process or a screen,
# so two workers on a 2-core machine halve the wall time (each worker starts its own swtpms).
test:
	@scripts/bootstrap.sh --test
	$(PY) -m pytest -q -n logical

# constraints.txt pins every Python package at the version the suite last passed with, and the
# bootstrap installs from it (pip install -c), so a fresh clone tests what was tested;
# `pip install -e .` still works without it. `make upgrade` takes the newest versions
# pyproject.toml allows, installs them and runs the suite: commit constraints.txt if it passes.
# pip-tools rather than uv: pip-compile resolves with pip itself and reads pip's own
# configuration (the index the bootstrap installs from), so the lock is what pip will install.
LOCK_EXTRAS := --extra test --extra plot --extra bench
upgrade:
	@scripts/bootstrap.sh --test
	$(PY) -m pip install -q -c constraints.txt 'pip-tools>=7.4'
	CUSTOM_COMPILE_COMMAND="make upgrade" $(VENV)/bin/pip-compile -q --upgrade --allow-unsafe $(LOCK_EXTRAS) \
		--strip-extras --no-emit-index-url --no-emit-find-links --output-file constraints.txt pyproject.toml
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $(VENV)/.tpmtop-installed
	$(PY) -m pytest -q -n logical

# The whole suite five times under two busy loops (scripts/stress-test.sh): a loaded 2-core CI box.
test-stress: bootstrap
	scripts/stress-test.sh

# tpmtop's live kernel tracing on real kernels (Debian's 6.1 and 6.12) with a real swtpm as
# the guest's TPM, in a qemu VM whose root is this machine's file system (scripts/kernel-vm.sh;
# root, a few minutes). Not part of `make test`: CI does not boot VMs.
test-kernel-vm: bootstrap
	KERNEL_VM_PYTHON=$(abspath $(PY)) scripts/kernel-vm.sh

# The lab's kernels: Debian's linux-source-6.12 with a small guest config, CONFIG_TCG_TPM2_HMAC=y
# (6.12-hmac), the same with 6.10/6.11's session per command (6.12-percmd: minutes, from 6.12-hmac's
# objects) and =n (6.12-nohmac) (scripts/lab-kernels.sh; root for the build packages; 59 min for one
# full kernel on 2 shared cores at nice 19; cached in /var/cache/tpmtop-lab by what made them).
lab-kernels:
	scripts/lab-kernels.sh

# Boot the lab's kernels (and Debian's 6.1 and 6.12) under qemu with the TPM through tpmtop,
# shaped to the slb9670 profile; ends with the table. Root. LAB_ARGS: more `tpmtop lab` options.
# scripts/kernel-vm.sh --prepare installs qemu, busybox-static, swtpm and fetches Debian's kernels.
lab: bootstrap
	KERNEL_VM_PYTHON=$(abspath $(PY)) scripts/kernel-vm.sh --prepare >/dev/null
	$(TPMTOP) lab $(LAB_ARGS)

# The lab's tests (tests/lab/, the boots included). Not part of `make test`, where the
# boot tests skip: CI builds no kernel and boots no VM.
test-lab: bootstrap
	KERNEL_VM_PYTHON=$(abspath $(PY)) scripts/kernel-vm.sh --prepare >/dev/null
	TPMTOP_LAB=1 $(PY) -m pytest -q -p no:xdist -o addopts=-ra tests/lab

bench:
	@scripts/bootstrap.sh --bench
	$(TPMTOP) bench --sim --op extend --modes none,per-command,reuse,saved --engine native,esys -n 200

screenshots: bootstrap
	$(PY) scripts/screenshots.py

# Man pages (tpmtop.1, tpmtop-<subcommand>.1) and bash/zsh/fish completions, generated from the
# CLI's parser (tpmtop/cli/distfiles.py) into $(SHARE_DIR), laid out as under an install prefix's
# share/: `man -l build/share/man/man1/tpmtop-bench.1`. The wheel carries the same files
# (setup.py); tests/cli/test_packaging.py runs these two targets.
SHARE_DIR := build/share

man: bootstrap
	$(PY) -m tpmtop.cli.distfiles --man $(SHARE_DIR)

completions: bootstrap
	$(PY) -m tpmtop.cli.distfiles --completions $(SHARE_DIR)

# The documentation site (mkdocs, Material theme) into site/. --strict: a broken link or anchor,
# or a page left out of the nav, fails the build (tests/cli/test_docs.py runs the same inside `make test`).
docs: bootstrap
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache site
