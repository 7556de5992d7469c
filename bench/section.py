#!/usr/bin/env python3
"""Replaces the generated section NAME of a results file with stdin.

Usage: section.py FILE NAME < section.md
The section runs from "<!-- NAME:begin" to "<!-- NAME:end -->"; if FILE has
none, stdin is appended. Used by the bench/*.sh scripts.
"""
import os
import re
import sys

path, name = sys.argv[1], sys.argv[2]
section = sys.stdin.read().rstrip('\n')
text = open(path).read() if os.path.exists(path) else '# meshlet benchmark results\n'
pat = re.compile(r'<!-- ' + re.escape(name) + r':begin.*?<!-- ' + re.escape(name) + r':end -->', re.S)
text = pat.sub(lambda m: section, text) if pat.search(text) else text.rstrip('\n') + '\n\n' + section + '\n'
open(path, 'w').write(text)
