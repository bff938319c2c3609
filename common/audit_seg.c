/* The audit trail's files (audit.h): its segments, the trail as one
 * reader sees it under the shared lock, rotation, and retention. */
#include "audit.h"
#include "audit_int.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

/* ---- segments ----
 *
 * With audit.max_size (sbx.yaml) the log rotates: audit.log is renamed to
 * audit.log.<its last seq, 20 digits> and a new audit.log begins with an
 * audit.segment record naming it and its last seq and hash.  seq and prev
 * go on across files, so the trail is one chain: the segments in the order
 * of their names, then audit.log. */

static int seg_parse(const char *name, uint64_t *last)
{
	size_t pl = strlen(SEG_PREFIX);
	if (strncmp(name, SEG_PREFIX, pl) || strlen(name) != pl + SEG_DIGITS || !aud_all_digits(name + pl, SEG_DIGITS))
		return -1;
	*last = strtoull(name + pl, NULL, 10);
	return 0;
}

static int cmp_seg(const void *a, const void *b)
{
	return strcmp(a, b); /* fixed width: the names sort as their seqs */
}

static void segs_free(struct segs *g)
{
	free(g->name);
	g->name = NULL;
	g->n = 0;
}

/* The segments in LIB, oldest first (call under audit.lock). */
static int segs_list(struct sbx_state *st, struct segs *g, struct sbx_err *err)
{
	memset(g, 0, sizeof *g);
	int dfd = openat(st->lib_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list the audit trail's segments");
	}
	size_t cap = 0;
	struct dirent *de;
	uint64_t last;
	while ((de = readdir(d))) {
		if (seg_parse(de->d_name, &last) < 0)
			continue;
		if (g->n == cap) {
			cap = cap ? 2 * cap : 16;
			void *nn = realloc(g->name, cap * sizeof *g->name);
			if (!nn) {
				closedir(d);
				segs_free(g);
				return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM,
						   "cannot list the audit trail's segments");
			}
			g->name = nn;
		}
		snprintf(g->name[g->n++], SEG_NAME_MAX, "%s", de->d_name);
	}
	closedir(d);
	if (g->n)
		qsort(g->name, g->n, sizeof *g->name, cmp_seg);
	return 0;
}

void aud_trail_close(struct trail *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->fd[i] >= 0)
			close(t->fd[i]);
	free(t->fd);
	free(t->size);
	free(t->head);
	segs_free(&t->segs);
	memset(t, 0, sizeof *t);
}

const char *aud_trail_name(const struct trail *t, size_t i)
{
	return i < t->segs.n ? t->segs.name[i] : "audit.log";
}

static int open_ro(struct sbx_state *st, const char *name, int *fd, uint64_t *size, struct sbx_err *err)
{
	*fd = openat(st->lib_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (*fd < 0)
		return errno == ENOENT ? 1 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", name);
	struct stat sb;
	if (fstat(*fd, &sb) < 0 || !S_ISREG(sb.st_mode))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "%s is not a regular file", name);
	*size = (uint64_t)sb.st_size;
	return 0;
}

int aud_trail_open(struct sbx_state *st, struct trail *t, int want_head, struct sbx_err *err)
{
	memset(t, 0, sizeof *t);
	_cleanup_close_ int lk = openat(st->lib_fd, "audit.lock", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (lk < 0 && errno != ENOENT)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit lock");
	while (lk >= 0 && flock(lk, LOCK_SH) < 0)
		if (errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the audit log");
	if (segs_list(st, &t->segs, err) < 0)
		return -1;
	size_t cap = t->segs.n + 1;
	t->fd = malloc(cap * sizeof *t->fd);
	t->size = calloc(cap, sizeof *t->size);
	if (!t->fd || !t->size) {
		aud_trail_close(t);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the audit trail");
	}
	for (size_t i = 0; i < cap; i++) {
		int r = open_ro(st, aud_trail_name(t, i), &t->fd[t->n], &t->size[t->n], err);
		if (r < 0) {
			if (t->fd[t->n] >= 0)
				close(t->fd[t->n]);
			aud_trail_close(t);
			return -1;
		}
		if (r == 0)
			t->n++;
		/* a segment gone under a shared lock cannot be; audit.log
		 * missing is a trail not begun (or just rotated, for no one) */
		else if (i < t->segs.n) {
			aud_trail_close(t);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOENT, "an audit segment vanished while locked");
		} else
			break;
	}
	t->have_log = t->n > t->segs.n;
	if (want_head)
		t->head = aud_read_head(st, &t->head_n);
	return 0;
}

/* The chain's tail from the newest segment, for an audit.log that holds no
 * record yet (just rotated, or a crash between the rename and the first
 * record).  0: there is no segment. */
int aud_seg_tail(struct sbx_state *st, uint64_t *seq, uint8_t hash[HASH_LEN], char *name, struct sbx_err *err)
{
	struct segs g;
	if (segs_list(st, &g, err) < 0)
		return -1;
	if (!g.n) {
		segs_free(&g);
		return 0;
	}
	snprintf(name, SEG_NAME_MAX, "%s", g.name[g.n - 1]);
	segs_free(&g);
	_cleanup_close_ int fd = -1;
	uint64_t size, torn;
	_cleanup_free_ char *frag = NULL;
	size_t frag_n;
	if (open_ro(st, name, &fd, &size, err) != 0 ||
	    aud_read_tail(fd, size, seq, hash, &torn, &frag, &frag_n, err) < 0)
		return sbx_err_wrap(err, "cannot continue the audit trail from %s", name), -1;
	return 1;
}

int aud_write_segment_rec(int fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN], const char *name,
			  struct sbx_err *err)
{
	char hex[2 * HASH_LEN + 1];
	aud_hex_of(prev, hex);
	json_t *f = json_pack("{s:s, s:I, s:s}", "segment", name, "segment_last_seq", (json_int_t)*seq,
			      "segment_sha256", hex);
	if (!f)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot rotate the audit log");
	int rc = aud_write_rec(fd, size, seq, prev, "audit.segment", f, err);
	json_decref(f);
	return rc;
}

/* The log is full: made durable and renamed to a segment named by its
 * last seq; a new log begins with the record that carries its head.  The
 * directory sync of the new log's creation covers the rename too. */
int aud_rotate(struct sbx_state *st, int *fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN],
	       struct sbx_err *err)
{
	char name[SEG_NAME_MAX];
	snprintf(name, sizeof name, "%s%0*llu", SEG_PREFIX, SEG_DIGITS, (unsigned long long)*seq);
	if (aud_datasync(*fd, err) < 0)
		return -1;
	if (renameat2(st->lib_fd, "audit.log", st->lib_fd, name, RENAME_NOREPLACE) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot rotate the audit log to %s", name);
	int nfd = aud_open_log(st, err);
	if (nfd < 0)
		return -1;
	close(*fd);
	*fd = nfd;
	*size = 0;
	return aud_write_segment_rec(*fd, size, seq, prev, name, err);
}

int sbx_audit_retain(struct sbx_state *st, unsigned keep, int dry_run, void (*cb)(const char *segment, void *ctx),
		     void *ctx, struct sbx_err *err)
{
	if (keep == 0)
		return 0;
	_cleanup_close_ int lk = openat(st->lib_fd, "audit.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit lock");
	if (aud_lock(lk, LOCK_EX, err) < 0)
		return -1;
	struct segs g;
	if (segs_list(st, &g, err) < 0)
		return -1;
	if (g.n <= keep) {
		segs_free(&g);
		return 0;
	}
	size_t drop = g.n - keep;
	uint64_t through;
	seg_parse(g.name[drop - 1], &through);
	for (size_t i = 0; i < drop && cb; i++)
		cb(g.name[i], ctx);
	if (dry_run) {
		segs_free(&g);
		return (int)drop;
	}
	/* Recorded (durably) before anything goes: verify accepts a trail
	 * that starts after seq 1 only as far as this record says. */
	json_t *names = json_array();
	for (size_t i = 0; names && i < drop; i++)
		json_array_append_new(names, json_string(g.name[i]));
	json_t *f =
		names ? json_pack("{s:o, s:I, s:I, s:I}", "dropped", names, "dropped_through_seq", (json_int_t)through,
				  "kept_from_seq", (json_int_t)(through + 1), "keep", (json_int_t)keep)
		      : NULL;
	_cleanup_close_ int fd = -1;
	uint64_t size, seq;
	uint8_t prev[HASH_LEN];
	int rc = !f ? sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot record the audit retention")
		    : aud_begin_locked(st, &fd, &size, &seq, prev, err);
	if (rc == 0)
		rc = aud_write_rec(fd, &size, &seq, prev, "audit.retention", f, err);
	if (rc == 0)
		rc = aud_datasync(fd, err);
	json_decref(f);
	if (rc == 0)
		aud_write_head(st, seq, prev);
	for (size_t i = 0; rc == 0 && i < drop; i++)
		if (unlinkat(st->lib_fd, g.name[i], 0) < 0 && errno != ENOENT)
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove %s", g.name[i]);
	if (rc == 0)
		fsync(st->lib_fd);
	segs_free(&g);
	return rc < 0 ? -1 : (int)drop;
}
