/* The rootfs and image unpacker (see rootfs.h): the entry point, and the
 * images (docker save, OCI layout): their members, manifests, blobs and
 * config.  Each tar stream, the rootfs or a layer, is unpacked by
 * rootfs_tar.c. */
#include "rootfs.h"
#include "rootfs_tar.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <string.h>

#include <archive_entry.h>
#include <sha2.h>

#include "util.h"
/* ---- images ---------------------------------------------------------- */

struct member {
	char *name;
	char *link; /* a symlinked member: the member it names */
	int64_t size;
};

/* docker save links a layer it holds twice ("../ID/layer.tar"): the
 * member that symlink names, resolved by name alone, never leaving the
 * image's top.  -1 when it would. */
static int link_member(const char *member, const char *target, char *out)
{
	char buf[2 * NAME_MAX_LEN + 8];
	if (!target || !*target || *target == '/' || strlen(member) + strlen(target) + 5 > sizeof buf)
		return -1;
	snprintf(buf, sizeof buf, "%s/../%s", member, target);
	size_t o = 0;
	for (char *p = buf; *p;) {
		char *e = strchrnul(p, '/');
		size_t l = (size_t)(e - p);
		if (l == 2 && p[0] == '.' && p[1] == '.') {
			if (!o)
				return -1;
			while (o && out[o - 1] != '/')
				o--;
			if (o)
				o--;
		} else if (l && !(l == 1 && *p == '.')) {
			if (o + l + 2 > NAME_MAX_LEN)
				return -1;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, l);
			o += l;
		}
		p = *e ? e + 1 : e;
	}
	out[o] = 0;
	return o ? 0 : -1;
}

struct image {
	int fd;
	struct member *m;
	size_t n;
};

static void image_free(struct image *im)
{
	for (size_t i = 0; i < im->n; i++) {
		free(im->m[i].name);
		free(im->m[i].link);
	}
	free(im->m);
}

static bool is_hex64(const char *s, size_t n)
{
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Could this top-level name belong to a docker save or OCI layout? */
static bool image_name(const char *p)
{
	size_t l = strcspn(p, "/");
	return (l == 5 && !strncmp(p, "blobs", 5)) || is_hex64(p, l) ||
	       (!p[l] &&
		(!strcmp(p, "oci-layout") || !strcmp(p, "repositories") || (l > 5 && !strcmp(p + l - 5, ".json"))));
}

/* Is the tarball an image?  1 with its member list, 0 (a rootfs: it is
 * compressed or has a name an image does not), -1 with err.  Reading
 * headers of an uncompressed tar seeks over the data, so this is cheap;
 * a rootfs usually answers at its first entry. */
static int sniff(struct image *im, struct sbx_err *err)
{
	_cleanup_archive_ struct archive *a = sbx_rootfs_reader(true);
	if (!a)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "libarchive lacks tar, gzip, zstd or xz");
	if (lseek(im->fd, 0, SEEK_SET) < 0 || archive_read_open_fd(a, im->fd, CHUNK) != ARCHIVE_OK)
		return 0; /* the rootfs pass reports it */
	bool manifest = false, index = false;
	for (;;) {
		struct archive_entry *e;
		int h = archive_read_next_header(a, &e);
		if (h != ARCHIVE_OK)
			break;
		char p[NAME_MAX_LEN + 1];
		const char *why;
		if (sbx_rootfs_norm(archive_entry_pathname(e), p, &why) < 0)
			return 0;
		if (!*p)
			continue;
		if (archive_filter_count(a) > 1) {
			/* Images are read in place, so plain tar only; a
			 * compressed one would otherwise import as a root made
			 * of its blobs.  Its first member gives it away. */
			size_t l = strcspn(p, "/");
			if ((l == 5 && !strncmp(p, "blobs", 5)) || is_hex64(p, l) || !strcmp(p, "oci-layout") ||
			    !strcmp(p, "index.json") || !strcmp(p, "manifest.json"))
				return sbx_err_set(
					err, SBX_EXIT_INVALID, 0,
					"a compressed image tarball (it starts with %.80s): decompress it and "
					"import the .tar",
					p);
			return 0;
		}
		if (!image_name(p))
			return 0;
		char t[NAME_MAX_LEN + 1];
		bool is_link = archive_entry_filetype(e) == AE_IFLNK;
		if (is_link ? link_member(p, archive_entry_symlink(e), t) < 0
			    : archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e))
			continue;
		manifest |= !strcmp(p, "manifest.json");
		index |= !strcmp(p, "index.json");
		for (size_t i = 0; i < im->n; i++)
			if (!strcmp(im->m[i].name, p))
				return sbx_err_set(err, SBX_EXIT_INVALID, 0, "image member %s appears twice", p);
		if (im->n == MEMBERS_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "an image of more than %u files", MEMBERS_MAX);
		if (!(im->n & 63)) {
			struct member *m = realloc(im->m, (im->n + 64) * sizeof *m);
			if (!m)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
			im->m = m;
		}
		struct member *m = &im->m[im->n];
		*m = (struct member){ .name = strdup(p),
				      .link = is_link ? strdup(t) : NULL,
				      .size = archive_entry_size(e) };
		im->n++;
		if (!m->name || (is_link && !m->link))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	}
	return index ? 2 : manifest ? 1 : 0;
}

static const struct member *member_find(const struct image *im, const char *name)
{
	for (size_t i = 0; i < im->n; i++)
		if (!strcmp(im->m[i].name, name))
			return &im->m[i];
	return NULL;
}

/* An archive positioned at member name's data (the outer tar is plain,
 * so the walk there seeks). */
static struct archive *member_open(const struct image *im, const char *name, struct sbx_err *err)
{
	const struct member *m = member_find(im, name);
	if (!m) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "the image names %s, which it does not hold", name);
		return NULL;
	}
	if (m->link) { /* one hop, to a member that is a file */
		const struct member *t = member_find(im, m->link);
		if (!t || t->link) {
			sbx_err_set(err, SBX_EXIT_INVALID, 0,
				    "image member %s links to %s, which is not a file it holds", name, m->link);
			return NULL;
		}
		name = t->name;
	}
	struct archive *a = sbx_rootfs_reader(false);
	if (!a || lseek(im->fd, 0, SEEK_SET) < 0 || archive_read_open_fd(a, im->fd, CHUNK) != ARCHIVE_OK) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot reopen the image");
		if (a)
			archive_read_free(a);
		return NULL;
	}
	for (;;) {
		struct archive_entry *e;
		if (archive_read_next_header(a, &e) != ARCHIVE_OK)
			break;
		char p[NAME_MAX_LEN + 1];
		const char *why;
		if (sbx_rootfs_norm(archive_entry_pathname(e), p, &why) == 0 && !strcmp(p, name) &&
		    archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e))
			return a;
	}
	sbx_err_set(err, SBX_EXIT_INVALID, 0, "image member %s is unreadable", name);
	archive_read_free(a);
	return NULL;
}

/* sha256 (hex) of a member's bytes, and the bytes themselves into *buf
 * when buf (at most max of them, else 3). */
static int member_read(const struct image *im, const char *name, size_t max, char **buf, size_t *len, char hex[65],
		       struct sbx_err *err)
{
	_cleanup_archive_ struct archive *a = member_open(im, name, err);
	if (!a)
		return -1;
	SHA2_CTX h;
	SHA256Init(&h);
	_cleanup_free_ char *b = buf ? malloc(max + 1) : NULL;
	_cleanup_free_ char *chunk = malloc(CHUNK);
	if ((buf && !b) || !chunk)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	size_t n = 0;
	for (;;) {
		la_ssize_t r = archive_read_data(a, chunk, CHUNK);
		if (r == 0)
			break;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "image member %s: %s", name,
					   archive_error_string(a) ? archive_error_string(a) : "unreadable");
		SHA256Update(&h, (const uint8_t *)chunk, (size_t)r);
		if (buf) {
			if ((size_t)r > max - n)
				return sbx_err_set(err, SBX_EXIT_INVALID, 0, "image member %s is larger than %zu bytes",
						   name, max);
			memcpy(b + n, chunk, (size_t)r);
		}
		n += (size_t)r;
	}
	SHA256End(&h, hex);
	if (buf) {
		b[n] = 0;
		*buf = steal_pointer(&b);
		*len = n;
	}
	return 0;
}

static json_t *member_json(const struct image *im, const char *name, size_t max, const char *want, struct sbx_err *err)
{
	_cleanup_free_ char *b = NULL;
	size_t n;
	char hex[65];
	if (member_read(im, name, max, &b, &n, hex, err) < 0)
		return NULL;
	if (want && strcmp(want, hex)) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "image member %s: sha256 is %s, not %s (tampered?)", name, hex,
			    want);
		return NULL;
	}
	json_error_t je;
	json_t *j = json_loadb(b, n, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "image member %s: %d:%d: %s", name, je.line, je.column, je.text);
	return j;
}

/* A layer or config as the image names it, with the digest its bytes
 * must have ("" when the format gives none). */
struct blob {
	char name[NAME_MAX_LEN + 1];
	char sha[65];
};

/* "sha256:HEX" into blobs/sha256/HEX. */
static int oci_blob(json_t *desc, const char *what, struct blob *b, struct sbx_err *err)
{
	const char *d = json_string_value(json_object_get(desc, "digest"));
	if (!d || strncmp(d, "sha256:", 7) || !is_hex64(d + 7, strlen(d + 7)))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: digest missing or not sha256:<64 hex>", what);
	snprintf(b->name, sizeof b->name, "blobs/sha256/%s", d + 7);
	memcpy(b->sha, d + 7, 65);
	return 0;
}

/* A docker save path: digest-checked when its name carries one. */
static int docker_blob(json_t *v, const char *what, struct blob *b, struct sbx_err *err)
{
	const char *s = json_string_value(v), *why;
	if (!s || sbx_rootfs_norm(s, b->name, &why) < 0 || !*b->name)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "manifest.json: %s is not a member name", what);
	b->sha[0] = 0;
	const char *base = strrchr(b->name, '/');
	base = base ? base + 1 : b->name;
	size_t l = strlen(base);
	if (!strncmp(b->name, "blobs/sha256/", 13) && is_hex64(base, l))
		memcpy(b->sha, base, 65);
	else if (l == 69 && !strcmp(base + 64, ".json") && is_hex64(base, 64))
		memcpy(b->sha, base, 64), b->sha[64] = 0;
	return 0;
}

static bool platform_ok(json_t *desc)
{
	json_t *p = json_object_get(desc, "platform");
	if (!p)
		return true;
	const char *os = json_string_value(json_object_get(p, "os"));
	const char *ar = json_string_value(json_object_get(p, "architecture"));
	return os && ar && !strcmp(os, "linux") && !strcmp(ar, "amd64");
}

/* index.json (or a nested index) down to one image manifest, then its
 * config and layers. */
static int oci_layout(const struct image *im, struct blob *config, struct blob **layers, size_t *nl,
		      struct sbx_err *err)
{
	json_auto_t *j = member_json(im, "index.json", INDEX_JSON_MAX, NULL, err);
	if (!j)
		return -1;
	for (int depth = 0;; depth++) {
		json_t *ms = json_object_get(j, "manifests");
		if (ms) {
			if (depth > 4 || !json_is_array(ms))
				return sbx_err_set(err, SBX_EXIT_INVALID, 0, "an OCI index without manifests");
			json_t *pick = NULL, *m;
			size_t i;
			json_array_foreach (ms, i, m)
				if (!pick && json_is_object(m) && platform_ok(m))
					pick = m;
			struct blob b;
			if (!pick)
				return sbx_err_set(err, SBX_EXIT_INVALID, 0,
						   "the OCI index has no manifest for linux/amd64");
			if (oci_blob(pick, "index manifest", &b, err) < 0)
				return -1;
			json_t *n = member_json(im, b.name, INDEX_JSON_MAX, b.sha, err);
			if (!n)
				return -1;
			json_decref(j);
			j = n;
			continue;
		}
		json_t *ls = json_object_get(j, "layers");
		if (!json_is_array(ls) || oci_blob(json_object_get(j, "config"), "config", config, err) < 0)
			return ls ? -1 : sbx_err_set(err, SBX_EXIT_INVALID, 0, "an OCI manifest without layers");
		size_t n = json_array_size(ls);
		if (n > LAYERS_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "more than %u layers", LAYERS_MAX);
		if (!(*layers = calloc(n ? n : 1, sizeof **layers)))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		for (size_t i = 0; i < n; i++)
			if (oci_blob(json_array_get(ls, i), "layer", &(*layers)[i], err) < 0)
				return -1;
		*nl = n;
		return 0;
	}
}

static int docker_save(const struct image *im, struct blob *config, struct blob **layers, size_t *nl,
		       struct sbx_err *err)
{
	json_auto_t *j = member_json(im, "manifest.json", INDEX_JSON_MAX, NULL, err);
	if (!j)
		return -1;
	if (!json_is_array(j) || json_array_size(j) != 1)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "manifest.json must list exactly one image (save one image)");
	json_t *m = json_array_get(j, 0), *ls = json_object_get(m, "Layers");
	if (docker_blob(json_object_get(m, "Config"), "Config", config, err) < 0)
		return -1;
	if (!json_is_array(ls))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "manifest.json has no Layers");
	size_t n = json_array_size(ls);
	if (n > LAYERS_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "more than %u layers", LAYERS_MAX);
	if (!(*layers = calloc(n ? n : 1, sizeof **layers)))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (docker_blob(json_array_get(ls, i), "a layer", &(*layers)[i], err) < 0)
			return -1;
	*nl = n;
	return 0;
}

static bool env_name_ok(const char *s, size_t n)
{
	if (!n || n > ENV_NAME_MAX || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_'))
			return false;
	return true;
}

static bool clean_text(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* The config's Env, User and WorkingDir, checked: they reach every exec
 * of every session from the template. */
static int read_config(json_t *j, struct sbx_rootfs_config *cfg, struct sbx_err *err)
{
	json_t *c = json_object_get(j, "config");
	if (!json_is_object(j) || (c && !json_is_object(c) && !json_is_null(c)))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "the image config is not an object");
	json_t *env = json_object_get(c, "Env"), *user = json_object_get(c, "User"),
	       *wd = json_object_get(c, "WorkingDir");
	if (env && !json_is_null(env)) {
		if (!json_is_array(env) || json_array_size(env) > ENV_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "config Env is not a list of at most %u entries",
					   ENV_MAX);
		json_t *o = json_object(), *v;
		size_t i;
		if (!o)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		json_array_foreach (env, i, v) {
			const char *s = json_string_value(v), *eq = s ? strchr(s, '=') : NULL;
			if (!s || strlen(s) != json_string_length(v) || !eq || !env_name_ok(s, (size_t)(eq - s)) ||
			    strlen(eq + 1) > ENV_VAL_MAX) {
				json_decref(o);
				return sbx_err_set(
					err, SBX_EXIT_INVALID, 0,
					"config Env entry %zu is not NAME=value (a name of [A-Za-z_][A-Za-z0-9_]*, "
					"at most %u bytes; a value of at most %u)",
					i, ENV_NAME_MAX, ENV_VAL_MAX);
			}
			char name[ENV_NAME_MAX + 1];
			memcpy(name, s, (size_t)(eq - s));
			name[eq - s] = 0;
			json_object_set_new(o, name, json_string(eq + 1));
		}
		cfg->env = o;
	}
	const char *u = json_string_value(user), *w = json_string_value(wd);
	if ((user && !json_is_null(user) &&
	     (!u || json_string_length(user) >= sizeof cfg->user || !clean_text(u, json_string_length(user)))) ||
	    (wd && !json_is_null(wd) &&
	     (!w || json_string_length(wd) >= sizeof cfg->workdir || !clean_text(w, json_string_length(wd)) ||
	      (*w && *w != '/'))))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "config User or WorkingDir is not a short clean string (WorkingDir absolute)");
	snprintf(cfg->user, sizeof cfg->user, "%s", u ? u : "");
	snprintf(cfg->workdir, sizeof cfg->workdir, "%s", w ? w : "");
	return 0;
}

struct layer_src {
	struct archive *outer;
	char buf[CHUNK];
};

static la_ssize_t layer_read(struct archive *x, void *d, const void **buf)
{
	struct layer_src *s = d;
	*buf = s->buf;
	la_ssize_t n = archive_read_data(s->outer, s->buf, CHUNK);
	if (n < 0)
		archive_set_error(x, EINVAL, "the image's tar is truncated or damaged");
	return n;
}

static int apply_layer(struct unpack *u, const struct image *im, const struct blob *b, size_t i, size_t nl,
		       struct sbx_err *err)
{
	_cleanup_archive_ struct archive *outer = member_open(im, b->name, err);
	if (!outer)
		return -1;
	_cleanup_archive_ struct archive *a = sbx_rootfs_reader(true);
	if (!a)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "libarchive lacks tar, gzip, zstd or xz");
	snprintf(u->what, sizeof u->what, "layer %zu of %zu (%.120s): ", i + 1, nl, b->name);
	/* The layer's bytes come straight from the outer archive's entry. */
	_cleanup_free_ struct layer_src *s = malloc(sizeof *s);
	if (!s)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	s->outer = outer;
	if (archive_read_open(a, s, NULL, layer_read, NULL) != ARCHIVE_OK)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%snot a tar stream: %s", u->what,
				   archive_error_string(a) ? archive_error_string(a) : "?");
	u->layer = true;
	return sbx_rootfs_apply(u, a, err);
}

static int unpack_image(struct unpack *u, struct image *im, int kind, struct sbx_rootfs_config *cfg,
			struct sbx_err *err)
{
	struct blob config;
	_cleanup_free_ struct blob *layers = NULL;
	size_t nl = 0;
	if ((kind == 2 ? oci_layout(im, &config, &layers, &nl, err) : docker_save(im, &config, &layers, &nl, err)) < 0)
		return -1;
	snprintf(cfg->format, sizeof cfg->format, "%s", kind == 2 ? "oci" : "docker");
	json_auto_t *c = member_json(im, config.name, CONFIG_JSON_MAX, config.sha[0] ? config.sha : NULL, err);
	if (!c || read_config(c, cfg, err) < 0)
		return -1;
	/* docker save's layer.tar names carry no digest; the config's
	 * diff_ids (sha256 of each uncompressed layer) do. */
	json_t *diff = json_object_get(json_object_get(c, "rootfs"), "diff_ids");
	/* Every blob is checked before anything is written. */
	for (size_t i = 0; i < nl; i++) {
		const char *want = layers[i].sha;
		const char *d = json_string_value(json_array_get(diff, i));
		if (!*want && kind == 1 && json_array_size(diff) == nl && d && !strncmp(d, "sha256:", 7))
			want = d + 7;
		if (!*want)
			continue;
		char hex[65];
		if (member_read(im, layers[i].name, 0, NULL, NULL, hex, err) < 0)
			return -1;
		if (strcmp(hex, want))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "layer %zu (%s): sha256 is %s, not %s (tampered?)",
					   i + 1, layers[i].name, hex, want);
	}
	for (size_t i = 0; i < nl; i++)
		if (apply_layer(u, im, &layers[i], i, nl, err) < 0)
			return -1;
	return 0;
}

int sbx_rootfs_unpack(int root_dfd, const char *path, const struct sbx_rootfs_limits *lim,
		      struct sbx_rootfs_config *cfg, struct sbx_err *err)
{
	memset(cfg, 0, sizeof *cfg);
	/* O_NONBLOCK: a FIFO given as the archive must not hang the open. */
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		/* 3, not 4: a missing archive is bad input, 4 is for what sbx
		 * keeps (sessions, templates). */
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read %s", path);
	return sbx_rootfs_unpack_fd(root_dfd, fd, path, lim, cfg, err);
}

int sbx_rootfs_unpack_fd(int root_dfd, int fd, const char *path, const struct sbx_rootfs_limits *lim,
			 struct sbx_rootfs_config *cfg, struct sbx_err *err)
{
	memset(cfg, 0, sizeof *cfg);
	err->code = 0;
	err->msg[0] = 0;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot import %s: not a regular file", path);
	/* pax headers carry names in UTF-8, which libarchive converts to the
	 * current locale's charset: under "C" any non-ASCII name would fail
	 * the import.  UTF-8 for this thread only, while we read. */
	locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0), old = (locale_t)0;
	if (utf8)
		old = uselocale(utf8);
	struct unpack u = { .root = root_dfd, .lim = lim, .root_user = geteuid() == 0 };
	struct image im = { .fd = fd };
	int kind = sniff(&im, err), r;
	if (kind < 0) {
		r = -1;
	} else if (kind) {
		r = unpack_image(&u, &im, kind, cfg, err);
	} else {
		snprintf(cfg->format, sizeof cfg->format, "rootfs");
		struct archive *a = sbx_rootfs_reader(true);
		if (!a) {
			r = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "libarchive lacks tar, gzip, zstd or xz");
		} else if (lseek(fd, 0, SEEK_SET) < 0 || archive_read_open_fd(a, fd, CHUNK) != ARCHIVE_OK) {
			r = sbx_err_set(err, SBX_EXIT_INVALID, 0, "not a tar archive: %s",
					archive_error_string(a) ? archive_error_string(a) : "?");
		} else {
			r = sbx_rootfs_apply(&u, a, err);
		}
		if (a)
			archive_read_free(a);
	}
	sbx_rootfs_reset(&u);
	image_free(&im);
	if (utf8) {
		uselocale(old);
		freelocale(utf8);
	}
	if (r < 0) {
		sbx_rootfs_config_free(cfg);
		sbx_err_wrap(err, "cannot import %s", path);
		return -1;
	}
	err->code = 0;
	err->msg[0] = 0;
	if (u.dropped && u.stripped)
		sbx_err_set(err, SBX_EXIT_OK, 0,
			    "dropped %u device nodes, FIFOs or sockets; stripped setuid/setgid bits or file "
			    "capabilities from %u files",
			    u.dropped, u.stripped);
	else if (u.dropped)
		sbx_err_set(err, SBX_EXIT_OK, 0, "dropped %u device nodes, FIFOs or sockets", u.dropped);
	else if (u.stripped)
		sbx_err_set(err, SBX_EXIT_OK, 0, "stripped setuid/setgid bits or file capabilities from %u files",
			    u.stripped);
	return 0;
}

void sbx_rootfs_config_free(struct sbx_rootfs_config *cfg)
{
	if (cfg) {
		json_decref(cfg->env);
		cfg->env = NULL;
	}
}
