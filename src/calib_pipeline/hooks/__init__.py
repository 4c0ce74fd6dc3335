"""The project's Kedro hooks, one concern per module:

- :mod:`~calib_pipeline.hooks.session`: the session's configuration for the pipeline
  registry, and the ``run_info`` input (run id, environment, protocol) for the nodes;
- :mod:`~calib_pipeline.hooks.preflight`: the compute a run uses, and the refusals of a run
  that cannot succeed, before any node runs;
- :mod:`~calib_pipeline.hooks.versions`: each run reads one consistent set of versions;
- :mod:`~calib_pipeline.hooks.latest`: ``LATEST.md``, the newest reports of each study;
- :mod:`~calib_pipeline.hooks.tracking`: MLflow tracking, through
  :mod:`~calib_pipeline.hooks.mlflow_client` (timeouts, locking, a Dask worker's clients);
- the console lines and log file: :mod:`calib_pipeline.console`.

``settings.HOOKS`` registers them; docs/architecture.md, "Kedro integration".
"""

from calib_pipeline.hooks.latest import LatestReportsHook
from calib_pipeline.hooks.mlflow_client import mask_credentials
from calib_pipeline.hooks.preflight import MissingInputsError, RunPreflightHook, producing_stage
from calib_pipeline.hooks.session import DEFAULT_RUN_ENV, RunInfoHook, SessionConfigHook
from calib_pipeline.hooks.tracking import MlflowTrackingHook
from calib_pipeline.hooks.versions import OwnVersionsHook

__all__ = [
    "DEFAULT_RUN_ENV",
    "LatestReportsHook",
    "MissingInputsError",
    "MlflowTrackingHook",
    "OwnVersionsHook",
    "RunInfoHook",
    "RunPreflightHook",
    "SessionConfigHook",
    "mask_credentials",
    "producing_stage",
]
