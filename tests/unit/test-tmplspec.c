/* The template spec parser: what it takes, and every refusal with its
 * file:line:col. */
#include <stdio.h>
#include <string.h>

#include "tap.h"
#include "tmplspec.h"

static int parse(const char *yaml, struct sbx_tmplspec *s, struct sbx_err *e)
{
	memset(e, 0, sizeof *e);
	return sbx_tmplspec_parse("t.yaml", (const uint8_t *)yaml, strlen(yaml), s, e);
}

/* yaml is refused with code 3 and a message holding want. */
static void bad(const char *yaml, const char *want, const char *what)
{
	struct sbx_tmplspec s;
	struct sbx_err e;
	int r = parse(yaml, &s, &e);
	int good = r < 0 && e.code == 3 && strstr(e.msg, want);
	if (!good)
		printf("# got rc %d code %d: %s\n", r, e.code, e.msg);
	ok(good, what);
	sbx_tmplspec_free(&s);
}

int main(void)
{
	struct sbx_tmplspec s;
	struct sbx_err e;
	const char *full = "from: debian:bookworm\n"
			   "packages: [nodejs, npm, git, g++]\n"
			   "files: [{src: ./tools, dst: /opt//tools/, mode: \"0755\"}, {src: a.txt, dst: /etc/a}]\n"
			   "run:\n  - npm config set fund false\n  - {cmd: id, user: user}\n"
			   "env: {NODE_ENV: development, EMPTY: \"\"}\nuser: user\nworkdir: /workspace\n";
	ok(parse(full, &s, &e) == 0, "a full spec parses");
	ok(s.from == SBX_FROM_DEBIAN && !strcmp(s.from_ref, "bookworm"), "from debian:bookworm");
	ok(s.npackages == 4 && !strcmp(s.packages[3], "g++"), "packages");
	ok(s.nfiles == 2 && !strcmp(s.files[0].dst, "/opt/tools") && s.files[0].mode == 0755 && s.files[1].mode == -1,
	   "files: dst normalised, mode octal, absent mode kept as the source's");
	ok(s.nrun == 2 && !strcmp(s.run[1].user, "user") && !s.run[0].user[0], "run: a line and {cmd, user}");
	ok(json_object_size(s.env) == 2 &&
		   !strcmp(json_string_value(json_object_get(s.env, "NODE_ENV")), "development"),
	   "env");
	ok(!strcmp(s.user, "user") && !strcmp(s.workdir, "/workspace"), "user and workdir");
	json_t *j = sbx_tmplspec_json(&s);
	char *txt = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	ok(txt && strstr(txt, "\"from\":\"debian:bookworm\"") && strstr(txt, "\"mode\":\"0755\""), "canonical JSON");
	free(txt);
	json_decref(j);
	sbx_tmplspec_free(&s);
	ok(parse("from: default@abc123\n", &s, &e) == 0 && s.from == SBX_FROM_TEMPLATE &&
		   !strcmp(s.from_ref, "default@abc123"),
	   "from TEMPLATE@VERSION");
	sbx_tmplspec_free(&s);
	/* templates/default.yaml and python.yaml's keys */
	ok(parse("from: busybox\nkernel: linux-image-cloud-amd64\nremove: [//usr/lib/x/, /opt]\nuser: \"1001\"\n", &s,
		 &e) == 0 &&
		   s.from == SBX_FROM_BUSYBOX && !strcmp(s.kernel, "linux-image-cloud-amd64") && s.nremove == 2 &&
		   !strcmp(s.remove[0], "/usr/lib/x") && !strcmp(s.user, "1001"),
	   "from: busybox, kernel:, remove: (normalised) and a uid as user");
	j = sbx_tmplspec_json(&s);
	txt = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	ok(txt && strstr(txt, "\"from\":\"busybox\"") && strstr(txt, "\"kernel\":\"linux-image-cloud-amd64\"") &&
		   strstr(txt, "\"remove\":[\"/usr/lib/x\",\"/opt\"]"),
	   "and the canonical JSON has them");
	free(txt);
	json_decref(j);
	sbx_tmplspec_free(&s);
	ok(parse("from: default\n", &s, &e) == 0 && (j = sbx_tmplspec_json(&s)) && !json_object_get(j, "kernel") &&
		   !json_object_get(j, "remove"),
	   "a spec without them hashes as before (no kernel or remove key)");
	json_decref(j);
	sbx_tmplspec_free(&s);
	bad("from: busybox\nkernel: linux-image-amd64\n", "not a kernel sbx boots", "another kernel package");
	bad("from: busybox\nkernel: [linux-image-cloud-amd64]\n", "expected a scalar", "kernel: as a list");
	bad("from: busybox\nremove: [usr/share]\n", "must be an absolute path", "remove: a relative path");
	bad("from: busybox\nremove: [/usr/../etc]\n", "'.' or '..'", "remove: with ..");
	bad("from: busybox\nremove: [/]\n", "below /", "remove: /");
	bad("from: busybox\nremove: /x\n", "expected a list", "remove: as a scalar");
	bad("from: busybox\nuser: \"65535\"\n", "or a uid", "a uid out of range");
	bad("from: busybox\nuser: \"-1\"\n", "or a uid", "a negative uid");

	bad("packages: [git]\n", "t.yaml:1:1: from: is required", "from is required");
	bad("", "empty spec", "an empty file");
	bad("from: debian:bookworm\nfrm: x\n", "t.yaml:2:1: unknown key 'frm'", "unknown key, with its position");
	bad("from: debian:bookworm\nfiles: [{src: a, dst: /a, owner: x}]\n",
	    "t.yaml:2:27: unknown key 'owner' in files[0]", "unknown key in a files entry");
	bad("from: debian:bookworm\nfrom: debian:trixie\n", "duplicate key 'from'", "duplicate key");
	bad("from: debian:bookworm\nenv: {A: 1, A: 2}\n", "duplicate key 'A'", "duplicate env key");
	bad("from: &a debian:bookworm\n", "anchors are not allowed", "anchors");
	bad("from: !!str debian:bookworm\n", "tags are not allowed", "tags");
	bad("from: debian:Bookworm\n", "not a Debian suite", "a suite in upper case");
	bad("from: ../../etc\n", "must be debian:SUITE, busybox or TEMPLATE", "from: a path");
	bad("from: default@../x\n", "must be debian:SUITE, busybox or TEMPLATE", "from: a version with a slash");
	bad("from: .hidden\n", "must be debian:SUITE, busybox or TEMPLATE", "from: a dot name");
	bad("from: debian:bookworm\npackages: [\"-o=APT::foo\"]\n", "not a Debian package name",
	    "an option as a package");
	bad("from: debian:bookworm\npackages: [git, git]\n", "listed twice", "a package twice");
	bad("from: debian:bookworm\npackages: git\n", "packages: expected a list", "packages as a scalar");
	bad("from: debian:bookworm\npackages:\n", "expected a list, got null", "packages: null");
	bad("from: debian:bookworm\nfiles: [{src: ../x, dst: /x}]\n", "must not leave the spec's directory",
	    "files.src with ..");
	bad("from: debian:bookworm\nfiles: [{src: a/../../x, dst: /x}]\n", "must not leave", "files.src with a/../..");
	bad("from: debian:bookworm\nfiles: [{src: /etc/shadow, dst: /x}]\n", "must be relative", "files.src absolute");
	bad("from: debian:bookworm\nfiles: [{src: a, dst: x}]\n", "must be an absolute path", "files.dst relative");
	bad("from: debian:bookworm\nfiles: [{src: a, dst: /a/../../etc}]\n", "'.' or '..'", "files.dst with ..");
	bad("from: debian:bookworm\nfiles: [{src: a, dst: /}]\n", "below /", "files.dst /");
	bad("from: debian:bookworm\nfiles: [{src: a}]\n", "needs both src and dst", "files without dst");
	bad("from: debian:bookworm\nfiles: [{src: a, dst: /a, mode: \"4755\"}]\n", "setuid", "a setuid mode");
	bad("from: debian:bookworm\nfiles: [{src: a, dst: /a, mode: \"0999\"}]\n", "not an octal mode", "a bad mode");
	bad("from: debian:bookworm\nrun: [{user: root}]\n", "needs cmd", "run without cmd");
	bad("from: debian:bookworm\nrun: [[a]]\n", "expected a command line", "run: a nested list");
	bad("from: debian:bookworm\nrun: [{cmd: x, user: \"r;oot\"}]\n", "not a user name", "run user");
	bad("from: debian:bookworm\nuser: Root\n", "not a user name", "user in upper case");
	bad("from: debian:bookworm\nuser: ../root\n", "not a user name", "user with a path");
	bad("from: debian:bookworm\nworkdir: work\n", "absolute", "relative workdir");
	bad("from: debian:bookworm\nenv: {\"A=B\": x}\n", "not a variable name", "env name with =");
	bad("from: debian:bookworm\nenv: {A: null}\n", "expected a scalar value, got null", "env value null");
	bad("from: debian:bookworm\nenv: {A: \"a\\x01\"}\n", "control or invalid character",
	    "env value with a control");
	bad("from: debian:bookworm\n---\nfrom: debian:bookworm\n", "only one YAML document", "two documents");
	bad("- from\n", "a template spec is a mapping", "a list at the top");
	bad("from: debian:bookworm\nenv: {A: b\n", "t.yaml:3:1", "a syntax error with a position");
	bad("from: \"\xff\"\n", "t.yaml:", "invalid UTF-8");
	{
		/* 65 run: steps */
		static char big[8192];
		size_t o = (size_t)snprintf(big, sizeof big, "from: default\nrun:\n");
		for (int i = 0; i < 65; i++)
			o += (size_t)snprintf(big + o, sizeof big - o, "  - true\n");
		bad(big, "more than 64 steps", "too many run: steps");
	}
	{
		static char big[SBX_TMPLSPEC_CMD_MAX + 100];
		size_t o = (size_t)snprintf(big, sizeof big, "from: default\nrun: [\"");
		memset(big + o, 'a', SBX_TMPLSPEC_CMD_MAX + 1);
		snprintf(big + o + SBX_TMPLSPEC_CMD_MAX + 1, 10, "\"]\n");
		bad(big, "value longer than", "a run: line over the limit");
	}
	char why[100], out[300];
	ok(sbx_tmplspec_check_guestpath("//opt///x/", out, sizeof out, why, sizeof why) == 0 && !strcmp(out, "/opt/x"),
	   "guest paths are normalised");
	ok(sbx_tmplspec_check_relpath("a/..b/c", why, sizeof why) == 0, "'..b' is a name, not '..'");
	return tap_done();
}
