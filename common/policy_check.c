/* The policy's value checks (policy_check.h): host names, CIDRs, registry
 * URLs, guest paths and identifiers, each in one spelling only.  Pure
 * string functions, used by the loader (policy.c) and by the reader of
 * an effective policy's JSON (policy_json.c). */
#include "policy_check.h"

#include "yamlstrict.h"

#include <arpa/inet.h>

/* Host names as DNS has them (letters, digits, inner hyphens; labels of
 * 1..63; 253 in all), lowercased into out, at least two labels so a search
 * domain cannot complete them, and not all-numeric at the end so an address
 * never passes for a name.  "*." in front when wild is allowed. */
int sbx_policy_check_domain(const char *s, bool wild_ok, char *out, size_t outn, char *why, size_t n)
{
	size_t len = strlen(s);
	if (len > 253 || len + 1 > outn)
		return sbx_policy_whyf(why, n, "domain '%s' is longer than 253 characters", SBX_YAML_SHOW(s));
	const char *d = s;
	if (wild_ok && !strncmp(s, "*.", 2))
		d += 2;
	unsigned labels = 0;
	bool numeric = true;
	for (const char *l = d;; l++) {
		size_t ll = strcspn(l, ".");
		if (ll < 1 || ll > 63)
			return sbx_policy_whyf(why, n,
					       "domain '%s' has a label that is empty or longer than 63 characters",
					       SBX_YAML_SHOW(s));
		numeric = true;
		for (size_t i = 0; i < ll; i++) {
			char ch = l[i];
			bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
			if (!alnum && ch != '-')
				return sbx_policy_whyf(why, n,
						       "domain '%s' may hold only letters, digits, '-' and '.'%s",
						       SBX_YAML_SHOW(s), wild_ok ? " (and a leading '*.')" : "");
			if (ch == '-' && (i == 0 || i == ll - 1))
				return sbx_policy_whyf(why, n, "domain '%s' has a label that starts or ends with '-'",
						       SBX_YAML_SHOW(s));
			if (!(ch >= '0' && ch <= '9'))
				numeric = false;
		}
		labels++;
		l += ll;
		if (!*l)
			break;
	}
	if (labels < 2)
		return sbx_policy_whyf(why, n, "domain '%s' needs at least two labels", SBX_YAML_SHOW(s));
	if (numeric)
		return sbx_policy_whyf(why, n, "domain '%s' ends in a numeric label (use cidr for addresses)",
				       SBX_YAML_SHOW(s));
	for (size_t i = 0; i <= len; i++)
		out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
	return 0;
}

int sbx_policy_check_cidr(const char *s, struct sbx_policy_rule *r, char *why, size_t n)
{
	char a[64];
	const char *slash = strchr(s, '/');
	size_t al = slash ? (size_t)(slash - s) : strlen(s);
	if (al >= sizeof a)
		return sbx_policy_whyf(why, n, "'%s' is not an address block", SBX_YAML_SHOW(s));
	memcpy(a, s, al);
	a[al] = 0;
	unsigned bits;
	if (inet_pton(AF_INET, a, r->addr) == 1)
		r->family = AF_INET, bits = 32;
	else if (inet_pton(AF_INET6, a, r->addr) == 1)
		r->family = AF_INET6, bits = 128;
	else
		return sbx_policy_whyf(why, n, "'%s' is not an IPv4 or IPv6 address block", SBX_YAML_SHOW(s));
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (r->family == AF_INET6 && !memcmp(r->addr, mapped, sizeof mapped))
		return sbx_policy_whyf(why, n, "'%s' is an IPv4-mapped address (write the IPv4 form)",
				       SBX_YAML_SHOW(s));
	uint64_t pfx = bits;
	if (slash && (sbx_parse_uint(slash + 1, &pfx) < 0 || pfx > bits))
		return sbx_policy_whyf(why, n, "'%s' has a bad prefix length (0..%u)", SBX_YAML_SHOW(s), bits);
	for (unsigned i = (unsigned)pfx; i < bits; i++)
		if (r->addr[i / 8] & (0x80 >> (i % 8)))
			return sbx_policy_whyf(why, n, "'%s' has bits set after the prefix", SBX_YAML_SHOW(s));
	r->prefix = (unsigned)pfx;
	return 0;
}

/* Registry base URLs: http(s), a host name or address, an optional port and
 * a plain path.  No user info (credentials do not belong in a policy), no
 * query or fragment. */
int sbx_policy_check_url(const char *s, char *why, size_t n)
{
	const char *p;
	if (!strncmp(s, "https://", 8))
		p = s + 8;
	else if (!strncmp(s, "http://", 7))
		p = s + 7;
	else
		return sbx_policy_whyf(why, n, "'%s' is not an http:// or https:// URL", SBX_YAML_SHOW(s));
	if (strlen(s) >= SBX_POLICY_URL_LEN)
		return sbx_policy_whyf(why, n, "URL '%s' is longer than %d bytes", SBX_YAML_SHOW(s),
				       SBX_POLICY_URL_LEN - 1);
	size_t auth = strcspn(p, "/");
	if (memchr(p, '@', auth))
		return sbx_policy_whyf(why, n, "URL '%s' carries user info", SBX_YAML_SHOW(s));
	char host[256], dom[256];
	size_t hl;
	const char *after;
	if (*p == '[') {
		const char *e = memchr(p, ']', auth);
		uint8_t a6[16];
		hl = e ? (size_t)(e - p - 1) : 0;
		if (!e || hl >= sizeof host)
			return sbx_policy_whyf(why, n, "URL '%s' has a bad host", SBX_YAML_SHOW(s));
		memcpy(host, p + 1, hl);
		host[hl] = 0;
		if (inet_pton(AF_INET6, host, a6) != 1)
			return sbx_policy_whyf(why, n, "URL '%s' has a bad IPv6 address", SBX_YAML_SHOW(s));
		after = e + 1;
	} else {
		hl = strcspn(p, ":/");
		if (!hl || hl >= sizeof host)
			return sbx_policy_whyf(why, n, "URL '%s' has a bad host", SBX_YAML_SHOW(s));
		memcpy(host, p, hl);
		host[hl] = 0;
		uint8_t a4[4];
		if (strspn(host, "0123456789.") == hl) {
			if (inet_pton(AF_INET, host, a4) != 1)
				return sbx_policy_whyf(why, n, "URL '%s' has a bad IPv4 address", SBX_YAML_SHOW(s));
		} else if (sbx_policy_check_domain(host, false, dom, sizeof dom, why, n) < 0) {
			return -1;
		}
		after = p + hl;
	}
	if (*after == ':') {
		char port[8];
		size_t pl = strcspn(after + 1, "/");
		uint64_t v;
		if (!pl || pl >= sizeof port)
			return sbx_policy_whyf(why, n, "URL '%s' has a bad port", SBX_YAML_SHOW(s));
		memcpy(port, after + 1, pl);
		port[pl] = 0;
		if (sbx_parse_uint(port, &v) < 0 || v < 1 || v > 65535)
			return sbx_policy_whyf(why, n, "URL '%s' has a bad port", SBX_YAML_SHOW(s));
		after += 1 + pl;
	}
	if (*after && *after != '/')
		return sbx_policy_whyf(why, n, "URL '%s' has a bad host", SBX_YAML_SHOW(s));
	for (const char *q = after; *q; q++) {
		if (*q == '%') {
			if (!strchr("0123456789abcdefABCDEF", q[1]) || !q[1] ||
			    !strchr("0123456789abcdefABCDEF", q[2]) || !q[2])
				return sbx_policy_whyf(why, n, "URL '%s' has a bad %%-escape", SBX_YAML_SHOW(s));
		} else if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
			     strchr("-._~!$&'()*+,;=:@/", *q))) {
			return sbx_policy_whyf(why, n, "URL '%s' has a character not allowed in a registry path",
					       SBX_YAML_SHOW(s));
		}
	}
	return 0;
}

/* Guest paths in one spelling only, so a path list cannot be matched two
 * ways: absolute, no empty, "." or ".." components, no trailing '/'. */
int sbx_policy_check_path(const char *s, char *why, size_t n)
{
	if (s[0] != '/')
		return sbx_policy_whyf(why, n, "'%s' is not an absolute path", SBX_YAML_SHOW(s));
	if (strlen(s) >= SBX_POLICY_PATH_LEN)
		return sbx_policy_whyf(why, n, "'%s' is longer than %d bytes", SBX_YAML_SHOW(s),
				       SBX_POLICY_PATH_LEN - 1);
	if (!s[1])
		return 0;
	for (const char *c = s + 1;; c++) {
		size_t l = strcspn(c, "/");
		if (!l)
			return sbx_policy_whyf(why, n, "'%s' is not normalized (empty component or trailing '/')",
					       SBX_YAML_SHOW(s));
		if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
			return sbx_policy_whyf(why, n, "'%s' is not normalized ('.' or '..')", SBX_YAML_SHOW(s));
		c += l;
		if (!*c)
			return 0;
	}
}

int sbx_policy_check_ident(const char *s, bool upper_only, size_t max)
{
	size_t l = strlen(s);
	if (!l || l > max || (s[0] >= '0' && s[0] <= '9'))
		return -1;
	for (size_t i = 0; i < l; i++) {
		char ch = s[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
		      (!upper_only && ch >= 'a' && ch <= 'z')))
			return -1;
	}
	return 0;
}
