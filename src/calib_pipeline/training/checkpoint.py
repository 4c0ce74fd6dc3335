"""Resume checkpoints: one atomic ``latest.pt`` per run, written every few epochs.

Safe with the user's data: a state is loaded with ``weights_only=True`` (tensors, numbers,
strings and containers only -- a crafted file cannot run code), written to a temporary
file unique to the writing process and renamed, and a run holds an exclusive lock on
its folder while it trains, so two runs never interleave writes to one state.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import pickle
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)


class CheckpointStore:
    """A folder that holds the resumable state of one training run."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @property
    def path(self) -> Path:
        return self.directory / "latest.pt"

    def for_configuration(self, fingerprint: str) -> CheckpointStore:
        """The store of one configuration of this run: the subfolder named by its
        fingerprint. Two runs of one configuration share it (the second waits on the lock,
        then reuses or resumes the state); runs of different configurations never touch
        each other's state, whatever order they run or stop in."""
        return CheckpointStore(self.directory / fingerprint)

    def save(self, state: dict[str, Any]) -> None:
        save_tensors(state, self.path)

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None when there is none; an unreadable file raises
        ``ValueError`` naming it (delete it to start the run afresh)."""
        if not self.path.exists():
            return None
        return load_tensors(self.path, what="resume state")

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        for path in self._epoch_logits_dir.glob("*.pt"):
            path.unlink()

    @property
    def _epoch_logits_dir(self) -> Path:
        return self.directory / "epoch_logits"

    def save_epoch_logits(self, epoch: int, logits: dict[str, torch.Tensor]) -> None:
        """One epoch's logits per split, in a file of their own (written once, atomically)."""
        cpu_logits = {k: v.cpu() for k, v in logits.items()}
        save_tensors(cpu_logits, self._epoch_logits_dir / f"{epoch:05d}.pt")

    def load_epoch_logits(self, last_epoch: int) -> dict[str, list[torch.Tensor]]:
        """Epochs 1 .. ``last_epoch`` as ``{split: [logits per epoch]}``."""
        out: dict[str, list[torch.Tensor]] = {"val": [], "test": []}
        for epoch in range(1, last_epoch + 1):
            path = self._epoch_logits_dir / f"{epoch:05d}.pt"
            if not path.exists():
                raise ValueError(f"resume state {self.path} needs {path}, which is missing; delete {self.directory} and rerun")
            for split, logits in load_tensors(path, what="epoch logits").items():
                out[split].append(logits)
        return out

    @contextlib.contextmanager
    def lock(self, description: str = "") -> Iterator[None]:
        """Hold the run's folder exclusively; a second holder waits, told who holds it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                logger.warning(
                    "%s: waiting for %s, which holds its resume folder %s",
                    description or "training", handle.read().strip() or "another process", self.directory,
                )
                fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()} on {socket.gethostname()}")
            handle.flush()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def __repr__(self) -> str:
        return f"CheckpointStore({str(self.directory)!r})"


def save_tensors(data: Any, path: str | Path) -> None:
    """``torch.save(data)`` to ``path`` atomically: written to a hidden temporary file
    unique to the writing process, then renamed, so a reader (or a run killed mid-write)
    never sees a partial file at ``path``; the folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        torch.save(data, tmp)
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
        raise ValueError(
            f"{what} {path} holds objects that could run code and was not loaded "
            f"(only tensors, numbers, strings and containers are accepted): {error}"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ValueError(f"{what} {path} is truncated or corrupt ({error}); {hint}") from None


def fingerprint(payload: dict[str, Any]) -> str:
    """A stable hash of a run's configuration (decides whether a checkpoint may be resumed)."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


TRAINING_CODE = ("calibration", "data", "models", "training")


def code_fingerprint() -> str:
    """A hash of the code a training result depends on (the science packages' sources):
    a completed or half-trained state is reused only by the code that wrote it."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in TRAINING_CODE:
        for path in sorted((package / folder).rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
