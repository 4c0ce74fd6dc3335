"""MLflow made for comparing methods (docs/tracking.md): the experiment opens on its runs,
nested runs carry study, environment, protocol and dataset, a re-scoring or a rerun that
reuses a training updates the training's nested run instead of adding one, the
temperature-scaling family key beside each calibrator's own, a failed parent run says why,
and the documented "compare methods" search runs on runs made through the hook."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pandas as pd
import pytest

from calib_pipeline.hooks import MlflowTrackingHook
from calib_pipeline.settings import project_root

CALIBRATORS = {
    "ts": {"name": "temperature_nll"},
    "ts_grid_mukhoti": {"name": "temperature_grid_ece", "params": {"preset": "mukhoti"}},
    "hist_binning": {"name": "histogram_binning"},
}


TIDY_COLUMNS = ["method", "seed", "run_id", "calibrator", "split", "shift", "severity"]
TIDY_COLUMNS += ["metric", "value"]


class Catalog(dict):
    """What the hook reads of Kedro's DataCatalog: ``in``, ``load``, and datasets without a
    saved folder."""

    load = dict.__getitem__

    def __missing__(self, name: str) -> SimpleNamespace:
        return SimpleNamespace()


def started(tmp_path, run_id: str, *, env="test", n_bins=15, pipeline=None):
    """A hook whose ``kedro run`` (``run_id``, ``env``) started on the test's store."""
    hook = MlflowTrackingHook()
    hook._project_path, hook._config, hook._env = tmp_path, {}, env
    hook._globals = {"dataset": "digits", "protocol": env}
    catalog = Catalog({"params:evaluation": {"n_bins": n_bins}, "params:calibrators": CALIBRATORS})
    hook._start(
        {"pipeline_names": ["focal"], "run_id": run_id},
        catalog=catalog,
        uri=f"sqlite:///{tmp_path}/mlflow.db",
        pipeline=pipeline,
    )
    return hook


def client(tmp_path) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")


def train(hook, method="ce", seed=0, *, fingerprint="f1", reused=False) -> None:
    """A training node of (method, seed) as Kedro runs it: started, ran, outputs saved."""
    node = SimpleNamespace(
        name=f"{method}.train_seed_{seed}",
        namespace=method,
        tags={"training"},
        outputs=[f"{method}.seed_{seed}.checkpoint", f"{method}.seed_{seed}.history"],
    )
    checkpoint = {
        "method": method,
        "seed": seed,
        "selected_epoch": 2,
        "resumed_after_epoch": 2 if reused else 0,
        "config": {"training": {"epochs": 2}},
        "provenance": {"fingerprint": fingerprint, "run_id": hook._kedro_run_id},
    }
    history = pd.DataFrame({"epoch": [1, 2], "val_accuracy": [0.5, 0.9]})
    outputs = dict(zip(node.outputs, (checkpoint, history)))
    hook.before_node_run(node=node, catalog=None, inputs={})
    hook.after_node_run(node=node, catalog=None, inputs={}, outputs=outputs)
    for name in outputs:
        hook.after_dataset_saved(dataset_name=name, data=None, node=node)


def score(hook, study: str, values: dict[tuple[str, int, str], float], fingerprint="f1") -> None:
    """A study's evaluation: the logits of its runs loaded, its tidy metrics table saved.
    ``values``: (method, seed, calibrator) -> test ECE (uncalibrated: 0.5)."""
    for method, seed in {(m, s) for m, s, _ in values}:
        hook.after_dataset_loaded(
            dataset_name=f"{method}.seed_{seed}.logits",
            data={"test": {}, "provenance": {"fingerprint": fingerprint, "run_id": "r"}},
            node=None,
        )
    uncalibrated = {(method, seed, "none"): 0.5 for method, seed, _ in values}
    rows = [
        (method, seed, "r", calibrator, "test", "none", 0, metric, value)
        for (method, seed, calibrator), ece in {**uncalibrated, **values}.items()
        for metric, value in (("ece", ece), ("accuracy", 0.9), ("nll", 1.0))
    ]
    table = pd.DataFrame(
        rows,
        columns=TIDY_COLUMNS,
    )
    node = SimpleNamespace(
        name=f"{study}.evaluate",
        namespace=study,
        tags={"reporting", "evaluation"},
        outputs=[f"{study}.metrics"],
    )
    hook.after_dataset_saved(dataset_name=f"{study}.metrics", data=table, node=node)


def finish(hook) -> str:
    parent = hook._parent
    hook.after_pipeline_run(run_params={}, run_result={}, pipeline=None, catalog=None)
    return parent


def nested_runs(tmp_path, **tags: str) -> list:
    conditions = ["tags.method LIKE '%'"] + [f"tags.`{k}` = '{v}'" for k, v in tags.items()]
    return client(tmp_path).search_runs(
        [client(tmp_path).get_experiment_by_name("calib-pipeline").experiment_id],
        filter_string=" and ".join(conditions),
    )


def test_a_new_experiment_opens_on_runs_and_an_existing_one_gets_the_kind(tmp_path):
    store = client(tmp_path)
    existing = store.create_experiment("calib-pipeline")
    started(tmp_path, "s1")
    kind = store.get_experiment(existing).tags["mlflow.experimentKind"]
    assert kind == "custom_model_development", "added where it was missing"
    store.set_experiment_tag(existing, "mlflow.experimentKind", "genai_development")
    started(tmp_path, "s2")
    assert store.get_experiment(existing).tags["mlflow.experimentKind"] == "genai_development", (
        "a kind a user chose is kept"
    )
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    hook = started(fresh, "s3")
    tags = client(fresh).get_experiment(hook._experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"


def test_nested_runs_say_which_studies_env_protocol_dataset_and_training_they_belong_to(
    tmp_path,
):
    from kedro.pipeline import Pipeline, node

    def same(runs):
        return runs

    pipeline = Pipeline(
        [
            node(same, "ce.seed_0.logits", "ce.runs_for_focal", name="ce.collect_focal"),
            node(same, "ce.seed_0.model", "ce.runs_for_dark_side", name="ce.collect_dark"),
        ]
    )
    hook = started(tmp_path, "s1", env="cifar10", pipeline=pipeline)
    train(hook)
    (run,) = nested_runs(tmp_path)
    tags = run.data.tags
    assert tags["studies"] == "dark_side,focal"
    assert (tags["kedro.env"], tags["protocol"], tags["dataset"]) == (
        "cifar10",
        "cifar10",
        "digits",
    )
    assert (tags["kedro.training_run_id"], tags["calib.fingerprint"]) == ("s1", "f1")
    assert tags["mlflow.parentRunId"] == hook._parent


def test_a_rescoring_updates_the_trainings_nested_run_instead_of_adding_one(tmp_path):
    first = started(tmp_path, "s1")
    train(first)
    score(first, "focal", {("ce", 0, "ts"): 0.05})
    finish(first)
    (trained,) = nested_runs(tmp_path)
    rescoring = started(tmp_path, "s2")  # kedro run --pipelines=posthoc,reporting
    score(rescoring, "focal", {("ce", 0, "ts"): 0.04})
    parent = finish(rescoring)
    (run,) = nested_runs(tmp_path)
    assert run.info.run_id == trained.info.run_id, "no second row for the same training"
    assert run.data.metrics["test.ece.ts"] == pytest.approx(0.04), "the latest scoring shows"
    history = client(tmp_path).get_metric_history(run.info.run_id, "test.ece.ts")
    assert sorted(m.value for m in history) == pytest.approx([0.04, 0.05]), "both kept"
    assert run.data.tags["calib.scored_by"] == parent
    assert run.data.metrics["final_val_accuracy"] == 0.9, "still the training's row"
    summary = client(tmp_path).get_run(parent).data.metrics
    assert summary["focal.ce.test.ece.ts"] == pytest.approx(0.04), "the study's means as before"


def test_a_rerun_that_reuses_a_finished_training_leaves_one_row(tmp_path):
    first = started(tmp_path, "s1")
    train(first)
    score(first, "focal", {("ce", 0, "ts"): 0.05})
    finish(first)
    (trained,) = nested_runs(tmp_path)
    rerun = started(tmp_path, "s2")  # e.g. kedro run --pipelines=focal after adding a method
    train(rerun, reused=True)
    train(rerun, "new_method", fingerprint="f9")
    score(rerun, "focal", {("ce", 0, "ts"): 0.05, ("new_method", 0, "ts"): 0.03})
    parent = finish(rerun)
    rows = {r.data.tags["method"]: r for r in nested_runs(tmp_path)}
    assert sorted(rows) == ["ce", "new_method"]
    assert rows["ce"].info.run_id == trained.info.run_id
    assert rows["ce"].data.tags["calib.reused_by"] == parent
    assert rows["new_method"].data.tags["mlflow.parentRunId"] == parent
    deleted = client(tmp_path).search_runs(
        [rerun._experiment_id],
        filter_string=f"tags.method = 'ce' and tags.`mlflow.parentRunId` = '{parent}'",
        run_view_type=mlflow.entities.ViewType.DELETED_ONLY,
    )
    assert len(deleted) == 1, "the rerun's duplicate of the reused training is deleted"


def test_a_rerun_without_an_earlier_tracked_training_keeps_its_own_row(tmp_path):
    rerun = started(tmp_path, "s2")  # the training was made while tracking was off
    train(rerun, reused=True)
    score(rerun, "focal", {("ce", 0, "ts"): 0.05})
    finish(rerun)
    (run,) = nested_runs(tmp_path)
    assert run.data.tags["calib.training"] == "reused" and "test.ece.ts" in run.data.metrics


@pytest.mark.parametrize(
    ("change", "settings"),
    [
        ("other evaluation settings", {"n_bins": 20}),
        ("another environment", {"env": "base"}),
        ("another training", {"fingerprint": "f2"}),
    ],
)
def test_scores_of_another_definition_or_training_never_replace_a_rows_numbers(
    tmp_path, change, settings
):
    first = started(tmp_path, "s1")
    train(first)
    score(first, "focal", {("ce", 0, "ts"): 0.05})
    finish(first)
    (trained,) = nested_runs(tmp_path)
    hook_settings = {k: v for k, v in settings.items() if k != "fingerprint"}
    second = started(tmp_path, "s2", **hook_settings)
    score(second, "focal", {("ce", 0, "ts"): 0.02}, fingerprint=settings.get("fingerprint", "f1"))
    parent = finish(second)
    rows = {r.info.run_id: r for r in nested_runs(tmp_path)}
    assert rows[trained.info.run_id].data.metrics["test.ece.ts"] == pytest.approx(0.05), change
    (added,) = [r for r in rows.values() if r.data.tags["mlflow.parentRunId"] == parent]
    assert added.data.tags["calib.training"] == "reused"
    assert added.data.metrics["test.ece.ts"] == pytest.approx(0.02)
    linked = added.data.tags.get("calib.training_mlflow_run")
    assert linked == (trained.info.run_id if change == "other evaluation settings" else None)


def test_calibrator_keys_are_the_same_in_every_study_with_a_shared_family_key(tmp_path):
    hook = started(tmp_path, "s1")
    train(hook, "ce", 0)
    train(hook, "focal_gamma_3", 0)
    # focal scores with Mukhoti's grid TS, focal_meta with NLL TS; ce is in both
    score(
        hook,
        "focal",
        {("ce", 0, "ts_grid_mukhoti"): 0.02, ("focal_gamma_3", 0, "ts_grid_mukhoti"): 0.03},
    )
    score(hook, "focal_meta", {("ce", 0, "ts"): 0.04, ("ce", 0, "hist_binning"): 0.01})
    score(hook, "focal", {("ce", 0, "ts_grid_mukhoti"): 0.02})  # order does not matter
    finish(hook)
    rows = {r.data.tags["method"]: r.data for r in nested_runs(tmp_path)}
    shared = rows["ce"]
    assert shared.metrics["test.ece.ts"] == pytest.approx(0.04)
    assert shared.metrics["test.ece.ts_grid_mukhoti"] == pytest.approx(0.02)
    assert shared.metrics["test.ece.temperature_scaling"] == pytest.approx(0.04), (
        "the first family member of `calibrators:` the run was scored with"
    )
    assert shared.tags["calibrator.temperature_scaling"] == "ts"
    assert "test.ece.hist_binning" in shared.metrics, "no family: its own key only"
    alone = rows["focal_gamma_3"]
    assert alone.metrics["test.ece.temperature_scaling"] == pytest.approx(0.03)
    assert alone.tags["calibrator.temperature_scaling"] == "ts_grid_mukhoti"
    assert alone.metrics["test.accuracy.temperature_scaling"] == 0.9


def test_a_failed_parent_run_says_why(tmp_path):
    from calib_pipeline.hooks import MissingInputsError

    hook = started(tmp_path, "s1")
    parent = hook._parent
    train(hook)
    error = MissingInputsError("ce.seed_0.logits does not exist yet\n  details")
    hook.on_pipeline_error(error=error, run_params={}, pipeline=None, catalog=None)
    run = client(tmp_path).get_run(parent)
    assert run.info.status == "FAILED"
    assert run.data.tags["calib.failure"] == (
        "MissingInputsError: ce.seed_0.logits does not exist yet"
    )
    assert run.data.tags["mlflow.note.content"].startswith("Failed: MissingInputsError")


@pytest.mark.slow
def test_a_run_the_preflight_refuses_leaves_no_mlflow_run(tmp_path):
    from tests.test_end_to_end import kedro

    database = tmp_path / "mlflow.db"
    result = kedro(
        "--pipelines=baseline.reporting",
        data_dir=tmp_path / "data",
        tracking=f"sqlite:///{database}",
        check=False,
    )
    assert result.returncode != 0 and "do not exist yet" in result.stdout + result.stderr
    store = client(tmp_path)
    experiment = store.get_experiment_by_name("calib-pipeline")
    assert experiment is None or not store.search_runs([experiment.experiment_id])


def test_pruning_keeps_a_nested_run_that_a_kept_run_rescored(tmp_path):
    from calib_pipeline.retention import stale_runs

    first = started(tmp_path, "2026-01-01T00.00.00.000Z")
    train(first)
    score(first, "focal", {("ce", 0, "ts"): 0.05})
    old_parent = finish(first)
    second = started(tmp_path, "2026-01-02T00.00.00.000Z")
    score(second, "focal", {("ce", 0, "ts"): 0.04})
    finish(second)
    (trained,) = nested_runs(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    stale = stale_runs(uri, pruned={"2026-01-01T00.00.00.000Z"}, kept=set())
    assert stale == [old_parent], "the training's row stays with its later scores"
    both = {"2026-01-01T00.00.00.000Z", "2026-01-02T00.00.00.000Z"}
    assert trained.info.run_id in stale_runs(uri, pruned=both, kept=set())


def documented_snippet() -> str:
    text = (Path(project_root()) / "docs" / "tracking.md").read_text()
    found = re.search(r"<!-- compare-methods snippet.*?-->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/tracking.md has the compare-methods snippet"
    return found.group(1)


def test_the_documented_compare_methods_search_gives_one_row_per_method(tmp_path, monkeypatch):
    """Seeds of two methods of `focal` in `base`, re-scored once; a `focal_meta`-only method
    and a test-env run that the search must leave out."""
    from kedro.pipeline import Pipeline, node

    def same(runs):
        return runs

    collect = [
        node(same, f"{m}.seed_0.logits", f"{m}.runs_for_{study}", name=f"{m}.collect_{study}")
        for m, study in (("ce", "focal"), ("focal_gamma_3", "focal"), ("fm_ce", "focal_meta"))
    ]
    base = started(tmp_path, "s1", env="base", pipeline=Pipeline(collect))
    values = {}
    for seed, (ce, focal) in enumerate(((0.10, 0.02), (0.20, 0.04))):
        for method, ece in (("ce", ce), ("focal_gamma_3", focal), ("fm_ce", 0.5)):
            train(base, method, seed, fingerprint=f"{method}{seed}")
            values[(method, seed, "ts")] = ece
    for (method, seed, calibrator), ece in values.items():
        score(base, "focal", {(method, seed, calibrator): ece}, fingerprint=f"{method}{seed}")
    finish(base)
    rescoring = started(tmp_path, "s2", env="base", pipeline=Pipeline(collect))
    score(rescoring, "focal", {("ce", 0, "ts"): 0.30}, fingerprint="ce0")
    finish(rescoring)
    other_env = started(tmp_path, "s3", env="test", pipeline=Pipeline(collect))
    train(other_env, "ce", 0, fingerprint="test0")
    score(other_env, "focal", {("ce", 0, "ts"): 0.9}, fingerprint="test0")
    finish(other_env)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    namespace: dict = {}
    exec(documented_snippet(), namespace)  # the documented recipe, as written
    comparison = namespace["comparison"]
    assert list(comparison.index) == ["focal_gamma_3", "ce"], "sorted by the family key"
    family = comparison[("metrics.test.ece.temperature_scaling", "mean")]
    assert family["ce"] == pytest.approx(0.25), "seed 0's re-scoring, seed 1: one row each"
    assert family["focal_gamma_3"] == pytest.approx(0.03)
    assert comparison[("metrics.test.ece.temperature_scaling", "count")].tolist() == [2, 2]
