/* The policy loader.  It walks libyaml's event stream against a fixed
 * schema instead of building a document tree, so hostile input is refused
 * at the first event that does not fit: an alias never gets expanded, and
 * nesting deeper than the schema is a type error before libyaml has read
 * far.  Everything it does not understand is an error (sbx-policy(5)). */
#include "caller.h"
#include "policy.h"
#include "pkglock.h"
#include "policy_check.h"
#include "units.h"
#include "yamlstrict.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "util.h"

/* Longest scalar the schema can use (a URL); longer ones are refused
 * before any copying or quoting in messages. */
#define SCALAR_MAX 1024

/* ---- Numbers ---- */

/* ---- Schema ---- */

enum kind { K_U32, K_SIZE, K_DUR, K_BOOL, K_CPU, K_ENUM, K_STR, K_FN };
#define F_ZERO 1u /* 0 is allowed besides min..max ("none") */
#define F_MIB 2u  /* a whole number of MiB */

struct key {
	const char *name;
	enum kind kind;
	size_t off; /* into the object parse_map fills */
	uint64_t min, max;
	unsigned flags;
	const char *const *enums;
	/* K_STR: the string's checker, which writes what it keeps (the text,
	 * or its normal form) into out (size: the field's), or sets why. */
	int (*check)(const char *s, char *out, size_t size, char *why, size_t whyn);
	size_t size;
	int (*fn)(struct sbx_yaml *c, void *obj, const char *path);
};

int sbx_policy_whyf(char *why, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, n, fmt, ap);
	va_end(ap);
	return -1;
}

static void fmt_val(char *b, size_t n, enum kind k, uint64_t v)
{
	if (k == K_SIZE)
		sbx_fmt_size(b, n, v);
	else if (k == K_DUR)
		sbx_fmt_duration(b, n, v);
	else if (k == K_CPU)
		snprintf(b, n, "%llu.%02llu", (unsigned long long)(v / 1000), (unsigned long long)(v % 1000 / 10));
	else
		snprintf(b, n, "%llu", (unsigned long long)v);
}

/* A scalar key from text: shared by the file and by sbx_policy_set, so a
 * command-line override meets the same syntax and range. */
static int set_scalar(const struct key *k, void *obj, const char *s, char *why, size_t n)
{
	char *f = (char *)obj + k->off;
	uint64_t v = 0;
	int r = 0;
	switch (k->kind) {
	case K_BOOL:
		/* Only YAML 1.2's spelling: yes/no/on/off mean booleans to some
		 * readers and strings to others. */
		if (strcmp(s, "true") && strcmp(s, "false"))
			return sbx_policy_whyf(why, n, "'%s' is not a boolean (true or false)", SBX_YAML_SHOW(s));
		*(bool *)f = !strcmp(s, "true");
		return 0;
	case K_ENUM:
		for (int i = 0; k->enums[i]; i++)
			if (!strcmp(s, k->enums[i])) {
				memcpy(f, &i, sizeof i);
				return 0;
			}
		return sbx_policy_whyf(why, n, "'%s' is not one of: %s, %s", SBX_YAML_SHOW(s), k->enums[0],
				       k->enums[1]);
	case K_U32: r = sbx_parse_uint(s, &v); break;
	case K_SIZE: r = sbx_parse_size(s, &v); break;
	case K_DUR: r = sbx_parse_duration_ms(s, &v); break;
	case K_CPU: r = sbx_parse_milli(s, &v); break;
	case K_STR: return k->check(s, f, k->size, why, n);
	case K_FN: return sbx_policy_whyf(why, n, "not a scalar key");
	}
	if (r < 0 && errno == ERANGE)
		return sbx_policy_whyf(why, n, "'%s' is too large", SBX_YAML_SHOW(s));
	if (r < 0) {
		static const char *const what[] = {
			[K_U32] = "a whole number",
			[K_SIZE] = "a size (a number of bytes with an optional K, M, G or T suffix)",
			[K_DUR] = "a duration (a number with an optional ms, s, m, h or d suffix)",
			[K_CPU] = "a number of CPUs (at most 3 decimals)",
		};
		return sbx_policy_whyf(why, n, "'%s' is not %s", SBX_YAML_SHOW(s), what[k->kind]);
	}
	if (!(v == 0 && (k->flags & F_ZERO)) && (v < k->min || v > k->max)) {
		char lo[32], hi[32];
		fmt_val(lo, sizeof lo, k->kind, k->min);
		fmt_val(hi, sizeof hi, k->kind, k->max);
		return sbx_policy_whyf(why, n, "'%s' is out of range (%s..%s%s)", SBX_YAML_SHOW(s), lo, hi,
				       k->flags & F_ZERO ? ", or 0" : "");
	}
	if ((k->flags & F_MIB) && v % MIB)
		return sbx_policy_whyf(why, n, "'%s' is not a whole number of MiB", SBX_YAML_SHOW(s));
	if (k->kind == K_U32 || k->kind == K_CPU) {
		unsigned u = (unsigned)v;
		memcpy(f, &u, sizeof u);
	} else {
		memcpy(f, &v, sizeof v);
	}
	return 0;
}

struct map_walk {
	const struct key *keys;
	void *obj;
	yaml_mark_t *marks;
};

static int map_value(struct sbx_yaml *c, int k, const char *key, yaml_mark_t km, const char *path, void *arg)
{
	struct map_walk *w = arg;
	const struct key *ky = &w->keys[k];
	(void)key;
	if (w->marks)
		w->marks[k] = km;
	if (ky->kind == K_FN)
		return ky->fn(c, w->obj, path);
	const char *s = sbx_yaml_scalar(c, path);
	char why[300];
	if (!s)
		return -1;
	if (set_scalar(ky, w->obj, s, why, sizeof why) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: %s", path, why);
	return 0;
}

/* A mapping of keys (yamlstrict.h's walker); scalars set through their
 * table entry, K_FN values through theirs.  marks[i], unless NULL, gets
 * where key i was. */
static int parse_map(struct sbx_yaml *c, const char *where, const struct key *keys, size_t nkeys, void *obj,
		     unsigned *seen_out, yaml_mark_t *marks)
{
	const char *names[64];
	for (size_t i = 0; i < nkeys && i < SBX_ARRAY_LEN(names); i++)
		names[i] = keys[i].name;
	struct map_walk w = { keys, obj, marks };
	uint64_t seen;
	if (sbx_yaml_map(c, where, names, nkeys, map_value, &w, &seen) < 0)
		return -1;
	if (seen_out)
		*seen_out = (unsigned)seen;
	return 0;
}

typedef sbx_yaml_item_fn item_fn;

/* Walk a list (the current event starts it) of at most max items. */
static int parse_seq(struct sbx_yaml *c, const char *path, unsigned max, item_fn fn, void *obj, unsigned *count)
{
	return sbx_yaml_seq(c, path, max, "entries", fn, obj, count);
}

#define P(field) offsetof(struct sbx_policy, field)
#define BIT(keys, name) (1u << key_index(keys, SBX_ARRAY_LEN(keys), name))

static unsigned key_index(const struct key *keys, size_t n, const char *name)
{
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(keys[i].name, name))
			return i;
	return 31;
}

/* Two related limits (a per-exec and a per-session one, a default and a
 * maximum): one left out is lowered to fit the one given, never raised;
 * two given that conflict are an error. */
static bool conflict(uint64_t lo, uint64_t hi, bool zero_is_none)
{
	if (!zero_is_none)
		return lo > hi;
	if (hi == 0)
		return false;      /* no maximum */
	return lo == 0 || lo > hi; /* "none" exceeds any maximum */
}

static int fit_pair(struct sbx_yaml *c, yaml_mark_t m, bool lo_given, bool hi_given, uint64_t *lo, uint64_t hi,
		    bool zero_is_none, const char *what)
{
	if (!conflict(*lo, hi, zero_is_none))
		return 0;
	if (!lo_given && hi_given) {
		*lo = hi;
		return 0;
	}
	return sbx_yaml_failm(c, m, "%s", what);
}

static const struct key pids_keys[] = {
	{ .name = "per_exec", .kind = K_U32, .off = P(resources.pids_per_exec), .min = 1, .max = 1048576 },
	{ .name = "per_session", .kind = K_U32, .off = P(resources.pids_per_session), .min = 1, .max = 1048576 },
};

static int v_pids(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	yaml_mark_t m = c->ev.start_mark;
	unsigned seen;
	if (parse_map(c, path, pids_keys, SBX_ARRAY_LEN(pids_keys), obj, &seen, NULL) < 0)
		return -1;
	uint64_t lo = p->resources.pids_per_exec;
	if (fit_pair(c, m, seen & 1, seen & 2, &lo, p->resources.pids_per_session, false,
		     "resources.pids: per_exec is larger than per_session") < 0)
		return -1;
	p->resources.pids_per_exec = (unsigned)lo;
	return 0;
}

static const struct key timeout_keys[] = {
	{ .name = "default",
	  .kind = K_DUR,
	  .off = P(resources.exec_timeout_default_ms),
	  .min = 1,
	  .max = 30 * DAY,
	  .flags = F_ZERO },
	{ .name = "max",
	  .kind = K_DUR,
	  .off = P(resources.exec_timeout_max_ms),
	  .min = 1,
	  .max = 30 * DAY,
	  .flags = F_ZERO },
};

static int v_exec_timeout(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	yaml_mark_t m = c->ev.start_mark;
	unsigned seen;
	if (parse_map(c, path, timeout_keys, SBX_ARRAY_LEN(timeout_keys), obj, &seen, NULL) < 0)
		return -1;
	return fit_pair(c, m, seen & 1, seen & 2, &p->resources.exec_timeout_default_ms,
			p->resources.exec_timeout_max_ms, true,
			"resources.exec_timeout: default is longer than max (0 means no limit)");
}

static const struct key resources_keys[] = {
	{ .name = "vcpus", .kind = K_U32, .off = P(resources.vcpus), .min = 1, .max = 64 },
	{ .name = "memory",
	  .kind = K_SIZE,
	  .off = P(resources.memory),
	  .min = 64 * MIB,
	  .max = 64 * GIB,
	  .flags = F_MIB },
	{ .name = "disk", .kind = K_SIZE, .off = P(resources.disk), .min = 16 * MIB, .max = TIB },
	{ .name = "cpu_limit", .kind = K_CPU, .off = P(resources.cpu_limit_milli), .min = 50, .max = 64000 },
	{ .name = "pids", .kind = K_FN, .fn = v_pids },
	{ .name = "exec_memory",
	  .kind = K_SIZE,
	  .off = P(resources.exec_memory),
	  .min = MIB,
	  .max = 64 * GIB,
	  .flags = F_ZERO },
	{ .name = "exec_timeout", .kind = K_FN, .fn = v_exec_timeout },
	{ .name = "ttl", .kind = K_DUR, .off = P(resources.ttl_ms), .min = 1, .max = 30 * DAY, .flags = F_ZERO },
	{ .name = "output_cap", .kind = K_SIZE, .off = P(resources.output_cap), .min = 0, .max = 16 * GIB },
	{ .name = "output_session_cap", .kind = K_SIZE, .off = P(resources.output_session_cap), .min = 0, .max = TIB },
	{ .name = "require_kvm", .kind = K_BOOL, .off = P(resources.require_kvm) },
	/* The floors keep a session bootable and its agent answering. */
	{ .name = "disk_bps",
	  .kind = K_SIZE,
	  .off = P(resources.disk_bps),
	  .min = MIB,
	  .max = 64 * GIB,
	  .flags = F_ZERO },
	{ .name = "disk_iops",
	  .kind = K_U32,
	  .off = P(resources.disk_iops),
	  .min = 10,
	  .max = 1000000,
	  .flags = F_ZERO },
};

static int v_resources(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	unsigned seen;
	if (parse_map(c, path, resources_keys, SBX_ARRAY_LEN(resources_keys), obj, &seen, NULL) < 0)
		return -1;
	/* The shape: resources_keys' first three. */
	p->set |= (seen & 1 ? SBX_POLICY_SET_VCPUS : 0) | (seen & 2 ? SBX_POLICY_SET_MEMORY : 0) |
		  (seen & 4 ? SBX_POLICY_SET_DISK : 0);
	return 0;
}

/* ---- network ---- */

/* K_STR checkers: each keeps the text (or its normal form) in out. */
static int c_domain(const char *s, char *out, size_t size, char *why, size_t whyn)
{
	return sbx_policy_check_domain(s, true, out, size, why, whyn);
}

static int c_url(const char *s, char *out, size_t size, char *why, size_t whyn)
{
	if (sbx_policy_check_url(s, why, whyn) < 0)
		return -1;
	snprintf(out, size, "%s", s);
	return 0;
}

static int c_secret_name(const char *s, char *out, size_t size, char *why, size_t whyn)
{
	if (sbx_policy_check_ident(s, true, SBX_POLICY_NAME_LEN - 1) < 0)
		return sbx_policy_whyf(why, whyn, "'%s' is not a secret name ([A-Z_][A-Z0-9_]*, at most %d)",
				       SBX_YAML_SHOW(s), SBX_POLICY_NAME_LEN - 1);
	snprintf(out, size, "%s", s);
	return 0;
}

static int c_env_name(const char *s, char *out, size_t size, char *why, size_t whyn)
{
	if (sbx_policy_check_ident(s, false, size - 1) < 0)
		return sbx_policy_whyf(why, whyn, "'%s' is not an environment variable name", SBX_YAML_SHOW(s));
	snprintf(out, size, "%s", s);
	return 0;
}

static int c_path(const char *s, char *out, size_t size, char *why, size_t whyn)
{
	if (sbx_policy_check_path(s, why, whyn) < 0)
		return -1;
	snprintf(out, size, "%s", s);
	return 0;
}

#define K_STRING(n, type, field, fn)                                                                                   \
	{                                                                                                              \
		.name = (n), .kind = K_STR, .off = offsetof(type, field), .size = sizeof(((type *)0)->field),          \
		.check = (fn)                                                                                          \
	}

static int v_cidr(struct sbx_yaml *c, void *obj, const char *path)
{
	const char *s = sbx_yaml_scalar(c, path);
	char why[300];
	if (!s)
		return -1;
	if (sbx_policy_check_cidr(s, obj, why, sizeof why) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: %s", path, why);
	return 0;
}

static int port_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct sbx_policy_rule *r = obj;
	const char *s = sbx_yaml_scalar(c, path);
	uint64_t v;
	if (!s)
		return -1;
	if (sbx_parse_uint(s, &v) < 0 || v < 1 || v > 65535)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a port (1..65535)", path, SBX_YAML_SHOW(s));
	for (unsigned j = 0; j < i; j++)
		if (r->ports[j] == v)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: port %u is listed twice", path, (unsigned)v);
	r->ports[i] = (uint16_t)v;
	return 0;
}

static int v_ports(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy_rule *r = obj;
	yaml_mark_t m = c->ev.start_mark;
	if (parse_seq(c, path, SBX_POLICY_PORTS_MAX, port_item, r, &r->nports) < 0)
		return -1;
	return r->nports ? 0 : sbx_yaml_failm(c, m, "%s: empty (leave it out for the default, 80 and 443)", path);
}

static const struct key rule_keys[] = {
	K_STRING("domain", struct sbx_policy_rule, domain, c_domain),
	{ .name = "cidr", .kind = K_FN, .fn = v_cidr },
	{ .name = "ports", .kind = K_FN, .fn = v_ports },
};

static int allow_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct sbx_policy_rule *r = &((struct sbx_policy *)obj)->network.allow[i];
	yaml_mark_t m = c->ev.start_mark;
	unsigned seen;
	memset(r, 0, sizeof *r);
	if (parse_map(c, path, rule_keys, SBX_ARRAY_LEN(rule_keys), r, &seen, NULL) < 0)
		return -1;
	if (!(seen & 1) == !(seen & 2))
		return sbx_yaml_failm(c, m, "%s: needs exactly one of domain and cidr", path);
	if (!(seen & 4)) {
		r->ports[0] = 80;
		r->ports[1] = 443;
		r->nports = 2;
	}
	return 0;
}

static int v_allow(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	return parse_seq(c, path, SBX_POLICY_ALLOW_MAX, allow_item, p, &p->network.nallow);
}

const char *const sbx_policy_egress_names[] = { "none", "allowlist", NULL };

static const struct key network_keys[] = {
	{ .name = "egress", .kind = K_ENUM, .off = P(network.egress), .enums = sbx_policy_egress_names },
	{ .name = "allow", .kind = K_FN, .fn = v_allow },
	{ .name = "dns", .kind = K_BOOL, .off = P(network.dns) },
	{ .name = "max_connections", .kind = K_U32, .off = P(network.max_connections), .min = 1, .max = 65536 },
	{ .name = "max_bytes", .kind = K_SIZE, .off = P(network.max_bytes), .min = MIB, .max = TIB },
	{ .name = "rate", .kind = K_SIZE, .off = P(network.rate), .min = 64 * KIB, .max = 4 * GIB, .flags = F_ZERO },
};

static int v_network(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	yaml_mark_t marks[SBX_ARRAY_LEN(network_keys)], m = c->ev.start_mark;
	unsigned seen;
	if (parse_map(c, path, network_keys, SBX_ARRAY_LEN(network_keys), obj, &seen, marks) < 0)
		return -1;
	if (p->network.egress == SBX_EGRESS_NONE && (seen & BIT(network_keys, "allow")))
		return sbx_yaml_failm(c, marks[1], "network.allow is set but network.egress is not allowlist");
	if (p->network.egress == SBX_EGRESS_ALLOWLIST && !p->network.nallow)
		return sbx_yaml_failm(c, seen & BIT(network_keys, "allow") ? marks[1] : m,
				      "network.egress is allowlist but network.allow is empty");
	return 0;
}

/* ---- packages ---- */

const char *const sbx_policy_registry_names[] = { "pypi", "npm", "apt", NULL };

static const struct key registry_keys[] = {
	{ .name = "type",
	  .kind = K_ENUM,
	  .off = offsetof(struct sbx_policy_registry, type),
	  .enums = sbx_policy_registry_names },
	K_STRING("url", struct sbx_policy_registry, url, c_url),
	K_STRING("keyring", struct sbx_policy_registry, keyring, c_path),
};

/* pypi and npm: a type and a url.  apt: a type alone (the host's own
 * archive and keys, resolved at create for the template's suite), or a
 * url with the keyring that signs it: an archive named by a policy is
 * never trusted on the host's keys, nor without keys. */
static int registry_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct sbx_policy *p = obj;
	struct sbx_policy_registry *r = &p->packages.registries[i];
	yaml_mark_t m = c->ev.start_mark;
	unsigned seen;
	memset(r, 0, sizeof *r);
	if (parse_map(c, path, registry_keys, SBX_ARRAY_LEN(registry_keys), r, &seen, NULL) < 0)
		return -1;
	if (!(seen & 1))
		return sbx_yaml_failm(c, m, "%s: needs a type", path);
	if (r->type != SBX_REG_APT)
		return (seen & 6) == 2 ? 0
		       : seen & 4      ? sbx_yaml_failm(c, m, "%s: keyring is for type apt only", path)
				       : sbx_yaml_failm(c, m, "%s: needs both type and url", path);
	if ((seen & 6) == 2)
		return sbx_yaml_failm(c, m, "%s: an apt archive with a url needs the keyring that signs it", path);
	if ((seen & 6) == 4)
		return sbx_yaml_failm(c, m,
				      "%s: keyring without url: the host's own archive is checked with the host's "
				      "own keys",
				      path);
	for (unsigned j = 0; j < i; j++)
		if (p->packages.registries[j].type == SBX_REG_APT && !strcmp(p->packages.registries[j].url, r->url))
			return sbx_yaml_failm(c, m, "%s: this apt archive is listed twice", path);
	return 0;
}

static int v_registries(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	return parse_seq(c, path, SBX_POLICY_REGISTRIES_MAX, registry_item, p, &p->packages.nregistries);
}

/* packages.allow, deny, pins and lock: maps of registry type to a list
 * (or, for lock, a host path). */
enum pkg_list { PL_ALLOW, PL_DENY, PL_PINS, PL_LOCK };

struct pkg_item {
	struct sbx_policy *p;
	enum pkg_list what;
	int type;
};

/* A pattern in the names' normal form: for pypi lower case with runs of
 * "-_." as one "-" (PEP 503), so "Foo_Bar*" meets "foo-bar-baz". */
static int pattern_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct pkg_item *w = obj;
	struct sbx_policy_pkgnames *l =
		w->what == PL_DENY ? &w->p->packages.deny[w->type] : &w->p->packages.allow[w->type];
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	yaml_mark_t m = c->ev.start_mark;
	const char *extra = w->type == SBX_REG_NPM ? "@/~" : w->type == SBX_REG_APT ? "+" : "";
	size_t len = strlen(s), o = 0;
	if (!len || len >= SBX_POLICY_PKGPAT_LEN)
		return sbx_yaml_failm(c, m, "%s: a pattern is 1 to %d characters", path, SBX_POLICY_PKGPAT_LEN - 1);
	char norm[SBX_POLICY_PKGPAT_LEN];
	for (size_t k = 0; k < len; k++) {
		unsigned char ch = (unsigned char)s[k];
		bool sep = ch == '-' || ch == '_' || ch == '.';
		if (!(ch < 0x80 && (isalnum(ch) || sep || strchr("*?[]!", ch) || (ch && strchr(extra, ch)))))
			return sbx_yaml_failm(c, m,
					      "%s: '%s' is not a name pattern (letters, digits, -_. and * ? [ ] !%s)",
					      path, SBX_YAML_SHOW(s),
					      w->type == SBX_REG_NPM   ? " @ / ~"
					      : w->type == SBX_REG_APT ? " +"
								       : "");
		if (w->type == SBX_REG_PYPI && sep) {
			if (!o || norm[o - 1] != '-')
				norm[o++] = '-';
		} else {
			norm[o++] = w->type != SBX_REG_NPM ? (char)tolower(ch) : (char)ch;
		}
	}
	norm[o] = 0;
	/* An allow list narrows; one that matches every name is the key
	 * left out, and saying "*" there is more likely a mistake than a
	 * wish (deny: "*" is a clear wish: nothing of that type). */
	if (w->what == PL_ALLOW && strspn(norm, "*") == o)
		return sbx_yaml_failm(c, m,
				      "%s: '%s' matches every name; leave packages.allow.%s out to allow every name",
				      path, norm, sbx_policy_registry_names[w->type]);
	for (unsigned j = 0; j < i; j++)
		if (!strcmp(l->v[j], norm))
			return sbx_yaml_failm(c, m, "%s: '%s' is listed twice", path, norm);
	snprintf(l->v[i], sizeof l->v[i], "%s", norm);
	return 0;
}

/* "NAME==VERSION": one exact version, the name in its normal form. */
static int pin_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct pkg_item *w = obj;
	struct sbx_policy_pins *l = &w->p->packages.pins[w->type];
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	yaml_mark_t m = c->ev.start_mark;
	const char *eq = strstr(s, "==");
	char name[SBX_PKG_NAME_LEN], norm[SBX_PKG_NAME_LEN];
	if (!eq || (size_t)(eq - s) >= sizeof name ||
	    !(w->type == SBX_REG_APT ? sbx_pkg_deb_version_ok(eq + 2) : sbx_pkg_version_ok(eq + 2)))
		return sbx_yaml_failm(c, m, "%s: '%s' is not NAME==VERSION (one exact version)", path,
				      SBX_YAML_SHOW(s));
	snprintf(name, sizeof name, "%.*s", (int)(eq - s), s);
	if (w->type == SBX_REG_PYPI  ? sbx_pkg_pypi_normalize(name, norm, sizeof norm) < 0
	    : w->type == SBX_REG_NPM ? !sbx_pkg_npm_name_ok(name)
				     : !sbx_pkg_deb_name_ok(name))
		return sbx_yaml_failm(c, m, "%s: '%s' is not a %s package name", path, SBX_YAML_SHOW(name),
				      sbx_policy_registry_names[w->type]);
	if (w->type != SBX_REG_PYPI)
		snprintf(norm, sizeof norm, "%s", name);
	size_t nl = strlen(norm);
	for (unsigned j = 0; j < i; j++)
		if (!strncmp(l->v[j], norm, nl) && !strncmp(l->v[j] + nl, "==", 2))
			return sbx_yaml_failm(c, m, "%s: %s is pinned twice", path, norm);
	if (nl + 2 + strlen(eq + 2) >= SBX_POLICY_PIN_LEN)
		return sbx_yaml_failm(c, m, "%s: longer than %d characters", path, SBX_POLICY_PIN_LEN - 1);
	snprintf(l->v[i], sizeof l->v[i], "%s==%s", norm, eq + 2);
	return 0;
}

static int pkg_type_value(struct sbx_yaml *c, int k, const char *key, yaml_mark_t km, const char *path, void *arg)
{
	struct pkg_item w = *(struct pkg_item *)arg;
	struct sbx_policy *p = w.p;
	char why[300];
	(void)key;
	w.type = k;
	switch (w.what) {
	case PL_ALLOW:
	case PL_DENY: {
		struct sbx_policy_pkgnames *l = w.what == PL_DENY ? &p->packages.deny[k] : &p->packages.allow[k];
		memset(l, 0, sizeof *l);
		l->set = true;
		return parse_seq(c, path, SBX_POLICY_PKGPAT_MAX, pattern_item, &w, &l->n);
	}
	case PL_PINS: {
		struct sbx_policy_pins *l = &p->packages.pins[k];
		memset(l, 0, sizeof *l);
		l->set = true;
		return parse_seq(c, path, SBX_POLICY_PINS_MAX, pin_item, &w, &l->n);
	}
	case PL_LOCK:
		if (k == SBX_REG_APT)
			return sbx_yaml_failm(
				c, km, "%s: apt has no lock file format; pin versions with packages.pins.apt", path);
		break;
	}
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	if (c_path(s, p->packages.lock[k], sizeof p->packages.lock[k], why, sizeof why) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: %s", path, why);
	return 0;
}

static int pkg_per_type(struct sbx_yaml *c, struct sbx_policy *p, const char *path, enum pkg_list what)
{
	struct pkg_item w = { p, what, 0 };
	if (sbx_yaml_expect(c, YAML_MAPPING_START_EVENT, path) < 0)
		return -1;
	return sbx_yaml_map(c, path, sbx_policy_registry_names, SBX_PKG_TYPES, pkg_type_value, &w, NULL);
}

static int v_pkg_allow(struct sbx_yaml *c, void *obj, const char *path)
{
	return pkg_per_type(c, obj, path, PL_ALLOW);
}

static int v_pkg_deny(struct sbx_yaml *c, void *obj, const char *path)
{
	return pkg_per_type(c, obj, path, PL_DENY);
}

static int v_pkg_pins(struct sbx_yaml *c, void *obj, const char *path)
{
	return pkg_per_type(c, obj, path, PL_PINS);
}

static int v_pkg_lock(struct sbx_yaml *c, void *obj, const char *path)
{
	return pkg_per_type(c, obj, path, PL_LOCK);
}

const char *const sbx_policy_mode_names[] = { "offline", "allowlist", NULL };
const char *const sbx_policy_npm_scripts_names[] = { "allow", "deny", NULL };

static const struct key packages_keys[] = {
	{ .name = "mode", .kind = K_ENUM, .off = P(packages.mode), .enums = sbx_policy_mode_names },
	{ .name = "registries", .kind = K_FN, .fn = v_registries },
	{ .name = "max_download", .kind = K_SIZE, .off = P(packages.max_download), .min = MIB, .max = TIB },
	{ .name = "require_hashes", .kind = K_BOOL, .off = P(packages.require_hashes) },
	{ .name = "npm_scripts",
	  .kind = K_ENUM,
	  .off = P(packages.npm_scripts),
	  .enums = sbx_policy_npm_scripts_names },
	{ .name = "allow", .kind = K_FN, .fn = v_pkg_allow },
	{ .name = "deny", .kind = K_FN, .fn = v_pkg_deny },
	{ .name = "pins", .kind = K_FN, .fn = v_pkg_pins },
	{ .name = "lock", .kind = K_FN, .fn = v_pkg_lock },
};

static int v_packages(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	yaml_mark_t marks[SBX_ARRAY_LEN(packages_keys)], m = c->ev.start_mark;
	unsigned seen;
	if (parse_map(c, path, packages_keys, SBX_ARRAY_LEN(packages_keys), obj, &seen, marks) < 0)
		return -1;
	if (p->packages.mode == SBX_PKG_OFFLINE && (seen & BIT(packages_keys, "registries")))
		return sbx_yaml_failm(c, marks[1], "packages.registries is set but packages.mode is not allowlist");
	if (p->packages.mode == SBX_PKG_ALLOWLIST && !p->packages.nregistries)
		return sbx_yaml_failm(c, seen & BIT(packages_keys, "registries") ? marks[1] : m,
				      "packages.mode is allowlist but packages.registries is empty");
	static const char *const rules[] = { "allow", "deny", "pins", "lock" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(rules); i++)
		if (p->packages.mode == SBX_PKG_OFFLINE &&
		    (seen & (1u << key_index(packages_keys, SBX_ARRAY_LEN(packages_keys), rules[i]))))
			return sbx_yaml_failm(c,
					      marks[key_index(packages_keys, SBX_ARRAY_LEN(packages_keys), rules[i])],
					      "packages.%s is set but packages.mode is not allowlist", rules[i]);
	/* One source of versions per type: a lock and pins together would
	 * leave open which one wins. */
	for (int t = 0; t < SBX_PKG_TYPES; t++)
		if (p->packages.lock[t][0] && p->packages.pins[t].set)
			return sbx_yaml_failm(c, marks[key_index(packages_keys, SBX_ARRAY_LEN(packages_keys), "pins")],
					      "packages.pins.%s and packages.lock.%s are both set: a registry type has "
					      "one or the other",
					      sbx_policy_registry_names[t], sbx_policy_registry_names[t]);
	return 0;
}

/* ---- files ---- */

static int path_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct sbx_policy_paths *ps = obj;
	const char *s = sbx_yaml_scalar(c, path);
	char why[300];
	if (!s)
		return -1;
	if (sbx_policy_check_path(s, why, sizeof why) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: %s", path, why);
	for (unsigned j = 0; j < i; j++)
		if (!strcmp(ps->path[j], s))
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is listed twice", path, SBX_YAML_SHOW(s));
	snprintf(ps->path[i], sizeof ps->path[i], "%s", s);
	return 0;
}

static int v_writable(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy_paths *ps = &((struct sbx_policy *)obj)->files.writable;
	return parse_seq(c, path, SBX_POLICY_PATHS_MAX, path_item, ps, &ps->n);
}

static int v_exportable(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy_paths *ps = &((struct sbx_policy *)obj)->files.exportable;
	return parse_seq(c, path, SBX_POLICY_PATHS_MAX, path_item, ps, &ps->n);
}

static const struct key files_keys[] = {
	{ .name = "writable", .kind = K_FN, .fn = v_writable },
	{ .name = "exportable", .kind = K_FN, .fn = v_exportable },
	{ .name = "max_transfer", .kind = K_SIZE, .off = P(files.max_transfer), .min = 0, .max = TIB },
	{ .name = "max_session_transfer", .kind = K_SIZE, .off = P(files.max_session_transfer), .min = 0, .max = TIB },
};

static int v_files(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	yaml_mark_t m = c->ev.start_mark;
	unsigned seen;
	if (parse_map(c, path, files_keys, SBX_ARRAY_LEN(files_keys), obj, &seen, NULL) < 0)
		return -1;
	return fit_pair(c, m, seen & BIT(files_keys, "max_transfer"), seen & BIT(files_keys, "max_session_transfer"),
			&p->files.max_transfer, p->files.max_session_transfer, false,
			"files: max_transfer is larger than max_session_transfer");
}

/* ---- secrets ---- */

static const struct key secret_keys[] = {
	K_STRING("name", struct sbx_policy_secret, name, c_secret_name),
	K_STRING("from_env", struct sbx_policy_secret, from_env, c_env_name),
	K_STRING("from_file", struct sbx_policy_secret, from_file, c_path),
};

static int secret_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct sbx_policy *p = obj;
	struct sbx_policy_secret *sec = &p->secrets[i];
	yaml_mark_t m = c->ev.start_mark;
	unsigned seen;
	memset(sec, 0, sizeof *sec);
	if (parse_map(c, path, secret_keys, SBX_ARRAY_LEN(secret_keys), sec, &seen, NULL) < 0)
		return -1;
	if (!(seen & 1))
		return sbx_yaml_failm(c, m, "%s: needs a name", path);
	if (!(seen & 2) == !(seen & 4))
		return sbx_yaml_failm(c, m, "%s: needs exactly one of from_env and from_file", path);
	for (unsigned j = 0; j < i; j++)
		if (!strcmp(p->secrets[j].name, sec->name))
			return sbx_yaml_failm(c, m, "%s: secret %s is defined twice", path, sec->name);
	return 0;
}

static int v_secrets(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	return parse_seq(c, path, SBX_POLICY_SECRETS_MAX, secret_item, p, &p->nsecrets);
}

/* ---- workspace ---- */

static const struct key workspace_keys[] = {
	{ .name = "size", .kind = K_SIZE, .off = P(workspace.size), .min = 16 * MIB, .max = TIB },
	{ .name = "retention", .kind = K_DUR, .off = P(workspace.retention_ms), .min = SEC, .max = 365 * DAY },
};

static int v_workspace(struct sbx_yaml *c, void *obj, const char *path)
{
	return parse_map(c, path, workspace_keys, SBX_ARRAY_LEN(workspace_keys), obj, NULL, NULL);
}

/* ---- ports (sbx-port) ---- */

/* 8080, or a range "3000-3999". */
static int fwd_item(struct sbx_yaml *c, void *obj, unsigned i, const char *path)
{
	struct sbx_policy *p = obj;
	const char *s = sbx_yaml_scalar(c, path), *dash;
	uint64_t lo, hi;
	char a[16];
	if (!s)
		return -1;
	dash = strchr(s, '-');
	if (!dash) {
		if (sbx_parse_uint(s, &lo) < 0)
			goto bad;
		hi = lo;
	} else {
		if ((size_t)(dash - s) >= sizeof a)
			goto bad;
		memcpy(a, s, (size_t)(dash - s));
		a[dash - s] = 0;
		if (sbx_parse_uint(a, &lo) < 0 || sbx_parse_uint(dash + 1, &hi) < 0)
			goto bad;
	}
	if (lo < 1 || hi > 65535 || lo > hi)
		goto bad;
	p->ports.lo[i] = (uint16_t)lo;
	p->ports.hi[i] = (uint16_t)hi;
	return 0;
bad:
	return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a port (1..65535) or a range of them (LOW-HIGH)",
			      path, SBX_YAML_SHOW(s));
}

static int v_fwd_ports(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	if (parse_seq(c, path, SBX_POLICY_FWD_MAX, fwd_item, p, &p->ports.n) < 0)
		return -1;
	p->ports.set = true;
	return 0;
}

bool sbx_policy_port_allowed(const struct sbx_policy *p, unsigned port, const char *tenant)
{
	if (!p->ports.set)
		return !tenant || !*tenant;
	for (unsigned i = 0; i < p->ports.n; i++)
		if (port >= p->ports.lo[i] && port <= p->ports.hi[i])
			return true;
	return false;
}

/* ---- lifecycle ---- */

const char *const sbx_policy_ttl_counts_names[] = { "wall", "running", NULL };
const char *const sbx_policy_on_ttl_names[] = { "end", "suspend", NULL };

static const struct key lifecycle_keys[] = {
	{ .name = "idle_pause",
	  .kind = K_DUR,
	  .off = P(lifecycle.idle_pause_ms),
	  .min = SEC,
	  .max = 30 * DAY,
	  .flags = F_ZERO },
	{ .name = "idle_suspend",
	  .kind = K_DUR,
	  .off = P(lifecycle.idle_suspend_ms),
	  .min = SEC,
	  .max = 30 * DAY,
	  .flags = F_ZERO },
	{ .name = "ttl_counts", .kind = K_ENUM, .off = P(lifecycle.ttl_counts), .enums = sbx_policy_ttl_counts_names },
	{ .name = "on_ttl", .kind = K_ENUM, .off = P(lifecycle.on_ttl), .enums = sbx_policy_on_ttl_names },
};

static int v_lifecycle(struct sbx_yaml *c, void *obj, const char *path)
{
	struct sbx_policy *p = obj;
	yaml_mark_t marks[SBX_ARRAY_LEN(lifecycle_keys)], m = c->ev.start_mark;
	unsigned seen = 0;
	if (parse_map(c, path, lifecycle_keys, SBX_ARRAY_LEN(lifecycle_keys), obj, &seen, marks) < 0)
		return -1;
	if (seen & 1u)
		m = marks[0];
	/* A pause after the suspend would never happen: a mistake, not a
	 * wish, so it is said rather than quietly ignored. */
	uint64_t ip = p->lifecycle.idle_pause_ms, is = p->lifecycle.idle_suspend_ms;
	if (ip && is && ip >= is) {
		char a[32], b[32];
		sbx_fmt_duration(a, sizeof a, ip);
		sbx_fmt_duration(b, sizeof b, is);
		return sbx_yaml_failm(
			c, m,
			"%s.idle_pause (%s) must be shorter than %s.idle_suspend (%s): a session is paused "
			"first, then suspended",
			path, a, path, b);
	}
	/* Its running time would be past the TTL at every resume. */
	if (p->lifecycle.on_ttl == SBX_ON_TTL_SUSPEND && p->lifecycle.ttl_counts == SBX_TTL_RUNNING)
		return sbx_yaml_failm(c, marks[key_index(lifecycle_keys, SBX_ARRAY_LEN(lifecycle_keys), "on_ttl")],
				      "%s.on_ttl: suspend and %s.ttl_counts: running do not go together: a TTL "
				      "of running time would be spent again at every resume",
				      path, path);
	return 0;
}

static const struct key root_keys[] = {
	{ .name = "resources", .kind = K_FN, .fn = v_resources },
	{ .name = "network", .kind = K_FN, .fn = v_network },
	{ .name = "packages", .kind = K_FN, .fn = v_packages },
	{ .name = "files", .kind = K_FN, .fn = v_files },
	{ .name = "secrets", .kind = K_FN, .fn = v_secrets },
	{ .name = "workspace", .kind = K_FN, .fn = v_workspace },
	{ .name = "ports", .kind = K_FN, .fn = v_fwd_ports },
	{ .name = "lifecycle", .kind = K_FN, .fn = v_lifecycle },
};

static int parse_stream(struct sbx_yaml *c, struct sbx_policy *p)
{
	if (sbx_yaml_next(c) < 0 || sbx_yaml_next(c) < 0) /* stream start, then a document or the end */
		return -1;
	if (c->ev.type == YAML_STREAM_END_EVENT)
		return 0; /* empty or comments only: the defaults */
	if (sbx_yaml_next(c) < 0)
		return -1;
	if (sbx_yaml_is_null(&c->ev)) {
		/* a bare "---": the defaults */
	} else if (c->ev.type != YAML_MAPPING_START_EVENT) {
		return sbx_yaml_failm(c, c->ev.start_mark, "a policy is a mapping (of resources, network, ...), not %s",
				      sbx_yaml_kind(&c->ev));
	} else if (parse_map(c, "", root_keys, SBX_ARRAY_LEN(root_keys), p, NULL, NULL) < 0) {
		return -1;
	}
	if (sbx_yaml_next(c) < 0 || sbx_yaml_next(c) < 0) /* document end, then the stream's */
		return -1;
	if (c->ev.type != YAML_STREAM_END_EVENT)
		return sbx_yaml_failm(c, c->ev.start_mark, "only one YAML document is allowed");
	return 0;
}

/* ---- API ---- */

void sbx_policy_defaults(struct sbx_policy *p)
{
	memset(p, 0, sizeof *p);
	p->resources.vcpus = 1;
	p->resources.memory = 256 * MIB;
	p->resources.disk = GIB;
	p->resources.pids_per_exec = 256;
	p->resources.pids_per_session = 1024;
	p->resources.exec_timeout_default_ms = 10 * MINUTE;
	p->resources.exec_timeout_max_ms = HOUR;
	p->resources.ttl_ms = HOUR;
	p->resources.output_cap = 64 * MIB;
	p->resources.output_session_cap = SBX_OUTPUT_SESSION_CAP_DEFAULT;
	p->resources.disk_bps = SBX_DISK_BPS_DEFAULT;
	p->resources.disk_iops = SBX_DISK_IOPS_DEFAULT;
	p->network.egress = SBX_EGRESS_NONE;
	p->network.dns = true;
	p->network.max_connections = 64;
	p->network.max_bytes = GIB;
	p->network.rate = SBX_NET_RATE_DEFAULT;
	p->packages.mode = SBX_PKG_OFFLINE;
	p->packages.max_download = 512 * MIB;
	static const char *const paths[] = { "/workspace", "/tmp" };
	for (unsigned i = 0; i < SBX_ARRAY_LEN(paths); i++) {
		snprintf(p->files.writable.path[i], SBX_POLICY_PATH_LEN, "%s", paths[i]);
		snprintf(p->files.exportable.path[i], SBX_POLICY_PATH_LEN, "%s", paths[i]);
	}
	p->files.writable.n = p->files.exportable.n = SBX_ARRAY_LEN(paths);
	p->files.max_transfer = 256 * MIB;
	p->files.max_session_transfer = GIB;
	p->workspace.size = GIB;
	p->workspace.retention_ms = 7 * DAY;
}

int sbx_policy_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_policy *p, struct sbx_err *err)
{
	char shown[256];
	struct sbx_yaml c;
	sbx_yaml_show(shown, sizeof shown, name, 200);
	if (n > SBX_POLICY_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot load policy %s: larger than 1 MiB", shown);
	if (sbx_yaml_open(&c, shown, buf, n, SBX_POLICY_DEPTH_MAX, SCALAR_MAX, err) < 0) {
		sbx_yaml_close(&c);
		return -1;
	}
	int r = parse_stream(&c, p);
	sbx_yaml_close(&c);
	if (r == 0)
		snprintf(p->source, sizeof p->source, "%s", c.name);
	return r;
}

int sbx_policy_load(const char *path, struct sbx_policy *p, struct sbx_err *err)
{
	char shown[256];
	sbx_yaml_show(shown, sizeof shown, path, 200);
	sbx_policy_defaults(p);
	/* Symlinks are followed: the user named this file, and it is opened
	 * with the user's rights (caller.h).  O_NONBLOCK so a FIFO is refused
	 * by the fstat below instead of hanging the open. */
	_cleanup_close_ int fd = SBX_AS_CALLER(open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read policy %s", shown);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read policy %s", shown);
	if (!S_ISREG(st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot load policy %s: not a regular file", shown);
	if (st.st_size > SBX_POLICY_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot load policy %s: larger than 1 MiB", shown);
	/* One byte more than allowed, so a file that grew since fstat is caught. */
	_cleanup_free_ uint8_t *buf = malloc(SBX_POLICY_FILE_MAX + 1);
	if (!buf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read policy %s", shown);
	size_t n = 0;
	while (n < SBX_POLICY_FILE_MAX + 1) {
		ssize_t r = read(fd, buf + n, SBX_POLICY_FILE_MAX + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read policy %s", shown);
		if (r == 0)
			break;
		n += (size_t)r;
	}
	return sbx_policy_parse(path, buf, n, p, err);
}

int sbx_policy_set(struct sbx_policy *p, const char *key, const char *value, struct sbx_err *err)
{
	static const struct {
		const char *section;
		const struct key *keys;
		size_t n;
	} sections[] = {
		{ "resources", resources_keys, SBX_ARRAY_LEN(resources_keys) },
		{ "resources.pids", pids_keys, SBX_ARRAY_LEN(pids_keys) },
		{ "resources.exec_timeout", timeout_keys, SBX_ARRAY_LEN(timeout_keys) },
		{ "network", network_keys, SBX_ARRAY_LEN(network_keys) },
		{ "packages", packages_keys, SBX_ARRAY_LEN(packages_keys) },
		{ "files", files_keys, SBX_ARRAY_LEN(files_keys) },
		{ "lifecycle", lifecycle_keys, SBX_ARRAY_LEN(lifecycle_keys) },
	};
	const char *dot = strrchr(key, '.');
	for (size_t i = 0; dot && i < SBX_ARRAY_LEN(sections); i++) {
		if (strlen(sections[i].section) != (size_t)(dot - key) || strncmp(sections[i].section, key, dot - key))
			continue;
		for (size_t j = 0; j < sections[i].n; j++) {
			const struct key *k = &sections[i].keys[j];
			char why[300];
			if (strcmp(k->name, dot + 1) || k->kind == K_FN)
				continue;
			if (set_scalar(k, p, value, why, sizeof why) < 0)
				return sbx_err_set(err, SBX_EXIT_USAGE, 0, "%s", why);
			return 0;
		}
	}
	return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "no policy key %s can be set", key);
}

unsigned sbx_policy_cpu_limit_milli(const struct sbx_policy *p)
{
	return p->resources.cpu_limit_milli ? p->resources.cpu_limit_milli : p->resources.vcpus * 1000;
}
