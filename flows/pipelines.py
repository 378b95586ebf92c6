"""The Prefect flows of the registered pipelines: one flow per ``rubricflow.registry`` pipeline, named as it is
(``rucl``, ``deltarubric``, ``roro``, ``smol``, and any method installed from outside), made by flows/factory.py.

A flow runs its pipeline's DVC stages as linked tasks (DVC decides what is stale); its form has the profile, the
pipeline's knobs and ``until``. Run one

* directly: ``python -m flows.pipelines rucl`` (a temporary Prefect server is started if none is configured),
* as its deployment ``<pipeline>/<pipeline>-local`` (prefect.yaml: entrypoint ``flows/pipelines.py:<pipeline>``;
  ``make ui`` registers them and runs a worker; tests/ops checks prefect.yaml against the registry),
* up to a stage: ``FLOWS["rucl"](until="sft")``.
"""

from prefect import Flow

from flows.factory import make_flow
from flows.params import Overrides
from rubricflow.registry import pipelines

FLOWS: dict[str, Flow] = {}
OVERRIDES: dict[str, type[Overrides]] = {}  # pipeline -> its form's parameter model
for _name in pipelines():
    FLOWS[_name], OVERRIDES[_name] = make_flow(_name)
globals().update(FLOWS)  # `flows/pipelines.py:<pipeline>` is each flow's Prefect entrypoint

if __name__ == "__main__":
    import json
    import sys

    if len(sys.argv) != 2 or sys.argv[1] not in FLOWS:
        sys.exit(f"usage: python -m flows.pipelines PIPELINE (one of {', '.join(FLOWS)})")
    print(json.dumps(FLOWS[sys.argv[1]](), indent=1, default=str))
