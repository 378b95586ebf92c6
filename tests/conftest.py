"""Test set-up: project-local caches, explicit torch threads, fast tiny models."""

import os

os.environ.setdefault("RUBRICFLOW_THREADS", "1")

import rubricflow.env  # noqa: E402  (sets cache/state variables before torch, prefect or mlflow load)

rubricflow.env.configure_threads()
