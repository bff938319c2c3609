#!/bin/bash
# The host configuration install.sh leaves (sbx.yaml(5)): a warm pool of one
# paused member of the default template, of the shape a plain sbx-create
# asks for (1 vCPU, 256 MiB, the default disk), so the first sbx-create after
# an install is a claim, not a cold boot.  An existing sbx.yaml is the
# operator's and is never touched, nor is anything but a regular file
# written: a symlink or other file in its place is left alone and said so.
#   scripts/default-sbx-yaml.sh      (honours SBX_ROOT, as the commands do)
set -euo pipefail
dir="${SBX_ROOT:-}/etc/sbx"
conf=$dir/sbx.yaml
if [ -e "$conf" ] || [ -L "$conf" ]; then
	echo "default-sbx-yaml: $conf exists: left as it is" >&2
	exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp "$dir/.sbx.yaml.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<'YAML'
# sbx host configuration (sbx.yaml(5)), written by install.sh; yours to edit.
# A warm pool of one paused session of the default template, of the shape a
# plain sbx-create asks for, so a create is a claim (milliseconds) rather
# than a boot.  The member holds its memory while it waits and counts
# against the host's capacity (sbx-ps --capacity shows it as pooled); set
# size: 0 to give that back.
pool:
  templates:
    default: {size: 1, vcpus: 1, memory: 256M}
YAML
chmod 0644 "$tmp"
# No overwrite even if one appeared meanwhile: link, then drop the name.
if ln "$tmp" "$conf" 2>/dev/null; then
	echo "default-sbx-yaml: wrote $conf (a warm pool of one default session)" >&2
else
	echo "default-sbx-yaml: $conf appeared meanwhile: left as it is" >&2
fi
