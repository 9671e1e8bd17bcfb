#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tandem serve --kv-max-mib 64` with the full cache and with SnapKV at 10%: one warm-up request
(so the policy's saving is measured), then 8 concurrent long-prompt completions (380 Austen words,
16 tokens); polls /metrics for the most sequences running together and the peak KV bytes in use.
Run from the repository root after scripts/llm/get_texts.sh: python3 bench/serve/kv_admission.py
"""
import json, subprocess, threading, time, urllib.request, sys, os, re
words = open(os.path.expanduser('~/.cache/tandem/texts/austen.txt')).read().split()
def run(extra, label):
    p = subprocess.Popen(['build-wt1/bin/tandem','serve','--port','0','-t','1','--parallel','8','--kv-max-mib','64','--no-progress']+extra, stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_WAIT_POLICY='passive'))
    port = int(p.stdout.readline().split('127.0.0.1:')[1].split()[0])
    base = 'http://127.0.0.1:%d' % port
    done = []
    def client(i):
        prompt = ' '.join(words[i*1000:i*1000+380])
        req = urllib.request.Request(base+'/v1/completions', json.dumps({'prompt':prompt,'max_tokens':16,'temperature':0}).encode(), {'Content-Type':'application/json'})
        r = json.load(urllib.request.urlopen(req, timeout=600))
        done.append((r['usage']['prompt_tokens'], r['tandem']['kv_bytes']))
    t0 = time.time()
    ths = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    # warm-up: one request first so the policy's saving is measured before the burst
    client(100); done.clear()
    t0 = time.time()
    for t in ths: t.start()
    most = 0; kvmax = 0
    while any(t.is_alive() for t in ths):
        m = urllib.request.urlopen(base+'/metrics').read().decode()
        most = max(most, int(re.search(r'^tandem_running_sequences (\d+)', m, re.M).group(1)))
        kvmax = max(kvmax, int(re.search(r'^tandem_kv_bytes (\d+)', m, re.M).group(1)))
        time.sleep(0.05)
    wall = time.time() - t0
    p.terminate(); p.wait()
    print('%s: 8 requests of %s prompt tokens, %.1f s, most running together %d, peak KV in use %.1f MiB, KV per finished request %.2f MiB' % (label, sorted(set(d[0] for d in done)), wall, most, kvmax/1048576, sum(d[1] for d in done)/len(done)/1048576), flush=True)
run([], 'full cache, --kv-max-mib 64')
run(['--kv-policy','snapkv','--kv-budget','10%'], 'snapkv 10%, --kv-max-mib 64')
