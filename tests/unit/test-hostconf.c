/* Unit tests for the host configuration loader, sbx.yaml(5) (TAP). */
#include <stdio.h>
#include <string.h>

#include "hostconf.h"

#include "tap.h"

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
		 &hc, &e) == 0 &&
		   hc.npool == 2,
	   "two pooled templates");
	ok(!strcmp(hc.pool[0].tmpl, "default") && hc.pool[0].size == 2 && hc.pool[0].vcpus == 1 &&
		   hc.pool[0].memory_mib == 256 && hc.pool[0].disk == 1ull << 30,
	   "defaults: 1 vCPU, 256 MiB, 1 GiB of disk");
	ok(!strcmp(hc.pool[1].tmpl, "python@3.11-1") && hc.pool[1].vcpus == 2 && hc.pool[1].memory_mib == 1024 &&
		   hc.pool[1].disk == 4ull << 30,
	   "a pinned version with its own shape");
	ok(hc.pool[0].network == 0, "no member has a network unless asked for");
	ok(parse("pool: {templates: {default: {size: 3, network: 2}}}\n", &hc, &e) == 0 && hc.pool[0].size == 3 &&
		   hc.pool[0].network == 2,
	   "network: how many of the members have a NIC");
	ok(parse("pool: {templates: {}}\n", &hc, &e) == 0 && hc.npool == 0, "an empty pool");
	ok(parse("host_paths:\n  read: [/srv/in, \"/srv/{tenant}/in\"]\n  write:\n    - /srv/out\n"
		 "secrets: {env_allow: [TOKEN, _x1]}\n",
		 &hc, &e) == 0 &&
		   hc.paths.nread == 2 && hc.paths.nwrite == 1 && hc.paths.nenv == 2 &&
		   !strcmp(hc.paths.read[1], "/srv/{tenant}/in") && !strcmp(hc.paths.write[0], "/srv/out") &&
		   !strcmp(hc.paths.env_allow[1], "_x1"),
	   "host_paths and secrets.env_allow");
	ok(parse("pool: {templates: {}}\n", &hc, &e) == 0 && hc.paths.nread == 0 && hc.paths.nenv == 0,
	   "without them nothing is granted");
	ok(parse("quotas:\n  per_tenant: {memory: 8G, vcpus: 8, workspace_bytes: 100G}\n  tenants:\n    acme: {memory: "
		 "32G, sessions: 20}\n",
		 &hc, &e) == 0 &&
		   hc.quotas.ntenants == 1,
	   "quotas");
	struct sbx_quota q;
	sbx_hostconf_quota(&hc, "acme", &q);
	ok(q.memory_mib == 32768 && q.sessions == 20 && q.vcpus == 8 && q.workspace_bytes == 100ull << 30,
	   "a tenant's entry replaces what it sets, keeps the rest");
	sbx_hostconf_quota(&hc, "globex", &q);
	ok(q.memory_mib == 8192 && q.sessions == 0 && q.vcpus == 8,
	   "another tenant gets per_tenant; unset is no limit");
	ok(parse("templates:\n  publishers: [acme, b-2]\n", &hc, &e) == 0 && hc.npublishers == 2 &&
		   sbx_hostconf_publisher(&hc, "acme") && sbx_hostconf_publisher(&hc, "b-2") &&
		   !sbx_hostconf_publisher(&hc, "acm") && !sbx_hostconf_publisher(&hc, NULL),
	   "templates.publishers: tenants that may publish");
	ok(parse("pool: {templates: {}}\ntemplates: {publishers: []}\n", &hc, &e) == 0 && hc.npublishers == 0,
	   "pool and templates side by side, no publishers");
	ok(parse("", &hc, &e) == 0 && !sbx_hostconf_publisher(&hc, "acme"), "by default nobody publishes");
	ok(parse("", &hc, &e) == 0 && hc.audit.max_size == 0 && hc.audit.keep == 0,
	   "by default the audit log never rotates and gc drops no segment");
	ok(parse("audit: {max_size: 64M, keep: 30}\n", &hc, &e) == 0 && hc.audit.max_size == 64ull << 20 &&
		   hc.audit.keep == 30,
	   "audit: max_size and keep");
	ok(parse("audit: {session_max: 1M}\n", &hc, &e) == 0 && hc.audit.session_max == 1ull << 20 &&
		   hc.audit.max_size == 0,
	   "audit: session_max");
	ok(parse("audit: {reserve: 0, keep: 0}\n", &hc, &e) == 0 && hc.audit.reserve_set && !hc.audit.reserve &&
		   hc.audit.keep_set && !hc.audit.keep,
	   "audit: reserve 0 and keep 0 are set, not defaults");
	ok(parse("", &hc, &e) == 0 && sbx_hostconf_reserve(&hc.audit, 1ull << 30) == 256ull << 20 &&
		   sbx_hostconf_reserve(&hc.audit, 100ull << 30) == 2ull << 30 &&
		   sbx_hostconf_reserve(&hc.audit, 1ull << 40) == 4ull << 30,
	   "the default reserve: 256M, 2%, at most 4G");

	ok(parse("serve: {listen: 127.0.0.1:443, tls: {cert: /etc/sbx/c.pem, key: /etc/sbx/k.pem}}\n", &hc, &e) == 0 &&
		   !strcmp(hc.serve.tls_cert, "/etc/sbx/c.pem") && !strcmp(hc.serve.tls_key, "/etc/sbx/k.pem"),
	   "serve.tls: cert and key");
	ok(parse("serve: {listen: 127.0.0.1:80}\n", &hc, &e) == 0 && !hc.serve.tls_cert[0] && !hc.serve.tls_key[0],
	   "no serve.tls: plain HTTP");
	ok(parse("serve: {policy: /etc/sbx/agents.yaml}\n", &hc, &e) == 0 &&
		   !strcmp(hc.serve.policy, "/etc/sbx/agents.yaml"),
	   "serve.policy: the service's sandboxes' policy");

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
		{ "pool: {templates: {default: {size: 1, network: 2}}}\n", "network (2) is more than size (1)" },
		{ "pool: {templates: {default: {size: 1, network: yes}}}\n", "not a whole number" },
		{ "pool: {templates: {default: {size: 1}, default: {size: 2}}}\n", "duplicate key 'default'" },
		{ "pool: {templates: {../x: {size: 1}}}\n", "not a template name" },
		{ "pool: {templates: {a@: {size: 1}}}\n", "not a template name" },
		{ "pool: &a {templates: {}}\n", "anchors are not allowed" },
		{ "pool: *a\n", "aliases are not allowed" },
		{ "pool: !!map {templates: {}}\n", "tags are not allowed" },
		{ "pool: {templates: {}}\n---\npool: {templates: {}}\n", "only one document" },
		{ "pool:\n", "expected a mapping, got null (write {} for an empty mapping)" },
		{ "- pool\n", "the top level must be a mapping" },
		{ "pool: {templates: {default: {size: [1]}}}\n", "expected a scalar" },
		{ "pool: {templates: {default: {size: 1}\n", "h.yaml:2:1:" },
		{ "pool: \"\xff\"\n", "h.yaml:1:8:" },
		{ "host_paths: {read: [/srv/../etc]}\n", "host_paths.read: '/srv/../etc' is not an absolute" },
		{ "host_paths: {read: [srv]}\n", "is not an absolute" },
		{ "host_paths: {read: [/]}\n", "other than /" },
		{ "host_paths: {read: [/srv/]}\n", "is not an absolute" },
		{ "host_paths: {read: [/srv//x]}\n", "is not an absolute" },
		{ "host_paths: {read: [/srv/./x]}\n", "is not an absolute" },
		{ "host_paths: {read: [\"/srv/a{tenant}\"]}\n", "is not an absolute" },
		{ "host_paths: {read: [/a, /a]}\n", "listed twice" },
		{ "host_paths: {read: /srv}\n", "host_paths.read: expected a list" },
		{ "host_paths: {raed: [/srv]}\n", "unknown key 'raed' in host_paths" },
		{ "secrets: {env_allow: [A-B]}\n", "not an environment variable name" },
		{ "secrets: {env_allow: [1A]}\n", "not an environment variable name" },
		{ "secrets: {allow: [A]}\n", "unknown key 'allow' in secrets" },
		{ "quotas: {per_tenant: {memory: 10M}}\n", "quotas.per_tenant.memory: '10M'" },
		{ "quotas: {per_tenant: {vcpus: 0}}\n", "1..1000000" },
		{ "quotas: {per_tenant: {disks: 1}}\n", "unknown key 'disks'" },
		{ "quotas: {tenants: {../x: {vcpus: 1}}}\n", "not a tenant ID" },
		{ "quotas: {tenant: {}}\n", "unknown key 'tenant' in quotas" },
		{ "audit: {max_size: 1K}\n", "not a size in 64K..1P" },
		{ "audit: {max_size: lots}\n", "not a size in 64K..1P" },
		{ "audit: {session_max: 4K}\n", "not a size in 64K..1P" },
		{ "audit: {keep: -1}\n", "not a count of segments" },
		{ "audit: {keep: 010}\n", "not a count of segments" },
		{ "audit: {keep: 2000000}\n", "not a count of segments" },
		{ "audit: {max_sizes: 1M}\n", "unknown key 'max_sizes' in audit" },
		{ "audit: 64M\n", "audit" },
		{ "templates: {publishers: [operator]}\n", "'operator' is not a tenant ID" },
		{ "templates: {publishers: [_]}\n", "'_' is not a tenant ID" },
		{ "templates: {publishers: [../x]}\n", "not a tenant ID" },
		{ "templates: {publishers: acme}\n", "expected a list of tenant IDs" },
		{ "templates: {publishers: [[a]]}\n", "expected a scalar" },
		{ "templates: {publisher: [a]}\n", "unknown key 'publisher'" },
		{ "serve: {tls: {cert: /c.pem}}\n", "expected both cert and key" },
		{ "serve: {tls: {key: /k.pem}}\n", "expected both cert and key" },
		{ "serve: {tls: {cert: c.pem, key: /k.pem}}\n", "expected an absolute path" },
		{ "serve: {policy: agents.yaml}\n", "expected an absolute path" },
		{ "serve: {tls: {cert: /c.pem, key: /k.pem, ca: /ca.pem}}\n", "unknown key 'ca'" },
		{ "serve: {tls: /c.pem}\n", "serve.tls" },
		{ "oci: {policies: {web: web.yaml}}\n", "expected an absolute path" },
		{ "oci: {policies: {../x: /p.yaml}}\n", "not a policy name" },
		{ "oci: {policies: {a: /a.yaml}, default_policy: b}\n", "'b' is not one of oci.policies" },
		{ "oci: {default_policy: /etc/sbx/p.yaml}\n", "not a policy name" },
		{ "oci: {policy: /p.yaml}\n", "unknown key 'policy' in oci" },
		{ "oci: {policies: [/p.yaml]}\n", "oci.policies" },
		{ "oci: {templates: {py: /srv/rootfs}}\n", "not a template name" },
		{ "oci: {templates: {py: python@@1}}\n", "not a template name" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[800];
		int rc = parse(bad[i].txt, &hc, &e);
		snprintf(what, sizeof what, "refused with 3 and '%s' (got '%s')", bad[i].msg, e.msg);
		ok(rc < 0 && e.code == SBX_EXIT_INVALID && strstr(e.msg, bad[i].msg) && hc.npool == 0 &&
			   hc.paths.nread == 0 && hc.paths.nenv == 0 && hc.quotas.ntenants == 0 &&
			   hc.quotas.per_tenant.memory_mib == 0,
		   what);
	}
	ok(parse("oci:\n  default_policy: batch\n  policies:\n    batch: /etc/sbx/batch.yaml\n    web: "
		 "/etc/sbx/web.yaml\n",
		 &hc, &e) == 0 &&
		   hc.oci.npolicies == 2 && !strcmp(hc.oci.default_policy, "batch") &&
		   !strcmp(sbx_hostconf_oci_policy(&hc, "web"), "/etc/sbx/web.yaml") &&
		   !sbx_hostconf_oci_policy(&hc, "x"),
	   "oci: named policies and the default (named before it is defined)");
	ok(parse("oci: {templates: {py: python, base: default@1a2b}}\n", &hc, &e) == 0 &&
		   !strcmp(sbx_hostconf_oci_template(&hc, "base"), "default@1a2b") &&
		   !sbx_hostconf_oci_template(&hc, "python"),
	   "oci.templates: names to templates, a version pinned or not");
	ok(parse("oci: {policies: {a: /a.yaml}, default_policy: b}\n", &hc, &e) < 0 && hc.oci.npolicies == 0,
	   "a bad oci section grants no policy");
	char big[4096] = "pool:\n  templates:\n";
	for (int i = 0; i < 17; i++)
		snprintf(big + strlen(big), sizeof big - strlen(big), "    t%d: {size: 1}\n", i);
	ok(parse(big, &hc, &e) < 0 && strstr(e.msg, "more than 16 templates"), "at most 16 templates");
	printf("1..%d\n", n);
	return failed != 0;
}
