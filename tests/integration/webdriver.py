"""A small W3C WebDriver client over HTTP (urllib), for Debian's chromedriver and chromium.

ChromeDriver runs on a free loopback port; each Session is one headless chromium with a fresh
profile directory. Only what the browser tests use: navigation, scripts (sync and async),
elements by CSS selector, clicks, typing, screenshots, the viewport size through the DevTools
protocol (chromedriver's goog/cdp/execute), scripts installed before every document, and the
browser's console log when chromedriver keeps one. A command that fails raises WebDriverError
with the driver's error code and message; every call has a timeout.
"""

import base64
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

from conftest import terminate

CHROMIUM = os.environ.get("EM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("EM_CHROMEDRIVER", "/usr/bin/chromedriver")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
HEADLESS_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")


class WebDriverError(Exception):
    def __init__(self, status, error, message):
        super().__init__(f"HTTP {status} {error}: {message}")
        self.status = status
        self.error = error


def available():
    """None when chromium and chromedriver are both installed, else why not."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed (Debian packages chromium and chromium-driver)"
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(method, url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}").get("value")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            value = json.loads(raw).get("value") or {}
        except ValueError:
            value = {"error": "unknown error", "message": raw.decode(errors="replace")[:500]}
        raise WebDriverError(e.code, value.get("error"), value.get("message")) from None


class Driver:
    """A chromedriver process on a free loopback port; stop() ends its browsers and it (a
    browser outlives a chromedriver that is only terminated)."""

    def __init__(self, log_path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")
        self.proc = None
        self.sessions = []

    def start(self, timeout=20):
        self.proc = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}", "--allowed-ips=127.0.0.1"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromedriver exited with {self.proc.returncode}")
            try:
                if _request("GET", self.url + "/status", timeout=2).get("ready"):
                    return self
            except (OSError, WebDriverError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"chromedriver not ready on port {self.port} within {timeout} s")

    def session(self, profile_dir, extra_args=()):
        """A new headless browser with profile_dir as its (fresh) user data directory."""
        caps = {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [*HEADLESS_ARGS, f"--user-data-dir={profile_dir}", *extra_args],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }
        value = _request("POST", self.url + "/session",
                         {"capabilities": {"alwaysMatch": caps}}, timeout=90)
        session = Session(self.url + "/session/" + value["sessionId"])
        self.sessions.append(session)
        return session

    def stop(self):
        for session in self.sessions:
            session.quit()
        if self.proc:
            terminate(self.proc)
        self.log.close()


class Session:
    """One browser. Scripts run in the current page; their results come back as JSON."""

    def __init__(self, base):
        self.base = base
        self.open = True

    def _cmd(self, method, path, body=None, timeout=60):
        return _request(method, self.base + path, body, timeout)

    def get(self, url):
        self._cmd("POST", "/url", {"url": url})

    def execute(self, script, *args):
        """The value of `script` (a function body: use `return`) called with args."""
        return self._cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def execute_async(self, script, *args, timeout_ms=20000):
        """Like execute; the script calls arguments[arguments.length - 1](result)."""
        self._cmd("POST", "/timeouts", {"script": timeout_ms})
        return self._cmd("POST", "/execute/async", {"script": script, "args": list(args)},
                         timeout=timeout_ms / 1000 + 30)

    def find(self, css):
        """The reference of the first element that matches css (WebDriverError if none)."""
        value = self._cmd("POST", "/element", {"using": "css selector", "value": css})
        return value[ELEMENT]

    def find_all(self, css):
        value = self._cmd("POST", "/elements", {"using": "css selector", "value": css})
        return [v[ELEMENT] for v in value]

    def click(self, css):
        self._cmd("POST", f"/element/{self.find(css)}/click", {})

    def type(self, css, text):
        """Types text into the first element that matches css, as keystrokes."""
        self._cmd("POST", f"/element/{self.find(css)}/value", {"text": text})

    def cdp(self, command, params=None):
        """A DevTools protocol command through chromedriver (goog/cdp/execute)."""
        return self._cmd("POST", "/goog/cdp/execute", {"cmd": command, "params": params or {}})

    def on_new_document(self, source):
        """Runs source in every document before the page's own scripts."""
        self.cdp("Page.addScriptToEvaluateOnNewDocument", {"source": source})

    def set_viewport(self, width, height):
        self.cdp("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def screenshot(self):
        """The viewport as PNG bytes."""
        return base64.b64decode(self._cmd("GET", "/screenshot"))

    def browser_log(self):
        """The browser's console entries since the last call ([{level, message}]), or None when
        this chromedriver does not keep them."""
        try:
            return self._cmd("POST", "/se/log", {"type": "browser"})
        except WebDriverError as e:
            if e.status in (404, 405) or e.error == "unknown command":
                return None
            raise

    def quit(self):
        """Closes the browser; again is a no-op."""
        if not self.open:
            return
        self.open = False
        try:
            self._cmd("DELETE", "", timeout=30)
        except (OSError, WebDriverError):
            pass
