"""Quality gates as real processes: pass, fail, timeout, output cap, sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dispatcher.pipeline.gates import failed_required, gate_report, run_quality_gates
from dispatcher.pipeline.guardrails import QualityGate
from dispatcher.sandbox import Sandbox, SandboxConfig, probe


def gate(name: str, command: str, **kw: object) -> QualityGate:
    return QualityGate.model_validate({"name": name, "command": command, **kw})


@pytest.fixture
def ws(tmp_path: Path) -> str:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "ok.txt").write_text("fine\n")
    return os.path.realpath(root)


async def test_gates_run_in_order_in_the_workspace(ws: str) -> None:
    results = await run_quality_gates(
        [
            gate("tests", "cat ok.txt"),
            gate("lint", "echo 'E501 line too long' >&2; exit 3"),
            gate("advice", "exit 1", required=False),
            gate("slow", "sleep 30", timeout=0.3),
        ],
        ws,
        None,
    )
    assert [(r.name, r.passed, r.exit_code) for r in results] == [
        ("tests", True, 0),
        ("lint", False, 3),
        ("advice", False, 1),
        ("slow", False, None),
    ]
    assert results[0].output == "fine"
    assert results[1].event_data() == {
        "name": "lint", "passed": False, "exit_code": 3,
        "output": "E501 line too long", "required": True,
    }  # fmt: skip
    assert results[3].timed_out and "timed out after 0.3 s" in results[3].output
    assert [r.name for r in failed_required(results)] == ["lint", "slow"]
    report = gate_report(results)
    assert "[Quality gate lint: FAILED (exit 3)]\nE501 line too long" in report
    assert "[Quality gate slow: FAILED (timed out)]" in report
    assert "advice" not in report


async def test_gate_output_is_capped_keeping_head_and_tail(ws: str) -> None:
    [result] = await run_quality_gates(
        [gate("loud", "echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END")],
        ws,
        None,
        output_limit=1000,
    )
    assert result.passed
    assert result.output.startswith("START") and result.output.endswith("END")
    assert "bytes omitted" in result.output and len(result.output) < 2000


@pytest.mark.skipif(
    shutil.which("bwrap") is None or probe()[0] is None, reason="bubblewrap does not work here"
)
async def test_gates_run_in_the_sandbox(ws: str, tmp_path: Path) -> None:
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    target = tmp_path / "outside.txt"
    gates = [gate("escape", f"echo x > {target}")]
    await run_quality_gates(gates, ws, Sandbox(SandboxConfig(bwrap), ws))
    assert not target.exists()  # whatever it wrote stayed in the sandbox's own /tmp
    [plain] = await run_quality_gates(gates, ws, None)  # the control
    assert plain.passed and target.exists()
