/* sbx-cp's per-session transfer budget (budget.h). */
#include "budget.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <jansson.h>

/* ---- the per-session budget ---------------------------------------------- */

#define BUDGET "transfer.json"

static int budget_open(struct sbx_state *st, const char *id, int *dfd, struct sbx_err *err)
{
	*dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (*dfd < 0)
		return sbx_err_set(err, errno == ENOENT ? SBX_EXIT_NOENT : SBX_EXIT_INTERNAL, errno,
				   "cannot open session %s", id);
	/* A lock file apart from the counter: the counter is replaced by
	 * rename, and a lock on a replaced inode would lock nothing. */
	int lk = openat(*dfd, "transfer.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0) {
		int e = errno;
		if (lk >= 0)
			close(lk);
		close(*dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot lock the transfer counter of %s", id);
	}
	return lk;
}

static int budget_update(int dfd, const char *id, int64_t delta, uint64_t *used, struct sbx_err *err)
{
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, BUDGET, 4096, NULL);
	uint64_t u = 0;
	if (txt) {
		json_t *o = json_loads(txt, 0, NULL);
		json_int_t v = json_integer_value(json_object_get(o, "bytes"));
		json_decref(o);
		if (!o || v < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the transfer counter of %s is corrupt", id);
		u = (uint64_t)v;
	} else if (errno != ENOENT) {
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the transfer counter of %s", id);
	}
	*used = u;
	if (!delta)
		return 0;
	u = delta < 0 && (uint64_t)-delta > u ? 0 : u + (uint64_t)delta;
	char out[96];
	int n = snprintf(out, sizeof out, "{\"schema\":1,\"bytes\":%llu}\n", (unsigned long long)u);
	return sbx_atomic_write_at(dfd, BUDGET, out, (size_t)n, 0600, err);
}

int sbx_xfer_reserve(struct sbx_state *st, const struct sbx_session *s, uint64_t want, int exactly, uint64_t *got,
		     struct sbx_err *err)
{
	_cleanup_close_ int dfd = -1;
	_cleanup_close_ int lk = budget_open(st, s->id, &dfd, err);
	uint64_t used;
	if (lk < 0 || budget_update(dfd, s->id, 0, &used, err) < 0)
		return -1;
	uint64_t max = s->limits.max_session_transfer, left = used < max ? max - used : 0;
	*got = want < left ? want : left;
	if (exactly && *got < want)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "the copy of %llu bytes exceeds what is left of session %s's transfer budget: "
				   "%llu of %llu bytes (files.max_session_transfer)",
				   (unsigned long long)want, s->id, (unsigned long long)left, (unsigned long long)max);
	return budget_update(dfd, s->id, (int64_t)*got, &used, err);
}

int sbx_xfer_release(struct sbx_state *st, const char *id, uint64_t unused, struct sbx_err *err)
{
	if (!unused)
		return 0;
	_cleanup_close_ int dfd = -1;
	_cleanup_close_ int lk = budget_open(st, id, &dfd, err);
	uint64_t used;
	if (lk < 0)
		return -1;
	return budget_update(dfd, id, -(int64_t)unused, &used, err);
}
