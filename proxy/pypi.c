/* The package cache's PyPI routes (pkgcache.h): PEP 503 index pages,
 * parsed as they arrive and rewritten to name the cache, and the files
 * they name. */
#include "pkgc.h"
#include "policy.h"
#include "util.h"

#include <string.h>
#include <strings.h>

#include <libxml/tree.h>

#define LINKS_MAX 200000u          /* links kept from one index page */
#define LINK_BYTES_MAX (16u << 20) /* and the bytes they hold */

/* ---- PyPI index pages ------------------------------------------------------ */

struct link {
	char file[FILE_NAME_MAX + 1];
	char *url;
	char sha256[65]; /* "" when the index names none */
	char *requires_python;
	char *yanked; /* NULL: not yanked */
};

struct links {
	struct link *v;
	size_t n, cap;
	size_t bytes;   /* held by the links' strings */
	uint32_t *set;  /* open addressing over v by file name: index + 1, 0 empty */
	size_t set_cap; /* a power of two, at least twice n */
};

static void links_free(struct links *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].url);
		free(l->v[i].requires_python);
		free(l->v[i].yanked);
	}
	free(l->v);
	free(l->set);
	memset(l, 0, sizeof *l);
}

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The slot for name in l->set: where it is, or the empty one it would
 * take. */
static size_t set_find(const struct links *l, const char *name)
{
	size_t m = l->set_cap - 1, i = name_hash(name) & m;
	while (l->set[i] && strcmp(l->v[l->set[i] - 1].file, name))
		i = (i + 1) & m;
	return i;
}

static int set_grow(struct links *l)
{
	if (l->set_cap && (l->n + 1) * 2 <= l->set_cap)
		return 0;
	size_t nc = l->set_cap ? l->set_cap * 2 : 128;
	uint32_t *old = l->set;
	l->set = calloc(nc, sizeof *l->set);
	if (!l->set) {
		l->set = old;
		return -1;
	}
	l->set_cap = nc;
	for (size_t i = 0; i < l->n; i++)
		l->set[set_find(l, l->v[i].file)] = (uint32_t)(i + 1);
	free(old);
	return 0;
}

static int add_link(struct links *l, const char *base, const char *href, const char *rp, const char *yanked,
		    int has_yanked)
{
	if (l->n >= LINKS_MAX)
		return 0;
	char url[URL_MAX];
	if (pc_resolve_url(base, href, url, sizeof url) < 0)
		return 0; /* not a file we could fetch: leave it out */
	struct link k = { 0 };
	/* The file name is the URL path's last component. */
	const char *path_end = url + strcspn(url, "?");
	const char *slash = path_end;
	while (slash > url && slash[-1] != '/')
		slash--;
	if (pc_pct_decode(slash, (size_t)(path_end - slash), k.file, sizeof k.file) < 0 || !pc_filename_ok(k.file))
		return 0;
	const char *frag = strchr(href, '#');
	if (frag && !strncmp(frag, "#sha256=", 8) && pc_hex_ok(frag + 8, 64))
		snprintf(k.sha256, sizeof k.sha256, "%s", frag + 8);
	size_t more = strlen(url) + (rp ? strlen(rp) : 0) + (yanked ? strlen(yanked) : 0) + 3;
	if (l->bytes + more > LINK_BYTES_MAX)
		return 0; /* past the bound: the rest of the page is not offered */
	if (set_grow(l) < 0)
		return -1;
	size_t slot = set_find(l, k.file);
	if (l->set[slot])
		return 0; /* the first link for a name wins */
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 64;
		struct link *v = realloc(l->v, nc * sizeof *v);
		if (!v)
			return -1;
		l->v = v;
		l->cap = nc;
	}
	k.url = strdup(url);
	k.requires_python = rp ? strdup(rp) : NULL;
	k.yanked = has_yanked ? strdup(yanked ? yanked : "") : NULL;
	if (!k.url || (rp && !k.requires_python) || (has_yanked && !k.yanked)) {
		free(k.url);
		free(k.requires_python);
		free(k.yanked);
		return -1;
	}
	l->v[l->n++] = k;
	l->set[slot] = (uint32_t)l->n;
	l->bytes += more;
	return 0;
}

/* Every <a href> of a PEP 503 page, parsed by libxml2's HTML push parser
 * as the page arrives (entities decoded, malformed markup recovered), with
 * a SAX handler that keeps only the links: no tree is built, so memory is
 * the links (LINKS_MAX, LINK_BYTES_MAX) and the parser's own buffers. */
struct index_sax {
	struct links *l;
	char base[URL_MAX];
	int rc;
};

static void sax_start(void *ud, const xmlChar *name, const xmlChar **atts)
{
	struct index_sax *x = ud;
	if (x->rc < 0 || !name || xmlStrcasecmp(name, BAD_CAST "a") || !atts)
		return;
	const char *href = NULL, *rp = NULL, *y = NULL;
	int has_y = 0, has_href = 0, has_rp = 0;
	for (size_t i = 0; atts[i]; i += 2) {
		const char *k = (const char *)atts[i], *v = (const char *)atts[i + 1];
		if (!strcasecmp(k, "href") && !has_href)
			href = v, has_href = 1;
		else if (!strcasecmp(k, "data-requires-python") && !has_rp)
			rp = v, has_rp = 1;
		else if (!strcasecmp(k, "data-yanked") && !has_y)
			y = v, has_y = 1;
	}
	if (href)
		x->rc = add_link(x->l, x->base, href, rp, y, has_y);
}

static void sax_quiet(void *ud, const xmlError *e)
{
	(void)ud, (void)e; /* a broken page is recovered from, not reported */
}

static int index_begin(struct fetch *f, struct index_sax *x, const char *base)
{
	xmlSAXHandler sax;
	memset(&sax, 0, sizeof sax);
	sax.initialized = XML_SAX2_MAGIC;
	sax.startElement = sax_start;
	sax.serror = (xmlStructuredErrorFunc)sax_quiet;
	x->l = f->links;
	x->rc = 0;
	snprintf(x->base, sizeof x->base, "%s", base);
	f->sax = x;
	f->html = htmlCreatePushParserCtxt(&sax, x, NULL, 0, base, XML_CHAR_ENCODING_NONE);
	if (!f->html)
		return -1;
	htmlCtxtUseOptions(f->html, HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_RECOVER |
					    HTML_PARSE_NOBLANKS);
	return 0;
}

int pc_index_feed(struct fetch *f, const char *p, size_t n)
{
	if (!f->html) {
		if (!f->sax || index_begin(f, f->sax, f->effective) < 0) {
			f->oom = 1;
			return -1;
		}
	}
	while (n) {
		int k = n > (1u << 20) ? 1 << 20 : (int)n;
		htmlParseChunk(f->html, p, k, 0);
		p += k;
		n -= (size_t)k;
	}
	if (f->sax->rc < 0) {
		f->oom = 1;
		return -1;
	}
	return 0;
}

/* The end of the page: the last links out of the parser.  0, or -1. */
static int index_end(struct fetch *f)
{
	int rc = 0;
	if (f->html) {
		htmlParseChunk(f->html, NULL, 0, 1);
		rc = f->sax->rc;
		if (f->html->myDoc)
			xmlFreeDoc(f->html->myDoc);
		htmlFreeParserCtxt(f->html);
		f->html = NULL;
	}
	return rc;
}

static int parse_index(const char *html, size_t n, const char *base, struct links *out)
{
	struct index_sax x;
	struct fetch f = { .links = out, .sax = &x };
	snprintf(f.effective, sizeof f.effective, "%s", base);
	if (index_begin(&f, &x, base) < 0)
		return -1;
	int rc = n ? pc_index_feed(&f, html, n) : 0;
	return index_end(&f) < 0 || rc < 0 ? -1 : 0;
}

int sbx_pkgcache_index_links(const char *html, size_t n, const char *base, size_t *count)
{
	struct links l = { 0 };
	int rc = parse_index(html, n, base, &l);
	*count = l.n;
	links_free(&l);
	return rc;
}

static void sb_str(struct sbuf *b, const char *s)
{
	pc_sb_add(b, s, strlen(s));
}

static void sb_esc(struct sbuf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': sb_str(b, "&amp;"); break;
		case '<': sb_str(b, "&lt;"); break;
		case '>': sb_str(b, "&gt;"); break;
		case '"': sb_str(b, "&quot;"); break;
		case '\'': sb_str(b, "&#39;"); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				pc_sb_add(b, s, 1);
		}
	}
}

/* Fetch and parse the project's index from the registry.  0, or -1 with
 * the response already sent (a refusal or an error). */
static int load_index(struct conn *c, struct outcome *o, const char *reg_url, const char *project, struct links *l)
{
	char path[260], what[300];
	snprintf(path, sizeof path, "%s/", project);
	snprintf(what, sizeof what, "the index of %s", project);
	pc_join_url(c->upstream, sizeof c->upstream, reg_url, path);
	uint64_t max;
	if (pc_upstream_begin(c, o, what, &max) < 0)
		return -1;
	struct index_sax x;
	struct fetch f = {
		.url = c->upstream, .accept = "text/html", .fd = -1, .max = max, .budget = c, .links = l, .sax = &x
	};
	char msg[URL_MAX + 400];
	int frc = pc_fetch(&f);
	c->charged_up += f.bytes;
	int prc = index_end(&f);
	if (frc < 0) {
		links_free(l);
		if (pc_refuse_page_budget(c, o, &f, what) < 0)
			return -1;
		if (f.status == 404 || f.status == 410) {
			snprintf(msg, sizeof msg, "no project %s at registry %s", project, c->registry);
			return pc_refuse(c, o, 404, msg, 0), -1;
		}
		snprintf(msg, sizeof msg, "cannot fetch the index of %s from registry %s: %s", project, c->registry,
			 f.error);
		pc_diag(c, "%s (%s)", msg, c->upstream);
		return pc_refuse(c, o, 502, msg, 0), -1;
	}
	if (prc < 0) {
		links_free(l);
		snprintf(msg, sizeof msg, "the index of %s from registry %s does not parse", project, c->registry);
		return pc_refuse(c, o, 502, msg, 0), -1;
	}
	return 0;
}

static void version_from_file(const char *file, char *out, size_t n);

/* With a lock or pins for pypi: is this file of project in it?  Its
 * version (from its name) must be, and for a lock its index hash too. */
static int locked_link(const struct conn *c, const char *project, const struct link *k)
{
	const struct sbx_pkgrules *r = c->cfg->rules;
	if (!r || !r->t[SBX_REG_PYPI].locked)
		return 1;
	char ver[130];
	version_from_file(k->file, ver, sizeof ver);
	if (!ver[0] || !sbx_pkgrules_version(r, SBX_REG_PYPI, project, ver))
		return 0;
	return r->t[SBX_REG_PYPI].locked != 1 ||
	       (k->sha256[0] && sbx_pkgrules_file(r, SBX_REG_PYPI, project, ver, k->sha256));
}

static int pypi_index(struct conn *c, const char *reg_url, const char *project)
{
	struct outcome o = { 0 };
	struct links l = { 0 };
	if (load_index(c, &o, reg_url, project, &l) < 0)
		return 0;
	struct sbuf b = { 0 };
	sb_str(&b, "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
		   "<title>Links for ");
	sb_esc(&b, project);
	sb_str(&b, "</title></head><body><h1>Links for ");
	sb_esc(&b, project);
	sb_str(&b, "</h1>\n");
	for (size_t i = 0; i < l.n; i++) {
		const struct link *k = &l.v[i];
		if (c->cfg->pkg->require_hashes && !k->sha256[0])
			continue; /* it would be refused: do not offer it */
		if (!locked_link(c, project, k))
			continue; /* nor what the lock or the pins leave out */
		sb_str(&b, "<a href=\"/");
		sb_esc(&b, c->registry);
		sb_str(&b, "/files/");
		sb_esc(&b, project);
		sb_str(&b, "/");
		sb_esc(&b, k->file);
		if (k->sha256[0]) {
			sb_str(&b, "#sha256=");
			sb_str(&b, k->sha256);
		}
		sb_str(&b, "\"");
		if (k->requires_python) {
			sb_str(&b, " data-requires-python=\"");
			sb_esc(&b, k->requires_python);
			sb_str(&b, "\"");
		}
		if (k->yanked) {
			sb_str(&b, " data-yanked=\"");
			sb_esc(&b, k->yanked);
			sb_str(&b, "\"");
		}
		sb_str(&b, ">");
		sb_esc(&b, k->file);
		sb_str(&b, "</a><br>\n");
	}
	sb_str(&b, "</body></html>\n");
	links_free(&l);
	if (b.oom) {
		free(b.p);
		return pc_refuse(c, &o, 500, "out of memory", 0);
	}
	int rc = pc_serve_body(c, &o, "text/html; charset=utf-8", b.p, b.n);
	free(b.p);
	return rc;
}

/* The version in a file name: a wheel's second field, an sdist's part
 * after the project name. */
static void version_from_file(const char *file, char *out, size_t n)
{
	static const char *const ext[] = { ".whl", ".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".tgz", ".egg" };
	char f[FILE_NAME_MAX + 1];
	snprintf(f, sizeof f, "%s", file);
	out[0] = 0;
	size_t fl = strlen(f);
	for (size_t i = 0; i < SBX_ARRAY_LEN(ext); i++) {
		size_t el = strlen(ext[i]);
		if (fl > el && !strcasecmp(f + fl - el, ext[i])) {
			f[fl - el] = 0;
			if (i == 0) {
				char *d1 = strchr(f, '-'), *d2 = d1 ? strchr(d1 + 1, '-') : NULL;
				if (d1 && d2) {
					*d2 = 0;
					snprintf(out, n, "%s", d1 + 1);
				}
				return;
			}
			char *d = strrchr(f, '-');
			if (d)
				snprintf(out, n, "%s", d + 1);
			return;
		}
	}
}

static int pypi_file(struct conn *c, const char *reg_url, const char *project, const char *file)
{
	struct outcome o = { 0 };
	struct links l = { 0 };
	snprintf(c->file, sizeof c->file, "%s", file);
	version_from_file(file, c->version, sizeof c->version);
	if (load_index(c, &o, reg_url, project, &l) < 0)
		return 0;
	const struct link *k = NULL;
	for (size_t i = 0; i < l.n && !k; i++)
		if (!strcmp(l.v[i].file, file))
			k = &l.v[i];
	if (!k) {
		char msg[600];
		snprintf(msg, sizeof msg, "the index of %s at registry %s has no file %s", project, c->registry, file);
		links_free(&l);
		return pc_refuse(c, &o, 404, msg, 0);
	}
	if (!locked_link(c, project, k)) {
		char msg[900], src[400];
		snprintf(msg, sizeof msg, "%s: its hash (sha256:%s) is not one %s names for %s %s, in policy %s", file,
			 k->sha256[0] ? k->sha256 : "none given by the index",
			 pc_rules_source(c, SBX_REG_PYPI, src, sizeof src), project, c->version, pc_policy_name(c));
		links_free(&l);
		return pc_refuse(c, &o, 403, msg, 1);
	}
	struct want w = { 0 };
	if (k->sha256[0]) {
		snprintf(w.sha256, sizeof w.sha256, "%s", k->sha256);
		snprintf(w.key, sizeof w.key, "sha256-%s", k->sha256);
	}
	char url[URL_MAX];
	snprintf(url, sizeof url, "%s", k->url);
	links_free(&l);
	return pc_serve_file(c, &o, url, &w);
}

/* /pypi/N/simple/PROJECT/ and /pypi/N/files/PROJECT/FILE. */
int pc_route_pypi(struct conn *c, const char *reg_url, segment *seg, unsigned ns)
{
	struct outcome o = { 0 };
	static const char usage[] = "not a package cache URL: /pypi/N/simple/PROJECT/ or /pypi/N/files/PROJECT/FILE";
	char norm[210];
	if (ns < 4 || sbx_pep503_normalize(seg[3], norm, sizeof norm) < 0)
		return pc_refuse(c, &o, 404, usage, 0);
	snprintf(c->package, sizeof c->package, "%s", norm);
	if (!strcmp(seg[2], "simple") && ns == 4) {
		snprintf(c->kind, sizeof c->kind, "index");
		if (pc_rules_check(c, SBX_REG_PYPI, 0))
			return 0; /* before anything is fetched */
		if (c->head)
			return pc_refuse_head(c);
		return pypi_index(c, reg_url, norm);
	}
	if (!strcmp(seg[2], "files") && ns == 5 && pc_filename_ok(seg[4])) {
		snprintf(c->kind, sizeof c->kind, "file");
		snprintf(c->file, sizeof c->file, "%s", seg[4]);
		version_from_file(seg[4], c->version, sizeof c->version);
		if (pc_rules_check(c, SBX_REG_PYPI, 1))
			return 0;
		if (c->head)
			return pc_head_file(c);
		return pypi_file(c, reg_url, norm, seg[4]);
	}
	return pc_refuse(c, &o, 404, usage, 0);
}
