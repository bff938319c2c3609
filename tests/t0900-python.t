#!/bin/bash
# The python template (templates/python.yaml, built by sbx-template): python3, pip and a
# real program in a session, a manifest that lists what the guest has, fixed
# versions, and which version `-t python` picks.  Builds nothing: `make
# check` and scripts/test.sh build the template first, and set
# SBX_REQUIRE_PYTHON=1 so that a missing one fails instead of skipping.
. "$(dirname "$0")/lib.sh"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
	ok 1 "a python template in $SBX_TEMPLATES (make python-image)"
	done_testing
fi
sessions=$SBX_ROOT/var/lib/sbx/sessions

id=$(sbx-create -q -t python); ok $? "sbx-create -t python"
tmpl=$(sbx-ps --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .template')
# Versions are sbx-template's (12 hex digits of the inputs and the result)
# since the template is a spec; the python version is in the manifest's
# package list instead of the name.
like "$tmpl" '^python@[0-9a-f]{12}$' "the session runs python@VERSION ($tmpl)"
version=${tmpl#python@}
manifest=$SBX_TEMPLATES/$tmpl/manifest.json

is "$(sbx-exec "$id" -- python3 -c 'print(2+2)')" 4 "python3 -c 'print(2+2)' prints 4"
like "$(sbx-exec "$id" -- pip --version)" '^pip [0-9.]+ from .* \(python 3\.[0-9]+\)$' "pip --version works"
is "$(sbx-exec "$id" -- sh -c 'id -u; pwd' | tr '\n' ' ')" "1000 /workspace " \
	"commands run as uid 1000 in /workspace"

# A small program of the kind a model writes, uploaded with sbx-cp (the
# guest's tar is GNU tar here, busybox's in the default template).
mkdir -p "$TEST_TMP/app"
cat >"$TEST_TMP/app/main.py" <<'EOF'
import hashlib, json, pathlib, subprocess, sys
data = json.loads(pathlib.Path(sys.argv[1]).read_text())
digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
answer = subprocess.run(["sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True, check=True)
out = {"digest": digest, "answer": int(answer.stdout), "n": sum(data["values"])}
pathlib.Path("out.json").write_text(json.dumps(out, sort_keys=True))
print(out["digest"], out["answer"], out["n"])
EOF
echo '{"name": "sbx", "values": [1, 2, 3, 4]}' >"$TEST_TMP/app/data.json"
want=$(cd "$TEST_TMP/app" && python3 -c '
import hashlib, json
d = json.load(open("data.json"))
print(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest(), 42, sum(d["values"]))')
# GNU tar warns of "time stamp in the future" when the guest clock lags.
sbx-cp "$TEST_TMP/app" "$id":/workspace/ 2>"$TEST_TMP/cp.err"; ok $? "sbx-cp uploads the program"
is "$(sbx-exec -w /workspace/app "$id" -- python3 main.py data.json)" "$want" \
	"a program using json, hashlib and subprocess runs"
sbx-cp "$id":/workspace/app/out.json "$TEST_TMP/out.json"; ok $? "sbx-cp downloads its output"
is "$(jq -r .answer "$TEST_TMP/out.json" 2>/dev/null)" 42 "the output file came back intact"
sbx-exec "$id" -- sh -c 'python3 -m venv --without-pip /tmp/venv && /tmp/venv/bin/python -c "import sys; print(sys.prefix)"' \
	>"$TEST_TMP/venv" 2>&1
is "$(cat "$TEST_TMP/venv")" /tmp/venv "python3 -m venv works"

# The manifest says what the guest has: every installed package, versioned.
like "$(jq -r '.packages[] | select(.name == "python3") | .version' "$manifest")" '^3\.[0-9]+' \
	"the manifest lists python3 with its version"
is "$(jq -r '.packages[] | select(.name == "python3") | .version | sub("-.*"; "")' "$manifest")" \
	"$(sbx-exec "$id" -- python3 -c 'import platform; print(platform.python_version())')" \
	"the manifest's python3 version is the guest's"
sbx-exec "$id" -- dpkg-query -W -f '${Package}\t${Version}\n' | sort >"$TEST_TMP/guest.pkgs"
jq -r --arg k "$(jq -r .kernel.package "$manifest")" '.packages[] | select(.name != $k) |
	"\(.name)\t\(.version)"' "$manifest" | sort >"$TEST_TMP/manifest.pkgs"
cmp -s "$TEST_TMP/guest.pkgs" "$TEST_TMP/manifest.pkgs"
ok $? "the manifest's packages are exactly the guest's ($(wc -l <"$TEST_TMP/guest.pkgs") packages)"
is "$(jq -r '.source.kind + " " + .spec.from + " " + .spec.kernel' "$manifest")" \
	"spec debian:bookworm linux-image-cloud-amd64" "built from its spec, with a kernel of its own"
is "$(sbx-template inspect --json "python@$version" | jq -r .content_sha256)" "$(jq -r .content_sha256 "$manifest")" \
	"sbx-template inspect shows it"
is "$(sbx-exec "$id" -- sh -c 'ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>&1 >/dev/null | wc -l; ls /usr/share/man | wc -l')" \
	"$(printf '1\n0')" "the spec's remove: and the documentation trim are in the root"
for k in schema name version created kernel packages files content_sha256 guest_init_sha256; do
	jq -e --arg k "$k" 'has($k)' "$manifest" >/dev/null; ok $? "the manifest has '$k', as the default's does"
done
sbx-kill "$id"

id=$(sbx-create -q -t "python@$version"); ok $? "sbx-create -t python@$version"
is "$(sbx-exec "$id" -- python3 -c 'import sys; print(sys.version_info[0])')" 3 "python3 runs in it"
sbx-kill "$id"
sbx-create -q -t python@3.11-00000000 2>"$TEST_TMP/err"; is $? 4 "an unknown version exits 4"
like "$(cat "$TEST_TMP/err")" "no template 'python@3.11-00000000'" "and says which"
is "$(ls "$sessions" | wc -l)" 0 "no session is left behind"

# -t NAME takes the newest `created`; two versions built in the same second
# go by which manifest was written last, not by readdir or version order.
fake=$TEST_TMP/templates
real=$SBX_TEMPLATES/$tmpl
for v in 0-same-second-newer 9-same-second-older 9-created-older; do
	mkdir -p "$fake/python@$v"
	for f in vmlinux initrd.cpio rootfs.ext4; do ln -s "$real/$f" "$fake/python@$v/$f"; done
done
created=$(jq -r .created "$manifest")
jq --arg v 0-same-second-newer '.version = $v' "$manifest" >"$fake/python@0-same-second-newer/manifest.json"
jq --arg v 9-same-second-older '.version = $v' "$manifest" >"$fake/python@9-same-second-older/manifest.json"
jq --arg v 9-created-older '.version = $v | .created = "2000-01-01T00:00:00Z"' "$manifest" \
	>"$fake/python@9-created-older/manifest.json"
touch -d '-2 seconds' "$fake/python@9-same-second-older/manifest.json"
id=$(SBX_TEMPLATES=$fake sbx-create -q -t python); ok $? "sbx-create -t python from three versions"
is "$(sbx-ps --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .template')" python@0-same-second-newer \
	"it takes the newest created, then the manifest written last (all created $created)"
sbx-kill "$id"
done_testing
