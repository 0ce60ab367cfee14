"""Exported policy files: an ONNX network with a JSON card beside it, checked and opened once per file version.

Every learned planner runs a policy exported by its trainer: ``ppo`` (:mod:`agents.ppo`, ``default.onnx``),
``ppo-stepwise`` (:mod:`agents.ppo_stepwise`, ``stepwise.onnx``) and the live chooser (:mod:`lab.live_chooser`,
``live_chooser.onnx``). Each reads it through :func:`load`, which does what they share, in this order:

1. both files exist (``<name>.onnx`` and its card ``<name>.json``);
2. a loaded policy of the same path and the same file versions (modification times) comes from the planner's
   cache: a plan reads no file twice;
3. the card is a JSON object whose ``format`` is one the planner reads (:func:`read_card`);
4. the planner's own card check (:attr:`PolicyKind.check`: the inputs it was trained on);
5. a one-thread onnxruntime session (:func:`onnx_session`) and the file's SHA-256;
6. the planner builds what it plans with from the :class:`PolicyFile` (checking the network's inputs and
   outputs), and that goes into the cache.

Whatever is wrong is a :class:`PolicyError` whose one-line message names the file and what is wrong; the CLIs
print it and exit 2. Training and export live elsewhere (:mod:`lab.training`): this module needs onnxruntime,
never torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

Loaded = TypeVar("Loaded")
CacheKey = tuple[str, int, int]
"""(absolute path of the ONNX file, its mtime in ns, its card's mtime in ns)."""


class PolicyError(Exception):
    """The learned planner cannot run here: no usable policy file, or no onnxruntime.

    The policy file is missing, corrupt, or made for another environment, or onnxruntime does not import.
    Not a ``ValueError``: a handler that falls back on a bad policy file must not also swallow a
    ``ValueError`` raised by a bug inside the planner.
    """


@dataclass(frozen=True)
class PolicyKind:
    """What one learned planner's policy files are.

    Attributes:
        name: How messages name the policy (``"policy"``, ``"stepwise policy"``, ``"live policy"``).
        formats: The card formats the planner reads (the card's ``format``).
        hint: What to do about a missing file, in a message's brackets.
        check: ``check(card, card_file)`` raises :class:`PolicyError` when the card's policy was trained for
            other inputs than the planner gives (or its other fields are unusable).
    """

    name: str
    formats: tuple[str, ...]
    hint: str
    check: Callable[[dict[str, Any], Path], None]


@dataclass(frozen=True)
class PolicyFile:
    """A policy file whose card passed its checks, opened.

    Attributes:
        path: The ONNX file.
        card: The card's contents.
        sha256: Hex SHA-256 of the ONNX file (what a plan records, not the machine's path).
        session: The onnxruntime session (:func:`onnx_session`).
    """

    path: Path
    card: dict[str, Any]
    sha256: str
    session: Any


def card_path(policy: str | os.PathLike[str]) -> Path:
    """The card beside a policy file: same name, ``.json``."""
    return Path(policy).with_suffix(".json")


def load(
    path: str | os.PathLike[str],
    kind: PolicyKind,
    cache: MutableMapping[CacheKey, Loaded],
    build: Callable[[PolicyFile], Loaded],
) -> Loaded:
    """A planner's policy, loaded once per file version (module docstring).

    Args:
        path: The ``.onnx`` file (its card beside it).
        kind: The planner's policy files.
        cache: The planner's cache of loaded policies (a dict it owns).
        build: Makes what the planner plans with from the opened file; raises :class:`PolicyError` when the
            network's inputs or outputs are not the planner's.

    Raises:
        PolicyError: A file is missing or unreadable, the card is made for another planner or other inputs,
            the ONNX file does not load, or onnxruntime does not import.
    """
    onnx_path = Path(path)
    card_file = card_path(onnx_path)
    for file, what in ((onnx_path, "file"), (card_file, "card")):
        if not file.is_file():
            raise PolicyError(f"{file}: {kind.name} {what} not found ({kind.hint})")
    # abspath, not resolve(): no system call per path component (this runs on every plan)
    key = (os.path.abspath(onnx_path), os.stat(onnx_path).st_mtime_ns, os.stat(card_file).st_mtime_ns)
    if key in cache:
        return cache[key]
    card = read_card(card_file, kind.formats)
    kind.check(card, card_file)
    session = onnx_session(onnx_path)
    digest = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    loaded = build(PolicyFile(onnx_path, card, digest, session))
    cache[key] = loaded
    return loaded


def read_card(card_file: Path, formats: tuple[str, ...]) -> dict[str, Any]:
    """A policy card: a JSON object whose ``format`` is one of ``formats``.

    Raises:
        PolicyError: The file is not readable JSON, not an object, or of another format.
    """
    try:
        card = json.loads(card_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyError(f"{card_file}: not a readable JSON policy card ({exc})") from None
    if not isinstance(card, dict):
        raise PolicyError(f"{card_file}: expected a JSON object, got {type(card).__name__}")
    if card.get("format") not in formats:
        expected = " or ".join(map(repr, formats))
        raise PolicyError(f"{card_file}: field 'format': expected {expected}, got {card.get('format')!r}")
    return card


def onnx_session(onnx_path: Path) -> Any:
    """A one-thread onnxruntime session of a policy file (every learned planner's).

    Raises:
        PolicyError: onnxruntime does not import, or the file is not a loadable ONNX model.
    """
    try:
        import onnxruntime as ort
    except ImportError as exc:  # a core dependency, but a broken install is the user's to fix, in one line
        raise PolicyError(f"{onnx_path}: onnxruntime does not import here ({exc}); pip install onnxruntime") from None

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for corrupt files
        raise PolicyError(f"{onnx_path}: not a loadable ONNX policy ({str(exc).splitlines()[0]})") from None


def check_names(policy: PolicyFile, inputs: tuple[str, ...], outputs: tuple[str, ...], *, prefix: bool = False) -> None:
    """Check that the network takes ``inputs`` and returns ``outputs`` (with ``prefix``: at least those, first).

    Raises:
        PolicyError: Other input or output names.
    """
    names = [i.name for i in policy.session.get_inputs()]
    answers = [o.name for o in policy.session.get_outputs()]
    got = answers[: len(outputs)] if prefix else answers
    if names != list(inputs) or got != list(outputs):
        raise PolicyError(
            f"{policy.path}: expected inputs {list(inputs)} and outputs {list(outputs)}, got {names}, {answers}"
        )
