/* sbx-oci's pure parts (common/oci_spec.c, oci_linux.c, the ID check of
 * oci.c): what a config.json and a process.json may hold, linux.resources
 * and mounts among it, and which container IDs may become a name under
 * --root; and the console socket (oci_console.c) against a listener of
 * the test's own. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "oci.h"
#include "oci_spec.h"
#include "tap.h"

static int parse(const char *json, struct sbx_oci_spec *s, struct sbx_err *err)
{
	memset(err, 0, sizeof *err);
	return sbx_oci_spec_parse(json, strlen(json), s, err);
}

static void accepted(void)
{
	struct sbx_oci_spec s;
	struct sbx_err err;
	int rc = parse("{\"ociVersion\":\"1.0.2-dev\",\"process\":{\"args\":[\"sh\",\"-c\",\"x\"],"
		       "\"env\":[\"A=1\",\"B=\"],\"cwd\":\"/w\",\"user\":{\"uid\":1000,\"gid\":100},"
		       "\"terminal\":false,\"rlimits\":[]},\"root\":{\"path\":\"rootfs\",\"readonly\":true},"
		       "\"mounts\":[],\"linux\":{},\"annotations\":{\"a\":\"b\"}}",
		       &s, &err);
	ok(rc == 0, "a config.json as Podman writes it parses");
	ok(rc == 0 && s.argc == 3 && !strcmp(s.args[2], "x") && !s.args[3], "args, NULL-terminated");
	ok(rc == 0 && s.envc == 2 && !strcmp(s.env[1], "B="), "env, an empty value kept");
	ok(rc == 0 && !strcmp(s.cwd, "/w") && s.uid == 1000 && s.gid == 100, "cwd, uid, gid");
	ok(rc == 0 && !strcmp(s.root, "rootfs") && s.root_readonly, "root.path and readonly");
	ok(rc == 0 && !strcmp(json_string_value(json_object_get(s.annotations, "a")), "b"), "annotations");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	rc = sbx_oci_process_parse("{\"args\":[\"true\"]}", 17, &s, &err);
	ok(rc == 0 && s.argc == 1 && !s.root[0], "a process object alone (exec --process)");
	if (rc == 0)
		sbx_oci_spec_free(&s);
}

static void refused(void)
{
	static const struct {
		const char *json, *why;
	} bad[] = {
		{ "[]", "not an object" },
		{ "{\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"}}", "ociVersion" },
		{ "{\"ociVersion\":\"2.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"}}", "ociVersion" },
		{ "{\"ociVersion\":\"1.0\",\"ociVersion\":\"1.0\"}", "duplicate" },
		{ "{\"ociVersion\":\"1.0\",\"root\":{\"path\":\"r\"}}", "process must be an object" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[]},\"root\":{\"path\":\"r\"}}", "empty" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[1]},\"root\":{\"path\":\"r\"}}", "args[0]" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"a\\u0000b\"]},\"root\":{\"path\":\"r\"}}",
		  "invalid config.json" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"env\":[\"=v\"]},\"root\":{\"path\":\"r\"}}",
		  "NAME=VALUE" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"cwd\":\"rel\"},\"root\":{\"path\":\"r\"}}",
		  "absolute" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"user\":{\"uid\":-1}},\"root\":{\"path\":"
		  "\"r\"}}",
		  "uid must be" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"user\":{\"username\":\"u\"}},"
		  "\"root\":{\"path\":\"r\"}}",
		  "Windows" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"terminal\":1},\"root\":{\"path\":\"r\"}}",
		  "boolean" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"\"}}", "root.path" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"a\\nb\"}}",
		  "root.path" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"},\"annotations\":{"
		  "\"a\":1}}",
		  "annotation" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct sbx_oci_spec s;
		struct sbx_err err;
		char what[160];
		snprintf(what, sizeof what, "refused, saying '%s'", bad[i].why);
		ok(parse(bad[i].json, &s, &err) < 0 && err.code == SBX_EXIT_INVALID && strstr(err.msg, bad[i].why),
		   what);
	}
	/* Bounds: the entry count and the bytes of args and env together. */
	size_t cap = 5 * SBX_OCI_ARGS_MAX + 200;
	char *j = malloc(cap), *p = j;
	p += sprintf(p, "{\"ociVersion\":\"1.0\",\"root\":{\"path\":\"r\"},\"process\":{\"args\":[");
	for (unsigned i = 0; i <= SBX_OCI_ARGS_MAX; i++)
		p += sprintf(p, "%s\"x\"", i ? "," : "");
	p += sprintf(p, "]}}");
	struct sbx_oci_spec s;
	struct sbx_err err;
	ok(parse(j, &s, &err) < 0 && strstr(err.msg, "entries"), "one arg over the count is refused");
	free(j);
	j = malloc(9 * 60010 + 200);
	p = j + sprintf(j, "{\"ociVersion\":\"1.0\",\"root\":{\"path\":\"r\"},\"process\":{\"args\":[");
	for (int i = 0; i < 9; i++) { /* 9 x 60000 bytes: over 512 KiB */
		p += sprintf(p, "%s\"", i ? "," : "");
		memset(p, 'a', 60000);
		p += 60000;
		*p++ = '"';
	}
	strcpy(p, "]}}");
	ok(parse(j, &s, &err) < 0 && strstr(err.msg, "over"), "args over 512 KiB in all are refused");
	free(j);
}

static void ids(void)
{
	struct sbx_err err = { 0 };
	ok(sbx_oci_id_check("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", &err) == 0,
	   "a 64-hex ID (Podman's, CRI's)");
	ok(sbx_oci_id_check("slurm.42_0+a-b", &err) == 0, "letters, digits and ._+-");
	const char *bad[] = { "", ".", "..", "../x", "a/b", "-x", "+x", ".x", "a b", "a\tb", "é" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[64];
		snprintf(what, sizeof what, "ID '%s' refused", bad[i]);
		ok(sbx_oci_id_check(bad[i], &err) < 0 && err.code == SBX_EXIT_INVALID, what);
	}
	char longid[SBX_OCI_ID_MAX + 2];
	memset(longid, 'a', sizeof longid - 1);
	longid[sizeof longid - 1] = 0;
	ok(sbx_oci_id_check(longid, &err) < 0, "129 characters refused");
	longid[SBX_OCI_ID_MAX] = 0;
	ok(sbx_oci_id_check(longid, &err) == 0, "128 taken");
}

/* A config.json with linux and mounts as given (JSON text). */
static int parse_linux(const char *lx, const char *mounts, struct sbx_oci_spec *s, struct sbx_err *err)
{
	char j[4096];
	snprintf(j, sizeof j,
		 "{\"ociVersion\":\"1.0.2\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"},"
		 "\"linux\":%s,\"mounts\":%s}",
		 lx, mounts);
	int rc = parse(j, s, err);
	return rc;
}

static void resources(void)
{
	struct sbx_oci_spec s;
	struct sbx_err err;
	/* What podman run --memory 256m --cpus 1 passes (and its default pids). */
	int rc = parse_linux("{\"resources\":{\"devices\":[{\"allow\":false,\"access\":\"rwm\"}],"
			     "\"memory\":{\"limit\":268435456,\"swap\":536870912},"
			     "\"cpu\":{\"quota\":100000,\"period\":100000},\"pids\":{\"limit\":2048}}}",
			     "[]", &s, &err);
	ok(rc == 0 && s.res.memory == 256u << 20 && s.res.vcpus == 1 && s.res.cpu_milli == 1000 && s.res.pids == 2048,
	   "Podman's --memory 256m --cpus 1: 256 MiB, 1 vCPU, 1 CPU, 2048 pids");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	rc = parse_linux("{\"resources\":{\"memory\":{\"limit\":100000001},\"cpu\":{\"quota\":150000}}}", "[]", &s,
			 &err);
	ok(rc == 0 && s.res.memory == 96u << 20 && s.res.vcpus == 2 && s.res.cpu_milli == 1500,
	   "memory rounded up to a MiB; 1.5 CPUs: 2 vCPUs, a limit of 1.5 (period 100 ms by default)");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	rc = parse_linux("{\"resources\":{\"memory\":{\"limit\":-1},\"cpu\":{\"quota\":-1},"
			 "\"pids\":{\"limit\":-1},\"cpu\":null}}",
			 "[]", &s, &err);
	ok(rc < 0 && strstr(err.msg, "duplicate"), "a duplicate key in linux.resources is refused");
	rc = parse_linux("{\"resources\":{\"cpu\":{\"shares\":1024}}}", "[]", &s, &err);
	ok(rc == 0 && !s.res.vcpus, "cpu.shares 1024 (ctr's default, every session's weight) is accepted");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	rc = parse_linux("{\"resources\":{\"memory\":{\"limit\":-1},\"cpu\":{\"quota\":-1,\"shares\":0},"
			 "\"pids\":{\"limit\":0}}}",
			 "[]", &s, &err);
	ok(rc == 0 && !s.res.memory && !s.res.vcpus && !s.res.cpu_milli && !s.res.pids,
	   "-1 and 0 mean no limit: the policy's values stand");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	static const struct {
		const char *lx, *why;
	} bad[] = {
		{ "{\"resources\":{\"memory\":{\"limit\":1048576}}}", "memory.limit 1048576 is out of range" },
		{ "{\"resources\":{\"memory\":{\"limit\":137438953472}}}", "out of range" },
		{ "{\"resources\":{\"memory\":{\"limit\":\"256m\"}}}", "must be an integer" },
		{ "{\"resources\":{\"memory\":{\"limit\":268435456,\"reservation\":1}}}",
		  "memory.reservation is not supported" },
		{ "{\"resources\":{\"cpu\":{\"quota\":1000}}}", "0.010 CPUs" },
		{ "{\"resources\":{\"cpu\":{\"quota\":6500000}}}", "65.000 CPUs: a session's CPU limit is 0.05 to 64" },
		{ "{\"resources\":{\"cpu\":{\"quota\":100000,\"period\":10}}}", "period 10 is out of range" },
		{ "{\"resources\":{\"cpu\":{\"shares\":512}}}", "cpu.shares is not supported" },
		{ "{\"resources\":{\"cpu\":{\"cpus\":\"0-1\"}}}", "cpu.cpus is not supported" },
		{ "{\"resources\":{\"pids\":{\"limit\":2000000}}}", "pids.limit 2000000 is out of range" },
		{ "{\"resources\":{\"blockIO\":{\"weight\":10}}}", "blockIO is not supported" },
		{ "{\"resources\":{\"hugepageLimits\":[{\"pageSize\":\"2MB\",\"limit\":1}]}}",
		  "hugepageLimits is not supported" },
		{ "{\"resources\":[]}", "linux.resources must be an object" },
		{ "[]", "linux must be an object" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[200];
		snprintf(what, sizeof what, "linux %s refused, saying '%s'", bad[i].lx, bad[i].why);
		ok(parse_linux(bad[i].lx, "[]", &s, &err) < 0 && err.code == SBX_EXIT_INVALID &&
			   strstr(err.msg, bad[i].why),
		   what);
	}
}

static void mounts(void)
{
	struct sbx_oci_spec s;
	struct sbx_err err;
	/* Podman's, with --network none (ctr's are the same kinds, and a
	 * tmpfs on /run). */
	int rc = parse_linux(
		"{}",
		"[{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"},"
		"{\"destination\":\"/dev\",\"type\":\"tmpfs\",\"source\":\"tmpfs\",\"options\":[\"mode=755\"]},"
		"{\"destination\":\"/sys\",\"type\":\"sysfs\"},{\"destination\":\"/dev/pts\",\"type\":\"devpts\"},"
		"{\"destination\":\"/dev/mqueue\",\"type\":\"mqueue\"},{\"destination\":\"/run\",\"type\":\"tmpfs\"},"
		"{\"destination\":\"/etc/hosts\",\"type\":\"bind\",\"source\":\"/x/hosts\",\"options\":[\"bind\"]},"
		"{\"destination\":\"/dev/shm\",\"type\":\"bind\",\"source\":\"/x/shm\"},"
		"{\"destination\":\"/run/.containerenv\",\"type\":\"bind\",\"source\":\"/x/e\"},"
		"{\"destination\":\"/etc/hostname\",\"type\":\"bind\",\"source\":\"/x/h\"},"
		"{\"destination\":\"/sys/fs/cgroup\",\"type\":\"cgroup\",\"options\":[\"ro\"]}]",
		&s, &err);
	ok(rc == 0, "the engines' mounts (the guest's own, and the engine's own files) are accepted");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	static const struct {
		const char *m, *why;
	} bad[] = {
		{ "[{\"destination\":\"/data\",\"type\":\"bind\",\"source\":\"/etc/shadow\"}]",
		  "bind mount on /data is not supported" },
		{ "[{\"destination\":\"/var/lib/sbx\",\"type\":\"none\",\"source\":\"/var/lib/sbx\",\"options\":["
		  "\"rbind\"]}]",
		  "bind mount on /var/lib/sbx" },
		{ "[{\"destination\":\"/mnt\",\"type\":\"tmpfs\"}]", "tmpfs mount on /mnt is not supported" },
		{ "[{\"destination\":\"/proc\",\"type\":\"ext4\",\"source\":\"/dev/sda\"}]", "ext4 mount on /proc" },
		{ "[{\"destination\":\"/dev/kvm\"}]", "typeless mount on /dev/kvm" },
		{ "[{\"destination\":\"rel\",\"type\":\"proc\"}]", "absolute path" },
		{ "[{\"destination\":\"/a\\nb\",\"type\":\"bind\"}]", "printable" },
		{ "[{\"destination\":\"/proc\",\"type\":1}]", "must be strings" },
		{ "[7]", "mounts[0] must be an object" },
		{ "{}", "mounts must be an array" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[240];
		snprintf(what, sizeof what, "mounts %s refused, saying '%s'", bad[i].m, bad[i].why);
		ok(parse_linux("{}", bad[i].m, &s, &err) < 0 && err.code == SBX_EXIT_INVALID &&
			   strstr(err.msg, bad[i].why),
		   what);
	}
	const char *pj = "{\"args\":[\"sh\"],\"terminal\":true,\"consoleSize\":{\"height\":40,\"width\":120}}";
	rc = sbx_oci_process_parse(pj, strlen(pj), &s, &err);
	ok(rc == 0 && s.terminal && s.rows == 40 && s.cols == 120, "process.consoleSize");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	pj = "{\"args\":[\"sh\"],\"consoleSize\":{\"height\":-1,\"width\":1}}";
	rc = sbx_oci_process_parse(pj, strlen(pj), &s, &err);
	ok(rc < 0 && strstr(err.msg, "consoleSize"), "a negative consoleSize is refused");
	/* Podman's default rlimits, applied in the guest. */
	pj = "{\"args\":[\"sh\"],\"rlimits\":[{\"type\":\"RLIMIT_NOFILE\",\"hard\":1048576,\"soft\":1048576},"
	     "{\"type\":\"RLIMIT_NPROC\",\"hard\":32768,\"soft\":100}]}";
	rc = sbx_oci_process_parse(pj, strlen(pj), &s, &err);
	ok(rc == 0 && s.nrlimits == 2 && s.rlimits[0].resource == 7 && s.rlimits[0].soft == 1048576 &&
		   s.rlimits[1].resource == 6 && s.rlimits[1].soft == 100 && s.rlimits[1].hard == 32768,
	   "process.rlimits: RLIMIT_NOFILE, RLIMIT_NPROC");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	static const char *const badrl[][2] = {
		{ "[{\"type\":\"RLIMIT_BOGUS\",\"hard\":1,\"soft\":1}]", "not a Linux RLIMIT_ name" },
		{ "[{\"type\":\"RLIMIT_CORE\",\"hard\":1,\"soft\":2}]", "soft <= hard" },
		{ "[{\"type\":\"RLIMIT_CORE\",\"hard\":-1,\"soft\":-1}]", "soft <= hard" },
		{ "[{\"type\":\"RLIMIT_CORE\",\"hard\":\"1\",\"soft\":1}]", "must be integers" },
		{ "[{\"type\":\"RLIMIT_CORE\",\"hard\":1,\"soft\":1},{\"type\":\"RLIMIT_CORE\",\"hard\":1,\"soft\":1}]",
		  "RLIMIT_CORE twice" },
		{ "{}", "must be an array" },
	};
	for (size_t i = 0; i < sizeof badrl / sizeof badrl[0]; i++) {
		char j[512], what[300];
		snprintf(j, sizeof j, "{\"args\":[\"sh\"],\"rlimits\":%s}", badrl[i][0]);
		snprintf(what, sizeof what, "rlimits %s refused, saying '%s'", badrl[i][0], badrl[i][1]);
		ok(sbx_oci_process_parse(j, strlen(j), &s, &err) < 0 && strstr(err.msg, badrl[i][1]), what);
	}
}

/* The console socket: a listener as conmon's, the master received. */
static void console(void)
{
	char dir[] = "/tmp/sbx-test-oci-XXXXXX", path[160];
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof path, "%s/console.sock", dir);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ok(l >= 0 && bind(l, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(l, 1) == 0, "a console socket");
	struct sbx_err err = { 0 };
	int slave = sbx_oci_console(path, 30, 100, &err);
	ok(slave >= 0 && isatty(slave), "sbx_oci_console returns a terminal");
	int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	char name[64] = { 0 }, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = name, .iov_len = sizeof name - 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
	ssize_t got = c >= 0 ? recvmsg(c, &msg, MSG_CMSG_CLOEXEC) : -1;
	struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
	int master = -1;
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&master, CMSG_DATA(cm), sizeof master);
	ok(master >= 0 && !strcmp(name, "/dev/ptmx"), "the master arrives by SCM_RIGHTS, named as runc names it");
	struct winsize ws = { 0 };
	ok(slave >= 0 && ioctl(slave, TIOCGWINSZ, &ws) == 0 && ws.ws_row == 30 && ws.ws_col == 100,
	   "sized as consoleSize says");
	char buf[16] = { 0 };
	ok(master >= 0 && slave >= 0 && write(master, "a\r\n", 3) == 3 && read(slave, buf, sizeof buf) == 3 &&
		   !memcmp(buf, "a\r\n", 3),
	   "raw: bytes pass as they are (no echo, no line editing)");
	ok(master >= 0 && slave >= 0 && write(slave, "b\n", 2) == 2 && read(master, buf, sizeof buf) == 2 &&
		   !memcmp(buf, "b\n", 2),
	   "and back, with no \\n made \\r\\n");
	memset(&err, 0, sizeof err);
	ok(sbx_oci_console("/nonexistent/sock", 0, 0, &err) < 0 && err.code == SBX_EXIT_INVALID &&
		   strstr(err.msg, "--console-socket"),
	   "a socket that is not there: 3, naming --console-socket");
	close(master);
	close(slave);
	close(c);
	close(l);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	accepted();
	refused();
	ids();
	resources();
	mounts();
	console();
	return tap_done();
}
