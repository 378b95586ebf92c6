"""Adapters from public dataset formats into rubricflow's schema: ``rubricflow ingest --format F --src PATH --out DIR``.

* ``virl39k``, ``mathverse`` (``rl_prompts``): RL prompt datasets -> ``Sample`` rows;
* ``vlrewardbench``, ``mmrewardbench`` (``reward_benchmarks``): reward benchmarks -> preference pairs
  (``rubricflow.data.pairs``).

Shared pieces: reading a source's records and the checks on them (``records``), images copied or decoded into
``DIR/images`` so the dataset is self-contained (``images``), and ``ingest`` with the checks that keep it from
deleting or leaking data (``convert``).
"""

from rubricflow.data.adapters.convert import FORMATS, check_destination, ingest
from rubricflow.data.adapters.records import IngestError
from rubricflow.data.adapters.rl_prompts import infer_answer_type

__all__ = ["FORMATS", "IngestError", "check_destination", "infer_answer_type", "ingest"]
