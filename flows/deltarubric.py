"""Prefect flow ``deltarubric``: preference pairs -> warm-start SFT -> multi-role GRPO -> judge accuracy tables.

Made by flows/factory.py from the registry (rubricflow.registry); see flows/rucl.py for how to run it.
"""

from flows.factory import make_flow

deltarubric, DeltaRubricOverrides = make_flow("deltarubric", "DeltaRubricOverrides")

if __name__ == "__main__":
    import json

    print(json.dumps(deltarubric(), indent=1, default=str))
