"""How long the host takes to reduce a large tokenizer.json, and how much of it crosses the wire.

Writes a Gemma-3-sized tokenizer.json (262144 vocabulary entries, 110 added tokens) to a
temp folder and times envdoctor.probe.host.model.tokenizer.reduce_tokenizer_json on it.
Run: python bench/tokenizer_reduce_bench.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from envdoctor.probe.host.model.tokenizer import reduce_tokenizer_json

VOCAB = 262144


def write(path: Path) -> None:
    names = {6 + i: f"<unused{i}>" for i in range(99)}
    vocab = {names.get(i, f"\u2581tok{i}"): i for i in range(VOCAB)}
    added = [{"id": i, "content": c, "special": True} for i, c in names.items()]
    data = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": [f"a{i} b{i}" for i in range(VOCAB)]},
            "added_tokens": added, "pre_tokenizer": {"type": "Metaspace"}}
    path.write_text(json.dumps(data))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        write(path)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            reduced = reduce_tokenizer_json(str(path), {"<bos>", "<eos>", "<pad>"})
            times.append(time.perf_counter() - start)
        print(f"tokenizer.json: {path.stat().st_size / 1e6:.1f} MB, {VOCAB} entries")
        print(f"reduce: median {statistics.median(times):.2f} s over {len(times)} runs")
        print(f"shipped: {len(json.dumps(reduced)) / 1e3:.1f} KB")


if __name__ == "__main__":
    main()
