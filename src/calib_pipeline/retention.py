"""Retention: keep the newest N versions of every versioned artifact and what they were
made from, prune the rest.

Kedro keeps every version of a versioned dataset forever: each ``kedro run`` adds a full
copy of every checkpoint, logits file and report. This command keeps the newest ``--keep``
versions of each artifact (a folder whose entries are Kedro save versions), and the versions
of earlier stages they were made from (:func:`plan`), and deletes the other versions; then
it deletes the MLflow runs of versions no artifact keeps (their nested runs and artifacts
too), the run logs and save-version claims of the pruned versions, and compacts the SQLite
store. Versions of runs still writing (their save-version claim is locked) are left out
entirely: they are neither pruned nor counted among the newest. It only prints what it
would do unless ``--apply`` is given.

    python -m calib_pipeline.retention --keep 3            # dry run: what would go, and its size
    python -m calib_pipeline.retention --keep 3 --apply    # delete it
    python -m calib_pipeline.retention --keep 3 --resume-states  # and finished resume states
                                                           # no kept checkpoint was trained with
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from calib_pipeline.settings import RUN_LOCK, SAVE_VERSION_CLAIMS, data_root, project_root

VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}\.\d{2}\.\d{2}\.\d{3}Z$")
NEVER_PRUNED = ("01_raw",)  # the user's data


@dataclass
class Plan:
    """Versions to delete per artifact folder, and the versions kept anywhere."""

    delete: dict[Path, list[str]] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)

    @property
    def paths(self) -> list[Path]:
        return [
            folder / version for folder, versions in self.delete.items() for version in versions
        ]


def versioned_folders(data_dir: Path) -> list[Path]:
    """Folders whose entries are all Kedro save versions (one per versioned artifact)."""
    folders = []
    for folder, subfolders, files in os.walk(data_dir):
        path = Path(folder)
        if path == data_dir:
            subfolders[:] = [
                d for d in subfolders if d not in NEVER_PRUNED and not d.startswith(".")
            ]
            continue
        if subfolders and not files and all(VERSION.match(d) for d in subfolders):
            folders.append(path)
            subfolders[:] = []  # a version's contents are not artifacts of their own
    return sorted(folders)


# Stage of each per-run artifact (file name under <layer>/<protocol>/<method>/<seed>/): an
# artifact is made from artifacts of lower stages (catalog: conf/base/catalog.yml).
RUN_ARTIFACT_STAGES = {
    "checkpoint.pt": 1,
    "history.parquet": 1,  # training, from the split
    "logits.pt": 2,
    "shift_logits.pt": 2,  # from the checkpoint and the split
    "calibrators.pt": 3,  # from the logits
}
# Under 08_reporting/<protocol>/<study>/: the study's evaluation tables, from which its
# reports are made.
EVALUATION_ARTIFACTS = ("metrics.parquet", "reliability_bins.parquet")
SPLIT_STAGE, EVALUATION_STAGE, REPORT_STAGE = 0, 4, 5


@dataclass(frozen=True)
class Lineage:
    """Where an artifact folder sits: its stage, protocol and run ((method, seed); None for
    splits and study reports, which span the runs of their protocol)."""

    stage: int
    protocol: str
    run: tuple[str, str] | None

    def reads(self, other: Lineage) -> bool:
        """Whether an artifact here may have been made from ``other``'s artifact."""
        return (
            other.protocol == self.protocol
            and other.stage < self.stage
            and (other.run is None or self.run is None or other.run == self.run)
        )


def lineage(folder: Path, data_dir: Path) -> Lineage | None:
    """The :class:`Lineage` of a versioned folder of the catalog's layout; None for others
    (e.g. ``score`` reports, made from a user's file)."""
    parts = folder.relative_to(data_dir).parts
    if len(parts) == 4 and parts[0] == "02_intermediate" and parts[2] == "splits":
        return Lineage(SPLIT_STAGE, parts[1], None)
    if (
        len(parts) == 5
        and parts[0] in ("06_models", "07_model_output")
        and parts[4] in RUN_ARTIFACT_STAGES
    ):
        return Lineage(RUN_ARTIFACT_STAGES[parts[4]], parts[1], (parts[2], parts[3]))
    if len(parts) >= 3 and parts[0] == "08_reporting" and parts[1] != "score":
        evaluation = len(parts) == 4 and parts[3] in EVALUATION_ARTIFACTS
        return Lineage(EVALUATION_STAGE if evaluation else REPORT_STAGE, parts[1], None)
    return None


# A running ``kedro run`` holds RUN_LOCK of its save-version claim locked
# (``settings.claim_save_version``).
CLAIMS_FOLDER, LOGS_FOLDER = SAVE_VERSION_CLAIMS, "logs"


def active_versions(data_dir: Path) -> set[str]:
    """Save versions of runs writing now: their claim's lock is held by a live process."""
    claims = data_dir / CLAIMS_FOLDER
    if not claims.is_dir():
        return set()
    return {folder.name for folder in claims.iterdir() if _locked(folder, RUN_LOCK)}


def plan(data_dir: Path, keep: int, active: set[str] | frozenset[str] = frozenset()) -> Plan:
    """What ``--keep`` deletes under ``data_dir`` (nothing is touched).

    The versions in ``active`` (runs still writing, :func:`active_versions`) are not seen at
    all: a run's half-written versions would otherwise count among the newest and push out
    the versions a kept report was made from.

    Each artifact keeps its newest ``keep`` versions, and every kept version keeps what it
    may have been made from: in each artifact of an earlier stage of its protocol (its own
    run's, or every run's for a study report), the newest version not newer than it -- the
    version that was "latest" when its run loaded it. So a kept checkpoint keeps the split it
    was trained on, and kept logits the checkpoint they came from, even where later runs
    made newer versions of those. (A run that read a version pinned with ``--load-versions``
    or saved by a concurrent run is not traced: retention keeps the version its timestamp
    implies.)
    """
    if keep < 1:
        raise ValueError(f"--keep must be at least 1, got {keep}")
    folders = {  # newest first
        folder: sorted((p.name for p in folder.iterdir() if p.name not in active), reverse=True)
        for folder in versioned_folders(data_dir)
    }
    lineages = {folder: lineage(folder, data_dir) for folder in folders}
    kept = {folder: set(versions[:keep]) for folder, versions in folders.items()}
    todo = [(folder, version) for folder, versions in kept.items() for version in versions]
    while todo:  # stages strictly decrease along the way, so this ends
        folder, version = todo.pop()
        made = lineages[folder]
        if made is None:
            continue
        for source, versions in folders.items():
            if lineages[source] is None or not made.reads(lineages[source]):
                continue
            read = next((v for v in versions if v <= version), None)
            if read is not None and read not in kept[source]:
                kept[source].add(read)
                todo.append((source, read))
    result = Plan()
    for folder, versions in folders.items():
        result.kept.update(kept[folder])
        pruned = [v for v in versions if v not in kept[folder]]
        if pruned:
            result.delete[folder] = pruned
    return result


def stale_resume_states(data_dir: Path, todo: Plan) -> list[Path]:
    """Resume folders (``06_models/<protocol>/resume/<method>/<seed>/<configuration>/``) of
    completed trainings that no checkpoint kept by ``todo`` was trained with.

    A folder is kept while its configuration fingerprint is that of a kept checkpoint of its
    (method, seed) -- a rerun of that configuration then reuses it instead of training --,
    while its training is unfinished (an interrupted run resumes from it), while a process
    holds its lock, and when its state cannot be read (never deleted on a guess).
    """
    stale = []
    for run_dir in sorted(data_dir.glob("06_models/*/resume/*/*")):
        protocol, method, seed = run_dir.parts[-4], run_dir.parts[-2], run_dir.parts[-1]
        checkpoints = data_dir / "06_models" / protocol / method / seed / "checkpoint.pt"
        pruned = set(todo.delete.get(checkpoints, []))
        kept = [
            v
            for v in (sorted(p.name for p in checkpoints.iterdir()) if checkpoints.is_dir() else [])
            if v not in pruned and VERSION.match(v)
        ]
        trained_with = {_checkpoint_fingerprint(checkpoints / v / "checkpoint.pt") for v in kept}
        for folder in sorted(p for p in run_dir.iterdir() if p.is_dir()):
            if folder.name not in trained_with and _completed_state(folder) and not _locked(folder):
                stale.append(folder)
    return stale


def _checkpoint_fingerprint(path: Path) -> str | None:
    """The configuration fingerprint in a checkpoint's provenance record (None if unreadable);
    memory-mapped, so the weights are not read."""
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return str(checkpoint["provenance"]["fingerprint"])
    except Exception:  # noqa: BLE001 -- an unreadable checkpoint names no configuration
        return None


def _completed_state(folder: Path) -> bool:
    import torch

    try:
        state = torch.load(folder / "latest.pt", map_location="cpu", weights_only=True, mmap=True)
        return state.get("complete") is True
    except Exception:  # noqa: BLE001 -- missing or unreadable: not known to be complete
        return False


def _locked(folder: Path, name: str = ".lock") -> bool:
    """Whether a process holds the folder's lock file now (a training's ``CheckpointStore.lock``,
    a run's :data:`RUN_LOCK`)."""
    lock = folder / name
    if not lock.exists():
        return False
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stale_run_records(data_dir: Path, todo: Plan, keep: int, active: set[str]) -> list[Path]:
    """Run logs (``<data>/logs/<version>.log``) and save-version claims
    (``<data>/.save_versions/<version>``) that this pruning makes stale: those of versions no
    artifact keeps, that no run holds and that are not among the ``keep`` newest runs (a
    run that failed before saving anything keeps its log until newer runs push it out)."""
    records: dict[str, list[Path]] = {}
    for path in sorted((data_dir / LOGS_FOLDER).glob("*.log")):
        records.setdefault(path.stem, []).append(path)
    claims = data_dir / CLAIMS_FOLDER
    for path in sorted(claims.iterdir()) if claims.is_dir() else []:
        records.setdefault(path.name, []).append(path)
    versions = sorted((v for v in records if VERSION.match(v)), reverse=True)
    newest = set(versions[:keep])
    return [
        path
        for version in versions
        if version not in todo.kept | active | newest
        for path in records[version]
    ]


def compact_store(tracking_uri: str) -> None:
    """After deleting runs: ``VACUUM`` a SQLite store (deleted rows otherwise keep their
    space) and remove the empty run and experiment folders left in ``mlruns/`` beside it."""
    import sqlite3

    if not tracking_uri.startswith("sqlite:///"):
        return  # a server compacts its own store
    database = Path(tracking_uri[len("sqlite:///") :])
    with sqlite3.connect(database) as connection:
        connection.execute("VACUUM")
    artifacts = database.parent / "mlruns"
    for folder in sorted(artifacts.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def stale_runs(
    tracking_uri: str, pruned: set[str], kept: set[str], experiment: str = "calib-pipeline"
) -> list[str]:
    """Parent runs (``kedro.run_id`` = save version) of the versions this pruning deletes
    and no artifact keeps, with their nested runs; runs still running are never listed.

    Only ``pruned`` versions: the store is the project's, not the data folder's, so a run
    whose version this folder never held (another ``CALIB_DATA_DIR``, a ``--data`` typo)
    is none of this pruning's business. A nested run that a later, kept run re-scored or
    reused (tags ``calib.scored_by`` / ``calib.reused_by``, docs/tracking.md) stays: it is
    that training's row in MLflow, and the later run added none of its own."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs([found.experiment_id], max_results=50_000)
    parents = {
        r.info.run_id
        for r in runs
        if "mlflow.parentRunId" not in r.data.tags
        and r.info.status != "RUNNING"
        and r.data.tags.get("kedro.run_id") in pruned - kept
    }
    children = {
        r.info.run_id
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") in parents
        and not _used_by_a_kept_run(r.data.tags, parents)
    }
    return sorted(parents | children)


def _used_by_a_kept_run(tags: dict[str, str], deleted: set[str]) -> bool:
    """Whether a later parent run that is not deleted re-scored or reused this nested run."""
    users = (tags.get("calib.scored_by"), tags.get("calib.reused_by"))
    return any(user is not None and user not in deleted for user in users)


def delete_runs(tracking_uri: str, run_ids: list[str]) -> None:
    """Delete runs and their artifacts for good (MLflow's ``gc`` after a soft delete)."""
    import subprocess

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for run_id in run_ids:
        client.delete_run(run_id)
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "gc",
        "--backend-store-uri",
        tracking_uri,
        "--tracking-uri",
        tracking_uri,
        "--run-ids",
        ",".join(run_ids),
    ]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"mlflow gc failed: {result.stderr.strip().splitlines()[-1:]}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m calib_pipeline.retention", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--keep", type=int, default=3, help="versions kept per artifact (default 3)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(data_root()),
        help="data folder (default: CALIB_DATA_DIR or data/)",
    )
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI")
        or f"sqlite:///{Path(project_root()) / 'mlflow.db'}",
    )
    parser.add_argument("--no-mlflow", action="store_true", help="leave MLflow runs alone")
    parser.add_argument(
        "--resume-states",
        action="store_true",
        help="also delete completed resume states of configurations no kept checkpoint "
        "was trained with",
    )
    parser.add_argument(
        "--apply", action="store_true", help="delete (default: only print the plan)"
    )
    return parser


def _delete(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        parser.error(f"--data {args.data}: no such folder (set CALIB_DATA_DIR or pass --data)")
    active = active_versions(args.data)
    try:
        todo = plan(args.data, args.keep, active)
    except ValueError as error:
        parser.error(str(error))
    states = stale_resume_states(args.data, todo) if args.resume_states else []
    records = stale_run_records(args.data, todo, args.keep, active)
    doomed = [*todo.paths, *states, *records]
    for path in doomed:
        print(f"{'delete' if args.apply else 'would delete'} {path}")
    pruned = {path.name for path in todo.paths}
    runs = [] if args.no_mlflow else stale_runs(args.tracking_uri, pruned, todo.kept)
    if active:
        print(f"left alone: {len(active)} run(s) writing now ({', '.join(sorted(active))})")
    print(
        f"{len(todo.paths)} version folder(s), {len(states)} resume state(s), "
        f"{len(records)} run log(s) and save-version claim(s), "
        f"{sum(size(path) for path in doomed) / 2**20:.1f} MiB; "
        f"{len(runs)} MLflow run(s) of pruned versions"
    )
    if not args.apply:
        print("dry run: nothing deleted (add --apply)")
        return 0
    _delete(doomed)
    if runs:
        delete_runs(args.tracking_uri, runs)
        compact_store(args.tracking_uri)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
