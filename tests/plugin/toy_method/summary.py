from pathlib import Path

from rubricflow.pipeline.summary import load_report


def summary_lines(r: Path) -> list[str]:
    m = load_report(r / "toy_count.json")
    return [f"toy         counted {m['steps']} steps, score {m['score']:.1f}"] if m else []
