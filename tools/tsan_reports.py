#!/usr/bin/env python3
"""Sorts ThreadSanitizer's data-race reports from a `tools/build.sh tsan` binary into the ones
worth reading. Debian's CAF 0.17 is not built with -fsanitize=thread, so TSan cannot see the
synchronisation inside CAF's mailboxes and every message handed from one thread to another
shows up as a race (hundreds per e2e module). A report is kept when both of its accesses have
our code (actors/, runtime/, http/, backends/, app/) among their top frames and neither side
went through CAF's message hand-off (a message built on one thread and destroyed on another).

Usage: tools/tsan_reports.py LOG... (the files TSAN_OPTIONS=log_path=... wrote); prints a
count per pair of places and the first report of each pair; exits 1 when any is kept."""
from __future__ import annotations

import re
import sys

OURS = re.compile(r"\.\./(actors|runtime|http|backends|app)/")
HANDOFF = ("caf::message::~message", "caf::make_counted<caf::detail::tuple_vals", "move_content_to_message",
           "caf::message::load", "caf::message::save", "profiled_send", "make_mailbox_element", "mailbox_element_vals")


def top_ours(stack: str):
    for name, where in re.findall(r"#\d+ (.*?) (\S+?:\d+)", stack)[:6]:
        if OURS.search(where):
            return where.split("../")[-1]
    return None


def main(paths):
    text = "".join(open(p, errors="replace").read() for p in paths)
    reports = text.split("WARNING: ThreadSanitizer:")[1:]
    kept = {}
    for r in reports:
        parts = re.split(r"\n  (?:Previous|Location|Mutex|Thread)", r)
        if len(parts) < 2 or any(h in r for h in HANDOFF):
            continue
        a, b = top_ours(parts[0]), top_ours(parts[1])
        if a and b:
            kept.setdefault((a, b), []).append(r)
    print(f"{len(reports)} reports; {sum(len(v) for v in kept.values())} kept, at {len(kept)} pairs of places")
    for (a, b), rs in sorted(kept.items(), key=lambda kv: -len(kv[1])):
        print(f"\n== {len(rs)} x {a} <-> {b}\nWARNING: ThreadSanitizer:{rs[0][:4000]}")
    return 1 if kept else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
