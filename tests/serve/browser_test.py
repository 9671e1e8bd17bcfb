#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The chat page of `tandem serve` in a real headless browser (Debian's chromium), driven over the
DevTools protocol on a pipe (--remote-debugging-pipe; standard library only): opens /?q=PROMPT
(the page sends the prompt when it loads), waits until the page says the streamed answer is
complete, checks what it shows (the user's message, a non-empty answer, the stats line with
tokens/s and the request's KV bytes) and saves a screenshot (serve_page.png in --out). Exits 77
(ctest: skipped) with the reason when no chromium is installed.

  python3 tests/serve/browser_test.py --tandem build/bin/tandem --out /tmp
"""
import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_client_test import check, write_tiny_model  # noqa: E402

SKIP = 77


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevTools:
    """Chromium with --remote-debugging-pipe: JSON messages ending in NUL, commands on fd 3,
    answers and events on fd 4."""

    def __init__(self, chrome, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():  # the child sees its ends as fds 3 and 4 (copied first: they may be 3 or 4)
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--remote-debugging-pipe", "--user-data-dir=" + profile,
             "--window-size=900,700", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4, to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_chrome, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--out", default=".", help="folder for serve_page.png")
    args = ap.parse_args()
    chrome = browser()
    if not chrome:
        print("SKIP: no chromium installed (apt-get install chromium)")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="tandem-browser-") as tmp:
        model = os.path.join(tmp, "tiny-page.gguf")
        write_tiny_model(model)
        server = subprocess.Popen([args.tandem, "serve", "-m", model, "--port", "0",
                                   "--no-progress", "-t", "1"], stdout=subprocess.PIPE, text=True)
        dt = None
        try:
            line = server.stdout.readline()
            check("listening on http://127.0.0.1:" in line, "server started")
            port = int(line.split("127.0.0.1:")[1].split()[0])
            dt = DevTools(chrome, os.path.join(tmp, "profile"))
            target = dt.call("Target.createTarget",
                             url="http://127.0.0.1:%d/?q=Hello%%20from%%20the%%20browser" % port)
            session = dt.call("Target.attachToTarget", targetId=target["targetId"],
                              flatten=True)["sessionId"]

            def js(expr):
                r = dt.call("Runtime.evaluate", session, expression=expr, returnByValue=True)
                return r.get("result", {}).get("value")

            deadline = time.time() + 60
            while time.time() < deadline and js("document.body.dataset.state") != "idle":
                time.sleep(0.1)
            check(js("document.body.dataset.state") == "idle", "the page finished the request")
            check(js("document.querySelector('.msg.user').textContent") ==
                  "Hello from the browser", "the prompt is shown as the user's message")
            answer = js("document.querySelector('.msg.assistant').firstChild.textContent")
            check(bool(answer) and "[error" not in answer, "a streamed answer is shown")
            stats = js("document.querySelector('.stats').textContent") or ""
            check("tokens/s" in stats and "KV" in stats, "the stats line: " + stats)
            shot = dt.call("Page.captureScreenshot", session, format="png")
            os.makedirs(args.out, exist_ok=True)
            path = os.path.abspath(os.path.join(args.out, "serve_page.png"))
            with open(path, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            check(os.path.getsize(path) > 1000, "screenshot " + path)
        finally:
            if dt:
                dt.close()
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
