"""The execution pipeline: the road around one tool call that a team
configures once (``guardrails:``, ``hooks:``, ``profiles:``, ``limits:``)
and the model cannot switch off.

The road of one call (each stage a state of the call, with its event;
specs/pipeline.md is the contract)::

    look-up            the tool exists and the session's profile allows it
       |                   (profiles.py: Profile.allows)
    validation         the input against the tool's schema
       |
    scope              every path inside the workspace
       |
    guardrails         protected files, blocked commands, edit limits,
       |                   code rules, on the effects the tool declares for
       |                   this input (guardrails.py; BaseTool.effects);
       |                   unknown effects make the call ask
    pre_tool_use       hooks may block (exit 2) or rewrite the input; a
       |                   rewritten input goes through validation and
       |                   scope again (hooks.py)
    confirmation       the policy, the profile's layer and its
       |                   interactivity (profiles.py: policy_for, settle)
    dry-run            a write/execute call is recorded, not run, with the
       |                   summary its effects declare (dry_run.py)
    queue              the concurrency cap
       |
    run                under the tool's timeout
       |
    output validation  structured output against the tool's output_schema
       |
    post_tool_use      hooks (a linter); their output is appended to the
       |                   result the model sees (hooks.py)
    result

A guardrail or hook block ends the call as ``permission_denied`` with
``data.blocked_by = {"kind": "guardrail"|"hook", "name": ...}``. When the
agent finishes a turn, quality gates run (gates.py); the token budget of a
session is budget.py's. Nothing here imports server/: the server's config
embeds these models. Nothing here imports a tool family (dispatcher.tools)
or names a built-in tool either (profiles.py's tool lists aside, which are
configuration): what a call would do is what its tool declares
(tests/test_import_graph.py keeps both true).
"""
