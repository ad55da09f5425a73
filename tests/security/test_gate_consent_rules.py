"""How a quality gate's consent follows the shell's rules, case by case: a
gate asks exactly when a ``shell`` call of the same session would, and an
"allow for session" given on one holds for the other. Real gates (``sh -c``
in real bubblewrap), a real dispatcher with the real shell tool, the real
broker answered as the confirmation route answers it.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from dispatcher import DispatchSession, ToolDispatcher
from dispatcher.confirmations import ConfirmationBroker
from dispatcher.pipeline.gates import GateResult, run_quality_gates
from dispatcher.pipeline.guardrails import QualityGate
from dispatcher.pipeline.profiles import resolve_profile
from dispatcher.policy import PolicyConfig, RulePolicy
from dispatcher.sandbox import Sandbox, SandboxConfig, probe
from dispatcher.tools.shell.tool import ShellTool
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import ToolUseBlock
from server.gate_consent import SessionGateConsent
from tests.dispatcher.support import RecordingPublisher

BWRAP, WHY = probe() if shutil.which("bwrap") else (None, "bubblewrap is missing")
pytestmark = pytest.mark.skipif(BWRAP is None, reason=f"no working sandbox: {WHY}")

GATE = QualityGate(name="check", command="python3 gate.py")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    (root / "gate.py").write_text("open('ran.txt', 'w').write('ran\\n')\n", encoding="utf-8")
    return root


def _session(
    ws: Path, *, policy: dict[str, Any] | None = None, sandboxed: bool = True, **kw: Any
) -> DispatchSession:
    """The README's trusted workspace unless ``policy`` says otherwise."""
    config = PolicyConfig.model_validate(policy or {"trusted_workspaces": [str(ws)]})
    assert BWRAP is not None
    return DispatchSession(
        "s",
        WorkspaceFileAPI(str(ws)),
        policy=RulePolicy(config),
        sandbox=Sandbox(SandboxConfig(BWRAP), str(ws)) if sandboxed else None,
        confirmation_timeout=30,
        **kw,
    )


async def _gates(
    session: DispatchSession,
    broker: ConfirmationBroker,
    publisher: RecordingPublisher,
    *gates: QualityGate,
) -> list[GateResult]:
    consent = SessionGateConsent(session, broker, publisher, "t1")
    root = session.workspace.workspace_root
    return await run_quality_gates(list(gates), root, session.sandbox, consent=consent)


async def test_a_safe_gate_runs_unasked(ws: Path) -> None:
    publisher = RecordingPublisher()
    [result] = await _gates(
        _session(ws), ConfirmationBroker(), publisher, QualityGate(name="ls", command="ls")
    )
    assert result.ran and result.passed and "gate.py" in result.output
    assert publisher.events == []


async def test_a_blocklisted_gate_is_refused_without_asking(ws: Path) -> None:
    publisher = RecordingPublisher()
    gate = QualityGate(name="wipe", command="sudo rm -rf /")
    [result] = await _gates(_session(ws), ConfirmationBroker(), publisher, gate)
    assert not result.ran and not result.passed
    assert result.output.startswith("not run: refused: the shell blocklist refuses")
    assert publisher.events == []


async def test_a_non_interactive_profile_refuses_without_asking(ws: Path) -> None:
    publisher = RecordingPublisher()
    session = _session(ws, profile=resolve_profile("ci"))
    [result] = await _gates(session, ConfirmationBroker(), publisher, GATE)
    assert not result.ran and "refuses a command rated dangerous" in result.output
    assert publisher.events == [] and not (ws / "ran.txt").exists()


async def test_an_auto_gate_is_not_asked_about(ws: Path) -> None:
    publisher = RecordingPublisher()
    gate = QualityGate(name="check", command="python3 gate.py", auto=True)
    [result] = await _gates(_session(ws), ConfirmationBroker(), publisher, gate)
    assert result.ran and result.passed and (ws / "ran.txt").exists()
    assert publisher.events == []


async def test_without_a_sandbox_a_gate_asks_even_under_an_auto_policy(ws: Path) -> None:
    publisher, broker = RecordingPublisher(), ConfirmationBroker()
    session = _session(ws, policy={"default": {"execute": "auto"}}, sandboxed=False)
    running = asyncio.ensure_future(_gates(session, broker, publisher, GATE))
    asked = await publisher.wait_for("tool.confirmation_requested")
    broker.resolve(asked.data["request_id"], "deny", resolved_by="carol", message="not now")
    [result] = await running
    assert result.output == "not run: denied by carol: not now"
    assert publisher.types() == ["tool.confirmation_requested", "tool.confirmation_resolved"]
    assert not (ws / "ran.txt").exists()


async def test_a_cancelled_request_does_not_run_the_gate(ws: Path) -> None:
    publisher, broker = RecordingPublisher(), ConfirmationBroker()
    running = asyncio.ensure_future(_gates(_session(ws), broker, publisher, GATE))
    await publisher.wait_for("tool.confirmation_requested")
    assert broker.cancel_session("s") == 1
    [result] = await running
    assert result.output == "not run: the confirmation request was cancelled"
    assert not (ws / "ran.txt").exists()


async def test_a_session_grant_holds_across_shell_calls_and_gates(ws: Path) -> None:
    """'Allow for session' on a shell call lets the gate run unasked, and the
    other way round: one grant, as the scope_text says."""
    publisher, broker = RecordingPublisher(), ConfirmationBroker()
    dispatcher = ToolDispatcher(publisher, broker=broker)
    dispatcher.register(ShellTool)
    session = _session(ws)
    call = ToolUseBlock(id="tu1", name="shell", input={"command": "python3 gate.py"})
    running = asyncio.ensure_future(dispatcher.dispatch(call, session, turn_id="t1"))
    asked = await publisher.wait_for("tool.confirmation_requested")
    broker.resolve(asked.data["request_id"], "allow", scope="session", resolved_by="bob")
    assert not (await running).is_error
    (ws / "ran.txt").unlink()
    [result] = await _gates(session, broker, publisher, GATE)
    assert result.ran and result.passed and (ws / "ran.txt").exists()
    assert len([e for e in publisher.events if e.type == "tool.confirmation_requested"]) == 1

    # The other way round, in a fresh session: the gate's grant covers the shell.
    publisher, session = RecordingPublisher(), _session(ws)
    dispatcher = ToolDispatcher(publisher, broker=broker)
    dispatcher.register(ShellTool)
    running_gates = asyncio.ensure_future(_gates(session, broker, publisher, GATE))
    asked = await publisher.wait_for("tool.confirmation_requested")
    assert asked.data["tool_name"] == "shell" and asked.data["tool_use_id"].startswith("gate_")
    broker.resolve(asked.data["request_id"], "allow", scope="session", resolved_by="bob")
    assert (await running_gates)[0].passed
    assert not (await dispatcher.dispatch(call, session, turn_id="t2")).is_error
    assert publisher.types().count("tool.confirmation_requested") == 1
