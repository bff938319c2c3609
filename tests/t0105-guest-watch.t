#!/bin/bash
# guest-init --watch outside a VM (what sbx-serve's WatchDir runs in the
# guest, as the call's user): its NUL-terminated records for each change,
# recursive watches that follow directories made, moved in, moved within
# and moved away, a name with a newline whole, its end at EOF on stdin or
# when the directory goes, and its statuses.  t2010-serve-files.t runs it
# in a guest through the service.
. "$(dirname "$0")/lib.sh"
W=$SBX_BUILD/guest-init
[ -x "$W" ] || skip_all "$W not built"

# records: the output so far, a record a line (a newline in a name as \n)
records() { python3 -c 'import sys; [print(r.decode(errors="replace").replace("\n", "\\n")) for r in open(sys.argv[1], "rb").read().split(b"\0")[:-1]]' "$TEST_TMP/out"; }
until_rec() { for _ in $(seq 100); do records | grep -qxF "$1" && return 0; sleep 0.05; done; return 1; }
start() { # start ARGS...: the watcher in the background ($pid), its stdin on fd 3
	rm -f "$TEST_TMP/in"
	mkfifo "$TEST_TMP/in"
	"$W" --watch "$@" <"$TEST_TMP/in" >"$TEST_TMP/out" 2>"$TEST_TMP/err" &
	pid=$!
	exec 3>"$TEST_TMP/in"
	until_rec S
}

d=$TEST_TMP/w
mkdir -p "$d/sub"
start "$d"; ok $? "it starts: S, once its watch is set"
( cd "$d" && echo a >f && mv f g && chmod 600 g && rm g && touch sub/x && printf x >"new
line" && touch end )
until_rec "Cend"; ok $? "the events come"
is "$(records | uniq | tr '\n' ,)" "S,Cf,Wf,Nf,Cg,Mg,Rg,Cnew\\nline,Wnew\\nline,Cend,Mend," \
	"created, written, renamed (from, then to), chmod, removed; a newline in a name kept"
exec 3>&-
wait "$pid"; is "$?" 0 "EOF on its stdin ends it with 0"

start --recursive "$d"; ok $? "a recursive watch starts"
( cd "$d" && mkdir -p a/b && touch a/b/c sub/y && mv a m && touch m/b/moved && mv m "$TEST_TMP/away" &&
	touch "$TEST_TMP/away/b/gone" && mkdir "$TEST_TMP/in2" && mv "$TEST_TMP/in2" back && touch back/z && touch end2 )
until_rec "Cend2"; ok $? "its events come"
r=$(records | tr '\n' ,)
like "$r" ",Ca/b/c," "in directories made after it started"
like "$r" ",Csub/y," "in one that was there"
like "$r" ",Na,Cm,.*Cm/b/moved," "a directory renamed within the tree is followed under its new name"
[[ $r != *gone* ]]; ok $? "one moved away is no longer watched"
like "$r" ",Cback,.*Cback/z," "one moved in is"
rm -rf "$d"
wait "$pid"; is "$?" 0 "the directory removed ends it, with 0"
is "$(records | tail -1)" "R." "after R . (the directory itself)"
exec 3>&-

"$W" --watch "$TEST_TMP/nope" </dev/null >/dev/null 2>&1; is "$?" 101 "a missing path: 101"
touch "$TEST_TMP/file"
"$W" --watch "$TEST_TMP/file" </dev/null >/dev/null 2>&1; is "$?" 102 "a file: 102"
python3 -c 'import os, sys; [os.makedirs(f"{sys.argv[1]}/{i}") for i in range(8200)]' "$TEST_TMP/many"
"$W" --watch --recursive "$TEST_TMP/many" </dev/null >"$TEST_TMP/out" 2>/dev/null; is "$?" 108 "over 8192 directories: 108"
is "$(records | wc -l)" 0 "having said nothing"
"$W" --watch </dev/null >/dev/null 2>&1; is "$?" 2 "no path: usage, 2"
rm -rf "$SBX_ROOT"
done_testing
