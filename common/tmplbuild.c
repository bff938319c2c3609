#include "tmplbuild.h"
#include "audit.h"
#include "confine.h"
#include "hostpath.h"
#include "env.h"
#include "exec_client.h"
#include "policy.h"
#include "hostconf.h"
#include "rootfs.h"
#include "session.h"
#include "template.h"
#include "tmplspec.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/openat2.h>
#include <sha2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HELPER "sbx-template-helper"
#define WORK_PREFIX ".tmp-build-" /* sbx-gc reclaims these (snapshot.c) */

struct build {
	struct sbx_state *st;
	const struct sbx_tmplbuild_opts *o;
	struct sbx_tmplspec spec;
	struct sbx_template base;
	json_t *base_manifest;
	char owner[SBX_ID_MAX + 1];
	char helper[700];
	char specdir[600];
	int tdir;         /* the owner's templates namespace */
	char work[120];   /* its name under tdir */
	int wfd;          /* the work directory, locked; inherited by the helper */
	char wpath[1400]; /* its path, for the helper's arguments */
	char root[1500];  /* wpath/root */
	int rootfd;
	int logfd;                    /* wpath/log */
	char format[16];              /* of an import */
	char boot[1500];              /* the directory the vmlinux and initrd.cpio come from */
	json_t *kernel;               /* the manifest's kernel: {package, version, release} */
	char gi_sha[65];              /* guest_init_sha256 of that initramfs */
	struct sbx_confine_slot slot; /* the host ids the tree is kept in */
	int import_fd;                /* the archive, opened with the caller's rights */
	int spec_fd;                  /* the spec, likewise */
	int spec_dfd;                 /* and its directory, where files: come from */
};

/* What an import may unpack: the whole root under 8 GiB, a million
 * entries, no setuid bits (the operator's to add, in a spec). */
static const struct sbx_rootfs_limits import_limits = { .max_bytes = 8ull << 30,
							.max_entries = 1000000,
							.allow_setuid = 0 };

static void progress(const struct build *b, const char *what)
{
	if (b->o->progress_fd >= 0 && isatty(b->o->progress_fd))
		dprintf(b->o->progress_fd, "sbx-template: %s: %s\n", b->o->name, what);
}

/* How a step runs (confine.h).  HOST: as root in the host's namespaces,
 * only for what the operator trusts (the host's archive, sbx's own kernel
 * and guest-init, a template image sbx made, the spec's own files);
 * CONFINED: whatever reads, writes or runs anything of the tree;
 * HOST_UID: apt's downloads, the one step that needs the network, as the
 * build's unprivileged uid. */
enum { HOST, CONFINED, HOST_UID };

struct step {
	const char *what;
	char *const *argv;
	int how;
	const char *out_name; /* stdout to this file of the work directory (else the log) */
	int in_fd;            /* stdin (-1: /dev/null) */
	/* A HOST program whose stdout is the step's stdin (a tar of what the
	 * step unpacks), run in feed_dir (an fd, -1: here). */
	char *const *feed;
	int feed_dir;
	const struct sbx_confine_bind *binds;
	unsigned nbinds;
	const char *chroot_tree;
	sbx_confine_fn fn; /* CONFINED: this instead of argv */
	void *arg;
	const int *keep; /* fn's fds */
	unsigned nkeep;
	const char *work; /* HOST_UID: its one directory (confine.h) */
};

/* A HOST program with the work directory's lock inherited, so the
 * directory stays locked until every process of it is gone.  It dies
 * with us. */
static pid_t host_spawn(struct build *b, char *const argv[], int in, int out, int dir)
{
	pid_t parent = getpid(), pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(b->logfd, 2) < 0 || (dir >= 0 && fchdir(dir) < 0))
		_exit(127);
	int fl = fcntl(b->wfd, F_GETFD);
	fcntl(b->wfd, F_SETFD, fl & ~FD_CLOEXEC);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv(argv[0], argv);
	_exit(127);
}

static int reap(pid_t pid)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run a step; output to the log (stdout to out_name when given).  The log
 * holds this step's output only: its tail is the message. */
static int run_step(struct build *b, const struct step *st, struct sbx_err *err)
{
	progress(b, st->what);
	if (ftruncate(b->logfd, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", st->what);
	_cleanup_close_ int out = -1, null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (st->out_name && (out = openat(b->wfd, st->out_name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", st->what);
	int pipefd[2] = { -1, -1 };
	pid_t feed = -1, pid = -1;
	if (null < 0 || (st->feed && pipe2(pipefd, O_CLOEXEC) < 0))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", st->what);
	if (st->feed && (feed = host_spawn(b, st->feed, null, pipefd[1], st->feed_dir)) < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", st->what);
	}
	int in = st->feed ? pipefd[0] : st->in_fd >= 0 ? st->in_fd : null;
	struct sbx_confine c = { .base = b->slot.base,
				 .binds = st->binds,
				 .nbinds = st->nbinds,
				 .chroot_tree = st->chroot_tree,
				 .fds = { in, out >= 0 ? out : b->logfd, b->logfd },
				 .keep = st->keep,
				 .nkeep = st->nkeep,
				 .work = st->how == HOST_UID ? st->work : NULL };
	struct sbx_err e = { 0 };
	if (st->how == HOST)
		pid = host_spawn(b, st->argv, in, c.fds[1], -1);
	else if (st->how == HOST_UID)
		pid = sbx_confine_spawn_host(&c, st->argv, &e);
	else
		pid = sbx_confine_spawn(&c, st->fn ? st->fn : sbx_confine_execv, st->fn ? st->arg : (void *)st->argv,
					&e);
	if (st->feed) {
		close(pipefd[0]);
		close(pipefd[1]);
	}
	int status = pid < 0 ? -1 : reap(pid), fstatus = feed < 0 ? 0 : reap(feed);
	if (pid < 0)
		return e.code ? (*err = e, sbx_err_wrap(err, "cannot %s", st->what))
			      : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", st->what);
	if (status == 0 && fstatus == 0)
		return 0;
	char tail[400];
	sbx_log_tail(b->wfd, "log", tail, sizeof tail);
	/* The helper exits 3 when the input is at fault (a package apt does
	 * not have, a root it refuses); anything else is ours. */
	int code = status == 3 || (status == 0 && fstatus == 3) ? SBX_EXIT_INVALID : SBX_EXIT_INTERNAL;
	return sbx_err_set(err, code, 0, "cannot %s: %s", st->what, tail[0] ? tail : "the step failed");
}

/* The tree, read-write, at its own path: what most confined steps get. */
#define ROOT_BIND(b)                                                                                                   \
	{ (b)->root, SBX_CONFINE_RW },                                                                                 \
	{                                                                                                              \
		(b)->helper, 0                                                                                         \
	}

static int confined(struct build *b, const char *what, char *const argv[], const char *out_name, struct sbx_err *err)
{
	const struct sbx_confine_bind binds[] = { ROOT_BIND(b) };
	struct step st = { .what = what,
			   .argv = argv,
			   .how = CONFINED,
			   .out_name = out_name,
			   .in_fd = -1,
			   .feed_dir = -1,
			   .binds = binds,
			   .nbinds = SBX_ARRAY_LEN(binds) };
	return run_step(b, &st, err);
}

static int on_host(struct build *b, const char *what, char *const argv[], const char *out_name, struct sbx_err *err)
{
	struct step st = { .what = what, .argv = argv, .how = HOST, .out_name = out_name, .in_fd = -1, .feed_dir = -1 };
	return run_step(b, &st, err);
}

/* src of the spec (relative, checked) as a path the kernel resolved
 * beneath the spec's directory: no '..', no symlink out. */
static int resolve_src(struct build *b, const char *src, char *out, size_t n, struct sbx_err *err)
{
	/* A tenant's spec follows no link at all (hostpath.h). */
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
					   (b->o->tenant ? RESOLVE_NO_SYMLINKS : 0) };
	_cleanup_close_ int fd = (int)syscall(SYS_openat2, b->spec_dfd, src, &how, sizeof how);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno == EXDEV ? 0 : errno, "%s: files: src '%.100s' %s",
				   b->spec.source, src,
				   errno == EXDEV   ? "leaves the spec's directory"
				   : errno == ELOOP ? "is or passes a symbolic link"
						    : "cannot be opened");
	char link[64];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t l = readlink(link, out, n - 1);
	if (l < 0 || (size_t)l >= n - 1)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot resolve %s", src);
	out[l] = 0;
	return 0;
}

/* The directory for dst (absolute in the guest) made and resolved inside
 * the root: a symlink in the tree (/etc -> /host) resolves in the root. */
static int guest_dir(struct build *b, const char *dir, char *out, size_t n, struct sbx_err *err)
{
	char cur[SBX_TMPLSPEC_PATH_LEN] = "";
	for (const char *p = dir; *p;) {
		while (*p == '/')
			p++;
		size_t l = strcspn(p, "/");
		if (!l)
			break;
		size_t cl = strlen(cur);
		snprintf(cur + cl, sizeof cur - cl, "/%.*s", (int)l, p);
		p += l;
		struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
					.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
		int fd = (int)syscall(SYS_openat2, b->rootfd, cur + 1, &how, sizeof how);
		if (fd < 0 && errno == ENOENT) {
			/* mkdir the last component under its resolved parent */
			char parent[SBX_TMPLSPEC_PATH_LEN];
			snprintf(parent, sizeof parent, "%s", cur);
			char *slash = strrchr(parent, '/');
			*slash = 0;
			int pfd = parent[0] ? (int)syscall(SYS_openat2, b->rootfd, parent + 1, &how, sizeof how)
					    : fcntl(b->rootfd, F_DUPFD_CLOEXEC, 0);
			/* Made by root here, handed to the tree's owner. */
			if (pfd < 0 || (mkdirat(pfd, slash + 1, 0755) < 0 && errno != EEXIST) ||
			    fchownat(pfd, slash + 1, b->slot.base, b->slot.base, AT_SYMLINK_NOFOLLOW) < 0) {
				int e = errno;
				if (pfd >= 0)
					close(pfd);
				return sbx_err_set(err, SBX_EXIT_INVALID, e, "%s: files: cannot make %s in the root",
						   b->spec.source, cur);
			}
			close(pfd);
			fd = (int)syscall(SYS_openat2, b->rootfd, cur + 1, &how, sizeof how);
		}
		if (fd < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "%s: files: %s is not a directory in the root",
					   b->spec.source, cur);
		if (!*p) {
			char link[64];
			snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
			ssize_t rl = readlink(link, out, n - 1);
			close(fd);
			if (rl < 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot resolve %s", cur);
			out[rl] = 0;
			return 0;
		}
		close(fd);
	}
	snprintf(out, n, "%s", b->root);
	return 0;
}

/* s with the characters special in a sed replacement escaped. */
static void sed_escape(const char *s, char *out, size_t n)
{
	size_t o = 0;
	for (; *s && o + 2 < n; s++) {
		if (*s == '|' || *s == '&' || *s == '\\')
			out[o++] = '\\';
		out[o++] = *s;
	}
	out[o] = 0;
}

/* Each files: entry: a tar of src (read on the host, from its directory
 * in the spec's, as the operator's own file) named as dst's last
 * component, unpacked confined into dst's directory of the root (made and
 * resolved inside the root).  tar replaces a link it finds at a name
 * rather than write through it, and a link of the tree's can only lead
 * into the confinement anyway. */
static int add_files(struct build *b, struct sbx_err *err)
{
	for (unsigned i = 0; i < b->spec.nfiles; i++) {
		const struct sbx_tmplspec_file *f = &b->spec.files[i];
		char src[1024], dir[SBX_TMPLSPEC_PATH_LEN], ddir[1600];
		if (resolve_src(b, f->src, src, sizeof src, err) < 0)
			return -1;
		snprintf(dir, sizeof dir, "%s", f->dst);
		char *slash = strrchr(dir, '/');
		char name[SBX_TMPLSPEC_PATH_LEN], xform[2 * SBX_TMPLSPEC_PATH_LEN + 16], esc[2 * SBX_TMPLSPEC_PATH_LEN];
		snprintf(name, sizeof name, "%s", slash + 1);
		*slash = 0;
		if (guest_dir(b, dir, ddir, sizeof ddir, err) < 0)
			return -1;
		/* src's directory, opened beneath the spec's as resolve_src
		 * checked it; tar reads the last component without following it. */
		char sparent[SBX_TMPLSPEC_PATH_LEN];
		snprintf(sparent, sizeof sparent, "%s", f->src);
		char *sslash = strrchr(sparent, '/');
		const char *sname = sslash ? sslash + 1 : f->src;
		if (sslash)
			*sslash = 0;
		struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
						   (b->o->tenant ? RESOLVE_NO_SYMLINKS : 0) };
		_cleanup_close_ int sdir = sslash ? (int)syscall(SYS_openat2, b->spec_dfd, sparent, &how, sizeof how)
						  : fcntl(b->spec_dfd, F_DUPFD_CLOEXEC, 0);
		if (sdir < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "%s: files: cannot open %s", b->spec.source,
					   f->src);
		sed_escape(name, esc, sizeof esc);
		/* The member's own name, not a link's target (flag S). */
		snprintf(xform, sizeof xform, "s|^[^/]*|%s|S", esc);
		char *tar[] = { "/bin/tar", "--numeric-owner", "--transform", xform, "-cf", "-",
				"--",       (char *)sname,     NULL };
		char mode[8] = "";
		if (f->mode >= 0)
			snprintf(mode, sizeof mode, "%04o", (unsigned)f->mode);
		char *put[] = { b->helper, "put", ddir, name, mode[0] ? mode : NULL, NULL };
		char what[400];
		snprintf(what, sizeof what, "copy %.100s to %.100s", f->src, f->dst);
		const struct sbx_confine_bind binds[] = { ROOT_BIND(b) };
		struct step st = { .what = what,
				   .argv = put,
				   .how = CONFINED,
				   .in_fd = -1,
				   .feed = tar,
				   .feed_dir = sdir,
				   .binds = binds,
				   .nbinds = SBX_ARRAY_LEN(binds) };
		if (run_step(b, &st, err) < 0)
			return -1;
	}
	return 0;
}

/* uid and gid of user (a name, or a uid) in the root's /etc/passwd; -1
 * when absent. */
static int root_user(struct build *b, const char *user, unsigned *uid, unsigned *gid)
{
	size_t ul = strlen(user);
	int numeric = ul && strspn(user, "0123456789") == ul;
	/* The tree's file, read by root: never a FIFO (O_NONBLOCK, regular
	 * files only), never past the tree. */
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	_cleanup_close_ int fd = (int)syscall(SYS_openat2, b->rootfd, "etc/passwd", &how, sizeof how);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))
		return -1;
	FILE *f = fdopen(fd, "r");
	if (!f)
		return -1;
	fd = -1;
	char line[512];
	int found = -1;
	while (found < 0 && fgets(line, sizeof line, f)) {
		unsigned u, g;
		if (numeric) {
			if (sscanf(line, "%*[^:]:%*[^:]:%u:%u:", &u, &g) == 2 && u == strtoul(user, NULL, 10))
				*uid = u, *gid = g, found = 0;
		} else if (!strncmp(line, user, ul) && line[ul] == ':' &&
			   sscanf(line + ul, ":%*[^:]:%u:%u:", uid, gid) == 2)
			found = 0;
	}
	fclose(f);
	return found;
}

/* The user execs run as, in the form a session takes it (sbx_user_parse,
 * create.c): root, user or a uid.  Another name of the root's /etc/passwd
 * becomes its uid; USER:GROUP (an image's User) only with the user's own
 * group, the one a session's user runs with. */
static int manifest_user(struct build *b, const char *what, char *user, unsigned *uid, unsigned *gid,
			 struct sbx_err *err)
{
	char u[SBX_TMPLSPEC_USER_LEN];
	snprintf(u, sizeof u, "%s", user);
	char *grp = strchr(u, ':');
	if (grp)
		*grp++ = 0;
	uint32_t num;
	int simple = sbx_user_parse(u, &num) == 0;
	if (root_user(b, u, uid, gid) < 0) {
		if (!simple || !strcmp(u, "user"))
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"%s: user '%.40s' is not root, user, a uid or a user of the root's /etc/passwd", what,
				user);
		*uid = *gid = num;
	}
	if (grp) {
		char *end;
		errno = 0;
		unsigned long g = strtoul(grp, &end, 10);
		if (!*grp || *end || errno || g != *gid)
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"%s: user '%.40s': a session runs as a user with its own group (%u), not another", what,
				user, *gid);
	}
	if (simple && (strcmp(u, "user") || *uid == 1000))
		snprintf(user, SBX_TMPLSPEC_USER_LEN, "%s", u);
	else
		snprintf(user, SBX_TMPLSPEC_USER_LEN, "%u", *uid);
	return 0;
}

static int set_user(struct build *b, struct sbx_err *err)
{
	unsigned uid = 0, gid = 0;
	char what[SBX_TMPLSPEC_PATH_LEN + 40];
	snprintf(what, sizeof what, "%s: %s", b->spec.source, b->o->import ? "the image config's User" : "user");
	if (b->spec.user[0] && manifest_user(b, what, b->spec.user, &uid, &gid, err) < 0)
		return -1;
	for (unsigned i = 0; i < b->spec.nrun; i++) {
		unsigned u, g;
		if (b->spec.run[i].user[0] && root_user(b, b->spec.run[i].user, &u, &g) < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "%s: run[%u]: no user '%s' in the root's /etc/passwd", b->spec.source, i,
					   b->spec.run[i].user);
	}
	if (!b->spec.workdir[0])
		return 0;
	char wd[1600];
	if (guest_dir(b, b->spec.workdir, wd, sizeof wd, err) < 0)
		return -1;
	/* An image's WorkingDir keeps its owner, as a container's does. */
	if (b->spec.user[0] && !b->o->import && strcmp(b->spec.workdir, "/")) {
		if (uid >= SBX_CONFINE_IDS || gid >= SBX_CONFINE_IDS)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "%s: user %u:%u is outside the ids 0-65535 a template may hold", what, uid,
					   gid);
		/* The tree's ids, as the host sees them (confine.h). */
		if (lchown(wd, b->slot.base + uid, b->slot.base + gid) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot chown %s", b->spec.workdir);
	}
	return 0;
}

static int sha256_at(int dfd, const char *name, char out[65], unsigned long long *size)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	SHA2_CTX c;
	SHA256Init(&c);
	static uint8_t buf[1 << 16];
	ssize_t r;
	*size = 0;
	while ((r = read(fd, buf, sizeof buf)) > 0) {
		SHA256Update(&c, buf, (size_t)r);
		*size += (unsigned long long)r;
	}
	if (r < 0)
		return -1;
	SHA256End(&c, out);
	return 0;
}

static void sha256_str(const char *s, char out[65])
{
	SHA256Data((const uint8_t *)s, strlen(s), out);
}

/* The base: a template, or for debian:SUITE, busybox and imports the
 * default template's kernel and initramfs; none for a spec with a kernel
 * of its own that is not from a template. */
static int find_base(struct build *b, struct sbx_err *err)
{
	if (b->spec.kernel[0] && b->spec.from != SBX_FROM_TEMPLATE) {
		/* Nothing comes from another template. */
		b->base_manifest = json_object();
		return b->base_manifest ? 0 : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot build");
	}
	const char *ref = b->spec.from == SBX_FROM_TEMPLATE ? b->spec.from_ref : "default";
	if (sbx_template_resolve(b->st, b->o->tenant, ref, &b->base, err) < 0)
		return sbx_err_wrap(err, "%s: from: %s", b->spec.source,
				    b->spec.from != SBX_FROM_TEMPLATE
					    ? "the kernel and initramfs come from template default (or give kernel:)"
					    : b->spec.from_ref);
	if (b->base.snapshot)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "%s: from: %s@%s is a snapshot (a saved session), not a root to build on",
				   b->spec.source, b->base.ref, b->base.version);
	_cleanup_close_ int d = open(b->base.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *txt = d < 0 ? NULL : sbx_read_small_at(d, "manifest.json", 1 << 20, NULL);
	if (!txt || !(b->base_manifest = json_loads(txt, 0, NULL)))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot read the manifest of %s@%s", b->base.ref,
				   b->base.version);
	return 0;
}

static int publish_check(struct build *b, struct sbx_err *err)
{
	const char *caller = b->o->tenant;
	b->owner[0] = 0;
	if (caller) {
		static struct sbx_hostconf hc;
		if (sbx_hostconf_load(&hc, err) < 0)
			return -1;
		if (!sbx_hostconf_publisher(&hc, caller))
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"building a template is the operator's: tenant %s is not in templates.publishers of %s",
				caller, hc.source[0] ? hc.source : "sbx.yaml (there is none)");
		snprintf(b->owner, sizeof b->owner, "%s", caller);
	}
	if (strlen(b->owner) + 1 + strlen(b->o->name) >= 64)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "template name %s is too long (at most 63 bytes with its owner)", b->o->name);
	char who[SBX_ID_MAX + 1];
	if (sbx_template_holder(b->st, b->owner, b->o->name, who))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "template %s belongs to %s%s: a build never shadows another owner's template",
				   b->o->name, who[0] ? "tenant " : "the ", sbx_template_owner_name(who));
	return 0;
}

/* --- run: steps, in a build microVM of the new root ------------------------ */

#define STAGE "stage"                /* under the work directory: a templates dir */
#define STAGE_TMPL "sbx-build@stage" /* the one template in it */

/* rootfs.ext4 of the root as it stands, made confined in work/img (the
 * tree's owner's), then checked (a regular file of that owner, one link:
 * not a link to anything of the host's a compromised mkfs might have
 * left) and moved to dir/rootfs.ext4 (dfd), root's. */
static int make_image(struct build *b, const char *what, int dfd, struct sbx_err *err)
{
	char img[1600], stamp[1600];
	snprintf(img, sizeof img, "%s/img/rootfs.ext4", b->wpath);
	snprintf(stamp, sizeof stamp, "%s/stamp", b->wpath);
	char imgdir[1600];
	snprintf(imgdir, sizeof imgdir, "%s/img", b->wpath);
	sbx_rm_rf_at(b->wfd, "img");
	if (mkdirat(b->wfd, "img", 0755) < 0 ||
	    fchownat(b->wfd, "img", b->slot.base, b->slot.base, AT_SYMLINK_NOFOLLOW) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", what);
	char *argv[] = { b->helper, "mkfs", b->root, img, stamp, NULL };
	const struct sbx_confine_bind binds[] = { ROOT_BIND(b), { imgdir, SBX_CONFINE_RW }, { stamp, 0 } };
	struct step st = { .what = what,
			   .argv = argv,
			   .how = CONFINED,
			   .in_fd = -1,
			   .feed_dir = -1,
			   .binds = binds,
			   .nbinds = SBX_ARRAY_LEN(binds) };
	if (run_step(b, &st, err) < 0)
		return -1;
	_cleanup_close_ int fd = openat(b->wfd, "img/rootfs.ext4", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_nlink != 1 || sb.st_uid != b->slot.base)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s: the step left no image of its own", what);
	if (fchown(fd, 0, 0) < 0 || fchmod(fd, 0644) < 0 || renameat(b->wfd, "img/rootfs.ext4", dfd, "rootfs.ext4") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot %s", what);
	sbx_rm_rf_at(b->wfd, "img");
	return 0;
}

/* The root as it stands, as a template of its own in work/stage. */
static int stage(struct build *b, struct sbx_err *err)
{
	char dir[1700];
	snprintf(dir, sizeof dir, "%s/" STAGE "/" STAGE_TMPL, b->wpath);
	if (mkdirat(b->wfd, STAGE, 0755) < 0 || mkdirat(b->wfd, STAGE "/" STAGE_TMPL, 0755) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot stage the build VM");
	_cleanup_close_ int bdir = open(b->boot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int sd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sd < 0 || make_image(b, "make the build VM's root", sd, err) < 0)
		return sd < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot stage the build VM") : -1;
	static const char *const shared[] = { "vmlinux", "initrd.cpio" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(shared); i++) {
		if (bdir >= 0 && linkat(bdir, shared[i], sd, shared[i], 0) == 0)
			continue;
		char from[1600], to[1900];
		snprintf(from, sizeof from, "%s/%s", b->boot, shared[i]);
		snprintf(to, sizeof to, "%s/%s", dir, shared[i]);
		char *cp[] = { "/bin/cp", "--reflink=auto", "--", from, to, NULL };
		if (on_host(b, "copy the kernel and initramfs", cp, NULL, err) < 0)
			return -1;
	}
	json_t *m = json_pack("{s:i, s:s, s:s, s:s, s:O}", "schema", 1, "name", "sbx-build", "version", "stage",
			      "created", "1970-01-01T00:00:00Z", "kernel", b->kernel ?: json_null());
	_cleanup_free_ char *txt = m ? json_dumps(m, 0) : NULL;
	json_decref(m);
	return txt ? sbx_atomic_write_at(sd, "manifest.json", txt, strlen(txt), 0644, err)
		   : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot stage the build VM");
}

/* The build policy: sbx's defaults (no network), room for the steps and
 * for the root coming back as one exec's output. */
static void build_policy(struct sbx_policy *p)
{
	sbx_policy_defaults(p);
	p->resources.disk = 8ull << 30;
	p->resources.output_cap = p->resources.output_session_cap = 16ull << 30;
	p->resources.exec_timeout_default_ms = p->resources.exec_timeout_max_ms = 60ull * 60 * 1000;
	snprintf(p->source, sizeof p->source, "template build");
}

static int exec_in(struct build *b, const char *id, const char *cmd, unsigned uid, unsigned gid, int out_fd,
		   struct sbx_exit_info *ex, struct sbx_err *err)
{
	char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	struct sbx_exec_opts eo = {
		.req = { .argv = argv, .argc = 3, .cwd = "/", .uid = uid, .gid = gid, .have_uid = 1, .have_gid = 1 },
		.in_fd = -1,
		.out_fd = out_fd,
		.err_fd = b->logfd,
		.tty_fd = -1
	};
	struct sbx_exec_result r;
	if (sbx_exec_run(b->st, id, &eo, &r, err) < 0)
		return -1;
	*ex = r.exit;
	return 0;
}

/* The top-level entries but the guest's mounts, tarred by the guest. */
#define CAPTURE "cd / && exec tar -cf - --numeric-owner $(ls -A | grep -vxE 'proc|dev|sys|run|lost\\+found')"

static int run_steps(struct build *b, struct sbx_err *err)
{
	if (stage(b, err) < 0)
		return -1;
	struct sbx_policy pol;
	build_policy(&pol);
	char stagedir[1500];
	snprintf(stagedir, sizeof stagedir, "%s/" STAGE, b->wpath);
	/* The create (and its monitor) find the staged template there. */
	const char *was = getenv("SBX_TEMPLATES");
	_cleanup_free_ char *saved = was ? strdup(was) : NULL;
	setenv("SBX_TEMPLATES", stagedir, 1);
	/* Named for what it is in sbx-ps while it runs. */
	char id[40];
	snprintf(id, sizeof id, "tmplbuild-%08x", arc4random());
	struct sbx_create_opts co = { .id = id, .tmpl = STAGE_TMPL, .policy = &pol, .progress_fd = -1 };
	struct sbx_session s;
	int existed = 0;
	progress(b, "boot the build VM");
	int rc = sbx_session_create(b->st, &co, &s, &existed, err);
	if (saved)
		setenv("SBX_TEMPLATES", saved, 1);
	else
		unsetenv("SBX_TEMPLATES");
	if (rc < 0)
		return sbx_err_wrap(err, "cannot boot the build VM");
	for (unsigned i = 0; rc == 0 && i < b->spec.nrun; i++) {
		const struct sbx_tmplspec_run *r = &b->spec.run[i];
		unsigned uid = 0, gid = 0;
		if (r->user[0] && root_user(b, r->user, &uid, &gid) < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INVALID, 0,
					 "%s: run[%u]: no user '%s' in the root's /etc/passwd", b->spec.source, i,
					 r->user);
			break;
		}
		char what[200];
		snprintf(what, sizeof what, "run[%u]: %.150s", i, r->cmd);
		progress(b, what);
		if (ftruncate(b->logfd, 0) < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot run %s", what);
			break;
		}
		struct sbx_exit_info ex;
		if ((rc = exec_in(b, s.id, r->cmd, uid, gid, b->logfd, &ex, err)) < 0)
			break;
		if (ex.reason != SBX_R_EXITED || ex.status) {
			static const char *const why[] = { "ended",      "exited",     "was killed by a signal",
							   "timed out",  "was killed", "ran out of memory",
							   "lost its VM" };
			char tail[300], how[80];
			sbx_log_tail(b->wfd, "log", tail, sizeof tail);
			if (ex.reason == SBX_R_EXITED)
				snprintf(how, sizeof how, "exited %u", ex.status);
			else
				snprintf(how, sizeof how, "%s", why[ex.reason <= SBX_R_MAX ? ex.reason : 0]);
			rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s %s%s%s; nothing was published",
					 b->spec.source, what, how, tail[0] ? ": " : "", tail);
		}
	}
	if (rc == 0) {
		progress(b, "capture the root");
		_cleanup_close_ int out = openat(b->wfd, "capture.tar", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		struct sbx_exit_info ex;
		if (ftruncate(b->logfd, 0) < 0 || out < 0)
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot capture the root");
		else if ((rc = exec_in(b, s.id, "sync; " CAPTURE, 0, 0, out, &ex, err)) == 0 &&
			 (ex.reason != SBX_R_EXITED || ex.status)) {
			char tail[300];
			sbx_log_tail(b->wfd, "log", tail, sizeof tail);
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot capture the root: %s", tail);
		}
	}
	int gone;
	sbx_session_destroy(b->st, s.id, &gone, NULL);
	if (rc < 0)
		return -1;
	/* The guest's tar, unpacked confined in place of the root's contents. */
	_cleanup_close_ int in = openat(b->wfd, "capture.tar", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the root the build VM sent");
	char *argv[] = { b->helper, "replace-root", b->root, NULL };
	const struct sbx_confine_bind binds[] = { ROOT_BIND(b) };
	struct step st = { .what = "take the root from the build VM",
			   .argv = argv,
			   .how = CONFINED,
			   .in_fd = in,
			   .feed_dir = -1,
			   .binds = binds,
			   .nbinds = SBX_ARRAY_LEN(binds) };
	rc = run_step(b, &st, err);
	unlinkat(b->wfd, "capture.tar", 0);
	return rc;
}

void sbx_tmplbuild_gc(struct sbx_state *st, int dry_run, sbx_gc_cb cb, void *ctx)
{
	char **ids;
	size_t n;
	if (sbx_session_list(st, &ids, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct sbx_session s;
		if (!strncmp(ids[i], "tmplbuild-", 10) && sbx_record_load(st, ids[i], &s, NULL) == 0) {
			/* tmpl_dir is WORK/stage/sbx-build@stage */
			char work[sizeof s.tmpl_dir];
			snprintf(work, sizeof work, "%s", s.tmpl_dir);
			for (int k = 0; k < 2; k++) {
				char *sl = strrchr(work, '/');
				if (sl)
					*sl = 0;
			}
			int fd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			int orphan = fd < 0 || flock(fd, LOCK_SH | LOCK_NB) == 0;
			if (fd >= 0)
				close(fd);
			if (orphan) {
				sbx_gc_report(cb, ctx, "reclaim-build-vm", ids[i],
					      "the build that booted it is gone (%s)", work);
				int gone;
				if (!dry_run)
					sbx_session_destroy(st, ids[i], &gone, NULL);
			}
		}
		free(ids[i]);
	}
	free(ids);
}

/* Before anything is made: the name, the spec, the base, every src. */
/* The caller's file (a spec or an archive), resolved as every host path a
 * caller names is (hostpath.h: for a tenant, beneath its host_paths.read
 * roots, no link followed), opened without blocking (a FIFO answers at
 * once) and only if it is a regular file; dir_fd, when asked, gets its
 * directory. */
static int open_caller_file(struct build *b, const char *path, const char *key, int *dir_fd, struct sbx_err *err)
{
	_cleanup_hostpath_ struct sbx_hostpath hp;
	if (sbx_hostpath_resolve(b->o->tenant, path, SBX_HOSTPATH_READ | SBX_HOSTPATH_FOLLOW, key, &hp, err) < 0) {
		/* A missing file is bad input here (3), as it always was. */
		if (err->code == SBX_EXIT_NOENT)
			sbx_err_set(err, SBX_EXIT_INVALID, ENOENT, "cannot read %s %.200s",
				    dir_fd ? "template spec" : "archive", path);
		return -1;
	}
	int fd = sbx_hostpath_openat(&hp, NULL, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INVALID, fd < 0 ? e : 0, "%s: cannot read %.200s%s", key, hp.real,
				   fd < 0 ? "" : ": not a regular file");
	}
	if (dir_fd && (*dir_fd = fcntl(hp.dir_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the directory of %s", hp.real);
	}
	if (dir_fd) {
		snprintf(b->specdir, sizeof b->specdir, "%s", hp.real);
		char *slash = strrchr(b->specdir, '/');
		if (slash)
			*slash = 0;
	}
	return fd;
}

/* The publisher check comes before anything of the caller's is opened:
 * who may not build learns nothing of the host's files. */
static int check_inputs(struct build *b, struct sbx_err *err)
{
	if (sbx_id_check(b->o->name, "template", err) < 0)
		return -1;
	if (strlen(b->o->name) >= 64)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid template name '%.80s': longer than 63",
				   b->o->name);
	if (publish_check(b, err) < 0)
		return -1;
	if (sbx_libexec_path(HELPER, b->helper, sizeof b->helper) < 0 || access(b->helper, X_OK) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot find libexec/sbx/" HELPER);
	if (b->o->import) {
		/* An import is a spec of its own: the tree from the file, the
		 * kernel and initramfs from the default template. */
		memset(&b->spec, 0, sizeof b->spec);
		b->spec.from = SBX_FROM_DEBIAN;
		snprintf(b->spec.from_ref, sizeof b->spec.from_ref, "import");
		snprintf(b->spec.source, sizeof b->spec.source, "%s", b->o->import);
		if (!(b->spec.env = json_object()))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot import");
		if ((b->import_fd = open_caller_file(b, b->o->import, "import", NULL, err)) < 0)
			return -1;
		return find_base(b, err);
	}
	if ((b->spec_fd = open_caller_file(b, b->o->spec, "-f", &b->spec_dfd, err)) < 0)
		return -1;
	/* A tenant's spec is read by root: its errors quote nothing of it. */
	if (sbx_tmplspec_load_fd(b->spec_fd, b->o->spec, b->o->tenant != NULL, &b->spec, err) < 0)
		return -1;
	if (find_base(b, err) < 0)
		return -1;
	for (unsigned i = 0; i < b->spec.nfiles; i++) {
		char p[1024];
		if (resolve_src(b, b->spec.files[i].src, p, sizeof p, err) < 0)
			return -1;
	}
	return 0;
}

static int make_work(struct build *b, struct sbx_err *err)
{
	if ((b->tdir = sbx_template_ns(b->st, b->owner, 1, err)) < 0)
		return -1;
	snprintf(b->work, sizeof b->work, WORK_PREFIX "%s-%08x", b->o->name, arc4random());
	/* 0755: the jailed VMM of a build VM reads the staged template in it */
	if (mkdirat(b->tdir, b->work, 0755) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create a build directory");
	b->wfd = openat(b->tdir, b->work, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (b->wfd < 0 || flock(b->wfd, LOCK_EX | LOCK_NB) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the build directory");
	char link[64];
	snprintf(link, sizeof link, "/proc/self/fd/%d", b->wfd);
	ssize_t l = readlink(link, b->wpath, sizeof b->wpath - 1);
	if (l < 0 || (size_t)l >= sizeof b->root - 6)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot resolve the build directory");
	b->wpath[l] = 0;
	snprintf(b->root, sizeof b->root, "%s/root", b->wpath);
	/* The tree belongs to the build's ids from the start (confine.h). */
	if (mkdirat(b->wfd, "root", 0755) < 0 || mkdirat(b->wfd, "tpl", 0755) < 0 ||
	    fchownat(b->wfd, "root", b->slot.base, b->slot.base, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (b->rootfd = openat(b->wfd, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
	    (b->logfd = openat(b->wfd, "log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot prepare the build directory");
	_cleanup_close_ int s = openat(b->wfd, "stamp", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	return s < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot prepare the build directory") : 0;
}

/* NAME<TAB>VALUE lines of a helper's output in the work directory, as
 * an array of {kname: NAME, vname: VALUE}. */
static json_t *read_tsv(struct build *b, const char *file, const char *kname, const char *vname)
{
	json_t *a = json_array();
	_cleanup_free_ char *txt = sbx_read_small_at(b->wfd, file, 8 << 20, NULL);
	for (char *save = NULL, *line = txt ? strtok_r(txt, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t');
		if (tab) {
			*tab = 0;
			json_array_append_new(a, json_pack("{s:s, s:s}", kname, line, vname, tab + 1));
		}
	}
	return a;
}

/* The template's own kernel and initramfs (spec kernel:), made in tpl/
 * before anything else so a build VM boots them too. */
static int own_kernel(struct build *b, struct sbx_err *err)
{
	char tpl[1600];
	snprintf(tpl, sizeof tpl, "%s/tpl", b->wpath);
	char *argv[] = { b->helper, "kernel", b->spec.kernel, tpl, NULL };
	if (on_host(b, "make the kernel and initramfs", argv, "kernel.tsv", err) < 0)
		return -1;
	json_t *kv = read_tsv(b, "kernel.tsv", "k", "v"), *v;
	size_t i;
	b->kernel = json_object();
	json_array_foreach (kv, i, v) {
		const char *k = json_string_value(json_object_get(v, "k"));
		const char *val = json_string_value(json_object_get(v, "v"));
		if (!strcmp(k, "guest_init_sha256"))
			snprintf(b->gi_sha, sizeof b->gi_sha, "%s", val);
		else
			json_object_set_new(b->kernel, k, json_string(val));
	}
	json_decref(kv);
	snprintf(b->boot, sizeof b->boot, "%s", tpl);
	if (!json_is_string(json_object_get(b->kernel, "release")) || strlen(b->gi_sha) != 64)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				   "cannot make the kernel and initramfs: the helper said no release");
	return 0;
}

static json_t *read_packages(struct build *b)
{
	json_t *a = read_tsv(b, "packages.tsv", "name", "version");
	if (!json_array_size(a)) {
		/* no dpkg database: what the busybox root was made of */
		json_decref(a);
		a = read_tsv(b, "base-packages.tsv", "name", "version");
	}
	if (!json_array_size(a) && !b->o->import) {
		/* no dpkg database (busybox roots): the base's list */
		json_decref(a);
		a = json_deep_copy(json_object_get(b->base_manifest, "packages"));
		if (!json_is_array(a)) {
			json_decref(a);
			a = json_array();
		}
		return a;
	}
	const char *kp = json_string_value(json_object_get(b->kernel, "package"));
	const char *kv = json_string_value(json_object_get(b->kernel, "version"));
	if (kp && kv)
		json_array_append_new(a, json_pack("{s:s, s:s}", "name", kp, "version", kv));
	return a;
}

/* The spec's text as it was parsed (the same open file), for its hash. */
static char *spec_text(int fd)
{
	struct stat sb;
	if (fstat(fd, &sb) < 0 || sb.st_size > (off_t)SBX_TMPLSPEC_FILE_MAX)
		return NULL;
	char *t = malloc((size_t)sb.st_size + 1);
	ssize_t n = t ? pread(fd, t, (size_t)sb.st_size, 0) : -1;
	if (n < 0) {
		free(t);
		return NULL;
	}
	t[n] = 0;
	return t;
}

/* The base's kernel and initramfs (immutable: linked, copied across file
 * systems), the new root, hashes and the manifest, all in tpl/. */
static int assemble(struct build *b, json_t **manifest, char version[64], char content[65], unsigned long long *total,
		    struct sbx_err *err)
{
	_cleanup_close_ int tpl = openat(b->wfd, "tpl", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int bdir = b->spec.kernel[0] ? -1 : open(b->base.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if ((bdir < 0 && !b->spec.kernel[0]) || tpl < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", b->base.dir);
	static const char *const shared[] = { "vmlinux", "initrd.cpio" };
	for (size_t i = 0; !b->spec.kernel[0] && i < SBX_ARRAY_LEN(shared); i++) {
		if (linkat(bdir, shared[i], tpl, shared[i], 0) == 0)
			continue;
		char from[800], to[1600];
		snprintf(from, sizeof from, "%s/%s", b->base.dir, shared[i]);
		snprintf(to, sizeof to, "%s/tpl/%s", b->wpath, shared[i]);
		char *argv[] = { "/bin/cp", "--reflink=auto", "--", from, to, NULL };
		if (on_host(b, "copy the kernel and initramfs", argv, NULL, err) < 0)
			return -1;
	}
	json_t *files = json_object();
	static const char *const names[] = { "initrd.cpio", "rootfs.ext4", "vmlinux" };
	char sums[600] = "";
	*total = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++) {
		char sum[65];
		unsigned long long size;
		if (sha256_at(tpl, names[i], sum, &size) < 0) {
			json_decref(files);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hash %s", names[i]);
		}
		fchmodat(tpl, names[i], 0644, 0);
		json_object_set_new(files, names[i], json_pack("{s:I, s:s}", "size", (json_int_t)size, "sha256", sum));
		snprintf(sums + strlen(sums), sizeof sums - strlen(sums), "%s %s\n", names[i], sum);
		*total += size;
	}
	sha256_str(sums, content); /* as lib-image.sh: over "file sha" lines, sorted */
	json_t *spec = sbx_tmplspec_json(&b->spec);
	_cleanup_free_ char *spec_txt = json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
	_cleanup_free_ char *spec_file = b->spec_fd >= 0 ? spec_text(b->spec_fd) : NULL;
	char spec_sha[65], vsha[65];
	sha256_str(spec_file ? spec_file : "", spec_sha);
	/* The version: the inputs (the spec as parsed, the base) and the result. */
	char base_ref[140] = "";
	if (b->base.ref[0])
		snprintf(base_ref, sizeof base_ref, "%s@%s", b->base.ref, b->base.version);
	char *all = NULL;
	if (asprintf(&all, "%s\n%s\n%s\n", spec_txt ? spec_txt : "", base_ref, content) < 0) {
		json_decref(spec);
		json_decref(files);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot hash the inputs");
	}
	sha256_str(all, vsha);
	free(all);
	snprintf(version, 64, "%.12s", vsha);
	char created[40];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *kernel = json_deep_copy(b->kernel);
	json_t *m = json_pack("{s:i, s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:s, s:s, s:I,"
			      " s:{s:s, s:s, s:s}, s:o, s:s, s:O, s:s, s:s}",
			      "schema", 1, "name", b->o->name, "version", version, "created", created, "kernel",
			      kernel ? kernel : json_null(), "packages", read_packages(b), "files", files,
			      "content_sha256", content, "guest_init_sha256", b->gi_sha, "owner",
			      sbx_template_owner_name(b->owner), "size_bytes", (json_int_t)*total, "source", "kind",
			      "spec", "path", b->o->spec ? b->o->spec : "", "sha256", spec_sha, "spec", spec, "base",
			      base_ref, "env", b->spec.env, "user", b->spec.user, "workdir", b->spec.workdir);
	if (!m)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot write the manifest");
	if (b->o->import) {
		json_object_set_new(
			m, "source",
			json_pack("{s:s, s:s, s:s}", "kind", "import", "path", b->o->import, "format", b->format));
		json_object_del(m, "spec");
	}
	_cleanup_free_ char *txt = json_dumps(m, JSON_INDENT(2));
	if (!txt || sbx_atomic_write_at(tpl, "manifest.json", txt, strlen(txt), 0644, err) < 0) {
		json_decref(m);
		return txt ? -1 : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot write the manifest");
	}
	fchmod(tpl, 0755);
	*manifest = m;
	return 0;
}

/* Same NAME@VERSION already there with the same content: nothing to do. */
static int same_content(int tdir, const char *entry, const char *content)
{
	_cleanup_close_ int d = openat(tdir, entry, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *txt = d < 0 ? NULL : sbx_read_small_at(d, "manifest.json", 1 << 20, NULL);
	json_t *m = txt ? json_loads(txt, 0, NULL) : NULL;
	const char *c = json_string_value(json_object_get(m, "content_sha256"));
	int same = c && !strcmp(c, content);
	json_decref(m);
	return same;
}

static int commit(struct build *b, const char *version, const char *content, struct sbx_tmplbuild_result *r,
		  struct sbx_err *err)
{
	char final[140], tplrel[200];
	snprintf(final, sizeof final, "%s@%s", b->o->name, version);
	snprintf(tplrel, sizeof tplrel, "%s/tpl", b->work);
	_cleanup_close_ int g = sbx_lock_global(b->st, err);
	if (g < 0)
		return -1;
	char who[SBX_ID_MAX + 1];
	if (sbx_template_holder(b->st, b->owner, b->o->name, who))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "template %s belongs to %s%s: a build never shadows another owner's template",
				   b->o->name, who[0] ? "tenant " : "the ", sbx_template_owner_name(who));
	if (same_content(b->tdir, final, content)) {
		r->existed = 1;
		return 0;
	}
	if (renameat2(b->tdir, tplrel, b->tdir, final, RENAME_NOREPLACE) < 0)
		return errno == EEXIST || errno == ENOTEMPTY
			       ? sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "template %s already exists with other content",
					     final)
			       : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot publish template %s", final);
	fsync(b->tdir);
	return 0;
}

/* --- the root, step by step ---------------------------------------------- */

struct unpack_arg {
	int root, archive;
	const char *name;
};

/* Confined (confine.h): libarchive reads the hostile archive as nobody the
 * host knows, through the two fds it was given; what the image config
 * said (and the outcome) goes back as JSON on stdout. */
static int unpack_confined(void *p)
{
	const struct unpack_arg *a = p;
	struct sbx_rootfs_config cfg;
	struct sbx_err e = { 0 };
	int rc = sbx_rootfs_unpack_fd(a->root, a->archive, a->name, &import_limits, &cfg, &e);
	json_t *j = json_pack("{s:i, s:s, s:O?, s:s, s:s, s:s}", "code", rc < 0 ? e.code : 0, "msg", e.msg, "env",
			      cfg.env, "user", cfg.user, "workdir", cfg.workdir, "format", cfg.format);
	sbx_rootfs_config_free(&cfg);
	int ok = j && json_dumpfd(j, 1, JSON_COMPACT) == 0;
	json_decref(j);
	return ok ? 0 : 70;
}

static int import_root(struct build *b, struct sbx_err *err)
{
	struct unpack_arg a = { .root = b->rootfd, .archive = b->import_fd, .name = b->o->import };
	const int keep[] = { b->rootfd, b->import_fd };
	struct step st = { .what = "unpack the archive",
			   .how = CONFINED,
			   .out_name = "unpack.json",
			   .in_fd = -1,
			   .feed_dir = -1,
			   .fn = unpack_confined,
			   .arg = &a,
			   .keep = keep,
			   .nkeep = 2 };
	if (run_step(b, &st, err) < 0)
		return -1;
	/* The one thing read back from the confined step, kept small. */
	_cleanup_free_ char *txt = sbx_read_small_at(b->wfd, "unpack.json", 1 << 20, NULL);
	json_t *j = txt ? json_loads(txt, 0, NULL) : NULL;
	json_t *code = json_object_get(j, "code"), *env = json_object_get(j, "env");
	if (json_is_null(env))
		env = NULL;
	const char *msg = json_string_value(json_object_get(j, "msg"));
	const char *user = json_string_value(json_object_get(j, "user"));
	const char *wd = json_string_value(json_object_get(j, "workdir"));
	const char *fmt = json_string_value(json_object_get(j, "format"));
	int rc = 0;
	if (!json_is_integer(code) || !msg || !user || !wd || !fmt || (env && !json_is_object(env)))
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot unpack the archive: the step said nothing");
	else if (json_integer_value(code)) {
		json_int_t c = json_integer_value(code);
		rc = sbx_err_set(err, c > 0 && c < 256 ? (int)c : SBX_EXIT_INTERNAL, 0, "%s", msg);
	} else {
		if (env) {
			json_decref(b->spec.env);
			b->spec.env = json_incref(env);
		}
		snprintf(b->spec.user, sizeof b->spec.user, "%s", user);
		snprintf(b->spec.workdir, sizeof b->spec.workdir, "%s", wd);
		snprintf(b->format, sizeof b->format, "%s", fmt);
		sbx_err_set(err, SBX_EXIT_OK, 0, "%s", msg);
	}
	json_decref(j);
	if (rc < 0)
		return -1;
	char *argv[] = { b->helper, "prepare", b->root, NULL };
	return confined(b, "prepare the root for guest-init", argv, NULL, err);
}

/* The base's tree, produced on the host from what the operator trusts (a
 * template image sbx made, the host's archive, Debian's busybox) as a tar
 * stream and unpacked confined. */
static int base_root(struct build *b, struct sbx_err *err)
{
	char tsv[1600];
	snprintf(tsv, sizeof tsv, "%s/base-packages.tsv", b->wpath);
	char *tt[] = { b->helper, "tar-template", b->base.rootfs, NULL };
	char *td[] = { b->helper, "tar-debian", b->spec.from_ref, NULL };
	char *tb[] = { b->helper, "tar-busybox", tsv, NULL };
	const char *kind = b->spec.from == SBX_FROM_TEMPLATE  ? "template"
			   : b->spec.from == SBX_FROM_BUSYBOX ? "busybox"
							      : "debian";
	char *argv[] = { b->helper, "unpack", b->root, (char *)kind, NULL };
	const struct sbx_confine_bind binds[] = { ROOT_BIND(b) };
	struct step st = { .how = CONFINED,
			   .argv = argv,
			   .in_fd = -1,
			   .feed_dir = -1,
			   .binds = binds,
			   .nbinds = SBX_ARRAY_LEN(binds) };
	if (b->spec.from == SBX_FROM_TEMPLATE)
		st.what = "unpack the base's root", st.feed = tt;
	else if (b->spec.from == SBX_FROM_BUSYBOX)
		st.what = "unpack busybox", st.feed = tb;
	else
		st.what = "bootstrap Debian", st.feed = td;
	return run_step(b, &st, err);
}

/* packages: the tree's facts read confined, the host archive's lists and
 * .debs fetched on the host as the build's uid, the install confined in
 * the tree with no network. */
static int install_packages(struct build *b, struct sbx_err *err)
{
	char apt[1600];
	snprintf(apt, sizeof apt, "%s/apt", b->wpath);
	if (mkdirat(b->wfd, "apt", 0755) < 0 ||
	    fchownat(b->wfd, "apt", b->slot.base, b->slot.base, AT_SYMLINK_NOFOLLOW) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot install packages");
	_cleanup_free_ char **fetch = calloc(b->spec.npackages + 4, sizeof *fetch);
	_cleanup_free_ char **inst = calloc(b->spec.npackages + 5, sizeof *inst);
	if (!fetch || !inst)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot install packages");
	fetch[0] = inst[0] = b->helper;
	/* The download is not root: it sees work/apt alone, as /tmp/work,
	 * not through the state root's directories. */
	fetch[1] = "apt-fetch", fetch[2] = "/tmp/work";
	inst[1] = "apt-install", inst[2] = b->root, inst[3] = apt;
	for (unsigned i = 0; i < b->spec.npackages; i++)
		fetch[3 + i] = inst[4 + i] = b->spec.packages[i];
	char *facts[] = { b->helper, "apt-facts", b->root, apt, NULL };
	const struct sbx_confine_bind rw[] = { ROOT_BIND(b), { apt, SBX_CONFINE_RW } };
	const struct sbx_confine_bind ro[] = { ROOT_BIND(b), { apt, 0 } };
	struct step st[] = {
		{ .what = "read the base's packages",
		  .argv = facts,
		  .how = CONFINED,
		  .binds = rw,
		  .nbinds = 3,
		  .chroot_tree = b->root },
		{ .what = "download packages", .argv = fetch, .how = HOST_UID, .work = apt },
		{ .what = "install packages",
		  .argv = inst,
		  .how = CONFINED,
		  .binds = ro,
		  .nbinds = 3,
		  .chroot_tree = b->root },
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(st); i++) {
		st[i].in_fd = st[i].feed_dir = -1;
		if (run_step(b, &st[i], err) < 0)
			return -1;
	}
	sbx_rm_rf_at(b->wfd, "apt");
	return 0;
}

/* The kernel: the spec's own, or the base's, which must say which it is. */
static int kernel(struct build *b, struct sbx_err *err)
{
	if (b->spec.kernel[0])
		return own_kernel(b, err);
	json_t *gi = json_object_get(b->base_manifest, "guest_init_sha256");
	b->kernel = json_deep_copy(json_object_get(b->base_manifest, "kernel"));
	snprintf(b->gi_sha, sizeof b->gi_sha, "%s", json_is_string(gi) ? json_string_value(gi) : "");
	snprintf(b->boot, sizeof b->boot, "%s", b->base.dir);
	return 0;
}

/* Everything from the kernel to tpl/rootfs.ext4, in order. */
static int build_root(struct build *b, struct sbx_err *err)
{
	if (kernel(b, err) < 0 || (b->o->import ? import_root(b, err) : base_root(b, err)) < 0)
		return -1;
	struct sbx_err note = *err; /* an import's note of what it dropped */
	if (b->spec.npackages && install_packages(b, err) < 0)
		return -1;
	if (b->spec.nremove) {
		char *argv[3 + SBX_TMPLSPEC_REMOVE_MAX + 1] = { b->helper, "remove", b->root };
		for (unsigned i = 0; i < b->spec.nremove; i++)
			argv[3 + i] = b->spec.remove[i];
		if (confined(b, "remove paths", argv, NULL, err) < 0)
			return -1;
	}
	if (add_files(b, err) < 0 || (b->spec.nrun && run_steps(b, err) < 0) || set_user(b, err) < 0)
		return -1;
	char *argv[] = { b->helper, "packages", b->root, NULL };
	if (confined(b, "list packages", argv, "packages.tsv", err) < 0)
		return -1;
	_cleanup_close_ int tpl = openat(b->wfd, "tpl", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (tpl < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make rootfs.ext4");
	if (make_image(b, "make rootfs.ext4", tpl, err) < 0)
		return -1;
	*err = note;
	return 0;
}

int sbx_template_build(struct sbx_state *st, const struct sbx_tmplbuild_opts *o, struct sbx_tmplbuild_result *r,
		       struct sbx_err *err)
{
	struct build b = { .st = st,
			   .o = o,
			   .tdir = -1,
			   .wfd = -1,
			   .rootfd = -1,
			   .logfd = -1,
			   .import_fd = -1,
			   .spec_fd = -1,
			   .spec_dfd = -1,
			   .slot = { .lock_fd = -1 } };
	memset(r, 0, sizeof *r);
	int rc = check_inputs(&b, err);
	/* New work, as a create is: its root, disk images and build VM are
	 * written beside the audit trail's reserve, never into it. */
	if (rc == 0)
		rc = sbx_state_room(st, 0, err);
	/* One build of a name at a time (per owner): the second waits. */
	_cleanup_close_ int lk = -1;
	if (rc == 0) {
		char lname[200];
		snprintf(lname, sizeof lname, "template-build-%s-%s.lock", b.owner[0] ? b.owner : "_", o->name);
		lk = openat(st->run_fd, lname, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (lk < 0 || flock(lk, LOCK_EX) < 0)
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the build of %s", o->name);
	}
	if (rc == 0)
		rc = sbx_confine_slot_take(st->run_fd, &b.slot, err);
	if (rc == 0)
		rc = make_work(&b, err);
	if (rc == 0)
		rc = build_root(&b, err);
	json_t *m = NULL;
	char version[64] = "", content[65] = "";
	unsigned long long total = 0;
	if (rc == 0)
		rc = assemble(&b, &m, version, content, &total, err);
	if (rc == 0)
		rc = commit(&b, version, content, r, err);
	if (rc == 0) {
		snprintf(r->name, sizeof r->name, "%s", o->name);
		snprintf(r->version, sizeof r->version, "%s", version);
		snprintf(r->ref, sizeof r->ref, "%s%s%s@%s", b.owner, b.owner[0] ? "/" : "", o->name, version);
		r->size = total;
		json_t *f = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:b, s:s, s:s}", "template", r->ref, "name",
				      o->name, "version", version, "owner", sbx_template_owner_name(b.owner),
				      "content_sha256", content, "size", (json_int_t)total, "existed", r->existed,
				      "source", o->import ? "import" : "spec", "path", o->import ? o->import : o->spec);
		if (f && b.owner[0])
			json_object_set_new(f, "tenant", json_string(b.owner));
		sbx_audit_append(st, "template.build", f, NULL);
		json_decref(f);
	}
	json_decref(m);
	if (b.rootfd >= 0)
		close(b.rootfd);
	if (b.logfd >= 0)
		close(b.logfd);
	if (b.wfd >= 0) {
		sbx_rm_rf_at(b.tdir, b.work);
		close(b.wfd);
	}
	if (b.tdir >= 0)
		close(b.tdir);
	for (int *fd = (int[]){ b.import_fd, b.spec_fd, b.spec_dfd, -2 }; *fd != -2; fd++)
		if (*fd >= 0)
			close(*fd);
	sbx_confine_slot_release(&b.slot);
	json_decref(b.base_manifest);
	json_decref(b.kernel);
	sbx_tmplspec_free(&b.spec);
	return rc;
}
