"""The outage check's verdict on a `deadline load --outage 3:4 --json` report (see
scripts/outage-check.sh): with deadlines fewer inventory calls per user request during the
outage than without, at most 1.15, and in-time answers back within 2 s of its end.

Usage: python3 scripts/checks/outage.py REPORT.json
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from report import both_ways, load, need  # noqa: E402

without, with_ = both_ways(load(sys.argv[1]), sys.argv[1])
failures = []
# Null means no user was sent during the outage: allowed to be read, then a failure.
cw = need(with_, "calls_per_request_in_outage", allow_null=True, where="with deadlines")
cn = need(without, "calls_per_request_in_outage", allow_null=True, where="without deadlines")
rec = need(with_, "outage", "recovery_s", allow_null=True, where="with deadlines")
def show(x):
    return "none" if x is None else f"{x:.2f}"


print(f"calls per request in the outage: without {show(cn)}, with {show(cw)}")
print(f"back in time after the outage: with {show(rec)} s")
if cw is None or cn is None:
    failures.append("no user was sent during the outage")
else:
    if not cw < cn:
        failures.append(f"with deadlines {cw:.2f} calls per request, not fewer than {cn:.2f} without")
    if cw > 1.15:
        failures.append(f"with deadlines {cw:.2f} calls per request (needs <= 1.15)")
if rec is None or rec > 2.0:
    failures.append(f"in-time answers came back after {rec} s (needs <= 2 s)")
for f in failures:
    print("  -", f)
print("outage check:", "FAILED" if failures else "passed")
sys.exit(1 if failures else 0)
