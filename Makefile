# Two commands set everything up: `make run` and `make test`. Both bootstrap first.
.PHONY: bootstrap run test test-stress test-kernel-vm bench screenshots clean

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

# The whole suite three times under two busy loops (scripts/stress-test.sh): a loaded 2-core CI box.
test-stress: bootstrap
	scripts/stress-test.sh

# tpmtop's live kernel tracing on real kernels (Debian's 6.1 and 6.12) with a real swtpm as
# the guest's TPM, in a qemu VM whose root is this machine's file system (scripts/kernel-vm.sh;
# root, a few minutes). Not part of `make test`: CI does not boot VMs.
test-kernel-vm: bootstrap
	KERNEL_VM_PYTHON=$(abspath $(PY)) scripts/kernel-vm.sh

bench:
	@scripts/bootstrap.sh --bench
	$(TPMTOP) bench --sim --op extend --modes none,per-command,reuse,saved --engine native,esys -n 200

screenshots: bootstrap
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
