#!/usr/bin/env bash
# The minimum supported Rust versions the crates declare (`rust-version`), checked three ways:
#   1. every dependency the library crates build with (normal and build dependencies, as
#      Cargo.lock resolves them) declares a rust-version no newer than the crate's own;
#   2. clippy's `incompatible_msrv` lint (on in CI's clippy step) rejects standard-library APIs
#      newer than a crate's rust-version;
#   3. when a toolchain of exactly that version is installed, the crate is built with it.
# The machines this runs on have one stable toolchain and no way to download another, so the
# third check usually says it skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p target
cargo metadata --format-version 1 --locked > target/msrv-metadata.json
: > target/msrv-crates.txt
python3 - target/msrv-metadata.json <<'PY'
import json, sys

meta = json.load(open(sys.argv[1]))
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
members = set(meta["workspace_members"])

def version(text):
    parts = [int(x) for x in (text or "0").split(".")]
    return tuple(parts + [0] * (3 - len(parts)))  # "1.85" and "1.85.0" are the same version

def closure(root):
    seen, stack = set(), [root]
    while stack:
        for dep in nodes[stack.pop()]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if kinds & {None, "build"} and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                stack.append(dep["pkg"])
    return seen

failed = False
for member in sorted(members, key=lambda i: packages[i]["name"]):
    package = packages[member]
    if package.get("publish") == []:
        continue  # not published: its users build it with this repository's toolchain
    own = package["rust_version"]
    if own is None:
        print(f"msrv: {package['name']} declares no rust-version")
        failed = True
        continue
    newest = max(
        ((version(packages[d]["rust_version"]), packages[d]["name"]) for d in closure(member)),
        default=((0,), "none"),
    )
    with open("target/msrv-crates.txt", "a") as out:
        out.write(f"{package['name']} {own}\n")
    ok = newest[0] <= version(own)
    failed |= not ok
    print(
        f"msrv: {package['name']} {own}: newest dependency minimum "
        f"{'.'.join(map(str, newest[0]))} ({newest[1]}) {'ok' if ok else 'TOO NEW'}"
    )
sys.exit(1 if failed else 0)
PY

built=0
skipped=0
while read -r name version; do
    if rustup toolchain list 2>/dev/null | grep -q "^${version}"; then
        echo "msrv: building ${name} with Rust ${version}"
        cargo "+${version}" check --locked -p "${name}"
        built=$((built + 1))
    else
        echo "msrv: skipped building ${name} with Rust ${version}: no such toolchain here ($(rustc --version))"
        skipped=$((skipped + 1))
    fi
done < target/msrv-crates.txt
if [ "$built" -eq 0 ]; then
    echo "msrv: passed on declared versions only: no crate was built with its own minimum toolchain ($skipped skipped)"
else
    echo "msrv: passed ($built crates built with their minimum toolchain, $skipped skipped)"
fi
