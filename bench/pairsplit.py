#!/usr/bin/env python3
"""Splits the latency of a proxy pair (bench/pair.sh) by proxy and direction.

From a loopback capture of one run (tcpdump -w, whole packets), each request
is followed across the three hops:

  t0 fortio's request reaches the client proxy (front port)
  t1 the client proxy sends it on the mesh hop (mid port)
  t2 the server proxy sends it to the upstream (port 18080)
  t3 the upstream's answer
  t4 the server proxy's answer on the mesh hop
  t5 the client proxy's answer to fortio

Requests are joined on the request id the upstream echoes (bench/upstream
-echo-request-id: X-Request-Id sent back as X-Echo-Id), which gives t0, t2,
t3 and t5 exactly. The mesh hop is encrypted: with the client sidecar's TLS
key log (a sidecar built with -tags meshlet_keylog) tshark decrypts it and
each HTTP/2 stream gives t1 and t4 by its request id; without one (haproxy,
one request at a time per connection) t1 and t4 are the request and answer
of the tightest mesh-hop exchange that contains the upstream's.

A segment is what one proxy adds in one direction: the wake-up of its
process, its own work and its send. Prints JSON: the segments' percentiles
in µs and the number of requests split.

  pairsplit.py PCAP FRONT_PORT MID_PORT [--since EPOCH] [--keylog FILE]
  pairsplit.py --self-test
"""
import argparse
import bisect
import collections
import json
import re
import statistics
import struct
import subprocess
import sys

UPSTREAM_PORT = 18080
SEGMENTS = ("client_request", "server_request", "upstream", "server_response", "client_response",
            "client", "server", "proxies", "total")
ID = re.compile(rb"\r\nx-(?:request|echo)-id: ([^\r]+)", re.I)
UUIDISH = re.compile(r"^[0-9A-Za-z._:-]{8,}$")


def packets(path, since=0.0):
    """(time, source port, destination port, payload) of every IPv4 TCP
    packet with a payload, from a pcap file (Ethernet or raw IP)."""
    with open(path, "rb") as f:
        head = f.read(24)
        magic, = struct.unpack("<I", head[:4])
        if magic not in (0xA1B2C3D4, 0xA1B23C4D):
            raise ValueError(f"{path}: not a little-endian pcap file (magic {magic:#x})")
        scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
        link, = struct.unpack("<I", head[20:24])
        skip = {1: 14, 101: 0, 228: 0}.get(link)
        if skip is None:
            raise ValueError(f"{path}: link type {link} not handled (want Ethernet or raw IP)")
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, incl, _ = struct.unpack("<IIII", rec)
            ip = f.read(incl)[skip:]
            t = sec + frac * scale
            if t < since or len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            ihl = (ip[0] & 15) * 4
            total, = struct.unpack(">H", ip[2:4])
            tcp = ip[ihl:]
            if len(tcp) < 20:
                continue
            sport, dport = struct.unpack(">HH", tcp[:4])
            payload = ip[ihl + (tcp[12] >> 4) * 4:total]
            if payload:
                yield t, sport, dport, payload


def plain_hops(pkts, front, mid):
    """t0, t5 (front), t2, t3 (upstream) by request id, and the mesh hop's
    exchanges [request time, answer time] per connection."""
    t = {k: {} for k in ("t0", "t2", "t3", "t5")}
    last_request = {}  # fortio connection -> time of its last request packet
    in_flight = {}  # upstream connection -> request id
    exchanges = collections.defaultdict(list)
    mid_dir = {}
    for ts, sport, dport, payload in pkts:
        if dport == front:
            last_request[sport] = ts
        elif sport == front:
            m = ID.search(payload)
            if m and dport in last_request:
                t["t0"][m.group(1)], t["t5"][m.group(1)] = last_request[dport], ts
        elif dport == UPSTREAM_PORT:
            m = ID.search(payload)
            if m:
                t["t2"][m.group(1)] = ts
                in_flight[sport] = m.group(1)
        elif sport == UPSTREAM_PORT:
            rid = in_flight.pop(dport, None)
            if rid is not None:
                t["t3"][rid] = ts
        elif dport == mid:
            if mid_dir.get(sport) != "request":
                exchanges[sport].append([ts, None])
            mid_dir[sport] = "request"
        elif sport == mid:
            if mid_dir.get(dport) == "request":
                exchanges[dport][-1][1] = ts
            mid_dir[dport] = "answer"
    return t, exchanges


def mesh_by_stream(path, mid, keylog, since):
    """t1 and t4 by request id from the decrypted HTTP/2 mesh hop: a
    stream's request HEADERS carry the id, its answer's HEADERS the time."""
    sep = "\x1f"  # between a field's occurrences: cannot be in a header value
    out = subprocess.run(
        ["tshark", "-r", path, "-o", f"tls.keylog_file:{keylog}", "-Y", f"http2 && tcp.port=={mid}",
         "-T", "fields", "-E", f"aggregator={sep}", "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.dstport",
         "-e", "http2.streamid", "-e", "http2.type", "-e", "http2.header.name", "-e", "http2.header.value"],
        capture_output=True, text=True, check=True).stdout
    t1, t4, stream_id = {}, {}, {}  # stream_id: (client port, stream) -> request id
    for line in out.splitlines():
        c = line.split("\t")
        if len(c) < 5 or float(c[0]) < since:
            continue
        ts, sport, dport = float(c[0]), int(c[1]), int(c[2])
        headers = [s for s, typ in zip(c[3].split(sep), c[4].split(sep)) if typ == "1"]
        if sport != mid:
            names = c[5].split(sep) if len(c) > 5 else []
            values = c[6].split(sep) if len(c) > 6 else []
            ids = [v for n, v in zip(names, values) if n == "x-request-id" and UUIDISH.match(v)]
            for s, rid in zip(headers, ids):
                stream_id[(sport, s)] = rid.encode()
                t1[rid.encode()] = ts
        else:
            for s in headers:
                rid = stream_id.pop((dport, s), None)
                if rid is not None:
                    t4[rid] = ts
    return t1, t4


def mesh_by_exchange(t, exchanges):
    """t1 and t4 by request id from serial mesh-hop connections: the
    tightest unused exchange that starts after t0 and before t2 and whose
    answer comes after t3 and before t5."""
    ex = sorted((a, b) for lst in exchanges.values() for a, b in lst if b is not None)
    starts = [a for a, _ in ex]
    used, t1, t4 = set(), {}, {}
    for rid in sorted((r for r in t["t0"] if r in t["t2"] and r in t["t3"]), key=lambda r: t["t2"][r]):
        best = None
        for k in range(bisect.bisect_left(starts, t["t0"][rid]), bisect.bisect_right(starts, t["t2"][rid])):
            a, b = ex[k]
            if k in used or b < t["t3"][rid] or b > t["t5"][rid]:
                continue
            if best is None or b - a < ex[best][1] - ex[best][0]:
                best = k
        if best is not None:
            used.add(best)
            t1[rid], t4[rid] = ex[best]
    return t1, t4


def split(t, t1, t4):
    """Each fully followed request's segments, in seconds."""
    rows = []
    for rid, t0 in t["t0"].items():
        try:
            t2, t3, t5, a, b = t["t2"][rid], t["t3"][rid], t["t5"][rid], t1[rid], t4[rid]
        except KeyError:
            continue
        if not t0 <= a <= t2 <= t3 <= b <= t5:
            continue
        r = dict(client_request=a - t0, server_request=t2 - a, upstream=t3 - t2, server_response=b - t3,
                 client_response=t5 - b, total=t5 - t0)
        r["client"] = r["client_request"] + r["client_response"]
        r["server"] = r["server_request"] + r["server_response"]
        r["proxies"] = r["client"] + r["server"]
        rows.append(r)
    return rows


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def summary(rows, requests):
    out = {"requests": requests, "split": len(rows)}
    for k in SEGMENTS:
        xs = [r[k] * 1e6 for r in rows]
        out[k] = {p: round(percentile(xs, float(p)), 1) for p in ("50", "90", "99")} if xs else {}
        if xs:
            out[k]["mean"] = round(statistics.mean(xs), 1)
    return out


def run(path, front, mid, since=0.0, keylog=None):
    t, exchanges = plain_hops(packets(path, since), front, mid)
    t1, t4 = mesh_by_stream(path, mid, keylog, since) if keylog else mesh_by_exchange(t, exchanges)
    return summary(split(t, t1, t4), len(t["t0"]))


def self_test():
    """A synthetic capture of a serial pair: seven requests, one of them
    slow in the server proxy's answer, one never answered upstream."""
    import os
    import tempfile

    def pkt(ts, sport, dport, payload, sip=b"\x7f\0\0\x01", dip=b"\x7f\0\0\x01"):
        tcp = struct.pack(">HHIIBBHHH", sport, dport, 0, 0, 5 << 4, 0x18, 65535, 0, 0)
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0, sip, dip)
        frame = b"\0" * 12 + b"\x08\x00" + ip + tcp + payload
        return struct.pack("<IIII", int(ts), round((ts % 1) * 1e6), len(frame), len(frame)) + frame

    front, mid = 18211, 18212
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    up_req = lambda i: b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-%d-abcdefgh\r\n\r\n" % i
    answer = lambda i: b"HTTP/1.1 200 OK\r\nX-Echo-Id: id-%d-abcdefgh\r\nContent-Length: 0\r\n\r\n" % i
    ms = 1e-3
    events = []
    # request i on fortio connection 40000+i, mesh connection 41000+i, upstream connection 42000+i
    delays = {i: 0.1 * ms for i in range(6)}  # server proxy's answer time per request
    delays[3] = 2.0 * ms  # (request 6 is never answered)
    for i in range(7):
        b = 100 + i * 10 * ms
        events += [pkt(b, 40000 + i, front, req), pkt(b + 0.1 * ms, 41000 + i, mid, b"\x17" * 60),
                   pkt(b + 0.2 * ms, 42000 + i, UPSTREAM_PORT, up_req(i))]
        if i in delays:
            e = b + 0.5 * ms
            events += [pkt(e, UPSTREAM_PORT, 42000 + i, b"HTTP/1.1 200 OK\r\n\r\n"),
                       pkt(e + delays[i], mid, 41000 + i, b"\x17" * 90),
                       pkt(e + delays[i] + 0.1 * ms, front, 40000 + i, answer(i))]
    fd, path = tempfile.mkstemp(suffix=".pcap")
    with os.fdopen(fd, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(events))
    try:
        s = run(path, front, mid)
    finally:
        os.unlink(path)
    assert s["requests"] == 6 and s["split"] == 6, s
    assert abs(s["client_request"]["50"] - 100) < 1 and abs(s["upstream"]["50"] - 300) < 1, s
    # the slow answer is the server proxy's, and only its
    assert abs(s["server_response"]["99"] - 2000) < 1 and abs(s["server_response"]["50"] - 100) < 1, s
    assert abs(s["client_response"]["99"] - 100) < 1, s
    assert abs(s["total"]["99"] - 2600) < 1, s
    print("pairsplit.py self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pcap", nargs="?")
    ap.add_argument("front", nargs="?", type=int)
    ap.add_argument("mid", nargs="?", type=int)
    ap.add_argument("--since", type=float, default=0.0, help="ignore packets before this epoch time")
    ap.add_argument("--keylog", help="the client sidecar's TLS key log (HTTP/2 mesh hop)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.pcap is None or a.front is None or a.mid is None:
        ap.error("PCAP FRONT_PORT MID_PORT are required")
    json.dump(run(a.pcap, a.front, a.mid, a.since, a.keylog), sys.stdout)
    print()


if __name__ == "__main__":
    main()
