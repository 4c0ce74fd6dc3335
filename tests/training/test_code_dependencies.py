"""The table of what code a training depends on (``training.code_dependencies``), on a copy
of the package's own sources edited as a researcher would edit them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from calib_pipeline.calibration.losses import OBJECTIVES
from calib_pipeline.code_units import PACKAGE, source_index
from calib_pipeline.training.code_dependencies import (
    changed_units,
    part_digests,
    training_code,
)

CE = {"objective": "cross_entropy", "meta_learner": None, "model": "small_cnn", "dataset": "digits"}
FOCAL = {**CE, "objective": "focal"}
NEW_OBJECTIVE = '''

@OBJECTIVES.register("squared_margin")
def _squared_margin(scale: float = 1.0) -> Objective:
    """A new objective appended to losses.py, with a helper of its own."""
    return Objective("squared_margin", {"scale": scale}, _margin_helper(scale))


def _margin_helper(scale: float):
    return partial(elementwise.mse)
'''


@pytest.fixture
def sources(tmp_path) -> Iterator[Path]:
    """A copy of the package's sources (read afresh after each edit)."""
    copy = tmp_path / "calib_pipeline"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    yield copy
    source_index.cache_clear()


def code_of(method: dict, sources: Path) -> dict[str, dict[str, str]]:
    return training_code(**method, root=sources)


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) in ``path``; the sources are then read afresh."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    write(path, text.replace(old, new, 1))


def write(path: Path, text: str) -> None:
    path.write_text(text)
    source_index.cache_clear()


def test_the_copy_and_the_package_give_the_same_code():
    assert code_of(CE, PACKAGE) == training_code(**CE)


def test_appending_an_objective_to_losses_changes_no_part_of_cross_entropy(sources):
    before = code_of(CE, sources)
    losses = sources / "calibration" / "losses.py"
    write(losses, losses.read_text() + NEW_OBJECTIVE)
    assert code_of(CE, sources) == before
    assert code_of(FOCAL, sources) == code_of(FOCAL, PACKAGE)


def test_an_objective_in_a_file_of_its_own_changes_no_part_of_cross_entropy(sources):
    before = code_of(CE, sources)
    write(
        sources / "calibration" / "my_objective.py",
        "from calib_pipeline.calibration.losses import OBJECTIVES, Objective\n"
        + NEW_OBJECTIVE.replace("partial(elementwise.mse)", "None"),
    )
    edit(  # registered where the package imports it
        sources / "calibration" / "methods.py",
        "from calib_pipeline.calibration.losses import build_objective\n",
        "from calib_pipeline.calibration import my_objective  # noqa: F401  (registers)\n"
        "from calib_pipeline.calibration.losses import build_objective\n",
    )
    assert code_of(CE, sources) == before


def test_editing_an_objective_changes_its_part_only_and_names_the_unit(sources):
    ce, focal = code_of(CE, sources), code_of(FOCAL, sources)
    edit(
        sources / "calibration" / "losses.py",
        'return Objective("cross_entropy", {}, elementwise.cross_entropy)',
        'return Objective("cross_entropy", dict(), elementwise.cross_entropy)',
    )
    changed = changed_units(ce, code_of(CE, sources))
    assert changed == {"objective": ["calibration/losses.py::_cross_entropy"]}
    assert code_of(FOCAL, sources) == focal


def test_a_shared_helper_changes_every_method_that_reaches_it_and_no_other(sources):
    ce, focal = code_of(CE, sources), code_of(FOCAL, sources)
    elementwise = sources / "calibration" / "_losses_elementwise.py"
    edit(elementwise, "def focal_per_sample(", "def focal_per_sample(  # a comment: no change\n")
    assert code_of(FOCAL, sources) == focal
    edit(
        elementwise,
        "    return target_expectation(losses, targets)",
        "    return 1.0 * target_expectation(losses, targets)",
    )
    assert changed_units(focal, code_of(FOCAL, sources)) == {
        "objective": ["calibration/_losses_elementwise.py::focal_per_sample"]
    }
    assert code_of(CE, sources) == ce
    focal = code_of(FOCAL, sources)
    # the class every objective is an instance of (the engine names it too)
    edit(sources / "calibration" / "losses.py", "class Objective:", "class Objective:\n    y = 1\n")
    for method, before in ((CE, ce), (FOCAL, focal)):
        changed = changed_units(before, code_of(method, sources))
        assert changed["objective"] == changed["engine"] == ["calibration/losses.py::Objective"]


def test_an_edit_of_the_engine_changes_the_engine_part_of_every_method(sources):
    ce, focal = code_of(CE, sources), code_of(FOCAL, sources)
    edit(
        sources / "training" / "engine.py",
        "def _save_state(",
        "def _save_state_unused():\n    return 1\n\n\ndef _save_state(",
    )
    assert code_of(CE, sources) == ce, "a new function nobody calls is no dependency"
    edit(sources / "training" / "engine.py", '"complete": epoch ==', '"complete": 0 + epoch ==')
    assert changed_units(ce, code_of(CE, sources)) == {
        "engine": ["training/engine.py::_save_state"]
    }
    assert changed_units(focal, code_of(FOCAL, sources)) == {
        "engine": ["training/engine.py::_save_state"]
    }


def test_the_reuse_decision_and_its_messages_are_no_part_of_the_engine(sources):
    ce = code_of(CE, sources)
    edit(sources / "training" / "run.py", "Training it again in", "Retraining it in")
    assert code_of(CE, sources) == ce


def test_the_parts_are_the_engine_the_method_the_model_and_the_data_path():
    code = training_code(**CE)
    assert set(code) == {"engine", "objective", "model", "data"}
    assert {
        "training/engine.py::train_model",
        "training/checkpoint.py::CheckpointStore",
        "training/data.py::BatchStream",
        "data/splits.py::split_tensors",
        "calibration/methods.py::ObjectiveLearner",
    } <= set(code["engine"])
    assert not any(
        unit.startswith("calibration/losses.py::_focal") for part in code.values() for unit in part
    )
    assert "models/small_cnn.py::SmallCNN" in code["model"]
    assert "data/datasets.py::_register('digits')" in code["data"]
    assert "data/datasets.py::_register('cifar10')" not in code["data"]
    meta = training_code(**{**CE, "objective": None, "meta_learner": "fl_gamma_sece"})
    assert "calibration/meta.py::fl_gamma_sece" in meta["meta_learner"] and "objective" not in meta
    assert part_digests(code).keys() == code.keys()


def test_a_factory_outside_the_package_is_one_unit_of_its_own_source():
    @OBJECTIVES.register("outside_the_package")
    def outside(scale: float = 1.0):
        return scale

    try:
        objective = training_code(**{**CE, "objective": "outside_the_package"})["objective"]
    finally:
        OBJECTIVES._factories.pop("outside_the_package")
    (name,) = objective
    assert name.endswith(
        "::test_a_factory_outside_the_package_is_one_unit_of_its_own_source.<locals>.outside"
    )
