"""Dataset schema, preference pairs, synthetic generators, adapters from public formats and validation gates."""

from rubricflow.data.schema import Sample, load_images, read_dataset, write_dataset

__all__ = ["Sample", "load_images", "read_dataset", "write_dataset"]
