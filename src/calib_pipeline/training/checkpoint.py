"""Resume checkpoints: one atomic ``latest.pt`` per run, written every few epochs.

Safe with the user's data: a state is read and written through :mod:`calib_pipeline.tensor_io`
(loaded with ``weights_only=True`` -- a crafted file cannot run code -- and written to a
temporary file unique to the writing process, then renamed), and a run holds an exclusive
lock on its folder while it trains, so two runs never interleave writes to one state.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from calib_pipeline.tensor_io import load_tensors, save_json, save_tensors

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

    def configurations(self) -> list[CheckpointStore]:
        """The stores of this run's configurations (subfolders), newest state first."""
        folders = (
            [p for p in self.directory.iterdir() if p.is_dir()] if self.directory.is_dir() else []
        )
        stores = [
            CheckpointStore(folder) for folder in folders if folder.joinpath("latest.pt").exists()
        ]
        return sorted(stores, key=lambda store: store.path.stat().st_mtime, reverse=True)

    @property
    def record_path(self) -> Path:
        return self.directory / "configuration.json"

    def save_record(self, record: dict[str, Any]) -> None:
        """What the state in this folder belongs to (the run's configuration and the code
        units it depends on), as JSON beside it: a later run under changed code compares
        its own with it to say what changed."""
        save_json(record, self.record_path)

    def load_record(self) -> dict[str, Any] | None:
        """The record of :meth:`save_record`; None when there is none or it is unreadable
        (a folder written before records were kept)."""
        try:
            return json.loads(self.record_path.read_text())
        except (OSError, ValueError):
            return None

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
                raise ValueError(
                    f"resume state {self.path} needs {path}, which is missing; delete "
                    f"{self.directory} and rerun"
                )
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
                    description or "training",
                    handle.read().strip() or "another process",
                    self.directory,
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
