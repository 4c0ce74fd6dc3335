"""Nodes refuse inputs whose provenance disagrees with the session, with a clear message;
the run id, environment and protocol reach the nodes as the ``run_info`` input."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from kedro.io import DataCatalog

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.data import ImageData, load_dataset
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.hooks import RunInfoHook
from calib_pipeline.pipelines.logits.nodes import compute_logits
from calib_pipeline.pipelines.posthoc.nodes import fit_calibrators
from calib_pipeline.pipelines.provenance import ProvenanceError, check_run, check_same_training
from calib_pipeline.pipelines.reporting.nodes import evaluate_study
from calib_pipeline.pipelines.run_info import RUN_INFO, run_info
from calib_pipeline.pipelines.training.nodes import train_method
from calib_pipeline.training import CheckpointStore
from calib_pipeline.training.provenance import run_configuration, training_provenance

CE = MethodSpec(key="ce", objective="cross_entropy", label="CE")
LS = MethodSpec(key="ls", objective="label_smoothing", params={"epsilon": 0.1})
SESSION = {
    "dataset": {"name": "digits"},
    "model": {"name": "small_cnn", "params": {"width": 8}},
    "training": {"epochs": 60, "lr": 0.05},
    "splits": {"standard": {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}},
    "run_info": run_info("2026-03-03T00.00.00.000Z", "test", "test"),
}
TRAINED_BY = "2026-01-01T00.00.00.000Z"


def provenance(
    method=CE, run_id=TRAINED_BY, split_hash="abc123", env="test", protocol="test", **changed
) -> dict:
    """The record of ``method`` seed 0 trained under the session's parameters (in env
    ``env`` of protocol ``protocol``), with the parameter groups in ``changed`` replaced."""
    session = {**SESSION, **changed}
    config = run_configuration(
        method,
        seed=0,
        dataset=session["dataset"]["name"],
        split_definition=session["splits"][method.split],
        model_params=session["model"],
        training_params=session["training"],
    )
    config = {**config, "split_hash": split_hash, "code": "c0de"}
    return training_provenance(config, run_id=run_id, env=env, protocol=protocol)


def message(error: pytest.ExceptionInfo) -> str:
    return " ".join(str(error.value).split())


# ------------------------------------------------------------- one training, the session's


def test_a_run_trained_as_the_session_says_passes_and_gives_its_record():
    record = provenance()
    artifacts = {
        "ce.seed_0.logits": {"provenance": record},
        "ce.seed_0.calibrators": {"provenance": record},
    }
    assert check_run(CE, 0, artifacts, **SESSION) == record


def test_a_notebook_check_of_one_runs_artifacts_refuses_a_mix():
    """``check_same_training`` (what notebooks/analysis.ipynb calls before applying a fitted
    calibrator to logits) passes one training's artifacts and refuses two trainings'."""
    record = provenance()
    same = {
        "ce.seed_0.logits": {"provenance": record},
        "ce.seed_0.calibrators": {"provenance": record},
    }
    assert check_same_training("ce seed 0", same) == record
    mixed = {
        **same,
        "ce.seed_0.calibrators": {"provenance": provenance(run_id="2026-02-02T00.00.00.000Z")},
    }
    with pytest.raises(
        ProvenanceError, match="ce seed 0: its artifacts come from different trainings"
    ):
        check_same_training("ce seed 0", mixed)
    with pytest.raises(ProvenanceError, match="has no provenance record"):
        check_same_training("ce seed 0", {**same, "ce.seed_0.logits": {"test": {}}})


def test_artifacts_of_different_trainings_are_refused_naming_each():
    artifacts = {
        "ce.seed_0.logits": {"provenance": provenance()},
        "ce.seed_0.calibrators": {"provenance": provenance(run_id="2026-02-02T00.00.00.000Z")},
    }
    with pytest.raises(ProvenanceError) as error:
        check_run(CE, 0, artifacts, **SESSION)
    text = message(error)
    assert text.startswith("ce seed 0: its artifacts come from different trainings:")
    assert f"ce.seed_0.logits: trained by run {TRAINED_BY}" in text
    assert "ce.seed_0.calibrators: trained by run 2026-02-02T00.00.00.000Z" in text
    assert "--load-versions=<dataset>:<version>" in text


def test_a_training_with_other_epochs_is_refused_naming_the_parameter():
    artifacts = {
        "ce.seed_0.logits": {"provenance": provenance(training={"epochs": 200, "lr": 0.05})}
    }
    with pytest.raises(ProvenanceError) as error:
        check_run(CE, 0, artifacts, **SESSION)
    text = message(error)
    assert text.startswith(
        f"ce seed 0: its cached artifacts (trained by run {TRAINED_BY}, env 'test') were trained "
        "with settings this session does not have: training.epochs: 200 when trained, 60 in this "
        "session"
    )
    assert "Retrain it under this session's parameters" in text and "split changed" not in text


def test_a_changed_split_is_refused_as_such():
    resplit = {"standard": {**SESSION["splits"]["standard"], "seed": 7}}
    artifacts = {"ce.seed_0.logits": {"provenance": provenance()}}
    with pytest.raises(ProvenanceError) as error:
        check_run(CE, 0, artifacts, **{**SESSION, "splits": resplit})
    text = message(error)
    assert "splits.standard.seed: 0 when trained, 7 in this session" in text
    assert "The split changed since training: this session's val part is not the one" in text


def test_a_changed_method_hyperparameter_names_the_method_parameter():
    artifacts = {"ls.seed_0.logits": {"provenance": provenance(LS)}}
    with pytest.raises(
        ProvenanceError,
        match=re.escape("methods.ls.params.epsilon: 0.1 when trained, 0.2 in this session"),
    ):
        check_run(
            MethodSpec(key="ls", objective="label_smoothing", params={"epsilon": 0.2}),
            0,
            artifacts,
            **SESSION,
        )


def test_execution_settings_and_code_may_differ():
    # trained on a GPU with older metric code, re-scored on a laptop
    record = provenance(training={**SESSION["training"], "device": "cuda", "num_threads": 8})
    assert check_run(CE, 0, {"ce.seed_0.logits": {"provenance": record}}, **SESSION) is record


def test_an_artifact_without_provenance_is_refused():
    with pytest.raises(ProvenanceError) as error:
        check_run(CE, 0, {"ce.seed_0.logits": {"val": {}}}, **SESSION)
    assert message(error).startswith(
        "ce.seed_0.logits has no provenance record: it was written before calib-pipeline recorded"
    )


# ---------------------------------------------------------------------------------- nodes


@pytest.fixture(scope="module")
def digits() -> ImageData:
    return load_dataset("digits")  # the nodes refuse before any training or prediction


def test_the_training_node_refuses_a_split_its_definition_does_not_make(digits, tmp_path):
    stale = split_dataset(digits, SESSION["splits"]["standard"])  # made with seed 0
    with pytest.raises(ProvenanceError) as error:
        train_method(
            digits,
            stale,
            {**SESSION["splits"]["standard"], "seed": 7},
            CheckpointStore(tmp_path),
            SESSION["model"],
            SESSION["training"],
            SESSION["run_info"],
            method=CE,
            seed=0,
        )
    text = message(error)
    assert (
        f"split_standard (hash {split_fingerprint(stale)}) is not the split this session's "
        "splits.standard" in text
    )
    assert (
        "kedro run --pipelines=data_split" in text
        and "--load-versions=split_standard:<version>" in text
    )
    assert not any(tmp_path.iterdir()), "nothing is trained"


def test_the_logits_node_refuses_a_checkpoint_of_another_split(digits):
    split = split_dataset(digits, SESSION["splits"]["standard"])
    checkpoint = {
        "method": "ce",
        "seed": 0,
        "provenance": provenance(split_hash="0123456789abcdef"),
    }
    with pytest.raises(ProvenanceError) as error:
        compute_logits(digits, split, checkpoint, {"device": "cpu"}, SESSION["run_info"])
    text = message(error)
    assert text.startswith(
        f"ce.seed_0.checkpoint (trained by run {TRAINED_BY}) does not match the data it is given: "
        f"split 'standard' had hash 0123456789abcdef when trained, the split given has hash "
        f"{split_fingerprint(split)} (the split changed since training"
    )
    assert "--load-versions=split_standard:<version>" in text


def test_the_logits_node_refuses_a_checkpoint_of_another_dataset(digits):
    split = split_dataset(digits, SESSION["splits"]["standard"])
    record = provenance(dataset={"name": "fashion_mnist"}, split_hash=split_fingerprint(split))
    with pytest.raises(
        ProvenanceError, match="dataset 'fashion_mnist' when trained, 'digits' given"
    ):
        compute_logits(
            digits,
            split,
            {"method": "ce", "seed": 0, "provenance": record},
            {"device": "cpu"},
            SESSION["run_info"],
        )


def cached_run(record: dict, calibrators_record: dict | None = None) -> dict:
    """Logits, calibrators and shift logits of one run, as the catalog loads them."""
    generator = torch.Generator().manual_seed(0)
    part = {"logits": torch.randn(40, 10, generator=generator), "labels": torch.arange(40) % 10}
    fitted = {"ts": build_calibrator("temperature_nll").fit(part["logits"], part["labels"])}
    return {
        "logits": {"method": "ce", "seed": 0, "provenance": record, "val": part, "test": part},
        "calibrators": {"provenance": calibrators_record or record, "fitted": fitted},
        "shift": {"provenance": record, "sets": {}},
    }


def evaluate(run: dict, session: dict = SESSION, definitions: dict | None = None, shift=None):
    return evaluate_study(
        session["dataset"],
        session["model"],
        session["training"],
        session["splits"],
        session["run_info"],
        {"n_bins": 10},
        shift,
        study="mini",
        run_keys={"r0": ("ce", 0)},
        methods={"ce": CE},
        calibrators=["ts"],
        calibrator_definitions=definitions,
        runs_ce={f"r0_{kind}": artifact for kind, artifact in run.items()},
    )


def test_the_evaluation_refuses_a_calibrator_the_session_now_defines_otherwise():
    run = cached_run(provenance())
    table, _ = evaluate(run, definitions={"ts": {"name": "temperature_nll"}})
    assert "ts" in set(table["calibrator"])
    changed = {"ts": {"name": "temperature_fixed", "params": {"temperature": 3.0}}}
    with pytest.raises(
        ProvenanceError,
        match=r"ce seed 0: calibrator 'ts' was fitted as temperature_nll\(.*\), but this "
        r"session's calibrators\.ts is temperature_fixed\(\{\"temperature\": 3\.0\}\)",
    ):
        evaluate(run, definitions=changed)
    retuned = {"ts": {"name": "temperature_nll", "params": {"t_max": 50.0}}}
    with pytest.raises(ProvenanceError, match="calibrator 'ts' was fitted as"):
        evaluate(run, definitions=retuned)


def test_the_evaluation_gives_each_row_the_run_that_trained_its_model():
    table, bins = evaluate(cached_run(provenance()))
    assert set(table["run_id"]) == {TRAINED_BY} and set(bins["run_id"]) == {TRAINED_BY}
    assert list(table.columns[4:7]) == ["seed", "run_id", "calibrator"]


def test_the_evaluation_refuses_calibrators_of_another_training():
    run = cached_run(provenance(), calibrators_record=provenance(run_id="2026-02-02T00.00.00.000Z"))
    with pytest.raises(
        ProvenanceError, match=r"ce\.seed_0\.calibrators: trained by run 2026-02-02"
    ):
        evaluate(run)


def test_the_evaluation_refuses_a_run_the_session_does_not_describe():
    with pytest.raises(
        ProvenanceError, match=r"training\.epochs: 60 when trained, 3 in this session"
    ):
        evaluate(cached_run(provenance()), {**SESSION, "training": {"epochs": 3, "lr": 0.05}})


def test_posthoc_refuses_shift_logits_of_another_training_and_records_the_logits_provenance():
    run = cached_run(provenance())
    fitted = fit_calibrators(
        run["logits"],
        {"ts": {"name": "temperature_nll"}},
        **SESSION,
        method=CE,
        seed=0,
        keys=["ts"],
    )
    assert fitted["provenance"] == provenance() and set(fitted["fitted"]) == {"ts"}
    other = {"provenance": provenance(run_id="2026-02-02T00.00.00.000Z"), "sets": {}}
    with pytest.raises(
        ProvenanceError, match=r"ce\.seed_0\.shift_logits: trained by run 2026-02-02"
    ):
        fit_calibrators(
            run["logits"],
            {"ts": {"name": "temperature_nll"}},
            **SESSION,
            shift_logits=other,
            method=CE,
            seed=0,
            keys=["ts"],
        )


# ---------------------------------------------------------------------------------- hook


def test_the_hook_gives_nodes_the_session_run_id_env_and_protocol():
    hook = RunInfoHook()
    loader = {"globals": {"protocol": "cifar10_wrn"}}
    hook.after_context_created(SimpleNamespace(config_loader=loader))
    catalog = DataCatalog()
    hook.before_pipeline_run(
        {"run_id": TRAINED_BY, "env": "cifar10_wrn"}, pipeline=None, catalog=catalog
    )
    assert catalog.load(RUN_INFO) == {
        "run_id": TRAINED_BY,
        "env": "cifar10_wrn",
        "protocol": "cifar10_wrn",
    }
    hook.before_pipeline_run({"run_id": TRAINED_BY, "env": None}, pipeline=None, catalog=catalog)
    assert catalog.load(RUN_INFO)["env"] == "local", "kedro run without --env runs the default env"


def test_the_evaluation_refuses_a_history_of_another_training_than_the_logits():
    """E.g. the run was retrained alone under other settings (`--nodes=ce.train_seed_0
    --params=training.epochs=40`): a new history beside the old logits. A training reused
    from its completed state by a later session (same configuration, new run id) is the same
    training and passes. Reports then see the history without its provenance columns."""
    import pandas as pd

    from calib_pipeline.pipelines.reporting.nodes import run_report

    record = provenance()
    history = pd.DataFrame(
        {
            "method": "ce",
            "seed": 0,
            "run_id": "2026-03-03T00.00.00.000Z",
            "fingerprint": record["fingerprint"],
            "epoch": [1, 2],
            "test_gamma_mean": [1.0, 1.1],
            "test_gamma_std": [0.1, 0.2],
            "test_ece": [0.1, 0.05],
            "test_accuracy": [0.8, 0.9],
            "test_nll": [0.6, 0.5],
        }
    )
    run = {**cached_run(record), "histories": history}
    table, bins = evaluate(run)  # reused by a later session: its run id, the same fingerprint
    study = {
        "study": "mini",
        "dataset": "digits",
        "methods": ["ce"],
        "seeds": [0],
        "labels": {"ce": "CE"},
        "groups": {"ce": "ce"},
    }
    curves = run_report(
        table,
        bins,
        report="meta_curves",
        options={},
        study=study,
        run_keys={"r0": ("ce", 0)},
        runs_ce={"r0_histories": history},
    )["curves"]
    assert not {"run_id", "fingerprint"} & set(curves.columns) and list(curves["test_ece"]) == [
        0.1,
        0.05,
    ]
    other = history.assign(fingerprint="0123456789abcdef")
    with pytest.raises(
        ProvenanceError,
        match=r"ce seed 0: its history comes from a training of "
        rf"configuration \['0123456789abcdef'\], its logits from configuration "
        rf"{record['fingerprint']} \(run {TRAINED_BY}\)",
    ):
        evaluate({**run, "histories": other})
    with pytest.raises(ProvenanceError, match=r"ce\.seed_0\.history has no fingerprint column"):
        evaluate({**run, "histories": history.drop(columns="fingerprint")})


def test_recording_epoch_logits_is_a_configuration_of_its_own(digits, tmp_path):
    """A completed run without epoch logits is not reused for one that records them (its
    state has none): turning `record_epoch_logits` on trains in a folder of its own."""
    import dataclasses

    split = split_dataset(digits, SESSION["splits"]["standard"])
    recording = dataclasses.replace(CE, record_epoch_logits=True)
    outputs = {}
    for method in (CE, recording):
        outputs[method.record_epoch_logits] = train_method(
            digits,
            split,
            SESSION["splits"]["standard"],
            CheckpointStore(tmp_path),
            SESSION["model"],
            {"epochs": 1, "batch_size": 256, "device": "cpu"},
            SESSION["run_info"],
            method=method,
            seed=0,
        )
    configurations = [p for p in (tmp_path / "ce" / "seed_0").iterdir() if p.is_dir()]
    assert len(configurations) == 2, "two configurations of the run"
    assert (
        not outputs[False][0]["epoch_logits"] and len(outputs[True][0]["epoch_logits"]["val"]) == 1
    )
    assert set(outputs[True][1]["run_id"]) == {SESSION["run_info"]["run_id"]}, "history says who"
    assert set(outputs[True][1]["fingerprint"]) == {outputs[True][0]["provenance"]["fingerprint"]}
    # the folder is the provenance's fingerprint (retention keeps a state by it)
    folders = {p.name for p in configurations}
    assert {out[0]["provenance"]["fingerprint"] for out in outputs.values()} == folders


def test_the_evaluation_refuses_shift_logits_made_under_other_shift_settings():
    from calib_pipeline.data.shift_suites import defining_settings

    made = {"severities": [1, 5], "corruptions": ["gaussian_noise"]}
    run = cached_run(provenance())
    run["shift"] = {**run["shift"], "settings": defining_settings(made)}
    table, _ = evaluate(run, shift=made)
    assert set(table["run_id"]) == {TRAINED_BY}
    with pytest.raises(
        ProvenanceError,
        match=r"ce seed 0: its shift logits were made under other shift settings:\n"
        r"  shift.severities: \[1, 5\] when the sets were made, \[2\] in this session",
    ):
        evaluate(run, shift={**made, "severities": [2]})
    # the same sets written another way pass: all corruptions by name, severities reordered
    from calib_pipeline.data.shift_suites import corruption_names

    everything = {"severities": [5, 1], "corruptions": "all"}
    run["shift"] = {
        **run["shift"],
        "settings": defining_settings({**everything, "severities": [1, 5]}),
    }
    evaluate(run, shift={**everything, "corruptions": list(corruption_names())})
    with pytest.raises(ProvenanceError, match=r"shift\.frost_dir: None when the sets were made"):
        evaluate(run, shift={**everything, "frost_dir": "/data/frost"})
    unrecorded = cached_run(provenance())
    with pytest.raises(ProvenanceError, match="do not record the shift settings that made them"):
        evaluate(unrecorded, shift=made)


def test_the_checkpoint_says_whether_it_was_trained_or_reused_and_its_effective_hyperparameters(
    digits, tmp_path
):
    """MLflow reads both: a reused training is tagged so, and a default (``detach_pt``)
    appears beside the configured ``gamma``."""
    import dataclasses

    focal = dataclasses.replace(CE, key="focal_g3", objective="focal", params={"gamma": 3.0})
    split = split_dataset(digits, SESSION["splits"]["standard"])
    runs = [
        train_method(
            digits,
            split,
            SESSION["splits"]["standard"],
            CheckpointStore(tmp_path),
            SESSION["model"],
            {"epochs": 1, "batch_size": 256, "device": "cpu"},
            SESSION["run_info"],
            method=focal,
            seed=0,
        )[0]
        for _ in range(2)
    ]
    assert [run["resumed_after_epoch"] for run in runs] == [0, 1], "trained, then reused"
    assert runs[0]["hyperparameters"] == {"gamma": 3.0, "detach_pt": False}
    assert runs[0]["config"]["params"] == {"gamma": 3.0}, "the configuration holds what was set"
