"""Protocols: each configuration environment writes its artifacts under its own name.

A protocol is what an environment configures (dataset, model, schedule, splits, methods).
``protocol:`` in ``conf/<env>/globals.yml`` names it, and every artifact path of the catalog
carries it (``data/06_models/<protocol>/...``), so two environments never share a "latest"
checkpoint, logits file or table. Raw data stays shared per dataset (``data/01_raw``).

The trap this module closes: an environment that does not declare its own protocol
(``conf/test/`` without a ``globals.yml``, or a new ``conf/cifar10_wrn/``) inherits base's,
and an environment folder copied from another keeps the other's; both would write into
another protocol's folders and mix results again. :func:`check_protocol` refuses them when
the pipelines are built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

PROTOCOL = "protocol"
# Environments that may use base's protocol: base itself, and local (machine-specific
# settings on top of base, Kedro's default run environment) as long as it keeps base's
# dataset.
INHERITING_ENVS = ("base", "local")
VALID_PROTOCOL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
GLOBALS_FILE = "globals.yml"


def declared_globals(conf_source: str | Path, env: str) -> dict[str, Any]:
    """What ``conf/<env>/globals.yml`` itself sets (empty when there is no such file)."""
    path = Path(conf_source) / env / GLOBALS_FILE
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def declared_protocols(conf_source: str | Path) -> dict[str, str]:
    """Environment -> the protocol its own ``globals.yml`` declares, for every environment
    folder under ``conf_source`` that declares one."""
    root = Path(conf_source)
    envs = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    found = {env: declared_globals(root, env).get(PROTOCOL) for env in envs}
    return {env: str(protocol) for env, protocol in found.items() if protocol is not None}


def check_protocol(
    env: str,
    globals_: Mapping[str, Any],
    conf_source: str | Path,
    dataset_names: Iterable[str] = (),
) -> str:
    """The session's protocol, once it is one that keeps this environment's artifacts apart.

    Args:
        env: the session's environment (``local`` when none was named).
        globals_: the session's merged globals (base, then ``env``).
        conf_source: the configuration folder (``conf/``); an archive's environments are
            not read, only the protocol's name is checked.
        dataset_names: registered dataset names; a protocol named like one must use it.

    Returns:
        The protocol.

    Raises:
        ValueError: no protocol, an invalid name, an environment that inherits another's
            protocol, a protocol another environment folder declares too (a copied folder),
            or a protocol named after another dataset -- naming the file to edit.
    """
    protocol = globals_.get(PROTOCOL)
    dataset = (globals_.get("dataset") or {}).get("name")
    own = declared_globals(conf_source, env)
    where = f"conf/{env}/{GLOBALS_FILE}"
    if protocol is None:
        raise ValueError(
            f"no protocol is declared for env {env!r}: every artifact path carries the protocol "
            f"(data/06_models/<protocol>/...). Add `{PROTOCOL}: <name>` to {where}."
        )
    if not VALID_PROTOCOL.match(str(protocol)):
        raise ValueError(
            f"protocol {protocol!r} (from the globals of env {env!r}) must start with a letter "
            "and contain only letters, digits, '_' and '-' "
            "(it names a folder of every artifact path)"
        )
    keeps_dataset = (own.get("dataset") or {}).get("name") is None
    readable = Path(conf_source).is_dir()  # not a packaged archive (--conf-source=conf.tar.gz)
    if readable and PROTOCOL not in own and not (env in INHERITING_ENVS and keeps_dataset):
        raise ValueError(
            f"env {env!r} does not declare its own protocol: it would write its artifacts under "
            f"protocol {protocol!r}, into the folders of another environment, and mix with its "
            f'results (the same "latest" checkpoints, logits and tables). Add '
            f"`{PROTOCOL}: {env}` (or another name of its own) to {where}."
        )
    if readable and PROTOCOL in own:
        _check_unique(env, str(protocol), conf_source)
    if protocol in set(dataset_names) and protocol != dataset:
        raise ValueError(
            f"protocol {protocol!r} of env {env!r} is the name of another dataset than the one it "
            f"uses ({dataset!r}): its folders would read as {protocol!r} results. Name it after "
            f"this environment in {where}, e.g. `{PROTOCOL}: {env}`."
        )
    return str(protocol)


def _check_unique(env: str, protocol: str, conf_source: str | Path) -> None:
    """Refuse a protocol that another environment folder declares too (a copied folder)."""
    others = sorted(
        e for e, p in declared_protocols(conf_source).items() if p == protocol and e != env
    )
    if others:
        raise ValueError(
            f"env {env!r} runs protocol {protocol!r}, which conf/{others[0]}/{GLOBALS_FILE} "
            f"declares too (was conf/{env}/ copied from conf/{others[0]}/?): two environments "
            "with one protocol share every artifact folder and mix their results. Give env "
            f"{env!r} a protocol of its own in conf/{env}/{GLOBALS_FILE}, e.g. `{PROTOCOL}: {env}`."
        )
