"""Input validation: dtype/device conventions and every documented failure path."""

import numpy as np
import pytest
import torch

from calib_pipeline.calibration.validation import (
    check_batched_logits_labels,
    check_finite,
    check_logits_labels,
    probability_tolerance,
    to_tensor,
)


def _logits(n=6, k=3, dtype=torch.float32):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(0)).to(dtype)


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.float64, torch.float64),
        (torch.float32, torch.float32),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.int64, torch.float32),
    ],
)
def test_dtype_rule_float64_kept_everything_else_float32(dtype, expected):
    scores, labels = check_logits_labels(
        _logits().mul(4).to(dtype), torch.tensor([0, 1, 2, 0, 1, 2])
    )
    assert scores.dtype == expected
    assert labels.dtype == torch.int64
    assert scores.shape == (6, 3)


def test_numpy_inputs_become_tensors_sharing_memory():
    array = np.random.default_rng(0).normal(size=(5, 4))
    scores, labels = check_logits_labels(array, np.array([0, 1, 2, 3, 0], dtype=np.int32))
    assert scores.dtype == torch.float64 and labels.dtype == torch.int64
    array[0, 0] = 123.0
    assert scores[0, 0] == 123.0  # no copy for a float64 array


def test_read_only_and_big_endian_arrays_are_accepted():
    array = np.arange(6, dtype=">f8").reshape(3, 2)
    array.setflags(write=False)
    scores, _ = check_logits_labels(array, [0, 1, 1])
    assert torch.equal(scores, torch.arange(6, dtype=torch.float64).reshape(3, 2))


def test_float_labels_with_integral_values_are_accepted():
    _, labels = check_logits_labels(_logits(3), np.array([0.0, 2.0, 1.0]))
    assert labels.tolist() == [0, 2, 1]


def test_autograd_graph_is_kept():
    logits = _logits().requires_grad_()
    scores, _ = check_logits_labels(logits, [0, 1, 2, 0, 1, 2])
    scores.sum().backward()
    assert torch.equal(logits.grad, torch.ones_like(logits))


def test_binary_vectors_expand_to_two_columns():
    scores, _ = check_logits_labels(torch.tensor([0.0, 2.0]), [0, 1])
    assert torch.equal(scores, torch.tensor([[0.0, 0.0], [0.0, 2.0]]))
    probs, _ = check_logits_labels(torch.tensor([0.25, 1.0]), [0, 1], inputs="probs")
    assert torch.equal(probs, torch.tensor([[0.75, 0.25], [0.0, 1.0]]))


def test_fp16_quantised_probabilities_pass_the_tolerance():
    probs = torch.softmax(_logits(200, 1000) * 3, -1).half()
    assert float((probs.float().sum(-1) - 1).abs().max()) > 1e-6
    scores, _ = check_logits_labels(probs, torch.zeros(200, dtype=torch.long), inputs="probs")
    assert scores.dtype == torch.float32
    assert (
        probability_tolerance(torch.bfloat16) == 1e-2
        and probability_tolerance(torch.float32) == 1e-3
    )


@pytest.mark.parametrize(
    ("logits", "labels", "message"),
    [
        (torch.tensor([[0.0, float("nan")], [1.0, 2.0]]), [0, 1], "NaN"),
        (torch.tensor([[0.0, float("inf")], [1.0, 2.0]]), [0, 1], "inf"),
        (torch.tensor([[0.0, 1.0], [float("-inf"), 2.0]]), [0, 1], r"inf.*\(1, 0\)"),
        (torch.zeros(2, 3), [0, 3], "out of range: found 3"),
        (torch.zeros(2, 3), [-1, 0], "out of range: found -1"),
        (torch.zeros(2, 3), [0.5, 1.0], "non-integer value 0.5"),
        (torch.zeros(2, 3), [True, False], "integer class indices"),
        (torch.zeros(2, 3), [0, 1, 2], "shape mismatch"),
        (torch.zeros(2, 3), [[0, 1]], "shape mismatch"),
        (torch.zeros(0, 3), [], "empty input"),
        (torch.zeros(2, 0), [0, 0], "empty input"),
        (torch.zeros(2, 3, 4), [0, 1], "must be N x K"),
        (np.array([["a", "b"]]), [0], "numeric"),
    ],
)
def test_bad_input_raises_value_error_naming_the_problem(logits, labels, message):
    with pytest.raises(ValueError, match=message):
        check_logits_labels(logits, labels)


@pytest.mark.parametrize(
    ("probs", "message"),
    [
        (torch.tensor([[0.5, 0.4], [0.5, 0.5]]), r"sum to 1 within 0.001; row \(0,\) sums to 0.9"),
        (torch.tensor([[1.2, -0.2], [0.5, 0.5]]), r"must lie in \[0, 1\]"),
    ],
)
def test_probabilities_must_be_normalised(probs, message):
    with pytest.raises(ValueError, match=message):
        check_logits_labels(probs, [0, 1], inputs="probs")


def test_unknown_input_kind_is_rejected():
    with pytest.raises(ValueError, match="inputs must be one of"):
        check_logits_labels(torch.zeros(2, 2), [0, 1], inputs="scores")


def test_batched_accepts_shared_or_per_run_labels():
    logits = torch.randn(3, 5, 4)
    shared = torch.tensor([0, 1, 2, 3, 0])
    scores, labels = check_batched_logits_labels(logits, shared)
    assert scores.shape == (3, 5, 4) and labels.shape == (3, 5)
    assert torch.equal(labels[2], shared)
    per_run = torch.randint(0, 4, (3, 5))
    assert torch.equal(check_batched_logits_labels(logits, per_run)[1], per_run)
    with pytest.raises(ValueError, match="shape mismatch"):
        check_batched_logits_labels(logits, torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="R x N x K"):
        check_batched_logits_labels(torch.zeros(2, 5, 4, 1), shared)


def test_to_tensor_passes_tensors_through():
    tensor = torch.ones(2)
    assert to_tensor(tensor) is tensor
    assert to_tensor([[1, 2]]).shape == (1, 2)


def test_finite_false_defers_the_nan_check_of_logits_to_the_caller():
    logits = torch.tensor([[0.0, float("nan")], [1.0, 2.0]])
    scores, _ = check_logits_labels(logits, [0, 1], finite=False)
    with pytest.raises(ValueError, match=r"logits contain NaN values \(1 non-finite entries, "):
        check_finite(scores, "logits")
    with pytest.raises(ValueError, match=r"inf values \(2 non-finite entries, first at index "):
        check_finite(torch.tensor([[0.0, 1.0], [float("inf"), float("-inf")]]), "logits")
    check_finite(torch.zeros(2, 2), "logits")  # finite: no error


def test_probabilities_are_checked_for_nan_even_with_finite_false():
    probs = torch.tensor([[0.5, float("nan")], [0.5, 0.5]])
    with pytest.raises(ValueError, match="probabilities contain NaN"):
        check_logits_labels(probs, [0, 1], inputs="probs", finite=False)
    with pytest.raises(ValueError, match="probabilities contain NaN"):
        check_batched_logits_labels(probs.unsqueeze(0), [0, 1], inputs="probs", finite=False)
