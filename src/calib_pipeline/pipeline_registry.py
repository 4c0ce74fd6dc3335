"""Project pipelines, registered explicitly.

``find_pipelines()`` is not used: since Kedro 1.5 ``--pipelines=X`` makes it import a
module named X, and study names are not modules. Structural lists (methods, seeds,
studies) are read from the parameters of the session's environment when the
registry is built, and every name and hyperparameter is validated here -- before
any node runs.
"""

from __future__ import annotations

import os
import warnings

from kedro.pipeline import Pipeline

from calib_pipeline.hooks import RUN_ENV
from calib_pipeline.pipelines import data_split, logits, posthoc, reporting, shift, training
from calib_pipeline.pipelines.config import load_parameters, parse_structure, validate_buildable
from calib_pipeline.settings import project_root

# Dotted dataset names ("<method>.seed_<k>.logits") are this project's convention: they
# line up with the method namespaces and the catalog's dataset factories.
warnings.filterwarnings("ignore", message="One or more dataset names contain '.' characters")

STAGES = ("data_split", "training", "logits", "posthoc", "shift", "reporting")


def register_pipelines() -> dict[str, Pipeline]:
    loader = RUN_ENV.get("config_loader")
    if loader is not None:
        parameters = loader["parameters"]
    else:  # imported outside a session (e.g. a plain script): read the environment's files
        parameters = load_parameters(os.environ.get("KEDRO_ENV"), project_root())
    structure = parse_structure(parameters)
    validate_buildable(structure, parameters)

    dataset = parameters["dataset"]["name"]
    runs = structure.runs()
    used_splits = sorted({structure.methods[m].split for m, _ in runs})
    stages = {
        "data_split": data_split.create_pipeline(used_splits),
        "training": training.create_pipeline(structure, runs),
        "logits": logits.create_pipeline(structure, runs),
        "posthoc": posthoc.create_pipeline(runs),
        "shift": shift.create_pipeline(runs),
        "reporting": reporting.create_pipeline(structure, list(structure.studies), dataset),
    }
    pipelines: dict[str, Pipeline] = dict(stages)
    for name, study in structure.studies.items():
        study_runs = structure.runs([name])
        splits = sorted({structure.methods[m].split for m, _ in study_runs})
        pipelines[name] = (
            data_split.create_pipeline(splits)
            + training.create_pipeline(structure, study_runs)
            + logits.create_pipeline(structure, study_runs)
            + posthoc.create_pipeline(study_runs)
            + shift.create_pipeline(study_runs)
            + reporting.create_pipeline(structure, [name], dataset)
        )
    pipelines["__default__"] = sum(stages.values(), Pipeline([]))
    return pipelines
