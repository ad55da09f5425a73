"""Patch tools: apply unified diffs, parsed and applied in Python with GNU patch as the fallback."""
