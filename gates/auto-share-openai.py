"""Part `openai` of the auto-share gate: an unmodified OpenAI client.

Run by `polykv-forge gate run auto-share` with the interpreter of the gate's
Python environment (the `openai` package pinned in gates/auto-share.toml),
against a llama-server started with `--kv-share-prefix auto`. The agents know
nothing of KV pools: they send the same long system message (chat) or the
same long document (completions) with their own question. What they get back
in `usage.prompt_tokens_details.cached_tokens`, and what the server's
/metrics say about its cells, show whether the prefix was shared.

Prints one JSON object of figures on its last line.
"""

import argparse
import json
import sys
import threading
import urllib.request

from openai import OpenAI


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split(" ", 1)
            out[name[len("llamacpp:"):]] = float(value)
    for k in ("kv_cells_used", "kv_cell_refs", "kv_share_auto_requests_total"):
        if k not in out:
            sys.exit(f"/metrics has no llamacpp:{k} (is patch 0007 in the build, and --metrics on?)")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--doc", required=True, help="a file with the shared document")
    ap.add_argument("--agents", type=int, default=4)
    args = ap.parse_args()
    doc = open(args.doc, encoding="utf-8").read()
    client = OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="none", max_retries=0, timeout=600)
    before = metrics(args.port)

    def chat(i):
        r = client.chat.completions.create(
            model="gate",
            messages=[
                {"role": "system", "content": doc},
                {"role": "user", "content": f"Agent {i} asks: which secret passcode does the text give?"},
            ],
            max_tokens=8,
            temperature=0,
        )
        return r.usage

    def complete(i):
        r = client.completions.create(
            model="gate",
            prompt=f"{doc}\n\nAgent {i} asks: which secret passcode does the text give?\nAnswer:",
            max_tokens=8,
            temperature=0,
        )
        return r.usage

    def cached_fraction(usage):
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details else 0
        return cached / max(usage.prompt_tokens, 1)

    # Chat: one agent alone, then the others at once.
    first = chat(0)
    others = [None] * (args.agents - 1)
    errors = []

    def run(j):
        try:
            others[j] = chat(j + 1)
        except Exception as e:  # reported as a figure: the gate fails on it
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(j,)) for j in range(args.agents - 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit(f"{len(errors)} chat requests failed; first: {errors[0]}")
    # Completions: two agents one after the other.
    c0 = complete(args.agents)
    c1 = complete(args.agents + 1)
    after = metrics(args.port)

    figures = {
        "chat_prompt_tokens": first.prompt_tokens,
        "chat_first_cached": cached_fraction(first),
        "chat_cached_min": min(cached_fraction(u) for u in others),
        "completions_first_cached": cached_fraction(c0),
        "completions_cached": cached_fraction(c1),
        "auto_requests": after["kv_share_auto_requests_total"] - before["kv_share_auto_requests_total"],
        "refs_per_cell": after["kv_cell_refs"] / max(after["kv_cells_used"], 1.0),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
