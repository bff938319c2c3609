#include "execrec.h"
#include "monclient.h"
#include "proto.h"
#include "session.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

int sbx_exec_id_check(const char *id, struct sbx_err *err)
{
	size_t n = strlen(id);
	if (n < 2 || n > 10 || id[0] != 'e' || strspn(id + 1, "0123456789") != n - 1 || id[1] == '0')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid exec ID '%.40s': expected e1, e2, ...", id);
	return 0;
}

static int open_execs(struct sbx_state *st, const char *session, struct sbx_err *err)
{
	if (sbx_session_visible(st, session, err) < 0)
		return -1;
	_cleanup_close_ int dfd = openat(st->sessions_fd, session, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", session);
	int x = openat(dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (x < 0 && errno == ENOENT) {
		mkdirat(dfd, "execs", 0700);
		x = openat(dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (x < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the execs of %s", session);
	return x;
}

static int open_exec(struct sbx_state *st, const char *session, const char *exec, struct sbx_err *err)
{
	if (sbx_exec_id_check(exec, err) < 0)
		return -1;
	_cleanup_close_ int x = open_execs(st, session, err);
	if (x < 0)
		return -1;
	int e = openat(x, exec, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (e < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such exec: %s in session %s", exec, session);
	return e;
}

/* Its result, or NULL; *bad set when what has the result's name is not a
 * regular file (the unprivileged half owns execs/: a FIFO there must not
 * make a reader wait for ever). */
static json_t *load_result(int efd, int *bad)
{
	_cleanup_free_ char *txt = sbx_read_small_at(efd, "result.json", 1 << 20, NULL);
	if (!txt && bad)
		*bad = errno == EINVAL;
	return txt ? json_loads(txt, 0, NULL) : NULL;
}

static int cmp_exec(const void *a, const void *b)
{
	return atoi(*(char *const *)a + 1) - atoi(*(char *const *)b + 1);
}

int sbx_exec_list(struct sbx_state *st, const char *session, json_t **out, struct sbx_err *err)
{
	_cleanup_close_ int x = open_execs(st, session, err);
	if (x < 0)
		return -1;
	struct sbx_session s;
	int live = sbx_record_load(st, session, &s, NULL) == 0 && sbx_state_live(sbx_session_live_state(st, &s));
	DIR *d = fdopendir(dup(x));
	if (!d)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list execs");
	char *names[4096];
	size_t n = 0;
	for (struct dirent *de; (de = readdir(d)) && n < SBX_ARRAY_LEN(names);)
		if (sbx_exec_id_check(de->d_name, NULL) == 0)
			names[n++] = strdup(de->d_name);
	closedir(d);
	qsort(names, n, sizeof *names, cmp_exec);
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		int efd = openat(x, names[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		json_t *r = efd >= 0 ? load_result(efd, NULL) : NULL;
		if (efd >= 0)
			close(efd);
		if (r) {
			json_object_set_new(r, "state", json_string("ended"));
		} else {
			r = json_pack("{s:i, s:s, s:s, s:s}", "schema", 1, "exec", names[i], "session", session,
				      "state", live ? "running" : "lost");
			int e2 = openat(x, names[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			_cleanup_free_ char *rq = e2 >= 0 ? sbx_read_small_at(e2, "request.json", 1 << 20, NULL) : NULL;
			/* When it started: the monitor writes request.json then,
			 * once (sbx-ps --packages places requests by it). */
			struct stat rs;
			if (rq && fstatat(e2, "request.json", &rs, AT_SYMLINK_NOFOLLOW) == 0) {
				char ts[40];
				sbx_fmt_time((uint64_t)rs.st_mtim.tv_sec * 1000000000ull + (uint64_t)rs.st_mtim.tv_nsec,
					     ts, sizeof ts);
				json_object_set_new(r, "started", json_string(ts));
			}
			if (e2 >= 0)
				close(e2);
			json_t *req = rq ? json_loads(rq, 0, NULL) : NULL;
			if (req)
				json_object_set_new(r, "request", req);
		}
		json_array_append_new(arr, r);
		free(names[i]);
	}
	*out = arr;
	return 0;
}

int sbx_exec_result_status(json_t *r)
{
	const char *reason = json_string_value(json_object_get(r, "reason"));
	if (reason && !strcmp(reason, "timeout"))
		return 124;
	if (reason && !strcmp(reason, "session-lost"))
		return 125;
	return (int)json_integer_value(json_object_get(r, "status"));
}

int sbx_exec_wait(struct sbx_state *st, const char *session, const char *exec, unsigned timeout_ms, json_t **result,
		  struct sbx_err *err)
{
	_cleanup_close_ int efd = open_exec(st, session, exec, err);
	if (efd < 0)
		return -1;
	/* inotify on the exec's directory wakes us when result.json is
	 * renamed in; the session's lock tells us when nobody will write it. */
	_cleanup_close_ int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", efd);
	if (in >= 0)
		inotify_add_watch(in, path, IN_MOVED_TO | IN_CREATE);
	uint64_t deadline = timeout_ms ? sbx_mono_ns() + (uint64_t)timeout_ms * 1000000u : 0;
	for (;;) {
		int bad = 0;
		json_t *r = load_result(efd, &bad);
		if (r) {
			*result = r;
			return 0;
		}
		if (bad)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
					   "the result of exec %s in session %s is not a regular file", exec, session);
		struct sbx_session s;
		if (sbx_record_load(st, session, &s, NULL) < 0 || !sbx_state_live(sbx_session_live_state(st, &s))) {
			if ((r = load_result(efd, NULL))) { /* written just before the end */
				*result = r;
				return 0;
			}
			*result = json_pack("{s:i, s:s, s:s, s:i, s:s}", "schema", 1, "exec", exec, "session", session,
					    "status", 255, "reason", "session-lost");
			return 0;
		}
		if (deadline && sbx_mono_ns() >= deadline)
			return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "exec %s is still running", exec);
		struct pollfd p = { .fd = in, .events = POLLIN };
		poll(&p, 1, 500);
		char buf[4096];
		while (in >= 0 && read(in, buf, sizeof buf) > 0)
			;
	}
}

static int copy_file(int dfd, const char *name, int out)
{
	if (out < 0)
		return 0;
	_cleanup_close_ int fd = sbx_open_regular_at(dfd, name);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	char buf[65536];
	ssize_t r;
	while ((r = read(fd, buf, sizeof buf)) > 0)
		if (sbx_write_all(out, buf, (size_t)r) < 0)
			return -1;
	return r < 0 ? -1 : 0;
}

int sbx_exec_output(struct sbx_state *st, const char *session, const char *exec, int out_fd, int err_fd,
		    struct sbx_err *err)
{
	_cleanup_close_ int efd = open_exec(st, session, exec, err);
	if (efd < 0)
		return -1;
	const char *names[] = { "stdout", "stderr" };
	int fds[] = { out_fd, err_fd };
	for (int i = 0; i < 2; i++) {
		if (copy_file(efd, names[i], fds[i]) == 0)
			continue;
		if (errno == EINVAL)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
					   "the %s of exec %s in session %s is not a regular file", names[i], exec,
					   session);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot copy the output of %s", exec);
	}
	return 0;
}

/* The monitor greets with HELLO, then answers KILL (done) or ERROR. */
struct kill_ctx {
	const char *session, *exec;
};

static int kill_frame(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	const struct kill_ctx *k = ctx;
	if (f->type == SBX_F_ERROR)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no running exec %s in session %s", k->exec, k->session);
	return f->type == SBX_F_KILL;
}

int sbx_exec_kill(struct sbx_state *st, const char *session, const char *exec, struct sbx_err *err)
{
	_cleanup_mon_ struct sbx_mon m = { .fd = -1 };
	struct kill_ctx k = { session, exec };
	if (sbx_id_check(session, "session", err) < 0 || sbx_exec_id_check(exec, err) < 0 ||
	    sbx_mon_open(st, session, &m, err) < 0)
		return -1;
	m.max = 1 << 16;
	sbx_frame_raw(&m.out, SBX_F_KILL, (uint32_t)atoi(exec + 1), NULL, 0);
	if (sbx_mon_send(&m, -1) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot reach the monitor of %s", session);
	if (sbx_mon_loop(&m, 0, kill_frame, NULL, &k, err) > 0)
		return 0;
	if (m.fail != SBX_MON_REFUSED)
		sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "no answer from the monitor of %s", session);
	return -1;
}

/* --- attach ------------------------------------------------------------ */

/* Copy what the file holds past *off to out (-1: nowhere, after a failed
 * write: the exec's status still comes). */
static void follow_copy(int fd, uint64_t *off, int *out)
{
	uint8_t buf[SBX_DATA_CHUNK];
	ssize_t r;
	while (fd >= 0 && (r = pread(fd, buf, sizeof buf, (off_t)*off)) > 0) {
		*off += (uint64_t)r;
		if (*out >= 0 && sbx_write_all(*out, buf, (size_t)r) < 0)
			*out = -1;
	}
}

/* An output file, once it is there; -1 and *bad (EINVAL) for one that is
 * not a regular file (execs/ is the unprivileged half's: a FIFO in its
 * place must not hang us). */
static int open_stream(int efd, const char *name, int *bad)
{
	int fd = sbx_open_regular_at(efd, name);
	if (fd < 0 && errno == EINVAL)
		*bad = 1;
	return fd;
}

int sbx_exec_attach(struct sbx_state *st, const char *session, const char *exec, const struct sbx_attach_opts *o,
		    int *status, int *lost, struct sbx_err *err)
{
	*status = *lost = 0;
	/* The exec's directory, seen through the caller's tenant scope:
	 * another tenant's session, and an exec the session never had, are
	 * both 4. */
	_cleanup_close_ int efd = sbx_id_check(session, "session", err) < 0 ? -1 : open_exec(st, session, exec, err);
	if (efd < 0)
		return -1;
	/* inotify wakes us for new output and for result.json's rename; the
	 * bounded poll checks that the session still lives (a monitor that
	 * died writes no result). */
	_cleanup_close_ int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", efd);
	if (in < 0 || inotify_add_watch(in, path, IN_MODIFY | IN_MOVED_TO | IN_CREATE) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot watch exec %s", exec);
	sigset_t set, old;
	sigemptyset(&set);
	if (o->detach_signals) {
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGHUP);
	}
	sigprocmask(SIG_BLOCK, &set, &old);
	_cleanup_close_ int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	int bad = 0;
	_cleanup_close_ int ofd = open_stream(efd, "stdout", &bad);
	_cleanup_close_ int rfd = open_stream(efd, "stderr", &bad);
	uint64_t off_out = o->since_out, off_err = o->since_err;
	int out = o->out_fd, errfd = o->err_fd, rc = -1, timed_out = 0;
	for (;;) {
		/* Looked at before the copy: the result is renamed in after the
		 * last byte was stored, so what follows it is everything. */
		int ended = faccessat(efd, "result.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
		int gone = 0;
		if (!ended && timed_out) {
			struct sbx_session s;
			gone = sbx_record_load(st, session, &s, NULL) < 0 ||
			       !sbx_state_up(sbx_session_live_state(st, &s));
			ended = faccessat(efd, "result.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
		}
		if (ofd < 0)
			ofd = open_stream(efd, "stdout", &bad);
		if (rfd < 0)
			rfd = open_stream(efd, "stderr", &bad);
		if (bad) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				    "the output of exec %s in session %s is not a regular file", exec, session);
			break;
		}
		follow_copy(ofd, &off_out, &out);
		follow_copy(rfd, &off_err, &errfd);
		if (ended) {
			int rbad = 0;
			json_t *r = load_result(efd, &rbad);
			if (!r) {
				if (rbad)
					sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
						    "the result of exec %s in session %s is not a regular file", exec,
						    session);
				else
					sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot read the result of %s", exec);
				break;
			}
			*status = sbx_exec_result_status(r);
			const char *reason = json_string_value(json_object_get(r, "reason"));
			*lost = reason && !strcmp(reason, "session-lost");
			json_decref(r);
			rc = 0;
			break;
		}
		if (gone) { /* nobody will write its result: as sbx_exec_wait says */
			*status = 125;
			*lost = 1;
			rc = 0;
			break;
		}
		struct pollfd p[2] = { { .fd = in, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
		int n = poll(p, 2, 500);
		if (n < 0 && errno != EINTR) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "poll");
			break;
		}
		timed_out = n == 0;
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == sizeof si) /* all of them, none left pending */
				rc = (int)si.ssi_signo;
			if (rc > 0)
				break;
		}
		char buf[4096];
		while (read(in, buf, sizeof buf) > 0)
			;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return rc;
}
