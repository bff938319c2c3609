/* sbx-cp's per-session transfer budget (budget.h). */
#include "budget.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <jansson.h>

/* ---- a byte counter in a session directory -------------------------------- */

int sbx_counter_take(int dfd, const char *file, const char *lock, uint64_t max, uint64_t give, uint64_t take,
		     int partial, uint64_t *got, uint64_t *used, struct sbx_err *err)
{
	/* A lock file apart from the counter: the counter is replaced by
	 * rename, and a lock on a replaced inode would lock nothing. */
	_cleanup_close_ int lk = openat(dfd, lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock %s", lock);
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, file, 4096, NULL);
	uint64_t u = 0;
	if (txt) {
		json_t *o = json_loads(txt, 0, NULL);
		json_int_t v = json_integer_value(json_object_get(o, "bytes"));
		json_decref(o);
		if (!o || v < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "%s is corrupt", file);
		u = (uint64_t)v;
	} else if (errno != ENOENT) {
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", file);
	}
	uint64_t u0 = u;
	u = give < u ? u - give : 0;
	*used = u;
	uint64_t left = u < max ? max - u : 0, t = take <= left ? take : partial ? left : 0;
	int rc = take <= left || partial ? 0 : 1;
	u += t;
	if (got)
		*got = t;
	if (u == u0)
		return rc;
	char out[96];
	int w = snprintf(out, sizeof out, "{\"schema\":1,\"bytes\":%llu}\n", (unsigned long long)u);
	return sbx_atomic_write_at(dfd, file, out, (size_t)w, 0600, err) < 0 ? -1 : rc;
}

/* ---- sbx-cp's budget -------------------------------------------------------- */

static int session_dir(struct sbx_state *st, const char *id, struct sbx_err *err)
{
	int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return sbx_err_set(err, errno == ENOENT ? SBX_EXIT_NOENT : SBX_EXIT_INTERNAL, errno,
				   "cannot open session %s", id);
	return dfd;
}

int sbx_xfer_reserve(struct sbx_state *st, const struct sbx_session *s, uint64_t want, int exactly, uint64_t *got,
		     struct sbx_err *err)
{
	_cleanup_close_ int dfd = session_dir(st, s->id, err);
	uint64_t used, max = s->limits.max_session_transfer;
	if (dfd < 0)
		return -1;
	int rc = sbx_counter_take(dfd, "transfer.json", "transfer.lock", max, 0, want, !exactly, got, &used, err);
	if (rc < 0)
		return sbx_err_wrap(err, "the transfer counter of %s", s->id);
	if (rc > 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "the copy of %llu bytes exceeds what is left of session %s's transfer budget: "
				   "%llu of %llu bytes (files.max_session_transfer)",
				   (unsigned long long)want, s->id, (unsigned long long)(used < max ? max - used : 0),
				   (unsigned long long)max);
	return 0;
}

int sbx_xfer_release(struct sbx_state *st, const char *id, uint64_t unused, struct sbx_err *err)
{
	if (!unused)
		return 0;
	_cleanup_close_ int dfd = session_dir(st, id, err);
	uint64_t used;
	if (dfd < 0)
		return -1;
	if (sbx_counter_take(dfd, "transfer.json", "transfer.lock", UINT64_MAX, unused, 0, 0, NULL, &used, err) < 0)
		return sbx_err_wrap(err, "the transfer counter of %s", id);
	return 0;
}
