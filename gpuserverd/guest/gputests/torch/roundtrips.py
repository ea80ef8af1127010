"""Counts, from a GPUCLOUD_TRACE=1 log of torch_cases.py's roundtrips case, the frames each
benchmark step sends to gpuserverd and how many of them the caller waited for (round trips).

    python3 roundtrips.py LOG        prints a Markdown table
"""

import collections
import re
import sys

MARK = re.compile(r"gpucloud-trace: MARK (\w+) (\d+)")
SEND = re.compile(r"gpucloud-trace: send (\w+) \(\d+ bytes\)( waits)?")


def main():
    window, per, rows = None, 1, []
    sent, waited = collections.Counter(), collections.Counter()
    for line in open(sys.argv[1], errors="replace"):
        if "gpucloud-trace: MARK end" in line and window:
            rows.append((window, per, sent, waited))
            window, sent, waited = None, collections.Counter(), collections.Counter()
            continue
        m = MARK.search(line)
        if m:
            window, per = m.group(1), int(m.group(2))
            continue
        m = SEND.search(line)
        if m and window:
            sent[m.group(1)] += 1
            if m.group(2):
                waited[m.group(1)] += 1
    print("| per step | frames sent | round trips (caller waited) | round trips by message |")
    print("| --- | ---: | ---: | --- |")
    for window, per, sent, waited in rows:
        top = ", ".join(f"{k} {v / per:g}" for k, v in waited.most_common(8))
        print(f"| {window} | {sum(sent.values()) / per:g} | {sum(waited.values()) / per:g} | {top} |")


if __name__ == "__main__":
    main()
