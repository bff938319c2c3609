/* The audit trail written (audit.h): one record appended under
 * audit.lock, a torn tail or a head ahead of the log repaired in the chain,
 * and made durable by a group commit (one fdatasync shared). */
#include "audit.h"
#include "audit_int.h"
#include "util.h"

#include "hostconf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

/* ---- appending ---- */

static int type_ok(const char *t)
{
	size_t n = strlen(t);
	if (n == 0 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_' || t[i] == '.'))
			return 0;
	return 1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The line for one record: seq, time and type first so a human reading
 * the log sees them, the caller's fields in key order, prev last.  jansson
 * keeps insertion order, so reading and re-serialising gives the same
 * bytes back. */
static char *format_rec(uint64_t seq, const char *type, json_t *fields, const uint8_t prev[HASH_LEN], size_t *len)
{
	char ts[40], hex[2 * HASH_LEN + 1];
	sbx_fmt_time(sbx_now_ns(), ts, sizeof ts);
	aud_hex_of(prev, hex);
	json_t *o = json_pack("{s:I, s:s, s:s}", "seq", (json_int_t)seq, "time", ts, "type", type);
	size_t nk = fields ? json_object_size(fields) : 0, i = 0;
	_cleanup_free_ const char **keys = calloc(nk + 1, sizeof *keys);
	if (!o || !keys) {
		json_decref(o);
		return NULL;
	}
	const char *k;
	json_t *v;
	if (fields) {
		json_object_foreach (fields, k, v)
			keys[i++] = k;
	}
	qsort(keys, nk, sizeof *keys, cmp_str);
	for (i = 0; i < nk; i++)
		json_object_set(o, keys[i], json_object_get(fields, keys[i]));
	json_object_set_new(o, "prev", json_string(hex));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (s)
		*len = strlen(s);
	return s;
}

/* One record, one write(): O_APPEND makes it land at the end, the lock
 * makes it the only writer, and a short write (disk full) is cut back so
 * the log never keeps half a record we know about. */
int aud_write_rec(int fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN], const char *type, json_t *fields,
		  struct sbx_err *err)
{
	size_t n;
	_cleanup_free_ char *s = format_rec(*seq + 1, type, fields, prev, &n);
	if (!s)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot format an audit record");
	if (n > SBX_AUDIT_RECORD_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "audit record of type %s is too large (%zu bytes, at most %d)", type, n,
				   SBX_AUDIT_RECORD_MAX);
	char *line = realloc(s, n + 1);
	if (!line)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot format an audit record");
	s = line;
	line[n] = '\n';
	ssize_t w;
	while ((w = write(fd, line, n + 1)) < 0 && errno == EINTR)
		;
	if (w != (ssize_t)(n + 1)) {
		int e = w < 0 ? errno : ENOSPC;
		if (ftruncate(fd, (off_t)*size) < 0) {
			/* verify will call it truncated; nothing more we can do */
		}
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot append to the audit log");
	}
	aud_hash_bytes(line, n, prev);
	*size += n + 1;
	++*seq;
	return 0;
}

/* The last complete record's seq and hash, from a bounded read of the
 * tail: a torn fragment (a crash mid-append) is at most one record, and so
 * is the line before it.  *torn is the offset where a fragment starts, or
 * the size when there is none. */
#define TAIL_SMALL 8192

/* want: the window to read; 1 when it was too small for the last line
 * (and the fragment after it), so the caller reads the full one. */
static int read_tail_win(int fd, uint64_t size, size_t want, uint64_t *seq, uint8_t hash[HASH_LEN], uint64_t *torn,
			 char **frag, size_t *frag_n, struct sbx_err *err)
{
	int small = want < 2 * SRC_CAP;
	*seq = 0;
	memset(hash, 0, HASH_LEN);
	*torn = size;
	*frag = NULL;
	*frag_n = 0;
	if (size == 0)
		return 0;
	size_t win = size < want ? (size_t)size : want;
	if (!win)
		return 0;
	uint64_t base = size - win;
	_cleanup_free_ char *b = malloc(win);
	if (!b)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the audit log");
	for (size_t got = 0; got < win;) {
		ssize_t r = pread(fd, b + got, win - got, (off_t)(base + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, r < 0 ? errno : EIO, "cannot read the audit log");
		got += (size_t)r;
	}
	size_t end = win; /* just past the last newline */
	if (b[win - 1] != '\n') {
		char *nl = memrchr(b, '\n', win);
		if (!nl && base && small)
			return 1;
		if (!nl && base)
			return sbx_err_set(
				err, SBX_EXIT_INTERNAL, 0,
				"the audit log ends in a line too long to be a record; run sbx-audit verify");
		end = nl ? (size_t)(nl - b) + 1 : 0;
		*torn = base + end;
		*frag_n = win - end;
		if (!(*frag = malloc(*frag_n)))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the audit log");
		memcpy(*frag, b + end, *frag_n);
	}
	if (end == 0 && base == 0)
		return 0;
	char *nl = end >= 2 ? memrchr(b, '\n', end - 1) : NULL;
	if (!nl && base && small) {
		free(*frag);
		*frag = NULL;
		*frag_n = 0;
		return 1;
	}
	if (!nl && base)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				   "the audit log's last record is too long; run sbx-audit verify");
	size_t start = nl ? (size_t)(nl - b) + 1 : 0;
	uint8_t prev[HASH_LEN];
	const char *why;
	json_t *o = aud_parse_rec(b + start, end - 1 - start, seq, prev, &why);
	if (!o)
		return sbx_err_set(
			err, SBX_EXIT_INTERNAL, 0,
			"cannot continue the audit log: its last record is corrupt (%s); run sbx-audit verify", why);
	json_decref(o);
	aud_hash_bytes(b + start, end - 1 - start, hash);
	return 0;
}

/* Most records are a few hundred bytes: read a small tail first, and the
 * full window (two records of the largest size) only when it needs it. */
int aud_read_tail(int fd, uint64_t size, uint64_t *seq, uint8_t hash[HASH_LEN], uint64_t *torn, char **frag,
		  size_t *frag_n, struct sbx_err *err)
{
	int r = read_tail_win(fd, size, TAIL_SMALL, seq, hash, torn, frag, frag_n, err);
	if (r != 1)
		return r;
	return read_tail_win(fd, size, 2 * SRC_CAP, seq, hash, torn, frag, frag_n, err);
}

/* A crash tore the last append; its caller never saw success.  Cut it
 * off so the chain can go on, and say so in the chain itself. */
static int repair_torn(int fd, uint64_t *size, uint64_t torn, const char *frag, size_t frag_n, uint64_t *seq,
		       uint8_t prev[HASH_LEN], struct sbx_err *err)
{
	if (torn >= *size)
		return 0;
	if (ftruncate(fd, (off_t)torn) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot repair the audit log's torn tail");
	*size = torn;
	uint8_t fh[HASH_LEN];
	char hex[2 * HASH_LEN + 1];
	aud_hash_bytes(frag, frag_n, fh);
	aud_hex_of(fh, hex);
	json_t *rf = json_pack("{s:s, s:I, s:s}", "reason", "torn", "discarded_bytes", (json_int_t)frag_n,
			       "discarded_sha256", hex);
	if (!rf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot repair the audit log");
	int rc = aud_write_rec(fd, size, seq, prev, "audit.repair", rf, err);
	json_decref(rf);
	return rc;
}

/* audit.head is written only after the log is durable, so it is never
 * ahead of the log's tail nor different from it at the same seq, unless
 * records were removed or rewritten (or an old copy restored).  Continuing
 * silently would bury that; record it in the chain instead of refusing,
 * so auditing does not stop the sandboxes. */
static int repair_head(struct sbx_state *st, int fd, uint64_t *size, uint64_t tail_seq,
		       const uint8_t tail_hash[HASH_LEN], uint64_t *seq, uint8_t prev[HASH_LEN], struct sbx_err *err)
{
	size_t hn;
	_cleanup_free_ char *h = aud_read_head(st, &hn);
	uint64_t hseq;
	uint8_t hh[HASH_LEN];
	if (!h || aud_parse_head(h, hn, &hseq, hh) < 0)
		return 0;
	if (hseq < tail_seq || (hseq == tail_seq && !memcmp(hh, tail_hash, HASH_LEN)))
		return 0;
	char hex[2 * HASH_LEN + 1];
	aud_hex_of(hh, hex);
	json_t *rf = json_pack("{s:s, s:I, s:s, s:I}", "reason", "head-mismatch", "head_seq", (json_int_t)hseq,
			       "head_sha256", hex, "log_seq", (json_int_t)tail_seq);
	if (!rf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot repair the audit log");
	int rc = aud_write_rec(fd, size, seq, prev, "audit.repair", rf, err);
	json_decref(rf);
	return rc;
}

static int check_fields(const char *type, json_t *fields, struct sbx_err *err)
{
	if (!type_ok(type))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid audit event type '%.80s'", type);
	if (fields && !json_is_object(fields))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "audit fields of %s are not a JSON object", type);
	static const char *const reserved[] = { "seq", "time", "type", "prev" };
	for (size_t i = 0; fields && i < SBX_ARRAY_LEN(reserved); i++)
		if (json_object_get(fields, reserved[i]))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "audit fields of %s must not set \"%s\"", type,
					   reserved[i]);
	return 0;
}

/* ---- durability: one fdatasync, shared ----
 *
 * A record is durable once an fdatasync of the log began after its write()
 * returned.  Appenders write under LIB/audit.lock (exclusive), then sync
 * under LIB/audit.sync (group commit): each takes a ticket (a counter of
 * records written, kept in audit.sync's bytes) while it holds the append
 * lock; whoever gets the sync lock first reads the latest ticket, syncs once
 * for every record written so far, and publishes that ticket as synced; an
 * appender whose ticket is already synced returns without a syscall to the
 * disk.  The counters live only in the page cache: they carry this boot's
 * ID, and after a reboot (or a mangled file) they start again at 0, as no
 * appender of an earlier boot can still be waiting.
 *
 * audit.head is written by the syncing appender after the sync, through a
 * rename but without an fsync of its own: after a crash it may be behind
 * the log (or missing), never ahead of what is durable.  The next append
 * continues from the log's own last record; verify accepts a head that is
 * behind.  The directory is synced only when the log is created. */

#define SYNC_MAGIC "sbxasyn1"

struct sync_page {
	char magic[8];
	char boot[40];
	uint64_t written;  /* tickets handed out (under audit.lock) */
	uint64_t synced;   /* every ticket <= this is durable (under audit.sync) */
	uint64_t last_seq; /* the record of ticket `written`, for audit.head */
	uint8_t last_hash[HASH_LEN];
};

static const char *boot_id(void)
{
	static char id[40];
	static int done;
	if (!done) {
		int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
		ssize_t r = fd >= 0 ? read(fd, id, sizeof id - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (r < 36)
			memset(id, 0, sizeof id);
		else
			id[36] = 0;
		done = 1;
	}
	return id[0] ? id : NULL;
}

static int sync_read(int fd, struct sync_page *pg)
{
	ssize_t r;
	while ((r = pread(fd, pg, sizeof *pg, 0)) < 0 && errno == EINTR)
		;
	const char *b = boot_id();
	return r == (ssize_t)sizeof *pg && b && !memcmp(pg->magic, SYNC_MAGIC, 8) &&
			       !strncmp(pg->boot, b, sizeof pg->boot)
		       ? 0
		       : -1;
}

static int sync_write(int fd, const struct sync_page *pg)
{
	ssize_t w;
	while ((w = pwrite(fd, pg, sizeof *pg, 0)) < 0 && errno == EINTR)
		;
	return w == (ssize_t)sizeof *pg ? 0 : -1;
}

/* The sync file, or -1: then every appender syncs for itself (slower,
 * never less durable). */
static int sync_open(struct sbx_state *st)
{
	if (!boot_id())
		return -1;
	int fd = openat(st->lib_fd, "audit.sync", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat sb;
	if (fd >= 0 && (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Under audit.lock: this record's ticket, or 0 when there is no sync file
 * to share (the caller then syncs alone). */
static uint64_t sync_ticket(int sfd, uint64_t seq, const uint8_t hash[HASH_LEN])
{
	struct sync_page pg;
	if (sfd < 0)
		return 0;
	if (sync_read(sfd, &pg) < 0) {
		/* First use in this boot: nobody of this boot holds a ticket,
		 * so nobody is syncing against these counters either. */
		memset(&pg, 0, sizeof pg);
		memcpy(pg.magic, SYNC_MAGIC, 8);
		snprintf(pg.boot, sizeof pg.boot, "%s", boot_id());
	}
	pg.written++;
	pg.last_seq = seq;
	memcpy(pg.last_hash, hash, HASH_LEN);
	return sync_write(sfd, &pg) < 0 ? 0 : pg.written;
}

/* audit.head without an fsync.  In place, one pwrite, when the head there
 * is of the checked form and no longer than this one (seqs only grow): a
 * rename allocates an inode per append, and under the churn of sessions
 * ext4's search for a free one took more of an append than its write.
 * A reader racing the pwrite may see a mix of the two heads, which the
 * check rejects (aud_read_head reads again).  Otherwise (none yet, the
 * older form, a longer head) by a rename, whole for any reader.  One
 * writer at a time in the usual case (the syncing appender, under
 * audit.sync); a rotation's write beside it ends with either head whole. */
void aud_write_head(struct sbx_state *st, uint64_t seq, const uint8_t hash[HASH_LEN])
{
	char head[AUD_HEAD_MAX + 1], cur[AUD_HEAD_MAX + 1];
	size_t hn = aud_format_head(seq, hash, head);
	_cleanup_close_ int fd = openat(st->lib_fd, "audit.head", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	struct stat sb;
	uint64_t cs;
	uint8_t ch[HASH_LEN];
	ssize_t r;
	if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size <= hn &&
	    (r = pread(fd, cur, sizeof cur, 0)) > 0 && aud_parse_head(cur, (size_t)r, &cs, ch) == 1 &&
	    pwrite(fd, head, hn, 0) == (ssize_t)hn)
		return;
	int tfd = openat(st->lib_fd, ".audit.head.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (tfd < 0)
		return;
	int bad = sbx_write_all(tfd, head, hn) < 0;
	close(tfd);
	if (bad || renameat(st->lib_fd, ".audit.head.tmp", st->lib_fd, "audit.head") < 0)
		unlinkat(st->lib_fd, ".audit.head.tmp", 0);
}

int aud_datasync(int fd, struct sbx_err *err)
{
	while (fdatasync(fd) < 0)
		if (errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot sync the audit log");
	return 0;
}

int aud_lock(int fd, int how, struct sbx_err *err)
{
	while (flock(fd, how) < 0)
		if (errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the audit log");
	return 0;
}

/* After the record of ticket t was written and audit.lock released: make
 * it durable, by our own fdatasync or by one that began after it. */
static int group_commit(struct sbx_state *st, int lk, int fd, int sfd, uint64_t t, uint64_t seq,
			const uint8_t hash[HASH_LEN], struct sbx_err *err)
{
	if (t == 0) {
		if (aud_datasync(fd, err) < 0)
			return -1;
		aud_write_head(st, seq, hash);
		return 0;
	}
	if (aud_lock(sfd, LOCK_EX, err) < 0)
		return -1;
	struct sync_page pg;
	if (sync_read(sfd, &pg) == 0 && pg.synced >= t)
		return 0; /* a sync that began after our write covered it */
	/* Lead: every record written so far is in the page cache of this
	 * log (a rotation syncs the old one before renaming it), so one
	 * fdatasync covers them all.  Read the counters without a writer
	 * in the middle of them. */
	if (aud_lock(lk, LOCK_SH, err) < 0)
		return -1;
	int have = sync_read(sfd, &pg) == 0 && pg.written >= t;
	/* Records after a rotation are in the new log, not in ours: sync
	 * the log as it is now (the rotation synced the old one). */
	_cleanup_close_ int cur = -1;
	struct stat a, b;
	if (fstat(fd, &a) == 0 && fstatat(st->lib_fd, "audit.log", &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (a.st_ino != b.st_ino || a.st_dev != b.st_dev) && S_ISREG(b.st_mode))
		cur = openat(st->lib_fd, "audit.log", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	flock(lk, LOCK_UN);
	if (aud_datasync(cur >= 0 ? cur : fd, err) < 0)
		return -1;
	if (!have) { /* the counters were reset under us: cover our own */
		aud_write_head(st, seq, hash);
		return 0;
	}
	aud_write_head(st, pg.last_seq, pg.last_hash);
	struct sync_page now;
	if (sync_read(sfd, &now) == 0) {
		if (now.synced < pg.written)
			now.synced = pg.written;
		sync_write(sfd, &now);
	}
	return 0;
}

/* The log, opened for appending; made (and its directory synced, so the
 * name is as durable as the records) when it does not exist yet. */
int aud_open_log(struct sbx_state *st, struct sbx_err *err)
{
	int fd = openat(st->lib_fd, "audit.log", O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(st->lib_fd, "audit.log", O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			    0600);
		if (fd >= 0 && fsync(st->lib_fd) < 0) {
			close(fd);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot sync the audit log's directory");
		}
	}
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot open the audit log");
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the audit log is not a regular file");
	}
	return fd;
}

/* sbx.yaml's audit: settings, read again only when the file changed (an
 * append is on every exec's path), max_size its default when unset.  A
 * file that does not parse rotates nothing (max_size 0): the trail goes on
 * in one file rather than stop. */
static void audit_conf(struct sbx_hostconf_audit *out)
{
	static struct {
		int valid;
		dev_t dev;
		ino_t ino;
		struct timespec mtime;
		off_t size;
		struct sbx_hostconf_audit a;
	} c;
	char path[600];
	struct stat sb;
	memset(out, 0, sizeof *out);
	if (stat(sbx_hostconf_path(path, sizeof path), &sb) < 0) {
		c.valid = 0;
		out->max_size = SBX_AUDIT_MAX_SIZE_DEFAULT;
		return;
	}
	if (!c.valid || c.dev != sb.st_dev || c.ino != sb.st_ino || c.size != sb.st_size ||
	    c.mtime.tv_sec != sb.st_mtim.tv_sec || c.mtime.tv_nsec != sb.st_mtim.tv_nsec) {
		struct sbx_hostconf *hc = malloc(sizeof *hc);
		memset(&c.a, 0, sizeof c.a);
		if (hc && sbx_hostconf_load(hc, NULL) == 0) {
			c.a = hc->audit;
			if (!c.a.max_size)
				c.a.max_size = SBX_AUDIT_MAX_SIZE_DEFAULT;
		}
		free(hc);
		c.valid = 1;
		c.dev = sb.st_dev;
		c.ino = sb.st_ino;
		c.size = sb.st_size;
		c.mtime = sb.st_mtim;
	}
	*out = c.a;
}

/* Under audit.lock: the log open, its torn tail cut, a head ahead of it
 * recorded, the chain's tail in seq/prev; rotated first when it reached
 * max_size. */
int aud_begin_locked(struct sbx_state *st, int *fdp, uint64_t *sizep, uint64_t *seqp, uint8_t prev[HASH_LEN],
		     struct sbx_err *err)
{
	int fd = aud_open_log(st, err);
	if (fd < 0)
		return -1;
	*fdp = fd;
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit log");
	uint64_t size = (uint64_t)sb.st_size, seq, torn;
	_cleanup_free_ char *frag = NULL;
	size_t frag_n;
	if (aud_read_tail(fd, size, &seq, prev, &torn, &frag, &frag_n, err) < 0)
		return -1;
	char seg[SEG_NAME_MAX];
	int fresh = 0;
	if (seq == 0) { /* no record in audit.log: it may continue a segment */
		int r = aud_seg_tail(st, &seq, prev, seg, err);
		if (r < 0)
			return -1;
		fresh = r == 1;
	}
	uint64_t tail_seq = seq;
	uint8_t tail_hash[HASH_LEN];
	memcpy(tail_hash, prev, HASH_LEN);
	if (fresh && torn < size) { /* the segment record goes first */
		if (ftruncate(fd, (off_t)torn) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot repair the audit log's torn tail");
		size = torn;
	}
	if (fresh && aud_write_segment_rec(fd, &size, &seq, prev, seg, err) < 0)
		return -1;
	if (frag && !fresh && repair_torn(fd, &size, torn, frag, frag_n, &seq, prev, err) < 0)
		return -1;
	if (frag && fresh) { /* cut above; recorded now, after the segment record */
		uint64_t s2 = size + 1;
		if (repair_torn(fd, &s2, size, frag, frag_n, &seq, prev, err) < 0)
			return -1;
		size = s2;
	}
	if (repair_head(st, fd, &size, tail_seq, tail_hash, &seq, prev, err) < 0)
		return -1;
	struct sbx_hostconf_audit conf;
	audit_conf(&conf);
	if (conf.max_size && size >= conf.max_size && aud_rotate(st, fdp, &size, &seq, prev, err) < 0)
		return -1;
	*sizep = size;
	*seqp = seq;
	return 0;
}

int sbx_audit_append(struct sbx_state *st, const char *type, json_t *fields, struct sbx_err *err)
{
	if (check_fields(type, fields, err) < 0)
		return -1;
	_cleanup_close_ int lk = openat(st->lib_fd, "audit.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit lock");
	_cleanup_close_ int sfd = sync_open(st);
	if (aud_lock(lk, LOCK_EX, err) < 0)
		return -1;
	_cleanup_close_ int fd = -1;
	uint64_t size, seq;
	uint8_t prev[HASH_LEN];
	if (aud_begin_locked(st, &fd, &size, &seq, prev, err) < 0)
		return -1;
	if (aud_write_rec(fd, &size, &seq, prev, type, fields, err) < 0)
		return -1;
	uint64_t t = sync_ticket(sfd, seq, prev);
	flock(lk, LOCK_UN);
	return group_commit(st, lk, fd, sfd, t, seq, prev, err);
}
