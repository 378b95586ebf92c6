"""Reward benchmarks -> preference-pair records (``rubricflow.data.pairs``): VL-RewardBench and Multimodal
RewardBench. Each yields plain dicts (the pair's fields plus ``image`` and the name of its field), which ``ingest``
turns into ``PreferencePair`` rows after storing the image.

* ``vlrewardbench``  parquet (as published) or json/jsonl with ``id``, ``query``, ``image`` (or ``image_path``),
                     ``response`` (two), ``human_ranking``
* ``mmrewardbench``  json list (as published) or jsonl/parquet with ``ID``, ``Text``, ``Image``, ``Output1``,
                     ``Output2``, ``Better``, ``Category``

The reward benchmarks' published layouts (read in their public releases):

* VL-RewardBench (Hugging Face dataset ``MMInstruction/VL-RewardBench``, dataset card ``README.md``: features and
  ``configs``): one parquet file ``data/test-00000-of-00001.parquet`` with columns ``id``, ``query``, ``response``
  (sequence of two strings), ``image`` (the ``datasets`` Image feature, stored in parquet as a struct
  ``{bytes: binary, path: string}`` with the encoded image in ``bytes``), ``human_ranking`` (sequence of two ints:
  ``[0, 1]`` = the first response is preferred, ``[1, 0]`` = the second), ``models``, ``judge``, ``rationale``,
  ``query_source`` (the subset a query comes from; used as the category), ``ground_truth``.
* Multimodal RewardBench (github.com/facebookresearch/multimodal_rewardbench, ``README.md`` and
  ``scripts/0_download_data.py`` / ``2_get_accuracy.py``): ``data/all_data.json``, a JSON list of objects with
  ``ID``, ``Text`` (prompt), ``Image`` (a path relative to ``data/``, e.g. ``images/nocaps/13062.jpg``: the image
  root is the JSON file's folder unless ``--image-root`` says otherwise), ``Output1``, ``Output2``, ``Better``
  (``"Output1"`` or ``"Output2"``) and ``Category`` (e.g. ``open_generation/correctness_task``).

A tie (``human_ranking`` ``[0, 0]``, ``Better`` other than ``Output1``/``Output2``) is an error naming file,
record and field.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rubricflow.data.adapters.records import (
    IngestError,
    rank_value,
    read_records,
    require_fields,
    safe_id,
    text_field,
)


def vlrewardbench(src: Path, image_root: Path) -> Iterator[dict]:
    for i, row in enumerate(read_records(src)):
        require_fields(src, row, i, "query", "response", "human_ranking")
        field_name = "image_path" if row.get("image_path") else "image"
        img = row.get(field_name)
        if img is None:
            raise IngestError(f"{src}: record {i}: missing required field `image` (or `image_path`)")
        resp, rank = row["response"], row["human_ranking"]
        if not (isinstance(resp, list) and len(resp) == 2):
            raise IngestError(f"{src}: record {i}: field `response` must be a list of two responses")
        if not (isinstance(rank, list) and len(rank) == 2):
            raise IngestError(f"{src}: record {i}: field `human_ranking` must rank the two responses, got {rank!r}")
        r0, r1 = (rank_value(src, r, i, "human_ranking") for r in rank)
        if r0 == r1:
            raise IngestError(f"{src}: record {i}: field `human_ranking` is a tie ({rank!r}); a preference pair needs "
                              "one preferred response ([0, 1] or [1, 0])")
        # lower rank = better (VL-RewardBench: [0, 1] means the first response is preferred)
        category = row.get("query_source") or (str(row["id"]).split("_")[0] if row.get("id") else "")
        yield {
            "id": f"vlrb-{safe_id(row.get('id', i))}",
            "image": img,
            "image_field": field_name,
            "question": text_field(src, row["query"], i, "query"),
            "response_a": text_field(src, resp[0], i, "response[0]"),
            "response_b": text_field(src, resp[1], i, "response[1]"),
            "preferred": "A" if r0 < r1 else "B",
            "category": str(category),
            "source": "VL-RewardBench",
        }


def mmrewardbench(src: Path, image_root: Path) -> Iterator[dict]:
    for i, row in enumerate(read_records(src)):
        require_fields(src, row, i, "Text", "Image", "Output1", "Output2", "Better")
        better = str(row["Better"]).strip()
        if better not in ("Output1", "Output2"):
            raise IngestError(f"{src}: record {i}: field `Better` must be 'Output1' or 'Output2' (a tie or another "
                              f"label is not a preference), got {better!r}")
        yield {
            "id": f"mmrb-{safe_id(row.get('ID', i))}",
            "image": row["Image"],
            "image_field": "Image",
            "question": text_field(src, row["Text"], i, "Text"),
            "response_a": text_field(src, row["Output1"], i, "Output1"),
            "response_b": text_field(src, row["Output2"], i, "Output2"),
            "preferred": "A" if better == "Output1" else "B",
            "category": str(row.get("Category", "")),
            "source": "MultimodalRewardBench",
        }
