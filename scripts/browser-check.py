#!/usr/bin/env python3
"""What a real browser reads from the enforce layer's Server-Timing header.

Drives a headless Chromium through the DevTools protocol over `--remote-debugging-pipe` (file
descriptors 3 and 4, NUL-terminated JSON messages), so it needs nothing beyond the standard
library: no websocket client, no HTML page on the service. The browser opens a page on the
service itself (a plain-text answer, without a budget), then, from that page, fetches two more
paths with a `Deadline-Budget-Ms` header (same origin, so the timings are visible without
`Timing-Allow-Origin`), and hands back what `performance.getEntriesByType('navigation')` and
`performance.getEntriesByName(url, 'resource')` say in `serverTiming`.

The checks, for a service whose work is WORK_MS long:
  - the page itself (no budget): `queue` and `work` only, work >= WORK_MS;
  - a fetch with a budget larger than the work: 200, `budget` exactly that, work >= WORK_MS;
  - a fetch with a budget of a third of the work: 504, `budget` exactly that, work cut short
    (at least half that budget, less than WORK_MS).

Usage: browser-check.py CHROMIUM BASE_URL WORK_MS
Prints the entries it read as a table and as one JSON line; exits 1 when a check fails.
"""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 60


class Browser:
    """A headless Chromium and one DevTools session on a page."""

    def __init__(self, chromium):
        self.profile = tempfile.mkdtemp(prefix="deadline-browser-")
        # Chromium makes a scratch directory under TMPDIR that only a clean exit removes; the
        # browser is killed, so it gets a TMPDIR inside the profile, removed with it.
        scratch = os.path.join(self.profile, "tmp")
        os.mkdir(scratch)
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def wire_pipes():
            # Chromium reads commands on fd 3 and writes answers on fd 4. Copied out of the
            # way first: the pipes themselves may already sit on 3 or 4.
            read_end, write_end = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--user-data-dir=" + self.profile,
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            env={**os.environ, "TMPDIR": scratch},
            preexec_fn=wire_pipes,
            # Its own process group, so its helpers (zygote, renderer) go with it.
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        # The helpers (zygote, renderer) die with the group; wait until none is left.
        for _ in range(100):
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from the browser in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 65536)
                if not chunk:
                    raise RuntimeError("the browser closed its DevTools pipe")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, params=None, session=True, deadline=None):
        """Sends one command and returns its result (events on the way are skipped)."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = deadline or time.monotonic() + TIMEOUT_S
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + TIMEOUT_S
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in time")
            time.sleep(0.05)

    def evaluate(self, expression):
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


# Run in the page: the navigation entry, then one fetch per budget, each with its resource entry.
SCRIPT = """
(async (budgets) => {
  const timings = (entry) => entry.serverTiming.map((t) => ({name: t.name, dur: t.duration}));
  const nav = performance.getEntriesByType('navigation')[0];
  const out = [{what: 'page', budget: null, status: nav.responseStatus, timing: timings(nav)}];
  for (const budget of budgets) {
    const url = new URL('/fetch-' + budget, location).href;
    const response = await fetch(url, {headers: {'Deadline-Budget-Ms': String(budget)}});
    await response.text();
    const entry = performance.getEntriesByName(url, 'resource').pop();
    out.push({what: 'fetch', budget, status: response.status, timing: timings(entry)});
  }
  return out;
})(%s)
"""


def check(entries, work_ms, big, small):
    failures = []

    def expect(ok, what):
        if not ok:
            failures.append(what)

    page, ok, cut = entries
    names = lambda e: [t["name"] for t in e["timing"]]
    dur = lambda e, name: next(t["dur"] for t in e["timing"] if t["name"] == name)

    expect(page["status"] == 200, f"page: status {page['status']}, not 200")
    expect(names(page) == ["queue", "work"], f"page: metrics {names(page)}, not queue, work")
    if names(page) == ["queue", "work"]:
        expect(dur(page, "work") >= work_ms, f"page: work {dur(page, 'work')} < {work_ms}")

    expect(ok["status"] == 200, f"fetch {big}: status {ok['status']}, not 200")
    expect(names(ok) == ["queue", "work", "budget"], f"fetch {big}: metrics {names(ok)}")
    if names(ok) == ["queue", "work", "budget"]:
        expect(dur(ok, "budget") == big, f"fetch {big}: budget {dur(ok, 'budget')}")
        expect(dur(ok, "work") >= work_ms, f"fetch {big}: work {dur(ok, 'work')} < {work_ms}")

    expect(cut["status"] == 504, f"fetch {small}: status {cut['status']}, not 504")
    expect(names(cut) == ["queue", "work", "budget"], f"fetch {small}: metrics {names(cut)}")
    if names(cut) == ["queue", "work", "budget"]:
        work = dur(cut, "work")
        expect(dur(cut, "budget") == small, f"fetch {small}: budget {dur(cut, 'budget')}")
        # Cut at the budget less the reply reserve; a late timer on a busy machine can add some,
        # but the work must end well before its own WORK_MS.
        expect(
            small / 2 <= work < work_ms,
            f"fetch {small}: work {work} not cut short (expected {small / 2} to {work_ms})",
        )
    return failures


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    chromium, base, work_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    big, small = int(work_ms * 4), int(work_ms / 3)
    browser = Browser(chromium)
    try:
        browser.open(base + "/page")
        entries = browser.evaluate(SCRIPT % json.dumps([big, small]))
    finally:
        browser.close()

    print(f"{'request':<22} {'status':>6}  serverTiming as the browser reads it")
    for e in entries:
        what = "page (no budget)" if e["budget"] is None else f"fetch, budget {e['budget']} ms"
        timing = ", ".join(f"{t['name']} {t['dur']:.3f} ms" for t in e["timing"])
        print(f"{what:<22} {e['status']:>6}  {timing}")
    print(json.dumps(entries))
    failures = check(entries, work_ms, big, small)
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        sys.exit(1)
    print(f"ok: {len(entries)} entries, every check passed")


if __name__ == "__main__":
    main()
