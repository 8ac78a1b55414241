"""Checks the built docs site in headless Chromium: pages load, links resolve, code is not cut.

Run by ``.ci/docs_check.sh``, which builds the site and serves it on
127.0.0.1. Usage::

    python .ci/docs_browser.py http://127.0.0.1:PORT/ --screenshot guide.png \
        --screenshot-page guide/sweeps/

Starting from the home page it crawls every same-origin link (``a[href]``) in
Chromium, at a desktop and a phone viewport, and fails when

- a page or one of its same-origin resources (stylesheets, scripts, images)
  does not load (an HTTP status of 400 or more, or a failed request);
- a link's ``#fragment`` names no element of the page it points to;
- a code block (``pre``, ``code``) is wider than its box (``scrollWidth >
  clientWidth``) without being scrollable (``overflow-x: auto`` or
  ``scroll``): text that would be cut off. A scrollable block must also
  leave room for its scroll bar below the last line (``padding-bottom``), so
  the bar never covers text;
- a page is wider than the window (something sticks out);
- the text a reader copies from a code block (its ``innerText``, what the
  theme's copy button and a selection take) differs from the code: styling
  that wraps lines must not change them.

Before the site, it checks a small fixture site with one planted problem of
each kind, so that a check that finds nothing cannot pass unnoticed.

It talks to Chromium over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages on file descriptors 3 and 4),
with the standard library alone: nothing to download, no driver to match to
the browser's version.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import http.server
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # Offline: any host but the local server fails at once (the theme links
    # Google Fonts, which would otherwise wait for a network timeout).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--remote-debugging-pipe",
]
VIEWPORTS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}
TIMEOUT = 30.0

# Run in each page: every code block that overflows, with what makes it safe or not.
CODE_BLOCKS_JS = r"""
(() => {
  const out = [];
  for (const el of document.querySelectorAll("pre, code")) {
    if (el.closest("pre") && el.tagName === "CODE" && el.parentElement.tagName !== "PRE") continue;
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 && rect.height === 0) continue;  // not displayed (a closed tab)
    const style = getComputedStyle(el);
    const text = el.textContent.slice(0, 80);
    if (el.tagName === "CODE" && el.parentElement.tagName === "PRE") {
      // What the theme's copy button copies (innerText, marked as copying),
      // and what a selection copies: the code as written, line for line.
      el.setAttribute("data-md-copying", "");
      const copied = el.innerText.trimEnd();
      el.removeAttribute("data-md-copying");
      if (copied !== el.textContent.trimEnd()) out.push({kind: "copy", tag: el.tagName, text});
    }
    if (el.scrollWidth <= el.clientWidth + 1) continue;
    const overflowX = style.overflowX;
    out.push({
      kind: "overflow",
      tag: el.tagName,
      text,
      scrollWidth: el.scrollWidth,
      clientWidth: el.clientWidth,
      overflowX,
      paddingBottom: parseFloat(style.paddingBottom),
      scrollable: overflowX === "auto" || overflowX === "scroll",
    });
  }
  return out;
})()
"""

LINKS_JS = r"""
(() => {
  const ids = Array.from(document.querySelectorAll("[id]"), (e) => e.id)
    .concat(Array.from(document.querySelectorAll("a[name]"), (e) => e.name));
  const links = Array.from(document.querySelectorAll("a[href]"), (a) => a.href);
  const status = (performance.getEntriesByType("navigation")[0] || {}).responseStatus || 0;
  const blocks = document.querySelectorAll("pre").length;
  const root = document.documentElement;
  const pageOverflow = root.scrollWidth - root.clientWidth;
  return {ids, links, status, title: document.title, blocks, pageOverflow};
})()
"""


class Browser:
    """Chromium driven over ``--remote-debugging-pipe`` (fd 3: commands in, fd 4: messages out)."""

    def __init__(self, binary: str, profile: str):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's fds 3 and 4, whatever numbers the pipes got here: moved
        # high first, so that placing one cannot clobber the other.
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 100)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 100)
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)

        def child_fds() -> None:  # in the child, before exec; dup2 makes inheritable copies
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=child_fds,  # not thread-safe, and there are no threads here
            close_fds=False,  # our other descriptors are close-on-exec (PEP 446)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(high_r)
        os.close(high_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive(TIMEOUT)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} within {timeout} s")
            self.events.append(self._receive(remaining))

    def _receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                raise TimeoutError(f"Chromium sent nothing within {timeout} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"Chromium closed the pipe (exit {self.process.poll()}):\n{err[-3000:]}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


class Tab:
    """One page target, with the network events of the current navigation."""

    def __init__(self, browser: Browser, viewport: tuple[int, int, bool]):
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Network"):
            self.send(f"{domain}.enable")
        width, height, mobile = viewport
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )

    def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.browser.send(method, params, self.session)

    def load(self, url: str) -> list[str]:
        """Navigates to ``url`` and waits for its load event; returns the failed same-origin requests."""
        self.browser.events.clear()
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            return [f"{url}: {result['errorText']}"]
        self.browser.wait_for("Page.loadEventFired", self.session)
        origin = _origin(url)
        failures, requests = [], {}
        for event in self.browser.events:
            params = event.get("params", {})
            if event.get("method") == "Network.requestWillBeSent":
                requests[params["requestId"]] = params["request"]["url"]
            elif event.get("method") == "Network.responseReceived":
                response = params["response"]
                if _origin(response["url"]) == origin and response["status"] >= 400:
                    failures.append(f"{response['url']}: HTTP {response['status']}")
            elif event.get("method") == "Network.loadingFailed" and not params.get("canceled"):
                failed = requests.get(params["requestId"], "?")
                if _origin(failed) == origin:
                    failures.append(f"{failed}: {params.get('errorText')}")
        return failures

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"]["value"]

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc


def _page(url: str) -> str:
    """The URL without its fragment and query: one page."""
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(query="", fragment=""))


def _is_page(url: str) -> bool:
    path = urllib.parse.urlsplit(url).path
    return path.endswith("/") or path.endswith(".html")


def check(
    root: str, browser: Browser, viewport: str, screenshot: tuple[Path, str] | None
) -> tuple[list[str], int, int]:
    """Crawls from ``root``; returns the problems, the pages and the code blocks seen."""
    tab = Tab(browser, VIEWPORTS[viewport])
    problems: list[str] = []
    ids: dict[str, set[str]] = {}
    fragments: list[tuple[str, str, str]] = []  # (from page, to page, fragment)
    queue, seen, blocks = [root], {root}, 0
    linked_from = {root: "the start"}
    while queue:
        url = queue.pop(0)
        where = f"loading {url}, linked from {linked_from[url]}"
        problems += [f"[{viewport}] {p} ({where})" for p in tab.load(url)]
        info = tab.evaluate(LINKS_JS)
        if info["status"] >= 400 or info["status"] == 0:
            problems.append(f"[{viewport}] {url}: page status {info['status']} ({where})")
            continue
        ids[url] = set(info["ids"])
        if info["pageOverflow"] > 1:
            problems.append(
                f"[{viewport}] {url}: the page is {info['pageOverflow']} px wider than the window"
            )
        blocks += info["blocks"]
        for block in tab.evaluate(CODE_BLOCKS_JS):
            if block["kind"] == "copy":
                problems.append(
                    f"[{viewport}] {url}: copied code differs from the code: {block['tag']} {block['text']!r}"
                )
                continue
            what = (
                f"{block['tag']} {block['text']!r} ({block['scrollWidth']} px in {block['clientWidth']} px)"
            )
            if not block["scrollable"]:
                problems.append(f"[{viewport}] {url}: cut code, overflow-x {block['overflowX']}: {what}")
            elif block["paddingBottom"] < 8:
                problems.append(
                    f"[{viewport}] {url}: scroll bar over the last line "
                    f"(padding-bottom {block['paddingBottom']} px): {what}"
                )
        for link in info["links"]:
            if _origin(link) != _origin(root):
                continue
            target, fragment = _page(link), urllib.parse.urlsplit(link).fragment
            if fragment:
                fragments.append((url, target, urllib.parse.unquote(fragment)))
            if target not in seen and _is_page(target):
                seen.add(target)
                linked_from[target] = url
                queue.append(target)
            elif target not in seen:  # a file (an image, the sitemap): it must exist
                seen.add(target)
                problems += [f"[{viewport}] {p} (linked from {url})" for p in tab.load(target)]
        if screenshot is not None and url == urllib.parse.urljoin(root, screenshot[1]):
            tab.screenshot(screenshot[0])
    for source, target, fragment in fragments:
        if target in ids and fragment not in ids[target]:
            problems.append(f"[{viewport}] {source}: link to {target}#{fragment}: no such anchor")
    return problems, len(ids), blocks


# A site with one planted problem of each kind, and one page without any.
_HEAD = '<!doctype html><html><head><title>{}</title><link rel="icon" href="data:,"></head><body>'


def _pre(style: str, text: str) -> str:
    return f'<pre style="white-space: pre; width: 200px; {style}">{text}</pre>'


_FIXTURE = {
    "index.html": _HEAD.format("fixture")
    + '<a href="good.html">good</a> <a href="good.html#there">anchor</a>'
    + '<a href="good.html#nowhere">bad anchor</a> <a href="missing.html">missing page</a>'
    + '<img src="missing.png" alt="missing image">'
    + _pre("overflow: hidden", "CUT" + "x" * 200)
    + _pre("overflow: auto; padding: 0", "BAR" + "y" * 200)
    + '<pre><code><span style="display: block">COPY = 1\n</span><span style="display: block">b = 2\n</span>'
    + "</code></pre>"
    + '<div style="width: 5000px">wide</div></body></html>',
    "good.html": _HEAD.format("good")
    + '<h2 id="there">there</h2><a href="index.html">home</a>'
    + _pre("overflow-x: auto; padding: 12px", "OK" + "z" * 200)
    + _pre("white-space: pre-wrap; overflow-wrap: anywhere", "WRAP" + "w" * 200)
    + "</body></html>",
}
_PLANTED = [
    "missing.html: HTTP 404",
    "missing.html: page status 404",
    "link to {root}good.html#nowhere: no such anchor",
    "missing.png: HTTP 404",
    "cut code, overflow-x hidden: PRE 'CUTxx",
    "scroll bar over the last line (padding-bottom 0 px): PRE 'BARyy",
    "the page is",
    "copied code differs from the code: CODE 'COPY = 1",
]


def self_test(browser: Browser) -> list[str]:
    """Runs the checks on a fixture site; returns what they failed to find or wrongly found."""
    with tempfile.TemporaryDirectory(prefix="docs-check-fixture-") as site:
        for name, text in _FIXTURE.items():
            Path(site, name).write_text(text)

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=site, **kwargs)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            root = f"http://127.0.0.1:{server.server_address[1]}/index.html"
            found, _, _ = check(root, browser, "desktop", None)
        finally:
            server.shutdown()
            server.server_close()
    base = root.rsplit("/", 1)[0] + "/"
    errors = []
    for planted in _PLANTED:
        planted = planted.format(root=base)
        if not any(planted in problem for problem in found):
            errors.append(f"self-test: the checker missed a planted problem: {planted!r}")
    for problem in found:
        if not any(planted.format(root=base) in problem for planted in _PLANTED):
            errors.append(f"self-test: the checker flagged what is no problem: {problem}")
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", help="the served site's home page, http://127.0.0.1:PORT/")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--screenshot", type=Path, help="a PNG of --screenshot-page (desktop viewport)")
    parser.add_argument("--screenshot-page", default="guide/sweeps/", help="relative to root")
    args = parser.parse_args()
    root = args.root if args.root.endswith("/") else args.root + "/"
    start = time.perf_counter()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="docs-check-chromium-") as profile:
        browser = Browser(args.chromium, profile)
        try:
            version = browser.send("Browser.getVersion")["product"]
            # The checks must find what they look for: first on a site with
            # one planted problem of each kind.
            failed_self_test = self_test(browser)
            if failed_self_test:
                for problem in failed_self_test:
                    print(f"FAIL {problem}", file=sys.stderr)
                return 1
            print(f"{version}: the checks find the {len(_PLANTED)} problems planted in a test site")
            for viewport in VIEWPORTS:
                shot = (
                    (args.screenshot, args.screenshot_page)
                    if args.screenshot and viewport == "desktop"
                    else None
                )
                found, pages, blocks = check(root, browser, viewport, shot)
                problems += found
                print(f"{version}, {viewport} viewport: {pages} pages, {blocks} code blocks checked")
        finally:
            browser.close()
    if args.screenshot is not None and not args.screenshot.exists():
        problems.append(f"no screenshot: {args.screenshot_page} was not reached from {root}")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    print(f"{len(problems)} problems, {time.perf_counter() - start:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
