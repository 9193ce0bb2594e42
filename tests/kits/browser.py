"""Drive Debian's headless Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
no browser download, no network port, no extra package. Chromium reads commands on fd 3 and writes
replies and events on fd 4, each a JSON message ending in a NUL byte.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--remote-debugging-pipe")


@dataclass
class Page:
    """One page of a Chromium started by :func:`open_browser`, with what its console reported."""

    process: subprocess.Popen
    to_browser: Any
    from_browser: Any
    session: str = ""
    next_id: int = 0
    buffer: bytes = b""
    events: list[dict] = field(default_factory=list)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.from_browser.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe (exit {self.process.poll()})")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, timeout_s: float = 60.0, browser: bool = False) -> dict:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            message["sessionId"] = self.session
        self.to_browser.write(json.dumps(message).encode() + b"\0")
        self.to_browser.flush()
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for_event(self, method: str, timeout_s: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors

    def requested_urls(self) -> list[str]:
        """Every URL the page asked for (Network.requestWillBeSent), the page itself included."""
        return [event["params"]["request"]["url"] for event in self.events if event.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, width: int) -> None:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self.send("Browser.close", browser=True, timeout_s=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.to_browser.close()
        self.from_browser.close()


def open_page(chromium: str, url: str, width: int = 1400, height: int = 900) -> Page:
    """Start Chromium, open ``url`` in a fresh page and wait for its load event."""
    profile = tempfile.mkdtemp(prefix="seatplan-chromium-")
    command_read, command_write = os.pipe()   # we write commands; Chromium reads fd 3
    reply_read, reply_write = os.pipe()       # Chromium writes fd 4; we read

    def pipes_on_3_and_4() -> None:
        # Copies first, so neither end is overwritten when one of them already is fd 3 or 4; dup2 leaves the
        # copies inheritable, and every other descriptor Python opened is closed on exec.
        commands, replies = os.dup(command_read), os.dup(reply_write)
        os.dup2(commands, 3)
        os.dup2(replies, 4)

    process = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
        close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pipes_on_3_and_4,
    )
    os.close(command_read)
    os.close(reply_write)
    page = Page(process, os.fdopen(command_write, "wb"), os.fdopen(reply_read, "rb"))
    target = page.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    page.session = page.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime.enable", "Log.enable", "Page.enable", "Network.enable"):
        page.send(domain)
    page.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    page.send("Page.navigate", {"url": url})
    page.wait_for_event("Page.loadEventFired")
    return page
