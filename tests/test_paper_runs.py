"""The papers' protocols shipped as run files (paper_runs/<env>/<study>_<network>.yml, for
`kedro run --config=...`): each passes the checks `kedro run` makes before anything runs,
trains a network its paper's claims file lists, and together they cover every network
of every paper; the files are the ones paper_runs/generate.py writes from its templates."""

import functools
import importlib.util
from pathlib import Path
from unittest import mock

import pytest
import torch
from click.testing import CliRunner
from kedro.config import OmegaConfigLoader
from kedro.framework.cli import project as kedro_project_cli
from kedro.framework.session import KedroSession
from omegaconf import OmegaConf

from calib_pipeline.models import architecture_tag, build_model
from calib_pipeline.pipeline_registry import check_catalog_dataset
from calib_pipeline.pipelines.checks import check_parameters
from calib_pipeline.pipelines.config import parse_structure, validate_buildable
from calib_pipeline.reports.claim_specs import paper_protocol
from calib_pipeline.reports.claims import schedule_differences
from calib_pipeline.settings import CONFIG_LOADER_ARGS, project_root
from calib_pipeline.training.provenance import method_training

PROJECT = Path(project_root())
RUN_FILES = sorted((PROJECT / "paper_runs").glob("*/*.yml"))
IMAGES = {
    "cifar10": (3, 32, 10),
    "cifar100": (3, 32, 100),
    "svhn": (3, 32, 10),
    "tiny_imagenet": (3, 64, 200),
}


def generator():
    path = PROJECT / "paper_runs" / "generate.py"
    spec = importlib.util.spec_from_file_location("generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_run(path: Path) -> dict:
    content = OmegaConf.to_container(OmegaConf.load(path))
    assert set(content) == {"run"}, f"{path.name}: a run file holds only `run:`"
    return content["run"]


@functools.cache
def _loaded(path: Path) -> tuple[dict, dict]:
    return parameters_of(read_run(path))


def parameters_of(run: dict) -> tuple[dict, dict]:
    """Parameters and globals as `kedro run --config` loads them: the file's `params` are
    the session's runtime params over its env."""
    loader = OmegaConfigLoader(
        conf_source=str(PROJECT / "conf"),
        env=run["env"],
        runtime_params=run["params"],
        **CONFIG_LOADER_ARGS,
    )
    return loader["parameters"], loader["globals"]


def papers_of(parameters: dict, study: str) -> list[str]:
    return parameters["studies"][study]["reports"]["claims"]["papers"]


def test_the_run_files_are_found():
    assert len(RUN_FILES) >= 20, RUN_FILES


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_paper_run_file_passes_the_run_checks_and_trains_its_papers_network(path):
    run = read_run(path)
    assert set(run) == {"env", "pipelines", "params"}
    assert run["env"] == path.parent.name, "the folder names the env"
    network = path.stem.removeprefix(run["pipelines"] + "_")
    assert path.stem.startswith(run["pipelines"] + "_") and network != path.stem, (
        "<study>_<network>.yml"
    )
    parameters, globals_ = _loaded(path)
    check_parameters(parameters)
    structure = parse_structure(parameters)
    validate_buildable(structure, parameters)
    check_catalog_dataset(parameters, globals_)
    assert run["pipelines"] in structure.studies
    model = parameters["model"]
    assert model["name"].startswith(network), (
        f"the file is named for {network}, trains {model['name']}"
    )
    tag = architecture_tag(model["name"], model["params"])
    for paper in papers_of(parameters, run["pipelines"]):
        trained = paper_protocol(paper)["datasets"][run["env"]]["architectures"]
        assert tag in trained, f"{paper} never trained {tag} on {run['env']}"
    channels, size, classes = IMAGES[run["env"]]
    with torch.device("meta"):
        net = build_model(
            model["name"],
            in_channels=channels,
            num_classes=classes,
            image_size=size,
            **model["params"],
        )
        assert net(torch.empty(2, channels, size, size)).shape == (2, classes)
    for key, value in run["params"]["training"].items():
        assert parameters["training"][key] == value, f"training.{key} reached the run"


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_run_file_trains_every_member_with_the_settings_its_paper_states(path):
    """What the claims report checks after the run (`protocol.schedules` of the claims
    files): no setting the paper states differs, for any method of the study."""
    run = read_run(path)
    parameters, _ = _loaded(path)
    structure = parse_structure(parameters)
    schedules = {
        m: method_training(parameters["training"], structure.methods[m].training).as_dict()
        for m in structure.studies[run["pipelines"]].methods
    }
    for paper in papers_of(parameters, run["pipelines"]):
        entry = paper_protocol(paper)["datasets"][
            run["env"]
        ]  # a KeyError: the paper never trained on it
        assert schedule_differences(schedules, entry) == {}
        if paper != "wang":  # Wang et al.'s schedule is in an appendix the seed text lacks
            assert entry["settings"], f"{paper} states no settings for {run['env']}"


def test_every_network_a_paper_trained_on_a_dataset_has_a_run_file():
    """Per paper and dataset (of the shipped envs), the networks of its claims file."""
    covered: dict[tuple[str, str], set[str]] = {}
    for path in RUN_FILES:
        run = read_run(path)
        parameters, _ = _loaded(path)
        model = parameters["model"]
        for paper in papers_of(parameters, run["pipelines"]):
            covered.setdefault((paper, run["env"]), set()).add(
                architecture_tag(model["name"], model["params"])
            )
    expected = {
        (paper, dataset): set(entry["architectures"])
        for paper in ("focal_meta", "mukhoti", "karandikar", "wang", "singh")
        for dataset, entry in paper_protocol(paper)["datasets"].items()
    }
    assert covered == expected


def test_singh_decays_ce_erl_and_mixup_by_5_and_the_others_by_10():
    run = read_run(PROJECT / "paper_runs" / "cifar10" / "dark_side_resnet50.yml")
    parameters, _ = parameters_of(run)
    structure = parse_structure(parameters)
    decay = {
        method: structure.methods[method].training.get(
            "lr_decay", parameters["training"]["lr_decay"]
        )
        for method in structure.studies["dark_side"].methods
    }
    assert decay == {
        "ce": 0.2,
        "erl": 0.2,
        "mixup": 0.2,
        "ls_epsilon_0p05": 0.1,
        "focal_gamma_3": 0.1,
    }
    assert structure.studies["dark_side"].seeds == (0, 1, 2), "3 trials"
    assert structure.methods["erl"].objective == "entropy_regularized", (
        "a method keeps its own keys"
    )


def test_wang_on_cifar100_excludes_the_l1_settings_the_paper_discards():
    """§3.1: "L1 Norm fails on CIFAR-100 ... when α ≥ 0.05" -- conf/cifar100 leaves them out
    of the calibratability table's choice; CIFAR-10 keeps them."""
    parameters, _ = _loaded(PROJECT / "paper_runs" / "cifar100" / "calibratability_resnet32.yml")
    table = parameters["studies"]["calibratability"]["reports"]["calibratability_table"]
    assert table["exclude"] == ["l1_norm_alpha_0p05", "l1_norm_alpha_0p1"]
    assert table["calibrators"] == ["ts_grid_wang", "hist_binning"], "the base options are kept"
    assert "validation_size_sweep" in parameters["studies"]["calibratability"]["reports"], (
        "other reports kept"
    )
    members = parse_structure(parameters).studies["calibratability"].methods
    assert set(table["exclude"]) <= set(members)
    cifar10, _ = _loaded(PROJECT / "paper_runs" / "cifar10" / "calibratability_resnet32.yml")
    assert (
        "exclude" not in cifar10["studies"]["calibratability"]["reports"]["calibratability_table"]
    )


def test_kedro_run_config_hands_the_file_to_the_session():
    """Through Kedro's own `run` command: the file's env, pipelines and nested params reach
    the session (a run file's params are runtime params, lists and all)."""
    path = PROJECT / "paper_runs" / "cifar10" / "dark_side_vgg16_bn.yml"
    session = mock.MagicMock()
    with mock.patch.object(KedroSession, "create") as create:
        create.return_value.__enter__.return_value = session
        result = CliRunner().invoke(
            kedro_project_cli.run, [f"--config={path}"], obj=mock.MagicMock()
        )
    assert result.exit_code == 0, result.output
    kwargs = create.call_args.kwargs
    assert kwargs["env"] == "cifar10"
    assert kwargs["runtime_params"]["training"]["milestones"] == [150, 225]
    assert kwargs["runtime_params"]["methods"]["ce"] == {"training": {"lr_decay": 0.2}}
    assert session.run.call_args.kwargs["pipeline_names"] == ["dark_side"]


def test_the_run_files_are_the_ones_the_templates_generate():
    """A run file edited by hand (or a template changed without rerunning the script) fails
    here: `python paper_runs/generate.py` rewrites them."""
    assert generator().stale_files() == []
    assert len(generator().run_files()) == len(RUN_FILES)


def test_the_check_names_each_file_that_is_not_as_generated(tmp_path, capsys):
    generate = generator()
    assert generate.main(["--folder", str(tmp_path)]) == 0
    assert generate.main(["--check", "--folder", str(tmp_path)]) == 0
    edited = tmp_path / "cifar100" / "focal_resnet50.yml"
    edited.write_text(edited.read_text().replace("epochs: 350", "epochs: 35"))
    (tmp_path / "svhn" / "calibratability_resnet32.yml").unlink()
    (tmp_path / "cifar10" / "focal_my_copy.yml").write_text("run: {env: cifar10}\n")
    capsys.readouterr()
    assert generate.main(["--check", "--folder", str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines()[:3] == [
        "paper_runs/cifar100/focal_resnet50.yml: differs from its template",
        "paper_runs/svhn/calibratability_resnet32.yml: missing",
        "paper_runs/cifar10/focal_my_copy.yml: no template writes it",
    ]
    assert "epochs: 35\n" in edited.read_text(), "--check writes nothing"
    assert generate.main(["--folder", str(tmp_path)]) == 0  # rewrites the two, keeps the copy
    assert generate.stale_files(tmp_path) == ["cifar10/focal_my_copy.yml: no template writes it"]


def test_a_cifar100_run_file_differs_from_its_cifar10_twin_only_in_the_env():
    """One template per paper: the two datasets' files cannot drift apart."""
    for path in (PROJECT / "paper_runs" / "cifar10").glob("*.yml"):
        cifar10 = read_run(path)
        cifar100 = read_run(PROJECT / "paper_runs" / "cifar100" / path.name)
        assert {**cifar10, "env": "cifar100"} == cifar100, path.name


def test_two_templates_writing_one_file_are_refused(monkeypatch):
    generate = generator()
    monkeypatch.setattr(generate, "PROTOCOLS", generate.PROTOCOLS + generate.PROTOCOLS[:1])
    with pytest.raises(
        ValueError, match="two templates write paper_runs/cifar10/focal_meta_resnet18"
    ):
        generate.run_files()
