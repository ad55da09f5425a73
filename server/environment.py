"""Secrets out of the server's own environment, once read at start-up.

``TOOLRELAY_TOKEN`` and provider keys (``ANTHROPIC_API_KEY``, any
``*_API_KEY`` ...) arrive as environment variables. After the configuration
and the adapters have read them, :func:`scrub_secrets` removes them, so:

* no child process inherits them (children started without an explicit
  ``env`` get the C ``environ``, from which ``unsetenv`` removed them);
* ``/proc/<server>/environ`` no longer shows them. That file is the
  *initial* environment block on the server's stack and ``unsetenv`` does not
  touch it (measured on Linux 6.x: the value stays visible after
  ``del os.environ[...]``), so the value bytes are also overwritten in place.
  Any process of the same user could otherwise read the token there, or
  ``ps e`` could show it.

Provider keys are handed to :func:`adapters.registry.keep_provider_keys`
first, so the adapters keep working. The values still live in the server's
heap (Python's copies): a process able to ptrace the server can read them,
as it could read any of its memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import MutableMapping

from adapters.registry import is_secret_env_var, keep_provider_keys
from server.config import ENV_TOKEN


def secret_names(environ: MutableMapping[str, str]) -> list[str]:
    """The variables of ``environ`` that hold secrets."""
    return [name for name in environ if name == ENV_TOKEN or is_secret_env_var(name)]


def scrub_secrets(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove every secret variable from ``environ`` (default: the process's,
    also wiping the initial environment block). Returns the names removed.
    Call once, after the configuration was loaded and before any thread or
    child starts (``unsetenv`` is not thread-safe)."""
    process = environ is None
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    names = secret_names(env)
    if not names:
        return []
    keep_provider_keys({name: env[name] for name in names})
    blocks = _c_environ_entries(names) if process else []
    for name in names:
        del env[name]  # os.environ: unsetenv, so children no longer inherit it
    for address, length, prefix in blocks:
        # Keep "NAME=", blank the value: the block's layout (NUL-separated
        # strings) stays valid for whoever reads /proc/<pid>/environ.
        ctypes.memset(address + prefix, 0, length - prefix)
    return names


def _c_environ_entries(names: list[str]) -> list[tuple[int, int, int]]:
    """(address, length, length of "NAME=") of each C environ string for ``names``.
    Empty where the C library's environ cannot be reached (then only the
    process-level removal happens)."""
    wanted = {name.encode("utf-8", "surrogateescape") + b"=" for name in names}
    found: list[tuple[int, int, int]] = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        libc = ctypes.CDLL(None)
        entries = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
        index = 0
        while entries[index]:
            address = entries[index]
            assert address is not None
            text = ctypes.string_at(address)
            prefix = text.split(b"=", 1)[0] + b"="
            if prefix in wanted:
                found.append((address, len(text), len(prefix)))
            index += 1
    return found
