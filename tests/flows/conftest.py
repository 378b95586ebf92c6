"""Fixtures of the flow tests: a temporary Prefect API server per test module."""

import pytest


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory):
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, PREFECT_RESULTS_PERSIST_BY_DEFAULT, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-storage")
    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: storage, PREFECT_RESULTS_PERSIST_BY_DEFAULT: True}):
        with prefect_test_harness(server_startup_timeout=300):
            yield storage
