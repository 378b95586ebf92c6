"""Test set-up: project-local caches, explicit torch threads, fast tiny models."""

import os

os.environ.setdefault("RUBRICFLOW_THREADS", "1")
# Ray (read when ray is imported): its nodes listen on 127.0.0.1 instead of the machine's interface address, so the
# Ray tests' clusters stay on loopback (tests/flows/test_study_ray.py)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import rubricflow.env  # noqa: E402  (sets cache/state variables before torch, prefect or mlflow load)

rubricflow.env.configure_threads()


import pytest  # noqa: E402


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
