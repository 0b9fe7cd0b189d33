"""A headless Chromium, driven over the DevTools protocol, to read the book as a reader's browser shows it.

:class:`Browser` starts Debian's ``chromium-headless-shell`` (or ``chromium``) with a fresh profile and a remote
debugging pipe on the loopback address, and talks to one page with the ``websocket-client`` package (a dependency of
Jupyter's server, so already installed). :meth:`Browser.visit` loads a page and returns a :class:`PageReport`: the
console errors and uncaught exceptions, the requests that failed, every image and whether it loaded, every link, and
how many formulas MathJax typeset; :meth:`Browser.fonts_for` asks Chromium which fonts drew an element's text (the
check that Chinese terms render as glyphs, not boxes); :meth:`Browser.screenshot` saves a PNG.
"""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
"""the browser binaries tried, in order (Debian's packages first)"""


def find_chromium() -> str | None:
    """The path of the first of :data:`CANDIDATES` on ``PATH``, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageReport:
    """What a page showed: see :meth:`Browser.visit`."""

    url: str
    title: str
    errors: list[str] = field(default_factory=list)          # console errors and uncaught exceptions
    failed_requests: list[str] = field(default_factory=list)  # URL and reason
    images: list[dict] = field(default_factory=list)         # {"src", "loaded"}
    links: list[str] = field(default_factory=list)           # every <a href>, resolved by the browser
    math: int = 0                                             # formulas typeset by MathJax (mjx-container)
    math_errors: int = 0                                      # formulas MathJax could not parse (merror)
    raw_tables: list[str] = field(default_factory=list)      # lines shown as "| a | b |": Markdown left unrendered


_PAGE_FACTS = r"""JSON.stringify({
  title: document.title,
  images: Array.from(document.images).map(i => ({src: i.currentSrc || i.src, loaded: i.complete && i.naturalWidth > 0})),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  math: document.querySelectorAll('mjx-container').length,
  math_errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
  pending_math: document.querySelectorAll('.math:not(:has(mjx-container))').length,
  raw_tables: document.body.innerText.split('\n').filter(l => /^\s*\|.*\|\s*$/.test(l)).slice(0, 5),
})"""


class Browser:
    """A headless Chromium with one page, for ``with Browser() as b: report = b.visit(url)``.

    Args:
        binary: the browser (default: :func:`find_chromium`); ``FileNotFoundError`` if there is none.
        width, height: the window, in CSS pixels.
    """

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError(f"no headless Chromium on PATH (tried {', '.join(CANDIDATES)}); on Debian: "
                                    "apt-get install chromium-headless-shell")
        self.size = (width, height)
        self._id = 0
        self._events: list[dict] = []

    def __enter__(self) -> "Browser":
        import websocket

        self._profile = tempfile.mkdtemp(prefix="course-chromium-")
        self._proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={self._profile}",
             f"--window-size={self.size[0]},{self.size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._debugging_port()
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log", "Network", "DOM", "CSS"):
            self._call(f"{domain}.enable")
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._ws.close()
        finally:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            shutil.rmtree(self._profile, ignore_errors=True)

    def _debugging_port(self, timeout_s: float = 30.0) -> int:
        active = Path(self._profile) / "DevToolsActivePort"
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if active.is_file() and active.read_text().strip():
                return int(active.read_text().split()[0])
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with code {self._proc.returncode} at start")
            time.sleep(0.1)
        raise TimeoutError(f"{self.binary} did not open its debugging port in {timeout_s:.0f} s")

    def _call(self, method: str, **params) -> dict:
        """Send one DevTools command and wait for its answer; events that arrive meanwhile are kept."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def evaluate(self, expression: str):
        """The value of a JavaScript ``expression`` in the page (awaited if it is a promise)."""
        result = self._call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def visit(self, url: str, settle_s: float = 10.0) -> PageReport:
        """Load ``url``, wait for it (and for MathJax to typeset every formula, up to ``settle_s``), and report."""
        self._events.clear()
        self._call("Page.navigate", url=url)
        deadline = time.time() + settle_s
        while time.time() < deadline:   # the load event, then formulas still pending
            if self.evaluate("document.readyState") == "complete":
                facts = json.loads(self.evaluate(_PAGE_FACTS))
                if facts["pending_math"] == 0:
                    break
            time.sleep(0.2)
        facts = json.loads(self.evaluate(_PAGE_FACTS))
        self._drain(0.3)
        report = PageReport(url=url, title=facts["title"], images=facts["images"], links=facts["links"],
                            math=facts["math"], math_errors=facts["math_errors"], raw_tables=facts["raw_tables"])
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                report.errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                report.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                report.errors.append(f"{params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                report.failed_requests.append(f"{params.get('errorText')} (request {params.get('requestId')})")
        return report

    def _drain(self, seconds: float) -> None:
        """Collect the events that arrive within ``seconds``."""
        self._ws.settimeout(seconds)
        try:
            while True:
                self._events.append(json.loads(self._ws.recv()))
        except Exception:   # the timeout: nothing more arrived
            pass
        finally:
            self._ws.settimeout(30)

    def fonts_for(self, selector: str) -> list[dict]:
        """The fonts that drew the text of the first element matching ``selector``: ``[{"familyName",
        "glyphCount", "isCustomFont"}]`` (DevTools' ``CSS.getPlatformFontsForNode``); empty if nothing matches."""
        root = self._call("DOM.getDocument", depth=-1)["root"]["nodeId"]
        node = self._call("DOM.querySelector", nodeId=root, selector=selector).get("nodeId", 0)
        if not node:
            return []
        fonts = self._call("CSS.getPlatformFontsForNode", nodeId=node).get("fonts", [])
        children = self._call("DOM.describeNode", nodeId=node, depth=1)["node"].get("children", [])
        for child in children:   # the text itself is the element's text node
            if child.get("nodeType") == 3 and child.get("nodeId"):
                fonts += self._call("CSS.getPlatformFontsForNode", nodeId=child["nodeId"]).get("fonts", [])
        return fonts

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """Save the page as a PNG at ``path`` (the window, or the whole page with ``full_page``)."""
        params = {"format": "png"}
        if full_page:
            metrics = self._call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1})
        data = self._call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
