"""Resume checkpoints: one atomic ``latest.pt`` per run, written every few epochs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch


class CheckpointStore:
    """A folder that holds the resumable state of one training run.

    The state is written to a temporary file and renamed, so an interruption
    while saving never leaves a truncated checkpoint behind.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @property
    def path(self) -> Path:
        return self.directory / "latest.pt"

    def save(self, state: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None. Tensors and plain containers only: loading a resume
        state never unpickles (and so never runs) arbitrary code."""
        if not self.path.exists():
            return None
        return torch.load(self.path, map_location="cpu", weights_only=True)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"CheckpointStore({str(self.directory)!r})"


def fingerprint(payload: dict[str, Any]) -> str:
    """A stable hash of a run's configuration (decides whether a checkpoint may be resumed)."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
