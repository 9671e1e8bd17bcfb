#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The official `openai` Python client against a live `tandem serve` (issue 22): models list, chat
and text completions, streaming, stop strings, seed determinism, usage counts, an API key refused,
a bad request. The model is a tiny llama written here as GGUF with the standard library (byte-
fallback vocabulary, chatml template, generated f32 weights), so no network is needed. Exits 77
(ctest: skipped) with the reason when the `openai` package is not importable (it is development
only: scripts/test.sh installs it).

  python3 tests/serve/openai_client_test.py --tandem build/bin/tandem
"""
import argparse
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile

SKIP = 77


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(v):
    """(type id, payload) of a metadata value: str, int (u32), float (f32) or a list of one of them."""
    if isinstance(v, str):
        return 8, gguf_string(v)
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, int):
        return 4, struct.pack("<I", v)
    if isinstance(v, list):
        t, _ = gguf_value(v[0])
        if t == 4:  # arrays of ints here are token types: i32
            return 9, struct.pack("<IQ", 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)
        return 9, struct.pack("<IQ", t, len(v)) + b"".join(gguf_value(x)[1] for x in v)
    raise TypeError(v)


def write_tiny_model(path):
    """A 2-layer llama (d 64, 4 heads, 2 KV heads) with f32 weights and a 288-token vocabulary."""
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [2, 3, 3, 3, 3]
    tokens += ["<0x%02X>" % b for b in range(256)]
    types += [6] * 256
    tokens += ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    types += [1] * 27
    vocab, dim, heads, kv, ff, layers = len(tokens), 64, 4, 2, 96, 2
    hd = dim // heads
    meta = {
        "general.architecture": "llama", "general.name": "tiny-openai",
        "llama.block_count": layers, "llama.embedding_length": dim,
        "llama.feed_forward_length": ff, "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv, "llama.context_length": 512,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * vocab, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                   "{{ m.content }}<|im_end|>\n{% endfor %}",
    }
    rng = random.Random(22)

    def noise(n, scale, offset=0.0):
        return [offset + (2 * rng.random() - 1) * scale for _ in range(n)]

    tensors = []  # (name, shape as rows x cols, values)
    out = noise(vocab * dim, 0.3)
    out[:5 * dim] = [0.0] * (5 * dim)  # the specials are never sampled: lengths are as asked
    tensors.append(("token_embd.weight", (vocab, dim), noise(vocab * dim, 0.5)))
    tensors.append(("output_norm.weight", (dim,), noise(dim, 0.2, 1.0)))
    tensors.append(("output.weight", (vocab, dim), out))
    for i in range(layers):
        p = "blk.%d." % i
        tensors += [
            (p + "attn_norm.weight", (dim,), noise(dim, 0.2, 1.0)),
            (p + "ffn_norm.weight", (dim,), noise(dim, 0.2, 1.0)),
            (p + "attn_q.weight", (heads * hd, dim), noise(heads * hd * dim, 0.3)),
            (p + "attn_k.weight", (kv * hd, dim), noise(kv * hd * dim, 0.3)),
            (p + "attn_v.weight", (kv * hd, dim), noise(kv * hd * dim, 0.3)),
            (p + "attn_output.weight", (dim, dim), noise(dim * dim, 0.2)),
            (p + "ffn_gate.weight", (ff, dim), noise(ff * dim, 0.3)),
            (p + "ffn_up.weight", (ff, dim), noise(ff * dim, 0.3)),
            (p + "ffn_down.weight", (dim, ff), noise(dim * ff, 0.15)),
        ]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, v in meta.items():
        t, payload = gguf_value(v)
        head += gguf_string(k) + struct.pack("<I", t) + payload
    data = b""
    for name, shape, values in tensors:
        dims = list(reversed(shape))  # GGUF lists the innermost dimension first
        head += gguf_string(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", 0, len(data))  # f32, offset in the data section
        data += struct.pack("<%df" % len(values), *values)
        data += b"\0" * (-len(data) % 32)
    head += b"\0" * (-len(head) % 32)
    with open(path, "wb") as f:
        f.write(head + data)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True, help="the tandem binary")
    args = ap.parse_args()
    try:
        import openai  # noqa: PLC0415 - optional, test-only
    except ImportError as e:
        print("SKIP: the openai Python package is not importable (%s); scripts/test.sh installs it"
              % e)
        return SKIP

    with tempfile.TemporaryDirectory(prefix="tandem-openai-") as tmp:
        model = os.path.join(tmp, "tiny-openai.gguf")
        write_tiny_model(model)
        key_file = os.path.join(tmp, "key")
        with open(key_file, "w", encoding="utf-8") as f:
            f.write("test-key-22\n")
        server = subprocess.Popen(
            [args.tandem, "serve", "-m", model, "--port", "0", "--api-key-file", key_file,
             "--decode", "f32", "--parallel", "4", "--no-progress", "-t", "1"],
            stdout=subprocess.PIPE, text=True)
        try:
            line = server.stdout.readline()
            check("listening on http://127.0.0.1:" in line, "server started: " + line.strip())
            port = int(line.split("127.0.0.1:")[1].split()[0])
            base = "http://127.0.0.1:%d/v1" % port
            # Clients are closed before the server stops: an idle keep-alive connection would
            # hold a server thread (and its stop) for up to 5 s.
            with openai.OpenAI(base_url=base, api_key="test-key-22", max_retries=0) as client:
                run_checks(openai, client, base)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                raise
        check(server.returncode == 0, "server stopped cleanly on SIGTERM")
    return 0


def run_checks(openai, client, base):
    models = client.models.list()
    ids = [m.id for m in models.data]
    check(ids == ["tiny-openai"], "models list: %s" % ids)
    msgs = [{"role": "user", "content": "Hello, who are you?"}]
    r = client.chat.completions.create(model="tiny-openai", messages=msgs, max_tokens=10,
                                       temperature=0)
    text = r.choices[0].message.content
    check(r.object == "chat.completion" and r.choices[0].message.role == "assistant",
          "chat completion")
    check(r.choices[0].finish_reason == "length", "finish_reason length")
    check(r.usage.completion_tokens == 10 and
          r.usage.total_tokens == r.usage.prompt_tokens + 10 and r.usage.prompt_tokens > 5,
          "usage %s" % r.usage)
    streamed = ""
    finish = None
    for chunk in client.chat.completions.create(model="tiny-openai", messages=msgs,
                                                max_tokens=10, temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            streamed += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    check(streamed == text and finish == "length", "streamed chat equals the non-streamed one")

    c = client.completions.create(model="tiny-openai", prompt="The quick brown fox",
                                  max_tokens=12, temperature=0)
    check(c.object == "text_completion" and c.usage.completion_tokens == 12, "text completion")
    full = c.choices[0].text
    s = "".join(x.choices[0].text for x in client.completions.create(
        model="tiny-openai", prompt="The quick brown fox", max_tokens=12, temperature=0,
        stream=True) if x.choices)
    check(s == full, "streamed text completion equals the non-streamed one")
    # Two characters from the middle of the text, not U+FFFD (which stands for bytes that are not
    # UTF-8, so never matches the generated bytes).
    stops = [full[i:i + 2] for i in range(len(full) // 2, len(full) - 1)
             if "\ufffd" not in full[i:i + 2]]
    check(bool(stops), "a stop string can be taken from %r" % full)
    if stops:
        stop = stops[0]
        cut = client.completions.create(model="tiny-openai", prompt="The quick brown fox",
                                        max_tokens=12, temperature=0, stop=[stop])
        check(cut.choices[0].text == full[:full.find(stop)] and
              cut.choices[0].finish_reason == "stop", "stop string %r cuts the text" % stop)

    a = client.chat.completions.create(model="tiny-openai", messages=msgs, max_tokens=12,
                                       temperature=1.0, seed=1234)
    b = client.chat.completions.create(model="tiny-openai", messages=msgs, max_tokens=12,
                                       temperature=1.0, seed=1234)
    check(a.choices[0].message.content == b.choices[0].message.content,
          "the same seed gives the same sample")

    try:
        with openai.OpenAI(base_url=base, api_key="wrong", max_retries=0) as wrong:
            wrong.models.list()
        check(False, "a wrong key is refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "a wrong key is refused (401)")
    try:
        client.chat.completions.create(model="tiny-openai", messages=msgs, max_tokens=-1)
        check(False, "max_tokens -1 is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "max_tokens" in str(e), "max_tokens -1 is refused (400)")
    try:
        client.chat.completions.create(model="gpt-4o", messages=msgs, max_tokens=2)
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "an unknown model is refused (404)")


if __name__ == "__main__":
    sys.exit(main())
