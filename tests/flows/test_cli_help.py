"""Every ``rubricflow`` help page: no ``<bool>`` type shown for a flag, and every stage's help line is whole (its
first docstring paragraph, not its first physical line, which can stop mid-sentence)."""

from __future__ import annotations

import click
import pytest
from typer.main import get_command
from typer.testing import CliRunner


def _commands():
    from flows.cli import app

    root = get_command(app)
    out = [((), root)]
    for name, cmd in sorted(root.commands.items()):
        out.append(((name,), cmd))
        if isinstance(cmd, click.Group):
            out += [((name, sub), c) for sub, c in sorted(cmd.commands.items())]
    return out


@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=lambda p: " ".join(p) or "rubricflow")
def test_help_shows_no_bool_metavar(path):
    from flows.cli import app

    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output, res.output


def test_stage_help_lines_are_whole_sentences():
    from flows.cli.stages import stage_help
    from rubricflow import registry

    for spec in registry.stages().values():
        line = stage_help(spec)
        assert "\n" not in line
        assert line.rstrip().endswith((".", ")", "`", "?", "!")), f"{spec.name}: help ends mid-sentence: {line!r}"
