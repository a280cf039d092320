"""``python -m gateway.access new-key|hash-key``: make keys and the digests GATEWAY_API_KEYS holds.

``hash-key`` reads the key from stdin (not argv, which lands in shell history and ``ps``).
"""

from __future__ import annotations

import argparse
import json
import sys

from gateway.access.keys import hash_key, new_key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.access")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("new-key", help="print a new random key and its GATEWAY_API_KEYS entry")
    make.add_argument("--name", required=True)
    make.add_argument("--tenant", required=True)
    make.add_argument("--scope", action="append", choices=["query", "admin"], default=None)
    make.add_argument("--requests-per-minute", type=int, default=None)
    make.add_argument("--daily-tokens", type=int, default=None)
    commands.add_parser("hash-key", help="read a key on stdin, print its sha256 hex digest")
    args = parser.parse_args(argv)
    if args.command == "hash-key":
        key = sys.stdin.readline().strip()
        if not key:
            print("hash-key: pass the key on stdin", file=sys.stderr)
            return 2
        print(hash_key(key))
        return 0
    key = new_key()
    entry = {
        "name": args.name,
        "key_sha256": hash_key(key),
        "tenant": args.tenant,
        "scopes": args.scope or ["query"],
        "requests_per_minute": args.requests_per_minute,
        "daily_tokens": args.daily_tokens,
    }
    print(f"key (give it to the client; it is not stored anywhere): {key}")
    print(f"GATEWAY_API_KEYS entry: {json.dumps(entry)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
