"""The study pipeline on an in-memory catalog (no files, no MLflow), and its failure path."""

import pytest
import torch
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner
from kedro_datasets.pickle import PickleDataset

from calib_pipeline.data import ImageData, load_dataset
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.kedro_datasets import ShiftLogitsStoreDataset
from calib_pipeline.pipelines import data_split, logits, posthoc, reporting, shift, training
from calib_pipeline.pipelines.config import parse_structure
from calib_pipeline.pipelines.run_info import RUN_INFO, run_info
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.tensor_io import fingerprint
from calib_pipeline.training import CheckpointStore

PARAMETERS = {
    "dataset": {"name": "digits"},
    "model": {"name": "small_cnn", "params": {"width": 8, "feature_dim": 16}},
    "training": {"epochs": 2, "batch_size": 64, "lr": 0.1, "device": "cpu"},
    "seeds": [0],
    "splits": {"standard": {"seed": 0, "fractions": {"train": 0.8, "val": 0.2}}},
    # ts_fixed is configured but no study reads it: it is never fitted
    "calibrators": {"ts": {"name": "temperature_nll"}, "ts_fixed": {"name": "temperature_fixed"}},
    "methods": {
        "ce": {"objective": "cross_entropy", "label": "CE"},
        "ls": {"objective": "label_smoothing", "params": {"epsilon": 0.1}},
    },
    "studies": {
        "mini": {
            "methods": ["ce", "ls"],
            "calibrators": ["ts"],
            "reports": {
                "summary": {"metrics": ["accuracy", "nll", "ece"]},
                "reliability": {"n_bins": [10]},
                "shift_tables": {},
            },
        }
    },
    "logits": {"device": "cpu"},
    "shift": {"seed": 0, "corruptions": ["gaussian_noise"], "severities": [1, 5]},
    "evaluation": {"n_bins": 10, "reliability_bins": [10]},
}


@pytest.fixture(scope="module")
def small_digits() -> ImageData:
    full = load_dataset("digits")
    return ImageData(
        "digits",
        full.train_images[:400],
        full.train_labels[:400],
        full.test_images[:100],
        full.test_labels[:100],
        10,
        full.mean,
        full.std,
    )


def _catalog(data, tmp_path, structure, parameters=PARAMETERS):
    # run_info is what hooks.RunInfoHook adds in a `kedro run`
    datasets = {
        "raw_data": MemoryDataset(data),
        RUN_INFO: MemoryDataset(run_info("test-run", "test", "test")),
    }
    for key, value in parameters.items():
        datasets[f"params:{key}"] = MemoryDataset(value)
        if isinstance(value, dict):
            for sub, item in value.items():
                datasets[f"params:{key}.{sub}"] = MemoryDataset(item)
    datasets["resume_states"] = MemoryDataset(CheckpointStore(tmp_path), copy_mode="assign")
    # no shift logits stored before: every run computes its own
    datasets["stored_shift_logits"] = ShiftLogitsStoreDataset(path=str(tmp_path / "stored"))
    # the runner releases in-memory intermediates; persist the ones the test inspects
    for name in (
        "mini.metrics",
        "mini.report_summary",
        "mini.report_reliability",
        "ce.seed_0.checkpoint",
        "ce.seed_0.history",
        "ce.seed_0.logits",
        "ce.seed_0.calibrators",
    ):
        datasets[name] = PickleDataset(filepath=str(tmp_path / f"{name}.pkl"))
    return DataCatalog(datasets=datasets)


def _pipeline(structure):
    runs = structure.runs()
    return (
        data_split.create_pipeline(["standard"])
        + training.create_pipeline(structure, runs)
        + logits.create_pipeline(structure, runs)
        + posthoc.create_pipeline(structure, runs)
        + shift.create_pipeline(runs)
        + reporting.create_pipeline(structure, ["mini"], "digits", protocol="test")
    )


def test_study_runs_end_to_end_in_memory(small_digits, tmp_path):
    structure = parse_structure(PARAMETERS)
    catalog = _catalog(small_digits, tmp_path, structure)
    SequentialRunner().run(_pipeline(structure), catalog)
    table = catalog.load("mini.metrics")
    assert set(table["method"]) == {"ce", "ls"}
    assert set(table["calibrator"]) == {"none", "ts"}
    assert set(catalog.load("ce.seed_0.calibrators")["fitted"]) == {"ts"}, (
        "only the study's calibrators are fitted"
    )
    assert set(table["shift"]) == {"none", "gaussian_noise"}
    assert sorted(table.loc[table["shift"] == "gaussian_noise", "severity"].unique()) == [1, 5]
    test = table[(table["split"] == "test") & (table["shift"] == "none")].set_index(
        ["method", "calibrator", "metric"]
    )["value"]
    # temperature scaling never changes accuracy
    assert test["ce", "none", "accuracy"] == test["ce", "ts", "accuracy"]
    summary = catalog.load("mini.report_summary")
    assert "| CE" in summary["summary"]
    assert summary["summary"].startswith("# mini on digits (protocol test)"), (
        "titles name dataset and protocol"
    )
    assert list(summary["table"].columns) == [
        "label",
        "calibrator",
        "Accuracy",
        "NLL",
        "ECE",  # the cells, as the Markdown shows them, each metric by its name
        "accuracy_pct_mean",
        "accuracy_pct_std",
        "nll_mean",
        "nll_std",
        "ece_pct_mean",
        "ece_pct_std",
        "n_seeds",
    ]
    assert "Units: Accuracy, ECE in %; NLL as computed." in summary["summary"]
    assert set(catalog.load("mini.report_reliability")) == {"reliability_10_bins"}
    checkpoint = catalog.load("ce.seed_0.checkpoint")
    assert checkpoint["architecture"]["name"] == "small_cnn" and checkpoint["seed"] == 0
    resume = [p.parent.name for p in (tmp_path / "ce" / "seed_0").glob("*/latest.pt")]
    assert resume == [fingerprint(checkpoint["config"])], "one resume folder per configuration"
    history = catalog.load("ce.seed_0.history")
    assert list(history["epoch"]) == [1, 2]
    cached = catalog.load("ce.seed_0.logits")
    assert (
        cached["val"]["logits"].shape[1] == 10
        and abs(len(cached["val"]["labels"]) - 80) <= 5
        and cached["test"]["labels"].shape == (100,)
    )


def test_every_artifact_records_the_training_that_made_it(small_digits, tmp_path):
    structure = parse_structure(PARAMETERS)
    catalog = _catalog(small_digits, tmp_path, structure)
    SequentialRunner().run(_pipeline(structure), catalog)
    record = catalog.load("ce.seed_0.checkpoint")["provenance"]
    split = split_dataset(small_digits, PARAMETERS["splits"]["standard"])
    assert {k: v for k, v in record.items() if k != "config"} == {
        "run_id": "test-run",
        "env": "test",
        "protocol": "test",
        "dataset": "digits",
        "split": "standard",
        "split_hash": split_fingerprint(split),
        "fingerprint": fingerprint(record["config"]),
    }
    assert (
        record["config"]["training"]["epochs"] == 2
        and record["config"]["split_definition"]["seed"] == 0
    )
    assert catalog.load("ce.seed_0.logits")["provenance"] == record
    assert set(catalog.load("mini.metrics")["run_id"]) == {"test-run"}


def test_reporting_fails_clearly_when_a_calibrator_was_not_fitted(small_digits, tmp_path):
    runs = {
        "ce|0": {
            "logits": {"test": {"logits": torch.randn(5, 10), "labels": torch.arange(5)}},
            "calibrators": {},
        }
    }
    with pytest.raises(KeyError, match=r"calibrator\(s\) \['ts'\] were not fitted; re-run posthoc"):
        evaluate_runs(runs, dataset="digits", study="mini", labels={}, calibrators=["ts"])


def test_a_scoring_error_names_the_run_calibrator_and_split():
    logits = torch.randn(6, 10)
    logits[2, 3] = float("nan")
    runs = {
        "ce|1": {
            "run_id": "R1",
            "calibrators": {},
            "logits": {
                "val": {"logits": torch.randn(6, 10), "labels": torch.arange(6)},
                "test": {"logits": logits, "labels": torch.arange(6)},
            },
        }
    }
    with pytest.raises(
        ValueError, match=r"^ce seed 1 \(run R1\), calibrator none, split test: .*(NaN|finite)"
    ):
        evaluate_runs(runs, dataset="digits", study="mini", labels={}, calibrators=[])


def test_calibrators_fitted_on_shifted_val_are_evaluated_and_labelled(small_digits, tmp_path):
    parameters = {
        **PARAMETERS,
        "shift": {
            **PARAMETERS["shift"],
            "shifted_val": {"corruptions": ["gaussian_noise"], "severities": [3]},
        },
        "methods": {"ce": PARAMETERS["methods"]["ce"]},
        "studies": {"mini": {**PARAMETERS["studies"]["mini"], "methods": ["ce"]}},
    }
    structure = parse_structure(parameters)
    catalog = _catalog(small_digits, tmp_path, structure, parameters)
    runs = structure.runs()
    pipeline = (
        data_split.create_pipeline(["standard"])
        + training.create_pipeline(structure, runs)
        + logits.create_pipeline(structure, runs)
        + shift.create_pipeline(runs)
        + posthoc.create_pipeline(structure, runs, shifted_val=True)
        + reporting.create_pipeline(structure, ["mini"], "digits", shifted_val=True)
    )
    SequentialRunner().run(pipeline, catalog)
    table = catalog.load("mini.metrics")
    assert set(table["calibrator"]) == {"none", "ts", "ts@shifted_val"}
    shifted = table[
        (table["calibrator"] == "ts@shifted_val")
        & (table["shift"] == "gaussian_noise")
        & (table["split"] == "test")
    ]
    assert not shifted.empty
    clean_ts = table[
        (table["calibrator"] == "ts")
        & (table["split"] == "test")
        & (table["shift"] == "none")
        & (table["metric"] == "accuracy")
    ]
    moved_ts = table[
        (table["calibrator"] == "ts@shifted_val")
        & (table["split"] == "test")
        & (table["shift"] == "none")
        & (table["metric"] == "accuracy")
    ]
    assert clean_ts["value"].tolist() == moved_ts["value"].tolist(), (
        "temperature scaling never changes accuracy"
    )


def test_the_shift_stage_runs_only_for_studies_whose_reports_read_shifted_sets():
    import copy

    from calib_pipeline.pipeline_registry import stage_pipelines

    parameters = copy.deepcopy(PARAMETERS)
    parameters["studies"]["clean"] = {"methods": ["ce"], "reports": {"summary": {}}}
    parameters["studies"]["mini"]["methods"] = ["ls"]
    structure = parse_structure(parameters)
    clean = stage_pipelines(structure, ["clean"], "digits")
    assert not clean["shift"].nodes, "no report of 'clean' reads shifted sets"
    assert not [d for d in clean["reporting"].inputs() if d.endswith("shift_logits")]
    shifted = stage_pipelines(structure, ["clean", "mini"], "digits")
    assert sorted(n.name for n in shifted["shift"].nodes) == [
        "ls.shift_logits_seed_0",
        "make_shift_sets",
    ]
    assert [d for d in shifted["reporting"].inputs() if d.endswith("shift_logits")] == [
        "ls.seed_0.shift_logits"
    ]
    # calibrators fitted on shifted validation sets need every run's shifted sets
    assert (
        len(stage_pipelines(structure, ["clean"], "digits", shifted_val=True)["shift"].nodes) == 2
    )


def test_the_study_reads_one_collection_per_method_made_in_the_method_namespace():
    from calib_pipeline.hooks import MissingInputsError, RunPreflightHook

    structure = parse_structure(PARAMETERS)
    pipeline = reporting.create_pipeline(structure, ["mini"], "digits", protocol="test")
    collect = {n.name: n for n in pipeline.nodes if n.name.endswith("collect_for_mini")}
    assert sorted(collect) == ["ce.collect_for_mini", "ls.collect_for_mini"]
    assert collect["ce.collect_for_mini"].outputs == ["ce.runs_for_mini"]
    assert set(collect["ce.collect_for_mini"].inputs) == {
        "ce.seed_0.logits",
        "ce.seed_0.calibrators",
        "ce.seed_0.shift_logits",
    }
    evaluate = next(n for n in pipeline.nodes if n.name == "mini.evaluate")
    assert {i for i in evaluate.inputs if ".seed_" in i} == set(), (
        "per-run artifacts stay in their method"
    )
    assert {"ce.runs_for_mini", "ls.runs_for_mini"} <= set(evaluate.inputs)
    # the study's namespace alone leaves its collections out: refused before anything runs
    with pytest.raises(
        MissingInputsError,
        match=r"each method's collect_for_mini node runs in the method's namespace",
    ):
        RunPreflightHook().before_pipeline_run(
            {}, pipeline.only_nodes_with_namespaces(["mini"]), DataCatalog()
        )


def _claim(**fields):
    return {
        "id": "ls_lower_auroc",
        "source": "test",
        "quote": "a claim",
        "expect": "lower",
        "a": {"method": "ls"},
        "b": {"method": "ce"},
        "quantity": {"metric": "auroc"},
        **fields,
    }


def test_a_claim_the_study_cannot_measure_fails_when_the_pipeline_is_built():
    import copy

    from calib_pipeline.pipeline_registry import stage_pipelines

    parameters = copy.deepcopy(PARAMETERS)
    parameters["studies"]["mini"]["reports"]["claims"] = {"claims": [_claim()]}
    assert stage_pipelines(parse_structure(parameters), ["mini"], "digits")["reporting"].nodes
    for bad, message in (
        (
            _claim(b={"method": "brier"}),
            r"study 'mini': report 'claims': claim mini:ls_lower_auroc side b: method 'brier' is "
            r"not in study 'mini'",
        ),
        (
            _claim(quantity={"metric": "auroc", "calibrator": "ts_grid"}),
            r"study 'mini': report 'claims' names unknown calibrator 'ts_grid'; defined "
            r"calibrators \(`calibrators` in parameters.yml\): \['ts', 'ts_fixed'\]",
        ),
    ):
        parameters["studies"]["mini"]["reports"]["claims"] = {"claims": [bad]}
        with pytest.raises(ValueError, match=message):
            stage_pipelines(parse_structure(parameters), ["mini"], "digits")
    parameters["studies"]["mini"]["reports"]["claims"] = {
        "claims": [_claim(quantity={"metric": "auroc", "shift": "corrupted"})]
    }
    parameters["studies"]["mini"]["reports"] = {
        "claims": parameters["studies"]["mini"]["reports"]["claims"]
    }
    stages = stage_pipelines(parse_structure(parameters), ["mini"], "digits")
    assert stages["shift"].nodes, "a claim on corrupted sets gives its study the shift stage"


def test_reports_know_the_architecture_of_each_method(monkeypatch):
    from calib_pipeline.pipelines.reporting.nodes import run_report
    from calib_pipeline.reports import registry

    study = {
        "study": "mini",
        "dataset": "digits",
        "methods": ["ce", "ls"],
        "seeds": [0],
        "labels": {"ce": "CE", "ls": "LS"},
        "groups": {"ce": "ce", "ls": "ls"},
    }
    metrics = evaluate_runs({}, dataset="digits", study="mini", labels={}, calibrators=[])[0]
    seen = {}

    def spy(results, **options):
        seen.update(results.models)
        return {"table": metrics}

    monkeypatch.setitem(registry.REPORTS._factories, "summary", spy)
    base = {"name": "resnet32", "params": {"shortcut": "zero_pad"}}
    run_report(
        metrics,
        metrics,
        base,
        report="summary",
        options={},
        study=study,
        run_keys={},
        model_overrides={"ce": None, "ls": {"name": "resnet110_bottleneck"}},
    )
    # the override merges over the base entry as in training: ls keeps the base's params
    assert seen == {
        "ce": "resnet32[shortcut=zero_pad]",
        "ls": "resnet110_bottleneck[shortcut=zero_pad]",
    }
    run_report(
        metrics,
        metrics,
        base,
        report="summary",
        options={},
        study=study,
        run_keys={},
        model_overrides={"ce": None, "ls": {"name": "resnet32", "params": {}}},
    )
    assert seen == {"ce": "resnet32[shortcut=zero_pad]", "ls": "resnet32"}


def test_on_the_test_env_each_run_fits_only_the_calibrators_its_studies_evaluate():
    from calib_pipeline.pipeline_registry import stage_pipelines
    from calib_pipeline.settings import load_parameters, project_root

    parameters = load_parameters("test", project_root())
    structure = parse_structure(parameters)
    stages = stage_pipelines(structure, list(structure.studies), "digits")
    fitted = {
        (n.namespace, int(n.name.rsplit("_", 1)[1])): n.func.keywords["keys"]
        for n in stages["posthoc"].nodes
    }
    evaluated = {
        n.namespace: n.func.keywords["calibrators"]
        for n in stages["reporting"].nodes
        if n.name.endswith(".evaluate")
    }
    for method, seed in structure.runs():
        readers = [s for s in structure.studies.values() if method in s.methods and seed in s.seeds]
        used = {key for study in readers for key in evaluated[study.name]}
        assert set(fitted[method, seed]) == used, (
            f"{method} seed {seed}: every fitted calibrator is read"
        )
    assert fitted["fm_ce", 0] == ("ts",), "focal_meta reads TS only (its meta_tables' CE (TS) row)"
    # no study lists calibrators of its own: each is there because a report of it reads it
    assert "ts_grid_mukhoti" in evaluated["focal"] and "ts_grid_mukhoti" in fitted["ce", 0]
    assert evaluated["calibratability"] == ["ts_grid_wang", "hist_binning"]
    assert sum(map(len, fitted.values())) < len(fitted) * len(structure.calibrators) / 3


def test_the_missing_inputs_hint_names_the_study_for_a_studys_stage():
    """`--pipelines=mini.reporting` before mini's runs exist: the hint runs `mini` (its runs
    only), not the all-studies stages, which would train every study's methods."""
    from calib_pipeline.hooks import MissingInputsError, RunPreflightHook

    structure = parse_structure(PARAMETERS)
    pipeline = reporting.create_pipeline(structure, ["mini"], "digits", protocol="test")
    with pytest.raises(
        MissingInputsError,
        match=r"run the logits and shift and posthoc stage\(s\) "
        r"first, e.g. kedro run --pipelines=mini, or",
    ):
        RunPreflightHook().before_pipeline_run(
            {"pipeline_names": ["mini.reporting"]}, pipeline, DataCatalog()
        )
    with pytest.raises(
        MissingInputsError,
        match=r"e.g. kedro run --pipelines=logits,shift,posthoc \(every study's runs; one "
        r"study's alone: kedro run --pipelines=<study>\), or",
    ):
        RunPreflightHook().before_pipeline_run(
            {"pipeline_names": ["reporting"]}, pipeline, DataCatalog()
        )


def test_a_load_versions_pin_of_a_dataset_the_run_does_not_load_is_refused_with_close_names():
    """Kedro ignores a pin whose dataset the run does not load: a mistyped method would load
    every artifact at its latest version while the user believes one is pinned."""
    from calib_pipeline.hooks import MissingInputsError, RunPreflightHook

    structure = parse_structure(PARAMETERS)
    pipeline = reporting.create_pipeline(structure, ["mini"], "digits", protocol="test")
    typo = {"cee.seed_0.logits": "2026-11-28T10.00.00.000Z"}
    with pytest.raises(
        MissingInputsError,
        match=r"--load-versions pins 1 dataset\(s\) this run does not "
        r"load: cee.seed_0.logits \(did you mean ce.seed_0.logits",
    ):
        RunPreflightHook().before_pipeline_run({"load_versions": typo}, pipeline, DataCatalog())
    # a pin of an input the run loads passes this check (and is then looked up as saved or not)
    pinned = {"ce.seed_0.logits": "2026-11-28T10.00.00.000Z"}
    with pytest.raises(MissingInputsError, match="names version\\(s\\) that were never saved"):
        RunPreflightHook().before_pipeline_run({"load_versions": pinned}, pipeline, DataCatalog())


def test_on_request_metrics_named_by_reports_or_evaluation_are_evaluated():
    import copy

    from calib_pipeline.reports.evaluation import evaluation_options

    parameters = copy.deepcopy(PARAMETERS)
    summary = parameters["studies"]["mini"]["reports"]["summary"]
    summary["metrics"] = ["ece", "skce", "ece_kde_top", "ks_error"]
    pipeline = reporting.create_pipeline(
        parse_structure(parameters), ["mini"], "digits", protocol="test"
    )
    evaluate = next(n for n in pipeline.nodes if n.name == "mini.evaluate")
    assert evaluate.func.keywords["report_metrics"] == ("skce", "ece_kde_top")
    options = evaluation_options({"metrics": ["skce_p_value", "skce"]}, (), ("skce", "ece_kde"))
    assert options["extra_metrics"] == ("skce_p_value", "skce", "ece_kde")
    assert evaluation_options({})["extra_metrics"] == ()
