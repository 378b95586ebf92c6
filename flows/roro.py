"""Prefect flow ``roro``: routing trajectories -> rubricor/judge -> router GRPO -> accuracy-vs-cost evaluation.

Made by flows/factory.py from the registry (rubricflow.registry); see flows/rucl.py for how to run it.
"""

from flows.factory import make_flow

roro, RoRoOverrides = make_flow("roro", "RoRoOverrides")

if __name__ == "__main__":
    import json

    print(json.dumps(roro(), indent=1, default=str))
