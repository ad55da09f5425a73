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
       |                   code rules (guardrails.py, proposed.py)
    pre_tool_use       hooks may block (exit 2) or rewrite the input; a
       |                   rewritten input goes through validation and
       |                   scope again (hooks.py)
    confirmation       the policy, the profile's layer and its
       |                   interactivity (profiles.py: policy_for, settle)
    dry-run            a write/execute call is recorded, not run
       |                   (dry_run.py: PlannedAction)
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
embeds these models.
"""
