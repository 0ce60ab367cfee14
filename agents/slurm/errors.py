"""The errors of :mod:`agents.slurm`: each is one line for the operator (the CLI's exit status 2 or 1)."""

from __future__ import annotations

from gpu_env.scenario import FieldError


class SlurmError(Exception):
    """Base of every error of the Slurm driver."""


class ConfigError(FieldError, SlurmError):
    """A configuration file that breaks the format, naming the file and the field (e.g. ``realtime[0].demand``).

    Its attributes are :class:`~gpu_env.scenario.FieldError`'s: ``source``, ``field`` and ``reason``.
    """


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
