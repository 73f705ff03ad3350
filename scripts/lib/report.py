"""The one way the check scripts read a `deadline` JSON report: every field a check reads must be
there and not null, or the check exits non-zero naming the field.

A check that compares a missing value passes by accident in most languages (`null > 5` is false
in jq and `[ null -gt 5 ]` fails the test, so "not too late" holds; Python formats `None` and
moves on). A check that reads through `need` cannot: deleting any field it reads makes it fail.

From Python (`sys.path` gets this folder; see scripts/checks/outage.py):

    from report import load, need
    report = load(path)                # parses; its objects refuse [...] and .get()
    late = need(report, "runs", 0, "worker_ms_after_users_left")

From a shell script, one value per path, printed on one line, tab-separated:

    read -r fast slow < <(python3 scripts/lib/report.py FILE runs.0.fast_missed runs.0.slow_missed)

A path is dot-separated keys and list indexes. `?` before a path allows null (the field must
still be there): `?runs.1.user_status` prints `null` for a user who heard nothing.
"""
import json
import os
import sys


class Missing(SystemExit):
    """A field a check reads is absent or null: the check fails (exit status 1, the message on
    standard error)."""

    def __init__(self, where, path, what):
        self.text = (
            f"{where}: the report has no {'.'.join(str(p) for p in path)} ({what}); "
            "a check cannot pass on missing data"
        )
        super().__init__(self.text)


def load(path):
    """The parsed report at `path`; a missing or malformed file is a failure too."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise Missing(path, ["(the whole report)"], f"unreadable: {e}")
    return _tracked(doc, (), path)


class _Dict(dict):
    """A report's object that knows where it sits in the report (for messages and for the
    record of reads that scripts/test-checks.py replays). Reading it any other way than with
    `need` is refused: a `.get` with a default is how a missing field passes a check."""

    def __getitem__(self, key):
        raise TypeError(f"read {key!r} with need(), not [...]: a missing field must fail the check")

    def get(self, key, default=None):
        raise TypeError(f"read {key!r} with need(), not .get(): a missing field must fail the check")

    def _refused(self, *args, **kwargs):
        raise TypeError("read a report's fields with need(): a missing field must fail the check")

    # Every other way in: iteration, membership, views, copies.
    __iter__ = __contains__ = keys = values = items = copy = setdefault = pop = _refused


class _List(list):
    """A report's list that knows where it sits; its items do too."""

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, i):
        value = list.__getitem__(self, i)
        if isinstance(i, int):
            return _tracked(value, self.at + (i if i >= 0 else len(self) + i,), self.where)
        return value


def _tracked(value, at, where):
    if isinstance(value, dict) and not isinstance(value, _Dict):
        value = _Dict(value)
    elif isinstance(value, list) and not isinstance(value, _List):
        value = _List(value)
    else:
        return value
    value.at, value.where = at, where
    return value


def _record(at):
    """Appends the path read to the file DEADLINE_REPORT_READS names, if it names one."""
    record = os.environ.get("DEADLINE_REPORT_READS")
    if record:
        with open(record, "a") as f:
            f.write(json.dumps(list(at)) + "\n")


def need(doc, *path, allow_null=False, where=None):
    """The value at `path` in `doc`; exits non-zero (a `Missing`) when a step is absent, the
    wrong kind, or null (unless `allow_null`, and then only the last step)."""
    where = where or getattr(doc, "where", "the report")
    at = getattr(doc, "at", ())
    value = doc
    for i, step in enumerate(path):
        last = i == len(path) - 1
        if isinstance(value, dict) and not isinstance(step, int):
            if not dict.__contains__(value, step):
                raise Missing(where, path[: i + 1], "missing")
            value = dict.__getitem__(value, step)
        elif isinstance(value, list) and isinstance(step, int):
            if not -len(value) <= step < len(value):
                raise Missing(where, path[: i + 1], f"the list has {len(value)} entries")
            step = step if step >= 0 else len(value) + step
            value = list.__getitem__(value, step)
        else:
            raise Missing(where, path[: i + 1], f"not found in a {type(value).__name__}")
        if value is None and not (allow_null and last):
            raise Missing(where, path[: i + 1], "null")
    full = tuple(at) + tuple(path)
    _record(full)
    return _tracked(value, full, getattr(doc, "where", where))


def both_ways(report, where):
    """The report's runs without deadlines and with them, in that order; exits non-zero
    naming what is off when the report has not exactly one of each."""
    runs = {need(r, "deadlines", where=where): r for r in need(report, "runs")}
    if set(runs) != {True, False}:
        sys.exit(f"{where}: the report has runs {sorted(runs)}, not one without deadlines and one with")
    return runs[False], runs[True]


def _plain(value):
    """`value` as plain dicts and lists (the report's own refuse to be walked)."""
    if isinstance(value, dict):
        return {k: _plain(dict.__getitem__(value, k)) for k in dict.keys(value)}
    if isinstance(value, list):
        return [_plain(v) for v in list.__iter__(value)]
    return value


def _steps(text):
    return [int(s) if s.lstrip("-").isdigit() else s for s in text.split(".")]


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: report.py FILE PATH... (PATH: keys and indexes joined by dots; ?PATH allows null)")
    doc = load(argv[1])
    values = []
    for text in argv[2:]:
        allow_null = text.startswith("?")
        value = need(doc, *_steps(text.lstrip("?")), allow_null=allow_null, where=argv[1])
        values.append("null" if value is None else json.dumps(_plain(value)) if isinstance(value, (dict, list, bool)) else str(value))
    print("\t".join(values))


if __name__ == "__main__":
    main(sys.argv)
