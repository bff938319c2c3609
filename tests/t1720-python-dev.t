#!/bin/bash
# The shipped python-dev spec (templates/python-dev.yaml, issue 17): built
# by sbx-template from the python template, it has what compiling a C
# extension and everyday debugging need, and a C extension builds against
# its headers and imports.
. "$(dirname "$0")/lib.sh"
require_vm
PY=$(ls -dt "$SBX_TEMPLATES"/python@* 2>/dev/null | head -n1)
if [ -z "$PY" ]; then
	[ -z "${SBX_REQUIRE_PYTHON:-}" ] || { ok 1 "the python template is built"; done_testing; exit; }
	skip_all "no python template (make python-image)"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
# A private templates directory: the build must not land in the shared one.
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$PY" "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates

ref=$(sbx-template build python-dev -f "$top/templates/python-dev.yaml" 2>"$TEST_TMP/err")
ok $? "templates/python-dev.yaml builds ($ref)"
sed 's/^/#   /' "$TEST_TMP/err" | tail -n 5
like "$(sbx-template inspect --json python-dev | jq -r '[.packages[].name] | join(" ")')" \
	'(^| )gcc( |$).*python3-dev|python3-dev.*(^| )gcc( |$)' "its manifest lists gcc and python3-dev with their versions"
id=$(sbx-create -q -t python-dev); ok $? "a python-dev session"
for t in gcc make git ps top zip unzip ip; do
	sbx-exec "$id" -- sh -c "command -v $t" >/dev/null; ok $? "$t is there"
done
is "$(sbx-exec "$id" -- pwd)" /workspace "execs start in /workspace (the spec's workdir)"
is "$(sbx-exec "$id" -- id -un)" user "as user (the spec's user)"
cat >"$TEST_TMP/hello.c" <<'C'
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef m[] = { { "answer", answer, METH_NOARGS, NULL }, { NULL, NULL, 0, NULL } };
static struct PyModuleDef d = { PyModuleDef_HEAD_INIT, "hello", NULL, -1, m };
PyMODINIT_FUNC PyInit_hello(void) { return PyModule_Create(&d); }
C
sbx-cp "$TEST_TMP/hello.c" "$id":/workspace/ >/dev/null; ok $? "a C extension's source is copied in"
sbx-exec "$id" -- sh -c 'gcc -shared -fPIC $(python3-config --includes) -o hello$(python3-config --extension-suffix) hello.c' \
	2>"$TEST_TMP/err"
ok $? "it compiles against python3-dev's headers"
sed 's/^/#   /' "$TEST_TMP/err" | head -n 5
is "$(sbx-exec "$id" -- python3 -c 'import hello; print(hello.answer())')" 42 "and imports and runs"
sbx-kill "$id" >/dev/null
done_testing
