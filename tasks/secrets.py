"""Prefect Secret blocks for the judge's API key (``judge.openai.secret_block``).

``load_secret(name)`` is the resolver every entry point (the Prefect stage task and the ``rubricflow`` CLI that
``dvc repro`` runs) hands to the stages; ``rubricflow.judge.factory`` calls it only when ``secret_block`` is set
and no key is in the environment. The core never imports Prefect, so the resolver comes from here.
"""

from __future__ import annotations


def load_secret(name: str) -> str:
    """The value of the Prefect Secret block ``name`` (raises, naming the block, when it cannot be loaded)."""
    from prefect.blocks.system import Secret

    try:
        block = Secret.load(name)
    except ValueError as e:  # Prefect: "Unable to find block document named ..."
        raise ValueError(f"Prefect Secret block {name!r} not found (create it in the Prefect UI or with "
                         f"`Secret(value=...).save({name!r})`)") from e
    return block.get()
