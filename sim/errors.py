"""Error hierarchy: fixable input vs impossible plan vs our own bug.

``ConfigError`` and ``TopologyError`` mean the user can fix the input; the CLI prints the message
on one line and exits 2. ``InfeasibleError`` means a valid input asks for something impossible
(e.g. a model that does not fit in memory); the CLI exits 3 and sweeps record it and go on.
Bugs in clustersim itself are ``assert``s and ordinary exceptions, and are never caught.
"""

from __future__ import annotations

__all__ = ["EXIT_INFEASIBLE", "EXIT_INPUT", "MAX_MESSAGE_CHARS", "ConfigError", "InfeasibleError",
           "SimError", "TopologyError", "one_line"]

# Exit statuses (DESIGN.md): bad input, a valid plan that cannot run.
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3

# Longest message a command prints: a value quoted in full could be megabytes.
MAX_MESSAGE_CHARS = 2000


class SimError(Exception):
    """Base of every error clustersim raises on purpose."""


class ConfigError(SimError):
    """Invalid input: names the file, the field, the value and what would be valid."""


class TopologyError(SimError):
    """A topology that cannot be built or used as asked (bad size, missing route, ...)."""


class InfeasibleError(SimError):
    """Valid input, impossible plan (does not fit in memory, ...)."""


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """*text* as a terminal or a CSV cell shows it safely: on one line (runs of whitespace made one
    space), at most *limit* characters, and every other control character (ESC, BEL, NUL, DEL,
    the C1 range) escaped as ``\\xNN``, so that an input's bytes never drive the terminal."""
    text = " ".join(text[:4 * limit].split())
    out = "".join(c if c.isprintable() or c == " " else _escape(c) for c in text)
    return out if len(out) <= limit else out[:limit - 3] + "..."


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
