"""The built-in rule set of the offline ``scripted`` model.

It makes a server without any provider key useful for demos and tests. The
model looks only at the last message of the conversation:

* a user message of commands, one per line, becomes one tool call per
  command (several commands: parallel tool calls):

  ``read <path>`` -> read_file, ``write <path>: <content>`` -> write_file
  (the content runs to the end of the message, so it may span lines),
  ``run <command>`` -> shell (or run_command), ``list [<path>]`` -> list_dir,
  ``delegate <agent_type>: <task>`` -> dispatch_subagent (the task runs to
  the end of the message, so it may be commands for the sub-agent's own
  scripted model);
* tool results coming back get a short text summary (ok/error per call) and
  the turn ends;
* anything else gets a reply explaining the commands.

A command whose tool the session does not offer is answered with text saying
so: like a real model, the scripted one only calls tools it was given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from adapters.scripted_script import ScriptReply, ScriptText, ScriptToolUse
from protocol.canonical import Message, TextBlock, ToolDefinition, ToolResultBlock, ToolUseBlock

HELP_TEXT = (
    "I am toolrelay's offline scripted model; I understand these commands, one per line:\n"
    "- read <path> - read a file\n"
    "- write <path>: <content> - write a file (the content runs to the end of the message)\n"
    "- run <command> - run a shell command\n"
    "- list [<path>] - list a directory\n"
    "- delegate <agent_type>: <task> - hand the task (to the end of the message) to a "
    "sub-agent\n"
    "Several commands in one message become parallel tool calls."
)

# Tool names tried for each command, in order of preference.
COMMAND_TOOLS: dict[str, tuple[str, ...]] = {
    "read": ("read_file",),
    "write": ("write_file",),
    "run": ("shell", "run_command"),
    "list": ("list_dir",),
    "delegate": ("dispatch_subagent",),
}

_COMMAND = re.compile(r"^\s*(read|write|run|list|delegate|help)\b[ \t]*(.*)$", re.IGNORECASE)
_SUMMARY_CHARS = 300


def rule_reply(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> ScriptReply:
    """The reply the rule set gives to a conversation ending in ``messages[-1]``."""
    conversation = [m for m in messages if m.role != "system"]
    if not conversation:
        return _text(HELP_TEXT)
    last = conversation[-1]
    results = [b for b in last.content if isinstance(b, ToolResultBlock)]
    if results:
        return _text(_summarise(results, conversation))
    if last.role != "user":
        return _text(HELP_TEXT)
    return _commands_reply(last.text(), {tool.name for tool in tools})


def _text(text: str) -> ScriptReply:
    return ScriptReply(content=[ScriptText(text=text)], stop_reason="end_turn")


def _commands_reply(text: str, offered: set[str]) -> ScriptReply:
    calls: list[ScriptToolUse] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        match = _COMMAND.match(line)
        if match is None:
            return _text(f"I did not understand line {number}: {line.strip()!r}.\n\n{HELP_TEXT}")
        verb, rest = match.group(1).lower(), match.group(2).strip()
        if verb == "help":
            return _text(HELP_TEXT)
        tool = next((name for name in COMMAND_TOOLS[verb] if name in offered), None)
        if tool is None:
            wanted = " or ".join(COMMAND_TOOLS[verb])
            return _text(f"The {wanted} tool is not available in this session, so I cannot {verb}.")
        if verb == "delegate":
            agent_type, sep, first = rest.partition(":")
            if not sep or not agent_type.strip():
                return _text(
                    f"line {number}: delegate needs '<agent_type>: <task>'.\n\n{HELP_TEXT}"
                )
            # Like write's content: the task runs to the end of the message.
            task = "\n".join([first.strip(), *lines[number:]]).strip()
            calls.append(
                ScriptToolUse(name=tool, input={"task": task, "agent_type": agent_type.strip()})
            )
            break
        if verb == "write":
            path, sep, first = rest.partition(":")
            if not sep or not path.strip():
                return _text(f"line {number}: write needs '<path>: <content>'.\n\n{HELP_TEXT}")
            # The content is everything after "path:" up to the end of the message.
            content = "\n".join([first.removeprefix(" "), *lines[number:]])
            calls.append(ScriptToolUse(name=tool, input={"path": path.strip(), "content": content}))
            break
        if verb == "list":
            calls.append(ScriptToolUse(name=tool, input={"path": rest or "."}))
        elif not rest:
            return _text(f"line {number}: {verb} needs an argument.\n\n{HELP_TEXT}")
        elif verb == "read":
            calls.append(ScriptToolUse(name=tool, input={"path": rest}))
        else:
            calls.append(ScriptToolUse(name=tool, input={"command": rest}))
    if not calls:
        return _text(HELP_TEXT)
    intro = "Running 1 tool call." if len(calls) == 1 else f"Running {len(calls)} tool calls."
    return ScriptReply(content=[ScriptText(text=intro), *calls], stop_reason="tool_use")


def _summarise(results: list[ToolResultBlock], conversation: Sequence[Message]) -> str:
    uses: dict[str, ToolUseBlock] = {
        use.id: use
        for message in conversation
        if message.role == "assistant"
        for use in message.tool_uses()
    }
    ok = sum(1 for r in results if not r.is_error)
    lines = [f"{ok} of {len(results)} tool calls succeeded:"]
    for result in results:
        use = uses.get(result.tool_use_id)
        label = _describe(use) if use is not None else result.tool_use_id
        status = "error" if result.is_error else "ok"
        detail = _first_lines(result)
        lines.append(f"- {label}: {status}" + (f" - {detail}" if detail else ""))
    return "\n".join(lines)


def _describe(use: ToolUseBlock) -> str:
    argument = next((v for v in use.input.values() if isinstance(v, str)), None)
    if argument is None:
        return use.name
    argument = argument.splitlines()[0] if argument else argument
    if len(argument) > 60:
        argument = argument[:57] + "..."
    return f"{use.name}({argument})"


def _first_lines(result: ToolResultBlock) -> str:
    text = "".join(b.text for b in result.content if isinstance(b, TextBlock)).strip()
    lines = text.splitlines()[:3]
    summary = " / ".join(line.strip() for line in lines if line.strip())
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[: _SUMMARY_CHARS - 3] + "..."
    return summary
