"""Bad command-line input and bad parameter files end in one line naming the item and what was expected.

Each row: the arguments (and environment), the exit code, a fragment of the message. No row may print a
traceback: usage and config errors exit 2 with ``error: ...`` or ``<file>: ...``.
"""

import pytest
from typer.testing import CliRunner

from flows.cli import app


def _params(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


ENV_THREADS = "RUBRICFLOW_THREADS: expected a positive integer"
EMPTY = "empty parameters file; expected a mapping of parameters (see params.yaml)"

CASES = {
    # --set values that are not YAML name the item
    "set-unclosed-list": (["--set", "sft.steps=[1,2"], {}, "--set 'sft.steps=[1,2': the value is not valid YAML"),
    "set-no-equals": (["--set", "sft.steps"], {}, "--set expects key=value, got 'sft.steps'"),
    "set-empty-key": (["--set", "=3"], {}, "--set expects key=value, got '=3'"),
    # threads
    "threads-negative": (["--threads", "-3"], {}, "--threads: expected a positive integer, got -3"),
    "threads-zero": (["--threads", "0"], {}, "--threads: expected a positive integer, got 0"),
    "env-threads-text": ([], {"RUBRICFLOW_THREADS": "abc"}, f"{ENV_THREADS}, got 'abc'"),
    "env-threads-zero": ([], {"RUBRICFLOW_THREADS": "0"}, f"{ENV_THREADS}, got '0'"),
    "env-threads-negative": ([], {"RUBRICFLOW_THREADS": "-1"}, f"{ENV_THREADS}, got '-1'"),
    # --set values of the wrong type (strict sections)
    "set-bool-for-int": (["--set", "sft.steps=true"], {}, "key `sft.steps`: Input should be a number, not a boolean"),
    "set-inf-lr": (["--set", "sft.lr=.inf"], {}, "key `sft.lr`: Input should be a finite number"),
    "set-nan-lr": (["--set", "sft.lr=nan"], {}, "key `sft.lr`: Input should be a finite number"),
    "set-inf-timeout": (
        ["--set", "judge.openai.timeout_s=.inf"], {}, "key `judge.openai.timeout_s`: Input should be a finite number"
    ),
}


@pytest.mark.parametrize("args, env, message", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_line_naming_it(args, env, message):
    res = CliRunner().invoke(app, [*args, "show-config"], env=env)
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    # usage errors are one line; invalid values are the file's header line plus one line for the key
    assert len(lines) == (2 if message.startswith("key `") else 1), res.output
    assert lines[0] == "params.yaml: invalid parameters" if len(lines) == 2 else lines[0].startswith("error: ")


FILES = {
    "not-utf8": (
        b"seed: 1\n\xff\xfe: 2\n", "not UTF-8 text: byte 0xff at line 2 (offset 8); expected a UTF-8 YAML file"
    ),
    "empty": (b"", EMPTY),
    "only-comments": (b"# nothing here\n\n", EMPTY),
    "duplicate-top-level": (b"seed: 1\nsft:\n  steps: 3\nseed: 2\n", "key `seed` is defined twice (lines 1 and 4)"),
    "duplicate-nested": (
        b"sft:\n  steps: 3\n  lr: 0.1\n  steps: 4\n", "key `sft.steps` is defined twice (lines 2 and 4)"
    ),
    "not-yaml": (b"seed: [1, 2\n", "not valid YAML: while parsing a flow sequence"),
}


@pytest.mark.parametrize("data, message", list(FILES.values()), ids=list(FILES))
def test_bad_params_file_is_one_line_naming_it(tmp_path, data, message):
    path = _params(tmp_path, "params.yaml", data)
    res = CliRunner().invoke(app, ["--params", path, "show-config"])
    assert res.exit_code == 2, res.output
    if message.startswith("not valid YAML"):  # the parser's words follow, with the line and column
        assert res.output.startswith(f"{path}: {message}") and "(line 2, column 1)" in res.output
    else:
        assert res.output.strip() == f"{path}: {message}"
    assert len(res.output.strip().splitlines()) == 1
    assert "Traceback" not in res.output


def test_params_that_is_a_folder(tmp_path):
    res = CliRunner().invoke(app, ["--params", str(tmp_path), "show-config"])
    assert res.exit_code == 2
    assert res.output.strip() == f"{tmp_path}: is a folder; expected a parameters file (YAML)"
    assert "Traceback" not in res.output


def test_valid_overrides_still_apply():
    res = CliRunner().invoke(
        app, ["--threads", "1", "--set", "sft.steps=7", "--set", "sft.lr=1e-3", "--set", "seed=5", "show-config"]
    )
    assert res.exit_code == 0, res.output
    assert "\nseed: 5\n" in res.output and "steps: 7" in res.output and "lr: 0.001" in res.output


def test_repro_of_an_unknown_stage_is_one_line_naming_the_stages(monkeypatch, tmp_path):
    import flows.repro

    monkeypatch.setattr(flows.repro, "LOCK_FILE", tmp_path / "repro.lock")  # never the project's own lock
    res = CliRunner().invoke(app, ["--no-track", "repro", "nosuchstage"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "'nosuchstage'" in res.output
    assert "stages: " in res.output and "rucl_eval" in res.output
