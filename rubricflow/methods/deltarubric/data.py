"""The preference pairs DeltaRubric judges: the kernel's pair schema, reader, writer and data gate
(``rubricflow.data.pairs``), under the names the package and its entry points import from here."""

from rubricflow.data.pairs import (
    PairDataError,
    PreferencePair,
    load_pair_images,
    read_pairs,
    validate_pairs,
    write_pairs,
)

__all__ = ["PairDataError", "PreferencePair", "load_pair_images", "read_pairs", "validate_pairs", "write_pairs"]
