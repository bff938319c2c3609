#!/usr/bin/env python3
"""Compare each command's option tables (cmd/sbx-*.c) with its man page's
SYNOPSIS (man/sbx-*.1).  Prints one TAP line per command and check; exits 0.

  synopsis-check.py TOP [START]   (START: the first test number, default 1)

An option the command takes must be in the SYNOPSIS, long or short (--help
aside), and
every flag the SYNOPSIS shows, long or short, must be one the command takes."""
import pathlib
import re
import sys

top = pathlib.Path(sys.argv[1])
n = int(sys.argv[2]) - 1 if len(sys.argv) > 2 else 0


def command_options(src):
    """{long: its short letter or None}, and the set of short letters."""
    longs, shorts = {}, set()
    for optstring in re.findall(r'getopt(?:_long)?\s*\([^,]+,[^,]+,\s*"([^"]*)"', src):
        shorts.update(c for c in optstring.lstrip("+-:") if c.isalnum())
    for table in re.findall(r"struct option\s+\w+\[\]\s*=\s*\{(.*?)\n\s*\};", src, re.S):
        for name, val in re.findall(r'\{\s*"([a-z0-9-]+)"\s*,[^,]+,[^,]+,\s*([^}]*?)\s*\}', table):
            m = re.fullmatch(r"'(.)'", val)
            longs[name] = m.group(1) if m and m.group(1) in shorts else None
    return longs, shorts


def synopsis_flags(page):
    m = re.search(r"^\.Sh SYNOPSIS\n(.*?)^\.Sh ", page, re.S | re.M)
    text = m.group(1) if m else ""
    longs, shorts = set(), set()
    # Long flags anywhere on a line ("Fl \-json | \-jsonl" names both);
    # short ones only as the argument of Fl ("Fl dit" is -d -i -t).
    longs.update(re.findall(r"\\-\\?-?([a-z][a-z0-9-]*)", text))
    for tok in re.findall(r"\bFl\s+([A-Za-z0-9]+)\b", text):
        shorts.update(tok)
    return longs, shorts


def line(ok, what, detail=""):
    global n
    n += 1
    print(("ok" if ok else "not ok") + " %d - %s" % (n, what))
    if not ok and detail:
        print("#   " + detail)


for c in sorted((top / "cmd").glob("sbx-*.c")):
    name = c.stem
    man = top / "man" / (name + ".1")
    if not man.exists():
        continue  # a helper program (sbx-monitor, sbx-proxy): no page
    clong, cshort = command_options(c.read_text())
    mlong, mshort = synopsis_flags(man.read_text())
    missing = sorted(o for o, short in clong.items() if o != "help" and o not in mlong and short not in mshort)
    line(not missing, "%s: every long option is in its SYNOPSIS" % name, "missing: " + " ".join("--" + o for o in missing))
    unknown = sorted(["--" + o for o in mlong - set(clong)] + ["-" + o for o in mshort - cshort])
    line(not unknown, "%s: every flag in its SYNOPSIS is one it takes" % name, "not taken: " + " ".join(unknown))
print("# %d checks" % n)
