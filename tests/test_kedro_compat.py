"""Guards of calib_pipeline/kedro_compat.py, the one module that uses Kedro internals: each
test fails loudly when the pinned Kedro changes what the module relies on."""

from __future__ import annotations

import pluggy
from kedro.io import Version
from kedro.io.core import AbstractVersionedDataset

from calib_pipeline.kedro_compat import create_hook_manager, exists_at_version, pin_load_version
from calib_pipeline.kedro_datasets import TorchDataset

OLD, OWN, NEWER = "2026-01-01T00.00.00.000Z", "2026-01-02T00.00.00.000Z", "2026-01-03T00.00.00.000Z"


def saved(tmp_path, *versions: str) -> None:
    for version in versions:
        TorchDataset(filepath=str(tmp_path / "x.pt"), version=Version(None, version)).save(
            {"v": version}
        )


def test_kedros_versioned_dataset_still_has_the_cache_and_path_helpers_used():
    """The names kedro_compat reads or writes on AbstractVersionedDataset."""
    probe = TorchDataset(filepath="/nonexistent/x.pt", version=Version(None, OWN))
    assert probe._cached_load_version is None
    assert callable(probe._exists_function) and callable(probe._get_versioned_path)
    assert str(probe._get_versioned_path(OWN)) == f"/nonexistent/x.pt/{OWN}/x.pt"


def test_a_pinned_load_version_is_loaded_instead_of_the_latest(tmp_path):
    saved(tmp_path, OLD, OWN, NEWER)
    dataset = TorchDataset(filepath=str(tmp_path / "x.pt"), version=Version(None, OWN))
    pin_load_version(dataset, OWN)
    assert dataset.resolve_load_version() == OWN and dataset.load() == {"v": OWN}
    dataset.release()  # what Kedro does before each save: the pin is Kedro's cache
    assert dataset.resolve_load_version() == NEWER


def test_a_load_versions_pin_still_wins_over_the_cache(tmp_path):
    saved(tmp_path, OLD, OWN)
    dataset = TorchDataset(filepath=str(tmp_path / "x.pt"), version=Version(OLD, OWN))
    pin_load_version(dataset, OWN)
    assert dataset.load() == {"v": OLD}


def test_exists_at_version_sees_only_saved_versions(tmp_path):
    saved(tmp_path, OWN)
    dataset = TorchDataset(filepath=str(tmp_path / "x.pt"), version=Version(None, NEWER))
    assert isinstance(dataset, AbstractVersionedDataset)
    assert exists_at_version(dataset, OWN)
    assert not exists_at_version(dataset, NEWER) and not exists_at_version(dataset, None)


def test_the_hook_manager_knows_kedros_node_and_dataset_hooks():
    manager = create_hook_manager()
    assert isinstance(manager, pluggy.PluginManager) and manager.get_plugins() == set()
    for name in (
        "before_node_run",
        "after_node_run",
        "on_node_error",
        "before_dataset_loaded",
        "after_dataset_saved",
        "before_pipeline_run",
        "after_context_created",
    ):
        assert hasattr(manager.hook, name), f"Kedro's hook specifications lack {name}"
