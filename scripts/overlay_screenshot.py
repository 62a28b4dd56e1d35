"""Screenshot an overlay (``traceread overlay``) in Chromium's DevTools Performance panel.

    PYTHONPATH=src python scripts/overlay_screenshot.py OVERLAY.json OUT.png [--select X,Y]

Why DevTools: Chromium 150 (Debian) no longer serves chrome://tracing (ERR_FAILED even
with chrome://chrome-urls' internal debugging pages enabled) and ui.perfetto.dev is not
reachable offline. The Performance panel of the DevTools bundled with Chromium imports
Chrome trace-event JSON, so it is a real, local trace viewer for the overlay.

How: headless Chromium with --remote-debugging-port serves its DevTools frontend over
HTTP; the script opens it as a page, hands it the overlay (as a File built in the page:
the frontend's CSP forbids fetching it), calls the Performance panel's loadFromFile, then
clicks open the traceread tracks and, with --select, one slice. A tiny stdlib-only
DevTools-protocol client (websocket framing by hand) drives it. Coordinates fit a
1400x900 window and the track order of a one-process Kineto overlay; adjust for others.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

PORT = 9342


class Cdp:
    """Just enough of the DevTools protocol: one page, call() and a reply."""

    def __init__(self, ws_url: str):
        hostport, path = ws_url[len("ws://"):].split("/", 1)
        host, port = hostport.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(4096)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"websocket handshake refused: {head[:100]!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}).encode())
        while True:
            msg = self._recv()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def _send(self, data: bytes) -> None:
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 1 << 16 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        mask = os.urandom(4)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
        self.sock.sendall(head + mask + body)

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _recv(self) -> dict:
        data = b""
        while True:
            b0, b1 = self._take(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._take(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._take(8))[0]
            data += self._take(n)
            if b0 & 0x80:
                return json.loads(data)


def _chromium(profile: str) -> subprocess.Popen:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise SystemExit("no chromium on PATH")
    return subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu",
                             f"--remote-debugging-port={PORT}", "--window-size=1400,900",
                             f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _page() -> Cdp:
    for _ in range(150):
        try:
            tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/json"))
            return Cdp(next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"])
        except (OSError, StopIteration, ValueError):
            time.sleep(0.2)
    raise SystemExit("chromium's DevTools endpoint did not come up")


def _click(c: Cdp, x: int, y: int) -> None:
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        extra = {} if kind == "mouseMoved" else {"button": "left", "clickCount": 1}
        c.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)
    time.sleep(1.5)


def _text(c: Cdp) -> str:
    return c.call("Runtime.evaluate", expression="document.body.innerText")["result"]["value"]


LOAD = """(async () => { const m = await import('./panels/timeline/timeline.js');
  const f = new File([window.__overlay], 'overlay.json', {type: 'application/json'});
  await m.TimelinePanel.TimelinePanel.instance().loadFromFile(f); return 'loaded'; })()"""


def shoot(overlay: str, out: str, select: tuple[int, int] | None) -> None:
    profile = tempfile.mkdtemp(prefix="traceread-chromium-")
    proc = _chromium(profile)
    try:
        c = _page()
        c.call("Page.enable")
        c.call("Page.navigate", url=f"http://127.0.0.1:{PORT}/devtools/devtools_app.html?panel=timeline")
        time.sleep(10)
        with open(overlay, encoding="utf-8") as f:
            c.call("Runtime.evaluate", expression="window.__overlay = " + json.dumps(f.read()) + "; 1")
        res = c.call("Runtime.evaluate", expression=LOAD, awaitPromise=True)["result"]
        if res.get("value") != "loaded":
            raise SystemExit(f"the Performance panel did not load the overlay: {res}")
        for _ in range(60):  # the panel shows its keyboard-shortcut card once the trace is in
            if "Keyboard shortcuts" in _text(c):
                break
            time.sleep(1)
        time.sleep(2)
        for label, (x, y) in (("Keyboard shortcuts", (1371, 77)), ("Annotate a trace", (16, 40))):
            for _ in range(3):
                if label in _text(c):
                    _click(c, x, y)
        # open: steps, GPU idle gaps, the GPU process, then their threads (bottom-up)
        for x, y in ((100, 192), (120, 171), (45, 150), (60, 243), (40, 205), (40, 167)):
            _click(c, x, y)
        if select:
            _click(c, *select)
        shot = c.call("Page.captureScreenshot", format="png")
        with open(out, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overlay", help="an uncompressed overlay (traceread overlay T -o x.json)")
    ap.add_argument("out")
    ap.add_argument("--select", default=None, metavar="X,Y", help="click this point last")
    a = ap.parse_args()
    sel = tuple(int(v) for v in a.select.split(",")) if a.select else None
    shoot(a.overlay, a.out, sel)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
