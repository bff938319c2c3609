/* apt entries of a policy resolved at create (aptsrc.h).  The host's
 * sources are parsed here by hand: apt's own parser is C++ (libapt-pkg)
 * and no C library reads them; the two formats are small, and only the
 * fields named below are taken. */
#include "aptsrc.h"
#include "hostpath.h"
#include "pkgparams.h"
#include "pkgrules.h"
#include "policy_check.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sha2.h>

#define DEFAULT_KEYRING "/usr/share/keyrings/debian-archive-keyring.gpg"

static int word_ok(const char *s, size_t n, const char *extra)
{
	if (!n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || strchr(extra, s[i])))
			return 0;
	return 1;
}

/* One entry, from its parts; skipped (0) when it is not one we serve. */
static int add_entry(struct sbx_aptsrc_list *l, const char *uri, size_t ul, const char *suite, size_t sl,
		     const char *const *comps, const size_t *cl, unsigned nc, const char *signed_by, size_t bl,
		     char *why, size_t wn)
{
	char u[SBX_POLICY_URL_LEN], w[200];
	if (ul >= sizeof u || (strncmp(uri, "http://", 7) && strncmp(uri, "https://", 8)))
		return 0; /* file:, cdrom:, mirror+...: not an archive the cache can reach */
	memcpy(u, uri, ul);
	u[ul] = 0;
	while (ul > 8 && u[ul - 1] == '/')
		u[--ul] = 0;
	if (sbx_policy_check_url(u, w, sizeof w) < 0 || sl >= 64 || !word_ok(suite, sl, ".-") || !nc)
		return 0;
	if (l->n >= SBX_ARRAY_LEN(l->v)) {
		snprintf(why, wn, "more than %zu deb entries", SBX_ARRAY_LEN(l->v));
		return -1;
	}
	struct sbx_aptsrc_entry *e = &l->v[l->n];
	memset(e, 0, sizeof *e);
	snprintf(e->uri, sizeof e->uri, "%s", u);
	memcpy(e->suite, suite, sl);
	size_t o = 0;
	for (unsigned i = 0; i < nc; i++) {
		if (!word_ok(comps[i], cl[i], "-") || o + cl[i] + 1 >= sizeof e->components)
			return 0;
		if (o)
			e->components[o++] = ' ';
		memcpy(e->components + o, comps[i], cl[i]);
		o += cl[i];
	}
	if (bl) {
		if (bl >= sizeof e->signed_by || memchr(signed_by, '\n', bl) || signed_by[0] != '/')
			snprintf(e->signed_by, sizeof e->signed_by, "-"); /* inline keys, fingerprints: not ours */
		else
			memcpy(e->signed_by, signed_by, bl);
	}
	l->n++;
	return 0;
}

#define TOKS 40

/* "deb [opt=v ...] URI SUITE COMP..." per line; '#' starts a comment. */
static int parse_lines(const char *text, size_t n, struct sbx_aptsrc_list *l, char *why, size_t wn)
{
	size_t i = 0;
	while (i < n) {
		size_t e = i;
		while (e < n && text[e] != '\n')
			e++;
		const char *t[TOKS];
		size_t tl[TOKS];
		unsigned nt = 0;
		const char *sb = NULL;
		size_t sbl = 0;
		int in_opts = 0;
		for (size_t k = i; k < e;) {
			if (text[k] == '#')
				break;
			if (text[k] == ' ' || text[k] == '\t' || text[k] == '\r') {
				k++;
				continue;
			}
			size_t s = k;
			while (k < e && !strchr(" \t\r#", text[k]))
				k++;
			const char *w = text + s;
			size_t wl = k - s;
			if (nt == 1 && !in_opts && w[0] == '[') {
				in_opts = 1, w++, wl--;
			}
			if (in_opts) {
				if (wl && w[wl - 1] == ']')
					in_opts = 0, wl--;
				if (wl > 10 && !strncmp(w, "signed-by=", 10))
					sb = w + 10, sbl = wl - 10;
				continue;
			}
			if (nt >= TOKS) {
				snprintf(why, wn, "a line of more than %d words", TOKS);
				return -1;
			}
			t[nt] = w, tl[nt++] = wl;
		}
		if (in_opts) {
			snprintf(why, wn, "an option list without its ']'");
			return -1;
		}
		if (nt >= 4 && tl[0] == 3 && !strncmp(t[0], "deb", 3) &&
		    add_entry(l, t[1], tl[1], t[2], tl[2], t + 3, tl + 3, nt - 3, sb, sbl, why, wn) < 0)
			return -1;
		i = e + 1;
	}
	return 0;
}

/* deb822: stanzas of "Field: value" (continuation lines start with a
 * blank), blank lines between stanzas, '#' lines ignored. */
struct stanza {
	const char *f[5];
	size_t fl[5];
};
static const char *const fields[] = { "Types", "URIs", "Suites", "Components", "Signed-By", "Enabled" };

static int words(const char *s, size_t n, const char **w, size_t *wl, unsigned max)
{
	unsigned c = 0;
	for (size_t k = 0; k < n;) {
		if (strchr(" \t\r\n", s[k])) {
			k++;
			continue;
		}
		size_t b = k;
		while (k < n && !strchr(" \t\r\n", s[k]))
			k++;
		if (c == max)
			return -1;
		w[c] = s + b, wl[c++] = k - b;
	}
	return (int)c;
}

static int stanza_done(const char *const *f, const size_t *fl, struct sbx_aptsrc_list *l, char *why, size_t wn)
{
	const char *ty[8], *u[8], *su[8], *co[TOKS];
	size_t tyl[8], ul[8], sul[8], col[TOKS];
	if (!f[0] && !f[1])
		return 0;
	const char *en[1];
	size_t enl[1];
	if (f[5] && words(f[5], fl[5], en, enl, 1) == 1 && enl[0] == 2 && !strncasecmp(en[0], "no", 2))
		return 0;
	int nty = words(f[0], fl[0], ty, tyl, 8), nu = words(f[1], fl[1], u, ul, 8),
	    nsu = words(f[2], fl[2], su, sul, 8), nco = words(f[3], fl[3], co, col, TOKS);
	if (nty < 0 || nu < 0 || nsu < 0 || nco < 0) {
		snprintf(why, wn, "a stanza with too many values in a field");
		return -1;
	}
	int deb = 0;
	for (int i = 0; i < nty; i++)
		deb |= tyl[i] == 3 && !strncmp(ty[i], "deb", 3);
	const char *sb = f[4];
	size_t sbl = fl[4];
	while (sbl && strchr(" \t\r\n", sb[sbl - 1]))
		sbl--;
	while (sbl && strchr(" \t", *sb))
		sb++, sbl--;
	for (int a = 0; deb && a < nu; a++)
		for (int b = 0; b < nsu; b++)
			if (add_entry(l, u[a], ul[a], su[b], sul[b], co, col, (unsigned)nco, sb, sbl, why, wn) < 0)
				return -1;
	return 0;
}

static int parse_deb822(const char *text, size_t n, struct sbx_aptsrc_list *l, char *why, size_t wn)
{
	const char *f[6] = { 0 };
	size_t fl[6] = { 0 };
	int cur = -1; /* the field continuation lines belong to; -2: one not kept */
	size_t i = 0;
	while (i <= n) {
		size_t e = i;
		while (e < n && text[e] != '\n')
			e++;
		size_t len = e - i;
		const char *s = text + i;
		if (i == n || !len || (len == 1 && s[0] == '\r')) {
			if (stanza_done(f, fl, l, why, wn) < 0)
				return -1;
			memset(f, 0, sizeof f), memset(fl, 0, sizeof fl), cur = -1;
		} else if (s[0] == '#') {
			/* a comment */
		} else if (s[0] == ' ' || s[0] == '\t') {
			if (cur == -1) {
				snprintf(why, wn, "a continuation line with no field before it");
				return -1;
			}
			if (cur >= 0)
				fl[cur] = (size_t)(s + len - f[cur]);
		} else {
			const char *colon = memchr(s, ':', len);
			if (!colon) {
				snprintf(why, wn, "a line that is not 'Field: value'");
				return -1;
			}
			cur = -2;
			for (int k = 0; k < 6; k++)
				if ((size_t)(colon - s) == strlen(fields[k]) &&
				    !strncasecmp(s, fields[k], strlen(fields[k]))) {
					if (f[k]) {
						snprintf(why, wn, "field %s twice in a stanza", fields[k]);
						return -1;
					}
					f[k] = colon + 1, fl[k] = (size_t)(s + len - colon - 1), cur = k;
				}
		}
		if (i == n)
			break;
		i = e + 1;
	}
	return 0;
}

int sbx_aptsrc_parse(const char *text, size_t n, int deb822, struct sbx_aptsrc_list *l, char *why, size_t wn)
{
	if (memchr(text, 0, n)) {
		snprintf(why, wn, "a NUL byte");
		return -1;
	}
	return deb822 ? parse_deb822(text, n, l, why, wn) : parse_lines(text, n, l, why, wn);
}

/* ---- the template's suite ---- */

int sbx_aptsrc_suite(struct sbx_state *st, const struct sbx_template *t, char *suite, size_t n, struct sbx_err *err)
{
	struct sbx_template cur = *t;
	for (int depth = 0; depth < SBX_APTSRC_DEPTH; depth++) {
		_cleanup_close_ int d = open(cur.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		_cleanup_free_ char *txt = d < 0 ? NULL : sbx_read_small_at(d, "manifest.json", 1 << 20, NULL);
		json_t *m = txt ? json_loads(txt, JSON_REJECT_DUPLICATES, NULL) : NULL;
		if (!m)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the manifest of template %s@%s",
					   cur.ref, cur.version);
		const char *from = json_string_value(json_object_get(json_object_get(m, "spec"), "from"));
		const char *base = json_string_value(json_object_get(m, "base"));
		if (from && !strncmp(from, "debian:", 7) && word_ok(from + 7, strlen(from + 7), "") &&
		    strlen(from + 7) < n) {
			snprintf(suite, n, "%s", from + 7);
			json_decref(m);
			return 0;
		}
		char ref[200];
		snprintf(ref, sizeof ref, "%s", base && *base ? base : "");
		json_decref(m);
		if (!ref[0])
			return 1;
		struct sbx_err e2 = { 0 };
		if (sbx_template_find(st, ref, &cur, &e2) < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "template %s was built from %s, which is gone: its Debian suite is unknown",
					   t->ref, ref);
	}
	return 1;
}

/* ---- resolution ---- */

void sbx_aptsrc_keys_free(struct sbx_aptsrc_keys *k)
{
	for (unsigned i = 0; i < k->n; i++)
		free(k->data[i]);
	memset(k, 0, sizeof *k);
}

/* The host's sources: sources.list, then sources.list.d's *.list and
 * *.sources in name order (apt's own order). */
static int host_sources(const char *etc, struct sbx_aptsrc_list *l, struct sbx_err *err)
{
	char why[200], path[PATH_MAX];
	memset(l, 0, sizeof *l);
	_cleanup_close_ int d = open(etc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read the host's apt sources (%s)", etc);
	size_t len = 0;
	_cleanup_free_ char *main = sbx_read_small_at(d, "sources.list", SBX_APTSRC_FILE_MAX, &len);
	if (main && sbx_aptsrc_parse(main, len, 0, l, why, sizeof why) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s/sources.list: %s", etc, why);
	snprintf(path, sizeof path, "%s/sources.list.d", etc);
	struct dirent **ents = NULL;
	int ne = scandir(path, &ents, NULL, alphasort);
	int rc = 0;
	_cleanup_close_ int sd = ne < 0 ? -1 : open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < ne; i++) {
		const char *nm = ents[i]->d_name;
		size_t nl = strlen(nm);
		int is822 = nl > 8 && !strcmp(nm + nl - 8, ".sources"),
		    islist = nl > 5 && !strcmp(nm + nl - 5, ".list");
		char *txt = rc == 0 && sd >= 0 && (is822 || islist)
				    ? sbx_read_small_at(sd, nm, SBX_APTSRC_FILE_MAX, &len)
				    : NULL;
		if (txt && sbx_aptsrc_parse(txt, len, is822, l, why, sizeof why) < 0)
			rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s/%s: %s", path, nm, why);
		free(txt);
		free(ents[i]);
	}
	free(ents);
	return rc;
}

static int read_keyring(const char *tenant, const char *path, const char *key, struct sbx_aptsrc_keys *keys,
			struct sbx_limit_registry *r, struct sbx_err *err)
{
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 };
	char *buf = NULL;
	size_t n = 0;
	if (sbx_pkgrules_read_file(tenant, path, key, SBX_APTSRC_KEYRING_MAX, &buf, &n, &hp, err) < 0)
		return -1;
	if (!n || (n > 10 && !memcmp(buf, "-----BEGIN", 10))) {
		free(buf);
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   n ? "%s: %s is an armored key; gpgv takes a binary keyring (gpg --dearmor)"
				     : "%s: %s is empty",
				   key, path);
	}
	SHA2_CTX c;
	SHA256Init(&c);
	SHA256Update(&c, (const uint8_t *)buf, n);
	SHA256End(&c, r->keyring_sha256);
	snprintf(r->keyring, sizeof r->keyring, "%s", hp.real);
	keys->data[keys->n] = buf;
	keys->len[keys->n++] = n;
	return 0;
}

/* The suites of the host's sources that serve a template of suite:
 * suite itself and suite-NAME (updates, security, backports). */
static int serves(const char *entry, const char *suite)
{
	size_t n = strlen(suite);
	return !strncmp(entry, suite, n) && (!entry[n] || (entry[n] == '-' && entry[n + 1]));
}

static struct sbx_limit_registry *next_reg(struct sbx_limit_packages *k, struct sbx_aptsrc_keys *keys,
					   struct sbx_err *err)
{
	if (k->nreg >= SBX_ARRAY_LEN(k->reg) || keys->n >= SBX_ARRAY_LEN(keys->data)) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0,
			    "packages.registries: more than %zu registries once apt's suites are counted",
			    SBX_ARRAY_LEN(k->reg));
		return NULL;
	}
	struct sbx_limit_registry *r = &k->reg[k->nreg];
	memset(r, 0, sizeof *r);
	r->type = SBX_REG_APT;
	return r;
}

static int resolve_host(const char *suite, const char *etc, struct sbx_limit_packages *k, struct sbx_aptsrc_keys *keys,
			struct sbx_err *err)
{
	static struct sbx_aptsrc_list l; /* large; a create is one thread */
	if (host_sources(etc, &l, err) < 0)
		return -1;
	unsigned found = 0;
	for (unsigned i = 0; i < l.n; i++) {
		const struct sbx_aptsrc_entry *e = &l.v[i];
		if (!serves(e->suite, suite))
			continue;
		int dup = 0;
		for (unsigned j = 0; j < k->nreg; j++)
			dup |= k->reg[j].type == SBX_REG_APT && !strcmp(k->reg[j].url, e->uri) &&
			       !strcmp(k->reg[j].suite, e->suite);
		if (dup)
			continue;
		if (!strcmp(e->signed_by, "-"))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "packages.registries: the host's apt source %s %s gives its keys inline or "
					   "by fingerprint; sbx needs Signed-By as a keyring file",
					   e->uri, e->suite);
		struct sbx_limit_registry *r = next_reg(k, keys, err);
		if (!r)
			return -1;
		snprintf(r->url, sizeof r->url, "%s", e->uri);
		snprintf(r->suite, sizeof r->suite, "%s", e->suite);
		snprintf(r->components, sizeof r->components, "%s", e->components);
		r->host = 1;
		if (read_keyring(NULL, e->signed_by[0] ? e->signed_by : DEFAULT_KEYRING,
				 "packages.registries (the host's apt keyring)", keys, r, err) < 0)
			return -1;
		k->nreg++;
		found++;
	}
	if (!found)
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"packages.registries: {type: apt} serves the host's own archive for the template's "
			"suite, %s, and the host's apt sources (%s) name no archive for it; give the archive "
			"with url and keyring",
			suite, etc);
	return 0;
}

int sbx_aptsrc_resolve(struct sbx_state *st, const struct sbx_policy *p, const struct sbx_template *t,
		       const char *tenant, const char *etc, struct sbx_limit_packages *k, struct sbx_aptsrc_keys *keys,
		       struct sbx_err *err)
{
	char suite[64] = "";
	int have = -2;
	memset(keys, 0, sizeof *keys);
	for (unsigned i = 0; i < p->packages.nregistries; i++) {
		const struct sbx_policy_registry *g = &p->packages.registries[i];
		if (g->type != SBX_REG_APT)
			continue;
		if (have == -2 && (have = sbx_aptsrc_suite(st, t, suite, sizeof suite, err)) < 0)
			goto fail;
		if (have == 1) {
			sbx_err_set(err, SBX_EXIT_INVALID, 0,
				    "packages.registries: apt needs a template built from a Debian suite (from: "
				    "debian:SUITE, or a template built from one); %s is not",
				    t->ref);
			goto fail;
		}
		if (!g->url[0]) {
			if (resolve_host(suite, etc, k, keys, err) < 0)
				goto fail;
			continue;
		}
		struct sbx_limit_registry *r = next_reg(k, keys, err);
		if (!r)
			goto fail;
		snprintf(r->url, sizeof r->url, "%s", g->url);
		size_t ul = strlen(r->url);
		while (ul > 8 && r->url[ul - 1] == '/')
			r->url[--ul] = 0;
		snprintf(r->suite, sizeof r->suite, "%s", suite);
		snprintf(r->components, sizeof r->components, "main");
		if (read_keyring(tenant, g->keyring, "packages.registries keyring", keys, r, err) < 0)
			goto fail;
		k->nreg++;
	}
	char word[SBX_PKGPARAMS_APT_MAX + 2];
	if (sbx_pkgcache_apt_word(k, word, sizeof word) > SBX_PKGPARAMS_APT_MAX) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0,
			    "packages.registries: apt's suites and components take more than the %d bytes the guest is "
			    "told",
			    SBX_PKGPARAMS_APT_MAX);
		goto fail;
	}
	return 0;
fail:
	sbx_aptsrc_keys_free(keys);
	return -1;
}

int sbx_aptsrc_keys_save(int dfd, const struct sbx_aptsrc_keys *keys, struct sbx_err *err)
{
	for (unsigned i = 0; i < keys->n; i++) {
		char name[32];
		snprintf(name, sizeof name, SBX_APTSRC_KEYRING_FILE, i);
		if (sbx_atomic_write_at(dfd, name, keys->data[i], keys->len[i], 0644, err) < 0)
			return -1;
	}
	return 0;
}
