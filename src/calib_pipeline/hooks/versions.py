"""Each run reads one consistent set of artifact versions (:class:`OwnVersionsHook`)."""

from __future__ import annotations

import warnings
from typing import Any

from kedro.framework.hooks import hook_impl

from calib_pipeline.kedro_datasets import read_latest_version_of_now, read_own_version


class OwnVersionsHook:
    """A run reads one consistent set of versions: of the inputs it does not make, the
    latest versions at its start; of what it saves, the version it saved -- never a newer
    one that another run saved in the meantime.

    Kedro resolves "latest" per dataset at its first load: with two runs in one project, a
    run's posthoc node could otherwise load the other run's logits (the provenance checks
    then refuse the mix), and a reporting run could combine one method's old logits with
    another's new ones. Before the run this resolves the latest version of each of the
    pipeline's free inputs (:func:`read_latest_version_of_now`); after each save it pins the
    dataset's load version to the run's own save version (:func:`read_own_version`, through
    Kedro's per-dataset version cache: :func:`calib_pipeline.kedro_compat.pin_load_version`).
    """

    def __init__(self) -> None:
        self._catalog = None

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._catalog = catalog
        for name in sorted(pipeline.inputs()):
            read_latest_version_of_now(catalog, name)
        # Kedro warns when a save version differs from a dataset's load version (another run
        # saved meanwhile): moot here, each save re-pins the load version to the run's own.
        # With --load-versions the pin wins over the run's own save, and it warns. Decided per
        # run: a notebook or test process runs several.
        warnings.filters[:] = [f for f in warnings.filters if not _is_version_mismatch_filter(f)]
        # through the public call, which also resets the warnings' "already shown" caches
        action = "default" if run_params.get("load_versions") else "ignore"
        warnings.filterwarnings(action, message=KEDRO_VERSION_MISMATCH)

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        if self._catalog is not None:
            read_own_version(self._catalog, dataset_name)


KEDRO_VERSION_MISMATCH = r"Save version '.*' did not match load version"


def _is_version_mismatch_filter(entry: tuple) -> bool:
    message = entry[1]
    return getattr(message, "pattern", None) == KEDRO_VERSION_MISMATCH
