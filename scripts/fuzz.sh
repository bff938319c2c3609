#!/bin/bash
# make fuzz: build every libFuzzer target in tests/fuzz with ASan+UBSan and
# run each for FUZZ_SECONDS (default 60), corpus seeded from tests/fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-fuzz
SECS=${FUZZ_SECONDS:-60}
mkdir -p "$B"
for src in tests/fuzz/fuzz-*.c; do
	name=$(basename "$src" .c)
	clang -g -O1 -std=gnu11 -D_GNU_SOURCE -Icommon -fsanitize=fuzzer,address,undefined \
		"$src" common/proto.c -o "$B/$name"
	corpus=$B/corpus-$name
	mkdir -p "$corpus"
	[ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
	echo "fuzz: $name for ${SECS}s" >&2
	"$B/$name" -max_total_time="$SECS" -max_len=70000 "$corpus" 2>&1 | tail -3
done
