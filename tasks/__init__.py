"""Prefect tasks wrapping the rubricflow stage functions (see tasks/stage.py), and what the flows share.

Importing this package sets Prefect defaults the orchestration layer relies on (values exported by the user win):
a temporary Prefect server (a flow run without PREFECT_API_URL) may take 20 s to come up on a quiet 2-core machine
and several minutes on a loaded one, far beyond Prefect's default 20 s startup timeout. Flows import ``tasks``
before ``prefect`` so the value is read when Prefect builds its settings.
"""

import os

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
