"""Every use of a Kedro internal, for the places where Kedro 1.7 has no public point; each
is guarded by ``tests/test_kedro_compat.py``, which fails loudly when the pinned Kedro
changes what it relies on (docs/architecture.md, "Kedro integration").

- :func:`pin_load_version`: a versioned dataset's cached load version. Kedro fills the cache
  on a dataset's first load of "latest" and clears it (``release()``) before each save;
  there is no public setter, and a run must read back its own save, not a newer version
  another run saved since (:class:`calib_pipeline.hooks.OwnVersionsHook`).
- :func:`exists_at_version`: whether a versioned dataset has a given version, through the
  dataset's own file system check and versioned path (public only for the load/save ones).
- :func:`create_hook_manager`: a hook manager with Kedro's hook specifications, for the
  node hooks a Dask worker runs (:mod:`calib_pipeline.runner`); Kedro exports the function
  (``kedro.framework.hooks.__all__``) under a private name.
"""

from __future__ import annotations

from typing import Any

from kedro.framework.hooks import _create_hook_manager
from kedro.io.core import AbstractVersionedDataset


def pin_load_version(dataset: AbstractVersionedDataset, version: str) -> None:
    """Make ``dataset`` load ``version`` while no ``--load-versions`` pin says otherwise
    (Kedro reads a pin before the cache), until its next ``release()``."""
    dataset._cached_load_version = version


def exists_at_version(dataset: AbstractVersionedDataset, version: str | None) -> bool:
    """Whether ``dataset`` has been saved at ``version`` (``False`` for ``None``)."""
    if version is None:
        return False
    return bool(dataset._exists_function(str(dataset._get_versioned_path(version))))


def create_hook_manager() -> Any:
    """A pluggy manager with Kedro's hook specifications and no hooks registered."""
    return _create_hook_manager()
