"""Quality gates: the commands ``guardrails.quality_gates`` names, run when
the agent finishes a turn, each as ``sh -c`` in the workspace and in the
sandbox (see commands.py), one after the other, each under its timeout.

A failing ``required`` gate is given back to the model for one more round
(the agent loop's part); every gate's outcome is a ``quality_gate.completed``
event carrying a GateResult.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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

    def event_data(self) -> dict[str, object]:
        return {
            "name": self.name,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "output": self.output,
            "required": self.required,
        }


async def run_quality_gates(
    gates: list[QualityGate],
    workspace_root: str,
    sandbox: Sandbox | None,
    *,
    env: Mapping[str, str] | None = None,
    output_limit: int = GATE_OUTPUT_BYTES,
) -> list[GateResult]:
    """Run every gate in order; a gate that cannot start fails with the reason."""
    results: list[GateResult] = []
    run_env = dict(env) if env is not None else minimal_env()
    for gate in gates:
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


def failed_required(results: list[GateResult]) -> list[GateResult]:
    """The required gates that failed: what goes back to the model."""
    return [r for r in results if r.required and not r.passed]


def gate_report(results: list[GateResult]) -> str:
    """The text the model receives about failed required gates."""
    lines: list[str] = []
    for r in failed_required(results):
        said = "timed out" if r.timed_out else f"exit {r.exit_code}"
        lines.append(f"[Quality gate {r.name}: FAILED ({said})]\n{r.output}".rstrip())
    return "\n\n".join(lines)
