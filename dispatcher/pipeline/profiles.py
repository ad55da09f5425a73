"""Permission profiles (``profiles:``): which tools a session may see and
the confirmation policy for them. A session picks one at creation; tools
its profile excludes are never advertised to the model and never run, and
neither is offered a tool its policy denies outright (dispatcher/policy.py,
``denies_outright``: ``read-only``'s denials by class are such).

Built in, after the seeds' AI Dev Agent modes (ReadOnly: read files only;
Dev: read/write files; CI: run tests; Full: all permissions):

- ``read-only``: reading, listing, searching, git status/diff/log, the code
  tools, retrieve_doc and memory_search; any write/execute/network call is
  denied by its policy too (belt and braces for tools added by name);
- ``dev``: read-only's tools plus the file editors (write_file, patch_file,
  apply_patch, delete_file) and the memory tools; no shell, no git writes;
- ``ci``: read-only's tools plus ``shell``/``run_command``; commands the
  shell rates safe or dev run unasked, and it is **non-interactive**: what
  would ask a person is refused instead (the pipeline calls ``settle``
  after every other rule, the sandbox floor included);
- ``full``: every tool (``*``), the server's policy unchanged.

A configured profile of the same name replaces a built-in one (the admin's
config is trusted). ``tools`` entries are globs (``git_*``,
``mcp_github_*``); a profile's ``policy`` has the shape of the server's
``policy:`` section and is layered over it key by key, as session
overrides are (PolicyConfig.merged).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dispatcher.policy import ConfirmMode, PolicyConfig

READ_TOOLS = (
    "read_file",
    "list_dir",
    "find_files",
    "search_code",
    "grep",
    "git_status",
    "git_diff",
    "git_log",
    "list_symbols",
    "find_symbol",
    "find_references",
    "dependency_graph",
    "retrieve_doc",
    "memory_search",
)
EDIT_TOOLS = ("write_file", "patch_file", "apply_patch", "delete_file", "memory_*")
SHELL_TOOLS = ("shell", "run_command")
DEFAULT_PROFILE = "full"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ProfileConfig(BaseModel):
    """One ``profiles:`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    policy: PolicyConfig | None = None
    interactive: bool = True
    description: str = ""

    @field_validator("tools")
    @classmethod
    def _globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or not pattern.strip() or any(c.isspace() for c in pattern):
                raise ValueError(f"{pattern!r} is not a tool name or glob")
        return value


BUILTIN_PROFILES: dict[str, ProfileConfig] = {
    "read-only": ProfileConfig(
        tools=list(READ_TOOLS),
        policy=PolicyConfig.model_validate(
            {"default": {"write": "deny", "execute": "deny", "network": "deny"}}
        ),
        description="read, list and search the workspace; change nothing",
    ),
    "dev": ProfileConfig(
        tools=[*READ_TOOLS, *EDIT_TOOLS],
        description="read and edit files; no shell, no git writes",
    ),
    "ci": ProfileConfig(
        tools=[*READ_TOOLS, *SHELL_TOOLS],
        policy=PolicyConfig.model_validate(
            {"default": {"execute": "prompt"}, "ratings": {"safe": "auto", "dev": "auto"}}
        ),
        interactive=False,
        description="read and run tests; never asks: what would ask is refused",
    ),
    "full": ProfileConfig(description="every tool, the server's policy"),
}


class UnknownProfile(ValueError):
    """A session named a profile nobody defined; the message lists the known ones."""


@dataclass(frozen=True, slots=True)
class Profile:
    """A resolved profile: a name, compiled tool globs, policy and interactivity."""

    name: str
    config: ProfileConfig
    _pattern: re.Pattern[str]

    @classmethod
    def of(cls, name: str, config: ProfileConfig) -> Profile:
        joined = "|".join(f"(?:{fnmatch.translate(p)})" for p in config.tools)
        return cls(name, config, re.compile(joined))

    @property
    def interactive(self) -> bool:
        return self.config.interactive

    def allows(self, tool_name: str) -> bool:
        """Whether a session with this profile may see and call ``tool_name``."""
        return self._pattern.match(tool_name) is not None

    def visible(self, tool_names: Iterable[str]) -> list[str]:
        """The names of ``tool_names`` this profile allows, in order."""
        return [name for name in tool_names if self.allows(name)]

    def policy_for(self, base: PolicyConfig) -> PolicyConfig:
        """The policy a session with this profile runs under: ``base`` (the
        server's) with the profile's policy keys layered over it."""
        own = self.config.policy
        if own is None:
            return base
        return base.merged(own.model_dump(include=own.model_fields_set))

    def settle(self, mode: ConfirmMode) -> ConfirmMode:
        """The final mode of a call: a non-interactive profile refuses what
        would ask (nobody is there to answer)."""
        if not self.interactive and mode in (ConfirmMode.PROMPT, ConfirmMode.PROMPT_ONCE):
            return ConfirmMode.DENY
        return mode


def check_profile_names(value: Mapping[str, ProfileConfig]) -> Mapping[str, ProfileConfig]:
    """Pydantic validator for ``profiles:``: names are short and plain."""
    for name in value:
        if not _NAME.match(name):
            raise ValueError(f"profile name {name!r} must be 1-64 letters, digits, '.', '_', '-'")
    return value


def profile_names(configured: Mapping[str, ProfileConfig] | None = None) -> list[str]:
    """Every profile a session may name: built-in and configured."""
    return sorted({*BUILTIN_PROFILES, *(configured or {})})


def resolve_profile(
    name: str | None, configured: Mapping[str, ProfileConfig] | None = None
) -> Profile:
    """The profile ``name`` (None: ``full``); UnknownProfile names the known ones."""
    chosen = DEFAULT_PROFILE if name is None else name
    table = {**BUILTIN_PROFILES, **(configured or {})}
    config = table.get(chosen)
    if config is None:
        known = ", ".join(profile_names(configured))
        raise UnknownProfile(f"unknown profile {chosen!r}; known profiles: {known}")
    return Profile.of(chosen, config)
