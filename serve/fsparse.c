/* What the filesystem calls take from the client and from the guest
 * (files.h): pure functions over bytes, fuzzed. */
#include "files.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

const char *serve_fs_home(const char *user)
{
	return !strcmp(user, "root") ? "/root" : "/home/user";
}

int serve_fs_path(const char *in, size_t n, const char *home, char *out, size_t cap)
{
	if (memchr(in, 0, n) || cap < 2)
		return -1;
	/* What to clean: home and the rest, or the absolute path alone. */
	const char *parts[2] = { NULL, NULL };
	size_t lens[2] = { 0, 0 };
	if (n && in[0] == '/') {
		parts[0] = in;
		lens[0] = n;
	} else {
		parts[0] = home;
		lens[0] = strlen(home);
		if (n && in[0] == '~' && (n == 1 || in[1] == '/')) {
			in++;
			n--;
		}
		parts[1] = in;
		lens[1] = n;
	}
	size_t o = 0;
	out[o++] = '/';
	out[o] = 0;
	for (int k = 0; k < 2; k++) {
		const char *p = parts[k], *end = p ? p + lens[k] : NULL;
		while (p && p < end) {
			while (p < end && *p == '/')
				p++;
			const char *s = p;
			while (p < end && *p != '/')
				p++;
			size_t l = (size_t)(p - s);
			if (l == 0 || (l == 1 && s[0] == '.'))
				continue;
			if (l == 2 && s[0] == '.' && s[1] == '.') {
				while (o > 1 && out[o - 1] != '/')
					o--;
				if (o > 1)
					o--; /* the '/' before the dropped component */
				out[o] = 0;
				continue;
			}
			if (o + (o > 1) + l >= cap)
				return -1;
			if (o > 1)
				out[o++] = '/';
			memcpy(out + o, s, l);
			o += l;
			out[o] = 0;
		}
	}
	return 0;
}

/* A string field of args into out (cap bytes) as a path; absent is "". */
static int path_field(json_t *args, const char *k, const char *home, char *out, size_t cap, int need,
		      struct sbx_err *err)
{
	json_t *v = json_object_get(args, k);
	if (!v && !need) {
		out[0] = 0;
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    serve_fs_path(json_string_value(v), json_string_length(v), home, out, cap) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: expected a path of at most %zu bytes, without NUL", k,
				   cap - 1);
	return 0;
}

int serve_fs_args_decode(json_t *args, const char *user, int is_fs, struct serve_fs_args *a, struct sbx_err *err)
{
	static const char *const calls[] = { [SERVE_FS_STAT] = "stat",
					     [SERVE_FS_LIST] = "list",
					     [SERVE_FS_MKDIR] = "mkdir",
					     [SERVE_FS_MOVE] = "move",
					     [SERVE_FS_REMOVE] = "remove" };
	memset(a, 0, sizeof *a);
	if (!json_is_object(args))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "args: expected an object");
	const char *home = serve_fs_home(user);
	if (is_fs) {
		const char *c = json_string_value(json_object_get(args, "call"));
		for (size_t i = 1; c && i < SBX_ARRAY_LEN(calls); i++)
			if (calls[i] && !strcmp(c, calls[i]))
				a->call = (enum serve_fs_call)i;
		if (!a->call)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "args.call: not a filesystem call");
	}
	if (path_field(args, "path", home, a->path, sizeof a->path, 1, err) < 0 ||
	    path_field(args, "dest", home, a->dest, sizeof a->dest, a->call == SERVE_FS_MOVE, err) < 0)
		return -1;
	json_t *rec = json_object_get(args, "recursive");
	if (rec && !json_is_boolean(rec))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "recursive: expected true or false");
	a->recursive = json_is_true(rec);
	json_t *d = json_object_get(args, "depth");
	a->depth = 1;
	if (d && !json_is_null(d)) {
		if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > SERVE_FS_DEPTH_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "depth: expected an integer from 1 to %d",
					   SERVE_FS_DEPTH_MAX);
		if (json_integer_value(d) > 0) /* envd: 0 is 1 */
			a->depth = (unsigned)json_integer_value(d);
	}
	return 0;
}

json_t *serve_json_bytes(const char *s, size_t n)
{
	char *o = malloc(3 * n + 1);
	if (!o)
		return NULL;
	size_t k = 0;
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		unsigned c = p[i];
		size_t l = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
		int ok = l && i + l <= n && c != 0;
		uint32_t cp = l == 1 ? c : l == 2 ? c & 0x1f : l == 3 ? c & 0x0f : c & 0x07;
		for (size_t j = 1; ok && j < l; j++) {
			ok = (p[i + j] & 0xc0) == 0x80;
			cp = cp << 6 | (p[i + j] & 0x3f);
		}
		/* no overlong forms, no surrogates, nothing past U+10FFFF */
		if (ok && ((l == 2 && cp < 0x80) || (l == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
			   (l == 4 && (cp < 0x10000 || cp > 0x10ffff))))
			ok = 0;
		if (ok) {
			memcpy(o + k, p + i, l);
			k += l;
			i += l;
		} else {
			memcpy(o + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
		}
	}
	json_t *j = json_stringn(o, k);
	free(o);
	return j;
}

void serve_fs_perms(uint32_t mode, char out[24])
{
	size_t k = 0;
	/* Go's letters, in its order: d, L, D, p, S, u, g, c, t */
	if (S_ISDIR(mode))
		out[k++] = 'd';
	if (S_ISLNK(mode))
		out[k++] = 'L';
	if (S_ISBLK(mode) || S_ISCHR(mode))
		out[k++] = 'D';
	if (S_ISFIFO(mode))
		out[k++] = 'p';
	if (S_ISSOCK(mode))
		out[k++] = 'S';
	if (mode & S_ISUID)
		out[k++] = 'u';
	if (mode & S_ISGID)
		out[k++] = 'g';
	if (S_ISCHR(mode))
		out[k++] = 'c';
	if (mode & S_ISVTX)
		out[k++] = 't';
	if (!k)
		out[k++] = '-';
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		out[k++] = mode & (1u << (8 - i)) ? rwx[i] : '-';
	out[k] = 0;
}

/* A decimal (optionally negative) of at most 18 digits: no overflow. */
static int num(const char **p, const char *end, int neg_ok, int64_t *v)
{
	const char *s = *p;
	int neg = 0;
	if (neg_ok && s < end && *s == '-') {
		neg = 1;
		s++;
	}
	int64_t x = 0;
	int digits = 0;
	while (s < end && *s >= '0' && *s <= '9' && digits < 18) {
		x = x * 10 + (*s++ - '0');
		digits++;
	}
	if (!digits || (s < end && *s != ' '))
		return -1;
	*v = neg ? -x : x;
	*p = s < end ? s + 1 : s;
	return 0;
}

/* A user or group name: up to the next space, printable, at most 64. */
static int word(const char **p, const char *end, char *out, size_t cap)
{
	const char *s = *p;
	size_t l = 0;
	while (s + l < end && s[l] != ' ')
		l++;
	if (!l || l >= cap)
		return -1;
	for (size_t i = 0; i < l; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] == 0x7f)
			return -1;
	memcpy(out, s, l);
	out[l] = 0;
	*p = s + l < end ? s + l + 1 : s + l;
	return 0;
}

struct fields {
	uint32_t mode;
	int64_t size, uid, gid, mtime;
	char user[65], group[65];
};

/* "MODE_HEX SIZE UID GID MTIME USER GROUP" as stat -c prints it. */
static int parse_fields(const char *s, size_t n, struct fields *f)
{
	const char *p = s, *end = s + n;
	uint32_t m = 0;
	int digits = 0;
	for (; p < end && *p != ' ' && digits < 8; p++, digits++) {
		char c = *p;
		int v = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (v < 0)
			return -1;
		m = m << 4 | (uint32_t)v;
	}
	if (!digits || p >= end || *p != ' ')
		return -1;
	p++;
	f->mode = m;
	if (num(&p, end, 0, &f->size) < 0 || num(&p, end, 0, &f->uid) < 0 || num(&p, end, 0, &f->gid) < 0 ||
	    num(&p, end, 1, &f->mtime) < 0 || word(&p, end, f->user, sizeof f->user) < 0 ||
	    word(&p, end, f->group, sizeof f->group) < 0 || p != end)
		return -1;
	/* GNU stat says UNKNOWN for an id without a name; envd the number */
	if (!strcmp(f->user, "UNKNOWN"))
		snprintf(f->user, sizeof f->user, "%" PRId64, f->uid);
	if (!strcmp(f->group, "UNKNOWN"))
		snprintf(f->group, sizeof f->group, "%" PRId64, f->gid);
	return 0;
}

static json_t *entry_json(const struct fields *f, const char *path, size_t pl, const char *target, size_t tl)
{
	const char *type = S_ISREG(f->mode)   ? "FILE_TYPE_FILE"
			   : S_ISDIR(f->mode) ? "FILE_TYPE_DIRECTORY"
			   : S_ISLNK(f->mode) ? "FILE_TYPE_SYMLINK"
					      : "FILE_TYPE_UNSPECIFIED";
	size_t b = pl;
	while (b > 0 && path[b - 1] != '/')
		b--;
	char perms[24], when[40];
	serve_fs_perms(f->mode, perms);
	time_t t = (time_t)f->mtime;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || tm.tm_year < -1899 || tm.tm_year > 8099)
		snprintf(when, sizeof when, "1970-01-01T00:00:00Z");
	else
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *e =
		json_pack("{s:o, s:s, s:o, s:I, s:i, s:s, s:s, s:s, s:s}", "name",
			  b == pl ? serve_json_bytes("/", 1) : serve_json_bytes(path + b, pl - b), "type", type, "path",
			  serve_json_bytes(path, pl), "size", (json_int_t)f->size, "mode", (int)(f->mode & 0777),
			  "permissions", perms, "owner", f->user, "group", f->group, "modifiedTime", when);
	if (e && S_ISLNK(f->mode))
		json_object_set_new(e, "symlinkTarget", serve_json_bytes(target, tl));
	return e;
}

/* The next NUL-terminated token of [*p, end): its length, or -1. */
static ssize_t token(const char **p, const char *end, const char **t)
{
	const char *z = memchr(*p, 0, (size_t)(end - *p));
	if (!z)
		return -1;
	*t = *p;
	*p = z + 1;
	return z - *t;
}

json_t *serve_fs_parse(const char *buf, size_t n, const char *base, size_t max, char *real, size_t cap,
		       struct sbx_err *err)
{
	json_t *a = json_array();
	const char *p = buf, *end = buf + n;
	char *path = malloc(2 * SERVE_FS_PATH_MAX + 2);
	if (!a || !path) {
		json_decref(a);
		free(path);
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		return NULL;
	}
	if (real && cap)
		real[0] = 0;
	while (p < end) {
		const char *kind, *fs, *pp, *tg;
		ssize_t kl = token(&p, end, &kind);
		if (kl == 1 && kind[0] == 'R') {
			ssize_t l = token(&p, end, &pp);
			if (l <= 0 || pp[0] != '/' || !real || (size_t)l >= cap)
				goto bad;
			memcpy(real, pp, (size_t)l + 1);
			continue;
		}
		ssize_t fl, pl, tl;
		if (kl != 1 || kind[0] != 'E' || (fl = token(&p, end, &fs)) < 0 || (pl = token(&p, end, &pp)) <= 0 ||
		    (tl = token(&p, end, &tg)) < 0 || pl >= SERVE_FS_PATH_MAX || tl >= SERVE_FS_PATH_MAX)
			goto bad;
		struct fields f;
		if (parse_fields(fs, (size_t)fl, &f) < 0)
			goto bad;
		size_t l;
		if (base) { /* "./REL" under base */
			if (pl < 3 || pp[0] != '.' || pp[1] != '/')
				goto bad;
			int root = !strcmp(base, "/");
			l = (size_t)snprintf(path, 2 * SERVE_FS_PATH_MAX + 2, "%s%s%.*s", root ? "" : base, "/",
					     (int)(pl - 2), pp + 2);
		} else {
			if (pp[0] != '/')
				goto bad;
			memcpy(path, pp, (size_t)pl + 1);
			l = (size_t)pl;
		}
		if (json_array_size(a) >= max) {
			json_decref(a);
			free(path);
			sbx_err_set(err, SBX_EXIT_TEMPFAIL, EFBIG, "more than %zu entries", max);
			return NULL;
		}
		json_t *e = entry_json(&f, path, l, tg, (size_t)tl);
		if (!e || json_array_append_new(a, e) < 0)
			goto bad;
	}
	free(path);
	return a;
bad:
	json_decref(a);
	free(path);
	sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's answer is malformed");
	return NULL;
}

int serve_watch_record(const char *buf, size_t n, size_t *used, json_t **ev, struct sbx_err *err)
{
	static const struct {
		char c;
		const char *type;
	} types[] = { { 'C', "EVENT_TYPE_CREATE" },
		      { 'W', "EVENT_TYPE_WRITE" },
		      { 'R', "EVENT_TYPE_REMOVE" },
		      { 'N', "EVENT_TYPE_RENAME" },
		      { 'M', "EVENT_TYPE_CHMOD" } };
	*ev = NULL;
	const char *z = memchr(buf, 0, n < SERVE_WATCH_REC_MAX ? n : SERVE_WATCH_REC_MAX);
	if (!z) {
		if (n < SERVE_WATCH_REC_MAX)
			return 0;
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's watcher sent a record over %u bytes",
				   (unsigned)SERVE_WATCH_REC_MAX);
	}
	size_t l = (size_t)(z - buf);
	*used = l + 1;
	if (l == 1 && buf[0] == 'S') {
		*ev = json_pack("{s:b}", "start", 1);
	} else if (l >= 2 && buf[1] != '/') { /* a name relative to the directory */
		for (size_t i = 0; i < SBX_ARRAY_LEN(types); i++)
			if (buf[0] == types[i].c)
				*ev = json_pack("{s:o, s:s}", "name", serve_json_bytes(buf + 1, l - 1), "type",
						types[i].type);
	}
	if (!*ev)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's watcher sent a malformed record");
	return 1;
}
