"""The ``rubricflow`` command line (``flows.cli:app``): one subcommand per registered stage (what dvc.yaml runs),
the methods' own commands, studies, operations and tools.

``app`` is made in :mod:`flows.cli.base`; each command module imports it and registers its commands (imports run one
way: command modules -> app), and this package imports them all.
"""

import rubricflow.util.env  # noqa: F401  (project-local caches and telemetry off, before anything heavy)

from flows.cli import ops, stages, study, tools  # noqa: F401  (each registers its commands)
from flows.cli.base import app, load_cfg, run_stage, state, usage_error

stages.register(app)
ops.register(app)
study.register(app)

__all__ = ["app", "load_cfg", "run_stage", "state", "usage_error"]
