/* sbx-monitor: running execs across a save and a restore (design.md,
 * "Snapshots": execs that keep running).
 *
 * The guest side needs nothing from us: its processes, pipes and exec
 * table are in the memory image.  What the host keeps of an exec is ours
 * to carry: the unprivileged half says what it knows of each running exec
 * (snap_execs_state), the privileged half checks that and copies the
 * exec's record (request, output so far) into the snapshot directory
 * (snap_execs_write), and a restored session's monitor makes them its own
 * execs again before its VM runs (snap_execs_restore), under the same
 * IDs: the guest keeps the streams, so the numbers cannot change. */
#include "mon.h"

#define EXECS_FILE "execs.json"
/* execs.json with every request in it: an argv may be 1 MiB, and at
 * most SBX_EXECS_KEPT execs run. */
#define EXECS_FILE_MAX (64u << 20)
#define EXECS_KEPT 256u
#define REQUEST_MAX (4u << 20)

/* The child's account of its running execs, for the parent; NULL when
 * none runs (or out of memory, which fails the save: see snap_save_run). */
char *snap_execs_state(struct mon *m, int *none)
{
	json_t *arr = json_array();
	uint64_t now = sbx_mono_ns();
	*none = 1;
	for (struct exec *ex = m->execs; ex && arr; ex = ex->next) {
		if (ex->done)
			continue;
		*none = 0;
		/* The host's backstop, timeout and grace, what is left of it
		 * (at least 1 ms: 0 says none). */
		uint64_t left = !ex->deadline ? 0 : ex->deadline > now + 1000000u ? (ex->deadline - now) / 1000000u : 1;
		json_t *o = json_pack("{s:s, s:I, s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "id",
				      ex->id, "n", (json_int_t)ex->n, "flags", (json_int_t)ex->flags, "out_flow",
				      ex->out_flow, "stdin_credit", (json_int_t)ex->credit, "timeout_left_ms",
				      (json_int_t)left, "started_ns", (json_int_t)ex->started_ns, "out_total",
				      (json_int_t)ex->out_total, "err_total", (json_int_t)ex->err_total, "out_size",
				      (json_int_t)ex->out_size, "err_size", (json_int_t)ex->err_size, "out_emitted",
				      (json_int_t)ex->out_emitted, "err_emitted", (json_int_t)ex->err_emitted,
				      "session_cut", ex->session_cut);
		if (!o || json_array_append_new(arr, o) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	if (*none || !arr) {
		json_decref(arr);
		return NULL;
	}
	json_t *top = json_pack("{s:i, s:I, s:o}", "schema", 1, "next_exec", (json_int_t)m->next_exec, "execs", arr);
	char *txt = top ? json_dumps(top, JSON_COMPACT) : NULL;
	json_decref(top);
	return txt;
}

/* Copy the first n bytes of a regular file (never a FIFO or a link the
 * unprivileged half put there) into a new file. */
static int copy_bytes(int sdfd, const char *sname, int ddfd, const char *dname, uint64_t n, uint64_t *copied)
{
	_cleanup_close_ int in = sdfd >= 0 ? sbx_open_regular_at(sdfd, sname) : -1;
	_cleanup_close_ int out = openat(ddfd, dname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	*copied = 0;
	if (out < 0)
		return -1;
	if (in < 0)
		return 0; /* nothing kept: an empty stream */
	char buf[65536];
	while (*copied < n) {
		size_t want = n - *copied < sizeof buf ? (size_t)(n - *copied) : sizeof buf;
		ssize_t r = pread(in, buf, want, (off_t)*copied);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break; /* shorter than said: what there is */
		if (sbx_write_all(out, buf, (size_t)r) < 0)
			return -1;
		*copied += (uint64_t)r;
	}
	return fsync(out);
}

/* What the child said of one exec, checked: the parent writes only its
 * own encoding of numbers it bounds. */
static int exec_entry_ok(const struct mon *m, json_t *e, uint32_t next, int sizes)
{
	char id[16] = "", want[16];
	sbx_json_str(e, "id", id, sizeof id);
	uint64_t n = sbx_json_u64(e, "n");
	snprintf(want, sizeof want, "e%llu", (unsigned long long)n);
	return n && n <= next && !strcmp(id, want) &&
			       (!sizes || (sbx_json_u64(e, "out_size") <= m->output_cap &&
					   sbx_json_u64(e, "err_size") <= m->output_cap)) &&
			       sbx_json_u64(e, "stdin_credit") <= SBX_STDIN_WINDOW
		       ? 0
		       : -1;
}

static json_t *exec_entry_copy(json_t *e, json_t *req)
{
	static const char *const nums[] = { "n",         "flags",     "stdin_credit", "timeout_left_ms", "started_ns",
					    "out_total", "err_total", "out_emitted",  "err_emitted" };
	json_t *o = json_object();
	char id[16];
	sbx_json_str(e, "id", id, sizeof id);
	json_object_set_new(o, "id", json_string(id));
	for (size_t i = 0; i < SBX_ARRAY_LEN(nums); i++)
		json_object_set_new(o, nums[i], json_integer((json_int_t)sbx_json_u64(e, nums[i])));
	json_object_set_new(o, "out_flow", json_boolean(json_is_true(json_object_get(e, "out_flow"))));
	json_object_set_new(o, "session_cut", json_boolean(json_is_true(json_object_get(e, "session_cut"))));
	json_object_set_new(o, "request", req);
	return o;
}

/* The parent: the running execs' records into the snapshot directory
 * (sdfd): execs.json (their state and requests) and eN.stdout, eN.stderr
 * (their output so far).  state: the child's snap_execs_state. */
int snap_execs_write(struct mon *m, int sdfd, const char *state, uint64_t *bytes, struct sbx_err *err)
{
	json_error_t je;
	json_t *top = json_loads(state, JSON_REJECT_DUPLICATES, &je), *arr = json_object_get(top, "execs"), *e;
	uint64_t next = sbx_json_u64(top, "next_exec");
	size_t i;
	*bytes = 0;
	if (!json_is_array(arr) || !json_array_size(arr) || json_array_size(arr) > EXECS_KEPT || !next ||
	    next >= SBX_WARM_STREAM) {
		json_decref(top);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				   "the monitor's account of its running execs is malformed");
	}
	/* The parent closed its copy of execs/ at the split (the child owns
	 * it): opened afresh, every name under it without following links. */
	_cleanup_close_ int xdfd =
		m->execs_dfd >= 0 ? fcntl(m->execs_dfd, F_DUPFD_CLOEXEC, 0)
				  : openat(m->lib_dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (xdfd < 0) {
		json_decref(top);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the exec records");
	}
	json_t *out = json_array();
	int rc = 0;
	json_array_foreach (arr, i, e) {
		if (exec_entry_ok(m, e, (uint32_t)next, 1) < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
					 "the monitor's account of its running execs is malformed");
			break;
		}
		char id[16], name[32];
		sbx_json_str(e, "id", id, sizeof id);
		_cleanup_close_ int edfd = openat(xdfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		_cleanup_free_ char *rq = edfd >= 0 ? sbx_read_small_at(edfd, "request.json", REQUEST_MAX, NULL) : NULL;
		json_t *req = rq ? json_loads(rq, JSON_REJECT_DUPLICATES, NULL) : NULL;
		if (!json_is_object(req)) {
			json_decref(req);
			req = json_object(); /* unrecorded, as in its own record */
		}
		uint64_t n_out = 0, n_err = 0;
		snprintf(name, sizeof name, "%s.stdout", id);
		if (copy_bytes(edfd, "stdout", sdfd, name, sbx_json_u64(e, "out_size"), &n_out) < 0) {
			json_decref(req);
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot save the output of exec %s", id);
			break;
		}
		snprintf(name, sizeof name, "%s.stderr", id);
		if (copy_bytes(edfd, "stderr", sdfd, name, sbx_json_u64(e, "err_size"), &n_err) < 0) {
			json_decref(req);
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot save the output of exec %s", id);
			break;
		}
		*bytes += n_out + n_err;
		json_t *c = exec_entry_copy(e, req);
		json_object_set_new(c, "out_size", json_integer((json_int_t)n_out));
		json_object_set_new(c, "err_size", json_integer((json_int_t)n_err));
		json_array_append_new(out, c);
	}
	json_decref(top);
	char *txt = NULL;
	if (rc == 0) {
		json_t *w = json_pack("{s:i, s:I, s:o}", "schema", 1, "next_exec", (json_int_t)next, "execs", out);
		out = NULL;
		txt = w ? json_dumps(w, JSON_COMPACT) : NULL;
		json_decref(w);
		rc = txt && strlen(txt) < EXECS_FILE_MAX
			     ? sbx_atomic_write_at(sdfd, EXECS_FILE, txt, strlen(txt), 0600, err)
			     : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot write the running execs' records");
		if (rc == 0)
			*bytes += strlen(txt);
	}
	json_decref(out);
	free(txt);
	return rc;
}

/* One restored exec: its directory, its files, its bookkeeping. */
static int exec_restore_one(struct mon *m, int sdfd, json_t *e, struct sbx_err *err)
{
	char id[16], name[32];
	sbx_json_str(e, "id", id, sizeof id);
	struct exec *ex = calloc(1, sizeof *ex);
	if (!ex)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	ex->dfd = ex->out_fd = ex->err_fd = -1;
	ex->n = (uint32_t)sbx_json_u64(e, "n");
	snprintf(ex->id, sizeof ex->id, "%s", id);
	uint64_t n_out = 0, n_err = 0;
	if (mkdirat(m->execs_dfd, id, 0700) < 0 ||
	    (ex->dfd = openat(m->execs_dfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		goto fail;
	snprintf(name, sizeof name, "%s.stdout", id);
	if (copy_bytes(sdfd, name, ex->dfd, "stdout", m->output_cap, &n_out) < 0)
		goto fail;
	snprintf(name, sizeof name, "%s.stderr", id);
	if (copy_bytes(sdfd, name, ex->dfd, "stderr", m->output_cap, &n_err) < 0)
		goto fail;
	if ((ex->out_fd = openat(ex->dfd, "stdout", O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
	    (ex->err_fd = openat(ex->dfd, "stderr", O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0)
		goto fail;
	ex->req = json_incref(json_object_get(e, "request"));
	if (!json_is_object(ex->req)) {
		json_decref(ex->req);
		ex->req = json_object();
	}
	char *rq = json_dumps(ex->req, JSON_COMPACT);
	if (rq && sbx_atomic_write_at(ex->dfd, "request.json", rq, strlen(rq), 0600, NULL) < 0) {
		free(rq);
		goto fail;
	}
	free(rq);
	ex->out_size = n_out;
	ex->err_size = n_err;
	m->output_kept += n_out + n_err;
	ex->out_total = sbx_json_u64(e, "out_total");
	ex->err_total = sbx_json_u64(e, "err_total");
	ex->out_emitted = sbx_json_u64(e, "out_emitted");
	ex->err_emitted = sbx_json_u64(e, "err_emitted");
	ex->session_cut = json_is_true(json_object_get(e, "session_cut"));
	ex->started_ns = sbx_json_u64(e, "started_ns");
	ex->flags = (uint32_t)sbx_json_u64(e, "flags");
	uint64_t credit = sbx_json_u64(e, "stdin_credit");
	ex->credit = credit > SBX_STDIN_WINDOW ? SBX_STDIN_WINDOW : (uint32_t)credit;
	uint64_t left = sbx_json_u64(e, "timeout_left_ms");
	if (left)
		ex->deadline = sbx_mono_ns() + left * 1000000u;
	ex->started = 1;
	/* Nobody streams it here: its output is the files'.  A streamed
	 * exec's credit is turned off after the identity (snap_identity_queue):
	 * what the source's client had not yet read is owed back in the
	 * source, never here. */
	ex->restored_flow = json_is_true(json_object_get(e, "out_flow"));
	ex->next = m->execs;
	m->execs = ex;
	if (ex->n > m->next_exec)
		m->next_exec = ex->n;
	return 0;
fail:;
	int en = errno;
	if (ex->out_fd >= 0)
		close(ex->out_fd);
	if (ex->err_fd >= 0)
		close(ex->err_fd);
	if (ex->dfd >= 0)
		close(ex->dfd);
	free(ex);
	return sbx_err_set(err, SBX_EXIT_INTERNAL, en, "cannot restore the record of exec %s", id);
}

/* A restore: the snapshot's running execs become this session's, before
 * its VM runs (their output may come with the guest's first frames). */
int snap_execs_restore(struct mon *m, struct sbx_err *err)
{
	_cleanup_close_ int sdfd = open(m->s.snapshot_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sdfd < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, errno, "snapshot %s is gone", m->s.snapshot);
	size_t len = 0;
	_cleanup_free_ char *txt = sbx_read_small_at(sdfd, EXECS_FILE, EXECS_FILE_MAX, &len);
	if (!txt)
		return errno == ENOENT ? 0
				       : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s of snapshot %s",
						     EXECS_FILE, m->s.snapshot);
	json_t *top = json_loads(txt, JSON_REJECT_DUPLICATES, NULL), *arr = json_object_get(top, "execs"), *e;
	uint64_t next = sbx_json_u64(top, "next_exec");
	size_t i;
	int rc = 0;
	if (!json_is_array(arr) || json_array_size(arr) > EXECS_KEPT || !next || next >= SBX_WARM_STREAM)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "snapshot %s: %s is malformed", m->s.snapshot, EXECS_FILE);
	json_array_foreach (arr, i, e) {
		if (rc < 0)
			break;
		if (exec_entry_ok(m, e, (uint32_t)next, 0) < 0 || exec_find(m, (uint32_t)sbx_json_u64(e, "n")))
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "snapshot %s: %s is malformed", m->s.snapshot,
					 EXECS_FILE);
		else
			rc = exec_restore_one(m, sdfd, e, err);
	}
	if (rc == 0 && next > m->next_exec)
		m->next_exec = (uint32_t)next;
	json_decref(top);
	return rc;
}

/* After an IDENTITY that keeps them: no credit is counted for a restored
 * exec (SBX_WINDOW_OFF), as for any exec nobody streams. */
void snap_execs_flow_off(struct mon *m)
{
	for (struct exec *ex = m->execs; ex; ex = ex->next)
		if (ex->restored_flow && !ex->done) {
			sbx_frame_window(&m->aout, ex->n, SBX_WINDOW_OFF);
			ex->restored_flow = 0;
		}
}

/* The IDs of the execs a restore kept, for session.create. */
json_t *snap_execs_ids(const struct mon *m)
{
	json_t *a = json_array();
	for (const struct exec *ex = m->execs; ex; ex = ex->next)
		json_array_insert_new(a, 0, json_string(ex->id));
	return a;
}
