#!/usr/bin/env python3
"""Checks .cargo/mutants.toml without running cargo-mutants (docs/testing.md#mutation-testing):
it parses, each examine_globs entry matches at least one file, each exclude_re names a
file that exists in its leading path and has a comment line above it with its reason."""
import pathlib
import re
import sys
import tomllib

root = pathlib.Path(__file__).resolve().parent.parent
path = root / ".cargo" / "mutants.toml"
text = path.read_text()
config = tomllib.loads(text)
errors = []

for glob in config.get("examine_globs", []):
    if not any(p.is_file() for p in root.glob(glob)):
        errors.append(f"examine_globs: {glob} names no file")

lines = text.splitlines()
for pattern in config.get("exclude_re", []):
    named = re.match(r"\^?((?:[\w-]+/)*[\w-]+)\\\.rs", pattern)
    if not named or not (root / (named.group(1) + ".rs")).is_file():
        errors.append(f"exclude_re: {pattern} does not start with a file that exists")
    # Written as TOML literal strings ('…'), so the line holds the pattern as it is.
    at = next((i for i, line in enumerate(lines) if f"'{pattern}'" in line), None)
    if at is None:
        errors.append(f"exclude_re: {pattern} is not written as a '…' literal string")
    elif at == 0 or not lines[at - 1].strip().startswith("#"):
        errors.append(f"exclude_re: {pattern} has no reason on the line above it")

for e in errors:
    print(f"{path.relative_to(root)}: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
