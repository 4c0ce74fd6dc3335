"""Protocol isolation: each environment's artifacts live under its protocol, so two
environments on one dataset keep their own "latest"; an environment that would share
another's protocol is refused when the pipelines are built; an artifact copied in from
another protocol's folder is refused when a node loads it."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from kedro.io import DataCatalog

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.data import dataset_names, load_dataset
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.hooks import SessionConfigHook
from calib_pipeline.pipelines.logits.nodes import compute_logits
from calib_pipeline.pipelines.provenance import ProvenanceError, check_run
from calib_pipeline.pipelines.run_info import run_info
from calib_pipeline.protocols import check_protocol, declared_protocols
from calib_pipeline.settings import config_loader, project_root
from calib_pipeline.training.provenance import run_configuration, training_provenance

PROJECT = Path(project_root())
CE = MethodSpec(key="ce", objective="cross_entropy", label="CE")


def message(error: pytest.ExceptionInfo) -> str:
    return " ".join(str(error.value).split())


@pytest.fixture
def conf(tmp_path) -> Path:
    """A copy of the project's conf/ to add environments to."""
    shutil.copytree(PROJECT / "conf", tmp_path / "conf")
    return tmp_path / "conf"


def protocol_of(conf: Path, env: str) -> str:
    loader = config_loader(env, conf.parent)
    return check_protocol(env, loader["globals"], conf, dataset_names())


# ------------------------------------------------------------------ declared per environment


def test_every_shipped_environment_declares_a_protocol_of_its_own():
    protocols = declared_protocols(PROJECT / "conf")
    assert protocols == {
        "base": "digits",
        "test": "test",
        "cifar10": "cifar10",
        "cifar100": "cifar100",
        "fashion_mnist": "fashion_mnist",
        "svhn": "svhn",
        "tiny_imagenet": "tiny_imagenet",
    }
    for env in [*protocols, "local"]:
        assert protocol_of(PROJECT / "conf", env) == (protocols.get(env) or "digits")


def test_a_new_environment_without_its_own_protocol_is_refused(conf):
    (conf / "cifar10_wrn").mkdir()
    shutil.copy(conf / "cifar10" / "parameters.yml", conf / "cifar10_wrn" / "parameters.yml")
    with pytest.raises(ValueError) as error:
        protocol_of(conf, "cifar10_wrn")
    assert message(error) == (
        "env 'cifar10_wrn' does not declare its own protocol: it would write its artifacts under "
        "protocol 'digits', into the folders of another environment, and mix with its results "
        '(the same "latest" checkpoints, logits and tables). Add `protocol: cifar10_wrn` (or '
        "another name of its own) to conf/cifar10_wrn/globals.yml."
    )


def test_a_copied_environment_folder_is_refused_until_it_names_its_own_protocol(conf):
    shutil.copytree(conf / "cifar10", conf / "cifar10_wrn")
    with pytest.raises(ValueError) as error:
        protocol_of(conf, "cifar10_wrn")
    assert message(error).startswith(
        "env 'cifar10_wrn' runs protocol 'cifar10', which conf/cifar10/globals.yml declares too "
        "(was conf/cifar10_wrn/ copied from conf/cifar10/?)"
    )
    globals_ = conf / "cifar10_wrn" / "globals.yml"
    globals_.write_text(globals_.read_text().replace("protocol: cifar10", "protocol: cifar10_wrn"))
    assert protocol_of(conf, "cifar10_wrn") == "cifar10_wrn"
    assert protocol_of(conf, "cifar10") == "cifar10", "the original keeps its own"


def test_local_inherits_base_protocol_only_while_it_keeps_base_dataset(conf):
    (conf / "local" / "globals.yml").write_text("dataset:\n  download: true\n")
    assert protocol_of(conf, "local") == "digits"
    (conf / "local" / "globals.yml").write_text("dataset:\n  name: fashion_mnist\n")
    with pytest.raises(ValueError, match="env 'local' does not declare its own protocol"):
        protocol_of(conf, "local")


def test_a_protocol_named_after_another_dataset_or_not_a_folder_name_is_refused(conf):
    shutil.rmtree(conf / "svhn")  # no environment declares it
    (conf / "test" / "globals.yml").write_text("protocol: svhn\n")
    with pytest.raises(
        ValueError, match="protocol 'svhn' of env 'test' is the name of another dataset"
    ):
        protocol_of(conf, "test")
    (conf / "test" / "globals.yml").write_text("protocol: ../digits\n")
    with pytest.raises(ValueError, match=r"protocol '\.\./digits' .* must start with a letter"):
        protocol_of(conf, "test")


def test_the_pipelines_are_not_built_for_a_copied_environment(conf, monkeypatch):
    from calib_pipeline import pipeline_registry

    shutil.copytree(conf / "test", conf / "test_copy")
    session = SessionConfigHook()  # as a session of env test_copy records it
    loader = config_loader("test_copy", conf.parent)
    session.after_context_created(SimpleNamespace(config_loader=loader, env="test_copy"))
    monkeypatch.setattr(pipeline_registry, "SESSION_CONFIG", session)
    with pytest.raises(
        ValueError, match=r"env 'test_copy' runs protocol 'test', which conf/test/globals\.yml"
    ):
        pipeline_registry.register_pipelines()


# ---------------------------------------------------------------- artifacts kept apart


def catalog_of(env: str, data_dir: Path, monkeypatch) -> DataCatalog:
    monkeypatch.setenv("CALIB_DATA_DIR", str(data_dir))
    return DataCatalog.from_config(config_loader(env, PROJECT)["catalog"])


def checkpoint(env: str, protocol: str, epochs: int, split_hash: str) -> dict:
    """A run's checkpoint as the training node records it (only what the checks read)."""
    config = run_configuration(
        CE,
        seed=0,
        dataset="digits",
        split_definition={"seed": 0, "fractions": {"train": 0.75, "val": 0.25}},
        model_params={"name": "small_cnn"},
        training_params={"epochs": epochs},
    )
    config = {**config, "split_hash": split_hash, "code": "c0de"}
    record = training_provenance(config, run_id=f"run-of-{env}", env=env, protocol=protocol)
    return {"method": "ce", "seed": 0, "epochs": epochs, "provenance": record}


def test_two_environments_on_one_dataset_keep_their_own_latest(tmp_path, monkeypatch):
    base, test = (
        catalog_of("local", tmp_path, monkeypatch),
        catalog_of("test", tmp_path, monkeypatch),
    )
    base.save("ce.seed_0.checkpoint", checkpoint("local", "digits", 20, "abc"))
    test.save("ce.seed_0.checkpoint", checkpoint("test", "test", 2, "abc"))  # saved later
    assert base.load("ce.seed_0.checkpoint")["epochs"] == 20
    assert test.load("ce.seed_0.checkpoint")["epochs"] == 2
    assert (tmp_path / "06_models" / "digits" / "ce" / "seed_0" / "checkpoint.pt").is_dir()
    assert (tmp_path / "06_models" / "test" / "ce" / "seed_0" / "checkpoint.pt").is_dir()


def test_a_checkpoint_copied_from_another_protocols_folder_is_refused(tmp_path, monkeypatch):
    digits = load_dataset("digits")
    split = split_dataset(digits, {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}})
    test = catalog_of("test", tmp_path, monkeypatch)
    test.save("ce.seed_0.checkpoint", checkpoint("test", "test", 2, split_fingerprint(split)))
    models = tmp_path / "06_models"
    shutil.copytree(models / "test" / "ce", models / "digits" / "ce")  # "use the test models"
    copied = catalog_of("local", tmp_path, monkeypatch).load("ce.seed_0.checkpoint")
    with pytest.raises(ProvenanceError) as error:
        compute_logits(digits, split, copied, {"device": "cpu"}, run_info("now", "local", "digits"))
    assert message(error).startswith(
        "ce.seed_0.checkpoint, trained by run run-of-test: made under protocol 'test', env "
        "'test', not under this session's protocol 'digits' (env 'local'). Each protocol keeps "
        "its artifacts in its own folders (data/06_models/<protocol>/...), so it was copied or "
        "moved here from another protocol's folder"
    )
    assert "kedro run --env=local --pipelines=<study>" in message(error)
    assert "kedro run --env=test)" in message(error)


def test_cached_artifacts_of_another_protocol_are_refused_by_posthoc_and_evaluation():
    record = checkpoint("cifar10_wrn", "cifar10_wrn", 2, "abc")["provenance"]
    artifacts = {
        "ce.seed_0.logits": {"provenance": record},
        "ce.seed_0.calibrators": {"provenance": record},
    }
    session = {
        "dataset": {"name": "digits"},
        "model": {"name": "small_cnn"},
        "training": {"epochs": 2},
        "splits": {"standard": {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}},
    }
    assert (
        check_run(CE, 0, artifacts, **session, run_info=run_info("r", "cifar10_wrn", "cifar10_wrn"))
        == record
    )
    with pytest.raises(ProvenanceError) as error:
        check_run(CE, 0, artifacts, **session, run_info=run_info("r", "cifar10", "cifar10"))
    assert message(error).startswith(
        "ce seed 0: ce.seed_0.logits, ce.seed_0.calibrators, trained by run run-of-cifar10_wrn: "
        "made under protocol 'cifar10_wrn', env 'cifar10_wrn', not under this session's protocol "
        "'cifar10' (env 'cifar10')"
    )


def test_a_record_written_before_protocols_were_recorded_is_compared_by_environment():
    record = checkpoint("test", "test", 2, "abc")["provenance"]
    del record["protocol"]
    session = {
        "dataset": {"name": "digits"},
        "model": {"name": "small_cnn"},
        "training": {"epochs": 2},
        "splits": {"standard": {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}},
    }
    artifacts = {"ce.seed_0.logits": {"provenance": record}}
    assert check_run(CE, 0, artifacts, **session, run_info=run_info("r", "test", "test")) == record
    with pytest.raises(
        ProvenanceError,
        match=r"made under env 'test' \(written before protocols were recorded\), not under",
    ):
        check_run(CE, 0, artifacts, **session, run_info=run_info("r", "local", "digits"))
