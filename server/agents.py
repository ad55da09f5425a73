"""Agents (``agents:``): named configurations a session runs as.

An agent is a system prompt, the tools it may see (globs over tool names),
a permission profile (dispatcher/pipeline/profiles.py), a model and a step
limit. A session picks one at creation (``POST /sessions {"agent": ...}``,
default ``build``); the agent loop then uses its prompt, model and
``max_steps``. Built in, after the seeds' agents:

- ``build``: the coding agent; every tool its profile (``full``) allows; its
  prompt carries the editing hierarchy (patch_file for one block,
  apply_patch for several hunks, write_file for new files);
- ``plan``: reads and plans, never edits (``read-only``);
- ``explore``: reads, searches and uses the code tools (``read-only``);
  a sub-agent type;
- ``test``: reads and runs commands (``ci``: dangerous ones are refused and
  nothing asks); a sub-agent type;
- ``review``: reads and diffs (``read-only`` includes ``git_diff``); a
  sub-agent type.

A configured entry with a built-in's name is layered over it key by key (a
config that only sets ``memories_in_prompt`` for ``build`` keeps its
prompt); any other name is a new agent. The admin's config is trusted: an
agent's model is not checked the way a client's is. ``subagent: true``
marks the types ``dispatch_subagent`` may start (specs/agents.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator
from wcmatch import fnmatch

from dispatcher.pipeline.profiles import BUILTIN_PROFILES, ProfileConfig, profile_names

if TYPE_CHECKING:
    from dispatcher.memory import MemoryService

DEFAULT_AGENT = "build"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Tool-name globs: braces (``git_{diff,log}``) but no path semantics.
_GLOB_FLAGS = fnmatch.BRACE

EDITING_HIERARCHY = """\
How to edit files (pick the first that fits):
1. patch_file: one contiguous block of a file changes (preferred).
2. apply_patch: several changes in one file, or a unified diff you already have.
3. write_file: a new file, or a file reorganized from top to bottom.
Read a file before you change it, and never rewrite a whole file to change a few lines."""

BUILD_PROMPT = f"""\
You are a careful software engineer working as a coding agent. Your workspace \
is the directory {{workspace}}; every path you give a tool is relative to it, \
and tools cannot reach outside it.

How to work:
- Look before you change: read the files involved, list directories, search \
the code. Do not guess at file contents.
- Make small, focused edits, and keep the project's existing style.
- When it helps, run the tests or a command to check your work.
- A tool error is information: read it, fix the call, and try again.
- Some calls need a person's approval. If one is denied, the result gives the \
reason; respect it and change your plan instead of repeating the call.
- To learn about a large codebase without filling your own context, hand the \
question to a sub-agent with dispatch_subagent (agent_type explore, test or review).

{EDITING_HIERARCHY}

When the task is done, reply briefly: what you changed, how you checked it, \
and anything left open."""

PLAN_PROMPT = """\
You are a planning agent in the workspace {workspace}. You read and search \
the code but never change anything: you have no editing tools, and you must \
not ask for any. Work out what would have to change and in which order, \
naming files, functions and the tests that would prove it. Reply with a \
numbered plan and the risks you see."""

EXPLORE_PROMPT = """\
You are an exploration sub-agent in the workspace {workspace}. You can read \
files, list and search them, and use the code tools (list_symbols, \
find_symbol, find_references, dependency_graph); you cannot change anything. \
Answer the task you were given with facts you checked: name files, symbols \
and line numbers. Be brief: your answer goes back to another agent."""

TEST_PROMPT = """\
You are a testing sub-agent in the workspace {workspace}. You can read and \
search files and run commands with the shell; dangerous commands are refused \
and you cannot edit files. Run the checks the task asks for, read their \
output, and report what passed, what failed and why, quoting the relevant \
lines. Be brief: your answer goes back to another agent."""

REVIEW_PROMPT = """\
You are a code-review sub-agent in the workspace {workspace}. You can read \
files, search them and look at the working tree's changes with git_diff; \
you cannot change anything. Review what the task names: correctness first, \
then tests, then style. List concrete findings with file and line. Be brief: \
your answer goes back to another agent."""

# Read-only tools an explorer or reviewer uses (the profile is the gate; the
# list keeps the advertised set small and on topic).
_READ = [
    "read_file",
    "list_dir",
    "find_files",
    "search_code",
    "grep",
    "retrieve_doc",
    "memory_search",
]
_CODE = ["list_symbols", "find_symbol", "find_references", "dependency_graph"]


class AgentConfig(BaseModel):
    """One ``agents:`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The system prompt; "{workspace}" is replaced by the workspace path.
    # None: the server's ``model.system_prompt``, else the build prompt.
    prompt: str | None = Field(default=None, max_length=100_000)
    # Globs over tool names; the session's profile narrows them further.
    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    profile: str = "full"
    # None: the session's model, else the server's default.
    model: str | None = Field(default=None, max_length=200)
    # Model calls per turn; None: ``model.max_steps``.
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    # Put this workspace's newest N memories (of the session's owner) in the prompt.
    memories_in_prompt: int | None = Field(default=None, ge=0, le=100)
    # dispatch_subagent may start this agent in a worker session.
    subagent: bool = False
    # Refuse shell commands rated dangerous in the tool itself (shell
    # ``allowed_only``), whatever the policy says.
    refuse_dangerous_commands: bool = False
    description: str = ""

    @field_validator("tools")
    @classmethod
    def _globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or any(c.isspace() for c in pattern):
                raise ValueError(f"{pattern!r} is not a tool name or glob")
            try:
                fnmatch.compile([pattern], flags=_GLOB_FLAGS)
            except Exception as exc:  # wcmatch raises plain errors of its own kinds
                raise ValueError(f"glob {pattern!r} does not compile: {exc}") from None
        return value


BUILTIN_AGENTS: dict[str, AgentConfig] = {
    "build": AgentConfig(profile="full", description="the coding agent: reads, edits, runs"),
    "plan": AgentConfig(
        prompt=PLAN_PROMPT,
        tools=[*_READ, *_CODE, "git_status", "git_diff", "git_log"],
        profile="read-only",
        description="reads and plans; never edits",
    ),
    "explore": AgentConfig(
        prompt=EXPLORE_PROMPT,
        tools=[*_READ, *_CODE],
        profile="read-only",
        max_steps=15,
        subagent=True,
        description="investigates the code, read-only",
    ),
    "test": AgentConfig(
        prompt=TEST_PROMPT,
        tools=[*_READ, "shell", "run_command"],
        profile="ci",
        max_steps=15,
        subagent=True,
        refuse_dangerous_commands=True,
        description="runs checks; dangerous commands refused",
    ),
    "review": AgentConfig(
        prompt=REVIEW_PROMPT,
        tools=[*_READ, *_CODE, "git_status", "git_diff", "git_log"],
        profile="read-only",
        max_steps=15,
        subagent=True,
        description="reviews changes, read-only",
    ),
}


class UnknownAgent(ValueError):
    """A session or a dispatch named an agent nobody defined; the message
    lists the known ones."""


@dataclass(frozen=True, slots=True)
class Agent:
    """A resolved agent: its name, configuration and compiled tool globs."""

    name: str
    config: AgentConfig
    _matcher: fnmatch.WcMatcher[str]

    @classmethod
    def of(cls, name: str, config: AgentConfig) -> Agent:
        return cls(name, config, fnmatch.compile(config.tools, flags=_GLOB_FLAGS))

    def allows(self, tool_name: str) -> bool:
        """Whether this agent's globs select ``tool_name``."""
        return bool(self._matcher.match(tool_name))

    @property
    def profile(self) -> str:
        return self.config.profile

    def system_prompt(
        self,
        workspace: str,
        *,
        server_prompt: str | None = None,
        memories: list[str] | None = None,
    ) -> str:
        """The system prompt for a session on ``workspace``: the agent's own
        (else ``server_prompt``, else the build prompt) with the memories
        appended. ``replace``, not ``format``: a prompt may hold other braces."""
        text = self.config.prompt or server_prompt or BUILD_PROMPT
        text = text.replace("{workspace}", workspace)
        if memories:
            kept = "\n".join(f"- {m}" for m in memories)
            text += (
                "\n\nWhat earlier sessions in this workspace kept (memory_search finds more; "
                f"they may be out of date):\n{kept}"
            )
        return text


def merged_agents(configured: Mapping[str, AgentConfig] | None) -> dict[str, AgentConfig]:
    """Built-in agents with the configured entries layered over them (a
    built-in name: key by key; any other name: as configured)."""
    table = dict(BUILTIN_AGENTS)
    for name, config in (configured or {}).items():
        base = table.get(name)
        if base is None:
            table[name] = config
        else:
            table[name] = base.model_copy(update=config.model_dump(include=config.model_fields_set))
    return table


def agent_names(configured: Mapping[str, AgentConfig] | None = None) -> list[str]:
    return sorted(merged_agents(configured))


def resolve_agent(name: str | None, configured: Mapping[str, AgentConfig] | None = None) -> Agent:
    """The agent ``name`` (None: ``build``); UnknownAgent names the known ones."""
    chosen = DEFAULT_AGENT if name is None else name
    table = merged_agents(configured)
    config = table.get(chosen)
    if config is None:
        raise UnknownAgent(f"unknown agent {chosen!r}; known agents: {', '.join(sorted(table))}")
    return Agent.of(chosen, config)


def subagent_types(configured: Mapping[str, AgentConfig] | None = None) -> list[str]:
    """The agents ``dispatch_subagent`` may start."""
    return sorted(n for n, c in merged_agents(configured).items() if c.subagent)


def check_agents(
    agents: Mapping[str, AgentConfig], profiles: Mapping[str, ProfileConfig]
) -> list[str]:
    """Problems of an ``agents:`` section, each naming its key path: a bad
    name, or a profile that is neither built in nor configured."""
    problems: list[str] = []
    known = {*BUILTIN_PROFILES, *profiles}
    for name, config in merged_agents(agents).items():
        if not _NAME.match(name):
            problems.append(
                f"agents.{name}: an agent name must be 1-64 letters, digits, '.', '_', '-'"
            )
        if config.profile not in known:
            problems.append(
                f"agents.{name}.profile: unknown profile {config.profile!r}; known profiles: "
                + ", ".join(profile_names(profiles))
            )
    return problems


def prompt_memories(
    store: MemoryService | None, *, workspace: str, owner: str, count: int | None
) -> list[str]:
    """The newest ``count`` memories of a workspace and owner, oldest first
    (as they were kept), for the system prompt; [] without a store or count."""
    if store is None or not count:
        return []
    kept = store.memories(workspace=workspace, owner=owner)
    return [m.content for m in kept[-count:]]
