# SPDX-License-Identifier: Apache-2.0
"""What bench/serve's comparisons share: the arguments naming the two servers and the model, and
starting a server on a loopback port and waiting for its /health (Python stdlib only)."""
import os
import subprocess
import sys
import time
import urllib.request


def add_server_args(ap, llama_required=True):
    """--llama-server (optional where llama_required is False), --tandem, -m/--model,
    -t/--threads, --text."""
    ap.add_argument("--llama-server", required=llama_required,
                    help="llama.cpp's llama-server binary")
    ap.add_argument("--tandem", default="build/bin/tandem")
    ap.add_argument("-m", "--model", default=os.path.expanduser(
        "~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--text", default=os.path.join(
        os.environ.get("TANDEM_TEXT_DIR", os.path.expanduser("~/.cache/tandem/texts")),
        "austen.txt"), help="prompts are cut from this text (scripts/llm/get_texts.sh)")


def wait_ready(url, proc, what, timeout=300):
    """Polls url/health until 200; exits naming `what` if the process dies or times out."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"{what} not ready after {timeout} s")


def start(cmd, url, log_path):
    """Starts `cmd` with its output in log_path; returns the process once url/health answers."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    wait_ready(url, proc, f"{os.path.basename(cmd[0])} (log: {log_path})")
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
