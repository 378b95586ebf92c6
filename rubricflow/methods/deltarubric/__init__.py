"""DeltaRubric: a Disagreement Planner and a Checklist Verifier in one policy, trained by multi-role GRPO.

Light imports only here (parsers and the pair schema); model code lives in rollout / evaluate / stages and is
imported by name. See docs in each module: data (pair schema + gate), synthetic (pair generator), prompts and
parsing (the roles' templates and parsers), roles (role = template + parser + reward), rewards (pure math),
targets (SFT targets from facts), rollout (multi-role episodes), evaluate (judge accuracy tables), stages.
"""

from rubricflow.methods.deltarubric.data import (
    PairDataError,
    PreferencePair,
    load_pair_images,
    read_pairs,
    validate_pairs,
    write_pairs,
)
from rubricflow.methods.deltarubric.parsing import VerdictParse, parse_checklist, parse_verdict

__all__ = [
    "PairDataError",
    "PreferencePair",
    "VerdictParse",
    "load_pair_images",
    "parse_checklist",
    "parse_verdict",
    "read_pairs",
    "validate_pairs",
    "write_pairs",
]
