from pathlib import Path

from rubricflow.util.io import write_json


def count(n: int, scale: float, seed: int, out_dir: str | Path) -> dict:
    """Count to ``n``; the score is ``scale * n + seed % 7`` (a known number for the tests)."""
    values = list(range(1, n + 1))
    write_json(Path(out_dir) / "count.json", values)
    return {"steps": n, "score": scale * n + seed % 7}
