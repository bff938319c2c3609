/* The tar stream checker (tarcheck.h). */
#include "tarcheck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

/* ---- names seen in a stream --------------------------------------------
 * A trie of path components (parent index + component, hashed), so memory
 * grows with the bytes of the names, not with depth x length as a set of
 * whole prefixes would; a hostile stream of deep names cannot blow it up. */

enum kind { K_IMPLICIT = 1, K_DIR, K_FILE, K_LINK };

struct node {
	uint32_t parent, off;
	uint16_t len;
	uint8_t kind;
};

struct sbx_tar_check {
	struct sbx_tar_rules r;
	char top[SBX_XFER_COMPONENT_MAX + 1];
	struct node *nodes;
	uint32_t nnodes, cap;
	uint32_t *slots; /* node index + 1; 0 is empty */
	uint32_t nslots;
	char *pool;
	size_t pool_len, pool_cap;
	unsigned entries;
	struct sbx_tar_totals t;
};

#define NONE UINT32_MAX

static uint32_t hash(uint32_t parent, const char *s, size_t n)
{
	uint32_t h = 2166136261u ^ parent;
	h *= 16777619u;
	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)s[i];
		h *= 16777619u;
	}
	return h;
}

static uint32_t node_find(const struct sbx_tar_check *c, uint32_t parent, const char *s, size_t n)
{
	for (uint32_t i = hash(parent, s, n) & (c->nslots - 1);; i = (i + 1) & (c->nslots - 1)) {
		uint32_t v = c->slots[i];
		if (!v)
			return NONE;
		const struct node *nd = &c->nodes[v - 1];
		if (nd->parent == parent && nd->len == n && !memcmp(c->pool + nd->off, s, n))
			return v - 1;
	}
}

static int grow_slots(struct sbx_tar_check *c)
{
	uint32_t ns = c->nslots * 2;
	uint32_t *s = calloc(ns, sizeof *s);
	if (!s)
		return -1;
	for (uint32_t k = 1; k < c->nnodes; k++) {
		const struct node *nd = &c->nodes[k];
		uint32_t i = hash(nd->parent, c->pool + nd->off, nd->len) & (ns - 1);
		while (s[i])
			i = (i + 1) & (ns - 1);
		s[i] = k + 1;
	}
	free(c->slots);
	c->slots = s;
	c->nslots = ns;
	return 0;
}

static uint32_t node_add(struct sbx_tar_check *c, uint32_t parent, const char *s, size_t n, enum kind k)
{
	if (c->pool_len + n > SBX_XFER_NAMES_MAX)
		return NONE;
	if (c->nnodes == c->cap) {
		uint32_t nc = c->cap * 2;
		struct node *nn = realloc(c->nodes, nc * sizeof *nn);
		if (!nn)
			return NONE;
		c->nodes = nn;
		c->cap = nc;
	}
	if (c->pool_len + n > c->pool_cap) {
		size_t pc = c->pool_cap * 2 > c->pool_len + n ? c->pool_cap * 2 : c->pool_len + n;
		char *np = realloc(c->pool, pc);
		if (!np)
			return NONE;
		c->pool = np;
		c->pool_cap = pc;
	}
	if ((c->nnodes + 1) * 2 > c->nslots && grow_slots(c) < 0)
		return NONE;
	memcpy(c->pool + c->pool_len, s, n);
	uint32_t idx = c->nnodes++;
	c->nodes[idx] = (struct node){ .parent = parent, .off = (uint32_t)c->pool_len, .len = (uint16_t)n, .kind = k };
	c->pool_len += n;
	uint32_t i = hash(parent, s, n) & (c->nslots - 1);
	while (c->slots[i])
		i = (i + 1) & (c->nslots - 1);
	c->slots[i] = idx + 1;
	return idx;
}

struct sbx_tar_check *sbx_tar_check_new(const struct sbx_tar_rules *r)
{
	struct sbx_tar_check *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->r = *r;
	if (!c->r.max_entries)
		c->r.max_entries = SBX_XFER_ENTRIES_MAX;
	snprintf(c->top, sizeof c->top, "%s", r->top ? r->top : "");
	c->r.top = NULL;
	c->cap = 1024;
	c->nslots = 2048;
	c->pool_cap = 16384;
	c->nodes = malloc(c->cap * sizeof *c->nodes);
	c->slots = calloc(c->nslots, sizeof *c->slots);
	c->pool = malloc(c->pool_cap);
	if (!c->nodes || !c->slots || !c->pool) {
		sbx_tar_check_free(c);
		return NULL;
	}
	c->nodes[0] = (struct node){ .parent = NONE, .kind = K_DIR }; /* the destination */
	c->nnodes = 1;
	return c;
}

void sbx_tar_check_free(struct sbx_tar_check *c)
{
	if (!c)
		return;
	free(c->nodes);
	free(c->slots);
	free(c->pool);
	free(c);
}

void sbx_tar_check_totals(const struct sbx_tar_check *c, struct sbx_tar_totals *t)
{
	*t = c->t;
}

/* ---- one entry ---------------------------------------------------------- */

struct comps {
	const char *p[SBX_XFER_DEPTH_MAX];
	size_t len[SBX_XFER_DEPTH_MAX];
	unsigned n;
};

/* Split a member name into its components: "." and empty ones dropped
 * ("./a//b/" is "a/b", as every tar treats it); absolute names, ".." and
 * oversized names refused. */
static int split_name(const char *name, const char *shown, struct comps *cs, struct sbx_err *err)
{
	size_t total = strlen(name);
	cs->n = 0;
	if (total > SBX_XFER_NAME_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %.200s...: name longer than %u bytes",
				   shown, SBX_XFER_NAME_MAX);
	if (name[0] == '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: absolute name", shown);
	for (const char *s = name; *s;) {
		size_t l = strcspn(s, "/");
		if (l == 2 && !memcmp(s, "..", 2))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: '..' in the name", shown);
		if (l > SBX_XFER_COMPONENT_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "refused entry %s: a component longer than %u bytes", shown,
					   SBX_XFER_COMPONENT_MAX);
		if (l && !(l == 1 && s[0] == '.')) {
			if (cs->n == SBX_XFER_DEPTH_MAX)
				return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %.200s...: deeper than %u",
						   shown, SBX_XFER_DEPTH_MAX);
			cs->p[cs->n] = s;
			cs->len[cs->n++] = l;
		}
		s += l;
		while (*s == '/')
			s++;
	}
	return 0;
}

static void join(const struct comps *cs, unsigned n, char *out)
{
	char *o = out;
	for (unsigned i = 0; i < n; i++) {
		if (i)
			*o++ = '/';
		memcpy(o, cs->p[i], cs->len[i]);
		o += cs->len[i];
	}
	*o = 0;
}

/* A symlink's target, relative to the link's own directory, which lies
 * `depth` directories below the root the stream must stay in (-1: the
 * link is that root itself).  Only "../../a/b" shapes are allowed: ".."
 * after a normal component could climb out through a symlink that a.
 * later entry (or the destination) supplies, so it is refused rather than
 * reasoned about.  The normalized target is written to out. */
static int check_target(const char *name, const char *target, int depth, char *out, struct sbx_err *err)
{
	if (!target || !*target)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused symlink %s: empty target", name);
	if (strlen(target) > SBX_XFER_NAME_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused symlink %s: target too long", name);
	if (target[0] == '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused symlink %s -> %s: absolute target", name, target);
	int up = 0, down = 0;
	char *o = out;
	for (const char *s = target; *s;) {
		size_t l = strcspn(s, "/");
		if (l == 2 && !memcmp(s, "..", 2)) {
			if (down)
				return sbx_err_set(err, SBX_EXIT_INVALID, 0,
						   "refused symlink %s -> %s: '..' after a directory name", name,
						   target);
			up++;
		} else if (l && !(l == 1 && s[0] == '.')) {
			down++;
		} else {
			goto next;
		}
		if (o != out)
			*o++ = '/';
		memcpy(o, s, l);
		o += l;
	next:
		s += l;
		while (*s == '/')
			s++;
	}
	if (o == out)
		*o++ = '.';
	*o = 0;
	if (up > depth)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "refused symlink %s -> %s: it points outside the destination", name, target);
	return 0;
}

static const char *type_name(unsigned ft)
{
	switch (ft) {
	case AE_IFCHR: return "a character device";
	case AE_IFBLK: return "a block device";
	case AE_IFIFO: return "a FIFO";
	case AE_IFSOCK: return "a socket";
	default: return "an entry of unknown type";
	}
}

/* Walk the directories above the entry, recording the ones not seen yet;
 * refuse a path through a symlink or a file seen earlier in the stream
 * (symlink-then-file: "a -> /etc" then "a/passwd"). */
static int walk_parents(struct sbx_tar_check *c, const struct comps *cs, const char *name, uint32_t *parent,
			struct sbx_err *err)
{
	uint32_t p = 0;
	for (unsigned i = 0; i + 1 < cs->n; i++) {
		uint32_t k = node_find(c, p, cs->p[i], cs->len[i]);
		if (k == NONE)
			k = node_add(c, p, cs->p[i], cs->len[i], K_IMPLICIT);
		if (k == NONE)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: too many names in the stream",
					   name);
		if (c->nodes[k].kind == K_LINK)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "refused entry %s: it goes through a symlink earlier in the stream", name);
		if (c->nodes[k].kind == K_FILE)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "refused entry %s: it goes through a file earlier in the stream", name);
		p = k;
	}
	*parent = p;
	return 0;
}

static uint32_t lookup(const struct sbx_tar_check *c, const struct comps *cs)
{
	uint32_t p = 0;
	for (unsigned i = 0; i < cs->n && p != NONE; i++)
		p = node_find(c, p, cs->p[i], cs->len[i]);
	return p;
}

static unsigned sane_perm(const struct sbx_tar_check *c, unsigned ft, unsigned perm)
{
	/* No setuid, setgid or sticky bit in either direction; the owner can
	 * always read and write (and enter) what it receives. */
	perm &= 0777;
	perm |= ft == AE_IFDIR ? 0700 : 0600;
	if (c->r.host_modes)
		perm &= 0755;
	return perm;
}

int sbx_tar_check_entry(struct sbx_tar_check *c, struct archive_entry *in, struct archive_entry **out,
			struct sbx_err *err)
{
	*out = NULL;
	const char *raw = archive_entry_pathname(in);
	if (!raw)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused an entry without a usable name");
	if (++c->entries > c->r.max_entries)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: more than %u entries", raw,
				   c->r.max_entries);
	struct comps cs;
	if (split_name(raw, raw, &cs, err) < 0)
		return -1;
	const char *hl = archive_entry_hardlink(in);
	unsigned ft = archive_entry_filetype(in);
	if (hl)
		ft = AE_IFREG;
	else if (ft != AE_IFREG && ft != AE_IFDIR && ft != AE_IFLNK)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: %s", raw, type_name(ft));
	if (cs.n == 0) {
		if (ft == AE_IFDIR && !hl)
			return 0; /* "./": the destination itself, left as it is */
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: it names the destination itself", raw);
	}
	if (c->top[0] && (cs.len[0] != strlen(c->top) || memcmp(cs.p[0], c->top, cs.len[0])))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: not under %s", raw, c->top);
	uint32_t parent = 0;
	if (walk_parents(c, &cs, raw, &parent, err) < 0)
		return -1;

	char name[SBX_XFER_NAME_MAX + 1], link[SBX_XFER_NAME_MAX + 2];
	join(&cs, cs.n, name);
	enum kind k = ft == AE_IFDIR ? K_DIR : ft == AE_IFLNK ? K_LINK : K_FILE;
	int64_t size = 0;
	if (hl) {
		struct comps ts;
		if (split_name(hl, raw, &ts, err) < 0)
			return -1;
		uint32_t t = ts.n ? lookup(c, &ts) : NONE;
		if (t == NONE || c->nodes[t].kind != K_FILE)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "refused hard link %s -> %s: not a file earlier in the stream", raw, hl);
		join(&ts, ts.n, link);
	} else if (ft == AE_IFLNK) {
		int depth = (int)cs.n - 1 - (c->top[0] ? 1 : 0);
		if (check_target(raw, archive_entry_symlink(in), depth, link, err) < 0)
			return -1;
	} else if (ft == AE_IFREG) {
		size = archive_entry_size(in);
		if (size < 0 || (archive_entry_size_is_set(in) == 0))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: no size", raw);
		if ((uint64_t)size > c->r.max_bytes - c->t.bytes || c->t.bytes > c->r.max_bytes)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "refused entry %s: the copy would exceed %llu bytes (files.%s)", raw,
					   (unsigned long long)c->r.max_bytes,
					   c->r.cap_name ? c->r.cap_name : "max_transfer");
	}

	uint32_t self = node_find(c, parent, cs.p[cs.n - 1], cs.len[cs.n - 1]);
	if (self != NONE) {
		/* A directory may be named after files below it were; anything
		 * else twice is refused: replacing an entry (a directory by a
		 * symlink, a file by a link) is how a later entry retargets an
		 * earlier check. */
		if (k != K_DIR || (c->nodes[self].kind != K_IMPLICIT && c->nodes[self].kind != K_DIR))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: it appears twice", raw);
		c->nodes[self].kind = K_DIR;
	} else if (node_add(c, parent, cs.p[cs.n - 1], cs.len[cs.n - 1], k) == NONE) {
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "refused entry %s: too many names in the stream", raw);
	}

	struct archive_entry *e = archive_entry_new();
	if (!e)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot check the stream");
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, ft == AE_IFLNK ? AE_IFLNK : ft == AE_IFDIR ? AE_IFDIR : AE_IFREG);
	archive_entry_set_perm(e, ft == AE_IFLNK ? 0777 : sane_perm(c, ft, archive_entry_perm(in)));
	if (archive_entry_mtime_is_set(in))
		archive_entry_set_mtime(e, archive_entry_mtime(in), 0);
	if (c->r.set_owner) {
		archive_entry_set_uid(e, c->r.uid);
		archive_entry_set_gid(e, c->r.gid);
	}
	if (hl) {
		archive_entry_set_hardlink(e, link);
		archive_entry_set_size(e, 0);
		c->t.hardlinks++;
	} else if (ft == AE_IFLNK) {
		archive_entry_set_symlink(e, link);
		archive_entry_set_size(e, 0);
		c->t.symlinks++;
	} else if (ft == AE_IFDIR) {
		archive_entry_set_size(e, 0);
		c->t.dirs++;
	} else {
		archive_entry_set_size(e, size);
		c->t.bytes += (uint64_t)size;
		c->t.files++;
	}
	*out = e;
	return 1;
}

/* ---- whole streams ------------------------------------------------------ */

static int copy_data(struct archive *in, struct archive *out, const char *name, struct sbx_err *err)
{
	static __thread char buf[65536];
	for (;;) {
		la_ssize_t n = archive_read_data(in, buf, sizeof buf);
		if (n == 0)
			return 0;
		if (n < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "malformed tar stream in %s: %s", name,
					   archive_error_string(in));
		if (out && archive_write_data(out, buf, (size_t)n) != n)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, archive_errno(out), "cannot write %s: %s", name,
					   archive_error_string(out));
	}
}

int sbx_tar_filter(struct sbx_tar_check *c, struct archive *in, struct archive *out, struct sbx_err *err)
{
	for (;;) {
		struct archive_entry *raw;
		int r = archive_read_next_header(in, &raw);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r != ARCHIVE_OK) /* warnings too: fail closed */
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "malformed tar stream after %u entries: %s",
					   c->entries, archive_error_string(in));
		struct archive_entry *e;
		int ok = sbx_tar_check_entry(c, raw, &e, err);
		if (ok < 0)
			return -1;
		if (ok == 0) {
			archive_read_data_skip(in);
			continue;
		}
		const char *name = archive_entry_pathname(e);
		if (out && archive_write_header(out, e) != ARCHIVE_OK) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, archive_errno(out), "cannot write %s: %s", name,
				    archive_error_string(out));
			archive_entry_free(e);
			return -1;
		}
		r = archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e) ? copy_data(in, out, name, err)
											: 0;
		if (r == 0 && out && archive_write_finish_entry(out) != ARCHIVE_OK)
			r = sbx_err_set(err, SBX_EXIT_INTERNAL, archive_errno(out), "cannot write %s: %s", name,
					archive_error_string(out));
		archive_entry_free(e);
		if (r < 0)
			return -1;
	}
}
