/* Unit tests for the policy loader (TAP): units, ranges, every class of
 * hostile input, the shipped policies. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "policy.h"
#include "util.h"

#include "tap.h"

static struct sbx_policy pol;
static struct sbx_err err;

static int parse(const char *yaml)
{
	memset(&err, 0, sizeof err);
	sbx_policy_defaults(&pol);
	return sbx_policy_parse("p.yaml", (const uint8_t *)yaml, strlen(yaml), &pol, &err);
}

/* yaml must be refused with exit code 3 and a message containing want. */
static void bad(const char *yaml, const char *want, const char *what)
{
	int r = parse(yaml);
	int good = r < 0 && err.code == SBX_EXIT_INVALID && strstr(err.msg, want);
	ok(good, what);
	if (!good)
		printf("#   got %d (%d) '%s'\n#   want '%s'\n", r, err.code, err.msg, want);
}

static void good(const char *yaml, const char *what)
{
	int r = parse(yaml);
	ok(r == 0, what);
	if (r)
		printf("#   %s\n", err.msg);
}

static uint64_t size_of(const char *s)
{
	uint64_t v = 0;
	return sbx_parse_size(s, &v) < 0 ? UINT64_MAX : v;
}

static uint64_t dur_of(const char *s)
{
	uint64_t v = 0;
	return sbx_parse_duration_ms(s, &v) < 0 ? UINT64_MAX : v;
}

static void test_units(void)
{
	ok(size_of("0") == 0 && size_of("512") == 512 && size_of("512B") == 512, "plain bytes");
	ok(size_of("512K") == 512 << 10 && size_of("512k") == 512 << 10 && size_of("512KiB") == 512 << 10 &&
		   size_of("512KB") == 512 << 10 && size_of("512Ki") == 512 << 10,
	   "K in every spelling is 1024");
	ok(size_of("256M") == 256ull << 20 && size_of("2G") == 2ull << 30 && size_of("2GB") == 2ull << 30 &&
		   size_of("1T") == 1ull << 40 && size_of("1TiB") == 1ull << 40,
	   "M, G, T are binary, GB too");
	static const char *const badsizes[] = { "",     "K",   "-1",    "+1", "1.5G", "1 G", "1GiBB", "1Gb",
						"0x10", "010", "1_000", "1P", "1iB",  " 1",  "1G ",   "1e3" };
	int all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(badsizes); i++) {
		uint64_t v;
		if (sbx_parse_size(badsizes[i], &v) == 0 || errno != EINVAL) {
			printf("#   size '%s' accepted\n", badsizes[i]);
			all = 0;
		}
	}
	ok(all, "malformed sizes refused with EINVAL");
	uint64_t v;
	ok(sbx_parse_size("99999999999999999999G", &v) < 0 && errno == ERANGE, "99999999999999999999G overflows");
	ok(sbx_parse_size("16777216T", &v) < 0 && errno == ERANGE, "2^64 bytes overflows");
	ok(size_of("16777215T") == 16777215ull << 40, "just under 2^64 is fine");
	ok(sbx_parse_size("18446744073709551616", &v) < 0 && errno == ERANGE, "2^64 plain overflows");
	ok(size_of("18446744073709551615") == UINT64_MAX, "2^64-1 plain parses");

	ok(dur_of("90s") == 90000 && dur_of("5m") == 300000 && dur_of("1h") == 3600000 && dur_of("500ms") == 500 &&
		   dur_of("2d") == 172800000,
	   "duration units");
	ok(dur_of("10") == 10000 && dur_of("0") == 0, "a bare number is seconds");
	static const char *const baddurs[] = { "",   "s",  "1.5h", "1h30m", "5M",  "-1",   "1 s",
					       "1S", "1w", "01s",  "ms",    "1.5", "1.5s", ".5s" };
	all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(baddurs); i++)
		if (sbx_parse_duration_ms(baddurs[i], &v) == 0) {
			printf("#   duration '%s' accepted\n", baddurs[i]);
			all = 0;
		}
	ok(all, "malformed durations refused");
	ok(sbx_parse_duration_ms("18446744073709552s", &v) < 0 && errno == ERANGE, "seconds overflowing ms refused");
	ok(sbx_parse_duration_ms("213503982334601d", &v) < 0 && errno == ERANGE, "days overflowing ms refused");
}

static void test_defaults(void)
{
	sbx_policy_defaults(&pol);
	ok(pol.resources.vcpus == 1 && pol.resources.memory == 256ull << 20 && pol.resources.disk == 1ull << 30,
	   "default vcpus, memory, disk");
	ok(sbx_policy_cpu_limit_milli(&pol) == 1000 && pol.resources.pids_per_exec == 256 &&
		   pol.resources.pids_per_session == 1024,
	   "default cpu_limit follows vcpus; pids");
	ok(pol.resources.exec_timeout_default_ms == 600000 && pol.resources.exec_timeout_max_ms == 3600000 &&
		   pol.resources.ttl_ms == 3600000 && pol.resources.output_cap == 64ull << 20 &&
		   !pol.resources.require_kvm && pol.resources.exec_memory == 0,
	   "default timeouts, ttl, output cap");
	ok(pol.resources.output_session_cap == 1ull << 30, "default output_session_cap 1G");
	ok(pol.resources.disk_bps == 64ull << 20 && pol.resources.disk_iops == 2000,
	   "default disk throttle 64M/s, 2000 requests/s");
	ok(pol.network.egress == SBX_EGRESS_NONE && pol.network.nallow == 0 && pol.network.dns &&
		   pol.network.max_connections == 64 && pol.network.max_bytes == 1ull << 30,
	   "default network: none");
	ok(pol.packages.mode == SBX_PKG_OFFLINE && pol.packages.nregistries == 0 &&
		   pol.packages.max_download == 512ull << 20 && !pol.packages.require_hashes,
	   "default packages: offline");
	ok(pol.files.writable.n == 2 && !strcmp(pol.files.writable.path[0], "/workspace") &&
		   !strcmp(pol.files.exportable.path[1], "/tmp") && pol.files.max_transfer == 256ull << 20 &&
		   pol.files.max_session_transfer == 1ull << 30 && pol.nsecrets == 0,
	   "default files, no secrets");
	good("", "an empty file is the defaults");
	good("# only a comment\n", "a comment-only file is the defaults");
	good("---\n", "a bare document marker is the defaults");
	good("resources: {}\nnetwork: {}\npackages: {}\nfiles: {}\nsecrets: []\n", "empty sections");
	ok(pol.resources.vcpus == 1 && pol.files.writable.n == 2, "and keep the defaults");
	good("resources: {vcpus: 4}\n", "vcpus alone");
	ok(sbx_policy_cpu_limit_milli(&pol) == 4000, "cpu_limit follows vcpus when not given");
}

static void test_values(void)
{
	good("resources:\n  vcpus: 64\n  memory: 64G\n  disk: 1T\n  cpu_limit: 0.05\n  exec_memory: 1M\n"
	     "  ttl: 30d\n  output_cap: 0\n  require_kvm: true\n",
	     "range maxima and minima");
	ok(pol.resources.vcpus == 64 && pol.resources.memory == 64ull << 30 && pol.resources.disk == 1ull << 40 &&
		   pol.resources.cpu_limit_milli == 50 && pol.resources.exec_memory == 1 << 20 &&
		   pol.resources.ttl_ms == 30ull * 86400000 && pol.resources.output_cap == 0 &&
		   pol.resources.require_kvm,
	   "stored as given");
	good("resources: {memory: \"512MiB\", ttl: '0'}\n", "quoted scalars are taken by their text");
	ok(pol.resources.memory == 512ull << 20 && pol.resources.ttl_ms == 0, "ttl 0 is none");
	bad("resources:\n  vcpus: 65\n", "p.yaml:2:10: resources.vcpus: '65' is out of range (1..64)", "vcpus 65");
	bad("resources:\n  vcpus: 0\n", "out of range", "vcpus 0");
	bad("resources: {memory: 32M}\n", "1:21: resources.memory: '32M' is out of range (64M..64G)", "memory 32M");
	bad("resources: {memory: 100000K}\n", "not a whole number of MiB", "memory not whole MiB");
	bad("resources: {memory: 99999999999999999999G}\n", "is too large", "memory overflow");
	bad("resources: {disk: 2T}\n", "out of range (16M..1T)", "disk 2T");
	bad("resources: {cpu_limit: 0.04}\n", "out of range (0.05..64.00)", "cpu_limit 0.04");
	bad("resources: {cpu_limit: 0.0005}\n", "at most 3 decimals", "cpu_limit too precise");
	bad("resources: {cpu_limit: 1.}\n", "not a number of CPUs", "cpu_limit 1.");
	bad("resources: {exec_memory: 1K}\n", "or 0)", "exec_memory below 1M");
	bad("resources: {ttl: 31d}\n", "'31d' is out of range (1ms..30d, or 0)", "ttl 31d");
	bad("resources: {output_cap: 17G}\n", "out of range", "output_cap 17G");
	good("resources: {output_session_cap: 0}\n", "output_session_cap 0: keep no output");
	ok(pol.resources.output_session_cap == 0, "... stored");
	bad("resources: {output_session_cap: 2T}\n", "out of range", "output_session_cap 2T");
	good("resources: {disk_bps: 100M, disk_iops: 500}\n", "disk_bps 100M, disk_iops 500");
	ok(pol.resources.disk_bps == 100ull << 20 && pol.resources.disk_iops == 500, "... stored");
	good("resources: {disk_bps: 0, disk_iops: 0}\n", "disk throttle 0: none");
	ok(pol.resources.disk_bps == 0 && pol.resources.disk_iops == 0, "... stored");
	bad("resources: {disk_bps: 512K}\n", "'512K' is out of range (1M..64G, or 0)", "disk_bps below 1M");
	bad("resources: {disk_bps: -1}\n", "is not a size", "disk_bps negative");
	bad("resources: {disk_bps: 20000000000000000000}\n", "is too large", "disk_bps overflowing");
	bad("resources: {disk_iops: 9}\n", "out of range (10..1000000, or 0)", "disk_iops below 10");
	good("network: {rate: 10M}\n", "network.rate 10M");
	ok(pol.network.rate == 10ull << 20, "... stored");
	good("network: {rate: 0}\n", "network.rate 0: none");
	ok(pol.network.rate == 0, "... stored");
	bad("network: {rate: 32K}\n", "out of range (64K..4G, or 0)", "network.rate below 64K");
	bad("resources: {pids: {per_exec: 0}}\n", "out of range", "pids 0");
	bad("resources: {pids: {per_exec: 1048577, per_session: 1048577}}\n", "out of range", "pids too many");
	bad("network: {max_connections: -1}\n", "not a whole number", "negative number");
	bad("network: {max_connections: 0x10}\n", "not a whole number", "hex number");
	bad("network: {max_connections: 1_000}\n", "not a whole number", "underscored number");
	bad("network: {max_connections: 1.0}\n", "not a whole number", "a real where an integer goes");

	static const char *const bools[] = { "yes", "no", "on", "off", "True", "FALSE", "y", "1", "0" };
	int all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(bools); i++) {
		char y[64];
		snprintf(y, sizeof y, "resources: {require_kvm: %s}\n", bools[i]);
		if (parse(y) == 0 || !strstr(err.msg, "is not a boolean (true or false)")) {
			printf("#   '%s': %s\n", bools[i], err.msg);
			all = 0;
		}
	}
	ok(all, "YAML 1.1 booleans and friends are refused");
	good("resources: {require_kvm: false}\nnetwork: {dns: false}\n", "true/false");
	ok(!pol.resources.require_kvm && !pol.network.dns, "false is false");

	/* Related limits: one left out is lowered to fit, never raised. */
	good("resources: {exec_timeout: {max: 5m}}\n", "only max: the default is lowered to it");
	ok(pol.resources.exec_timeout_default_ms == 300000 && pol.resources.exec_timeout_max_ms == 300000, "to 5m");
	good("resources: {exec_timeout: {default: 2h, max: 0}}\n", "max 0 is no maximum");
	good("resources: {exec_timeout: {default: 0, max: 0}}\n", "no timeout at all");
	bad("resources: {exec_timeout: {default: 2h}}\n", "1:27: resources.exec_timeout: default is longer than max",
	    "default over the default max");
	bad("resources: {exec_timeout: {default: 0, max: 1h}}\n", "default is longer than max",
	    "default none, max set");
	bad("resources: {exec_timeout: {default: 2h, max: 1h}}\n", "default is longer than max",
	    "both given, conflict");
	good("resources: {pids: {per_session: 100}}\n", "per_session alone lowers per_exec");
	ok(pol.resources.pids_per_exec == 100, "to 100");
	bad("resources: {pids: {per_exec: 2000}}\n", "per_exec is larger than per_session",
	    "per_exec over per_session");
	good("files: {max_session_transfer: 10M}\n", "session transfer alone lowers max_transfer");
	ok(pol.files.max_transfer == 10 << 20, "to 10M");
	bad("files: {max_transfer: 2G}\n", "max_transfer is larger than max_session_transfer", "transfer conflict");
}

static void test_network(void)
{
	good("network:\n  egress: allowlist\n  allow:\n    - {domain: PyPI.org, ports: [443]}\n"
	     "    - {domain: \"*.example.com\"}\n    - {cidr: 203.0.113.0/24, ports: [80]}\n"
	     "    - {cidr: \"2001:db8::/32\", ports: [443, 8443]}\n    - {cidr: 198.51.100.7}\n",
	     "an allowlist");
	struct sbx_policy_rule *r = pol.network.allow;
	ok(pol.network.nallow == 5 && !strcmp(r[0].domain, "pypi.org") && r[0].nports == 1 && r[0].ports[0] == 443,
	   "domain lowercased, ports");
	ok(!strcmp(r[1].domain, "*.example.com") && r[1].nports == 2 && r[1].ports[0] == 80 && r[1].ports[1] == 443,
	   "wildcard, default ports 80 and 443");
	ok(!r[2].domain[0] && r[2].prefix == 24 && r[2].addr[0] == 203 && r[3].prefix == 32 && r[3].nports == 2,
	   "IPv4 and IPv6 blocks");
	ok(r[4].prefix == 32, "a bare address is a /32");
	bad("network: {egress: allowlist}\n", "1:10: network.egress is allowlist but network.allow is empty",
	    "allowlist without allow");
	bad("network: {egress: allowlist, allow: []}\n", "allow is empty", "allowlist with an empty allow");
	bad("network:\n  allow: [{domain: pypi.org}]\n",
	    "2:3: network.allow is set but network.egress is not allowlist", "allow with egress none");
	bad("network: {egress: everything}\n", "'everything' is not one of: none, allowlist", "unknown egress");

	static const struct {
		const char *d, *want;
	} doms[] = {
		{ "-a.com", "starts or ends with '-'" },
		{ "a-.com", "starts or ends with '-'" },
		{ "a..com", "empty" },
		{ "a.com.", "empty" },
		{ "com", "at least two labels" },
		{ "*.com", "at least two labels" },
		{ "a.*.com", "only letters" },
		{ "a_b.com", "only letters" },
		{ "1.2.3.4", "numeric label" },
		{ "xn--bcher-kva.example", NULL },
		{ "caf\xc3\xa9.com", "only letters" },
		{ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", "longer than 63" },
	};
	int all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(doms); i++) {
		char y[512];
		snprintf(y, sizeof y, "network: {egress: allowlist, allow: [{domain: \"%s\"}]}\n", doms[i].d);
		int rc = parse(y);
		if (doms[i].want ? rc == 0 || !strstr(err.msg, doms[i].want) : rc != 0) {
			printf("#   %s: %d %s\n", doms[i].d, rc, err.msg);
			all = 0;
		}
	}
	ok(all, "domain syntax");
	char y[1024], label[64];
	memset(label, 'a', 63);
	label[63] = 0;
	snprintf(y, sizeof y, "network: {egress: allowlist, allow: [{domain: %s.%s.%s.%s.com}]}\n", label, label, label,
		 label);
	bad(y, "longer than 253", "a 257-character domain");
	static const struct {
		const char *c, *want;
	} cidrs[] = {
		{ "10.0.0.1/8", "bits set after the prefix" }, { "10.0.0.0/33", "bad prefix length" },
		{ "10.0.0.0/08", "bad prefix length" },        { "10.0.0.0/", "bad prefix length" },
		{ "10.0.0/8", "not an IPv4 or IPv6" },         { "010.0.0.0/8", "not an IPv4 or IPv6" },
		{ "fe80::1%eth0", "not an IPv4 or IPv6" },     { "::ffff:10.0.0.1", "IPv4-mapped" },
		{ "2001:db8::/129", "bad prefix length" },     { "0.0.0.0/0", NULL },
	};
	all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(cidrs); i++) {
		snprintf(y, sizeof y, "network: {egress: allowlist, allow: [{cidr: \"%s\"}]}\n", cidrs[i].c);
		int rc = parse(y);
		if (cidrs[i].want ? rc == 0 || !strstr(err.msg, cidrs[i].want) : rc != 0) {
			printf("#   %s: %d %s\n", cidrs[i].c, rc, err.msg);
			all = 0;
		}
	}
	ok(all, "CIDR syntax");
	bad("network: {egress: allowlist, allow: [{domain: a.com, cidr: 10.0.0.0/8}]}\n",
	    "needs exactly one of domain and cidr", "domain and cidr");
	bad("network: {egress: allowlist, allow: [{ports: [443]}]}\n", "needs exactly one of domain and cidr",
	    "neither domain nor cidr");
	bad("network: {egress: allowlist, allow: [{domain: a.com, ports: [0]}]}\n", "not a port (1..65535)", "port 0");
	bad("network: {egress: allowlist, allow: [{domain: a.com, ports: [65536]}]}\n", "not a port", "port 65536");
	bad("network: {egress: allowlist, allow: [{domain: a.com, ports: [443, 443]}]}\n", "listed twice",
	    "duplicate port");
	bad("network: {egress: allowlist, allow: [{domain: a.com, ports: []}]}\n", "empty", "empty port list");
	bad("network: {egress: allowlist, allow: [{domain: a.com, ports: 443}]}\n", "expected a list, got a scalar",
	    "ports not a list");
	bad("network: {egress: allowlist, allow: [pypi.org]}\n", "network.allow[0]: expected a mapping, got a scalar",
	    "allow items are mappings");
	/* SBX_POLICY_ALLOW_MAX + 1 rules */
	static char big[64 * 1024];
	size_t o = (size_t)snprintf(big, sizeof big, "network:\n  egress: allowlist\n  allow:\n");
	for (int i = 0; i <= SBX_POLICY_ALLOW_MAX; i++)
		o += (size_t)snprintf(big + o, sizeof big - o, "    - {domain: h%d.example.com}\n", i);
	bad(big, "more than 128 entries", "too many rules");
}

static void test_packages_files_secrets(void)
{
	good("packages:\n  mode: allowlist\n  registries:\n    - {type: pypi, url: \"https://pypi.org/simple\"}\n"
	     "    - {type: npm, url: \"http://[2001:db8::1]:8080/npm/\"}\n    - {type: npm, url: "
	     "\"http://10.1.2.3:4873\"}\n",
	     "registries");
	ok(pol.packages.nregistries == 3 && pol.packages.registries[1].type == SBX_REG_NPM &&
		   !strcmp(pol.packages.registries[0].url, "https://pypi.org/simple"),
	   "registries stored");
	bad("packages: {mode: allowlist}\n", "packages.mode is allowlist but packages.registries is empty",
	    "allowlist without registries");
	bad("packages: {registries: [{type: pypi, url: \"https://pypi.org/simple\"}]}\n",
	    "packages.registries is set but packages.mode is not allowlist", "registries while offline");
	static const struct {
		const char *u, *want;
	} urls[] = {
		{ "ftp://pypi.org/", "not an http:// or https://" },
		{ "HTTPS://pypi.org/", "not an http:// or https://" },
		{ "https://user:pw@pypi.org/", "user info" },
		{ "https://pypi.org/simple?x=1", "not allowed" },
		{ "https://pypi.org/simple#f", "not allowed" },
		{ "https://pypi.org:0/", "bad port" },
		{ "https://pypi.org:99999/", "bad port" },
		{ "https://pypi.org:/", "bad port" },
		{ "https:///simple", "bad host" },
		{ "https://pypi/simple", "two labels" },
		{ "https://999.1.1.1/", "bad IPv4" },
		{ "https://[zz::1]/", "bad IPv6" },
		{ "https://pypi.org/a%zz", "%-escape" },
		{ "https://pypi.org/a b", "not allowed" },
		{ "https://pypi.org/a%20b", NULL },
	};
	int all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(urls); i++) {
		char y[512];
		snprintf(y, sizeof y, "packages: {mode: allowlist, registries: [{type: pypi, url: \"%s\"}]}\n",
			 urls[i].u);
		int rc = parse(y);
		if (urls[i].want ? rc == 0 || !strstr(err.msg, urls[i].want) : rc != 0) {
			printf("#   %s: %d %s\n", urls[i].u, rc, err.msg);
			all = 0;
		}
	}
	ok(all, "registry URL syntax");
	bad("packages: {mode: allowlist, registries: [{type: cargo, url: \"https://crates.io\"}]}\n",
	    "'cargo' is not one of: pypi, npm", "unknown registry type");
	bad("packages: {mode: allowlist, registries: [{type: pypi}]}\n", "needs both type and url",
	    "registry without url");

	good("files: {writable: [], exportable: [/, /workspace/out]}\n", "empty writable, root exportable");
	ok(pol.files.writable.n == 0 && pol.files.exportable.n == 2 && !strcmp(pol.files.exportable.path[0], "/"),
	   "paths stored");
	static const char *const paths[] = { "workspace", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/..", "" };
	int allp = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(paths); i++) {
		char y[128];
		snprintf(y, sizeof y, "files: {writable: [\"%s\"]}\n", paths[i]);
		if (parse(y) == 0) {
			printf("#   path '%s' accepted\n", paths[i]);
			allp = 0;
		}
	}
	ok(allp, "unnormalized paths refused");
	bad("files: {writable: [/a, /a]}\n", "listed twice", "duplicate path");
	char y[4096];
	size_t o = (size_t)snprintf(y, sizeof y, "files: {writable: [");
	for (int i = 0; i <= SBX_POLICY_PATHS_MAX; i++)
		o += (size_t)snprintf(y + o, sizeof y - o, "/p%d, ", i);
	snprintf(y + o, sizeof y - o, "/last]}\n");
	bad(y, "more than 32 entries", "33 paths");

	good("secrets:\n  - {name: API_TOKEN, from_env: HOST_VAR}\n  - {name: _K2, from_file: /etc/sbx/k}\n",
	     "secrets");
	ok(pol.nsecrets == 2 && !strcmp(pol.secrets[0].from_env, "HOST_VAR") && !pol.secrets[0].from_file[0] &&
		   !strcmp(pol.secrets[1].from_file, "/etc/sbx/k"),
	   "secrets stored");
	bad("secrets:\n  - {name: api, from_env: X}\n", "2:12: secrets[0].name: 'api' is not a secret name",
	    "lowercase secret name");
	bad("secrets: [{name: 9A, from_env: X}]\n", "not a secret name", "secret name starting with a digit");
	bad("secrets: [{name: A, from_env: X, from_file: /x}]\n", "exactly one of from_env and from_file",
	    "both sources");
	bad("secrets: [{name: A}]\n", "exactly one of from_env and from_file", "no source");
	bad("secrets: [{from_env: X}]\n", "needs a name", "no name");
	bad("secrets: [{name: A, from_file: rel/path}]\n", "not an absolute path", "relative from_file");
	bad("secrets: [{name: A, from_env: \"X-Y\"}]\n", "not an environment variable name", "bad from_env");
	bad("secrets:\n  - {name: A, from_env: X}\n  - {name: A, from_env: Y}\n",
	    "3:5: secrets[1]: secret A is defined twice", "duplicate secret");
}

static double since(struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void test_hostile(void)
{
	bad("resources:\n  cpuz: 1\n",
	    "p.yaml:2:3: unknown key 'cpuz' in resources (expected one of: vcpus, memory, disk, cpu_limit, pids, "
	    "exec_memory, exec_timeout, ttl, output_cap, output_session_cap, require_kvm, disk_bps, disk_iops)",
	    "unknown key, with file:line:col and the expected keys");
	bad("resourcez: {}\n", "p.yaml:1:1: unknown key 'resourcez' at the top level (expected one of: resources,",
	    "unknown top-level key");
	bad("resources:\n  vcpus: 1\n  vcpus: 2\n", "p.yaml:3:3: duplicate key 'vcpus' in resources", "duplicate key");
	bad("resources: {}\nresources: {}\n", "p.yaml:2:1: duplicate key 'resources'", "duplicate section");
	bad("resources: &r {vcpus: 1}\n", "p.yaml:1:12: anchors are not allowed (&r)", "anchor on a mapping");
	bad("resources: {vcpus: &v 1}\n", "anchors are not allowed", "anchor on a scalar");
	bad("files: {writable: &w [/a]}\n", "anchors are not allowed", "anchor on a list");
	bad("resources: {vcpus: *v}\n", "p.yaml:1:20: aliases are not allowed", "alias");
	bad("resources: !!map {vcpus: 1}\n", "p.yaml:1:12: tags are not allowed", "tag on a mapping");
	bad("resources: {vcpus: !!int 1}\n", "tags are not allowed", "tag on a scalar");
	bad("resources: {vcpus: ! 1}\n", "tags are not allowed", "non-specific tag");
	bad("files: {writable: !!seq [/a]}\n", "tags are not allowed", "tag on a list");
	bad("%YAML 1.1\n---\nresources: {}\n", "p.yaml:1:1: directives are not allowed", "%YAML directive");
	bad("%TAG !e! tag:example.com,2000:\n---\nresources: {}\n", "directives are not allowed", "%TAG directive");
	bad("resources: {}\n---\nnetwork: {}\n", "p.yaml:2:1: only one YAML document is allowed", "two documents");
	bad("resources: {}\n...\n---\n", "only one YAML document", "a second empty document");
	bad("resources: [1]\n", "p.yaml:1:12: resources: expected a mapping, got a list", "list for a mapping");
	bad("resources: 1\n", "expected a mapping, got a scalar", "scalar for a mapping");
	bad("resources:\n", "expected a mapping, got null (write {} for an empty mapping)", "null for a mapping");
	bad("files: {writable: }\n", "expected a list, got null (write [] for an empty list)", "null for a list");
	bad("resources: {vcpus: }\n", "resources.vcpus: expected a scalar value, got null", "null for a scalar");
	bad("resources: {vcpus: ~}\n", "got null", "~ for a scalar");
	bad("resources: {vcpus: {a: 1}}\n", "expected a scalar value, got a mapping", "mapping for a scalar");
	bad("resources: {[a]: 1}\n", "keys must be scalars in resources", "complex key");
	bad("- resources\n", "p.yaml:1:1: a policy is a mapping", "a list at the top");
	bad("hello\n", "a policy is a mapping", "a scalar at the top");
	bad("resources: {vcpus: 1\n", "p.yaml:2:1: did not find expected ',' or '}'", "syntax error with a position");
	bad("resources:\n\tvcpus: 1\n", "p.yaml:2:1: found character that cannot start any token", "tab indentation");

	/* bytes */
	static const uint8_t nul[] = "resources:\n  vcpus: 1\0\n";
	memset(&err, 0, sizeof err);
	ok(sbx_policy_parse("p.yaml", nul, sizeof nul - 1, &pol, &err) < 0 && strstr(err.msg, "p.yaml:2:11: NUL byte"),
	   "NUL byte, with its position");
	bad("resources:\n  vcpus: \xff\n", "p.yaml:2:10: invalid UTF-8", "invalid UTF-8");
	bad("resources: {vcpus: \xc0\xb1}\n", "invalid UTF-8", "overlong UTF-8");
	bad("resources: {vcpus: \xed\xa0\x80}\n", "invalid UTF-8", "UTF-16 surrogate in UTF-8");
	bad("resources: {vcpus: \xf4\x90\x80\x80}\n", "invalid UTF-8", "beyond U+10FFFF");
	bad("resources: {vcpus: 1}\n\x1b[2J", "p.yaml:2:1: character U+001B is not allowed", "escape character");
	bad("resources: {vcpus: 1}\xc2\x85\n", "U+0085 is not allowed", "NEL (a YAML 1.1 line break)");
	bad("resources: {vcpus: 1}\xe2\x80\xa8\n", "U+2028 is not allowed", "line separator");
	bad("resources: {vcpus: \"\\0\"}\n", "p.yaml:1:20: control or invalid character in a value", "escaped NUL");
	bad("resources: {vcpus: \"\\e[31m\"}\n", "control or invalid character", "escaped ESC");
	bad("resources: {vcpus: \"1\\n\"}\n", "control or invalid character", "escaped newline");
	static const uint8_t utf16[] = { 0xff, 0xfe, 'r', 0, 'e', 0, 's', 0, ':', 0, ' ', 0, '{', 0, '}', 0, '\n', 0 };
	memset(&err, 0, sizeof err);
	ok(sbx_policy_parse("p.yaml", utf16, sizeof utf16, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID,
	   "UTF-16 refused");
	good("\xef\xbb\xbfresources: {vcpus: 2}\n", "a UTF-8 byte order mark is fine");
	char y[4096];
	memset(y, 'a', 2000);
	memcpy(y, "files: {writable: [/", 20);
	strcpy(y + 2000, "]}\n");
	bad(y, "value longer than 1024 bytes", "a very long scalar");
	bad("resources: {vcpus: \"\\e[2J\\e[31mhi\"}\n", "control or invalid", "terminal escapes never reach messages");
	bad("resources: {\"cpu\\u00e9\": 1}\n", "unknown key 'cpu\xc3\xa9'", "non-ASCII key shown as UTF-8");

	/* size */
	static uint8_t buf[SBX_POLICY_FILE_MAX + 2];
	memset(buf, '#', sizeof buf);
	buf[SBX_POLICY_FILE_MAX - 1] = '\n';
	memset(&err, 0, sizeof err);
	sbx_policy_defaults(&pol);
	ok(sbx_policy_parse("p.yaml", buf, SBX_POLICY_FILE_MAX, &pol, &err) == 0, "exactly 1 MiB is fine");
	ok(sbx_policy_parse("p.yaml", buf, SBX_POLICY_FILE_MAX + 1, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID &&
		   strstr(err.msg, "larger than 1 MiB"),
	   "1 MiB + 1 refused");

	/* billion laughs, nesting, garbage: all quick */
	static char bl[8192];
	size_t o = (size_t)snprintf(bl, sizeof bl, "resources: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
	for (int i = 1; i < 10; i++) {
		o += (size_t)snprintf(bl + o, sizeof bl - o, "network: &b%d [", i);
		for (int j = 0; j < 9; j++)
			o += (size_t)snprintf(bl + o, sizeof bl - o, "%s*a", j ? ", " : "");
		o += (size_t)snprintf(bl + o, sizeof bl - o, "]\n");
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	bad(bl, "p.yaml:1:12: anchors are not allowed", "billion laughs: refused at the first anchor");
	bad("a: &a [lol, lol]\nb: &b [*a, *a]\n", "p.yaml:1:1: unknown key 'a'", "classic billion laughs");
	static uint8_t deep[200032];
	for (int shape = 0; shape < 3; shape++) {
		size_t k = 0;
		if (shape == 1)
			k = (size_t)snprintf((char *)deep, 32, "resources: ");
		if (shape == 2)
			k = (size_t)snprintf((char *)deep, 32, "resources: {pids: ");
		for (int i = 0; i < 100000; i++)
			deep[k++] = '[';
		for (int i = 0; i < 100000; i++)
			deep[k++] = ']';
		memset(&err, 0, sizeof err);
		ok(sbx_policy_parse("p.yaml", deep, k, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID,
		   shape == 0   ? "100,000 nested brackets"
		   : shape == 1 ? "nested brackets in a section"
				: "nested brackets two levels down");
	}
	memset(&err, 0, sizeof err);
	size_t k = 0;
	for (int i = 0; i < 50000; i++)
		memcpy(deep + k, "{a: ", 4), k += 4;
	ok(sbx_policy_parse("p.yaml", deep, k, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID,
	   "50,000 nested mappings");
	srand(42);
	int garbage_ok = 1;
	for (int i = 0; i < 200; i++) {
		for (size_t j = 0; j < 4096; j++)
			buf[j] = (uint8_t)rand();
		memset(&err, 0, sizeof err);
		if (sbx_policy_parse("p.yaml", buf, 4096, &pol, &err) == 0 || err.code != SBX_EXIT_INVALID)
			garbage_ok = 0;
	}
	ok(garbage_ok, "binary garbage refused");
	double secs = since(&t0);
	ok(secs < 2.0, "hostile inputs handled quickly");
	printf("# hostile inputs took %.3f s\n", secs);
}

static void test_set_and_json(void)
{
	sbx_policy_defaults(&pol);
	memset(&err, 0, sizeof err);
	ok(sbx_policy_set(&pol, "resources.disk", "2G", &err) == 0 && pol.resources.disk == 2ull << 30, "set disk");
	ok(sbx_policy_set(&pol, "resources.ttl", "90s", &err) == 0 && pol.resources.ttl_ms == 90000, "set ttl");
	ok(sbx_policy_set(&pol, "resources.disk", "1K", &err) < 0 && err.code == SBX_EXIT_USAGE &&
		   !strcmp(err.msg, "'1K' is out of range (16M..1T)"),
	   "set out of range is a usage error naming the value");
	ok(sbx_policy_set(&pol, "resources.ttl", "soon", &err) < 0 && err.code == SBX_EXIT_USAGE, "set bad duration");
	ok(sbx_policy_set(&pol, "resources.exec_timeout.max", "5m", &err) == 0 &&
		   pol.resources.exec_timeout_max_ms == 300000,
	   "set a nested key");
	ok(sbx_policy_set(&pol, "resources.pids", "5", &err) < 0 && err.code == SBX_EXIT_INTERNAL,
	   "no such scalar key");

	good("resources: {vcpus: 2, cpu_limit: 1.5, ttl: 2h}\nnetwork:\n  egress: allowlist\n"
	     "  allow: [{cidr: \"2001:db8::/32\"}, {domain: a.example}]\nsecrets: [{name: T, from_env: HT}]\n",
	     "a policy to format");
	json_t *j = sbx_policy_json(&pol);
	json_t *allow = json_object_get(json_object_get(j, "network"), "allow");
	ok(j && json_integer_value(json_object_get(j, "schema")) == 1 &&
		   !strcmp(json_string_value(json_object_get(j, "source")), "p.yaml"),
	   "json: schema and source");
	json_t *res = json_object_get(j, "resources");
	ok(json_integer_value(json_object_get(res, "ttl")) == 7200000 &&
		   json_integer_value(json_object_get(res, "memory")) == 256 << 20 &&
		   json_real_value(json_object_get(res, "cpu_limit")) == 1.5,
	   "json: durations in ms, sizes in bytes, cpu_limit in CPUs");
	ok(!strcmp(json_string_value(json_object_get(json_array_get(allow, 0), "cidr")), "2001:db8::/32") &&
		   json_array_size(json_object_get(json_array_get(allow, 1), "ports")) == 2,
	   "json: rules");
	ok(!strcmp(json_string_value(json_object_get(json_array_get(json_object_get(j, "secrets"), 0), "from_env")),
		   "HT"),
	   "json: secrets name their source");
	json_decref(j);
}

static void policy_dir(char *out, size_t outn)
{
	const char *env = getenv("SBX_POLICIES");
	char exe[PATH_MAX];
	ssize_t l;
	if (env) {
		snprintf(out, outn, "%s", env);
	} else if ((l = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
		exe[l] = 0;
		*strrchr(exe, '/') = 0; /* B/tests */
		snprintf(out, outn, "%s/../../policies", exe);
	} else {
		snprintf(out, outn, "policies");
	}
}

static void test_files(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	policy_dir(dir, sizeof dir);
	static const char *const shipped[] = { "default.yaml", "strict.yaml", "coding-agent.yaml" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(shipped); i++) {
		snprintf(path, sizeof path, "%s/%s", dir, shipped[i]);
		memset(&err, 0, sizeof err);
		int r = sbx_policy_load(path, &pol, &err);
		char what[64];
		snprintf(what, sizeof what, "policies/%s loads", shipped[i]);
		ok(r == 0, what);
		if (r)
			printf("#   %s\n", err.msg);
		if (!strcmp(shipped[i], "strict.yaml"))
			ok(pol.resources.vcpus == 1 && pol.network.egress == SBX_EGRESS_NONE &&
				   pol.packages.mode == SBX_PKG_OFFLINE && pol.resources.require_kvm,
			   "strict is offline and tight");
		if (!strcmp(shipped[i], "coding-agent.yaml"))
			ok(pol.resources.vcpus == 2 && pol.resources.memory == 1ull << 30 && pol.network.nallow == 3 &&
				   pol.packages.nregistries == 2,
			   "coding-agent allows its registries");
	}

	char tmp[] = "/tmp/test-policy.XXXXXX";
	ok(mkdtemp(tmp) != NULL, "temp dir");
	snprintf(path, sizeof path, "%s/big.yaml", tmp);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ok(fd >= 0 && ftruncate(fd, SBX_POLICY_FILE_MAX + 1) == 0, "a 1 MiB + 1 file");
	close(fd);
	memset(&err, 0, sizeof err);
	ok(sbx_policy_load(path, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID &&
		   strstr(err.msg, "larger than 1 MiB"),
	   "is refused");
	unlink(path);
	memset(&err, 0, sizeof err);
	ok(sbx_policy_load(tmp, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID &&
		   strstr(err.msg, "not a regular file"),
	   "a directory is refused");
	snprintf(path, sizeof path, "%s/fifo", tmp);
	ok(mkfifo(path, 0600) == 0, "a FIFO");
	memset(&err, 0, sizeof err);
	ok(sbx_policy_load(path, &pol, &err) < 0 && strstr(err.msg, "not a regular file"),
	   "is refused without blocking");
	unlink(path);
	memset(&err, 0, sizeof err);
	ok(sbx_policy_load("/dev/null", &pol, &err) < 0 && strstr(err.msg, "not a regular file"),
	   "a device is refused");
	snprintf(path, sizeof path, "%s/link.yaml", tmp);
	char target[PATH_MAX + 32];
	snprintf(target, sizeof target, "%s/strict.yaml", dir);
	if (target[0] != '/') {
		char cwd[PATH_MAX];
		if (getcwd(cwd, sizeof cwd))
			snprintf(target, sizeof target, "%s/%s/strict.yaml", cwd, dir);
	}
	ok(symlink(target, path) == 0, "a symlink to a policy");
	memset(&err, 0, sizeof err);
	ok(sbx_policy_load(path, &pol, &err) == 0 && pol.resources.require_kvm, "is followed");
	unlink(path);
	snprintf(path, sizeof path, "%s/missing.yaml", tmp);
	memset(&err, 0, sizeof err);
	ok(sbx_policy_load(path, &pol, &err) < 0 && err.code == SBX_EXIT_INVALID && err.errnum == ENOENT,
	   "a missing file is invalid input, with its errno");
	rmdir(tmp);
}

/* ports: (sbx-port): ports and ranges, strict; the operator's default is
 * any, a tenant's none; the JSON round trip is as strict. */
static void test_ports(void)
{
	good("", "no ports:");
	ok(!pol.ports.set && sbx_policy_port_allowed(&pol, 8080, NULL) && sbx_policy_port_allowed(&pol, 1, ""),
	   "without ports: the operator may forward any port");
	ok(!sbx_policy_port_allowed(&pol, 8080, "acme"), "and a tenant none");
	good("ports: [8080, \"3000-3999\", 22]\n", "ports and a range");
	ok(pol.ports.set && pol.ports.n == 3 && pol.ports.lo[1] == 3000 && pol.ports.hi[1] == 3999,
	   "compiled as ranges");
	ok(sbx_policy_port_allowed(&pol, 3000, "acme") && sbx_policy_port_allowed(&pol, 3999, "acme") &&
		   sbx_policy_port_allowed(&pol, 22, NULL) && !sbx_policy_port_allowed(&pol, 4000, NULL) &&
		   !sbx_policy_port_allowed(&pol, 2999, "acme"),
	   "a range's ends are in it, its neighbours out, for tenants and the operator alike");
	good("ports: []\n", "an empty list");
	ok(pol.ports.set && !sbx_policy_port_allowed(&pol, 8080, NULL), "forwards nothing, even for the operator");
	bad("ports: [0]\n", "p.yaml:1:9: ports[0]: '0' is not a port (1..65535) or a range", "port 0");
	bad("ports: [65536]\n", "is not a port", "port 65536");
	bad("ports: [\"9000-8000\"]\n", "is not a port", "a backwards range");
	bad("ports: [\"1-\"]\n", "is not a port", "a range without its end");
	bad("ports: [\"-5\"]\n", "is not a port", "a range without its start");
	bad("ports: [\"1-2-3\"]\n", "is not a port", "two dashes");
	bad("ports: [\"080\"]\n", "is not a port", "a leading zero");
	bad("ports: [\" 80\"]\n", "is not a port", "a blank");
	bad("ports: 8080\n", "ports", "not a list");
	bad("ports: [{from: 1}]\n", "ports[0]", "a mapping entry");
	bad("ports: [1]\nports: [2]\n", "duplicate key 'ports'", "ports twice");
	char big[1024] = "ports: [";
	for (int i = 0; i < SBX_POLICY_FWD_MAX + 1; i++)
		snprintf(big + strlen(big), sizeof big - strlen(big), "%d,", i + 1);
	strcat(big, "]\n");
	bad(big, "more than 64 entries", "65 entries");

	good("ports: [8080, \"3000-3999\"]\n", "for the JSON round trip");
	json_t *o = sbx_policy_json(&pol);
	struct sbx_policy back;
	sbx_policy_defaults(&back);
	ok(o && sbx_policy_ports_from_json(o, &back, &err) == 0 && back.ports.set && back.ports.n == 2 &&
		   back.ports.lo[1] == 3000 && back.ports.hi[1] == 3999,
	   "ports: survives policy.json");
	json_decref(o);
	good("", "no ports: for the JSON round trip");
	o = sbx_policy_json(&pol);
	ok(o && json_is_null(json_object_get(o, "ports")) && sbx_policy_ports_from_json(o, &back, &err) == 0 &&
		   !back.ports.set,
	   "no ports: is null in policy.json, and read back as not set");
	json_decref(o);
	const char *lies[] = { "{\"ports\": 5}",
			       "{\"ports\": [{\"from\": 0, \"to\": 1}]}",
			       "{\"ports\": [{\"from\": 2, \"to\": 1}]}",
			       "{\"ports\": [{\"from\": 1, \"to\": 70000}]}",
			       "{\"ports\": [{\"from\": 1, \"to\": 2, \"x\": 3}]}",
			       "{\"ports\": [1]}" };
	int refused = 0;
	for (size_t i = 0; i < sizeof lies / sizeof *lies; i++) {
		json_t *l = json_loads(lies[i], 0, NULL);
		refused += l && sbx_policy_ports_from_json(l, &back, &err) < 0 && err.code == SBX_EXIT_INTERNAL;
		json_decref(l);
	}
	ok(refused == (int)(sizeof lies / sizeof *lies),
	   "a malformed ports in policy.json is refused, never a wider grant");
}

/* lifecycle: (issue 15.4): durations with 0 for never, an enum, and a
 * pause that would come after the suspend refused. */
static void test_lifecycle(void)
{
	good("", "no lifecycle section");
	ok(pol.lifecycle.idle_pause_ms == 0 && pol.lifecycle.idle_suspend_ms == 0 &&
		   pol.lifecycle.ttl_counts == SBX_TTL_WALL,
	   "defaults: never idle-paused or suspended, the TTL on the wall clock");
	good("lifecycle: {idle_pause: 30s, idle_suspend: 5m, ttl_counts: running}\n", "a full lifecycle section");
	ok(pol.lifecycle.idle_pause_ms == 30000 && pol.lifecycle.idle_suspend_ms == 300000 &&
		   pol.lifecycle.ttl_counts == SBX_TTL_RUNNING,
	   "its values");
	good("lifecycle: {idle_suspend: 2s}\n", "idle_suspend alone");
	good("lifecycle: {idle_pause: 0, idle_suspend: 0, ttl_counts: wall}\n", "0 is never");
	bad("lifecycle: {idle_pause: 5m, idle_suspend: 30s}\n", "must be shorter than lifecycle.idle_suspend",
	    "a pause after the suspend is refused");
	bad("lifecycle: {idle_pause: 1m, idle_suspend: 1m}\n", "must be shorter", "so is one at the same moment");
	bad("lifecycle: {idle_suspend: 500ms}\n", "out of range", "less than a second is refused");
	bad("lifecycle: {idle_suspend: 31d}\n", "out of range", "more than 30 days is refused");
	bad("lifecycle: {idle_suspend: -1}\n", "is not a duration", "a negative duration is refused");
	bad("lifecycle: {ttl_counts: cpu}\n", "is not one of: wall, running", "an unknown ttl_counts is refused");
	bad("lifecycle: {idle_susp: 1m}\n", "unknown key 'idle_susp'", "a misspelled key is refused");
	bad("lifecycle: {idle_suspend: 1m, idle_suspend: 2m}\n", "duplicate key", "a duplicate key is refused");
	bad("lifecycle: [idle_suspend]\n", "lifecycle", "a list is refused");
	bad("lifecycle: {idle_suspend: {a: 1}}\n", "lifecycle.idle_suspend", "a mapping as a value is refused");
	good("lifecycle: {idle_suspend: 90s}\n", "for the JSON");
	json_t *j = sbx_policy_json(&pol);
	json_t *l = json_object_get(j, "lifecycle");
	ok(json_integer_value(json_object_get(l, "idle_suspend")) == 90000 &&
		   json_integer_value(json_object_get(l, "idle_pause")) == 0 &&
		   !strcmp(json_string_value(json_object_get(l, "ttl_counts")) ?: "", "wall"),
	   "the effective policy's JSON has the lifecycle section");
	json_decref(j);
	sbx_policy_defaults(&pol);
	memset(&err, 0, sizeof err);
	ok(sbx_policy_set(&pol, "lifecycle.idle_suspend", "10m", &err) == 0 && pol.lifecycle.idle_suspend_ms == 600000,
	   "lifecycle.idle_suspend can be set from the command line");
}

int main(void)
{
	test_ports();
	test_lifecycle();
	test_units();
	test_defaults();
	test_values();
	test_network();
	test_packages_files_secrets();
	test_hostile();
	test_set_and_json();
	test_files();
	printf("1..%d\n", n);
	return failed != 0;
}
