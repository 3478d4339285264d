"""Regenerate the rehearsal dataset (deterministic): `python examples/data/generate.py`.

Short instruction/response pairs about arithmetic, colours and capitals: patterned enough that a tiny model's loss
falls visibly within a few dozen steps, varied enough that it cannot memorise one row.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Spain", "Madrid"),
            ("Egypt", "Cairo"), ("Chile", "Santiago"), ("Norway", "Oslo"), ("India", "New Delhi"),
            ("Canada", "Ottawa"), ("Italy", "Rome"), ("Ghana", "Accra")]
COLOURS = [("sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"), ("blood", "red"),
           ("a lemon", "yellow"), ("an orange", "orange"), ("a plum", "purple")]
WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def row(rng: random.Random) -> dict[str, str]:
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(1, 49), rng.randint(1, 49)
        return {"prompt": f"What is {a} plus {b}?", "completion": f" {a} plus {b} is {a + b}."}
    if kind == 1:
        country, city = rng.choice(CAPITALS)
        return {"prompt": f"What is the capital of {country}?", "completion": f" The capital of {country} is {city}."}
    if kind == 2:
        thing, colour = rng.choice(COLOURS)
        return {"prompt": f"What colour is {thing}?", "completion": f" The colour of {thing} is {colour}."}
    n = rng.randint(2, 6)
    start = rng.randint(0, len(WORDS) - n)
    return {"text": "Counting: " + ", ".join(WORDS[start:start + n]) + "."}


def write(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    path.write_text("".join(json.dumps(row(rng), sort_keys=True) + "\n" for _ in range(rows)))


if __name__ == "__main__":
    write(HERE / "train.jsonl", 400, seed=7)
    write(HERE / "validation.jsonl", 32, seed=8)
