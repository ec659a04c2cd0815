"""``tpmtop --kernel`` (and ``--passive`` where the kernel can be traced): the kernel's own TPM
traffic live, and sysfs, with not one TPM command from tpmtop.

The commands come from :class:`tpmtop.kernel.tap.KernelTap` (kprobes on ``tpm_transmit``) into
a recorder under origin ``kernel``, so the Latency panel, the stream and the failure patterns
work as for any source. On top, the kernel's *operations* (one IMA PCR extend: its session
set-up and the extend; one get_random) are priced whole and split into TPM and host time in
Latency's operation rows and the Modes panel, and the session behaviour they show (a fresh
session per extend as in 6.10, a kept session as in 6.12+, or none) is named. No Textual here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpmtop.sources.protocol import Capabilities, HeaderInfo, KernelFacts, SourceBase, SourceKind, SourceState
from tpmtop.sources.runs import RunView, run_from_account
from tpmtop.sources.sysfs import Sysfs
from tpmtop.sources.timings import CommandTiming, KernelSessions, TimingsView, command_timing

if TYPE_CHECKING:
    from tpmtop.kernel.tap import KernelTap
    from tpmtop.recorder import Recorder

ENGINE = "kernel"
UNUSUAL = ("hwrng", "user", "tpmtop", "kernel")  # paths named in a row's label whatever else came
WHY_NOT = "--kernel watches the kernel's own TPM commands: tpmtop sends nothing to the TPM"


class KernelSource(SourceBase):
    def __init__(self, tap: KernelTap, sysfs: Sysfs | None = None, *, passive: bool = False) -> None:
        super().__init__()
        self.tap = tap
        self.recorder: Recorder = tap.recorder
        self.sysfs: Sysfs = sysfs or Sysfs()
        self.passive = passive  # started as --passive (which traces where it can)
        self.engine, self.op = ENGINE, "extend"
        self._tcti = str(tap.source_text)
        self._caps = Capabilities(SourceKind.KERNEL, live=True, timings=True, export=True, sysfs=tap.this_machine,
                                  why_not=WHY_NOT)

    # -- what the screens read ----------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.tap.accounts.mode()[0] or "unknown"

    @property
    def caps(self) -> Capabilities:
        return self._caps

    @property
    def tcti(self) -> str:
        return self._tcti

    def ready(self) -> bool:
        """Something to export once the kernel sent a command (the x key's condition)."""
        return bool(self.tap.commands)

    def header(self) -> HeaderInfo:
        tap = self.tap
        with tap.lock:
            n, acc = len(tap.commands), tap.accounts
            extends = acc.by_kind["extend"].ops if "extend" in acc.by_kind else 0
        facts = KernelFacts(commands=n, extends=extends, lost=tap.parser.lost, error=tap.error or None,
                            foreign=tap.foreign is not None and not n, tpm_here=self.sysfs.tpm_dir.is_dir())
        return HeaderInfo(state=SourceState.PASSIVE if self.passive else SourceState.KERNEL, tcti=self.tcti,
                          simulated=False, engine=ENGINE, mode=self.mode, op=self.op, facts=facts)

    def stream_note(self) -> str:
        return "" if self.tap.commands else (self.tap.no_events_note() or "")

    def runs(self) -> list[RunView]:
        tap = self.tap
        with tap.lock:
            mode = self.mode
            kinds = sorted(tap.accounts.by_kind.items(), key=lambda kv: kv[0] != "extend")  # extend first
            return [run_from_account((ENGINE, mode, kind), st) for kind, st in kinds if st.ops]

    def timings(self, runs: list[RunView] | None = None) -> TimingsView:
        runs = self.runs() if runs is None else runs
        current = next((r for r in runs if r.op == self.op), None)
        with self.tap.lock:
            mode, why = self.tap.accounts.mode()
            st = self.tap.accounts.by_kind.get("extend")
            after = dict(st.setup_after) if st is not None else {}
            estimated = bool(st and st.estimated)
            blind = bool(st and st.ops and st.blind == st.ops)
        # blind: one command per extend and no operation probes: no host time can be seen
        sessions = KernelSessions(mode, why, self.tap.parser.lost, after, blind=blind, estimated=estimated,
                                  note=self.stream_note())
        return TimingsView(current, self._command_timings(), host_seen=not blind, engine=ENGINE,
                           mode=mode or "unknown", op=self.op, kernel=sessions)

    def _command_timings(self) -> list[CommandTiming]:
        """One per (command, kernel path): the path is named where it is not the command's
        usual one (hwrng, user space, tpmtop's own sysfs read) or the command came by several."""
        with self.tap.lock:
            items = list(self.tap.by_path.items())
        paths: dict[int | None, int] = {}
        for (_, cc), _st in items:
            paths[cc] = paths.get(cc, 0) + 1
        return [command_timing(cc, st, label, paths[cc] > 1 or label in UNUSUAL)
                for (label, cc), st in sorted(items, key=lambda kv: (kv[0][1] is None, kv[0][1] or 0, kv[0][0]))]

    # -- actions ---------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        self.recorder.reset_stats()
        tap = self.tap
        with tap.lock:
            from tpmtop.kernel.ops import KernelAccounts

            tap.accounts = KernelAccounts()
            tap.commands.clear()
            tap.ops.clear()
            tap.by_path.clear()
            tap.reanchor()  # a file's times: the next command starts the stream's clock again

    def capture(self) -> dict[str, Any]:
        return self.tap.capture()

    def tpm_json(self) -> dict[str, Any]:
        return {"tcti": self.tcti, "simulated": False}

    def close(self) -> None:
        self.tap.close()
