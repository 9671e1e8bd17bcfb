#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Offline converter: RecFlow's files -> one "tandem-recflow-requests" file (and derived statistics).

RecFlow (Liu et al., ICLR 2025; repository RecFlow-ICLR/RecFlow, data CC BY-SA 4.0) ships, per day,
  all_stage/DAY.feather             one row per (request, candidate video) of every stage, with the
                                    request, user and video fields and the stage flags
  seq_effective_50_dict/DAY.pkl     {request_id: int64 array [50, 10]}: the user's last effective
                                    views (video_id, author_id, category_level_two,
                                    category_level_one, upload_type, upload_timestamp, duration,
                                    request_timestamp, playing_time, request_id), left-padded with
                                    rows whose request_timestamp is 0
and others/id_cnt.pkl ({field: number of ids}). tandem has no C++ reader for feather (Debian has no
Arrow C++ package) or pickle, so this script (pyarrow, numpy) joins one day into the binary file
that `tandem rec-serve --pipeline recflow --recflow-requests FILE` replays; the layout is in
include/tandem/recsys/recflow_data.h. With --stats-out it also writes the request statistics
(candidates per request, behaviours, ID skew, stage funnel) in the shape of
configs/recsys/recflow-stats.json's measured fields, for the generator of recflow.h.

  python3 bench/recsys/recflow_convert.py --recflow /data/RecFlow --day 2024-01-13 \
      --max-requests 20000 --out /data/recflow-2024-01-13.trf --stats-out /tmp/recflow-stats.json

`fixture` writes a tiny RecFlow-layout directory of made-up rows (no RecFlow data) with the same
columns and pickles, plus the values a reader must find, for tests:

  python3 bench/recsys/recflow_convert.py fixture --dir /tmp/rf --seed 1
"""
import argparse
import json
import math
import os
import pickle
import struct
import sys
from collections import Counter

import numpy as np

MAGIC = b"TRFREQ01"
REQUEST_FIELDS = ["request_id", "timestamp_ms", "user_id", "device_id", "age", "gender", "province"]
ITEM_FIELDS = ["video_id", "author_id", "category_level_one", "category_level_two", "upload_type"]
CANDIDATE_FIELDS = ITEM_FIELDS + ["stage"]
FLAGS = ["realshow", "rerank_pos", "rerank_neg", "rank_pos", "rank_neg", "coarse_neg", "prerank_neg"]
ALL_STAGE_COLUMNS = (["request_id", "request_timestamp", "user_id", "device_id", "age", "gender",
                      "province", "video_id", "author_id", "category_level_one",
                      "category_level_two", "upload_type", "upload_timestamp", "duration"] + FLAGS)
# Columns of a seq_effective_50_dict row, in RecFlow's order.
SEQ_COLUMNS = ["video_id", "author_id", "category_level_two", "category_level_one", "upload_type",
               "upload_timestamp", "duration", "request_timestamp", "playing_time", "request_id"]
SEQ_LEN = 50


def stage_of(flags):
    """How far a candidate went (recflow_data.h): 0 cut at pre-rank .. 5 shown."""
    if flags["realshow"]:
        return 5
    if flags["rerank_pos"]:
        return 4
    if flags["rerank_neg"] or flags["rank_pos"]:
        return 3
    if flags["rank_neg"]:
        return 2
    if flags["coarse_neg"]:
        return 1
    return 0


def read_feather(path):
    import pyarrow.feather as feather  # only the converter needs it
    table = feather.read_table(path)
    missing = [c for c in ALL_STAGE_COLUMNS if c not in table.column_names]
    if missing:
        sys.exit(f"{path}: not a RecFlow all_stage file: columns {missing} are missing")
    return {c: table.column(c).to_numpy() for c in ALL_STAGE_COLUMNS}


def read_pickle(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def behaviours_of(seq):
    """The valid rows of one [50, 10] sequence array, oldest first, as ITEM_FIELDS tuples."""
    seq = np.asarray(seq)
    if seq.ndim != 2 or seq.shape[1] != len(SEQ_COLUMNS):
        raise ValueError(f"sequence array of shape {seq.shape}, expected [n, {len(SEQ_COLUMNS)}]")
    col = {c: i for i, c in enumerate(SEQ_COLUMNS)}
    rows = seq[seq[:, col["request_timestamp"]] > 0]
    return [tuple(int(r[col[f]]) for f in ITEM_FIELDS) for r in rows]


def group_requests(cols, seqs, max_requests):
    order = np.argsort(cols["request_id"], kind="stable")
    rid = cols["request_id"][order]
    starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]])
    ends = np.r_[starts[1:], len(rid)]
    out = []
    for s, e in zip(starts, ends):
        if max_requests and len(out) >= max_requests:
            break
        idx = order[s:e]
        first = idx[0]
        req = {f: int(cols[c][first]) for f, c in zip(
            REQUEST_FIELDS, ["request_id", "request_timestamp", "user_id", "device_id", "age",
                             "gender", "province"])}
        req["candidates"] = [tuple(int(cols[f][i]) for f in ITEM_FIELDS) for i in idx]
        req["stage"] = [stage_of({f: int(cols[f][i]) for f in FLAGS}) for i in idx]
        seq = seqs.get(req["request_id"])
        req["behaviours"] = behaviours_of(seq) if seq is not None else []
        out.append(req)
    return out


def write_requests(path, requests, header_extra):
    header = {"format": "tandem-recflow-requests", "version": 1, "requests": len(requests),
              "seq_len": SEQ_LEN, "request_fields": REQUEST_FIELDS,
              "candidate_fields": CANDIDATE_FIELDS, "behaviour_fields": ITEM_FIELDS}
    header.update(header_extra)
    hs = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<I", len(hs)) + hs)
        for r in requests:
            f.write(struct.pack("<7q", *[r[k] for k in REQUEST_FIELDS]))
            f.write(struct.pack("<II", len(r["candidates"]), len(r["behaviours"])))
            for c, s in zip(r["candidates"], r["stage"]):
                f.write(struct.pack("<6q", *c, s))
            for b in r["behaviours"]:
                f.write(struct.pack("<5q", *b))


def zipf_exponent(ids):
    """Slope of log frequency over log rank (ranks 1..1000), a Zipf exponent estimate."""
    counts = np.array(sorted(Counter(ids).values(), reverse=True)[:1000], dtype=float)
    if len(counts) < 3:
        return 0.0
    ranks = np.arange(1, len(counts) + 1, dtype=float)
    slope = np.polyfit(np.log(ranks), np.log(counts), 1)[0]
    return round(max(0.0, float(-slope)), 3)


def statistics(requests, source):
    n = np.array([len(r["candidates"]) for r in requests], dtype=float)
    logs = np.log(n)
    funnel = [int(sum(sum(1 for s in r["stage"] if s >= k) for r in requests)) for k in range(6)]
    videos = [c[0] for r in requests for c in r["candidates"]]
    return {
        "source": source,
        "requests": len(requests),
        "candidates_median": float(np.median(n)),
        "candidates_sigma": round(float(np.std(logs)), 4),
        "candidates_min": int(n.min()),
        "candidates_max": int(n.max()),
        "behaviours_mean": float(np.mean([len(r["behaviours"]) for r in requests])),
        "item_zipf_s": zipf_exponent(videos),
        "user_zipf_s": zipf_exponent([r["user_id"] for r in requests]),
        "stage_funnel_note": "candidates per request that reached stage k or further "
                             "(0 retrieved, 1 past pre-rank, 2 past coarse, 3 past rank, "
                             "4 past re-rank, 5 shown), mean over requests",
        "stage_funnel_mean": [round(f / len(requests), 3) for f in funnel],
    }


def convert(args):
    day = args.day
    cols = read_feather(os.path.join(args.recflow, "all_stage", f"{day}.feather"))
    seqs = read_pickle(os.path.join(args.recflow, "seq_effective_50_dict", f"{day}.pkl"))
    id_cnt_path = os.path.join(args.recflow, "others", "id_cnt.pkl")
    id_counts = ({k: int(v) for k, v in read_pickle(id_cnt_path).items()}
                 if os.path.exists(id_cnt_path) else {})
    requests = group_requests(cols, seqs, args.max_requests)
    if not requests:
        sys.exit(f"{args.recflow}: no requests on {day}")
    source = f"RecFlow {day} (all_stage + seq_effective_50_dict), {len(requests)} requests"
    write_requests(args.out, requests, {"source": source, "id_counts": id_counts})
    print(f"{args.out}: {len(requests)} requests, "
          f"{sum(len(r['candidates']) for r in requests)} candidates")
    if args.stats_out:
        with open(args.stats_out, "w") as f:
            json.dump(statistics(requests, source), f, indent=2)
        print(f"{args.stats_out}: statistics")


def fixture(args):
    """A tiny RecFlow-layout day of made-up rows, and what a reader must find in it."""
    import pyarrow as pa
    import pyarrow.feather as feather
    rng = np.random.default_rng(args.seed)
    day = "2024-01-13"
    rows, seqs, expected = {c: [] for c in ALL_STAGE_COLUMNS}, {}, []
    for k in range(args.requests):
        rid = 1000 + 7 * k
        ts = 1705111200000 + int(rng.integers(0, 86400)) * 1000  # 2024-01-13 UTC+8 midday-ish
        user = [int(rng.integers(0, 500)), int(rng.integers(0, 600)), int(rng.integers(0, 8)),
                int(rng.integers(0, 3)), int(rng.integers(0, 40))]
        n = int(rng.integers(1, 12))
        stages = rng.integers(0, 6, size=n)
        cands = []
        for i in range(n):
            cand = [int(rng.integers(0, 10**6)), int(rng.integers(0, 10**5)),
                    int(rng.integers(0, 40)), int(rng.integers(0, 400)), int(rng.integers(0, 9))]
            cands.append(cand)
            flags = dict.fromkeys(FLAGS, 0)
            flag = {0: "prerank_neg", 1: "coarse_neg", 2: "rank_neg", 3: "rerank_neg",
                    4: "rerank_pos", 5: "realshow"}[int(stages[i])]
            flags[flag] = 1
            if stages[i] >= 3:
                flags["rank_pos"] = 1
            values = dict(zip(["request_id", "request_timestamp", "user_id", "device_id", "age",
                               "gender", "province"], [rid, ts] + user))
            values.update(zip(ITEM_FIELDS, cand))
            values.update(upload_timestamp=1704067200, duration=30000, **flags)
            for c in ALL_STAGE_COLUMNS:
                rows[c].append(values[c])
        b = int(rng.integers(0, SEQ_LEN + 1)) if k % 3 else 0
        seq = np.zeros((SEQ_LEN, len(SEQ_COLUMNS)), dtype=np.int64)
        behaviours = []
        for j in range(b):
            item = [int(rng.integers(0, 10**6)), int(rng.integers(0, 10**5)),
                    int(rng.integers(0, 40)), int(rng.integers(0, 400)), int(rng.integers(0, 9))]
            behaviours.append(item)
            r = SEQ_LEN - b + j
            seq[r, 0], seq[r, 1], seq[r, 2], seq[r, 3], seq[r, 4] = (
                item[0], item[1], item[3], item[2], item[4])  # RecFlow's column order
            seq[r, 7] = ts - 1000 * (b - j)  # request_timestamp > 0 marks a real row
        seqs[rid] = seq
        expected.append({"request_id": rid, "timestamp_ms": ts, "user": user,
                         "candidates": cands, "stage": [int(s) for s in stages],
                         "behaviours": behaviours})
    # Candidates of one request are not contiguous in RecFlow's files: shuffle the rows.
    perm = rng.permutation(len(rows["request_id"]))
    table = pa.table({c: pa.array(np.asarray(v, dtype=np.int64)[perm]) for c, v in rows.items()})
    for sub in ("all_stage", "seq_effective_50_dict", "others"):
        os.makedirs(os.path.join(args.dir, sub), exist_ok=True)
    feather.write_feather(table, os.path.join(args.dir, "all_stage", f"{day}.feather"))
    with open(os.path.join(args.dir, "seq_effective_50_dict", f"{day}.pkl"), "wb") as f:
        pickle.dump(seqs, f)
    with open(os.path.join(args.dir, "others", "id_cnt.pkl"), "wb") as f:
        pickle.dump({"user_id": 500, "device_id": 600, "video_id": 10**6}, f)
    with open(os.path.join(args.dir, "expected.json"), "w") as f:
        json.dump({"note": "made-up rows in RecFlow's layout (no RecFlow data); written by "
                           f"recflow_convert.py fixture --seed {args.seed}",
                   "requests": expected}, f)
    print(f"{args.dir}: {args.requests} requests, {len(perm)} candidate rows")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    f = sub.add_parser("fixture", help="write a tiny made-up day in RecFlow's layout")
    f.add_argument("--dir", required=True)
    f.add_argument("--requests", type=int, default=6)
    f.add_argument("--seed", type=int, default=1)
    p.add_argument("--recflow", help="the RecFlow directory (all_stage/, seq_effective_50_dict/)")
    p.add_argument("--day", default="2024-01-13")
    p.add_argument("--max-requests", type=int, default=0, help="0: every request of the day")
    p.add_argument("--out", help="the tandem-recflow-requests file to write")
    p.add_argument("--stats-out", help="also write the request statistics (JSON)")
    args = p.parse_args()
    if args.cmd == "fixture":
        fixture(args)
    elif args.recflow and args.out:
        convert(args)
    else:
        p.error("give --recflow DIR and --out FILE (or the fixture command)")


if __name__ == "__main__":
    main()
