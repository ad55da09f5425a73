"""Quality gates: the commands ``guardrails.quality_gates`` names, run when
the agent finishes a turn, each as ``sh -c`` in the workspace and in the
sandbox (see commands.py: through ``Sandbox.command``, so protected files
are read-only there), one after the other, each under its timeout.

A gate runs workspace code (``pytest`` runs the tests, ``python gate.py``
whatever the model wrote into gate.py), so before each one the caller's
``GateConsent`` is asked, as a shell command of the session would be
(server/gate_consent.py asks the session's policy and, if need be, a
person); a gate the admin marked ``auto: true`` is not asked about. A gate
that may not run is not started: its result says why (``not run: denied by
bob``), it counts as not passed, and it is not given back to the model
(nothing the model changes would make it run).

A failing ``required`` gate that ran is given back to the model for one
more round (the agent loop's part); every gate's outcome is a
``quality_gate.completed`` event carrying a GateResult.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from dispatcher.pipeline.commands import minimal_env, run_shell_command
from dispatcher.pipeline.guardrails import QualityGate
from dispatcher.sandbox import Sandbox, SandboxUnavailable

GATE_OUTPUT_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate's outcome; ``event_data()`` is ``quality_gate.completed.data``."""

    name: str
    passed: bool
    exit_code: int | None
    output: str
    required: bool
    timed_out: bool = False
    duration_ms: float = 0.0
    # False when the gate was not started (refused, denied, unanswered).
    ran: bool = True

    def event_data(self) -> dict[str, object]:
        return {
            "name": self.name,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "output": self.output,
            "required": self.required,
        }


class GateConsent(Protocol):
    """Whether one gate may run now: None when it may, else why not, in words
    that follow "not run: " (``denied by bob``)."""

    async def __call__(self, gate: QualityGate) -> str | None: ...


async def run_quality_gates(
    gates: list[QualityGate],
    workspace_root: str,
    sandbox: Sandbox | None,
    *,
    consent: GateConsent | None = None,
    env: Mapping[str, str] | None = None,
    output_limit: int = GATE_OUTPUT_BYTES,
) -> list[GateResult]:
    """Run every gate in order; a gate that cannot start fails with the reason.
    ``consent`` is asked before each gate not marked ``auto``; None means the
    caller vouches for every gate itself (a script, a test)."""
    results: list[GateResult] = []
    run_env = dict(env) if env is not None else minimal_env()
    for gate in gates:
        if consent is not None and not gate.auto:
            refusal = await consent(gate)
            if refusal is not None:
                results.append(not_run(gate, refusal))
                continue
        try:
            run = await run_shell_command(
                gate.command,
                workspace_root=workspace_root,
                sandbox=sandbox,
                env=run_env,
                time_limit=gate.timeout,
                output_limit=output_limit,
            )
        except (OSError, SandboxUnavailable) as exc:
            results.append(
                GateResult(gate.name, False, None, f"could not start: {exc}", gate.required)
            )
            continue
        output = "\n".join(part.rstrip("\n") for part in (run.stdout, run.stderr) if part)
        if run.timed_out:
            output = (output + "\n" if output else "") + f"[timed out after {gate.timeout:g} s]"
        results.append(
            GateResult(
                name=gate.name,
                passed=run.exit_code == 0,
                exit_code=run.exit_code,
                output=output,
                required=gate.required,
                timed_out=run.timed_out,
                duration_ms=run.duration_ms,
            )
        )
    return results


def not_run(gate: QualityGate, reason: str) -> GateResult:
    """The result of a gate that was not started, and why."""
    return GateResult(gate.name, False, None, f"not run: {reason}", gate.required, ran=False)


def failed_required(results: list[GateResult]) -> list[GateResult]:
    """The required gates that ran and failed: what goes back to the model."""
    return [r for r in results if r.required and not r.passed and r.ran]


def gate_report(results: list[GateResult]) -> str:
    """The text the model receives about failed required gates."""
    lines: list[str] = []
    for r in failed_required(results):
        said = "timed out" if r.timed_out else f"exit {r.exit_code}"
        lines.append(f"[Quality gate {r.name}: FAILED ({said})]\n{r.output}".rstrip())
    return "\n\n".join(lines)
