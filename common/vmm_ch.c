/* Cloud Hypervisor backend: `cloud-hypervisor --api-socket fd=N
 * --event-monitor fd=M`, jailed like QEMU, driven over its REST API with
 * libcurl on the unix socket (vm.create with a VmConfig, vm.boot,
 * vm.pause/resume, vm.snapshot/restore, vmm.shutdown, vm.info,
 * vm.counters).  The agent channel is its hybrid vsock: the monitor
 * connects to the VM's vsock socket and writes "CONNECT <port>\n".
 *
 * Request bodies and response parsers are in vmm_ch_api.c (vmm_ch.h:
 * unit-tested against the OpenAPI schema and documented responses); the
 * transport and the process here.  Nothing here has run against
 * a real Cloud Hypervisor on our build machines (none is installable
 * there, and their KVM cannot run a guest): it follows the documented API
 * and the schema in the tree. */
#include "vmm_ch.h"
#include "jail.h"
#include "proto.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <curl/curl.h>
#include <dlfcn.h>

#define CH_BIN "cloud-hypervisor"
#define STATE_DIR "vmm-state" /* next to the session's scratch disk */
#define API_TIMEOUT_MS 10000L
#define BOOT_TIMEOUT_MS 30000L      /* vm.boot: loads kernel and initramfs */
#define SNAPSHOT_TIMEOUT_MS 600000L /* vm.snapshot/restore: all guest memory */
#define SHUTDOWN_WAIT_MS 1000       /* vmm.shutdown, then SIGKILL */
#define VSOCK_REPLY_MS 1000         /* CONNECT -> OK, per attempt */
#define RESP_MAX (256u << 10)       /* response bodies kept (vm.info is the largest) */
#define CONFIG_MAX (1u << 20)       /* a snapshot's config.json */
/* Disk serials (guest-init finds its disks by them) came in 35.0. */
#define CH_MIN_MAJOR 35

/* ---- the process and the transport -------------------------------------- */

/* vm->priv */
struct ch {
	int state_dfd;                /* the session's snapshot directory (STATE_DIR); -1: none */
	char state_url_dir[PATH_MAX]; /* ... as the VMM sees it */
	char api_dir[64];             /* a private directory made for the API socket; "" none */
	struct sbx_ch_events ev;
};

static const char *ch_bin(void)
{
	const char *e = getenv("SBX_CLOUD_HYPERVISOR");
	return e && *e ? e : CH_BIN;
}

static int ch_available(struct sbx_err *err)
{
	if (!sbx_in_path(ch_bin()))
		return sbx_err_set(
			err, SBX_EXIT_UNAVAIL, 0,
			"no VMM: %s is not installed (Debian 13 and later: apt-get install cloud-hypervisor)",
			ch_bin());
	return 0;
}

struct resp {
	long status;
	char body[RESP_MAX];
	size_t len;
};

/* libcurl is loaded when the first API call needs it, not linked.  Every
 * command links this backend (sbx-create probes and chooses a VMM), and
 * libcurl's dependencies (TLS, Kerberos, LDAP, SSH, ...) took the number of
 * shared libraries each command loads from 6 to 55: about 50 ms of start-up
 * on every sbx-exec, for a transport only the monitor of a Cloud Hypervisor
 * session uses. */
static struct {
	int tried, ok;
	CURL *(*easy_init)(void);
	void (*easy_cleanup)(CURL *);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	const char *(*easy_strerror)(CURLcode);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
} cu;

static int curl_load(struct sbx_err *err)
{
	if (!cu.tried) {
		cu.tried = 1;
		void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
		if (h) {
			*(void **)&cu.easy_init = dlsym(h, "curl_easy_init");
			*(void **)&cu.easy_cleanup = dlsym(h, "curl_easy_cleanup");
			*(void **)&cu.easy_setopt = dlsym(h, "curl_easy_setopt");
			*(void **)&cu.easy_perform = dlsym(h, "curl_easy_perform");
			*(void **)&cu.easy_getinfo = dlsym(h, "curl_easy_getinfo");
			*(void **)&cu.easy_strerror = dlsym(h, "curl_easy_strerror");
			*(void **)&cu.slist_append = dlsym(h, "curl_slist_append");
			*(void **)&cu.slist_free_all = dlsym(h, "curl_slist_free_all");
			cu.ok = cu.easy_init && cu.easy_cleanup && cu.easy_setopt && cu.easy_perform &&
				cu.easy_getinfo && cu.easy_strerror && cu.slist_append && cu.slist_free_all;
		}
	}
	if (!cu.ok)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "the Cloud Hypervisor backend needs libcurl.so.4 (apt-get install libcurl4), "
				   "which cannot be loaded");
	return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ctx)
{
	struct resp *r = ctx;
	size_t n = size * nmemb, room = sizeof r->body - 1 - r->len;
	memcpy(r->body + r->len, p, n < room ? n : room);
	r->len += n < room ? n : room;
	r->body[r->len] = 0;
	return n; /* the rest is dropped, not an error */
}

/* One API call: method on /api/v1/endpoint, an optional JSON body.  On
 * an HTTP error the message carries Cloud Hypervisor's error chain; the
 * code is 70 (callers that start a VM make it 69). */
static int api(const struct sbx_vm *vm, const char *method, const char *endpoint, const json_t *body, long timeout_ms,
	       struct resp *r, struct sbx_err *err)
{
	char url[128];
	snprintf(url, sizeof url, "http://localhost/api/v1/%s", endpoint);
	if (curl_load(err) < 0)
		return -1;
	_cleanup_free_ char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
	CURL *h = cu.easy_init();
	if (!h || (body && !txt)) {
		if (h)
			cu.easy_cleanup(h);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot prepare the %s request", endpoint);
	}
	struct curl_slist *hdr = NULL;
	/* No "Expect: 100-continue": the API answers once, with the result. */
	hdr = cu.slist_append(hdr, "Expect:");
	hdr = cu.slist_append(hdr, "Accept: application/json");
	if (txt)
		hdr = cu.slist_append(hdr, "Content-Type: application/json");
	r->status = 0;
	r->len = 0;
	r->body[0] = 0;
	cu.easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, vm->ctl_path);
	cu.easy_setopt(h, CURLOPT_URL, url);
	cu.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	cu.easy_setopt(h, CURLOPT_NOPROXY, "*"); /* http_proxy in the environment is not for us */
	cu.easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	cu.easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	cu.easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	cu.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	cu.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	cu.easy_setopt(h, CURLOPT_WRITEDATA, r);
	/* Bodiless actions (vm.boot, vm.pause, ...) must have no body at all:
	 * the API refuses one it did not ask for. */
	if (txt) {
		cu.easy_setopt(h, CURLOPT_POSTFIELDS, txt);
		cu.easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(txt));
	}
	CURLcode cc = cu.easy_perform(h);
	if (cc == CURLE_OK)
		cu.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	cu.slist_free_all(hdr);
	cu.easy_cleanup(h);
	if (cc != CURLE_OK)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "Cloud Hypervisor %s: no answer on its API socket: %s",
				   endpoint, cu.easy_strerror(cc));
	if (r->status < 200 || r->status > 299) {
		char why[400];
		sbx_ch_error_text(r->body, r->len, why, sizeof why);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "Cloud Hypervisor %s: HTTP %ld: %s", endpoint, r->status,
				   why);
	}
	return 0;
}

/* A bodiless PUT: vm.boot, vm.pause, vm.resume, vmm.shutdown. */
static int put(struct sbx_vm *vm, const char *endpoint, long timeout_ms, struct sbx_err *err)
{
	_cleanup_free_ struct resp *r = malloc(sizeof *r);
	if (!r)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot call %s", endpoint);
	return api(vm, "PUT", endpoint, NULL, timeout_ms, r, err);
}

static int put_json(struct sbx_vm *vm, const char *endpoint, json_t *body, long timeout_ms, struct sbx_err *err)
{
	_cleanup_free_ struct resp *r = malloc(sizeof *r);
	if (!body || !r) {
		json_decref(body);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot call %s", endpoint);
	}
	int rc = api(vm, "PUT", endpoint, body, timeout_ms, r, err);
	json_decref(body);
	return rc;
}

/* The API socket: made here and handed over as a listening fd, as for
 * QEMU's QMP (the jailed VMM cannot create files where the monitor lives).
 * Without a path (the KVM probe) it goes in a private directory. */
static int listen_api(const char *path, struct sbx_vm *vm, struct ch *ch, struct sbx_err *err)
{
	char tmp[108];
	if (!path) {
		snprintf(ch->api_dir, sizeof ch->api_dir, "/tmp/sbx-ch.XXXXXX");
		if (!mkdtemp(ch->api_dir)) {
			ch->api_dir[0] = 0;
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a directory for the API socket");
		}
		snprintf(tmp, sizeof tmp, "%s/api.sock", ch->api_dir);
		path = tmp;
	}
	if (strlen(path) >= sizeof vm->ctl_path)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "API socket path too long: %s", path);
	snprintf(vm->ctl_path, sizeof vm->ctl_path, "%s", path);
	int fd = sbx_listen_unix(path, SOCK_STREAM, 0600, 8);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot listen on %s", path);
	return fd;
}

/* The directory the VMM's vsock socket goes in (made 0700; in the jail it
 * is the one place the VMM may create a file), and no stale socket: the
 * VMM's bind would fail on one. */
static int prepare_vsock(const char *path, struct sbx_err *err)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", dir);
	}
	if (unlink(path) < 0 && errno != ENOENT)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove the stale socket %s", path);
	return 0;
}

/* Remove every entry of a flat directory (the state directory holds only
 * files the VMM or we put there). */
static void clear_dir(int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dfd, de->d_name, 0);
	closedir(d);
}

/* Copy one file between directories, reporting progress; the copy is
 * 0600 and the caller's. */
static int copy_at(int sdfd, int ddfd, const char *name, struct sbx_vm *vm, struct sbx_err *err)
{
	_cleanup_close_ int in = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (in < 0 || fstat(in, &st) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", name);
	_cleanup_close_ int out = openat(ddfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", name);
	uint64_t done = 0, total = (uint64_t)st.st_size;
	while (done < total) {
		/* copy_file_range: in the kernel, and a reflink where the
		 * filesystem has them. */
		ssize_t w =
			copy_file_range(in, NULL, out, NULL, total - done < (64u << 20) ? total - done : 64u << 20, 0);
		if (w <= 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, w < 0 ? errno : EIO, "cannot copy %s", name);
		done += (uint64_t)w;
		if (vm->progress)
			vm->progress(vm->progress_ctx, name, done, total);
	}
	if (fsync(out) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot write %s", name);
	return 0;
}

/* A restore: the snapshot's files in the state directory, where the jailed
 * VMM can read them (copies: the snapshot stays the caller's and may be
 * restored into several sessions at once), config.json re-pointed at this
 * session's disks and sockets. */
static int stage_restore(struct ch *ch, const char *src, const json_t *fresh, struct sbx_vm *vm, struct sbx_err *err)
{
	_cleanup_close_ int sdfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sdfd < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, errno, "cannot open the snapshot %s", src);
	size_t len = 0;
	_cleanup_free_ char *txt = sbx_read_small_at(sdfd, "config.json", CONFIG_MAX, &len);
	json_error_t je;
	json_t *snap = txt ? json_loadb(txt, len, 0, &je) : NULL;
	if (!snap)
		return sbx_err_set(err, SBX_EXIT_INVALID, txt ? 0 : errno,
				   "%s is not a Cloud Hypervisor snapshot (config.json %s)", src,
				   txt ? "does not parse" : "is missing");
	int rc = sbx_ch_restore_patch(snap, fresh, err);
	_cleanup_free_ char *out = rc == 0 ? json_dumps(snap, JSON_INDENT(1)) : NULL;
	json_decref(snap);
	if (rc < 0)
		return -1;
	if (!out)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot write the restore configuration");
	if (sbx_atomic_write_at(ch->state_dfd, "config.json", out, strlen(out), 0600, err) < 0)
		return -1;
	int fd = fcntl(sdfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list %s", src);
	}
	struct dirent *de;
	rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		struct stat st;
		/* Cloud Hypervisor's own files only: the caller keeps its own
		 * (the disk image, a manifest) in the same directory. */
		if ((strcmp(de->d_name, "state.json") && strncmp(de->d_name, "memory-ranges", 13)) ||
		    fstatat(sdfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		rc = copy_at(sdfd, ch->state_dfd, de->d_name, vm, err);
	}
	closedir(d);
	return rc;
}

/* The state directory, next to the scratch disk (same filesystem as the
 * snapshots the caller keeps, so a save is a rename): emptied, opened,
 * and its path as the VMM will see it. */
static int open_state_dir(struct ch *ch, const char *scratch, int jail, char *path, size_t n, struct sbx_err *err)
{
	snprintf(path, n, "%s", scratch);
	char *slash = strrchr(path, '/');
	size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
	if (dl + sizeof STATE_DIR > n)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "path too long: %s", scratch);
	snprintf(path + dl, n - dl, STATE_DIR);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", path);
	ch->state_dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (ch->state_dfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", path);
	clear_dir(ch->state_dfd);
	if (jail)
		snprintf(ch->state_url_dir, sizeof ch->state_url_dir, SBX_JAIL_DIR "/state");
	else if (!realpath(path, ch->state_url_dir))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot resolve %s", path);
	return 0;
}

/* A disk the guest writes must not look like an image format a VMM that
 * probes formats would follow (QCOW2 can name a backing file on the
 * host): we send image_type Raw, but releases before it probe.  The
 * scratch disk starts zeroed (mkfs leaves the boot block alone); a
 * header there was written by a guest. */
static int check_raw(const char *path, struct sbx_err *err)
{
	_cleanup_close_ int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	unsigned char head[8] = { 0 }, tail[8] = { 0 };
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return 0; /* the jail's own checks report a missing disk */
	if (pread(fd, head, sizeof head, 0) < 0 ||
	    (st.st_size >= 512 && pread(fd, tail, sizeof tail, st.st_size - 512) < 0))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", path);
	if (!memcmp(head, "QFI\xfb", 4) || !memcmp(head, "vhdxfile", 8) || !memcmp(tail, "conectix", 8))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "%s starts like a disk image format, not raw data: refusing to attach it", path);
	return 0;
}

static void ch_kill(struct sbx_vm *vm);

/* Has the VMM exited within ms? */
static int exited_within(struct sbx_vm *vm, int ms)
{
	struct pollfd p = { .fd = vm->pidfd, .events = POLLIN };
	return vm->pidfd >= 0 && poll(&p, 1, ms) == 1;
}

/* GET vmm.ping: the first answer also says the VMM is up. */
static int check_version(struct sbx_vm *vm, struct sbx_err *err)
{
	_cleanup_free_ struct resp *r = malloc(sizeof *r);
	char version[64] = "";
	if (!r)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot ask Cloud Hypervisor its version");
	if (api(vm, "GET", "vmm.ping", NULL, API_TIMEOUT_MS, r, err) < 0)
		return -1;
	int major = sbx_ch_parse_ping(r->body, r->len, version, sizeof version);
	if (major < CH_MIN_MAJOR)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "Cloud Hypervisor %s is too old: sbx needs %d.0 or later",
				   version[0] ? version : "(unknown version)", CH_MIN_MAJOR);
	return 0;
}

/* The API half of a boot (body is consumed): the VMM answers and is
 * recent enough, then the VM is created and booted, or restored, paused. */
static int start_vm(struct sbx_vm *vm, struct ch *ch, int restore, json_t *body, struct sbx_err *err)
{
	if (check_version(vm, err) < 0) {
		json_decref(body);
		return -1;
	}
	if (!restore)
		return put_json(vm, "vm.create", body, API_TIMEOUT_MS, err) < 0
			       ? -1
			       : put(vm, "vm.boot", BOOT_TIMEOUT_MS, err);
	if (put_json(vm, "vm.restore", body, SNAPSHOT_TIMEOUT_MS, err) < 0)
		return -1;
	_cleanup_free_ struct resp *r = malloc(sizeof *r);
	char st[32] = "";
	if (!r || api(vm, "GET", "vm.info", NULL, API_TIMEOUT_MS, r, err) < 0)
		return r ? -1 : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot ask for the VM's state");
	if (sbx_ch_parse_info(r->body, r->len, st, sizeof st) < 0 || strcmp(st, "Paused"))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "Cloud Hypervisor restored the VM %s, not Paused",
				   st[0] ? st : "in an unknown state");
	/* The staged copies are read: give the space back. */
	clear_dir(ch->state_dfd);
	return 0;
}

static int ch_boot(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err)
{
	int jail = sbx_jail_enabled(err);
	if (jail < 0)
		return -1;
	if (cfg->accel != SBX_ACCEL_KVM)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "Cloud Hypervisor runs guests only under KVM");
	/* It opens a TAP by name and brings it up itself (CAP_NET_ADMIN, which
	 * the jail drops), or takes an open one as an fd sent with SCM_RIGHTS
	 * alongside the request, which libcurl cannot send. */
	if (cfg->tap_fd > 0 || (cfg->tap_name && jail))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "Cloud Hypervisor cannot attach the session's TAP device inside the jail "
				   "(it needs CAP_NET_ADMIN, or the TAP's fd over SCM_RIGHTS); "
				   "use SBX_VMM=qemu for sessions with network egress");
	struct ch *ch = calloc(1, sizeof *ch);
	if (!ch)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start Cloud Hypervisor");
	ch->state_dfd = -1;
	*vm = (struct sbx_vm){ .pidfd = -1,
			       .ctl_fd = -1,
			       .event_fd = -1,
			       .ops = &sbx_vmm_cloud_hypervisor,
			       .priv = ch,
			       .progress = vm->progress,
			       .progress_ctx = vm->progress_ctx };
	struct sbx_vm_config c = *cfg;
	char state[PATH_MAX];
	_cleanup_close_ int api_fd = -1, ev_w = -1;
	int ev[2];
	json_t *body = NULL;
	if (c.vsock_sock && prepare_vsock(c.vsock_sock, err) < 0)
		goto fail;
	if (check_raw(c.scratch, err) < 0)
		goto fail;
	for (unsigned i = 0; i < c.nvols && i < 8; i++)
		if ((c.vol_rw_mask & (1u << i)) && check_raw(c.vol_path[i], err) < 0)
			goto fail;
	if (c.scratch) {
		if (open_state_dir(ch, c.scratch, jail, state, sizeof state, err) < 0)
			goto fail;
		c.state_dir = state;
	}
	if (!(body = sbx_ch_create_body(&c, jail, err)))
		goto fail;
	if (c.restore_dir) {
		if (ch->state_dfd < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "a restore needs the session's scratch disk");
			goto fail;
		}
		if (stage_restore(ch, c.restore_dir, body, vm, err) < 0)
			goto fail;
		json_decref(body);
		body = sbx_ch_restore_config(ch->state_url_dir);
	}
	if ((api_fd = listen_api(c.qmp_sock, vm, ch, err)) < 0)
		goto fail;
	if (pipe2(ev, O_CLOEXEC) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the event pipe");
		goto fail;
	}
	vm->event_fd = ev[0];
	ev_w = ev[1];
	if (fcntl(vm->event_fd, F_SETFL, O_NONBLOCK) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the event pipe");
		goto fail;
	}
	char api_arg[32], ev_arg[32];
	snprintf(api_arg, sizeof api_arg, "fd=%d", api_fd);
	snprintf(ev_arg, sizeof ev_arg, "fd=%d", ev_w);
	char *argv[] = { (char *)ch_bin(), "--api-socket", api_arg, "--event-monitor", ev_arg, NULL };
	int keep[] = { api_fd, ev_w };
	if (sbx_vmm_spawn(&c, argv, keep, 2, jail, vm, err) < 0)
		goto fail;
	/* Only the VMM holds them now: if it dies, the API connection is
	 * refused and the event stream ends. */
	close(sbx_steal_fd(&api_fd));
	close(sbx_steal_fd(&ev_w));
	if (start_vm(vm, ch, c.restore_dir != NULL, sbx_steal_ptr(&body), err) < 0)
		goto fail_vmm;
	return 0;

fail_vmm : {
	/* Say what the VMM said, if it died. */
	char tail[200];
	int status = 0;
	if (vm->pid > 0 && exited_within(vm, 200) && waitpid(vm->pid, &status, WNOHANG) == vm->pid) {
		vm->pid = 0;
		sbx_log_tail(AT_FDCWD, cfg->log_path, tail, sizeof tail);
		sbx_err_wrap(err, "Cloud Hypervisor exited (%s %d)%s%s", WIFSIGNALED(status) ? "signal" : "status",
			     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), tail[0] ? ": " : "", tail);
	}
	err->code = SBX_EXIT_UNAVAIL; /* the VM did not come up */
}
fail:
	json_decref(body);
	ch_kill(vm);
	return -1;
}

static int ch_pause(struct sbx_vm *vm, struct sbx_err *err)
{
	return put(vm, "vm.pause", API_TIMEOUT_MS, err);
}

static int ch_resume(struct sbx_vm *vm, unsigned timeout_ms, struct sbx_err *err)
{
	return put(vm, "vm.resume", timeout_ms ? timeout_ms : API_TIMEOUT_MS, err);
}

/* Move what the VMM wrote into the state directory to dir, as the
 * caller's files (0600): a rename on the same filesystem, else a copy. */
static int move_out(struct ch *ch, const char *dir, struct sbx_vm *vm, struct sbx_err *err)
{
	_cleanup_close_ int ddfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ddfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", dir);
	int fd = openat(ch->state_dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list the snapshot the VMM wrote");
	}
	int rc = 0, n = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		struct stat st;
		if (fstatat(ch->state_dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (renameat(ch->state_dfd, de->d_name, ddfd, de->d_name) < 0) {
			if (errno != EXDEV) {
				rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot move %s into %s", de->d_name,
						 dir);
				break;
			}
			rc = copy_at(ch->state_dfd, ddfd, de->d_name, vm, err);
			unlinkat(ch->state_dfd, de->d_name, 0);
		} else if (vm->progress) {
			vm->progress(vm->progress_ctx, de->d_name, (uint64_t)st.st_size, (uint64_t)st.st_size);
		}
		_cleanup_close_ int f = rc == 0 ? openat(ddfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
		if (rc == 0 && (f < 0 || fchown(f, geteuid(), getegid()) < 0 || fchmod(f, 0600) < 0 || fsync(f) < 0))
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take over %s", de->d_name);
		n++;
	}
	closedir(d);
	if (rc == 0 && (!n || fsync(ddfd) < 0))
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, n ? errno : 0, "Cloud Hypervisor wrote no snapshot into %s",
				 dir);
	return rc;
}

static int ch_save(struct sbx_vm *vm, const char *dir, struct sbx_err *err)
{
	struct ch *ch = vm->priv;
	if (!ch || ch->state_dfd < 0)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "this VM has no snapshot directory");
	clear_dir(ch->state_dfd);
	if (put_json(vm, "vm.snapshot", sbx_ch_snapshot_config(ch->state_url_dir), SNAPSHOT_TIMEOUT_MS, err) < 0)
		return -1;
	int rc = move_out(ch, dir, vm, err);
	clear_dir(ch->state_dfd);
	return rc;
}

static int ch_agent_connect(struct sbx_vm *vm, const struct sbx_vm_config *cfg, struct sbx_err *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (!cfg->vsock_sock || strlen(cfg->vsock_sock) >= sizeof a.sun_path)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "no usable vsock socket path");
	snprintf(a.sun_path, sizeof a.sun_path, "%s", cfg->vsock_sock);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a socket");
	char req[32];
	int rl = snprintf(req, sizeof req, "CONNECT %u\n", SBX_AGENT_VSOCK_PORT);
	/* Not there yet (the device is made at vm.boot) or refused: the
	 * caller tries again. */
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 || send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl)
		goto again;
	/* The reply, a byte at a time: the guest's HELLO may follow it in
	 * the same segment and is the monitor's to read. */
	char line[16];
	size_t n = 0;
	uint64_t until = sbx_mono_ns() + (uint64_t)VSOCK_REPLY_MS * 1000000u;
	for (;;) {
		uint64_t now = sbx_mono_ns();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (now >= until || poll(&p, 1, (int)((until - now) / 1000000u) + 1) <= 0)
			goto again; /* no listener yet: the VMM holds the request */
		if (recv(fd, line + n, 1, 0) != 1)
			goto again; /* the guest refused (nothing listens) */
		int r = sbx_ch_vsock_reply(line, ++n);
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "unexpected answer to CONNECT on %s",
					   cfg->vsock_sock);
		if (r == 1)
			break;
	}
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set up the agent channel");
	(void)vm;
	return sbx_steal_fd(&fd);
again:
	err->code = 0;
	err->errnum = errno;
	snprintf(err->msg, sizeof err->msg, "the guest agent is not listening yet");
	return -1;
}

static int ch_events(struct sbx_vm *vm)
{
	struct ch *ch = vm->priv;
	int worst = SBX_VM_EV_NONE;
	char buf[4096];
	for (;;) {
		ssize_t r = vm->event_fd > 0 ? read(vm->event_fd, buf, sizeof buf) : 0;
		if (r > 0 && ch) {
			int k = sbx_ch_events_feed(&ch->ev, buf, (size_t)r);
			if (sbx_ch_event_severity(k) > sbx_ch_event_severity(worst))
				worst = k;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			return worst;
		} else {
			/* EOF (the VMM is gone) or a broken pipe: report what
			 * came first; the next call says EOF. */
			return worst != SBX_VM_EV_NONE ? worst : SBX_VM_EV_EOF;
		}
	}
}

static int ch_counters(struct sbx_vm *vm, struct sbx_vm_counters *c, struct sbx_err *err)
{
	_cleanup_free_ struct resp *r = malloc(sizeof *r);
	if (!r)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the VM's counters");
	if (api(vm, "GET", "vm.counters", NULL, API_TIMEOUT_MS, r, err) < 0)
		return -1;
	if (sbx_ch_parse_counters(r->body, r->len, c) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "Cloud Hypervisor vm.counters: not a counter map");
	return 0;
}

static void ch_kill(struct sbx_vm *vm)
{
	struct ch *ch = vm->priv;
	if (vm->pid > 0) {
		/* Asked first: it tears the VM down and exits.  A VMM that does
		 * not answer or linger gets SIGKILL. */
		struct sbx_err e = { 0 };
		if (!exited_within(vm, 0) && vm->ctl_path[0] && put(vm, "vmm.shutdown", SHUTDOWN_WAIT_MS, &e) == 0)
			exited_within(vm, SHUTDOWN_WAIT_MS);
		if (vm->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, vm->pidfd, SIGKILL, NULL, 0);
		else
			kill(vm->pid, SIGKILL);
		while (waitpid(vm->pid, NULL, 0) < 0 && errno == EINTR)
			;
		vm->pid = 0;
	}
	if (vm->pidfd >= 0)
		close(vm->pidfd);
	vm->pidfd = -1;
	if (vm->event_fd > 0)
		close(vm->event_fd);
	vm->event_fd = -1;
	if (ch) {
		if (ch->state_dfd >= 0)
			close(ch->state_dfd);
		if (ch->api_dir[0]) {
			char p[80];
			snprintf(p, sizeof p, "%s/api.sock", ch->api_dir);
			unlink(p);
			rmdir(ch->api_dir);
		}
		free(ch);
		vm->priv = NULL;
	}
}

const struct sbx_vmm_ops sbx_vmm_cloud_hypervisor = {
	.name = "cloud-hypervisor",
	.agent_mode = SBX_AGENT_CONNECT,
	.kvm_only = 1,
	.available = ch_available,
	.boot = ch_boot,
	.pause = ch_pause,
	.resume = ch_resume,
	.save = ch_save,
	.agent_connect = ch_agent_connect,
	.kill = ch_kill,
	.events = ch_events,
	.counters = ch_counters,
};
