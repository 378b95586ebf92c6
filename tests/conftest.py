"""Test set-up: project-local caches, explicit torch threads, fast tiny models."""

import os

os.environ.setdefault("RUBRICFLOW_THREADS", "1")
# Ray (read when ray is imported): its nodes listen on 127.0.0.1 instead of the machine's interface address, so the
# Ray tests' clusters stay on loopback (tests/flows/test_study_ray.py)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import rubricflow.util.env  # noqa: E402  (sets cache/state variables before torch, prefect or mlflow load)

rubricflow.util.env.configure_threads()


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def _test_mlflow_store(tmp_path_factory):
    return tmp_path_factory.mktemp("mlflow-store")


@pytest.fixture(autouse=True)
def _mlflow_store_outside_the_project(_test_mlflow_store, monkeypatch):
    """Tests never write into the project's own MLflow store (.rubricflow/mlflow): every test starts with
    MLFLOW_TRACKING_URI on a SQLite store in a temporary folder (its artifacts next to it) and no
    RUBRICFLOW_MLFLOW_ARTIFACTS; a test that sets its own store still does so with monkeypatch."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{_test_mlflow_store / 'mlflow.db'}")
    monkeypatch.delenv("RUBRICFLOW_MLFLOW_ARTIFACTS", raising=False)


@pytest.fixture
def register_method():
    """``register_method(method)`` adds a ``rubricflow.registry.Method`` for the test; it is removed afterwards."""
    from rubricflow import registry

    added: list[str] = []

    def add(method):
        registry.register(method)
        added.append(method.name)
        return method

    yield add
    for name in added:
        registry.unregister(name)


# A study refuses to write a report from a working tree that differs from its commit (rubricflow.study.provenance):
# the suite runs in trees that may differ (a developer's), so study reports in tests see a fixed clean commit, except
# in the tests of that rule, which mark themselves `real_code_state` and make their own git repository.
TEST_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _clean_code_state(request, monkeypatch):
    if request.node.get_closest_marker("real_code_state"):
        return
    from rubricflow.study import provenance

    monkeypatch.setattr(provenance, "code_state", lambda outputs=(), root=None: provenance.CodeState(TEST_COMMIT))


@pytest.fixture(autouse=True)
def _cli_state_per_test():
    """The CLI keeps its parsed options (``--set``, ``--params``, ``--profile``) in a module-level state object; a test
    that invokes the CLI must not hand its options to the next test that calls a stage directly."""
    import sys

    base = sys.modules.get("flows.cli.base")
    saved = dict(vars(base.state)) if base is not None else None
    yield
    base = sys.modules.get("flows.cli.base")
    if base is not None:
        for k in ("params", "profile", "overrides", "track"):  # the options the CLI callback sets
            setattr(base.state, k, (saved or {}).get(k, getattr(type(base.state), k)))


def _point_prefect_console_at_stderr() -> None:
    import logging
    import sys

    if "prefect.logging.handlers" not in sys.modules:
        return
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for handler in {h for lg in loggers for h in lg.handlers if isinstance(h, PrefectConsoleHandler)}:
        handler.stream = handler.console.file = sys.stderr  # not setStream: it flushes the old, maybe closed


@pytest.fixture(autouse=True)
def _prefect_console_on_this_tests_stderr():
    """Prefect binds its console log handler to the ``sys.stderr`` of the moment it first sets up logging (its import).
    Where that moment fell inside a stream a test swapped in and closed since (a CLI runner's, ``capsys``'), every
    later flow in the process would log to a closed file, and a flow with ``log_prints`` recurse on the error it
    prints; which test imports Prefect first depends on the order the tests run in (one process, or each of
    ``pytest -n`` workers). Each test points those handlers at its own ``sys.stderr``, and back at the session's
    after it (for the module fixtures' teardown: a Prefect server's)."""
    _point_prefect_console_at_stderr()
    yield
    _point_prefect_console_at_stderr()
