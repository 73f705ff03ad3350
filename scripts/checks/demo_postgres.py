"""The database demo's verdict on a `deadline demo --postgres URL --json` report (.ci/run):
with deadlines no database time after the user left and no statement 100 ms after, without
them more than a second of it.

"No database time" is held to what the sampling of `pg_stat_activity` can tell: a statement
that ended (cancelled on the server, its error already sent) still shows `active` until its
backend goes back to wait for the next command, and each sample that shows it is counted for
the whole interval since the last one. So a statement seen one sample late adds up to one
sampling interval; on a busy machine the backend is descheduled for a few ms and that happens
(seen: 0.003 s, with samples up to 17 ms apart). The bound is the larger of 5 ms (0.00 s at the
README's two decimals) and the run's longest gap between two samples, but never over 50 ms: a
sampler stalled longer cannot vouch for anything.

Usage: python3 scripts/checks/demo_postgres.py REPORT.json
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from report import both_ways, load, need  # noqa: E402

without, with_ = both_ways(load(sys.argv[1]), sys.argv[1])
db_with = need(with_, "db_seconds_after_users_left", where="with deadlines")
db_without = need(without, "db_seconds_after_users_left", where="without deadlines")
empty = need(with_, "db_empty_ms_after_user_left", where="with deadlines")
gap_ms = need(with_, "db_sample_gap_max_ms", where="with deadlines")
resolution = min(max(0.005, gap_ms / 1000.0), 0.05)
problems = []
if db_with > resolution:
    problems.append("with deadlines the database worked %.3f s after the user left (more than "
                    "the sampling's %.3f s)" % (db_with, resolution))
if empty > 100:
    problems.append("with deadlines pg_stat_activity still showed a statement %s ms after the user left" % empty)
if db_without <= 1.0:
    problems.append("without deadlines the database worked only %.3f s after the user left" % db_without)
if problems:
    sys.exit("demo --postgres: " + "; ".join(problems))
print("demo --postgres: database after the user left: %.2f s without deadlines, %.2f s with; empty %.0f ms after the user's answer"
      % (db_without, db_with, empty))
