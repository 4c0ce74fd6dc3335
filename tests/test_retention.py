"""Retention keeps the newest N versions per artifact and prunes MLflow runs of the rest."""

from __future__ import annotations

import mlflow
import pytest

from calib_pipeline.retention import (
    RUN_LOCK,
    Lineage,
    active_versions,
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
        (data / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt" / version).mkdir(
            parents=True
        )
        (
            data
            / "06_models"
            / "digits"
            / "ce"
            / "seed_0"
            / "checkpoint.pt"
            / version
            / "checkpoint.pt"
        ).write_bytes(b"x" * 1000)
        report = data / "08_reporting" / "digits" / "focal" / "summary" / version / "summary"
        report.mkdir(parents=True)
        (report / "summary.csv").write_text("a,b\n")
    # the newest run wrote only a report: its version is kept by that artifact alone
    newest = "2026-11-23T10.00.00.000Z"
    (data / "08_reporting" / "digits" / "focal" / "summary" / newest / "summary").mkdir(
        parents=True
    )
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
    checkpoint, logits = (
        "06_models/digits/ce/seed_0/checkpoint.pt",
        "07_model_output/digits/ce/seed_0/logits.pt",
    )
    other_checkpoint = "06_models/digits/focal/seed_0/checkpoint.pt"
    report, fashion_split = (
        "08_reporting/digits/focal/summary",
        "02_intermediate/fashion_mnist/splits/standard.json",
    )
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
    kept = {
        str(folder.relative_to(data)): sorted(
            set(folder_versions(folder)) - set(todo.delete.get(folder, []))
        )
        for folder in versioned_folders(data)
    }
    assert kept == {
        # v4 newest; v0 read by the kept ce checkpoint, v2 by the kept logits, v3 by focal's
        # checkpoint
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
    assert lineage(data / "02_intermediate/digits/splits/meta.json", data) == Lineage(
        0, "digits", None
    )
    assert lineage(data / "07_model_output/digits/ce/seed_1/shift_logits.pt", data) == Lineage(
        2, "digits", ("ce", "seed_1")
    )
    assert lineage(data / "06_models/digits/ce/seed_1/calibrators.pt", data) == Lineage(
        3, "digits", ("ce", "seed_1")
    )
    assert lineage(data / "08_reporting/digits/focal/table_1", data) == Lineage(5, "digits", None)
    assert lineage(data / "08_reporting/digits/focal/metrics.parquet", data) == Lineage(
        4, "digits", None
    )
    # a report is made from its study's metrics table: a kept report keeps the table it read
    assert Lineage(5, "digits", None).reads(Lineage(4, "digits", None))
    assert (
        lineage(data / "08_reporting/score/mine/metrics.parquet", data) is None
    )  # from a user's file
    assert not Lineage(2, "digits", ("ce", "seed_1")).reads(Lineage(1, "digits", ("ce", "seed_0")))
    assert Lineage(4, "digits", None).reads(Lineage(1, "digits", ("ce", "seed_0")))
    assert not Lineage(1, "digits", ("ce", "seed_0")).reads(Lineage(2, "digits", ("ce", "seed_0")))


def test_dry_run_deletes_nothing_and_apply_deletes_old_versions_and_their_mlflow_runs(
    data_dir, tmp_path, capsys
):
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
    running = client.create_run(
        experiment, tags={"kedro.run_id": "2020-01-01T00.00.00.000Z"}
    ).info.run_id
    # a run of another data folder (CALIB_DATA_DIR elsewhere): its version is not in this one
    elsewhere = client.create_run(
        experiment, tags={"kedro.run_id": "2019-05-05T00.00.00.000Z"}
    ).info.run_id
    client.set_terminated(elsewhere, "FINISHED")

    assert main(["--keep", "2", "--data", str(data_dir), "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "would delete" in out and "3 version folder(s)" in out and "2 MLflow run(s)" in out
    assert (
        data_dir / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt" / VERSIONS[0]
    ).exists()

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
    assert (
        "0 version folder(s), 0 resume state(s), 0 run log(s) and save-version claim(s), 0.0 MiB; "
        "0 MLflow run(s)" in capsys.readouterr().out
    )


def test_resume_states_of_configurations_no_kept_checkpoint_used_are_pruned_only_when_asked(
    tmp_path, capsys
):
    import fcntl

    import torch

    data = tmp_path / "data"
    old, new = VERSIONS[0], VERSIONS[1]
    checkpoints = data / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt"
    for version, configuration in ((old, "a0"), (new, "b1")):
        (checkpoints / version).mkdir(parents=True)
        torch.save(
            {"provenance": {"fingerprint": configuration}, "weights": torch.zeros(3)},
            checkpoints / version / "checkpoint.pt",
        )
    resume = data / "06_models" / "digits" / "resume" / "ce" / "seed_0"
    for configuration, complete in (
        ("a0", True),
        ("b1", True),
        ("c2", False),
        ("d3", True),
        ("e4", True),
    ):
        (resume / configuration).mkdir(parents=True)
        torch.save(
            {"complete": complete, "fingerprint": configuration},
            resume / configuration / "latest.pt",
        )
    (resume / "f5").mkdir()
    (resume / "f5" / "latest.pt").write_bytes(b"truncated")
    other_seed = (
        data / "06_models" / "digits" / "resume" / "ce" / "seed_1" / "g6"
    )  # no checkpoint kept at all
    other_seed.mkdir(parents=True)
    torch.save({"complete": True}, other_seed / "latest.pt")

    with open(resume / "d3" / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a training of configuration d3 is running
        todo = plan(data, keep=1)
        stale = stale_resume_states(data, todo)
        assert [
            p.relative_to(data / "06_models" / "digits" / "resume").as_posix() for p in stale
        ] == [
            "ce/seed_0/a0",  # its checkpoint (the old version) is pruned
            "ce/seed_0/e4",  # finished, no checkpoint of it at all
            "ce/seed_1/g6",
        ]  # kept: b1 (the kept checkpoint's), c2 (unfinished), d3 (locked), f5 (unreadable)

        assert main(["--keep", "1", "--data", str(data), "--no-mlflow", "--apply"]) == 0
        assert "1 version folder(s), 0 resume state(s)" in capsys.readouterr().out
        assert (resume / "a0").exists(), "resume states are pruned only with --resume-states"
        assert (
            main(["--keep", "1", "--data", str(data), "--no-mlflow", "--resume-states", "--apply"])
            == 0
        )
        assert "0 version folder(s), 3 resume state(s)" in capsys.readouterr().out
    assert sorted(p.name for p in resume.iterdir()) == ["b1", "c2", "d3", "f5"]
    assert not other_seed.exists() and sorted(p.name for p in checkpoints.iterdir()) == [new]


def test_a_data_folder_that_does_not_exist_is_an_error_not_an_empty_plan(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--data", str(tmp_path / "nowhere"), "--no-mlflow"])
    assert exit_.value.code == 2 and "nowhere: no such folder" in capsys.readouterr().err


def held_lock(folder):
    """A run's lock on its save-version claim, held by this process (as a running kedro run
    holds it)."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / RUN_LOCK, "a+")  # noqa: SIM115 -- held until the test closes it
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return handle


def test_a_prune_during_a_run_keeps_the_tables_a_kept_report_was_made_from(tmp_path, capsys):
    # v0 and v1 finished; v2 is writing now: its metrics table exists, its report not yet
    v = [f"2026-11-2{day}T10.00.00.000Z" for day in range(3)]
    data = tmp_path / "data"
    study = "08_reporting/digits/focal_meta"
    version_folders(
        data,
        (f"{study}/metrics.parquet", v),
        (f"{study}/reliability_bins.parquet", v),
        (f"{study}/reliability", v[:2]),
    )
    running = held_lock(data / ".save_versions" / v[2])
    try:
        assert active_versions(data) == {v[2]}
        assert main(["--keep", "1", "--data", str(data), "--no-mlflow", "--apply"]) == 0
        assert f"left alone: 1 run(s) writing now ({v[2]})" in capsys.readouterr().out
        for artifact in ("metrics.parquet", "reliability_bins.parquet"):
            assert sorted(folder_versions(data / study / artifact)) == [v[1], v[2]]
        assert folder_versions(data / study / "reliability") == [v[1]]
    finally:
        running.close()
    assert active_versions(data) == set()  # the run ended: its claim is an ordinary one
    # without a run's lock the half-written version counts, but lineage still keeps v1's tables
    todo = plan(data, keep=1)
    assert not todo.delete.get(data / study / "metrics.parquet")


def test_pruning_removes_the_logs_and_claims_of_pruned_versions_but_not_a_running_one(
    tmp_path, capsys
):
    v = [f"2026-11-2{day}T10.00.00.000Z" for day in range(5)]
    data = tmp_path / "data"
    version_folders(data, ("06_models/digits/ce/seed_0/checkpoint.pt", v[:3]))
    for version in v:
        (data / "logs").mkdir(parents=True, exist_ok=True)
        (data / "logs" / f"{version}.log").write_text("log")
        (data / ".save_versions" / version).mkdir(parents=True)
    running = held_lock(data / ".save_versions" / v[0])  # an old run still going
    try:
        assert main(["--keep", "1", "--data", str(data), "--no-mlflow", "--apply"]) == 0
    finally:
        running.close()
    out = capsys.readouterr().out
    assert "4 run log(s) and save-version claim(s)" in out  # the logs and claims of v1 and v3
    logs = sorted(p.stem for p in (data / "logs").iterdir())
    claims = sorted(p.name for p in (data / ".save_versions").iterdir())
    # kept: v0 (running), v2 (its checkpoint is kept), v4 (the newest run, which saved nothing)
    assert logs == [v[0], v[2], v[4]]
    assert claims == [v[0], v[2], v[4]]


def test_deleting_runs_compacts_the_sqlite_store_and_removes_empty_run_folders(tmp_path):
    from calib_pipeline.retention import compact_store

    database = tmp_path / "mlflow.db"
    uri = f"sqlite:///{database}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment(
        "calib-pipeline", artifact_location=(tmp_path / "mlruns").as_uri()
    )
    run = client.create_run(experiment).info.run_id
    client.log_batch(run, params=[mlflow.entities.Param(f"p{i}", "x" * 400) for i in range(100)])
    client.delete_run(run)
    (tmp_path / "mlruns" / experiment / run / "artifacts").mkdir(parents=True)
    import sqlite3

    with sqlite3.connect(database) as connection:
        connection.execute("DELETE FROM params")
    before = database.stat().st_size
    compact_store(uri)
    assert database.stat().st_size < before
    assert not (tmp_path / "mlruns" / experiment).exists()
    assert (tmp_path / "mlruns").is_dir()
    compact_store("http://127.0.0.1:5000")  # a server's store is its own: nothing to do


def test_a_running_sessions_claimed_version_is_active_until_it_ends(tmp_path, monkeypatch):
    from calib_pipeline import settings

    monkeypatch.setenv("CALIB_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(settings, "_HELD_CLAIMS", [])
    version = settings.claim_save_version("2026-11-28T10.00.00.000Z")
    assert active_versions(tmp_path) == {version}  # what retention then leaves alone
    for lock in settings._HELD_CLAIMS:  # the process ends: the OS releases its locks
        lock.close()
    assert active_versions(tmp_path) == set()
