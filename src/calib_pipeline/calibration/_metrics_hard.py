"""The hard metrics: reductions of the detached per-sample statistics, float64 per run.

Each is ``metric(pred: Predictions, **options) -> R-vector`` over the runs of ``pred``; the
public functions, option checks and registration are in ``metrics``. Options arrive
validated.
"""

from __future__ import annotations

import torch

from calib_pipeline.calibration._metrics_binning import bin_index, binned, binned_error
from calib_pipeline.calibration._metrics_kernels import Predictions


def accuracy(pred: Predictions) -> torch.Tensor:
    """Fraction of samples whose first maximal class equals the label."""
    return pred.correct.to(torch.float64).mean(-1)


def error(pred: Predictions) -> torch.Tensor:
    """1 - accuracy."""
    return 1 - accuracy(pred)


def nll(pred: Predictions) -> torch.Tensor:
    """Negative log-likelihood -(1/N) sum_i log p_{i,y_i}.

    +inf if a probability input gives a label probability 0 (no clipping).
    """
    return -pred.per_sample("label_log_prob", _label_log_prob).to(torch.float64).mean(-1)


def _label_log_prob(pred: Predictions) -> torch.Tensor:
    return pred.log_probs.gather(-1, pred.labels.unsqueeze(-1)).squeeze(-1)


def brier(pred: Predictions) -> torch.Tensor:
    """Multiclass Brier score (1/N) sum_i sum_k (p_ik - 1[y_i = k])^2, in [0, 2]."""
    return pred.per_sample("brier", _brier_terms).mean(-1)


def _brier_terms(pred: Predictions) -> torch.Tensor:
    probs = pred.probs.to(torch.float64)
    true_prob = probs.gather(-1, pred.labels.unsqueeze(-1)).squeeze(-1)
    return probs.square().sum(-1) - 2 * true_prob + 1


def mean_confidence(pred: Predictions) -> torch.Tensor:
    """(1/N) sum_i max_k p_ik."""
    return pred.confidence.to(torch.float64).mean(-1)


def mean_entropy(pred: Predictions) -> torch.Tensor:
    """(1/N) sum_i -sum_k p_ik log p_ik in nats (0 log 0 = 0)."""
    return pred.per_sample("entropy", _entropy).mean(-1)


def _entropy(pred: Predictions) -> torch.Tensor:
    probs = pred.probs.to(torch.float64)
    return -torch.special.xlogy(probs, probs).sum(-1)


def ece(
    pred: Predictions,
    *,
    n_bins: int = 15,
    scheme: str = "width",
    norm: str = "l1",
    closure: str = "right",
) -> torch.Tensor:
    """Top-label binned ECE (Guo et al.; Karandikar eq. 6).

    l1: sum_b (n_b/N) |acc_b - conf_b|; l2: sqrt(sum_b (n_b/N)(acc_b - conf_b)^2);
    max: max over non-empty bins.
    """
    return binned_error(pred.confidence, pred.correct, n_bins, scheme, norm, closure)


def ece_em(
    pred: Predictions, *, n_bins: int = 15, norm: str = "l1", closure: str = "right"
) -> torch.Tensor:
    """Adaptive (equal-mass) top-label ECE: Mukhoti et al.'s AdaECE, bins of equal count weighted
    by n_b / N (not Nixon et al.'s ACE, which is classwise with an unweighted mean over ranges)."""
    return binned_error(pred.confidence, pred.correct, n_bins, "mass", norm, closure)


def mce(
    pred: Predictions, *, n_bins: int = 15, scheme: str = "width", closure: str = "right"
) -> torch.Tensor:
    """Maximum calibration error max_b |acc_b - conf_b| over non-empty bins (Naeini et al.)."""
    return binned_error(pred.confidence, pred.correct, n_bins, scheme, "max", closure)


def ece_l2(
    pred: Predictions, *, n_bins: int = 15, scheme: str = "mass", closure: str = "right"
) -> torch.Tensor:
    """RMS calibration error sqrt(sum_b (n_b/N)(acc_b - conf_b)^2).

    Equal-mass by default, as reported by Karandikar et al. (paper 002).
    """
    return binned_error(pred.confidence, pred.correct, n_bins, scheme, "l2", closure)


def ece_lb(
    pred: Predictions,
    *,
    n_bins: int = 15,
    scheme: str = "mass",
    norm: str = "l2",
    closure: str = "right",
) -> torch.Tensor:
    """Label-binned ECE (Roelofs et al.; Karandikar eq. 7): ((1/N) sum_i |A_{b_i} - c_i|^p)^{1/p}.

    ``max`` gives max_i |A_{b_i} - c_i|. By Jensen, ece_lb >= the binned ECE of the same norm.
    """
    confidence = pred.confidence.to(torch.float64)
    edges, count, _, hits = binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    index = bin_index(pred.confidence, edges, scheme, closure)
    bin_accuracy = (hits / count.clamp_min(1)).gather(-1, index.long())
    deviation = (bin_accuracy - confidence).abs()
    if norm == "max":
        return deviation.amax(-1)
    power = 1.0 if norm == "l1" else 2.0
    return deviation.pow(power).mean(-1).pow(1 / power)


def classwise_ece(
    pred: Predictions,
    *,
    n_bins: int = 15,
    scheme: str = "width",
    norm: str = "l1",
    closure: str = "right",
) -> torch.Tensor:
    """Classwise ECE (Kull et al.; Mukhoti et al.): (1/K) sum_k ECE of p_k against 1[y = k].

    Every class k in 0..K-1 of the scores counts, including classes absent from the labels.
    """
    probs = pred.probs
    runs, n, k = probs.shape
    class_conf = probs.transpose(1, 2).reshape(runs * k, n)
    classes = torch.arange(k, device=probs.device)
    is_class = (pred.labels.unsqueeze(1) == classes.view(1, k, 1)).reshape(runs * k, n)
    per_class = binned_error(class_conf, is_class, n_bins, scheme, norm, closure)
    return per_class.view(runs, k).mean(-1)


def overconfidence_error(
    pred: Predictions, *, n_bins: int = 15, scheme: str = "width", closure: str = "right"
) -> torch.Tensor:
    """OE (Thulasidasan et al.): sum_b (n_b/N) conf_b max(conf_b - acc_b, 0)."""
    _, count, conf_sum, hits = binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    mean_conf = conf_sum / count.clamp_min(1)
    return (mean_conf * (conf_sum - hits).clamp_min(0)).sum(-1) / pred.n_samples


def debiased_ece_l2(
    pred: Predictions, *, n_bins: int = 15, scheme: str = "mass", closure: str = "right"
) -> torch.Tensor:
    """Debiased l2 ECE of Kumar et al. (2019).

    sqrt(max(0, sum_b (n_b/N)[(acc_b - conf_b)^2 - acc_b (1 - acc_b)/(n_b - 1)])): the
    plug-in squared gap minus the binomial variance of acc_b. Bins with fewer than 2 samples
    contribute 0 (their variance term is undefined), as in Kumar et al.'s library.
    """
    _, count, conf_sum, hits = binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    safe = count.clamp_min(1)
    acc, conf = hits / safe, conf_sum / safe
    variance = acc * (1 - acc) / (count - 1).clamp_min(1)
    term = torch.where(count >= 2, (acc - conf).square() - variance, torch.zeros_like(acc))
    return ((count / pred.n_samples) * term).sum(-1).clamp_min(0).sqrt()


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks along the last dim, ties given their average rank (R x N, float64)."""
    ordered = values.sort(dim=-1).values
    below = torch.searchsorted(ordered, values, right=False)
    through = torch.searchsorted(ordered, values, right=True)
    return (below + through + 1).to(torch.float64) / 2


def auroc(pred: Predictions) -> torch.Tensor:
    """Refinement AUROC (Singh et al. 000): P(conf of a correct > conf of a wrong), ties 1/2.

    Mann-Whitney form (sum of average ranks of correct samples - P(P+1)/2) / (P N_wrong);
    NaN when all predictions are correct or all wrong.
    """

    def compute() -> torch.Tensor:
        correct = pred.correct.to(torch.float64)
        ranks = _average_ranks(pred.confidence.contiguous())
        positives = correct.sum(-1)
        negatives = pred.n_samples - positives
        u_statistic = (ranks * correct).sum(-1) - positives * (positives + 1) / 2
        return u_statistic / (positives * negatives)

    return pred.cached("auroc", compute)  # decomp_beta reuses it


def decomp_alpha(pred: Predictions) -> torch.Tensor:
    """alpha = E[C], the mean confidence (Singh et al. 000, eq. 9: ECE = alpha - beta - gamma)."""
    return mean_confidence(pred)


def decomp_beta(pred: Predictions) -> torch.Tensor:
    """beta = r 2PN/n^2 (Singh et al. 000, eq. 9).

    r is the AUROC, P and N the numbers of correct and wrong predictions; 0 when PN = 0.
    """
    positives = pred.correct.to(torch.float64).sum(-1)
    negatives = pred.n_samples - positives
    product = 2 * positives * negatives / pred.n_samples**2
    return torch.where(product > 0, auroc(pred) * product, torch.zeros_like(product))


def decomp_gamma(pred: Predictions) -> torch.Tensor:
    """gamma = (P^2 + N^2) / (2 n^2) (Singh et al. 000, eq. 9)."""
    positives = pred.correct.to(torch.float64).sum(-1)
    negatives = pred.n_samples - positives
    return (positives.square() + negatives.square()) / (2 * pred.n_samples**2)


def _sorted_groups(
    pred: Predictions, *, descending: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The samples of every run sorted by confidence: the sorted confidences (float64),
    the sorted correctness (float64) and, for each sorted position, the last position of
    its group of tied confidences (R x N each).

    Statistics read at the end of each sample's group depend only on the thresholds, not
    on how a sort orders tied confidences: that is the tie policy of ``ks_error``,
    ``aurc`` and ``augrc``.
    """
    confidence = pred.confidence.to(torch.float64)
    order = torch.argsort(confidence, dim=-1, descending=descending)
    ordered = confidence.gather(-1, order)
    correct = pred.correct.to(torch.float64).gather(-1, order)
    ascending = (-ordered if descending else ordered).contiguous()
    group_end = torch.searchsorted(ascending, ascending, right=True) - 1
    return ordered, correct, group_end


def ks_error(pred: Predictions) -> torch.Tensor:
    """Top-label Kolmogorov-Smirnov calibration error (Gupta et al. 2021, §3):
    max over thresholds s of abs((1/N) sum_{c_i <= s} (c_i - 1[correct_i])), the largest
    gap between the cumulative confidence and cumulative accuracy curves, both
    accumulated from the least confident sample up.

    Thresholds are the distinct confidences: tied confidences enter together.
    """
    confidence, correct, group_end = _sorted_groups(pred, descending=False)
    gap = (confidence - correct).cumsum(-1).gather(-1, group_end)
    return gap.abs().amax(-1) / pred.n_samples


def _area_under_risk(pred: Predictions, *, selective: bool) -> torch.Tensor:
    """Trapezoidal area under the risk-coverage curve whose points are the accepted
    fraction a/N at each distinct confidence threshold (accepting the most confident
    first) and the risk of the accepted: errors/a (selective) or errors/N (generalised),
    closed at coverage 0 by the first point's selective risk or by a generalised risk of 0.
    """
    _, correct, group_end = _sorted_groups(pred, descending=True)
    n = pred.n_samples
    accepted = (group_end + 1).to(torch.float64)
    errors = (1 - correct).cumsum(-1).gather(-1, group_end)
    risk = errors / accepted if selective else errors / n
    coverage = accepted / n
    start = risk[..., :1] if selective else torch.zeros_like(risk[..., :1])
    risk = torch.cat([start, risk], dim=-1)
    coverage = torch.cat([torch.zeros_like(coverage[..., :1]), coverage], dim=-1)
    return (coverage.diff(dim=-1) * (risk[..., 1:] + risk[..., :-1]) / 2).sum(-1)


def aurc(pred: Predictions) -> torch.Tensor:
    """Area under the risk-coverage curve (Geifman & El-Yaniv 2017; the trapezoidal,
    tie-grouped form of Traub et al. 2024): the selective risk (errors among the accepted
    / accepted) integrated over coverage, confidence = max_k p_ik as the acceptance score.
    """
    return _area_under_risk(pred, selective=True)


def augrc(pred: Predictions) -> torch.Tensor:
    """Area under the generalised risk-coverage curve (Traub et al. 2024): the
    generalised risk (errors among the accepted / N) integrated over coverage, i.e. the
    probability that a random sample is accepted and wrong, averaged over thresholds."""
    return _area_under_risk(pred, selective=False)
