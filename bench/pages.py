#!/usr/bin/env python3
"""Pages a proxy touches to serve one request (bench/proxy.sh).

Usage: pages.py PORT SAMPLES PID...

Opens one keep-alive connection to the proxy on 127.0.0.1:PORT and sends a
few requests on it. Then, SAMPLES times: clears the accessed bits of every
page of the processes PID... (/proc/PID/clear_refs, "1"), sends one
request, reads its response, waits 20 ms (the proxy finishes its request
after the response has gone) and sums the "Referenced" kB of
/proc/PID/smaps: the pages whose accessed bit the hardware set since the
clear, i.e. the distinct pages the request touched (plus what timers did in
those milliseconds). Prints one JSON object: the median of the samples, in
pages, in all and by kind (the executable's code, shared libraries' code,
read-only data, writable memory: heap, stacks, data and bss).

Where a CPU has no process-context identifiers (the `pcid` flag of
/proc/cpuinfo), every switch between processes empties the TLB of the
process's entries, so that each page a wake-up touches costs a page-table
walk: this count is then a cost per request.
"""
import json
import os
import re
import socket
import statistics
import sys
import time

REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: pages.py\r\n\r\n"


def exchange(sock):
    buf = b""
    sock.sendall(REQUEST)
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("pages.py: the proxy closed the connection")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit("pages.py: response %r" % head.split(b"\r\n")[0])
    m = re.search(rb"(?im)^content-length: *(\d+)", head)
    if not m:
        raise SystemExit("pages.py: response without Content-Length")
    want = int(m.group(1))
    while len(body) < want:
        body += sock.recv(65536)


def kind(perms, path, exe):
    if "w" in perms:
        return "writable"
    if "x" in perms:
        return "code" if path == exe else "library_code"
    return "read_only"


def referenced(pids):
    out = {"code": 0, "library_code": 0, "read_only": 0, "writable": 0}
    for pid in pids:
        exe = os.readlink(f"/proc/{pid}/exe")
        cur = None
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    parts = line.split()
                    cur = kind(parts[1], parts[5] if len(parts) > 5 else "", exe)
                elif line.startswith("Referenced:") and cur:
                    out[cur] += int(line.split()[1]) // 4
    out["total"] = sum(out.values())
    return out


def main():
    port, samples = int(sys.argv[1]), int(sys.argv[2])
    pids = [int(p) for p in sys.argv[3:]]
    sock = socket.create_connection(("127.0.0.1", port))
    for _ in range(5):
        exchange(sock)
        time.sleep(0.05)
    runs = []
    for _ in range(samples):
        time.sleep(0.2)
        for pid in pids:
            with open(f"/proc/{pid}/clear_refs", "w") as fh:
                fh.write("1")
        exchange(sock)
        time.sleep(0.02)
        runs.append(referenced(pids))
    print(json.dumps({k: statistics.median(r[k] for r in runs) for k in runs[0]} | {"samples": samples}))


if __name__ == "__main__":
    main()
