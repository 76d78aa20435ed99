"""Sums callgrind's own (exclusive) cost per function: total instructions, the
count per request, and the most expensive functions. callgrind_annotate credits
everything to the thread's root for these LTO builds, hence this reader.

usage: python3 callgrind_top.py DUMP REQUESTS [TOP]
"""
import collections
import re
import sys

path, requests = sys.argv[1], int(sys.argv[2])
top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
names, cost, cur, skip = {}, collections.Counter(), None, False
fn_re = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")
for line in open(path):
    line = line.rstrip("\n")
    m = fn_re.match(line)
    if m:
        if m.group(2):
            names[m.group(1)] = m.group(2)
        if line.startswith("fn="):
            cur = names.get(m.group(1), m.group(1))
        continue
    if line.startswith("calls="):
        skip = True  # the next cost line is the call's inclusive cost
        continue
    if re.match(r"^([+-]?\d+|\*) \d+", line):
        if skip:
            skip = False
        elif cur:
            cost[cur] += int(line.split()[1])
total = sum(cost.values())
print(f"{total:,} instructions, {total / requests:,.0f} per request")
for name, c in cost.most_common(top):
    print(f"{c * 100 / total:5.1f}%  {c / requests:7.0f}/req  {name[:140]}")
