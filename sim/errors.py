"""Error hierarchy: fixable input vs impossible plan vs our own bug.

``ConfigError`` and ``TopologyError`` mean the user can fix the input; the CLI prints the message
on one line and exits 2. ``InfeasibleError`` means a valid input asks for something impossible
(e.g. a model that does not fit in memory); the CLI exits 3 and sweeps record it and go on.
Bugs in clustersim itself are ``assert``s and ordinary exceptions, and are never caught.
"""

from __future__ import annotations


class SimError(Exception):
    """Base of every error clustersim raises on purpose."""


class ConfigError(SimError):
    """Invalid input: names the file, the field, the value and what would be valid."""


class TopologyError(SimError):
    """A topology that cannot be built or used as asked (bad size, missing route, ...)."""


class InfeasibleError(SimError):
    """Valid input, impossible plan (does not fit in memory, ...)."""
