/* A bundle's root.path as a template (oci.h).  The tree is the engine's
 * or a user's and may hold anything: it is never made a disk here.  It
 * is read by tar (which does not follow symlinks) into a stream that is
 * hashed on the way to a file, and the file is imported as
 * `sbx-template import` imports any tarball (rootfs.h: each entry created
 * beneath the new root, devices dropped, setuid bits stripped).  The
 * digest names the template, so the same content is prepared once. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sha2.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "oci.h"
#include "template.h"
#include "tmplbuild.h"
#include "util.h"

int sbx_oci_rootfs_open(int bundle_fd, const char *path, struct sbx_err *err)
{
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	if (path[0] != '/')
		how.resolve |= RESOLVE_BENEATH;
	int fd = (int)syscall(SYS_openat2, path[0] == '/' ? AT_FDCWD : bundle_fd, path, &how, sizeof how);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno,
				   "cannot open root.path %.200s (a directory %s, with no symlink on the way)", path,
				   path[0] == '/' ? "" : "beneath the bundle");
	return fd;
}

/* tar of the tree at rootfd on *out_fd (a pipe); the child's pid.  For
 * the digest, every mtime is 0: an engine's copy of an image (Podman's
 * vfs driver, the mount points it adds) differs from the last one in
 * its times alone, and the same image is to be prepared once. */
static int spawn_tar(int rootfd, int for_digest, int *out_fd, struct sbx_err *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read root.path");
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read root.path");
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		if (fchdir(rootfd) < 0 || dup2(p[1], 1) < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 2) < 0)
			_exit(127);
		/* Sorted names and numeric owners: the same tree, the same bytes. */
		char *argv[] = { "tar",          "--create", "--file=-", "--sort=name", "--numeric-owner",
				 "--format=gnu", ".",        NULL,       NULL };
		if (for_digest) {
			argv[6] = "--mtime=@0";
			argv[7] = ".";
		}
		execvp("tar", argv);
		_exit(127);
	}
	close(p[1]);
	*out_fd = p[0];
	return pid;
}

/* Copy the tar stream into fd (-1: none), hashing it; hex gets the digest. */
static int copy_hash(int in, int out, char hex[65], struct sbx_err *err)
{
	SHA2_CTX h;
	SHA256Init(&h);
	static char buf[1 << 16];
	for (;;) {
		ssize_t r = read(in, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read root.path");
		if (r == 0)
			break;
		SHA256Update(&h, (const uint8_t *)buf, (size_t)r);
		if (out >= 0 && sbx_write_all(out, buf, (size_t)r) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot stage root.path");
	}
	SHA256End(&h, hex);
	return 0;
}

/* One tar of the tree, hashed, into out (-1: nowhere). */
static int tar_pass(int rootfd, int for_digest, int out, char hex[65], struct sbx_err *err)
{
	int in = -1, status = 0;
	pid_t pid = spawn_tar(rootfd, for_digest, &in, err);
	int rc = pid < 0 ? -1 : copy_hash(in, out, hex, err);
	if (in >= 0)
		close(in);
	if (rc < 0 && pid > 0)
		kill(pid, SIGKILL);
	while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status)))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot read root.path: tar exited with %d",
				 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return pid < 0 ? -1 : rc;
}

int sbx_oci_rootfs_prepare(struct sbx_state *st, int rootfd, const char *work, int work_fd, char tmpl[140], int *reused,
			   uint64_t *ms, struct sbx_err *err)
{
	uint64_t t0 = sbx_mono_ns();
	char hex[65] = "", real[65];
	struct sbx_template t;
	struct sbx_err e2 = { 0 };
	*reused = 0;
	int rc = tar_pass(rootfd, 1, -1, hex, err);
	snprintf(tmpl, 140, "oci-%.24s", hex);
	if (rc == 0 && sbx_template_find(st, tmpl, &t, &e2) == 0) {
		*reused = 1;
		*ms = (sbx_mono_ns() - t0) / 1000000;
		return 0;
	}
	if (rc < 0)
		return -1;
	char name[64], path[SBX_OCI_PATH_MAX + 80];
	snprintf(name, sizeof name, ".rootfs-%d.tar", (int)getpid());
	snprintf(path, sizeof path, "%s/%s", work, name);
	unlinkat(work_fd, name, 0);
	_cleanup_close_ int out = openat(work_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot stage root.path in %.200s", work);
	rc = tar_pass(rootfd, 0, out, real, err);
	if (rc == 0) {
		struct sbx_tmplbuild_opts o = { .name = tmpl, .import = path, .progress_fd = -1 };
		struct sbx_tmplbuild_result r;
		if (sbx_template_build(st, &o, &r, err) < 0)
			rc = sbx_err_wrap(err, "importing root.path");
	}
	unlinkat(work_fd, name, 0);
	*ms = (sbx_mono_ns() - t0) / 1000000;
	return rc;
}
