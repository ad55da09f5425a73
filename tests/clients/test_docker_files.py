"""docker-compose.yml and the Dockerfile say what README's Docker section
promises: the model and provider variables pass through, a healthcheck on
/healthz (run here against a real server), uid 1000 in the image."""

from __future__ import annotations

import socket
import subprocess
import sys

import yaml

from tests.harness import REPO_ROOT, ServerProcess

PASSED_THROUGH = {
    "TOOLRELAY_TOKEN",
    "TOOLRELAY_MODEL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
}


def compose_server() -> dict[str, object]:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    server: dict[str, object] = compose["services"]["server"]
    return server


def healthcheck_script() -> str:
    test = compose_server()["healthcheck"]
    assert isinstance(test, dict)
    command = test["test"]
    assert command[:3] == ["CMD", "python", "-c"], command
    script: str = command[3]
    assert "/healthz" in script
    return script


def test_compose_passes_the_model_and_provider_variables() -> None:
    server = compose_server()
    environment = server["environment"]
    assert isinstance(environment, dict)
    assert set(environment) >= PASSED_THROUGH
    for name in PASSED_THROUGH:
        assert environment[name] == f"${{{name}:-}}", name  # from the user's shell or .env
    volumes = server["volumes"]
    assert isinstance(volumes, list)
    assert any(str(v).endswith(":/workspaces") for v in volumes)
    assert "127.0.0.1:8765:8765" in server["ports"]  # type: ignore[operator]


def test_the_image_runs_as_uid_1000_with_a_healthcheck() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "--uid 1000" in dockerfile and "USER toolrelay" in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile


def test_the_healthcheck_command_tells_up_from_down(server: ServerProcess) -> None:
    script = healthcheck_script().replace("8765", str(server.port))
    up = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=20)
    assert up.returncode == 0, up.stderr
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    down_script = healthcheck_script().replace("8765", str(free))
    down = subprocess.run([sys.executable, "-c", down_script], capture_output=True, timeout=20)
    assert down.returncode != 0
