#!/usr/bin/env python3
"""The complete versions of a job in a directory store, read from its files
apart from iofwd's own code: the shell tests and chaos.py check iofwd against
it. Prints "<version> <nodes>" for each complete version, ascending.

  store_complete.py STORE JOB

A version is complete when its own directory holds a COMPLETE record (its
"nodes N" line gives the nodes), or when the newest whole record of a bucket
of packs covers it (docs/small-versions.md, README "The store on disk"): the
record's versions FIRST..LAST, below the next bucket's first version, none
that a node skipped, none up to the bucket's highest RETIRED.v<N> mark.
Nothing is checksummed here: the verifier does that.
"""
import os
import re
import sys


def own_versions(job_dir):
    out = {}
    for name in os.listdir(job_dir):
        m = re.fullmatch(r"v(\d{8,})", name)
        if not m:
            continue
        try:
            with open(os.path.join(job_dir, name, "COMPLETE")) as f:
                text = f.read()
        except FileNotFoundError:
            continue
        nodes = re.search(r"^nodes (\d+)$", text, re.M)
        out[int(m.group(1))] = int(nodes.group(1)) if nodes else 0
    return out


def numbered(names, head):
    return [int(n[len(head):]) for n in names if re.fullmatch(re.escape(head) + r"\d{8,}", n)]


def packed_versions(job_dir):
    out = {}
    packs = os.path.join(job_dir, "packs")
    if not os.path.isdir(packs):
        return out
    buckets = sorted(numbered(os.listdir(packs), "b"))
    for i, bucket in enumerate(buckets):
        bucket_dir = os.path.join(packs, f"b{bucket:08}")
        names = os.listdir(bucket_dir)
        retired = max(numbered(names, "RETIRED.v"), default=0)
        for last in sorted(numbered(names, "COMPLETE.v"), reverse=True):
            with open(os.path.join(bucket_dir, f"COMPLETE.v{last:08}")) as f:
                text = f.read()
            span = re.search(r"^versions (\d+) (\d+)$", text, re.M)
            nodes = re.search(r"^nodes (\d+)$", text, re.M)
            if not text.endswith("\nend\n") or not span or not nodes:
                continue  # torn or damaged: the record before it counts
            first, upto = int(span.group(1)), int(span.group(2))
            if i + 1 < len(buckets):
                upto = min(upto, buckets[i + 1] - 1)
            skipped = {int(v) for v in re.findall(r"^skip \S+ \d+ (\d+)$", text, re.M)}
            for v in range(max(first, retired + 1), upto + 1):
                if v not in skipped:
                    out[v] = int(nodes.group(1))
            break
    return out


def complete_versions(store, job):
    job_dir = os.path.join(store, job)
    if not os.path.isdir(job_dir):
        return {}
    out = own_versions(job_dir)
    out.update(packed_versions(job_dir))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: store_complete.py STORE JOB")
    for version, nodes in sorted(complete_versions(sys.argv[1], sys.argv[2]).items()):
        print(version, nodes)


if __name__ == "__main__":
    main()
