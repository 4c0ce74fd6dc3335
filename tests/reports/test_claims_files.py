"""The shipped claims and published numbers: every claim parses and resolves in its study
in every environment, every quote is the paper's own words, and the published numbers
match the papers' text."""

import os
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from calib_pipeline.pipelines.config import expand_methods, parse_structure
from calib_pipeline.reports import claim_specs
from calib_pipeline.reports.claim_specs import load_paper, paper_names, paper_text
from calib_pipeline.reports.published import load_published, published_papers
from calib_pipeline.reports.registry import StudyOutline, check_report
from calib_pipeline.settings import load_parameters
from tests.reports import synthetic

PROJECT = Path(__file__).resolve().parents[2]
SEEDS_DIR = Path(os.environ.get("CALIB_SEEDS_DIR", PROJECT.parent / "shared" / "seeds"))
SEED_FILES = {
    "singh": "000_fb53ad33c692ea43.txt",
    "wang": "001_8b531a0ca4ba51de.txt",
    "karandikar": "002_3fc91ba440b090bc.txt",
    "mukhoti": "003_d8134c79ec0efa15.txt",
    "focal_meta": "004_bbe93ebd1c6a7a12.txt",
}
#: Papers beyond the five seeds (the `modern_baselines` study): their quotes are checked
#: against the published abstracts kept in tests/reports/abstracts/ (the claims file's
#: ``text.url``, first line of each file).
BEYOND_THE_SEEDS = {
    "adafocal",
    "cals",
    "dual_focal",
    "mbls",
    "mdca",
    "logit_norm",
    "ovadia",
    "rahaman",
}
ABSTRACTS_DIR = Path(__file__).parent / "abstracts"
ENVS = [None, "test", "cifar10", "cifar100", "svhn", "tiny_imagenet", "fashion_mnist"]


def normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def abstract(paper: str) -> str:
    return (ABSTRACTS_DIR / f"{paper}.txt").read_text(encoding="utf-8")


@cache
def seed_text(paper: str) -> str:
    path = SEEDS_DIR / SEED_FILES[paper]
    if not path.exists():
        pytest.skip(f"the papers' text is not here ({SEEDS_DIR}; set CALIB_SEEDS_DIR)")
    return path.read_text(encoding="utf-8")


def test_every_paper_has_claims_and_every_base_study_checks_them():
    assert set(SEED_FILES) <= set(paper_names())
    studies = yaml.safe_load((PROJECT / "conf/base/parameters_studies.yml").read_text())["studies"]
    # a tuning study (on request) chooses hyperparameters for a claims study; it judges none
    tuning = {name for name, spec in studies.items() if spec.get("on_request")}
    assert tuning == {"soft_calibration_beta"}
    assert "claims" not in studies["soft_calibration_beta"]["reports"]
    assert {
        name: spec["reports"]["claims"]["papers"]
        for name, spec in studies.items()
        if name not in tuning
    } == {
        "focal_meta": ["focal_meta"],
        "focal": ["mukhoti"],
        "soft_calibration": ["karandikar"],
        "calibratability": ["wang"],
        "dark_side": ["singh"],
        "modern_baselines": sorted(BEYOND_THE_SEEDS),
    }
    for paper in SEED_FILES:
        assert len(load_paper(paper)) >= 5, paper
        assert paper_text(paper) == {"seed_file": SEED_FILES[paper]}
    assert set(paper_names()) == set(SEED_FILES) | BEYOND_THE_SEEDS


def test_a_paper_beyond_the_seeds_names_the_text_its_quotes_were_checked_against():
    for paper in BEYOND_THE_SEEDS:
        text = paper_text(paper)
        assert text["url"].startswith("https://") and text["checked"], paper
        assert abstract(paper).startswith(f"Source: {text['url']} "), paper
        assert load_paper(paper), paper


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"seed_file": "x.txt", "text": {"url": "https://a", "checked": "2026-01-01"}},
            "exactly one",
        ),
        ({}, "exactly one"),
        ({"text": {"url": "http://a", "checked": "2026-01-01"}}, "https://"),
        ({"text": {"url": "https://a", "checked": "soon"}}, "date"),
        ({"text": {"url": "https://a", "checked": "2026-01-01", "page": 3}}, "unknown key"),
    ],
)
def test_a_claims_file_without_a_checkable_text_is_refused(tmp_path, monkeypatch, content, message):
    (tmp_path / "made_up.yml").write_text(yaml.safe_dump({"paper": "made_up", **content}))
    monkeypatch.setattr(claim_specs, "CLAIMS_DIR", tmp_path)
    load_paper.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            load_paper("made_up")
    finally:
        load_paper.cache_clear()


@pytest.mark.parametrize("env", ENVS)
def test_every_claim_refers_to_methods_metrics_and_calibrators_of_its_study(env):
    structure = parse_structure(load_parameters(env, PROJECT))
    checked = 0
    for study in structure.studies.values():
        if study.on_request and "claims" not in study.reports:
            continue  # a tuning study (soft_calibration_beta) judges no claims
        outline = StudyOutline(
            study.name,
            study.methods,
            {m: structure.methods[m].group for m in study.methods},
            study.calibrators,
            tuple(spec.key for spec in study.ensembles),
        )
        assert "claims" in study.reports, f"study {study.name} has no claims report"
        check_report("claims", study.reports["claims"], study=outline)  # raises on a bad claim
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("paper", sorted(SEED_FILES))
def test_every_quote_is_the_papers_own_words(paper):
    for claim in load_paper(paper):
        text = normalised(seed_text(claim["quote_from"]))
        assert normalised(claim["quote"]) in text, f"{paper}:{claim['id']}"


@pytest.mark.parametrize("paper", sorted(BEYOND_THE_SEEDS))
def test_every_quote_of_a_paper_beyond_the_seeds_is_in_its_published_abstract(paper):
    for claim in load_paper(paper):
        assert normalised(claim["quote"]) in normalised(abstract(paper)), claim["id"]


# --- published numbers -------------------------------------------------------------------

# (paper, table, dataset, architecture, method, calibrator, metric) -> (value, std), and the
# line of the paper's text that prints it.
CITED = [
    (
        ("mukhoti", "Table 1 (ECE), C.3 (error)", "cifar10", "resnet50", "ce", "none", "ece"),
        (4.35, None),
        "CIFAR-10\tResNet 50\t4.35\t1.35(2.5)\t1.82\t1.08(1.1)",
    ),
    (
        ("mukhoti", "Table 1 (ECE), C.3 (error)", "cifar10", "resnet50", "ce", "ts", "temperature"),
        (2.5, None),
        "CIFAR-10\tResNet 50\t4.35\t1.35(2.5)",
    ),
    (
        ("focal_meta", "Table 1 (CIFAR 10)", "cifar10", "resnet18", "fm_ce", "none", "ece"),
        (4.056, 0.092),
        "CE\t4.812 \\pm 0.122\t0.335 \\pm 0.01\t4.056 \\pm 0.092",
    ),
    (
        (
            "focal_meta",
            "Table 1 (CIFAR 100)",
            "cifar100",
            "resnet18",
            "fm_fl_gamma_sece",
            "none",
            "ece",
        ),
        (1.940, 0.365),
        "FL $_{\\gamma}$ -SECE\t23.686 \\pm 0.377\t0.877 \\pm 0.004\t1.940 \\pm 0.365",
    ),
    (
        ("wang", "Table 2", "cifar10", "resnet32[shortcut=zero_pad]", "ce", "ts", "temperature"),
        (2.51, None),
        "CIFAR-10\twith TS Temperature\t0.95 $\\pm$ 0.19 2.51",
    ),
]


@pytest.mark.parametrize(("cell", "expected", "line"), CITED)
def test_cited_published_cells_match_the_papers_text(cell, expected, line):
    paper, table, dataset, architecture, method, calibrator, metric = cell
    frame = load_published(paper)
    row = frame[
        (frame["table"] == table)
        & (frame["dataset"] == dataset)
        & (frame["architecture"] == architecture)
        & (frame["method"] == method)
        & (frame["calibrator"] == calibrator)
        & (frame["metric"] == metric)
    ]
    assert len(row) == 1
    value, std = expected
    assert row["value"].iloc[0] == value
    assert (std is None and row["std"].isna().iloc[0]) or row["std"].iloc[0] == std
    assert line in seed_text(paper)
    assert f"{value:g}" in line


@pytest.mark.parametrize("paper", published_papers())
def test_every_published_value_is_printed_in_the_paper(paper):
    text = seed_text(paper)
    frame = load_published(paper)
    missing = sorted(
        {f"{v:g}" for v in [*frame["value"], *frame["std"].dropna()] if f"{v:g}" not in text}
    )
    assert not missing, f"{paper}: values not in the paper's text: {missing}"


def test_published_methods_are_defined_methods():
    methods = yaml.safe_load((PROJECT / "conf/base/parameters_methods.yml").read_text())["methods"]
    keys = set(expand_methods(methods))
    for paper in published_papers():
        unknown = sorted(set(load_published(paper)["method"]) - keys)
        assert not unknown, f"{paper}: {unknown}"


@pytest.mark.parametrize("paper", paper_names())
def test_every_paper_states_its_networks_as_buildable_architecture_tags(paper):
    from calib_pipeline.models import architecture_tag
    from calib_pipeline.reports.claim_specs import paper_protocol

    protocol = paper_protocol(paper)
    assert protocol is not None and protocol["training"]
    for tag in protocol["architectures"]:
        assert architecture_tag(*synthetic.parse_architecture_tag(tag)) == tag


def test_the_claims_report_names_the_papers_networks_beside_the_runs():
    """A verdict from a network the paper never trained must say so (issue: every study ran
    ResNet-18 on paper 004's schedule and printed "N of M paper claims hold" for all)."""
    from types import SimpleNamespace

    from calib_pipeline.reports.claims import protocol_notes

    claims = [
        SimpleNamespace(paper="mukhoti"),
        SimpleNamespace(paper="mukhoti"),
        SimpleNamespace(paper="my_study"),
    ]  # a study's own claims have no protocol
    off = protocol_notes(
        SimpleNamespace(
            dataset="cifar10", schedules={}, models={"ce": "resnet18", "focal": "resnet18"}
        ),
        claims,
    )
    assert off.count("Protocol of") == 1 and "`resnet110_bottleneck`" in off
    assert (
        "These runs trained `resnet18`." in off and "None of them is a network of the paper" in off
    )
    on = protocol_notes(
        SimpleNamespace(
            dataset="cifar10", schedules={}, models={"ce": "resnet50", "focal": "resnet50"}
        ),
        claims,
    )
    assert "These runs trained `resnet50`." in on and "**" not in on and "paper_runs/" not in on
    assert "`paper_runs/`" in off, "where the paper's own protocol is"
    mixed = protocol_notes(
        SimpleNamespace(
            dataset="cifar10", schedules={}, models={"ce": "resnet50", "focal": "resnet18"}
        ),
        claims,
    )
    assert "These runs trained `resnet18`, `resnet50`." in mixed and "None of them" not in mixed
    assert "**`resnet18` is not a network of the paper on `cifar10`**" in mixed
    unknown = protocol_notes(
        SimpleNamespace(dataset="cifar10", schedules={}, models={}), claims
    )  # results assembled by hand
    assert "Protocol of `mukhoti`" in unknown and "These runs" not in unknown


def _schedule_results(dataset: str, **per_method: dict):
    from types import SimpleNamespace

    from calib_pipeline.training.config import TrainConfig

    base = {"epochs": 300, "lr": 0.1, "milestones": [150, 225], "lr_decay": 0.1}
    return SimpleNamespace(
        dataset=dataset,
        models=dict.fromkeys(per_method, "resnet50"),
        schedules={
            m: TrainConfig.from_params({**base, **own}).as_dict() for m, own in per_method.items()
        },
    )


def test_the_claims_report_says_whether_the_runs_trained_on_the_papers_schedule():
    """Singh et al. state 300 epochs, drops after 150 and 225, ÷5 for CE, ERL and Mixup and
    ÷10 for LS and FL (A.3): the report names each setting a run trained differently."""
    from types import SimpleNamespace

    from calib_pipeline.reports.claims import protocol_notes

    claims = [SimpleNamespace(paper="singh")]
    paper_like = _schedule_results(
        "cifar10", ce={"lr_decay": 0.2}, erl={"lr_decay": 0.2}, ls_epsilon_0p05={}
    )
    note = protocol_notes(paper_like, claims)
    assert (
        "These runs trained with every setting the paper states for `cifar10` "
        "(compared: epochs, lr, milestones, lr_decay)."
    ) in note
    assert "paper_runs/" not in note
    env_default = _schedule_results(
        "cifar10",
        ce={},
        erl={"lr_decay": 0.2},
        ls_epsilon_0p05={"epochs": 350, "milestones": [150, 250]},
    )
    note = protocol_notes(env_default, claims)
    assert "**The runs' schedule differs from the paper's for `cifar10`**" in note
    assert "lr_decay 0.1 (ce), the paper's 0.2" in note
    assert "epochs 350 (ls_epsilon_0p05), the paper's 300" in note
    assert "milestones [150, 250] (ls_epsilon_0p05), the paper's [150, 225]" in note
    assert "`paper_runs/`" in note, "where the paper's protocol is"
    everyone = _schedule_results(
        "cifar100",
        ce={"epochs": 2, "milestones": [1], "lr_decay": 0.2},
        erl={"epochs": 2, "milestones": [1], "lr_decay": 0.2},
    )
    assert "epochs 2, the paper's 300" in protocol_notes(everyone, claims), (
        "no method list when all differ"
    )
    # the claims' `rename` (the paper's names -> the study's): a study calling CE `baseline`
    renamed = _schedule_results("cifar10", baseline={"lr_decay": 0.2}, ls_epsilon_0p05={})
    assert "every setting" in protocol_notes(renamed, claims, rename={"ce": "baseline"})
    assert "lr_decay 0.2 (baseline), the paper's 0.1" in protocol_notes(renamed, claims)
    digits = protocol_notes(_schedule_results("digits", ce={}), claims)
    assert "The paper did not train on `digits` (it trained on `cifar10`, `cifar100`)." in digits
    wang = protocol_notes(_schedule_results("cifar10", ce={}), [SimpleNamespace(paper="wang")])
    assert "The paper states no training settings for `cifar10`." in wang
    unknown = SimpleNamespace(dataset="cifar10", models={}, schedules={})  # assembled by hand
    assert "schedule" not in protocol_notes(unknown, claims).split("(A.3)")[-1]


def test_the_papers_networks_are_checked_per_dataset():
    """Mukhoti et al.'s 2x2-pooled ResNet-50 is their Tiny-ImageNet network, the
    global-pooled one their CIFAR one: each is foreign on the other dataset."""
    from types import SimpleNamespace

    from calib_pipeline.reports.claims import protocol_gaps, protocol_notes

    mukhoti = [SimpleNamespace(paper="mukhoti")]
    settings = {"epochs": 100, "milestones": [40, 60]}
    tiny = SimpleNamespace(
        **{**vars(_schedule_results("tiny_imagenet", ce=settings)), "models": {"ce": "resnet50"}}
    )
    assert protocol_gaps(tiny, mukhoti)[0] == ["network"]
    assert "**None of them is a network of the paper on `tiny_imagenet`**" in protocol_notes(
        tiny, mukhoti
    )
    tiny.models = {"ce": "resnet50[pool_grid=2]"}
    assert protocol_gaps(tiny, mukhoti) == ([], True)
    cifar = SimpleNamespace(**{**vars(tiny), "dataset": "cifar10"})
    assert "network" in protocol_gaps(cifar, mukhoti)[0]


@pytest.mark.parametrize(
    ("datasets", "message"),
    [
        ({"cifar10": {"epochs": 350.5}}, "epochs must be a positive integer"),
        ({"cifar10": {"milestones": "150,250"}}, "milestones must be a list of epochs"),
        ({"cifar10": {"nesterov": True}}, r"unknown key\(s\) \['nesterov'\]"),
        ({"cifar10": {"methods": {"ce": {"lr_decay": "fast"}}}}, "lr_decay"),
        ({"cifar10": {"augment": ""}}, "augment must be a non-empty string"),
        (
            {"cifar10": {"architectures": ["resnet50"]}},
            r"architectures must be a non-empty subset of \['resnet18'\]",
        ),
        (["cifar10"], "datasets must map a dataset"),
    ],
)
def test_a_malformed_protocol_dataset_entry_is_refused(tmp_path, monkeypatch, datasets, message):
    from calib_pipeline.reports import claim_specs

    (tmp_path / "mine.yml").write_text(
        yaml.safe_dump(
            {
                "paper": "mine",
                "title": "t",
                "claims": [],
                "protocol": {"architectures": ["resnet18"], "training": "x", "datasets": datasets},
            }
        )
    )
    monkeypatch.setattr(claim_specs, "CLAIMS_DIR", tmp_path)
    claim_specs.paper_protocol.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            claim_specs.paper_protocol("mine")
    finally:
        claim_specs.paper_protocol.cache_clear()


def test_the_claims_line_says_whether_the_runs_followed_the_papers_protocol():
    """protocol_gaps feeds the claims line ("...; not the paper's protocol (network)") and
    the MLflow tag <study>.claims_protocol."""
    from types import SimpleNamespace

    from calib_pipeline.reports.claims import protocol_gaps, protocol_suffix

    singh = [SimpleNamespace(paper="singh")]
    paper_like = _schedule_results("cifar10", ce={"lr_decay": 0.2}, ls_epsilon_0p05={})
    assert protocol_gaps(paper_like, singh) == ([], True)
    assert protocol_suffix(([], True), "cifar10") == "; the paper's network and stated settings"
    assert protocol_gaps(_schedule_results("cifar10", ce={}), singh)[0] == ["schedule"], "CE ÷10"
    small = SimpleNamespace(
        **{**vars(paper_like), "models": {"ce": "small_cnn", "ls_epsilon_0p05": "resnet50"}}
    )
    assert protocol_gaps(small, singh)[0] == ["network"]
    digits = SimpleNamespace(**{**vars(small), "dataset": "digits"})
    assert protocol_gaps(digits, singh)[0] == ["network", "dataset"]
    assert (
        protocol_suffix(protocol_gaps(digits, singh), "digits")
        == "; not the paper's protocol (network, dataset)"
    )
    wang = [SimpleNamespace(paper="wang")]  # ResNet-32 everywhere, ResNet-110 on CIFAR only
    resnet32 = SimpleNamespace(
        **{**vars(paper_like), "models": {"ce": "resnet32[shortcut=zero_pad]"}}
    )
    assert protocol_gaps(resnet32, wang) == ([], False), "the paper states no settings for CIFAR-10"
    assert (
        protocol_suffix(([], False), "cifar10")
        == "; the paper's network (it states no training settings for cifar10)"
    )
    assert protocol_gaps(SimpleNamespace(**{**vars(resnet32), "dataset": "digits"}), wang)[0] == [
        "dataset"
    ]
    svhn_110 = SimpleNamespace(
        **{**vars(resnet32), "dataset": "svhn", "models": {"ce": "resnet110_bottleneck"}}
    )
    assert protocol_gaps(svhn_110, wang)[0] == ["network"]
    assert protocol_gaps(paper_like, [SimpleNamespace(paper="my_study")]) is None, "no protocol"
    assert protocol_gaps(SimpleNamespace(**{**vars(paper_like), "schedules": {}}), singh) is None
    assert protocol_suffix(None, "cifar10") == ""
