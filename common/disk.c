#include "caller.h"
#include "disk.h"
#include "hostpath.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run argv with no stdin and its output kept for the error message; its
 * exit status, or -1.  keep_fd (>= 0) is left open across the exec. */
/* argv's status, with keep_fd (and keep2) left open in it; run as uid and
 * gid (no other group) when uid is not 0.  Its output in out. */
static int run_as(char *const argv[], int keep_fd, int keep2, unsigned uid, unsigned gid, char *out, size_t n)
{
	int p[2];
	out[0] = 0;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int dn = open("/dev/null", O_RDONLY);
		if (dn >= 0)
			dup2(dn, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		if (keep_fd >= 0)
			fcntl(keep_fd, F_SETFD, 0);
		if (keep2 >= 0)
			fcntl(keep2, F_SETFD, 0);
		if (uid && (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)) {
			dprintf(2, "cannot become uid %u: %s", uid, strerror(errno));
			_exit(127);
		}
		execvp(argv[0], argv);
		dprintf(2, "cannot run %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	size_t got = 0;
	ssize_t r;
	while ((r = read(p[0], out + got, n - 1 - got)) > 0 && got + (size_t)r < n - 1)
		got += (size_t)r;
	if (r > 0)
		got += (size_t)r;
	out[got < n ? got : n - 1] = 0;
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	for (char *c = out; *c; c++)
		if (*c == '\n')
			*c = ' ';
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_status(char *const argv[], char *out, size_t n)
{
	return run_as(argv, -1, -1, 0, 0, out, n);
}

static int run(char *const argv[], char *out, size_t n)
{
	return run_status(argv, out, n) == 0 ? 0 : -1;
}

static int make_file(const char *path, uint64_t bytes, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", path);
	if (ftruncate(fd, (off_t)bytes) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot size %s", path);
	return 0;
}

int sbx_disk_scratch(const char *path, uint64_t bytes, struct sbx_err *err)
{
	if (make_file(path, bytes, err) < 0)
		return -1;
	/* No journal (scratch dies with the session), no reserved blocks (the
	 * quota is the user's), inode tables left for nobody to zero (the guest
	 * mounts with noinit_itable). */
	char *argv[] = { "mkfs.ext4",
			 "-q",
			 "-F",
			 "-L",
			 "sbxscratch",
			 "-m",
			 "0",
			 "-O",
			 "^has_journal",
			 "-E",
			 "lazy_itable_init=1,nodiscard,root_owner=0:0",
			 (char *)path,
			 NULL };
	char out[512];
	if (run(argv, out, sizeof out) < 0) {
		unlink(path);
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "cannot make the scratch disk: %s", out);
	}
	return 0;
}

static uint64_t tree_bytes;
static int tree_add(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)p;
	(void)f;
	/* sbx's own state reached inside the tree (a bind mount) is not copied. */
	if (flag == FTW_D && sbx_hostpath_is_state(st)) {
		errno = EPERM;
		return -1;
	}
	tree_bytes += (uint64_t)st->st_blocks * 512 + 4096;
	return 0;
}

int sbx_disk_from_dir(const char *path, const char *dir, unsigned uid, unsigned gid, struct sbx_err *err)
{
	/* dir is the real path sbx-create checked (hostpath.h); opened again
	 * with no link anywhere, so one swapped in since is refused, and
	 * walked and copied through this fd. */
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	_cleanup_close_ int dfd = (int)syscall(SYS_openat2, AT_FDCWD, dir, &how, sizeof how);
	struct stat dst;
	if (dfd < 0 || fstat(dfd, &dst) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot open the volume directory %s", dir);
	if (sbx_hostpath_is_state(&dst))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s is sbx's own state, never a volume", dir);
	char src[64];
	snprintf(src, sizeof src, "/proc/self/fd/%d/.", dfd);
	tree_bytes = 0;
	if (nftw(src, tree_add, 64, FTW_PHYS) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read %s", dir);
	uint64_t size = tree_bytes + tree_bytes / 4 + (16u << 20);
	if (size > (64ull << 30))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s is too large for a volume (over 64 GiB)", dir);
	if (make_file(path, size, err) < 0)
		return -1;
	/* A user's directory (caller.h) is read by mkfs running as that user,
	 * so nothing the user could not read gets in; it writes the image
	 * through an fd of ours, the file the user's for that while (its
	 * directory is root's alone: no path reaches it). */
	char img[64];
	const char *target = path;
	_cleanup_close_ int ifd = -1;
	if (uid) {
		ifd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (ifd < 0 || fchown(ifd, uid, gid) < 0) {
			unlink(path);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot prepare the volume image of %s", dir);
		}
		snprintf(img, sizeof img, "/proc/self/fd/%d", ifd);
		target = img;
	}
	char *argv[] = { "mkfs.ext4",    "-q", "-F",        "-L", "sbxvol", "-m",           "0", "-O",
			 "^has_journal", "-E", "nodiscard", "-d", src,      (char *)target, NULL };
	char out[512];
	int rc = run_as(argv, dfd, ifd, uid, gid, out, sizeof out);
	if (ifd >= 0 && fchown(ifd, 0, 0) < 0 && rc == 0)
		rc = -1;
	if (rc != 0) {
		unlink(path);
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot copy %s into a volume: %s", dir, out);
	}
	return 0;
}

int sbx_disk_workspace(const char *path, uint64_t bytes, unsigned uid, unsigned gid, struct sbx_err *err)
{
	if (make_file(path, bytes, err) < 0)
		return -1;
	/* A journal, unlike scratch: a workspace outlives its VM, which may be
	 * killed mid-write.  Inode tables and journal are left as holes that
	 * mke2fs marks initialised (the file is fresh and sparse, so they read
	 * as zeros): no ext4lazyinit in the guest, about 1 MiB on the host.
	 * The root belongs to the user execs run as. */
	char opts[128];
	snprintf(opts, sizeof opts, "lazy_itable_init=0,lazy_journal_init=1,root_owner=%u:%u", uid, gid);
	char *argv[] = { "mkfs.ext4", "-q", "-F", "-L", "sbxwork",    "-b", "4096",
			 "-m",        "0",  "-E", opts, (char *)path, NULL };
	char out[512];
	if (run(argv, out, sizeof out) < 0) {
		unlink(path);
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "cannot make the workspace disk: %s", out);
	}
	return 0;
}

int sbx_disk_grow(const char *path, uint64_t bytes, struct sbx_err *err)
{
	/* Only the file grows here: the guest grows its ext4 online when it
	 * mounts the workspace (guest-init's grow_online).  e2fsck and
	 * resize2fs as root over an image the guest wrote would hand a
	 * crafted superblock to e2fsprogs' parsers on the host. */
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot grow %s", path);
	return 0;
}
