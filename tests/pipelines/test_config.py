import copy

import pytest
import torch

from calib_pipeline.pipelines.config import (
    expand_methods,
    parse_structure,
    validate_buildable,
)
from calib_pipeline.tensor_io import fingerprint


@pytest.fixture
def parameters():
    return {
        "dataset": {"name": "digits"},
        "model": {"name": "small_cnn", "params": {}},
        "training": {"epochs": 2},
        "seeds": [0, 1],
        "splits": {
            "standard": {"seed": 0, "fractions": {"train": 0.9, "val": 0.1}},
            "meta": {"seed": 0, "fractions": {"train": 0.8, "val": 0.1, "meta_val": 0.1}},
        },
        "calibrators": {"ts": {"name": "temperature_nll"}},
        "methods": {
            "ce": {"objective": "cross_entropy", "label": "CE"},
            "focal_g3": {"objective": "focal", "params": {"gamma": 3.0}},
            "ls": {"objective": "label_smoothing", "sweep": {"epsilon": [0.01, 0.05]}},
        },
        "studies": {
            "a": {"methods": ["ce", "focal_g3"], "calibrators": ["ts"]},
            "b": {"methods": ["ce", "ls"], "seeds": [0, 2]},
        },
    }


def test_structure_deduplicates_shared_runs_and_expands_sweeps(parameters):
    structure = parse_structure(parameters)
    assert structure.studies["b"].methods == ("ce", "ls_epsilon_0p01", "ls_epsilon_0p05")
    assert structure.methods["ls_epsilon_0p05"].params == {"epsilon": 0.05}
    assert structure.methods["ls_epsilon_0p05"].group == "ls"
    runs = structure.runs()
    assert runs.count(("ce", 0)) == 1
    assert set(runs) == {
        ("ce", 0),
        ("ce", 1),
        ("focal_g3", 0),
        ("focal_g3", 1),
        ("ce", 2),
        ("ls_epsilon_0p01", 0),
        ("ls_epsilon_0p01", 2),
        ("ls_epsilon_0p05", 0),
        ("ls_epsilon_0p05", 2),
    }
    validate_buildable(structure, parameters)


def test_sweep_accepts_one_hyperparameter():
    with pytest.raises(ValueError, match="one hyperparameter at a time"):
        expand_methods({"x": {"objective": "focal", "sweep": {"gamma": [1], "detach_pt": [True]}}})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda p: p["studies"]["a"]["methods"].append("mixup"),
            r"unknown method\(s\) \['mixup'\]",
        ),
        (
            lambda p: p["methods"].update({"bad-key": {"objective": "cross_entropy"}}),
            "must start with a letter",
        ),
        (lambda p: p["methods"]["ce"].update({"meta_learner": "fl_gamma_sece"}), "exactly one of"),
        (lambda p: p["methods"]["ce"].update({"split": "other"}), "unknown split 'other'"),
        (
            lambda p: p["studies"]["a"].update({"calibrators": ["isotonic"]}),
            r"study 'a': its `calibrators` list names unknown calibrator 'isotonic'; defined "
            r"calibrators",
        ),
        (lambda p: p["studies"]["a"].update({"seeds": [-1]}), "seeds must be non-negative"),
        (
            lambda p: p["studies"]["a"].update({"seeds": [0, 0]}),
            r"study 'a' lists a seed twice: \[0, 0\]",
        ),
        (
            lambda p: p["studies"]["a"].update({"seeds": [True]}),
            "seeds must be non-negative integers, got \\[True\\]",
        ),
        # --params=studies.a.methods=ce gives a string, not a one-element list
        (
            lambda p: p["studies"]["a"].update({"methods": "ce"}),
            "study 'a': methods must be a list of method keys, got 'ce'",
        ),
        (
            lambda p: p["methods"]["ls"].update({"label": "LS ({eps})"}),
            r"method 'ls': its label 'LS \(\{eps\}\)' must name only the swept parameter, as "
            r"\{epsilon\}",
        ),
        # a misspelt study name in --params makes a study of its own, without methods
        (
            lambda p: p["studies"].update({"baselin": {"seeds": [1]}}),
            r"study 'baselin' lists no methods; defined studies with methods: \['a', 'b'\]",
        ),
        # a key the sweep also makes would replace the swept member (or be replaced by it)
        (
            lambda p: p["methods"].update(
                {"ls_epsilon_0p05": {"objective": "label_smoothing", "params": {"epsilon": 0.2}}}
            ),
            (
                r"method 'ls_epsilon_0p05' is defined twice: by the sweep of methods.ls and by its "
                r"entry methods.ls_epsilon_0p05"
            ),
        ),
        (
            lambda p: p.update(
                {"methods": {"ls_epsilon_0p01": {"objective": "focal"}, **p["methods"]}}
            ),
            (
                r"method 'ls_epsilon_0p01' is defined twice: by its entry methods.ls_epsilon_0p01 "
                r"and by the sweep of methods.ls"
            ),
        ),
        (
            lambda p: p["methods"]["ls"].update({"params": {"epsilon": float("inf")}}),
            r"method 'ls' sets 'epsilon' in params and sweeps it \(\[0.01, 0.05\]\)",
        ),
        (
            lambda p: p["methods"]["ce"].update({"record_epoch_logits": "yes"}),
            "methods.ce.record_epoch_logits must be true or false",
        ),
        # report tables group rows by label: two methods of one label would be one row
        (
            lambda p: p["methods"]["focal_g3"].update({"label": "CE"}),
            r"study 'a': methods \{'CE': \['ce', 'focal_g3'\]\} share a label",
        ),
    ],
)
def test_bad_structure_is_rejected(parameters, mutate, message):
    bad = copy.deepcopy(parameters)
    mutate(bad)
    with pytest.raises(ValueError, match=message):
        parse_structure(bad)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda p: p["dataset"].update({"name": "imagenet"}),
            "unknown dataset 'imagenet'; valid dataset names are",
        ),
        (lambda p: p["model"].update({"name": "vgg"}), "valid model names are"),
        (
            lambda p: p["methods"]["focal_g3"]["params"].update({"gamma": -1.0}),
            "method 'focal_g3': .*gamma",
        ),
        (
            lambda p: p["methods"]["ls"].update({"sweep": {"epsilon": [1.0]}}),
            "method 'ls_epsilon_1p0': .*epsilon",
        ),
        (
            lambda p: p["methods"].update({"x": {"objective": "nope"}}),
            "method 'x': unknown objective 'nope'; valid",
        ),
        (
            lambda p: p["splits"]["standard"]["fractions"].update({"train": 0.5}),
            "split 'standard': .*sum to 1",
        ),
        (lambda p: p["training"].update({"epochs": -3}), "epochs must be an integer >= 1, got -3"),
        (
            lambda p: p["calibrators"].update({"x": {"name": "nope"}}),
            "calibrator 'x': unknown calibrator",
        ),
        (
            lambda p: p["studies"]["a"].update({"reports": {"reliability": {"n_bin": 20}}}),
            r"study 'a': report 'reliability' got unknown option\(s\) \['n_bin'\]; valid options: "
            r"n_bins",
        ),
        (
            lambda p: p["studies"]["a"].update({"reports": {"reliability": {"n_bins": 0}}}),
            r"study 'a': report 'reliability'.*n_bins",
        ),
        (
            lambda p: p["studies"]["a"].update({"reports": {"tabel": {}}}),
            r"unknown report 'tabel'; valid report names are",
        ),
        (
            lambda p: p["methods"]["ce"].update(
                {"model": {"name": "small_cnn", "params": {"widht": 4}}}
            ),
            r"method 'ce': model 'small_cnn' got unknown parameter\(s\) \['widht'\]",
        ),
        (
            lambda p: p["methods"]["ce"].update(
                {"model": {"name": "small_cnn", "params": {"num_classes": 4}}}
            ),
            r"method 'ce': model 'small_cnn': \['num_classes'\] come from the dataset",
        ),
        (
            lambda p: p["methods"]["ce"].update({"training": {"epochz": 4}}),
            r"method 'ce': unknown training parameter\(s\) \['epochz'\]",
        ),
        (
            lambda p: p["methods"]["ce"].update({"training": {"reuse": "always"}}),
            r"method 'ce': reuse must be one of 'same_code', 'ignore_code', got 'always'",
        ),
        (
            lambda p: p["calibrators"].update({"x": {"name": "temperature_nll", "params": [1]}}),
            "calibrator 'x': .*mapping",
        ),
    ],
)
def test_bad_names_and_hyperparameters_fail_when_pipelines_are_built(parameters, mutate, message):
    bad = copy.deepcopy(parameters)
    mutate(bad)
    with pytest.raises(ValueError, match=message):
        validate_buildable(parse_structure(bad), bad)


def test_fingerprint_is_stable_and_sensitive():
    a = fingerprint({"lr": 0.1, "seed": 0})
    assert a == fingerprint({"seed": 0, "lr": 0.1})
    assert a != fingerprint({"lr": 0.1, "seed": 1})


@pytest.mark.parametrize(
    "env", ["local", "test", "cifar10", "cifar100", "svhn", "tiny_imagenet", "fashion_mnist"]
)
def test_every_shipped_environment_builds(env):
    from calib_pipeline.settings import load_parameters, project_root

    parameters = load_parameters(env, project_root())
    structure = parse_structure(parameters)
    validate_buildable(structure, parameters)
    assert structure.runs(), f"{env} defines no runs"


def test_sweep_labels_use_the_template_or_append_the_value():
    methods = expand_methods(
        {
            "ls": {
                "objective": "label_smoothing",
                "label": "LS-{epsilon}",
                "sweep": {"epsilon": [0.05]},
            },
            "l1": {"objective": "l1_logit_norm", "label": "L1", "sweep": {"alpha": [0.01]}},
        }
    )
    assert methods["ls_epsilon_0p05"]["label"] == "LS-0.05"
    assert methods["l1_alpha_0p01"]["label"] == "L1 (alpha=0.01)"


@pytest.mark.parametrize("env", ["cifar10", "cifar100", "svhn", "tiny_imagenet", "fashion_mnist"])
def test_paper_environments_use_the_papers_split_fractions(env):
    # conf/base holds out more validation data for digits; the paper protocols must not inherit it
    from calib_pipeline.settings import load_parameters, project_root

    splits = load_parameters(env, project_root())["splits"]
    assert splits["standard"]["fractions"] == {"train": 0.9, "val": 0.1}
    assert splits["meta"]["fractions"] == {"train": 0.8, "val": 0.1, "meta_val": 0.1}


def test_fashion_mnist_splits_a_training_subset_and_keeps_the_official_test_set():
    # docs/protocols.md: 12,000 of the 60,000 training images, the papers' fractions of them
    from calib_pipeline.data import ImageData
    from calib_pipeline.data.splits import split_dataset, split_tensors
    from calib_pipeline.settings import load_parameters, project_root

    splits = load_parameters("fashion_mnist", project_root())["splits"]
    labels = torch.arange(60000) % 10
    test_labels = torch.arange(10000) % 10
    data = ImageData(
        "fashion_mnist",
        torch.zeros(60000, 1, 1, 1, dtype=torch.uint8),
        labels,
        torch.zeros(10000, 1, 1, 1, dtype=torch.uint8),
        test_labels,
        10,
        (0.0,),
        (1.0,),
    )
    standard, meta = split_dataset(data, splits["standard"]), split_dataset(data, splits["meta"])
    assert {k: len(v) for k, v in standard.items()} == {"train": 10800, "val": 1200}
    assert {k: len(v) for k, v in meta.items()} == {"train": 9600, "val": 1200, "meta_val": 1200}
    assert torch.equal(split_tensors(data, standard, "test")[1], test_labels)


def test_digits_validation_split_is_as_large_as_its_test_hold_out():
    from calib_pipeline.data import load_dataset
    from calib_pipeline.data.splits import stratified_split
    from calib_pipeline.settings import load_parameters, project_root

    splits = load_parameters("local", project_root())["splits"]
    data = load_dataset("digits")
    labels = data.train_labels.numpy()
    standard = stratified_split(labels, splits["standard"]["fractions"], splits["standard"]["seed"])
    meta = stratified_split(labels, splits["meta"]["fractions"], splits["meta"]["seed"])
    assert abs(len(standard["val"]) - len(data.test_labels)) <= 5
    assert len(meta["val"]) == pytest.approx(len(meta["meta_val"]), abs=5)
    assert len(meta["val"]) >= 200


def test_a_study_evaluates_the_calibrators_its_reports_name_and_those_it_lists(parameters):
    parameters["calibrators"].update(
        {
            "ts_grid": {"name": "temperature_grid_ece", "params": {"preset": "mukhoti"}},
            "hb": {"name": "histogram_binning"},
            "ts_fixed": {"name": "temperature_fixed", "params": {"temperature": 1.5}},
        }
    )
    parameters["studies"]["a"] = {
        "methods": ["ce", "focal_g3"],
        "calibrators": ["hb"],
        "reports": {"mukhoti_table": {"calibrator": "ts_grid"}, "summary": {}},
    }
    parameters["studies"]["b"] = {"methods": ["ce", "ls"], "reports": {"summary": {}}}
    structure = parse_structure(parameters)
    assert structure.studies["a"].calibrators == ("hb", "ts_grid")
    assert structure.studies["b"].calibrators == (), "no report names one, none is listed"
    # a run is fitted the calibrators of every study that has it; ts and ts_fixed, which
    # no study reads, never are
    assert structure.run_calibrators("ce", 0) == ("hb", "ts_grid")
    assert structure.run_calibrators("ce", 2) == ()  # seed 2 is study b's only
    assert structure.run_calibrators("ls_epsilon_0p01", 0) == ()


@pytest.mark.parametrize(
    ("study", "message"),
    [
        (
            {"reports": {"mukhoti_table": {"calibrator": "ts_gird"}}},
            r"study 'a': report 'mukhoti_table' names unknown calibrator 'ts_gird'; defined "
            r"calibrators \(`calibrators` in parameters.yml\): \['ts'\]",
        ),
        (
            {"reports": {"karandikar_table": {}}},  # its default columns read ts and ts_sb_ece
            r"study 'a': report 'karandikar_table' names unknown calibrator 'ts_sb_ece'",
        ),
        ({"calibrators": "ts"}, r"study 'a': calibrators must be a list of keys, got 'ts'"),
        ({"reports": {"mukhoti_tabel": {}}}, r"study 'a': unknown report 'mukhoti_tabel'"),
    ],
)
def test_a_misspelt_calibrator_fails_naming_where_it_is_read(parameters, study, message):
    parameters["studies"]["a"] = {"methods": ["ce"], **study}
    with pytest.raises(ValueError, match=message):
        parse_structure(parameters)


def test_a_dotted_sweep_reaches_a_composite_objectives_nested_hyperparameter(parameters):
    """Karandikar et al. tune κ of the secondary loss per cell: ``secondary.kappa``."""
    raw = {
        "sc_focal_avuc": {
            "objective": "composite",
            "label": "Focal + AvUC (κ={kappa})",
            "params": {
                "primary": {"name": "focal", "gamma": 1.0},
                "secondary": {"name": "avuc"},
                "beta": 1.0,
            },
            "sweep": {"secondary.kappa": [0.2, 0.8]},
        },
        "sc_nll_sbece": {
            "objective": "composite",
            "params": {"primary": "nll", "secondary": "sb_ece"},
            "sweep": {"secondary.temperature": [0.01]},
        },
    }
    methods = expand_methods(raw)
    assert sorted(methods) == [
        "sc_focal_avuc_secondary_kappa_0p2",
        "sc_focal_avuc_secondary_kappa_0p8",
        "sc_nll_sbece_secondary_temperature_0p01",
    ]
    member = methods["sc_focal_avuc_secondary_kappa_0p2"]
    assert member["params"]["secondary"] == {"name": "avuc", "kappa": 0.2}
    assert (
        member["params"]["primary"] == {"name": "focal", "gamma": 1.0}
        and member["label"] == "Focal + AvUC (κ=0.2)"
    )
    assert raw["sc_focal_avuc"]["params"]["secondary"] == {"name": "avuc"}, (
        "the entry itself is not changed"
    )
    assert methods["sc_nll_sbece_secondary_temperature_0p01"]["params"]["secondary"] == {
        "name": "sb_ece",
        "temperature": 0.01,
    }
    bad = copy.deepcopy(parameters)
    bad["methods"] = {**bad["methods"], **raw}
    bad["methods"]["sc_focal_avuc"]["sweep"] = {"secondary.kappa": [1.5]}
    with pytest.raises(ValueError, match=r"method 'sc_focal_avuc_secondary_kappa_1p5': .*kappa"):
        validate_buildable(parse_structure(bad), bad)
    twice = {
        **raw["sc_focal_avuc"],
        "params": {**raw["sc_focal_avuc"]["params"], "secondary": {"name": "avuc", "kappa": 0.5}},
    }
    with pytest.raises(ValueError, match=r"sets 'secondary\.kappa' in params and sweeps it"):
        expand_methods({"sc": twice})
    nulled = {
        **raw["sc_focal_avuc"],
        "params": {**raw["sc_focal_avuc"]["params"], "secondary": {"name": "avuc", "kappa": None}},
    }
    with pytest.raises(ValueError, match=r"sets 'secondary\.kappa' in params and sweeps it"):
        expand_methods({"sc": nulled})  # set to null is set: the sweep would replace it silently
    with pytest.raises(
        ValueError, match=r"its label 'LS \{gamma\[0\]\}' must name only the swept parameter"
    ):
        expand_methods(
            {
                "ls": {
                    "objective": "label_smoothing",
                    "label": "LS {gamma[0]}",
                    "sweep": {"gamma": [0.1]},
                }
            }
        )
