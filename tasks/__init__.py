"""Prefect tasks of the flows: DVC's stages (tasks/dvc_stages.py), the rubricflow stage functions in-process
(tasks/stage.py), and what the flows share.

Importing this package sets Prefect defaults the orchestration layer relies on (values exported by the user win):
a temporary Prefect server (a flow run without PREFECT_API_URL) can take far longer than Prefect's default 20 s
startup timeout to come up on a loaded machine (start-up times: ``bench/ops_timings.py``, docs/operations.md,
"Timings"). Flows import ``tasks``
before ``prefect`` so the value is read when Prefect builds its settings.
"""

import os

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
