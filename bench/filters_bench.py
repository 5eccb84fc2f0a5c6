"""Filter throughput: `Filter.mask` over an Arrow column against a Python loop over `matches`.

The rows and the two loops: bench/README.md, "Filter evaluation".
"""

from __future__ import annotations

import argparse
import random
import timeit
from collections.abc import Callable, Sequence

import pyarrow as pa

from lakepubsub.resources.filters import Filter, parse_filter, parse_label_query

FILTERS = {
    "has": 'attributes:"iana.org/language_tag"',
    "equals": 'attributes.type = "order.paid"',
    "prefix": 'hasPrefix(attributes.type, "order.")',
    "compound": (
        'attributes.region = "eu" AND (hasPrefix(attributes.type, "order.") '
        'OR attributes:priority) AND NOT attributes.source = "test"'
    ),
}
LABEL_QUERIES = {"label in": "region in (eu, us) AND NOT priority"}
SEED = 7
EMPTY_ROW_FRACTION = 0.1
# Shares of the rows with each optional attribute.
LANGUAGE_FRACTION, PRIORITY_FRACTION, SOURCE_FRACTION = 0.5, 0.3, 0.1


def make_rows(count: int) -> list[dict[str, str] | None]:
    rng = random.Random(SEED)
    types = ["order.paid", "order.shipped", "user.created", "user.deleted"]
    rows: list[dict[str, str] | None] = []
    for index in range(count):
        if rng.random() < EMPTY_ROW_FRACTION:
            rows.append(None)
            continue
        row = {
            "type": rng.choice(types),
            "region": rng.choice(["eu", "us", "asia"]),
            "id": str(index),
        }
        if rng.random() < LANGUAGE_FRACTION:
            row["iana.org/language_tag"] = rng.choice(["en", "fr", "ja"])
        if rng.random() < PRIORITY_FRACTION:
            row["priority"] = "high"
        if rng.random() < SOURCE_FRACTION:
            row["source"] = "test"
        rows.append(row)
    return rows


def best_of(repeat: int, run: Callable[[], object]) -> float:
    # timeit turns the garbage collector off unless its setup turns it back on.
    return min(timeit.repeat(run, "gc.enable()", number=1, repeat=repeat))


def measure(
    name: str, parsed: Filter, column: pa.Array, dicts: list[dict[str, str]], repeat: int
) -> None:
    rows = len(column)
    expected = [parsed.matches(row) for row in dicts]
    assert parsed.mask(column).to_pylist() == expected, name
    mask_s = best_of(repeat, lambda: parsed.mask(column))
    loop_s = best_of(repeat, lambda: [parsed.matches(row) for row in dicts])
    convert_s = best_of(
        repeat, lambda: [parsed.matches(dict(row or ())) for row in column.to_pylist()]
    )
    print(
        f"{name:10} matched {sum(expected):6}/{rows}  "
        f"mask {rows / mask_s / 1e6:7.2f} M rows/s  "
        f"matches loop {rows / loop_s / 1e6:5.2f} M rows/s  "
        f"(with to_pylist {rows / convert_s / 1e6:5.2f} M rows/s)  "
        f"mask speed-up x{loop_s / mask_s:5.1f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--rows", type=int, default=100_000)
    arguments.add_argument("--repeat", type=int, default=5)
    options = arguments.parse_args(argv)
    rows = make_rows(options.rows)
    column = pa.array(rows, type=pa.map_(pa.string(), pa.string()))
    dicts = [row or {} for row in rows]
    print(f"{options.rows} rows, pyarrow {pa.__version__}, best of {options.repeat}")
    for name, text in FILTERS.items():
        measure(name, parse_filter(text), column, dicts, options.repeat)
    for name, text in LABEL_QUERIES.items():
        measure(name, parse_label_query(text), column, dicts, options.repeat)
