"""Retention keeps the newest N versions per artifact and prunes MLflow runs of the rest."""

from __future__ import annotations

import mlflow
import pytest

from calib_pipeline.retention import (
    Lineage,
    lineage,
    main,
    plan,
    stale_resume_states,
    versioned_folders,
)

VERSIONS = ["2026-11-20T10.00.00.000Z", "2026-11-21T10.00.00.000Z", "2026-11-22T10.00.00.000Z"]


@pytest.fixture
def data_dir(tmp_path):
    data = tmp_path / "data"
    for version in VERSIONS:
        (data / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt" / version).mkdir(parents=True)
        (data / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt" / version / "checkpoint.pt").write_bytes(b"x" * 1000)
        report = data / "08_reporting" / "digits" / "focal" / "summary" / version / "summary"
        report.mkdir(parents=True)
        (report / "summary.csv").write_text("a,b\n")
    # the newest run wrote only a report: its version is kept by that artifact alone
    newest = "2026-11-23T10.00.00.000Z"
    (data / "08_reporting" / "digits" / "focal" / "summary" / newest / "summary").mkdir(parents=True)
    (data / "01_raw" / "digits" / VERSIONS[0]).mkdir(parents=True)  # looks versioned, is user data
    (data / "02_intermediate" / "digits").mkdir(parents=True)
    (data / "02_intermediate" / "digits" / "split_standard.json").write_text("{}")
    return data


def test_plan_keeps_the_newest_versions_per_artifact_and_never_raw_data(data_dir):
    folders = versioned_folders(data_dir)
    assert [f.name for f in folders] == ["checkpoint.pt", "summary"]
    todo = plan(data_dir, keep=2)
    assert {f.name: v for f, v in todo.delete.items()} == {
        "checkpoint.pt": [VERSIONS[0]],
        "summary": [VERSIONS[1], VERSIONS[0]],
    }
    assert todo.kept == {VERSIONS[1], VERSIONS[2], "2026-11-23T10.00.00.000Z"}
    with pytest.raises(ValueError, match="--keep must be at least 1"):
        plan(data_dir, keep=0)


def version_folders(data, *artifacts_and_versions):
    for artifact, versions in artifacts_and_versions:
        for version in versions:
            (data / artifact / version).mkdir(parents=True)
            (data / artifact / version / "x").write_text("x")


def test_kept_versions_keep_the_versions_of_earlier_stages_they_were_made_from(tmp_path):
    v = [f"2026-11-2{day}T10.00.00.000Z" for day in range(6)]
    data = tmp_path / "data"
    split = "02_intermediate/digits/splits/standard.json"
    checkpoint, logits = "06_models/digits/ce/seed_0/checkpoint.pt", "07_model_output/digits/ce/seed_0/logits.pt"
    other_checkpoint = "06_models/digits/focal/seed_0/checkpoint.pt"
    report, fashion_split = "08_reporting/digits/focal/summary", "02_intermediate/fashion_mnist/splits/standard.json"
    version_folders(
        data,
        (split, [v[0], v[2], v[3], v[4]]),  # the split was remade by later runs
        (checkpoint, [v[0], v[1]]),  # trained at v0 on split v0; v1 reused split v0
        (logits, [v[1], v[2]]),  # made at v2 from the checkpoint of v1
        (other_checkpoint, [v[0], v[3]]),
        (report, [v[0], v[2], v[5]]),
        (fashion_split, [v[0], v[1]]),
    )
    todo = plan(data, keep=1)
    kept = {str(folder.relative_to(data)): sorted(set(folder_versions(folder)) - set(todo.delete.get(folder, [])))
            for folder in versioned_folders(data)}
    assert kept == {
        # v4 newest; v0 read by the kept ce checkpoint, v2 by the kept logits, v3 by focal's checkpoint
        split: [v[0], v[2], v[3], v[4]],
        checkpoint: [v[1]],  # newest, and what the kept logits (v2) and report (v5) read
        logits: [v[2]],
        other_checkpoint: [v[3]],
        report: [v[5]],
        fashion_split: [v[1]],  # another protocol: digits' versions keep nothing of it
    }
    assert todo.kept == {v[0], v[1], v[2], v[3], v[4], v[5]}


def folder_versions(folder):
    return [p.name for p in folder.iterdir()]


def test_lineage_of_the_catalog_layout(tmp_path):
    data = tmp_path
    assert lineage(data / "02_intermediate/digits/splits/meta.json", data) == Lineage(0, "digits", None)
    assert lineage(data / "07_model_output/digits/ce/seed_1/shift_logits.pt", data) == Lineage(2, "digits", ("ce", "seed_1"))
    assert lineage(data / "06_models/digits/ce/seed_1/calibrators.pt", data) == Lineage(3, "digits", ("ce", "seed_1"))
    assert lineage(data / "08_reporting/digits/focal/table_1", data) == Lineage(4, "digits", None)
    assert lineage(data / "08_reporting/score/mine/metrics.parquet", data) is None  # from a user's file
    assert not Lineage(2, "digits", ("ce", "seed_1")).reads(Lineage(1, "digits", ("ce", "seed_0")))
    assert Lineage(4, "digits", None).reads(Lineage(1, "digits", ("ce", "seed_0")))
    assert not Lineage(1, "digits", ("ce", "seed_0")).reads(Lineage(2, "digits", ("ce", "seed_0")))


def test_dry_run_deletes_nothing_and_apply_deletes_old_versions_and_their_mlflow_runs(data_dir, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("calib-pipeline")
    runs = {}
    for version in VERSIONS:
        parent = client.create_run(experiment, tags={"kedro.run_id": version}).info.run_id
        child = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
        for run_id in (parent, child):
            client.set_terminated(run_id, "FINISHED")
        runs[version] = (parent, child)
    running = client.create_run(experiment, tags={"kedro.run_id": "2020-01-01T00.00.00.000Z"}).info.run_id
    # a run of another data folder (CALIB_DATA_DIR elsewhere): its version is not in this one
    elsewhere = client.create_run(experiment, tags={"kedro.run_id": "2019-05-05T00.00.00.000Z"}).info.run_id
    client.set_terminated(elsewhere, "FINISHED")

    assert main(["--keep", "2", "--data", str(data_dir), "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "would delete" in out and "3 version folder(s)" in out and "2 MLflow run(s)" in out
    assert (data_dir / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt" / VERSIONS[0]).exists()

    assert main(["--keep", "2", "--data", str(data_dir), "--tracking-uri", uri, "--apply"]) == 0
    checkpoint = data_dir / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt"
    assert sorted(p.name for p in checkpoint.iterdir()) == VERSIONS[1:]
    assert (data_dir / "01_raw" / "digits" / VERSIONS[0]).exists()
    remaining = {r.info.run_id for r in client.search_runs([experiment], max_results=100)}
    assert not set(runs[VERSIONS[0]]) & remaining, "runs of pruned versions are gone"
    assert set(runs[VERSIONS[1]]) | set(runs[VERSIONS[2]]) | {running, elsewhere} <= remaining

    empty = tmp_path / "other_data"  # pruning another folder touches no run of this one
    empty.mkdir()
    assert main(["--keep", "1", "--data", str(empty), "--tracking-uri", uri]) == 0
    assert "0 version folder(s), 0 resume state(s), 0.0 MiB; 0 MLflow run(s)" in capsys.readouterr().out


def test_resume_states_of_configurations_no_kept_checkpoint_used_are_pruned_only_when_asked(tmp_path, capsys):
    import fcntl

    import torch

    data = tmp_path / "data"
    old, new = VERSIONS[0], VERSIONS[1]
    checkpoints = data / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt"
    for version, configuration in ((old, "a0"), (new, "b1")):
        (checkpoints / version).mkdir(parents=True)
        torch.save({"provenance": {"fingerprint": configuration}, "weights": torch.zeros(3)},
                   checkpoints / version / "checkpoint.pt")
    resume = data / "06_models" / "digits" / "resume" / "ce" / "seed_0"
    for configuration, complete in (("a0", True), ("b1", True), ("c2", False), ("d3", True), ("e4", True)):
        (resume / configuration).mkdir(parents=True)
        torch.save({"complete": complete, "fingerprint": configuration}, resume / configuration / "latest.pt")
    (resume / "f5").mkdir()
    (resume / "f5" / "latest.pt").write_bytes(b"truncated")
    other_seed = data / "06_models" / "digits" / "resume" / "ce" / "seed_1" / "g6"  # no checkpoint kept at all
    other_seed.mkdir(parents=True)
    torch.save({"complete": True}, other_seed / "latest.pt")

    with open(resume / "d3" / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a training of configuration d3 is running
        todo = plan(data, keep=1)
        stale = stale_resume_states(data, todo)
        assert [p.relative_to(data / "06_models" / "digits" / "resume").as_posix() for p in stale] == [
            "ce/seed_0/a0",  # its checkpoint (the old version) is pruned
            "ce/seed_0/e4",  # finished, no checkpoint of it at all
            "ce/seed_1/g6",
        ]  # kept: b1 (the kept checkpoint's), c2 (unfinished), d3 (locked), f5 (unreadable)

        assert main(["--keep", "1", "--data", str(data), "--no-mlflow", "--apply"]) == 0
        assert "1 version folder(s), 0 resume state(s)" in capsys.readouterr().out
        assert (resume / "a0").exists(), "resume states are pruned only with --resume-states"
        assert main(["--keep", "1", "--data", str(data), "--no-mlflow", "--resume-states", "--apply"]) == 0
        assert "0 version folder(s), 3 resume state(s)" in capsys.readouterr().out
    assert sorted(p.name for p in resume.iterdir()) == ["b1", "c2", "d3", "f5"]
    assert not other_seed.exists() and sorted(p.name for p in checkpoints.iterdir()) == [new]


def test_a_data_folder_that_does_not_exist_is_an_error_not_an_empty_plan(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--data", str(tmp_path / "nowhere"), "--no-mlflow"])
    assert exit_.value.code == 2 and "nowhere: no such folder" in capsys.readouterr().err
