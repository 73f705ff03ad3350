"""The database demo's verdict on a `deadline demo --postgres URL --json` report (.ci/run):
with deadlines no database time after the user left and no statement 100 ms after, without
them more than a second of it.

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
problems = []
if db_with > 0.0:
    problems.append("with deadlines the database worked %.3f s after the user left" % db_with)
if empty > 100:
    problems.append("with deadlines pg_stat_activity still showed a statement %s ms after the user left" % empty)
if db_without <= 1.0:
    problems.append("without deadlines the database worked only %.3f s after the user left" % db_without)
if problems:
    sys.exit("demo --postgres: " + "; ".join(problems))
print("demo --postgres: database after the user left: %.2f s without deadlines, %.2f s with; empty %.0f ms after the user's answer"
      % (db_without, db_with, empty))
