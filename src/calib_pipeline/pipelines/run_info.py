"""The session's identity as a node input: ``run_info = {"run_id", "env", "protocol"}``.

``hooks.RunInfoHook`` puts it into the catalog before a pipeline runs; a test's in-memory
catalog adds it itself. Nodes read it as an input, never from process globals, so they
also run in another process (a Dask worker). Kept free of heavy imports: the hooks load it
with the project's settings.
"""

from __future__ import annotations

RUN_INFO = "run_info"


def run_info(run_id: str, env: str, protocol: str) -> dict[str, str]:
    """The ``run_info`` input.

    Args:
        run_id: the session's id (Kedro's save version of every artifact it writes).
        env: the session's configuration environment.
        protocol: the environment's protocol (``protocol`` in its globals.yml), the folder
            its artifacts live in.

    Returns:
        ``{"run_id": run_id, "env": env, "protocol": protocol}``.
    """
    return {"run_id": str(run_id), "env": str(env), "protocol": str(protocol)}


# The parameters a run's configuration is built from, and the session's identity (its
# protocol); every node that checks a run's artifacts against the session takes them under
# these keyword names.
SESSION_INPUTS = {
    "dataset": "params:dataset",
    "model": "params:model",
    "training": "params:training",
    "splits": "params:splits",
    "run_info": RUN_INFO,
}
