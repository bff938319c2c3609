/* Unit tests for package locks, pins and name rules (pkglock.h, the
 * packages.allow/deny/pins/lock keys of policy.c): both lock formats,
 * every class of hostile lock, the rules' answers, and their JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pkglock.h"
#include "policy.h"
#include "util.h"

#include "tap.h"

#define H1 "0000000000000000000000000000000000000000000000000000000000000001"
#define H2 "00000000000000000000000000000000000000000000000000000000000000aa"
/* sha512 of nothing, as npm writes it */
#define I0 "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="
#define I0HEX                                                                                                          \
	"cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd4741" \
	"7a"                                                                                                           \
	"81a538327af927da3e"

static struct sbx_err err;
static struct sbx_pkgset set;

static int pip(const char *txt)
{
	memset(&err, 0, sizeof err);
	sbx_pkgset_free(&set);
	return sbx_pkglock_parse_pip("req.txt", txt, strlen(txt), &set, &err);
}

static int npm(const char *txt)
{
	memset(&err, 0, sizeof err);
	sbx_pkgset_free(&set);
	return sbx_pkglock_parse_npm("package-lock.json", txt, strlen(txt), &set, &err);
}

static void refused(int r, const char *want, const char *what)
{
	int good = r < 0 && err.code == SBX_EXIT_INVALID && strstr(err.msg, want) && set.n == 0;
	ok(good, what);
	if (!good)
		printf("#   got %d (%d) '%s'\n#   want '%s'\n", r, err.code, err.msg, want);
}

static void test_pip(void)
{
	ok(pip("# a lock\nFoo_Bar==1.0 \\\n    --hash=sha256:" H1 " \\\n    --hash=sha256:" H2 "\n"
	       "six[extra]==1.16.0 ; python_version >= \"3\" --hash=sha256:" H1 "  # why\n") == 0 &&
		   set.n == 3,
	   "pip: continuations, comments, extras, markers, two hashes");
	ok(set.n == 3 && !strcmp(set.v[0].name, "foo-bar") && !strcmp(set.v[0].version, "1.0") &&
		   !strcmp(set.v[1].hash, H2) && !strcmp(set.v[2].name, "six"),
	   "pip: names in PEP 503 form, versions and hashes kept");
	refused(pip("foo>=1.0 --hash=sha256:" H1 "\n"), "req.txt:1: 'foo>=1.0' is not pinned", "pip: a range");
	refused(pip("\nfoo==1.0\n"), "req.txt:2: foo==1.0 has no --hash", "pip: no hash, FILE:LINE");
	refused(pip("foo==1.0 --hash=md5:abc\n"), "is not --hash=sha256:", "pip: another hash");
	refused(pip("foo==1.0 --hash=sha256:" H1 "\nFOO==2.0 --hash=sha256:" H2 "\n"), "req.txt:2: foo is listed twice",
		"pip: the same project twice");
	refused(pip("-r other.txt\n"), "option -r is not allowed", "pip: includes");
	refused(pip("--index-url http://x/\n"), "option --index-url", "pip: index options");
	refused(pip("foo==1.0 --no-binary=:all: --hash=sha256:" H1 "\n"), "option --no-binary", "pip: other options");
	refused(pip("foo @ https://x/foo.whl --hash=sha256:" H1 "\n"), "direct URL", "pip: a direct URL");
	refused(pip("../etc==1.0 --hash=sha256:" H1 "\n"), "not a project name", "pip: a path as a name");
	refused(pip("foo==1.0/../x --hash=sha256:" H1 "\n"), "not one exact version", "pip: a path as a version");
	refused(pip("foo==1.* --hash=sha256:" H1 "\n"), "not one exact version", "pip: a wildcard");
	refused(pip("fo\033o==1.0 --hash=sha256:" H1 "\n"), "req.txt:1: a control character",
		"pip: control characters");
	refused(pip("# nothing\n\n"), "no requirement", "pip: an empty lock");
	char *big = malloc(SBX_PKGLOCK_FILE_MAX + 2);
	memset(big, 'a', SBX_PKGLOCK_FILE_MAX + 1);
	big[SBX_PKGLOCK_FILE_MAX + 1] = 0;
	memset(&err, 0, sizeof err);
	refused(sbx_pkglock_parse_pip("req.txt", big, SBX_PKGLOCK_FILE_MAX + 1, &set, &err), "larger than",
		"pip: a huge file");
	refused(pip(big + SBX_PKGLOCK_FILE_MAX + 1 - 70000), "longer than", "pip: a huge line");
	free(big);
	/* 100k packages: refused past SBX_PKGLOCK_ENTRIES_MAX, quickly. */
	size_t cap = 100000 * 96;
	char *many = malloc(cap), *p = many;
	for (int i = 0; i < 100000; i++)
		p += sprintf(p, "p%d==1.0 --hash=sha256:%s\n", i, H1);
	refused(pip(many), "larger than 8 MiB", "pip: 100k packages, past the size");
	p = many;
	for (int i = 0; i < 9000; i++)
		p += sprintf(p, "p%d==1 --hash=sha256:%s\n", i, H1);
	refused(pip(many), "more than 8192 locked files", "pip: 9000 packages, past the count");
	free(many);
}

static void test_npm(void)
{
	ok(npm("{\"name\":\"x\",\"lockfileVersion\":3,\"packages\":{\"\":{\"name\":\"x\"},"
	       "\"node_modules/a\":{\"version\":\"1.0.0\",\"resolved\":\"https://r/a.tgz\",\"integrity\":\"" I0 "\"},"
	       "\"node_modules/@s/b\":{\"version\":\"2.0.0\",\"integrity\":\"sha1-xx " I0 "\"},"
	       "\"node_modules/c/node_modules/a\":{\"version\":\"1.0.0\",\"integrity\":\"" I0 "\"},"
	       "\"node_modules/alias\":{\"name\":\"real\",\"version\":\"3.0.0\",\"integrity\":\"" I0 "\"},"
	       "\"node_modules/ln\":{\"link\":true,\"resolved\":\"packages/ln\"},"
	       "\"packages/ws\":{\"version\":\"0.0.1\"}}}") == 0 &&
		   set.n == 3,
	   "npm v3: entries under node_modules, duplicates merged, links and folders skipped");
	ok(set.n == 3 && !strcmp(set.v[0].name, "a") && !strcmp(set.v[0].hash, I0HEX) &&
		   !strcmp(set.v[1].name, "@s/b") && !strcmp(set.v[2].name, "real"),
	   "npm: scoped and aliased names, sha512 as hex");
	refused(npm("{\"lockfileVersion\":1,\"dependencies\":{}}"), "lockfileVersion is not 2 or 3", "npm: version 1");
	refused(npm("[1]"), "not a package-lock.json", "npm: not an object");
	refused(npm("{\"lockfileVersion\":2,\"packages\":[]}"), "packages is not an object", "npm: wrong types");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/a\":{\"version\":1}}}"),
		"packages.\"node_modules/a\": name, version", "npm: a number as version, with the key path");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/a\":{\"version\":\"1.0.0\"}}}"),
		"integrity has no sha512", "npm: no integrity");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/a\":{\"version\":\"1.0.0\",\"integrity\":"
		    "\"sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA=\"}}}"),
		"integrity has no sha512", "npm: sha1 only");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/../../etc\":{\"version\":\"1.0.0\","
		    "\"integrity\":\"" I0 "\"}}}"),
		"not an npm package name", "npm: a path as a name");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/a\":{\"name\":\"a\\u0007\",\"version\":"
		    "\"1.0.0\",\"integrity\":\"" I0 "\"}}}"),
		"not an npm package name", "npm: a control character in a name");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/a\":{\"version\":\"1.0.0\",\"resolved\":"
		    "\"git+ssh://x\",\"integrity\":\"" I0 "\"}}}"),
		"not a registry tarball", "npm: a git dependency");
	refused(npm("{\"lockfileVersion\":2,\"lockfileVersion\":3,\"packages\":{}}"), "duplicate",
		"npm: duplicate keys");
	refused(npm("{\"lockfileVersion\":2,\"packages\":{\"node_modules/a\":{\"version\":\"1.0.0\",\"integrity\":\"" I0
		    "\"},\"node_modules/b/node_modules/a\":{\"version\":\"1.0.0\",\"integrity\":\"sha512-"
		    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\"}}}"),
		"another integrity", "npm: one version with two integrities");
	char deep[4096];
	size_t k = 0;
	k += (size_t)sprintf(deep, "{\"lockfileVersion\":2,\"packages\":");
	for (int i = 0; i < 1000; i++)
		deep[k++] = '[';
	deep[k] = 0;
	refused(npm(deep), "nested deeper than 32", "npm: deep nesting, before jansson");
	refused(npm("{\"lockfileVersion\":3,\"packages\":{\"\":{}}}"), "no package in it", "npm: an empty lock");
	refused(npm("{\"lockfileVersion\":3,"), "package-lock.json:1:", "npm: broken JSON, with a line");
	size_t cap = 100000 * 230;
	char *many = malloc(cap), *p = many;
	p += sprintf(p, "{\"lockfileVersion\":3,\"packages\":{");
	for (int i = 0; i < 100000; i++)
		p += sprintf(p, "%s\"node_modules/p%d\":{\"version\":\"1.0.0\",\"integrity\":\"%s\"}", i ? "," : "", i,
			     I0);
	sprintf(p, "}}");
	refused(npm(many), "larger than 8 MiB", "npm: 100k packages, past the size");
	p = many;
	p += sprintf(p, "{\"lockfileVersion\":3,\"packages\":{");
	for (int i = 0; i < 9000; i++)
		p += sprintf(p, "%s\"node_modules/p%d\":{\"version\":\"1.0.0\",\"integrity\":\"%s\"}", i ? "," : "", i,
			     I0);
	sprintf(p, "}}");
	refused(npm(many), "more than 8192 locked files", "npm: 9000 packages, past the count");
	free(many);
}

static struct sbx_policy pol;

static int policy(const char *yaml)
{
	memset(&err, 0, sizeof err);
	sbx_policy_defaults(&pol);
	return sbx_policy_parse("p.yaml", (const uint8_t *)yaml, strlen(yaml), &pol, &err);
}

#define REG "packages:\n  mode: allowlist\n  registries: [{type: pypi, url: 'https://pypi.org/simple'}]\n"

static void test_policy(void)
{
	ok(policy(REG "  allow: {pypi: [Foo_Bar*, 'req?ests'], npm: ['@acme/*', left-pad]}\n"
		      "  deny: {pypi: ['*']}\n  pins: {npm: ['@acme/x==1.2.3', 'left-pad==1.3.0']}\n"
		      "  lock: {pypi: /srv/req.txt}\n") == 0,
	   "packages.allow, deny, pins and lock");
	ok(pol.packages.allow[0].n == 2 && !strcmp(pol.packages.allow[0].v[0], "foo-bar*") &&
		   pol.packages.deny[0].set && pol.packages.pins[1].n == 2 &&
		   !strcmp(pol.packages.pins[1].v[0], "@acme/x==1.2.3") &&
		   !strcmp(pol.packages.lock[0], "/srv/req.txt"),
	   "patterns in PEP 503 form for pypi, pins and the lock kept");
	refused(policy(REG "  allow: {pypi: ['*']}\n"), "matches every name", "allow '*' is refused");
	refused(policy(REG "  allow: {pypi: ['**']}\n"), "matches every name", "and so is '**'");
	refused(policy(REG "  allow: {pip: [x]}\n"), "unknown key 'pip'", "an unknown registry type");
	refused(policy(REG "  allow: {pypi: ['a/b']}\n"), "is not a name pattern", "a '/' in a pypi pattern");
	refused(policy(REG "  pins: {pypi: ['foo>=1']}\n"), "is not NAME==VERSION", "a pin that is a range");
	refused(policy(REG "  pins: {pypi: ['foo==1', 'FOO==2']}\n"), "foo is pinned twice", "a name pinned twice");
	refused(policy(REG "  pins: {pypi: ['foo==1']}\n  lock: {pypi: /x}\n"), "one or the other",
		"pins and a lock for one type");
	refused(policy(REG "  lock: {npm: relative.json}\n"), "packages.lock.npm", "a relative lock path");
	refused(policy("packages:\n  lock: {npm: /x.json}\n"), "packages.mode is not allowlist", "a lock when offline");
}

static void test_rules(void)
{
	struct sbx_pkgrules r = { 0 };
	char why[300];
	char *allow[] = { strdup("@acme/*"), strdup("left-pad") }, *deny[] = { strdup("@acme/evil") };
	r.t[1].allow = malloc(sizeof allow);
	memcpy(r.t[1].allow, allow, sizeof allow);
	r.t[1].nallow = 2;
	r.t[1].allow_set = 1;
	r.t[1].deny = malloc(sizeof deny);
	memcpy(r.t[1].deny, deny, sizeof deny);
	r.t[1].ndeny = 1;
	ok(!sbx_pkgrules_name(&r, 1, "@acme/x", why, sizeof why) &&
		   !sbx_pkgrules_name(&r, 1, "left-pad", why, sizeof why),
	   "npm: a scope's pattern and a name");
	ok(sbx_pkgrules_name(&r, 1, "@acme/evil", why, sizeof why) && strstr(why, "packages.deny.npm"), "deny wins");
	ok(sbx_pkgrules_name(&r, 1, "@acmeX/y", why, sizeof why) &&
		   sbx_pkgrules_name(&r, 1, "lodash", why, sizeof why) && strstr(why, "packages.allow.npm"),
	   "anything else matches no allow pattern");
	ok(!sbx_pkgrules_name(&r, 0, "anything", why, sizeof why), "pypi: no rules, every name");
	r.t[0].locked = 1;
	snprintf(r.t[0].source, sizeof r.t[0].source, "/srv/req.txt");
	sbx_pkgset_add(&r.t[0].set, "foo", "1.0", H1);
	ok(sbx_pkgrules_name(&r, 0, "bar", why, sizeof why) &&
		   strstr(why, "not in the lock /srv/req.txt (packages.lock.pypi)"),
	   "a lock: a name outside it, naming the lock");
	ok(sbx_pkgrules_version(&r, 0, "foo", "1.0") && !sbx_pkgrules_version(&r, 0, "foo", "2.0"), "a lock: versions");
	ok(sbx_pkgrules_file(&r, 0, "foo", "1.0", H1) && !sbx_pkgrules_file(&r, 0, "foo", "1.0", H2), "a lock: hashes");
	json_t *j = sbx_pkgrules_json(&r);
	struct sbx_pkgrules back = { 0 };
	int rc = j ? sbx_pkgrules_from_json(j, &back, &err) : -1;
	if (rc < 0)
		printf("# %s\n", j ? err.msg : "no JSON");
	ok(rc == 0 && back.t[1].nallow == 2 && back.t[0].set.n == 1 && back.t[0].locked == 1 &&
		   !strcmp(back.t[0].source, "/srv/req.txt") && !back.t[0].allow_set,
	   "the rules' JSON reads back");
	json_decref(j);
	sbx_pkgrules_free(&back);
	sbx_pkgrules_free(&r);
}

int main(void)
{
	test_pip();
	test_npm();
	test_policy();
	test_rules();
	sbx_pkgset_free(&set);
	return tap_done();
}
