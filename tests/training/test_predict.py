"""Prediction from a checkpoint goes through the network in batches of the run's
``eval_batch_size`` (the env's setting for its hardware), or of ``logits.batch_size`` when
the session sets one; the batch changes the speed of prediction, its logits only by float32
rounding (how the matrix products are blocked)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.data import load_dataset
from calib_pipeline.data.splits import split_dataset
from calib_pipeline.pipelines.logits.nodes import compute_logits
from calib_pipeline.pipelines.run_info import run_info
from calib_pipeline.training import CheckpointStore, train_run
from calib_pipeline.training.predict import checkpoint_predictor

CONF = Path(__file__).resolve().parents[2] / "conf"
TEST_PARAMETERS = yaml.safe_load((CONF / "test" / "parameters.yml").read_text())
SPLIT_DEFINITION = yaml.safe_load((CONF / "base" / "parameters.yml").read_text())["splits"][
    "standard"
]
SESSION = run_info("2026-03-03T00.00.00.000Z", "test", "test")
CE = MethodSpec(key="ce", objective="cross_entropy", params={}, label="CE")
EVAL_BATCH = 50


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digits run trained with ``eval_batch_size`` 50, its data and split."""
    data = load_dataset("digits")
    split = split_dataset(data, SPLIT_DEFINITION)
    checkpoint, _ = train_run(
        data,
        split,
        SPLIT_DEFINITION,
        CheckpointStore(tmp_path_factory.mktemp("store")),
        method=CE,
        seed=0,
        model_params=TEST_PARAMETERS["model"],
        training_params={**TEST_PARAMETERS["training"], "eval_batch_size": EVAL_BATCH},
        **SESSION,
    )
    return checkpoint, data, split


def _images(count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (count, 1, 8, 8), dtype=torch.uint8, generator=generator)


def test_the_predictor_feeds_the_network_batches_of_the_runs_eval_batch_size(
    trained, forward_batches
):
    checkpoint, *_ = trained
    assert checkpoint["config"]["training"]["eval_batch_size"] == EVAL_BATCH

    checkpoint_predictor(checkpoint, "cpu")(_images(180))

    assert forward_batches == [50, 50, 50, 30]


def test_a_batch_size_given_overrides_the_runs_and_changes_logits_only_by_rounding(
    trained, forward_batches
):
    checkpoint, *_ = trained
    images = _images(180)
    at_run, features_at_run = checkpoint_predictor(checkpoint, "cpu")(images)
    forward_batches.clear()

    logits, features = checkpoint_predictor(checkpoint, "cpu", batch_size=64)(images)

    assert forward_batches == [64, 64, 52]
    torch.testing.assert_close(logits, at_run, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(features, features_at_run, rtol=1e-5, atol=1e-5)
    assert not torch.equal(at_run[0], at_run[1]), "distinct images give distinct logits"


def test_a_checkpoint_without_the_setting_predicts_at_the_training_default(
    trained, forward_batches
):
    older = copy.deepcopy(trained[0])
    del older["config"]["training"]["eval_batch_size"]

    checkpoint_predictor(older, "cpu")(_images(180))

    assert forward_batches == [180], "the default eval_batch_size (1,024) takes 180 images at once"


def test_the_logits_node_predicts_at_the_sessions_batch_size_when_it_sets_one(
    trained, forward_batches
):
    checkpoint, data, split = trained
    parts = {part: len(split[part]) for part in split} | {"test": len(data.test_labels)}

    default = compute_logits(data, split, checkpoint, {"device": "cpu"}, SESSION)
    assert max(forward_batches) == EVAL_BATCH
    assert sum(forward_batches) == sum(parts.values()), "every image of every part once"
    forward_batches.clear()

    chosen = compute_logits(data, split, checkpoint, {"device": "cpu", "batch_size": 7}, SESSION)

    assert max(forward_batches) == 7 and sum(forward_batches) == sum(parts.values())
    for part in parts:
        assert len(chosen[part]["logits"]) == parts[part]
        torch.testing.assert_close(
            chosen[part]["logits"], default[part]["logits"], rtol=1e-5, atol=1e-5
        )
