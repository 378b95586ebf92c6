"""A scripted policy's answer to a prompt that quotes lookup-tool values (the quoted verifier's checks, the generative
judge's tool answer), shared by the lookup-tool tests."""

import re

_QUOTE = re.compile(r"image \S+ = (\S+), A \S+ = (\S+), B \S+ = (\S+)$", flags=re.M)


def mark_quotes(prompt: str) -> str:
    """One line per quote in ``prompt``, the response whose claim equals the quoted image value (``neither`` when none
    or both do), then the verdict the lines favour (A on a tie)."""
    lines, tally = [], {"A": 0, "B": 0}
    for i, (img, a, b) in enumerate(_QUOTE.findall(prompt), 1):
        fav = {(True, False): "A", (False, True): "B"}.get((a == img, b == img), "neither")
        tally[fav] = tally.get(fav, 0) + 1
        lines.append(f"{i}. x -> {fav}")
    verdict = "B" if tally["B"] > tally["A"] else "A"
    return "\n".join(lines + [f"verdict: {verdict}"])
