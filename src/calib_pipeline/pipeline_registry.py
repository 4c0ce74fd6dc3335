"""Project pipelines, registered explicitly.

Names: one pipeline per stage over every study (``training``, ``posthoc``, ...), one per
study (``focal_meta``), and one per study and stage (``focal_meta.posthoc``), so that a
single study's cached logits can be re-scored with
``kedro run --pipelines=focal_meta.posthoc,focal_meta.reporting``; ``replication``, which
puts every study's claims report in one table (also part of ``__default__``);
``score``, which scores a user's predictions file (``docs/predictions.md``) and runs only
when named; and ``posthoc_arena``, the calibrator arena over every run's stored logits
(docs/posthoc.md), also run by name only.

``find_pipelines()`` is not used: since Kedro 1.5 ``--pipelines=X`` makes it import a
module named X, and study names are not modules. Structural lists (methods, seeds,
studies) are read from the parameters of the session's environment when the
registry is built, and every name and hyperparameter -- and the environment's protocol
(``protocols``) -- is validated here, before any node runs.
"""

from __future__ import annotations

import warnings

from kedro.config import OmegaConfigLoader
from kedro.pipeline import Pipeline

from calib_pipeline.data import dataset_names
from calib_pipeline.pipelines import (
    data_split,
    logits,
    posthoc,
    posthoc_arena,
    replication,
    reporting,
    score,
    shift,
    training,
)
from calib_pipeline.pipelines.checks import check_parameters
from calib_pipeline.pipelines.config import Structure, parse_structure, validate_buildable
from calib_pipeline.protocols import check_protocol
from calib_pipeline.settings import SESSION_CONFIG, config_loader, project_root

# Dotted dataset names ("<method>.seed_<k>.logits") are this project's convention: they
# line up with the method namespaces and the catalog's dataset factories.
warnings.filterwarnings("ignore", message="One or more dataset names contain '.' characters")


def stage_pipelines(
    structure: Structure,
    studies: list[str],
    dataset: str,
    shifted_val: bool = False,
    *,
    protocol: str = "",
) -> dict[str, Pipeline]:
    """The six stages restricted to the (method, seed) runs of ``studies``; with
    ``shifted_val`` calibrators are also fitted on shifted validation sets. Reports name
    ``dataset`` and ``protocol``."""
    runs = structure.runs(studies)
    return {
        "data_split": data_split.create_pipeline(
            sorted({structure.methods[m].split for m, _ in runs})
        ),
        "training": training.create_pipeline(structure, runs),
        "logits": logits.create_pipeline(structure, runs),
        "posthoc": posthoc.create_pipeline(structure, runs, shifted_val),
        "shift": shift.create_pipeline(structure.shift_runs(studies, shifted_val)),
        "reporting": reporting.create_pipeline(
            structure, studies, dataset, shifted_val, protocol=protocol
        ),
    }


def check_catalog_dataset(parameters: dict, globals_: dict) -> None:
    """The catalog reads the dataset named in ``globals.yml``; a runtime
    ``--params=dataset.name=...`` cannot change that, so it must not relabel the rows."""
    loaded = (globals_.get("dataset") or {}).get("name")
    named = (parameters.get("dataset") or {}).get("name")
    if loaded != named:
        raise ValueError(
            f"dataset.name {named!r} differs from the dataset the catalog loads ({loaded!r}, set "
            "in conf/<env>/globals.yml): pick the dataset with --env=<env> or by editing "
            "globals.yml; --params cannot change the catalog"
        )
    # download is the catalog's too (the raw-data dataset reads globals:dataset.download): a
    # --params=dataset.download=true would be ignored while the error still says "download is off"
    wanted = (parameters.get("dataset") or {}).get("download")
    catalog_download = bool((globals_.get("dataset") or {}).get("download", False))
    if wanted is not None and wanted != catalog_download:
        raise ValueError(
            f"dataset.download {wanted!r} differs from the catalog's ({catalog_download!r}, set in "
            "conf/<env>/globals.yml under dataset.download): --params cannot change the catalog; "
            "set it in globals.yml (or conf/local/globals.yml) instead"
        )


def session_config() -> tuple[OmegaConfigLoader, str]:
    """The session's configuration loader and environment (recorded by the session's
    ``SessionConfigHook``); outside a session (e.g. a plain script) the files of
    ``KEDRO_ENV`` (default: local)."""
    return SESSION_CONFIG.current(lambda env: config_loader(env, project_root()))


def register_pipelines() -> dict[str, Pipeline]:
    loader, env = session_config()
    parameters = loader["parameters"]
    check_parameters(parameters)
    structure = parse_structure(parameters)
    validate_buildable(structure, parameters)
    check_catalog_dataset(parameters, loader["globals"])
    protocol = check_protocol(env, loader["globals"], loader.conf_source, dataset_names())
    dataset = parameters["dataset"]["name"]
    shifted_val = bool((parameters.get("shift") or {}).get("shifted_val"))

    pipelines: dict[str, Pipeline] = stage_pipelines(
        structure, structure.default_studies(), dataset, shifted_val, protocol=protocol
    )
    claims = [
        name for name in structure.default_studies() if "claims" in structure.studies[name].reports
    ]
    pipelines["replication"] = replication.create_pipeline(claims)
    pipelines["__default__"] = sum(pipelines.values(), Pipeline([]))
    for name in structure.studies:
        study_stages = stage_pipelines(structure, [name], dataset, shifted_val, protocol=protocol)
        for stage, pipeline in study_stages.items():
            pipelines[f"{name}.{stage}"] = pipeline  # e.g. focal.posthoc: one study's stage
        pipelines[name] = sum(study_stages.values(), Pipeline([]))
    for reserved in ("score", "replication", "posthoc_arena"):
        if reserved in structure.studies:
            raise ValueError(f"no study may be named {reserved!r}: it names a pipeline of its own")
    pipelines["score"] = score.create_pipeline(parameters)  # run by name only, not by default
    # by name only too: in __default__ its fits would lengthen `make run` and add a report
    pipelines["posthoc_arena"] = posthoc_arena.create_pipeline(parameters)
    return pipelines


def claims_studies(env: str) -> list[str]:
    """The studies of ``env`` with a claims report, in the order the parameters list them:
    those ``make replicate`` runs before the replication report."""
    structure = parse_structure(config_loader(env, project_root())["parameters"])
    return [
        name for name in structure.default_studies() if "claims" in structure.studies[name].reports
    ]
