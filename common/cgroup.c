#include "cgroup.h"
#include "state.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include <sha2.h>

#define CG_ROOT "/sys/fs/cgroup"

static int is_v2(void)
{
	struct statfs s;
	return statfs(CG_ROOT, &s) == 0 && s.f_type == CGROUP2_SUPER_MAGIC;
}

const char *sbx_cgroup_mode(void)
{
	const char *e = getenv("SBX_CGROUPS");
	if (e && !strcmp(e, "off"))
		return "none";
	if (is_v2())
		return "v2";
	return access(CG_ROOT "/cpu/cgroup.procs", F_OK) == 0 ? "v1" : "none";
}

static void parent_name(char *buf, size_t n)
{
	const char *root = getenv("SBX_ROOT");
	if (!root || !*root) {
		snprintf(buf, n, "sbx");
		return;
	}
	SHA2_CTX c;
	uint8_t d[SHA256_DIGEST_LENGTH];
	SHA256Init(&c);
	SHA256Update(&c, (const uint8_t *)root, strlen(root));
	SHA256Final(d, &c);
	snprintf(buf, n, "sbx-%02x%02x%02x%02x", d[0], d[1], d[2], d[3]);
}

static int write_at(const char *dir, const char *file, const char *val)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	_cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	return sbx_write_all(fd, val, strlen(val));
}

static int mkdir_ok(const char *p)
{
	return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* The group directory of one v1 controller, or of v2 (ctrl NULL). */
static void group_dir(const char *ctrl, const char *session, char *buf, size_t n, int parent_only)
{
	char parent[32];
	parent_name(parent, sizeof parent);
	if (parent_only)
		snprintf(buf, n, CG_ROOT "%s%s/%s", ctrl ? "/" : "", ctrl ? ctrl : "", parent);
	else
		snprintf(buf, n, CG_ROOT "%s%s/%s/%s", ctrl ? "/" : "", ctrl ? ctrl : "", parent, session);
}

static int open_procs(const char *dir, int fds[], int *nfds)
{
	char p[512];
	snprintf(p, sizeof p, "%s/cgroup.procs", dir);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	fds[(*nfds)++] = fd;
	return 0;
}

static int fail(int fds[], int *nfds, const char *session, struct sbx_err *err, const char *what)
{
	int e = errno;
	for (int i = 0; i < *nfds; i++)
		close(fds[i]);
	*nfds = 0;
	sbx_cgroup_remove(session);
	return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot set up the host cgroup (%s)", what);
}

/* The CPU weight in a group (0: left as it is): cpu.weight (v2, 1..10000,
 * default 100), or cpu.shares (v1, default 1024) on the same scale.  Best
 * effort: a scheduling preference, not a limit. */
static void set_weight(const char *dir, int v2, unsigned weight)
{
	char val[32];
	if (!weight)
		return;
	if (weight > 10000)
		weight = 10000;
	snprintf(val, sizeof val, "%u", v2 ? weight : (weight * 1024u + 50) / 100u);
	write_at(dir, v2 ? "cpu.weight" : "cpu.shares", val);
}

int sbx_cgroup_create(const char *session, const struct sbx_cg_limits *l, int fds[SBX_CG_MAX_FDS], int *nfds,
		      struct sbx_err *err)
{
	char dir[512], val[64];
	const char *mode = sbx_cgroup_mode();
	*nfds = 0;
	if (!strcmp(mode, "none"))
		return 0;
	if (!strcmp(mode, "v2")) {
		group_dir(NULL, session, dir, sizeof dir, 1);
		/* Controllers must be enabled from the root down. */
		write_at(CG_ROOT, "cgroup.subtree_control", "+cpu +memory +pids");
		if (mkdir_ok(dir) < 0)
			return fail(fds, nfds, session, err, dir);
		write_at(dir, "cgroup.subtree_control", "+cpu +memory +pids");
		group_dir(NULL, session, dir, sizeof dir, 0);
		if (mkdir_ok(dir) < 0)
			return fail(fds, nfds, session, err, dir);
		if (l->cpu_milli) {
			snprintf(val, sizeof val, "%u 100000", l->cpu_milli * 100);
			if (write_at(dir, "cpu.max", val) < 0)
				return fail(fds, nfds, session, err, "cpu.max");
		}
		set_weight(dir, 1, l->weight);
		if (l->memory) {
			snprintf(val, sizeof val, "%llu", (unsigned long long)l->memory);
			if (write_at(dir, "memory.max", val) < 0)
				return fail(fds, nfds, session, err, "memory.max");
			write_at(dir, "memory.swap.max", "0");
		}
		if (l->pids) {
			snprintf(val, sizeof val, "%u", l->pids);
			if (write_at(dir, "pids.max", val) < 0)
				return fail(fds, nfds, session, err, "pids.max");
		}
		if (open_procs(dir, fds, nfds) < 0)
			return fail(fds, nfds, session, err, "cgroup.procs");
		return 0;
	}
	static const char *const ctrls[] = { "cpu", "cpuacct", "memory", "pids" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(ctrls); i++) {
		group_dir(ctrls[i], session, dir, sizeof dir, 1);
		if (access(CG_ROOT, F_OK) == 0 && mkdir_ok(dir) < 0)
			return fail(fds, nfds, session, err, dir);
		group_dir(ctrls[i], session, dir, sizeof dir, 0);
		if (mkdir_ok(dir) < 0)
			return fail(fds, nfds, session, err, dir);
		int rc = 0;
		if (!strcmp(ctrls[i], "cpu") && l->cpu_milli) {
			snprintf(val, sizeof val, "%u", l->cpu_milli * 100);
			rc = write_at(dir, "cpu.cfs_period_us", "100000") | write_at(dir, "cpu.cfs_quota_us", val);
		} else if (!strcmp(ctrls[i], "memory") && l->memory) {
			snprintf(val, sizeof val, "%llu", (unsigned long long)l->memory);
			rc = write_at(dir, "memory.limit_in_bytes", val);
		} else if (!strcmp(ctrls[i], "pids") && l->pids) {
			snprintf(val, sizeof val, "%u", l->pids);
			rc = write_at(dir, "pids.max", val);
		}
		if (rc < 0)
			return fail(fds, nfds, session, err, ctrls[i]);
		if (!strcmp(ctrls[i], "cpu"))
			set_weight(dir, 0, l->weight);
		if (open_procs(dir, fds, nfds) < 0)
			return fail(fds, nfds, session, err, "cgroup.procs");
	}
	return 0;
}

int sbx_cgroup_enter(const char *session, struct sbx_err *err)
{
	static const char *const ctrls[] = { "cpu", "cpuacct", "memory", "pids" };
	const char *mode = sbx_cgroup_mode();
	char dir[512];
	if (!strcmp(mode, "none"))
		return 0;
	int v2 = !strcmp(mode, "v2");
	for (size_t i = 0; i < (v2 ? 1 : SBX_ARRAY_LEN(ctrls)); i++) {
		group_dir(v2 ? NULL : ctrls[i], session, dir, sizeof dir, 0);
		if (write_at(dir, "cgroup.procs", "0") < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot join the session's host cgroup %s",
					   dir);
	}
	return 0;
}

void sbx_cgroup_kill(const char *session)
{
	char dir[512];
	if (is_v2()) {
		group_dir(NULL, session, dir, sizeof dir, 0);
		write_at(dir, "cgroup.kill", "1");
		return;
	}
	/* v1 has no cgroup.kill: signal each member. */
	group_dir("pids", session, dir, sizeof dir, 0);
	char p[600];
	snprintf(p, sizeof p, "%s/cgroup.procs", dir);
	FILE *f = fopen(p, "re");
	int pid;
	while (f && fscanf(f, "%d", &pid) == 1)
		if (pid > 1)
			kill(pid, SIGKILL);
	if (f)
		fclose(f);
}

int sbx_cgroup_list(char ***ids, size_t *n)
{
	char dir[512];
	*ids = NULL;
	*n = 0;
	group_dir(is_v2() ? NULL : "pids", "", dir, sizeof dir, 1);
	DIR *d = opendir(dir);
	return d ? sbx_dir_ids(d, 1, ids, n) : 0;
}

int sbx_cgroup_remove(const char *session)
{
	char dir[512];
	int rc = 0;
	if (is_v2()) {
		group_dir(NULL, session, dir, sizeof dir, 0);
		if (rmdir(dir) < 0 && errno != ENOENT)
			rc = -1;
		return rc;
	}
	static const char *const ctrls[] = { "cpu", "cpuacct", "memory", "pids" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(ctrls); i++) {
		group_dir(ctrls[i], session, dir, sizeof dir, 0);
		if (rmdir(dir) < 0 && errno != ENOENT)
			rc = -1;
	}
	return rc;
}

int sbx_cgroup_rename(const char *from, const char *to)
{
	char a[512], b[512];
	const char *mode = sbx_cgroup_mode();
	if (!strcmp(mode, "none"))
		return 0;
	if (!strcmp(mode, "v2")) {
		group_dir(NULL, from, a, sizeof a, 0);
		group_dir(NULL, to, b, sizeof b, 0);
		return rename(a, b);
	}
	static const char *const ctrls[] = { "cpu", "cpuacct", "memory", "pids" };
	int renamed[SBX_ARRAY_LEN(ctrls)] = { 0 };
	for (size_t i = 0; i < SBX_ARRAY_LEN(ctrls); i++) {
		group_dir(ctrls[i], from, a, sizeof a, 0);
		group_dir(ctrls[i], to, b, sizeof b, 0);
		if (rename(a, b) == 0) {
			renamed[i] = 1;
			continue;
		}
		/* Co-mounted controllers (cpu,cpuacct): already renamed under
		 * the other name. */
		if (errno == ENOENT && access(b, F_OK) == 0)
			continue;
		int e = errno;
		for (size_t j = 0; j < i; j++)
			if (renamed[j]) {
				group_dir(ctrls[j], from, a, sizeof a, 0);
				group_dir(ctrls[j], to, b, sizeof b, 0);
				rename(b, a);
			}
		errno = e;
		return -1;
	}
	return 0;
}

int sbx_cgroup_set_cpu(const char *session, unsigned cpu_milli, unsigned weight)
{
	char dir[512], val[64];
	const char *mode = sbx_cgroup_mode();
	if (!strcmp(mode, "none"))
		return 0;
	if (!strcmp(mode, "v2")) {
		group_dir(NULL, session, dir, sizeof dir, 0);
		if (cpu_milli)
			snprintf(val, sizeof val, "%u 100000", cpu_milli * 100);
		else
			snprintf(val, sizeof val, "max 100000");
		set_weight(dir, 1, weight);
		return write_at(dir, "cpu.max", val);
	}
	group_dir("cpu", session, dir, sizeof dir, 0);
	set_weight(dir, 0, weight);
	snprintf(val, sizeof val, "%d", cpu_milli ? (int)(cpu_milli * 100) : -1);
	return write_at(dir, "cpu.cfs_quota_us", val);
}

static int read_u64(const char *dir, const char *file, const char *key, uint64_t *out)
{
	char p[512], s[4096];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	/* cgroupfs reports a size of 0: read, do not trust st_size. */
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, s, sizeof s - 1) : -1;
	if (n <= 0)
		return -1;
	s[n] = 0;
	if (!key) {
		*out = strtoull(s, NULL, 10);
		return 0;
	}
	for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
		size_t k = strlen(key);
		if (!strncmp(line, key, k) && line[k] == ' ') {
			*out = strtoull(line + k + 1, NULL, 10);
			return 0;
		}
	}
	return -1;
}

int sbx_cgroup_usage(const char *session, uint64_t *cpu_ns, uint64_t *mem_peak)
{
	char dir[512];
	*cpu_ns = *mem_peak = 0;
	if (is_v2()) {
		group_dir(NULL, session, dir, sizeof dir, 0);
		uint64_t us = 0;
		if (read_u64(dir, "cpu.stat", "usage_usec", &us) < 0)
			return -1;
		*cpu_ns = us * 1000;
		read_u64(dir, "memory.peak", NULL, mem_peak);
		return 0;
	}
	group_dir("cpuacct", session, dir, sizeof dir, 0);
	if (read_u64(dir, "cpuacct.usage", NULL, cpu_ns) < 0)
		return -1;
	group_dir("memory", session, dir, sizeof dir, 0);
	read_u64(dir, "memory.max_usage_in_bytes", NULL, mem_peak);
	return 0;
}
