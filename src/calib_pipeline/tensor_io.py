"""Tensor files and fingerprints: the bottom layer every other one may use.

Safe with the user's data: a file is loaded with ``weights_only=True`` (tensors, numbers,
strings and containers only -- a crafted file cannot run code) and written to a temporary
file unique to the writing process, then renamed, so no reader sees a partial file.
A fingerprint is a short stable hash of a configuration (:func:`fingerprint`); the code a
training depends on is hashed by ``training.code_dependencies``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def save_tensors(data: Any, path: str | Path) -> None:
    """``torch.save(data)`` to ``path`` atomically: written to a hidden temporary file
    unique to the writing process, then renamed, so a reader (or a run killed mid-write)
    never sees a partial file at ``path``; the folder is created if missing."""
    _write_atomically(Path(path), lambda tmp: torch.save(data, tmp))


def save_json(data: Any, path: str | Path) -> None:
    """``data`` as indented, key-sorted JSON at ``path``, written atomically as
    :func:`save_tensors` writes."""
    text = json.dumps(data, indent=1, sort_keys=True, default=str)
    _write_atomically(Path(path), lambda tmp: tmp.write_text(text + "\n"))


def _write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_tensors(path: str | Path, *, what: str = "file", hint: str = "delete it and rerun") -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with errors that name the file
    (and end with ``hint``, what to do about a corrupt one).

    Raises:
        ValueError: the file is truncated or corrupt, or holds objects other than tensors,
            numbers, strings and containers (a pickle that would run code is refused).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = UNSUPPORTED_GLOBAL.search(str(error))
        refers = f"; it refers to {found.group(1)}" if found else ""
        raise ValueError(
            f"{what} {path} holds objects that could run code and was not loaded (only "
            f"tensors, numbers, strings and containers are accepted{refers})"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ValueError(
            f"{what} {path} is truncated or corrupt ({_without_unsafe_advice(error)}); {hint}"
        ) from None


# PyTorch's refusal names the global a file's pickle would call, then advises loading with
# weights_only=False or allow-listing the global -- exactly how to run a crafted payload. A
# refusal here keeps the name and never repeats that advice.
UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
UNSAFE_ADVICE = re.compile(r"weights_only|safe_globals|trust", re.IGNORECASE)


def _without_unsafe_advice(error: BaseException) -> str:
    """The lines of ``error`` that say what is wrong, without advice to load unsafely."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (
        " ".join(line for line in lines if not UNSAFE_ADVICE.search(line)) or type(error).__name__
    )


def fingerprint(payload: dict[str, Any]) -> str:
    """A stable hash of a run's configuration (decides whether a checkpoint may be resumed)."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
