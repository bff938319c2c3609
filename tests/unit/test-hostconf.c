/* Unit tests for the host configuration loader, sbx.yaml(5) (TAP). */
#include <stdio.h>
#include <string.h>

#include "hostconf.h"

static int n, failed;
static void ok(int cond, const char *what)
{
	printf("%sok %d - %s\n", cond ? "" : "not ", ++n, what);
	failed += !cond;
}

static int parse(const char *txt, struct sbx_hostconf *hc, struct sbx_err *e)
{
	memset(e, 0, sizeof *e);
	return sbx_hostconf_parse("h.yaml", (const uint8_t *)txt, strlen(txt), hc, e);
}

int main(void)
{
	static struct sbx_hostconf hc;
	struct sbx_err e;
	ok(parse("", &hc, &e) == 0 && hc.npool == 0, "an empty file is an empty configuration");
	ok(parse("# only a comment\n", &hc, &e) == 0 && hc.npool == 0, "so is one with only comments");
	ok(parse("pool:\n  templates:\n    default: {size: 2}\n    python@3.11-1:\n      size: 1\n      vcpus: 2\n"
		 "      memory: 1G\n      disk: 4G\n",
		 &hc, &e) == 0 && hc.npool == 2,
	   "two pooled templates");
	ok(!strcmp(hc.pool[0].tmpl, "default") && hc.pool[0].size == 2 && hc.pool[0].vcpus == 1 &&
		   hc.pool[0].memory_mib == 256 && hc.pool[0].disk == 1ull << 30,
	   "defaults: 1 vCPU, 256 MiB, 1 GiB of disk");
	ok(!strcmp(hc.pool[1].tmpl, "python@3.11-1") && hc.pool[1].vcpus == 2 && hc.pool[1].memory_mib == 1024 &&
		   hc.pool[1].disk == 4ull << 30,
	   "a pinned version with its own shape");
	ok(parse("pool: {templates: {}}\n", &hc, &e) == 0 && hc.npool == 0, "an empty pool");
	ok(parse("templates:\n  publishers: [acme, b-2]\n", &hc, &e) == 0 && hc.npublishers == 2 &&
		   sbx_hostconf_publisher(&hc, "acme") && sbx_hostconf_publisher(&hc, "b-2") &&
		   !sbx_hostconf_publisher(&hc, "acm") && !sbx_hostconf_publisher(&hc, NULL),
	   "templates.publishers: tenants that may publish");
	ok(parse("pool: {templates: {}}\ntemplates: {publishers: []}\n", &hc, &e) == 0 && hc.npublishers == 0,
	   "pool and templates side by side, no publishers");
	ok(parse("", &hc, &e) == 0 && !sbx_hostconf_publisher(&hc, "acme"), "by default nobody publishes");

	static const struct {
		const char *txt, *msg;
	} bad[] = {
		{ "pool:\n  templates:\n    default: {size: 2, colour: red}\n", "h.yaml:3:24: unknown key 'colour'" },
		{ "pools: {}\n", "h.yaml:1:1: unknown key 'pools'" },
		{ "pool:\n  templates:\n    default: {vcpus: 1}\n", "size is required" },
		{ "pool: {templates: {default: {size: 65}}}\n", "not a whole number in 0..64" },
		{ "pool: {templates: {default: {size: -1}}}\n", "not a whole number" },
		{ "pool: {templates: {default: {size: 010}}}\n", "not a whole number" },
		{ "pool: {templates: {default: {size: 1, memory: 100M5}}}\n", "not a size" },
		{ "pool: {templates: {default: {size: 1, memory: 32M}}}\n", "64M..64G" },
		{ "pool: {templates: {default: {size: 1, vcpus: 0}}}\n", "1..64" },
		{ "pool: {templates: {default: {size: 1}, default: {size: 2}}}\n", "duplicate key 'default'" },
		{ "pool: {templates: {../x: {size: 1}}}\n", "not a template name" },
		{ "pool: {templates: {a@: {size: 1}}}\n", "not a template name" },
		{ "pool: &a {templates: {}}\n", "anchors are not allowed" },
		{ "pool: *a\n", "aliases are not allowed" },
		{ "pool: !!map {templates: {}}\n", "tags are not allowed" },
		{ "pool: {templates: {}}\n---\npool: {templates: {}}\n", "only one document" },
		{ "pool:\n", "expected a mapping (write {} for an empty mapping)" },
		{ "- pool\n", "the top level must be a mapping" },
		{ "pool: {templates: {default: {size: [1]}}}\n", "expected a scalar" },
		{ "pool: {templates: {default: {size: 1}\n", "h.yaml:2:1:" },
		{ "pool: \"\xff\"\n", "h.yaml:1:8:" },
		{ "templates: {publishers: [operator]}\n", "'operator' is not a tenant ID" },
		{ "templates: {publishers: [_]}\n", "'_' is not a tenant ID" },
		{ "templates: {publishers: [../x]}\n", "not a tenant ID" },
		{ "templates: {publishers: acme}\n", "expected a list of tenant IDs" },
		{ "templates: {publishers: [[a]]}\n", "expected a scalar" },
		{ "templates: {publisher: [a]}\n", "unknown key 'publisher'" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[800];
		int rc = parse(bad[i].txt, &hc, &e);
		snprintf(what, sizeof what, "refused with 3 and '%s' (got '%s')", bad[i].msg, e.msg);
		ok(rc < 0 && e.code == SBX_EXIT_INVALID && strstr(e.msg, bad[i].msg) && hc.npool == 0, what);
	}
	char big[4096] = "pool:\n  templates:\n";
	for (int i = 0; i < 17; i++)
		snprintf(big + strlen(big), sizeof big - strlen(big), "    t%d: {size: 1}\n", i);
	ok(parse(big, &hc, &e) < 0 && strstr(e.msg, "more than 16 templates"), "at most 16 templates");
	printf("1..%d\n", n);
	return failed != 0;
}
