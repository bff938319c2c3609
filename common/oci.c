/* sbx-oci's containers: state under --root, the holder, the life cycle
 * (oci.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "exec_client.h"
#include "hostconf.h"
#include "oci.h"
#include "policy.h"
#include "session.h"
#include "util.h"

int sbx_oci_id_check(const char *id, struct sbx_err *err)
{
	size_t n = strlen(id);
	int ok = n >= 1 && n <= SBX_OCI_ID_MAX && id[0] != '.' && id[0] != '-' && id[0] != '+';
	for (size_t i = 0; ok && i < n; i++) {
		char ch = id[i];
		ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
		     ch == '.' || ch == '-' || ch == '+';
	}
	if (!ok)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid container ID '%.140s': 1..%d of [A-Za-z0-9_.+-], not starting with '.', "
				   "'-' or '+'",
				   id, SBX_OCI_ID_MAX);
	return 0;
}

int sbx_oci_root_open(const char *path, struct sbx_err *err)
{
	if (!path[0] || strlen(path) > SBX_OCI_PATH_MAX)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0, "bad --root");
	/* Its parents too, as runc does: a fresh /run, or SBX_ROOT's. */
	char p[SBX_OCI_PATH_MAX + 1];
	snprintf(p, sizeof p, "%s", path);
	for (char *s = p + 1;; s++) {
		if (*s && *s != '/')
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the runtime root %.200s", p);
		if (!(*s = c))
			break;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the runtime root %.200s", path);
	return fd;
}

/* state.json: temp file, fsync, rename, fsync of the directory. */
static int save(int dir_fd, const struct sbx_oci *c, struct sbx_err *err)
{
	json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:b, s:I, s:I, s:b, s:O}", "schema", 1,
			      "id", c->id, "session", c->session, "sbx_root", c->sbx_root, "bundle", c->bundle,
			      "template", c->tmpl, "policy", c->policy, "pid", c->pid, "pid_start",
			      (json_int_t)c->pid_start, "started", c->started, "created_ns", (json_int_t)c->created_ns,
			      "rootfs_prepare_ms", (json_int_t)c->prepare_ms, "rootfs_reused", c->prepare_reused,
			      "annotations", c->annotations ? c->annotations : json_object());
	_cleanup_free_ char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot record container %s", c->id);
	_cleanup_close_ int fd =
		openat(dir_fd, "state.json.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || sbx_write_all(fd, txt, strlen(txt)) < 0 || fsync(fd) < 0 ||
	    renameat(dir_fd, "state.json.tmp", dir_fd, "state.json") < 0 || fsync(dir_fd) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot record container %s", c->id);
	return 0;
}

static int load_at(int dir_fd, const char *id, struct sbx_oci *c, struct sbx_err *err)
{
	memset(c, 0, sizeof *c);
	size_t len;
	_cleanup_free_ char *txt = sbx_read_small_at(dir_fd, "state.json", 1u << 20, &len);
	json_t *j = txt ? json_loadb(txt, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (!json_is_object(j)) {
		json_decref(j);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, txt ? 0 : errno, "cannot read the state of container %s",
				   id);
	}
	sbx_json_str(j, "id", c->id, sizeof c->id);
	sbx_json_str(j, "session", c->session, sizeof c->session);
	sbx_json_str(j, "bundle", c->bundle, sizeof c->bundle);
	sbx_json_str(j, "sbx_root", c->sbx_root, sizeof c->sbx_root);
	sbx_json_str(j, "template", c->tmpl, sizeof c->tmpl);
	sbx_json_str(j, "policy", c->policy, sizeof c->policy);
	c->pid = (int)sbx_json_u64(j, "pid");
	c->pid_start = sbx_json_u64(j, "pid_start");
	c->started = json_is_true(json_object_get(j, "started"));
	c->created_ns = sbx_json_u64(j, "created_ns");
	c->prepare_ms = sbx_json_u64(j, "rootfs_prepare_ms");
	c->prepare_reused = json_is_true(json_object_get(j, "rootfs_reused"));
	json_t *a = json_object_get(j, "annotations");
	c->annotations = json_is_object(a) ? json_incref(a) : json_object();
	json_decref(j);
	if (strcmp(c->id, id))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the state of container %s names another", id);
	return 0;
}

static int open_container(int root_fd, const char *id, struct sbx_err *err)
{
	if (sbx_oci_id_check(id, err) < 0)
		return -1;
	int fd = openat(root_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sbx_err_set(err, errno == ENOENT ? SBX_EXIT_NOENT : SBX_EXIT_INTERNAL,
				   errno == ENOENT ? 0 : errno, "container %s does not exist", id);
	return fd;
}

int sbx_oci_load(int root_fd, const char *id, struct sbx_oci *c, struct sbx_err *err)
{
	_cleanup_close_ int fd = open_container(root_fd, id, err);
	return fd < 0 ? -1 : load_at(fd, id, c, err);
}

void sbx_oci_free(struct sbx_oci *c)
{
	json_decref(c->annotations);
	c->annotations = NULL;
}

/* A pidfd for the holder if it is still the process create recorded. */
static int holder_pidfd(const struct sbx_oci *c)
{
	if (c->pid <= 0)
		return -1;
	int fd = (int)syscall(SYS_pidfd_open, c->pid, 0);
	if (fd < 0)
		return -1;
	if (sbx_proc_start_time(c->pid) != c->pid_start) {
		close(fd);
		return -1;
	}
	return fd;
}

const char *sbx_oci_status(const struct sbx_oci *c, int *alive)
{
	int fd = holder_pidfd(c);
	*alive = fd >= 0;
	if (fd >= 0)
		close(fd);
	if (!*alive)
		return "stopped";
	return c->started ? "running" : "created";
}

json_t *sbx_oci_state_json(const struct sbx_oci *c)
{
	int alive;
	const char *status = sbx_oci_status(c, &alive);
	return json_pack("{s:s, s:s, s:s, s:i, s:s, s:O}", "ociVersion", SBX_OCI_VERSION, "id", c->id, "status", status,
			 "pid", alive ? c->pid : 0, "bundle", c->bundle, "annotations", c->annotations);
}

static void rm_container(int root_fd, int dir_fd, const char *id)
{
	for (const char *const *n = (const char *const[]){ "state.json", "state.json.tmp", "exec.fifo", NULL }; *n; n++)
		unlinkat(dir_fd, *n, 0);
	unlinkat(root_fd, id, AT_REMOVEDIR);
	fsync(root_fd);
}

/* linux.resources over the policy: the container's shape is the VM's
 * (oci_linux.c checked the ranges a policy file has). */
static void apply_resources(struct sbx_policy *pol, const struct sbx_oci_resources *r)
{
	if (r->memory)
		pol->resources.memory = r->memory;
	if (r->cpu_milli) {
		pol->resources.vcpus = r->vcpus;
		pol->resources.cpu_limit_milli = r->cpu_milli;
	}
	if (r->pids) {
		pol->resources.pids_per_session = r->pids;
		if (pol->resources.pids_per_exec > r->pids)
			pol->resources.pids_per_exec = r->pids;
	}
}

/* The session's policy and template, by the operator's names for them: a
 * bundle names an entry of sbx.yaml's oci.policies (org.sbx.policy) or
 * oci.templates (org.sbx.template), never a file, and one that names no
 * policy gets oci.default_policy, else sbx's defaults; no template, its
 * own root.  An org.sbx.* annotation this version does not know is
 * refused, so that a bundle never believes it got what it asked for. */
static int choose_operator(struct sbx_oci_ctx *x, struct sbx_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach (x->spec.annotations, k, v)
		if (!strncmp(k, "org.sbx.", 8) && strcmp(k, "org.sbx.policy") && strcmp(k, "org.sbx.template"))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "annotation %.64s is not supported by sbx-oci (org.sbx.policy and "
					   "org.sbx.template are)",
					   k);
	_cleanup_free_ struct sbx_hostconf *hc = malloc(sizeof *hc); /* tens of KiB */
	if (!hc || !(x->pol = malloc(sizeof *x->pol)))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot choose the container's policy");
	sbx_policy_defaults(x->pol);
	if (sbx_hostconf_load(hc, err) < 0)
		return -1;
	json_t *t = json_object_get(x->spec.annotations, "org.sbx.template");
	const char *tmpl = t ? sbx_hostconf_oci_template(hc, json_string_value(t)) : NULL;
	if (t && !tmpl)
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"org.sbx.template '%.64s' is not one of the templates sbx.yaml's oci.templates names",
			json_string_value(t));
	if (tmpl) {
		snprintf(x->c.tmpl, sizeof x->c.tmpl, "%s", tmpl);
		x->tmpl_chosen = 1;
	}
	json_t *want = json_object_get(x->spec.annotations, "org.sbx.policy");
	const char *name = want ? json_string_value(want) : hc->oci.default_policy;
	if (!want && !name[0])
		return 0;
	const char *file = sbx_hostconf_oci_policy(hc, name);
	if (!file)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "org.sbx.policy '%.64s' is not one of the policies sbx.yaml's oci.policies names",
				   name);
	snprintf(x->c.policy, sizeof x->c.policy, "%s", name);
	if (sbx_policy_load(file, x->pol, err) < 0)
		return sbx_err_wrap(err, "policy %s of sbx.yaml's oci.policies: ", name);
	return 0;
}

static int make_session(struct sbx_oci_ctx *x, struct sbx_err *err)
{
	apply_resources(x->pol, &x->spec.res);
	struct sbx_create_opts o = { .tmpl = x->c.tmpl,
				     .vcpus = x->pol->resources.vcpus,
				     .memory_mib = (unsigned)(x->pol->resources.memory >> 20),
				     .policy = x->pol,
				     .progress_fd = -1 };
	struct sbx_session s;
	int existed;
	if (sbx_session_create(&x->st, &o, &s, &existed, err) < 0)
		return -1;
	snprintf(x->c.session, sizeof x->c.session, "%s", s.id);
	return 0;
}

/* The terminal and the console socket go together, as in runc. */
static int terminal_check(int terminal, const char *console, struct sbx_err *err)
{
	if (terminal && !console)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "process.terminal needs --console-socket: sbx-oci relays no terminal of its own");
	if (!terminal && console)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--console-socket without process.terminal");
	return 0;
}

int sbx_oci_create(struct sbx_oci_ctx *x, const char *root, int root_fd, const char *id, const char *bundle,
		   const char *console, struct sbx_err *err)
{
	memset(x, 0, sizeof *x);
	x->root_fd = root_fd;
	x->dir_fd = x->fifo_fd = x->tty_fd = -1;
	snprintf(x->root, sizeof x->root, "%s", root);
	if (sbx_oci_id_check(id, err) < 0)
		return -1;
	if (strlen(bundle) > SBX_OCI_PATH_MAX || bundle[0] != '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--bundle must be an absolute path of at most %u bytes",
				   SBX_OCI_PATH_MAX);
	_cleanup_close_ int bfd = open(bundle, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bfd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot open the bundle %.200s", bundle);
	if (sbx_oci_spec_load(bfd, &x->spec, err) < 0)
		return -1;
	/* Refused before the claim: nothing was made; the spec is freed. */
	_cleanup_close_ int rootfd = -1;
	int refused = 0;
	if (terminal_check(x->spec.terminal, console, err) < 0 || choose_operator(x, err) < 0)
		refused = -1;
	else if ((rootfd = sbx_oci_rootfs_open(bfd, x->spec.root, err)) < 0)
		refused = -1;
	else if (mkdirat(root_fd, id, 0700) < 0) /* the claim: a second create of the ID fails here */
		refused = sbx_err_set(err, errno == EEXIST ? SBX_EXIT_CONFLICT : SBX_EXIT_INTERNAL, errno,
				      "cannot create container %s", id);
	if (refused < 0) {
		sbx_oci_ctx_free(x);
		return -1;
	}
	x->dir_fd = openat(root_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	snprintf(x->c.id, sizeof x->c.id, "%s", id);
	snprintf(x->c.bundle, sizeof x->c.bundle, "%s", bundle);
	x->c.created_ns = sbx_now_ns();
	const char *sr = getenv("SBX_ROOT");
	snprintf(x->c.sbx_root, sizeof x->c.sbx_root, "%s", sr ? sr : "");
	x->c.annotations = json_incref(x->spec.annotations);
	int rc = x->dir_fd < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create container %s", id) : 0;
	/* The terminal before the boot: a socket that is not there costs
	 * no VM.  The engine keeps the master whatever happens next. */
	if (rc == 0 && console && (x->tty_fd = sbx_oci_console(console, x->spec.rows, x->spec.cols, err)) < 0)
		rc = -1;
	if (rc == 0)
		rc = sbx_state_open(&x->st, err);
	x->st_open = rc == 0;
	/* The operator's template replaces the bundle's root, which was
	 * opened (and so checked) all the same. */
	if (rc == 0 && !x->tmpl_chosen)
		rc = sbx_oci_rootfs_prepare(&x->st, rootfd, root, root_fd, x->c.tmpl, &x->c.prepare_reused,
					    &x->c.prepare_ms, err);
	if (rc == 0)
		rc = make_session(x, err);
	if (rc == 0 && mkfifoat(x->dir_fd, "exec.fifo", 0600) < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create container %s", id);
	/* Read-write, so the open never blocks and start's open for
	 * writing finds a reader for as long as the holder lives. */
	if (rc == 0 && (x->fifo_fd = openat(x->dir_fd, "exec.fifo", O_RDWR | O_CLOEXEC)) < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create container %s", id);
	if (rc == 0)
		rc = save(x->dir_fd, &x->c, err);
	if (rc < 0)
		sbx_oci_abort(x);
	return rc;
}

void sbx_oci_abort(struct sbx_oci_ctx *x)
{
	if (x->c.session[0] && x->st_open) {
		int gone;
		struct sbx_err e = { 0 };
		sbx_session_destroy(&x->st, x->c.session, &gone, &e);
	}
	if (x->dir_fd >= 0)
		rm_container(x->root_fd, x->dir_fd, x->c.id);
	sbx_oci_ctx_free(x);
}

void sbx_oci_ctx_free(struct sbx_oci_ctx *x)
{
	if (x->dir_fd >= 0)
		close(x->dir_fd);
	if (x->fifo_fd >= 0)
		close(x->fifo_fd);
	if (x->tty_fd >= 0)
		close(x->tty_fd);
	x->dir_fd = x->fifo_fd = x->tty_fd = -1;
	if (x->st_open)
		sbx_state_close(&x->st);
	x->st_open = 0;
	sbx_oci_spec_free(&x->spec);
	sbx_oci_free(&x->c);
	free(x->pol);
	x->pol = NULL;
}

/* The pid file as the engine reads it: whole or not at all. */
int sbx_oci_write_pid_file(const char *path, int pid, struct sbx_err *err)
{
	char tmp[SBX_OCI_PATH_MAX + 32], txt[24];
	if (snprintf(tmp, sizeof tmp, "%s.sbx-tmp", path) >= (int)sizeof tmp)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--pid-file is too long");
	int n = snprintf(txt, sizeof txt, "%d", pid);
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || sbx_write_all(fd, txt, (size_t)n) < 0 || fsync(fd) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot write --pid-file %.200s", path);
	}
	return 0;
}

int sbx_oci_created(struct sbx_oci_ctx *x, int pid, const char *pid_file, struct sbx_err *err)
{
	x->c.pid = pid;
	x->c.pid_start = sbx_proc_start_time(pid);
	if (save(x->dir_fd, &x->c, err) < 0)
		return -1;
	return pid_file ? sbx_oci_write_pid_file(pid_file, pid, err) : 0;
}

static int exit_status(const struct sbx_exit_info *e)
{
	switch (e->reason) {
	case SBX_R_TIMEOUT: return SBX_EXIT_EXEC_TIMEOUT;
	case SBX_R_SESSION_LOST: return SBX_EXIT_EXEC_FAILED;
	default: return (int)e->status;
	}
}

static int run_process(struct sbx_state *st, const char *session, const struct sbx_oci_spec *sp, int tty,
		       struct sbx_err *err);

/* In the process that runs a container's process: the terminal becomes
 * its controlling terminal (a session of its own, as runc's init has),
 * so that the engine's resizes reach it as SIGWINCH and a closed master
 * as SIGHUP, and its stdio. */
static int tty_take(int *tty, struct sbx_err *err)
{
	if (setsid() < 0 || ioctl(*tty, TIOCSCTTY, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take the terminal");
	for (int fd = 0; fd < 3; fd++)
		if (dup2(*tty, fd) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take the terminal");
	if (*tty > 2)
		close(*tty);
	*tty = -1;
	return 0;
}

int sbx_oci_hold(struct sbx_oci_ctx *x, struct sbx_err *err)
{
	int tty = x->tty_fd >= 0;
	if (tty && tty_take(&x->tty_fd, err) < 0)
		return -1;
	char b;
	ssize_t r;
	while ((r = read(x->fifo_fd, &b, 1)) < 0 && errno == EINTR)
		;
	if (r != 1)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "container %s: cannot wait for start", x->c.id);
	int rc = run_process(&x->st, x->c.session, &x->spec, tty, err);
	/* The container's life is its process's: its VM goes with it, not
	 * at delete, which may come much later (or, for a SIGKILLed holder,
	 * is what reclaims it). */
	int gone;
	struct sbx_err e2 = { 0 };
	sbx_session_destroy(&x->st, x->c.session, &gone, &e2);
	return rc;
}

/* A process of the container's session, as the holder runs it. */
static int run_process(struct sbx_state *st, const char *session, const struct sbx_oci_spec *sp, int tty,
		       struct sbx_err *err)
{
	struct sbx_exec_opts o = { .in_fd = 0, .out_fd = 1, .err_fd = 2, .tty_fd = -1, .forward_signals = 1 };
	struct winsize ws;
	if (tty) {
		/* The guest's pty, sized as the engine's and following it. */
		o.req.flags |= SBX_EXEC_PTY;
		o.tty_fd = 0;
		if (ioctl(0, TIOCGWINSZ, &ws) == 0) {
			o.req.rows = ws.ws_row;
			o.req.cols = ws.ws_col;
		}
	}
	o.req.argv = sp->args;
	o.req.argc = sp->argc;
	o.req.env = sp->env;
	o.req.envc = sp->envc;
	o.req.cwd = sp->cwd[0] ? (char *)sp->cwd : NULL;
	for (unsigned i = 0; i < sp->nrlimits && i < SBX_EXEC_RLIMITS_MAX; i++)
		o.req.rlimits[o.req.nrlimits++] =
			(struct sbx_rlimit){ sp->rlimits[i].resource, sp->rlimits[i].soft, sp->rlimits[i].hard };
	o.req.have_uid = o.req.have_gid = 1;
	o.req.uid = sp->uid;
	o.req.gid = sp->gid;
	struct sbx_exec_result res;
	signal(SIGPIPE, SIG_IGN);
	if (sbx_exec_run(st, session, &o, &res, err) < 0)
		return -1;
	return exit_status(&res.exit);
}

int sbx_oci_exec_prepare(int root_fd, const char *id, const char *process_file, char **argv, int argc, int tty,
			 const char *console, struct sbx_oci_exec *e, struct sbx_err *err)
{
	memset(e, 0, sizeof *e);
	e->tty_fd = -1;
	if (sbx_oci_load(root_fd, id, &e->c, err) < 0)
		return -1;
	int alive;
	const char *status = sbx_oci_status(&e->c, &alive);
	if (strcmp(status, "running"))
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "cannot exec in container %s: it is %s, not running", id,
				   status);
	if (process_file) {
		size_t len;
		_cleanup_free_ char *buf = sbx_read_small_at(AT_FDCWD, process_file, SBX_OCI_CONFIG_MAX, &len);
		if (!buf)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read --process %.200s", process_file);
		if (sbx_oci_process_parse(buf, len, &e->spec, err) < 0)
			return -1;
	} else {
		if (argc < 1)
			return sbx_err_set(err, SBX_EXIT_USAGE, 0, "exec takes --process FILE or a command");
		if (!(e->spec.args = calloc((size_t)argc + 1, sizeof *e->spec.args)))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot exec");
		for (int i = 0; i < argc; i++)
			if (!(e->spec.args[e->spec.argc++] = strdup(argv[i])))
				return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot exec");
	}
	e->spec.terminal |= tty;
	if (terminal_check(e->spec.terminal, console, err) < 0)
		return -1;
	if (console && (e->tty_fd = sbx_oci_console(console, e->spec.rows, e->spec.cols, err)) < 0)
		return -1;
	return 0;
}

int sbx_oci_exec_run(struct sbx_oci_exec *e, struct sbx_err *err)
{
	struct sbx_state st;
	if (e->c.sbx_root[0])
		setenv("SBX_ROOT", e->c.sbx_root, 1);
	int tty = e->tty_fd >= 0;
	if ((tty && tty_take(&e->tty_fd, err) < 0) || sbx_state_open(&st, err) < 0)
		return -1;
	int rc = run_process(&st, e->c.session, &e->spec, tty, err);
	sbx_state_close(&st);
	return rc;
}

void sbx_oci_exec_free(struct sbx_oci_exec *e)
{
	sbx_oci_free(&e->c);
	sbx_oci_spec_free(&e->spec);
	if (e->tty_fd >= 0)
		close(e->tty_fd);
	e->tty_fd = -1;
}

int sbx_oci_start(int root_fd, const char *id, struct sbx_err *err)
{
	_cleanup_close_ int dfd = open_container(root_fd, id, err);
	struct sbx_oci c;
	if (dfd < 0 || load_at(dfd, id, &c, err) < 0)
		return -1;
	int alive;
	const char *status = sbx_oci_status(&c, &alive);
	int rc = 0;
	if (strcmp(status, "created"))
		rc = sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "cannot start container %s: it is %s, not created", id,
				 status);
	c.started = 1;
	/* Recorded before the holder hears it, so state never says
	 * "created" of a process that runs. */
	if (rc == 0)
		rc = save(dfd, &c, err);
	_cleanup_close_ int fd = rc < 0 ? -1 : openat(dfd, "exec.fifo", O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (rc == 0 && (fd < 0 || write(fd, "s", 1) != 1))
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start container %s", id);
	sbx_oci_free(&c);
	return rc;
}

int sbx_oci_kill(int root_fd, const char *id, int sig, struct sbx_err *err)
{
	struct sbx_oci c;
	if (sbx_oci_load(root_fd, id, &c, err) < 0)
		return -1;
	_cleanup_close_ int pfd = holder_pidfd(&c);
	sbx_oci_free(&c);
	if (pfd < 0)
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "cannot kill container %s: it is not running", id);
	if (syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot kill container %s", id);
	return 0;
}

int sbx_oci_delete(int root_fd, const char *id, int force, struct sbx_err *err)
{
	_cleanup_close_ int dfd = open_container(root_fd, id, err);
	struct sbx_oci c;
	if (dfd < 0 || load_at(dfd, id, &c, err) < 0)
		return -1;
	_cleanup_close_ int pfd = holder_pidfd(&c);
	int rc = 0;
	if (pfd >= 0 && c.started && !force)
		rc = sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "cannot delete container %s: it is running (use --force)",
				 id);
	if (rc == 0 && pfd >= 0)
		syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
	struct sbx_state st;
	if (rc == 0 && c.sbx_root[0])
		setenv("SBX_ROOT", c.sbx_root, 1);
	if (rc == 0 && c.session[0] && (rc = sbx_state_open(&st, err)) == 0) {
		int gone;
		rc = sbx_session_destroy(&st, c.session, &gone, err);
		sbx_state_close(&st);
	}
	if (rc == 0)
		rm_container(root_fd, dfd, id);
	sbx_oci_free(&c);
	return rc;
}
