#!/usr/bin/env python3
"""Checks the workspace's `rust-version` against its locked dependency graph.

No dependency may declare a newer `rust-version` than the workspace (cargo would refuse to
build it with the declared toolchain). Std APIs newer than the declared version are caught
by clippy's `incompatible_msrv` lint, which reads the same field. Prints the declared
version and the newest requirement among the dependencies; exits 1 when a dependency needs
more than the workspace declares.
"""
import json
import subprocess
import sys


def parse(v):
    return tuple(int(x) for x in (v.split(".") + ["0", "0"])[:3])


meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"]))
members = set(meta["workspace_members"])
used = {n["id"] for n in meta["resolve"]["nodes"]}
declared = {p["rust_version"] for p in meta["packages"] if p["id"] in members}
if len(declared) != 1 or None in declared:
    sys.exit(f"every workspace crate must inherit one rust-version, found {declared}")
ours = declared.pop()
needs = sorted(
    ((parse(p["rust_version"]), p["name"], p["version"]) for p in meta["packages"]
     if p["id"] in used and p["id"] not in members and p.get("rust_version")),
    reverse=True)
newest = needs[0]
print(f"workspace rust-version {ours}; newest dependency requirement "
      f"{'.'.join(map(str, newest[0]))} ({newest[1]} {newest[2]})")
too_new = [n for n in needs if n[0] > parse(ours)]
for version, name, v in too_new:
    print(f"  {name} {v} needs Rust {'.'.join(map(str, version))}", file=sys.stderr)
sys.exit(1 if too_new else 0)
