"""Prefect flow ``rucl``: data -> validate -> base_model -> sft -> rubrics -> stratify -> rucl (GRPO) -> rucl_eval.

The tasks are the stages ``dvc repro`` and ``rubricflow <stage>`` run (flows/factory.py builds the flow from the
registry, rubricflow.registry). Parameters are typed:
the Prefect UI renders a form with a profile dropdown, the reward-mode and curriculum-shape dropdowns, the step
counts and an ``extra`` map for any other dotted key; defaults come from params.yaml. Run it

* directly: ``python -m flows.rucl`` (a temporary Prefect server is started if none is configured),
* as the deployment ``rucl/rucl-local`` (prefect.yaml; ``make ui`` registers it and runs a worker),
* up to a stage: ``rucl(until="sft")``.
"""

from flows.factory import make_flow

rucl, RuCLOverrides = make_flow("rucl", "RuCLOverrides")

if __name__ == "__main__":
    import json

    print(json.dumps(rucl(), indent=1, default=str))
