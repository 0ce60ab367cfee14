"""The errors of :mod:`agents.slurm`: each is one line for the operator (the CLI's exit status 2 or 1)."""

from __future__ import annotations


class SlurmError(Exception):
    """Base of every error of the Slurm driver."""


class ConfigError(SlurmError):
    """A configuration file that breaks the format, naming the file and the field.

    Attributes:
        source: The file.
        field: The field as a path, e.g. ``realtime[0].demand``.
        reason: What was expected.
    """

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        super().__init__(f"{source}: {field}: {reason}")


class UnreadableError(SlurmError):
    """Slurm's output that no supported version explains, naming the job, node or command."""


class CommandError(SlurmError):
    """A Slurm command that failed on every try; the message names the command and Slurm's answer.

    Attributes:
        unreachable: No answer came from Slurm (a timeout, the controller unreachable): the command may or
            may not have taken effect. False: Slurm answered and refused it.
    """

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class BadInputError(SlurmError):
    """A bad argument of ``gpualloc slurm`` (exit status 2), naming the option."""
