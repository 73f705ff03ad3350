#!/usr/bin/env python3
"""Each JSON check fails when a field it reads is missing or null.

For every check in CHECKS (a script that takes a report file and exits 0 when its figures pass)
and its recorded report (scripts/checks/fixtures/, copied from a real run of the command the
check reads), this runs the check once on the whole report, which must pass, recording every
field it reads through scripts/lib/report.py; then once per field with that field deleted, and
once with it set to null where the check does not allow null: each must exit non-zero and say
which field is missing. A check that read a field without the shared reader would pass on the
deleted copy, and this fails.

Usage: python3 scripts/test-checks.py
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CHECKS = [
    ("scripts/checks/outage.py", "scripts/checks/fixtures/outage.json"),
    ("scripts/checks/demo_postgres.py", "scripts/checks/fixtures/demo_postgres.json"),
]


def run(check, report, reads=None):
    env = dict(os.environ)
    env.pop("DEADLINE_REPORT_READS", None)
    if reads:
        env["DEADLINE_REPORT_READS"] = reads
    return subprocess.run([sys.executable, os.path.join(ROOT, check), report],
                          capture_output=True, text=True, env=env)


def parent_of(doc, path):
    for step in path[:-1]:
        doc = doc[step]
    return doc


def main():
    failures, tried = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for check, fixture in CHECKS:
            fixture = os.path.join(ROOT, fixture)
            reads = os.path.join(tmp, "reads")
            whole = run(check, fixture, reads)
            if whole.returncode != 0:
                failures.append(f"{check} fails on its whole recorded report: {whole.stdout}{whole.stderr}")
                continue
            paths = []
            with open(reads) as f:
                for line in f:
                    path = json.loads(line)
                    if path not in paths:
                        paths.append(path)
            os.remove(reads)
            if not paths:
                failures.append(f"{check} read no field through the shared reader")
            doc = json.load(open(fixture))
            for path in paths:
                for how in ("deleted", "null"):
                    changed = copy.deepcopy(doc)
                    parent = parent_of(changed, path)
                    if how == "deleted":
                        if isinstance(parent, list):
                            del parent[path[-1]:]  # a list index: the list ends before it
                        else:
                            del parent[path[-1]]
                    else:
                        if parent[path[-1]] is None:
                            continue  # already null in the real run: allowed there
                        parent[path[-1]] = None
                    copy_path = os.path.join(tmp, "changed.json")
                    with open(copy_path, "w") as f:
                        json.dump(changed, f)
                    out = run(check, copy_path)
                    tried += 1
                    said = "the report has no" in out.stderr or "not one without deadlines and one with" in out.stderr
                    if out.returncode == 0 or not said:
                        # A null the check allows must still fail the verdict or be said.
                        if how == "null" and out.returncode != 0:
                            continue
                        failures.append(f"{check}: with {'.'.join(map(str, path))} {how} it exited "
                                        f"{out.returncode}: {out.stdout.strip()} {out.stderr.strip()}")
            print(f"{check}: {len(paths)} fields read, each deleted and nulled: the check failed every time"
                  if not any(f.startswith(check) for f in failures) else f"{check}: FAILED")
    for f in failures:
        print("  -", f)
    print(f"{tried} changed reports: {'FAILED' if failures else 'every check failed on each'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
