#!/usr/bin/env python3
"""What a process's memory costs (bench/memory.sh).

Usage: memstat.py PID [CGROUP_DIR] [--maps]

Prints one JSON object, in KiB:
- private: RssAnon of /proc/PID/status, the process's private memory (heap,
  stacks, the runtime's metadata, written data pages): what no other
  process shares and what every sidecar of a node pays again;
- pss, pss_anon, pss_file: /proc/PID/smaps_rollup, the proportional set
  size (each shared page divided by the processes mapping it);
- vmrss, rss_file, vmhwm: /proc/PID/status, for reference only (RssFile is
  clean page cache, shared and reclaimable);
- with CGROUP_DIR, the memory cgroup's working set as the kubelet computes
  it: cgroup v2 memory.current minus inactive_file of memory.stat, cgroup
  v1 memory.usage_in_bytes minus total_inactive_file; and its parts
  (cg_usage, cg_inactive_file, cg_active_file, cg_anon, and on v2
  cg_kernel, cg_sock).
With --maps, also "maps": the private memory by mapping, from
/proc/PID/smaps: "data", the executable's data pages the process wrote
(.data, .noptrdata); "anonymous", anonymous mappings (the Go heap with the
goroutines' stacks, the runtime's own structures, .bss, the main thread's
stack); "other".
"""
import json
import os
import sys


def kv(path, sep=None):
    out = {}
    with open(path) as fh:
        for line in fh:
            parts = line.split(sep) if sep else line.split()
            if len(parts) >= 2:
                key = parts[0].rstrip(':')
                try:
                    out[key] = int(parts[1])
                except ValueError:
                    pass
    return out


def cgroup(d):
    if os.path.exists(os.path.join(d, 'memory.current')):  # v2
        usage = int(open(os.path.join(d, 'memory.current')).read()) // 1024
        st = {k: v // 1024 for k, v in kv(os.path.join(d, 'memory.stat')).items()}
        inactive = st.get('inactive_file', 0)
        return dict(working_set=usage - inactive, cg_usage=usage, cg_inactive_file=inactive,
                    cg_active_file=st.get('active_file', 0), cg_anon=st.get('anon', 0),
                    cg_kernel=st.get('kernel', 0), cg_sock=st.get('sock', 0), cg_version=2)
    usage = int(open(os.path.join(d, 'memory.usage_in_bytes')).read()) // 1024
    st = {k: v // 1024 for k, v in kv(os.path.join(d, 'memory.stat')).items()}
    inactive = st.get('total_inactive_file', 0)
    return dict(working_set=usage - inactive, cg_usage=usage, cg_inactive_file=inactive,
                cg_active_file=st.get('total_active_file', 0), cg_anon=st.get('total_rss', 0), cg_version=1)


def maps(pid):
    """Private (anonymous) KiB by kind of mapping."""
    exe = os.readlink(f'/proc/{pid}/exe')
    out = {'data': 0, 'anonymous': 0, 'other': 0}
    name = None
    with open(f'/proc/{pid}/smaps') as fh:
        for line in fh:
            head = line.split()
            if '-' in head[0] and not head[0].endswith(':'):
                name = ' '.join(head[5:])
                continue
            if head[0] == 'Anonymous:':
                kib = int(head[1])
                if name.startswith(exe):
                    out['data'] += kib
                elif name == '' or name.startswith('[stack'):
                    out['anonymous'] += kib
                else:
                    out['other'] += kib
    return out


def main():
    args = [a for a in sys.argv[1:] if a != '--maps']
    pid = args[0]
    st = kv(f'/proc/{pid}/status')
    roll = kv(f'/proc/{pid}/smaps_rollup')
    out = dict(private=st['RssAnon'], pss=roll['Pss'], pss_anon=roll.get('Pss_Anon'), pss_file=roll.get('Pss_File'),
               vmrss=st['VmRSS'], rss_file=st['RssFile'], vmhwm=st['VmHWM'])
    if len(args) > 1 and args[1]:
        out.update(cgroup(args[1]))
    if '--maps' in sys.argv:
        out['maps'] = maps(pid)
    print(json.dumps(out))


main()
