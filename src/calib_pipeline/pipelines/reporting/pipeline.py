"""The reporting stage of a study: one node per method collecting its runs, one evaluation
node, then one node per report.

The collecting nodes sit in their method's namespace, with the training, logits, posthoc
and shift nodes: every per-run artifact (checkpoint, logits, calibrators, shift logits,
history) is then made and read inside its method's namespace, and the study's nodes read
one ``<method>.runs_for_<study>`` value per method. kedro-viz draws each method as a box
that holds its artifacts, with one output per study that reads it.
"""

from functools import partial, update_wrapper

from kedro.pipeline import Node, Pipeline, node

from calib_pipeline.calibration.metrics import ON_REQUEST
from calib_pipeline.pipelines.artifacts import artifact_name, collected_runs, run_artifact
from calib_pipeline.pipelines.config import Structure, StudySpec, study_uses_shift
from calib_pipeline.pipelines.reporting.nodes import collect_runs, evaluate_study, run_report
from calib_pipeline.pipelines.run_info import SESSION_INPUTS
from calib_pipeline.reports.registry import StudyOutline, check_report, report_needs
from calib_pipeline.training.artifacts import SHIFTED_VAL_SUFFIX

# the artifact kind of each per-run input a report may need (reports.registry.RUN_ARTIFACTS)
RUN_ARTIFACT_KIND = {
    "logits": "logits",
    "calibrators": "calibrators",
    "shift": "shift_logits",
    "histories": "history",
}


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def _run_inputs(run_keys: dict[str, tuple[str, int]], kinds: tuple[str, ...]) -> dict[str, str]:
    return {
        f"{key}_{kind}": run_artifact(RUN_ARTIFACT_KIND[kind], method, seed)
        for key, (method, seed) in run_keys.items()
        for kind in kinds
    }


def _collect_nodes(
    study: str, run_keys: dict[str, tuple[str, int]], kinds: tuple[str, ...]
) -> list[Node]:
    """One node per method of the study, in the method's namespace, handing the study the
    ``kinds`` of artifacts of the method's runs."""
    methods = dict.fromkeys(method for method, _ in run_keys.values())
    return [
        node(
            collect_runs,
            inputs=_run_inputs({k: run for k, run in run_keys.items() if run[0] == method}, kinds),
            outputs=collected_runs(method, study),
            name=f"collect_for_{study}",
            namespace=method,
            tags=["reporting"],
        )
        for method in methods
    ]


def _report_nodes(
    structure: Structure,
    study: StudySpec,
    study_info: dict,
    run_keys: dict[str, tuple[str, int]],
    collections: dict[str, str],
    calibrators: tuple[str, ...],
) -> list[Node]:
    """One node per report of the study; each report's options are checked against what
    only the study can tell (e.g. a claim naming a method the study lacks)."""
    name = study.name
    outline = StudyOutline(
        name,
        study.methods,
        study_info["groups"],
        calibrators,
        tuple(spec.key for spec in study.ensembles),
    )
    models = {m: structure.methods[m].model for m in study.methods}
    trainings = {m: structure.methods[m].training for m in study.methods}
    nodes = []
    for report, options in study.reports.items():
        try:
            check_report(report, dict(options or {}), study=outline)
        except ValueError as error:
            raise ValueError(f"study {name!r}: {error}") from None
        nodes.append(
            node(
                _named(
                    run_report,
                    report=report,
                    options=dict(options or {}),
                    study=study_info,
                    run_keys=run_keys,
                    model_overrides=models,
                    training_overrides=trainings,
                ),
                inputs={
                    "metrics": artifact_name("metrics", study=name),
                    "bins": artifact_name("reliability_bins", study=name),
                    "model": "params:model",
                    "training": "params:training",
                    **(collections if report_needs(report) else {}),
                },
                outputs=artifact_name("report", study=name, report=report),
                name=f"report_{report}",
                tags=["reporting"],
            )
        )
    return nodes


def _report_metrics(study: StudySpec) -> tuple[str, ...]:
    """The on-request metrics (``metrics.ON_REQUEST``) that the study's reports name in a
    ``metrics`` list or a ``metric`` option: the evaluation computes them too."""
    named = []
    for options in study.reports.values():
        options = options or {}
        named += [*(options.get("metrics") or []), options.get("metric")]
    return tuple(dict.fromkeys(key for key in named if key in ON_REQUEST))


def _evaluate_node(
    structure: Structure,
    study: StudySpec,
    run_keys: dict[str, tuple[str, int]],
    calibrators: list[str],
    report_bins: tuple[int, ...],
    shift_kind: tuple[str, ...],
    collections: dict[str, str],
) -> Node:
    """The study's evaluation: the tidy metrics table and the reliability bins."""
    return node(
        _named(
            evaluate_study,
            study=study.name,
            run_keys=run_keys,
            methods={m: structure.methods[m] for m in study.methods},
            calibrators=calibrators,
            report_bins=report_bins,
            report_metrics=_report_metrics(study),
            calibrator_definitions={k: structure.calibrators[k] for k in study.calibrators},
            ensembles=study.ensembles,
        ),
        # in the order of evaluate_study's arguments: Kedro's parameter validation maps
        # node inputs to arguments by position
        inputs={
            **SESSION_INPUTS,
            "evaluation": "params:evaluation",
            **({"shift": "params:shift"} if shift_kind else {}),
            **collections,
        },
        outputs=[f"{study.name}.metrics", f"{study.name}.reliability_bins"],
        name="evaluate",
        tags=["reporting", "evaluation"],
    )


def study_pipeline(
    structure: Structure,
    study: StudySpec,
    dataset_name: str = "",
    shifted_val: bool = False,
    *,
    protocol: str = "",
) -> Pipeline:
    """Per-method collection, evaluation (tidy table + reliability bins) and one node per
    report of the study; with ``shifted_val`` every calibrator also appears as
    ``<key>@shifted_val``. Reports name ``dataset_name`` and ``protocol``."""
    runs = [(m, s) for m in study.methods for s in study.seeds]
    run_keys = {f"r{i}": run for i, run in enumerate(runs)}
    name = study.name
    labels = {m: structure.methods[m].label for m in study.methods}
    calibrators = list(study.calibrators)
    if shifted_val:
        calibrators += [f"{key}{SHIFTED_VAL_SUFFIX}" for key in study.calibrators]
    shift_kind = ("shift",) if shifted_val or study_uses_shift(study) else ()
    requested = (study.reports.get("reliability") or {}).get("n_bins", [])
    report_bins = tuple(int(b) for b in ([requested] if isinstance(requested, int) else requested))
    report_kinds = tuple(kind for report in study.reports for kind in report_needs(report))
    kinds = tuple(dict.fromkeys(("logits", "calibrators", *shift_kind, *report_kinds)))
    collections = {f"runs_{m}": collected_runs(m, name) for m in study.methods}
    evaluate = _evaluate_node(
        structure, study, run_keys, calibrators, report_bins, shift_kind, collections
    )
    study_info = {
        "study": name,
        "dataset": dataset_name,
        "protocol": protocol,
        "methods": list(study.methods),
        "seeds": list(study.seeds),
        "labels": labels,
        "groups": {m: structure.methods[m].group for m in study.methods},
        "ensembles": [spec.record() for spec in study.ensembles],
    }
    reports = _report_nodes(structure, study, study_info, run_keys, collections, tuple(calibrators))
    return Pipeline(_collect_nodes(name, run_keys, kinds)) + Pipeline(
        [evaluate, *reports], namespace=name, prefix_datasets_with_namespace=False
    )


def create_pipeline(
    structure: Structure,
    studies: list[str],
    dataset_name: str = "",
    shifted_val: bool = False,
    *,
    protocol: str = "",
) -> Pipeline:
    return Pipeline(
        [
            study_pipeline(
                structure, structure.studies[s], dataset_name, shifted_val, protocol=protocol
            )
            for s in studies
        ]
    )
