"""Crafted files for the safe-loading tests: pickles whose loading would run code."""

from __future__ import annotations


class MarkerPayload:
    """Unpickling this object creates a marker file -- what a crafted artifact would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))
