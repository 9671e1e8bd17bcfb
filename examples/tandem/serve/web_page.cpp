// SPDX-License-Identifier: Apache-2.0
// The chat page `tandem serve` answers GET / with: one static HTML file (inline CSS and JS, no
// external resources). It keeps the conversation in the page, POSTs it to /v1/chat/completions
// with "stream": true, reads the server-sent events with fetch() and a stream reader, appends
// each delta as it arrives, and shows tokens/s and the request's KV bytes (the last chunk's
// "tandem" extension). An API key typed into the page is sent as a Bearer token; ?q=TEXT sends
// TEXT when the page loads.
#include "server.h"

namespace tandem::serve {

const char* web_page_html() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tandem chat</title>
<style>
body{font-family:system-ui,sans-serif;max-width:46rem;margin:0 auto;padding:1rem;background:#fafafa;color:#222}
h1{font-size:1.2rem;margin:.2rem 0 1rem}
#log{display:flex;flex-direction:column;gap:.6rem;margin-bottom:1rem}
.msg{padding:.5rem .8rem;border-radius:.5rem;white-space:pre-wrap;line-height:1.4}
.user{background:#dbeafe;align-self:flex-end;max-width:85%}
.assistant{background:#fff;border:1px solid #ddd;max-width:95%}
.stats{font-size:.75rem;color:#666;margin-top:.3rem}
form{display:flex;gap:.5rem}
textarea{flex:1;min-height:3rem;font:inherit;padding:.4rem}
button{padding:.4rem 1rem;font:inherit}
#opts{display:flex;gap:1rem;font-size:.8rem;margin:.5rem 0;flex-wrap:wrap}
#opts input{width:5rem}
</style></head>
<body>
<h1>tandem chat <span id="model" style="color:#888;font-weight:normal"></span></h1>
<div id="log"></div>
<form id="form">
<textarea id="prompt" placeholder="Say something (Enter sends, Shift+Enter a new line)"></textarea>
<button id="send" type="submit">Send</button>
</form>
<div id="opts">
<label>max tokens <input id="max" type="number" value="256" min="1"></label>
<label>temperature <input id="temp" type="number" value="0.7" min="0" max="2" step="0.1"></label>
<label>API key <input id="key" type="password" style="width:10rem"></label>
<button id="clear" type="button">Clear</button>
</div>
<script>
const log = document.getElementById('log'), form = document.getElementById('form');
const promptBox = document.getElementById('prompt'), sendBtn = document.getElementById('send');
let history = [];
function headers() {
  const h = {'Content-Type': 'application/json'};
  const k = document.getElementById('key').value;
  if (k) h['Authorization'] = 'Bearer ' + k;
  return h;
}
function bubble(role, text) {
  const d = document.createElement('div');
  d.className = 'msg ' + role;
  d.textContent = text;
  log.appendChild(d);
  return d;
}
fetch('/v1/models', {headers: headers()}).then(r => r.json()).then(j => {
  if (j.data && j.data[0]) document.getElementById('model').textContent = j.data[0].id;
}).catch(() => {});
document.getElementById('clear').onclick = () => { history = []; log.innerHTML = ''; };
promptBox.addEventListener('keydown', e => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
});
form.addEventListener('submit', async e => {
  e.preventDefault();
  const text = promptBox.value.trim();
  if (!text) return;
  promptBox.value = '';
  sendBtn.disabled = true;
  document.body.dataset.state = 'busy';
  history.push({role: 'user', content: text});
  bubble('user', text);
  const out = bubble('assistant', '');
  const stats = document.createElement('div');
  stats.className = 'stats';
  let answer = '', tokens = 0, first = 0, t0 = performance.now();
  try {
    const res = await fetch('/v1/chat/completions', {method: 'POST', headers: headers(), body: JSON.stringify({
      messages: history, stream: true,
      max_tokens: parseInt(document.getElementById('max').value) || 256,
      temperature: parseFloat(document.getElementById('temp').value) || 0})});
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || ('HTTP ' + res.status));
    }
    const reader = res.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, cut).trim();
        buf = buf.slice(cut + 2);
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const c = j.choices && j.choices[0];
        if (c && c.delta && c.delta.content) {
          if (!first) first = performance.now();
          answer += c.delta.content;
          out.textContent = answer;
        }
        if (j.usage) tokens = j.usage.completion_tokens;
        if (j.tandem) {
          const s = (performance.now() - (first || t0)) / 1000;
          stats.textContent = tokens + ' tokens, ' + (s > 0 ? (Math.max(tokens - 1, 0) / s).toFixed(1) : '-') +
            ' tokens/s, first token ' + ((first - t0) / 1000).toFixed(2) + ' s, KV ' +
            (j.tandem.kv_bytes / 1024).toFixed(1) + ' KiB';
          out.appendChild(stats);
        }
      }
    }
    history.push({role: 'assistant', content: answer});
  } catch (err) {
    out.textContent = answer + '\n[error: ' + err.message + ']';
    history.pop();
  }
  sendBtn.disabled = false;
  document.body.dataset.state = 'idle';
  promptBox.focus();
});
// ?q=TEXT sends TEXT at load (links, and the headless-browser test).
const q = new URLSearchParams(location.search).get('q');
if (q) { promptBox.value = q; form.requestSubmit(); }
</script>
</body></html>
)HTML";
}

}  // namespace tandem::serve
