#include "snapshot.h"
#include "capacity.h"
#include "snapshot_int.h"
#include "audit.h"
#include "hostconf.h"
#include "policy.h"
#include "proto.h"
#include "session.h"
#include "template.h"
#include "util.h"
#include "vmctl.h"
#include "workspace.h"
#include "zstream.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include <sha2.h>

#define MANIFEST "manifest.json"
#define SAVE_TIMEOUT_MS (30u * 60 * 1000) /* the monitor bounds each step itself */

static const char *const data_files[] = { "memory.zst", "scratch.zst" };
/* The running execs' records a save took with it (monitor/snapexec.c):
 * execs.json and eN.stdout, eN.stderr; none when nothing ran. */
#define EXECS_FILE "execs.json"

static int exec_file_name(const char *n)
{
	if (!strcmp(n, EXECS_FILE))
		return 1;
	size_t d = n[0] == 'e' ? strspn(n + 1, "0123456789") : 0;
	return d && d < 10 && (!strcmp(n + 1 + d, ".stdout") || !strcmp(n + 1 + d, ".stderr"));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Their names in dfd, sorted; *n 0 when there are none. */
static char **exec_files(int dfd, size_t *n)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	char **v = NULL;
	*n = 0;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	struct dirent *e;
	while ((e = readdir(d)))
		if (exec_file_name(e->d_name)) {
			char **nv = realloc(v, (*n + 1) * sizeof *v);
			if (!nv)
				break;
			v = nv;
			if ((v[*n] = strdup(e->d_name)))
				(*n)++;
		}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof *v, cmp_str);
	return v;
}

static void exec_files_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* --- names and places ----------------------------------------------------- */

int sbx_snapshot_spec(const char *spec, char name[64], char version[64], struct sbx_err *err)
{
	const char *at = strchr(spec, '@');
	size_t nl = at ? (size_t)(at - spec) : strlen(spec);
	name[0] = version[0] = 0;
	if (nl == 0 || nl > SBX_ID_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid snapshot name '%.80s': must be 1 to %d characters", spec, SBX_ID_MAX);
	memcpy(name, spec, nl);
	name[nl] = 0;
	if (sbx_id_check(name, "snapshot name", err) < 0)
		return -1;
	if (at) {
		if (strlen(at + 1) > SBX_ID_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid snapshot version '%.80s': must be 1 to %d characters", at + 1,
					   SBX_ID_MAX);
		if (sbx_id_check(at + 1, "snapshot version", err) < 0)
			return -1;
		snprintf(version, 64, "%s", at + 1);
	}
	return 0;
}

/* "_" names the snapshots without a tenant, so no tenant may be called
 * that: its snapshots would be everybody's. */
int sbx_snapshot_tenant_check(const char *tenant, struct sbx_err *err)
{
	if (!tenant || !*tenant)
		return 0;
	if (sbx_id_check(tenant, "tenant", err) < 0)
		return -1;
	if (!strcmp(tenant, SBX_SNAPSHOT_NO_TENANT))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid tenant '_': the name is reserved for snapshots "
				   "without a tenant");
	return 0;
}

static const char *tenant_dir_name(const char *tenant)
{
	return tenant && *tenant ? tenant : SBX_SNAPSHOT_NO_TENANT;
}

/* LIB/snapshots/TENANT, made (0700) when create; -2 (no error) when it
 * does not exist and create is off. */
int sbx_snapshot_tenant_dir(struct sbx_state *st, const char *tenant, int create, struct sbx_err *err)
{
	if (create && mkdirat(st->lib_fd, "snapshots", 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the snapshot directory");
	_cleanup_close_ int top = openat(st->lib_fd, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (top < 0)
		return errno == ENOENT ? -2 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the snapshots");
	const char *t = tenant_dir_name(tenant);
	if (create && mkdirat(top, t, 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the snapshot directory");
	int fd = openat(top, t, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? -2 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the snapshots");
	return fd;
}

static int sha256_file(int dfd, const char *name, char out[65], uint64_t *size, struct sbx_err *err)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ uint8_t *buf = malloc(1u << 20);
	if (fd < 0 || !buf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, fd < 0 ? errno : ENOMEM, "cannot read %s", name);
	SHA2_CTX c;
	SHA256Init(&c);
	*size = 0;
	for (;;) {
		ssize_t r = read(fd, buf, 1u << 20);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", name);
		if (r == 0)
			break;
		SHA256Update(&c, buf, (size_t)r);
		*size += (uint64_t)r;
	}
	SHA256End(&c, out);
	return 0;
}

/* --- manifests ------------------------------------------------------------ */

/* xx:xx:xx:xx:xx:xx, lower-case hex, as sbx_netns_mac_new writes it: it
 * goes onto the VMM's command line. */
static int mac_ok(const char *mac)
{
	if (strlen(mac) != 17)
		return 0;
	for (int i = 0; i < 17; i++)
		if (i % 3 == 2 ? mac[i] != ':' : !strchr("0123456789abcdef", mac[i]) || !mac[i])
			return 0;
	return 1;
}

static int parse_manifest(json_t *m, struct sbx_snapshot *s)
{
	const char *kind = json_string_value(json_object_get(m, "kind"));
	if (json_integer_value(json_object_get(m, "schema")) != SBX_SNAPSHOT_SCHEMA || !kind ||
	    strcmp(kind, "snapshot"))
		return -1;
	sbx_json_str(m, "name", s->name, sizeof s->name);
	sbx_json_str(m, "version", s->version, sizeof s->version);
	sbx_json_str(m, "tenant", s->tenant, sizeof s->tenant);
	sbx_json_str(m, "created", s->created, sizeof s->created);
	s->created_ns = sbx_json_u64(m, "created_ns");
	json_t *src = json_object_get(m, "source"), *t = json_object_get(src, "template");
	sbx_json_str(src, "session", s->source, sizeof s->source);
	sbx_json_str(t, "name", s->tmpl_name, sizeof s->tmpl_name);
	sbx_json_str(t, "version", s->tmpl_version, sizeof s->tmpl_version);
	sbx_json_str(t, "content_sha256", s->tmpl_sha256, sizeof s->tmpl_sha256);
	sbx_json_str(m, "kernel", s->kernel, sizeof s->kernel);
	sbx_json_str(m, "vmm", s->vmm, sizeof s->vmm);
	sbx_json_str(m, "accel", s->accel, sizeof s->accel);
	s->vcpus = (unsigned)sbx_json_u64(m, "vcpus");
	s->memory_mib = (unsigned)sbx_json_u64(m, "memory_mib");
	json_t *dev = json_object_get(m, "devices");
	s->disk_bytes = sbx_json_u64(dev, "scratch_bytes");
	if (json_is_true(json_object_get(dev, "network")))
		sbx_json_str(dev, "mac", s->mac, sizeof s->mac);
	if (json_is_true(json_object_get(dev, "workspace")))
		sbx_json_str(dev, "workspace_name", s->workspace, sizeof s->workspace);
	s->size = sbx_json_u64(m, "size");
	sbx_json_str(m, "content_sha256", s->content_sha256, sizeof s->content_sha256);
	if (sbx_id_check(s->name, "snapshot", NULL) < 0 || sbx_id_check(s->version, "snapshot", NULL) < 0 ||
	    !s->vcpus || !s->memory_mib || !s->disk_bytes || !s->vmm[0] || !s->tmpl_name[0] || !s->tmpl_version[0] ||
	    (json_is_true(json_object_get(dev, "network")) && !mac_ok(s->mac)) ||
	    (json_is_true(json_object_get(dev, "workspace")) && sbx_workspace_check(s->workspace, NULL) < 0))
		return -1;
	return 0;
}

/* The snapshot in dirfd/entry, whose name must be its NAME@VERSION. */
int sbx_snapshot_load_entry(int dirfd, const char *entry, struct sbx_snapshot *s)
{
	memset(s, 0, sizeof *s);
	_cleanup_close_ int fd = openat(dirfd, entry, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ char *txt = fd >= 0 ? sbx_read_small_at(fd, MANIFEST, 1 << 20, NULL) : NULL;
	json_t *m = txt ? json_loads(txt, JSON_REJECT_DUPLICATES, NULL) : NULL;
	int rc = m ? parse_manifest(m, s) : -1;
	json_decref(m);
	char want[140];
	snprintf(want, sizeof want, "%s@%s", s->name, s->version);
	return rc == 0 && !strcmp(want, entry) ? 0 : -1;
}

int sbx_snapshot_newer(const struct sbx_snapshot *a, const struct sbx_snapshot *b)
{
	if (a->created_ns != b->created_ns)
		return a->created_ns > b->created_ns;
	return strcmp(a->version, b->version) > 0;
}

void sbx_snapshot_set_place(struct sbx_state *st, const char *tenant, struct sbx_snapshot *s)
{
	snprintf(s->ref, sizeof s->ref, "%s/%s@%s", tenant_dir_name(tenant), s->name, s->version);
	snprintf(s->dir, sizeof s->dir, "%s/snapshots/%s", st->lib, s->ref);
}

int sbx_snapshot_find(struct sbx_state *st, const char *tenant, const char *spec, struct sbx_snapshot *s,
		      struct sbx_err *err)
{
	char name[64], version[64];
	if (sbx_snapshot_tenant_check(tenant, err) < 0 || sbx_snapshot_spec(spec, name, version, err) < 0)
		return -1;
	/* Another tenant's snapshots are not "forbidden": they do not exist. */
	const char *whose = tenant && *tenant ? " of this tenant" : "";
	int dfd = sbx_snapshot_tenant_dir(st, tenant, 0, err);
	if (dfd == -1)
		return -1;
	if (dfd == -2)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no snapshot %s%s", spec, whose);
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list the snapshots");
	}
	struct sbx_snapshot cur;
	int found = 0;
	size_t nl = strlen(name);
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_name[0] == '.' || strncmp(de->d_name, name, nl) || de->d_name[nl] != '@')
			continue;
		if (version[0] && strcmp(de->d_name + nl + 1, version))
			continue;
		if (sbx_snapshot_load_entry(dirfd(d), de->d_name, &cur) < 0)
			continue; /* not a snapshot (half-removed, foreign) */
		if (!found || sbx_snapshot_newer(&cur, s)) {
			*s = cur;
			found = 1;
		}
	}
	closedir(d);
	if (!found)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no snapshot %s%s", spec, whose);
	sbx_snapshot_set_place(st, tenant, s);
	return 0;
}

int sbx_snapshot_of_template(const struct sbx_template *t, struct sbx_snapshot *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	_cleanup_close_ int fd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *txt = fd >= 0 ? sbx_read_small_at(fd, MANIFEST, 1 << 20, NULL) : NULL;
	json_t *m = txt ? json_loads(txt, 0, NULL) : NULL;
	int rc = m ? parse_manifest(json_object_get(m, "snapshot"), s) : -1;
	json_decref(m);
	if (rc < 0)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "template %s@%s holds a snapshot whose manifest is unusable", t->name, t->version);
	s->is_template = 1;
	snprintf(s->name, sizeof s->name, "%s", t->ref);
	snprintf(s->version, sizeof s->version, "%s", t->version);
	snprintf(s->ref, sizeof s->ref, "template:%s@%s", t->ref, t->version);
	snprintf(s->dir, sizeof s->dir, "%s", t->dir);
	return 0;
}

static int template_sha(const char *dir, char out[65])
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *txt = fd >= 0 ? sbx_read_small_at(fd, MANIFEST, 1 << 20, NULL) : NULL;
	json_t *m = txt ? json_loads(txt, 0, NULL) : NULL;
	sbx_json_str(m, "content_sha256", out, 65);
	json_decref(m);
	return m ? 0 : -1;
}

int sbx_snapshot_template(struct sbx_state *st, const struct sbx_snapshot *s, struct sbx_template *t,
			  struct sbx_err *err)
{
	char spec[140];
	if (s->is_template)
		snprintf(spec, sizeof spec, "%s@%s", s->name, s->version);
	else
		snprintf(spec, sizeof spec, "%s@%s", s->tmpl_name, s->tmpl_version);
	struct sbx_err e = { 0 };
	if (sbx_template_find(st, spec, t, &e) < 0) {
		if (e.code != SBX_EXIT_NOENT) {
			*err = e;
			return -1;
		}
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "snapshot %s: its template %s is gone", s->ref, spec);
	}
	/* The guest in the image has the template's root disk cached: it
	 * must be the very same bytes. */
	char sha[65] = "";
	if (!s->is_template && s->tmpl_sha256[0] && (template_sha(t->dir, sha) < 0 || strcmp(sha, s->tmpl_sha256)))
		return sbx_err_set(
			err, SBX_EXIT_CONFLICT, 0,
			"snapshot %s: template %s changed since the snapshot was taken (content %.12s, was %.12s)",
			s->ref, spec, sha, s->tmpl_sha256);
	return 0;
}

/* --- restoring (sbx-create) ---------------------------------------------- */

int sbx_snapshot_apply(const struct sbx_snapshot *snap, const struct sbx_create_opts *o, const struct sbx_policy *p,
		       struct sbx_session *s, struct sbx_err *err)
{
	if (strcmp(snap->vmm, s->vmm))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "snapshot %s was saved by the %s VMM; this host would run %s", snap->ref, snap->vmm,
				   s->vmm);
	if (strcmp(snap->accel, s->accel))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "snapshot %s was saved under %s; this host runs guests under %s", snap->ref,
				   snap->accel, s->accel);
	/* The VM comes back as it was saved: its vCPUs, memory and disk are
	 * in the image.  Asking for others is an error, not a silent change. */
	if ((o->shape_set & SBX_SHAPE_VCPUS) && s->vcpus != snap->vcpus)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "snapshot %s has %u vCPUs and a restored VM keeps them; %u were asked for",
				   snap->ref, snap->vcpus, s->vcpus);
	if ((o->shape_set & SBX_SHAPE_MEMORY) && s->memory_mib != snap->memory_mib)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "snapshot %s has %u MiB of memory and a restored VM keeps it; %u MiB were asked for",
				   snap->ref, snap->memory_mib, s->memory_mib);
	if ((o->shape_set & SBX_SHAPE_DISK) && s->limits.disk_bytes != snap->disk_bytes)
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"snapshot %s has a %llu MiB disk and a restored VM keeps it; %llu MiB were asked for",
			snap->ref, (unsigned long long)(snap->disk_bytes >> 20),
			(unsigned long long)(s->limits.disk_bytes >> 20));
	if (o->nvols)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "a session from snapshot %s has the snapshot's devices: -v would add disks it was "
				   "not saved with",
				   snap->ref);
	/* Its workspace is re-attached by name (sbx-create refuses with 5,
	 * before anything exists, when another session holds it). */
	if (o->workspace && *o->workspace && strcmp(o->workspace, snap->workspace))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   snap->workspace[0]
					   ? "snapshot %s re-attaches its own workspace %s: --workspace cannot "
					     "name another"
					   : "a session from snapshot %s has the snapshot's devices: --workspace "
					     "would add a disk it was not saved with%s",
				   snap->ref, snap->workspace);
	/* The NIC is a device of the image: there or not as it was saved.
	 * Its namespace, TAP and proxy are the restore's own, from this
	 * create's policy. */
	int nic = p->network.egress == SBX_EGRESS_ALLOWLIST || p->packages.mode == SBX_PKG_ALLOWLIST;
	if (nic && !snap->mac[0])
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"snapshot %s was saved without a network device, which network.egress: allowlist and "
			"packages.mode: allowlist need",
			snap->ref);
	if (!nic && snap->mac[0])
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"snapshot %s was saved with a network device: restore it under a policy with "
			"network.egress: allowlist or packages.mode: allowlist (-p FILE), as its session had",
			snap->ref);
	s->vcpus = snap->vcpus;
	s->memory_mib = snap->memory_mib;
	s->limits.disk_bytes = snap->disk_bytes;
	/* The MAC the guest's driver read at its boot, in the image. */
	snprintf(s->mac, sizeof s->mac, "%s", snap->mac);
	snprintf(s->workspace, sizeof s->workspace, "%s", snap->workspace);
	snprintf(s->snapshot, sizeof s->snapshot, "%s", snap->ref);
	snprintf(s->snapshot_dir, sizeof s->snapshot_dir, "%s", snap->dir);
	snprintf(s->kernel, sizeof s->kernel, "%s", snap->kernel);
	/* The spec (idempotent --id) is of the snapshot, not the template. */
	snprintf(s->tmpl_req, sizeof s->tmpl_req, "snapshot:%.130s", snap->ref);
	return 0;
}

int sbx_snapshot_present(const struct sbx_snapshot *snap, struct sbx_err *err)
{
	char path[800];
	snprintf(path, sizeof path, "%s/" MANIFEST, snap->dir);
	if (access(path, R_OK) < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "snapshot %s was removed", snap->ref);
	return 0;
}

/* The session, and whether it is tenant's (when one is given). */
static int session_of(struct sbx_state *st, const char *id, const char *tenant, struct sbx_session *s,
		      struct sbx_err *err)
{
	if (sbx_id_check(id, "session", err) < 0 || sbx_snapshot_tenant_check(tenant, err) < 0)
		return -1;
	if (sbx_session_lookup(st, id, s, err) < 0)
		return -1;
	if (tenant && strcmp(tenant, s->tenant))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
	return 0;
}

/* --- suspend to disk ------------------------------------------------------ */

int sbx_suspend_leftovers(struct sbx_state *st, const char *id, int remove)
{
	_cleanup_close_ int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int found = 0;
	static const char *const names[] = { SBX_SUSPEND_TMP, SBX_SUSPEND_DIR };
	for (size_t i = 0; dfd >= 0 && i < SBX_ARRAY_LEN(names); i++)
		if (faccessat(dfd, names[i], F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
			found = 1;
			if (remove)
				sbx_rm_rf_at(dfd, names[i]);
		}
	return found;
}

/* --- saving --------------------------------------------------------------- */

/* A default version: the time, UTC to the millisecond, which sorts as it
 * was taken ("20250101T120000.123Z"). */
static void version_now(char *buf, size_t n)
{
	uint64_t ns = sbx_now_ns();
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;
	gmtime_r(&t, &tm);
	char base[32];
	strftime(base, sizeof base, "%Y%m%dT%H%M%S", &tm);
	snprintf(buf, n, "%s.%03uZ", base, (unsigned)(ns / 1000000u % 1000u));
}

/* A copy that keeps holes (a template's root disk is mostly one). */
static int copy_file(int sdir, const char *sname, int ddir, const char *dname, mode_t mode, struct sbx_err *err)
{
	_cleanup_close_ int in = openat(sdir, sname, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = openat(ddir, dname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	struct stat sb;
	if (in < 0 || out < 0 || fstat(in, &sb) < 0 || ftruncate(out, sb.st_size) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot copy %s", sname);
	for (off_t pos = 0; pos < sb.st_size;) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		off_t hole = data < 0 ? -1 : lseek(in, data, SEEK_HOLE);
		if (data < 0 || hole < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot copy %s", sname);
		for (pos = data; pos < hole;) {
			loff_t o_in = pos, o_out = pos;
			ssize_t w = copy_file_range(in, &o_in, out, &o_out, (size_t)(hole - pos), 0);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, w < 0 ? errno : EIO, "cannot copy %s",
						   sname);
			pos += w;
		}
	}
	if (fsync(out) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot copy %s", sname);
	return 0;
}

/* The manifest: everything a restore checks, and what a review wants to
 * know (where it came from, what limits its source ran under). */
static json_t *manifest_json(const struct sbx_session *src, const struct sbx_snapshot *s, json_t *files,
			     uint64_t save_ms)
{
	json_t *limits = NULL;
	_cleanup_free_ char *rec = sbx_record_text(src);
	json_t *r = rec ? json_loads(rec, 0, NULL) : NULL;
	if (r)
		limits = json_incref(json_object_get(r, "limits"));
	json_decref(r);
	json_t *m = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:I, s:{s:s, s:{s:s, s:s, s:s}}, s:s, s:s, s:s, s:i, s:i,"
			      " s:{s:s, s:I, s:i, s:b, s:b, s:b, s:s}, s:o, s:o, s:I, s:s, s:I}",
			      "schema", SBX_SNAPSHOT_SCHEMA, "kind", "snapshot", "name", s->name, "version", s->version,
			      "tenant", s->tenant, "created", s->created, "created_ns", (json_int_t)s->created_ns,
			      "source", "session", s->source, "template", "name", s->tmpl_name, "version",
			      s->tmpl_version, "content_sha256", s->tmpl_sha256, "kernel", s->kernel, "vmm", s->vmm,
			      "accel", s->accel, "vcpus", (int)s->vcpus, "memory_mib", (int)s->memory_mib, "devices",
			      "root", "template", "scratch_bytes", (json_int_t)s->disk_bytes, "volumes", 0, "workspace",
			      src->workspace[0] != 0, "network", src->mac[0] != 0, "rng", 1, "agent", "virtio-serial",
			      "limits", limits ? limits : json_object(), "files", files, "size", (json_int_t)s->size,
			      "content_sha256", s->content_sha256, "save_ms", (json_int_t)save_ms);
	if (m && src->mac[0])
		json_object_set_new(json_object_get(m, "devices"), "mac", json_string(src->mac));
	if (m && src->workspace[0])
		json_object_set_new(json_object_get(m, "devices"), "workspace_name", json_string(src->workspace));
	return m;
}

/* Publish a saved snapshot (in sdir, the work directory under LIB) as the
 * template NAME@VERSION: the base template's files linked (copied across
 * file systems), ours moved, a template manifest, renamed into place. */
static int publish(struct sbx_state *st, const struct sbx_session *src, int sdir, json_t *snapm,
		   const struct sbx_snapshot *s, const char *owner, struct sbx_err *err)
{
	char tmp[100], final[140];
	_cleanup_close_ int tdir = sbx_template_ns(st, owner, 1, err);
	if (tdir < 0)
		return -1;
	_cleanup_close_ int bdir = open(src->tmpl_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bdir < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", src->tmpl_dir);
	uint32_t rnd = arc4random();
	snprintf(tmp, sizeof tmp, ".tmp-snap-%08x", rnd);
	snprintf(final, sizeof final, "%s@%s", s->name, s->version);
	if (mkdirat(tdir, tmp, 0700) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create a template directory");
	_cleanup_close_ int wd = openat(tdir, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int rc = wd < 0 || flock(wd, LOCK_EX) < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock it") : 0;
	/* The base template's files: immutable, so shared (their mode stays
	 * 0644, which the jailed VMM needs). */
	static const char *const base_files[] = { "vmlinux", "initrd.cpio", "rootfs.ext4" };
	for (size_t i = 0; rc == 0 && i < SBX_ARRAY_LEN(base_files); i++)
		if (linkat(bdir, base_files[i], wd, base_files[i], 0) < 0)
			rc = copy_file(bdir, base_files[i], wd, base_files[i], 0644, err);
	for (size_t i = 0; rc == 0 && i < SBX_ARRAY_LEN(data_files); i++)
		if (renameat(sdir, data_files[i], wd, data_files[i]) < 0)
			rc = copy_file(sdir, data_files[i], wd, data_files[i], 0600, err);
	/* A template manifest (template.h) around the snapshot's. */
	_cleanup_free_ char *btxt = rc == 0 ? sbx_read_small_at(bdir, MANIFEST, 1 << 20, NULL) : NULL;
	json_t *bm = btxt ? json_loads(btxt, 0, NULL) : NULL;
	if (rc == 0 && !bm)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot read the manifest of template %s@%s",
				 src->tmpl_name, src->tmpl_version);
	if (rc == 0) {
		char created[40];
		time_t t = (time_t)(s->created_ns / 1000000000u);
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
		json_t *files = json_deep_copy(json_object_get(bm, "files"));
		if (!json_is_object(files)) {
			json_decref(files);
			files = json_object();
		}
		json_object_update(files, json_object_get(snapm, "files"));
		json_t *kernel = json_deep_copy(json_object_get(bm, "kernel"));
		json_t *pkgs = json_deep_copy(json_object_get(bm, "packages"));
		json_t *tm_ = json_pack("{s:i, s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:O}", "schema", 1, "name", s->name,
					"version", s->version, "created", created, "kernel",
					kernel ? kernel : json_null(), "packages", pkgs ? pkgs : json_array(), "files",
					files, "content_sha256", s->content_sha256, "snapshot", snapm);
		if (tm_) {
			json_object_set_new(tm_, "base", json_sprintf("%s@%s", src->tmpl_name, src->tmpl_version));
			json_object_set_new(tm_, "owner", json_string(sbx_template_owner_name(owner)));
		}
		char *txt = tm_ ? json_dumps(tm_, JSON_INDENT(2)) : NULL;
		rc = txt ? sbx_atomic_write_at(wd, MANIFEST, txt, strlen(txt), 0644, err)
			 : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot write the manifest");
		free(txt);
		json_decref(tm_);
	}
	json_decref(bm);
	/* The commit point, under the global lock so that two publishes of
	 * one name by two owners (or a removal) cannot both pass the check. */
	int g = rc == 0 ? sbx_lock_global(st, err) : -1;
	if (rc == 0 && g < 0)
		rc = -1;
	char who[SBX_ID_MAX + 1];
	if (rc == 0 && sbx_template_holder(st, owner, s->name, who))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0,
				 "template %s belongs to %s%s: a publish never shadows another owner's template",
				 s->name, who[0] ? "tenant " : "the ", sbx_template_owner_name(who));
	if (rc == 0 && renameat2(tdir, tmp, tdir, final, RENAME_NOREPLACE) < 0)
		rc = errno == EEXIST || errno == ENOTEMPTY
			     ? sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "template %s already exists", final)
			     : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot publish template %s", final);
	if (g >= 0)
		close(g);
	if (rc == 0)
		fsync(tdir);
	else
		sbx_rm_rf_at(tdir, tmp);
	return rc;
}

/* Where the monitor writes: LIB/snapshots/TENANT/.tmp-NAME@VERSION-RANDOM,
 * locked while we work so sbx-gc leaves it alone. */
static int work_dir(int tdir, const struct sbx_snapshot *s, char *name, size_t n, int *fd, struct sbx_err *err)
{
	snprintf(name, n, ".tmp-%s@%s-%08x", s->name, s->version, arc4random());
	if (mkdirat(tdir, name, 0700) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the snapshot directory");
	*fd = openat(tdir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (*fd < 0 || flock(*fd, LOCK_EX | LOCK_NB) < 0) {
		sbx_rm_rf_at(tdir, name);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the snapshot directory");
	}
	return 0;
}

static int exists_at(int dfd, const char *name)
{
	return faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* May the caller (tenant, NULL for the operator) publish src as the
 * template name, and into whose namespace (owner)?  Publishing is the
 * operator's; a tenant may where sbx.yaml lists it, into its own.  A
 * tenant's session never becomes the operator's template (its guest would
 * then serve every tenant), and no name another owner holds is taken. */
static int publish_check(struct sbx_state *st, const char *caller, const struct sbx_session *src, const char *name,
			 char owner[SBX_ID_MAX + 1], struct sbx_err *err)
{
	owner[0] = 0;
	if (caller) {
		static struct sbx_hostconf hc;
		if (sbx_hostconf_load(&hc, err) < 0)
			return -1;
		if (!sbx_hostconf_publisher(&hc, caller))
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"publishing a template is the operator's: tenant %s is not in templates.publishers "
				"of %s",
				caller, hc.source[0] ? hc.source : "sbx.yaml (there is none)");
		snprintf(owner, SBX_ID_MAX + 1, "%s", caller);
	} else if (src->tenant[0]) {
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"session %s is tenant %s's: its guest cannot become the operator's template (publish it "
			"with --tenant %s, into that tenant's own templates)",
			src->id, src->tenant, src->tenant);
	} else if (src->tmpl_owner[0]) {
		/* An operator session booted from a tenant's template runs that
		 * tenant's guest: the same hand-over by another road. */
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"session %s runs tenant %s's template %s: its guest cannot become the operator's template",
			src->id, src->tmpl_owner, src->tmpl_name);
	}
	if (owner[0] && strlen(owner) + 1 + strlen(name) >= 64)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "template name %s/%s is too long (at most 63 bytes)",
				   owner, name);
	char who[SBX_ID_MAX + 1];
	if (sbx_template_holder(st, owner, name, who))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "template %s belongs to %s%s: a publish never shadows another owner's template",
				   name, who[0] ? "tenant " : "the ", sbx_template_owner_name(who));
	return 0;
}

static int save_audit(struct sbx_state *st, const struct sbx_snapshot *s, int to_template, uint64_t save_ms,
		      struct sbx_err *err)
{
	json_t *f = json_pack("{s:s, s:s, s:s, s:s, s:b, s:I, s:s, s:I}", "session", s->source, "snapshot", s->ref,
			      "name", s->name, "version", s->version, "template", to_template, "size",
			      (json_int_t)s->size, "content_sha256", s->content_sha256, "save_ms", (json_int_t)save_ms);
	if (f && s->tenant[0])
		json_object_set_new(f, "tenant", json_string(s->tenant));
	if (f && to_template)
		json_object_set_new(f, "owner", json_string(sbx_template_owner_name(s->tenant)));
	int rc = sbx_audit_append(st, "snapshot.save", f, err);
	json_decref(f);
	return rc;
}

/* The sizes of tenant's snapshots, and its snapshot_bytes quota (0: none,
 * and *used not counted). */
static int snapshot_use(struct sbx_state *st, const char *tenant, unsigned long long *used, uint64_t *quota,
			struct sbx_err *err)
{
	struct sbx_quota q;
	*used = 0;
	if (sbx_hostconf_tenant_quota(tenant, &q, err) < 0)
		return -1;
	*quota = q.snapshot_bytes;
	if (!q.snapshot_bytes)
		return 0;
	struct sbx_snapshot *v;
	size_t n;
	if (sbx_snapshot_collect(st, tenant, NULL, NULL, &v, &n, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		*used += v[i].size;
	free(v);
	return 0;
}

/* What s's tenant has left of quotas.snapshot_bytes (*left 0: no quota);
 * none left is refused before any work. */
static int snapshot_room(struct sbx_state *st, const struct sbx_snapshot *s, uint64_t *left, struct sbx_err *err)
{
	unsigned long long used;
	uint64_t quota;
	*left = 0;
	if (!s->tenant[0])
		return 0;
	if (snapshot_use(st, s->tenant, &used, &quota, err) < 0)
		return -1;
	if (!quota)
		return 0;
	if (used < quota) {
		*left = quota - used;
		return 0;
	}
	return sbx_err_tenant_quota(err, s->tenant, "snapshot_bytes", used, 1, quota, " bytes", "its snapshots",
				    "remove one of its snapshots first");
}

/* Would s (not yet listed) take its tenant past quotas.snapshot_bytes? */
static int snapshot_quota(struct sbx_state *st, const struct sbx_snapshot *s, struct sbx_err *err)
{
	unsigned long long used;
	uint64_t quota;
	if (snapshot_use(st, s->tenant, &used, &quota, err) < 0)
		return -1;
	if (!quota || used + s->size <= quota)
		return 0;
	return sbx_err_tenant_quota(err, s->tenant, "snapshot_bytes", used, s->size, quota, " bytes", "its snapshots",
				    "remove one of its snapshots first");
}

/* One save, from its checks to its commit. */
struct save {
	const struct sbx_snapshot_save_opts *o;
	struct sbx_snapshot s;
	struct sbx_session src;
	char version[64];
	int auto_version;
	char owner[SBX_ID_MAX + 1]; /* a template's publisher ("" the operator) */
	int tdir, tpl;              /* the tenant's snapshots, the templates namespace */
	char tbase[600], final[140], wname[160];
	uint64_t left; /* what the tenant's quota leaves; 0: no cap */
	uint64_t save_ms;
};

/* Everything checked before any work: the name, the session (running,
 * its workspace), who may publish, a free name, the tenant's room. */
static int save_prepare(struct sbx_state *st, struct save *v, struct sbx_err *err)
{
	const struct sbx_snapshot_save_opts *o = v->o;
	struct sbx_snapshot *s = &v->s;
	if (sbx_snapshot_spec(o->spec, s->name, v->version, err) < 0 ||
	    session_of(st, o->session, o->tenant, &v->src, err) < 0)
		return -1;
	const char *live = sbx_session_live_state(st, &v->src);
	if (!strcmp(live, "suspended"))
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				   "session %s is suspended: resume it first (sbx-snapshot resume %s)", v->src.id,
				   v->src.id);
	if (!sbx_state_up(live))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "session %s is not running (%s)", v->src.id, live);
	if (sbx_state_room(st, 0, err) < 0)
		return -1;
	/* A template's sessions are everyone's it serves (and the warm
	 * pool's, which never has a workspace): a workspace is one tenant's,
	 * attached by one session at a time. */
	if (o->to_template && v->src.workspace[0])
		return sbx_err_set(
			err, SBX_EXIT_CONFLICT, 0,
			"session %s has a workspace: it can be saved as a snapshot, not as a template (every "
			"session of the template would attach a workspace of that name)",
			v->src.id);
	/* The snapshot is the session's tenant's: its memory never changes
	 * hands, whoever asks. */
	snprintf(s->tenant, sizeof s->tenant, "%s", v->src.tenant);
	if (sbx_snapshot_tenant_check(s->tenant, err) < 0)
		return -1;
	const char *caller = o->tenant ? o->tenant : sbx_state_tenant(st);
	if (o->to_template && publish_check(st, caller, &v->src, s->name, v->owner, err) < 0)
		return -1;
	v->auto_version = !v->version[0];
	if (v->auto_version)
		version_now(v->version, sizeof v->version);
	snprintf(s->version, sizeof s->version, "%s", v->version);
	if ((v->tdir = sbx_snapshot_tenant_dir(st, s->tenant, 1, err)) < 0)
		return -1;
	sbx_templates_dir(st, v->tbase, sizeof v->tbase);
	v->tpl = o->to_template ? sbx_template_ns(st, v->owner, 0, NULL) : -1;
	/* Taken names are refused before any work (and again at the rename). */
	for (int i = 1;; i++) {
		snprintf(v->final, sizeof v->final, "%s@%s", s->name, s->version);
		int taken = o->to_template ? v->tpl >= 0 && exists_at(v->tpl, v->final) : exists_at(v->tdir, v->final);
		if (!taken)
			break;
		if (!v->auto_version || i > 9)
			return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "%s %s already exists",
					   o->to_template ? "template" : "snapshot", v->final);
		snprintf(s->version, sizeof s->version, "%s-%d", v->version, i);
	}
	/* A snapshot (not a template: publishing is not counted there) stops
	 * while it is written at what its tenant has left, so a hostile VMM
	 * or a full disk image cannot write past the quota (N6). */
	if (!o->to_template && snapshot_room(st, s, &v->left, err) < 0)
		return -1;
	return 0;
}

/* The monitor saves the VM into a work directory (*wd); then the source
 * is recorded, every file hashed and the manifest written.  *m: the
 * manifest, for a publish. */
static int save_and_hash(struct sbx_state *st, struct save *v, int *wd, json_t **m, struct sbx_err *err)
{
	struct sbx_snapshot *s = &v->s;
	const struct sbx_session *src = &v->src;
	if (work_dir(v->tdir, s, v->wname, sizeof v->wname, wd, err) < 0)
		return -1;
	char rel[300];
	snprintf(rel, sizeof rel, "snapshots/%s/%s", tenant_dir_name(s->tenant), v->wname);
	uint64_t t0 = sbx_mono_ns();
	s->created_ns = sbx_now_ns();
	sbx_fmt_time(s->created_ns, s->created, sizeof s->created);
	if (sbx_vmctl(st, src->id, SBX_VMCTL_SAVE, rel, NULL, v->left, v->o->progress_fd, SAVE_TIMEOUT_MS, NULL, 0,
		      err) < 0) {
		if (v->left && err && err->code == SBX_EXIT_TEMPFAIL && strstr(err->msg, "snapshot_bytes")) {
			snprintf(err->kind, sizeof err->kind, "tenant_quota");
			snprintf(err->quota, sizeof err->quota, "snapshot_bytes");
		}
		return -1;
	}
	v->save_ms = (sbx_mono_ns() - t0) / 1000000u;
	/* What the source was: recorded so a restore can check it gets the
	 * same (template content, VMM, acceleration, shape). */
	snprintf(s->source, sizeof s->source, "%s", src->id);
	snprintf(s->tmpl_name, sizeof s->tmpl_name, "%s", src->tmpl_name);
	snprintf(s->tmpl_version, sizeof s->tmpl_version, "%s", src->tmpl_version);
	template_sha(src->tmpl_dir, s->tmpl_sha256);
	snprintf(s->kernel, sizeof s->kernel, "%s", src->kernel);
	snprintf(s->vmm, sizeof s->vmm, "%s", src->vmm);
	snprintf(s->accel, sizeof s->accel, "%s", src->accel);
	s->vcpus = src->vcpus;
	s->memory_mib = src->memory_mib;
	if (sbx_zdisk_size(*wd, "scratch.zst", &s->disk_bytes, err) < 0)
		return -1;
	/* A template serves every session made from it (and the pool): it
	 * does not carry running commands. */
	if (v->o->to_template && faccessat(*wd, EXECS_FILE, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				   "session %s had execs running: a template's sessions would all run them; end them "
				   "(sbx-kill --exec) or save a snapshot instead",
				   src->id);
	size_t nx = 0;
	char **xf = exec_files(*wd, &nx);
	json_t *files = json_object();
	SHA2_CTX c;
	SHA256Init(&c);
	for (size_t i = 0; i < SBX_ARRAY_LEN(data_files) + nx; i++) {
		const char *name = i < SBX_ARRAY_LEN(data_files) ? data_files[i] : xf[i - SBX_ARRAY_LEN(data_files)];
		char sha[65];
		uint64_t size = 0;
		if (sha256_file(*wd, name, sha, &size, err) < 0) {
			json_decref(files);
			exec_files_free(xf, nx);
			return -1;
		}
		json_object_set_new(files, name, json_pack("{s:I, s:s}", "size", (json_int_t)size, "sha256", sha));
		char line[200];
		snprintf(line, sizeof line, "%s %s\n", sha, name);
		SHA256Update(&c, (const uint8_t *)line, strlen(line));
		s->size += size;
	}
	exec_files_free(xf, nx);
	SHA256End(&c, s->content_sha256);
	*m = manifest_json(src, s, files, v->save_ms);
	_cleanup_free_ char *txt = *m ? json_dumps(*m, JSON_INDENT(2)) : NULL;
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot write the manifest");
	return sbx_atomic_write_at(*wd, MANIFEST, txt, strlen(txt), 0600, err);
}

/* The commit point: a template published, or the snapshot's name made to
 * appear with everything in it (a tenant's under the global lock, so two
 * saves cannot both take the last bytes of its snapshot_bytes). */
static int save_commit(struct sbx_state *st, struct save *v, int wd, json_t *m, struct sbx_err *err)
{
	struct sbx_snapshot *s = &v->s;
	if (v->o->to_template) {
		if (publish(st, &v->src, wd, m, s, v->owner, err) < 0)
			return -1;
		sbx_rm_rf_at(v->tdir, v->wname);
		s->is_template = 1;
		snprintf(s->ref, sizeof s->ref, "template:%s%s%s@%s", v->owner, v->owner[0] ? "/" : "", s->name,
			 s->version);
		if (v->owner[0])
			snprintf(s->dir, sizeof s->dir, "%s/" SBX_TEMPLATE_TENANTS "/%s/%s", v->tbase, v->owner,
				 v->final);
		else
			snprintf(s->dir, sizeof s->dir, "%s/%s", v->tbase, v->final);
		if (v->tpl < 0)
			v->tpl = sbx_template_ns(st, v->owner, 0, NULL);
		return 0;
	}
	int rc = 0;
	_cleanup_close_ int g = s->tenant[0] ? sbx_lock_global(st, err) : -1;
	if (s->tenant[0] && (g < 0 || snapshot_quota(st, s, err) < 0))
		rc = -1;
	else if (renameat2(v->tdir, v->wname, v->tdir, v->final, RENAME_NOREPLACE) < 0)
		rc = errno == EEXIST || errno == ENOTEMPTY
			     ? sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "snapshot %s already exists", v->final)
			     : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot store snapshot %s", v->final);
	else
		fsync(v->tdir);
	sbx_snapshot_set_place(st, s->tenant, s);
	return rc;
}

/* Audited once it exists; one that cannot be audited does not stay. */
static int save_audited(struct sbx_state *st, struct save *v, struct sbx_err *err)
{
	if (save_audit(st, &v->s, v->o->to_template, v->save_ms, err) == 0)
		return 0;
	sbx_err_wrap(err, "cannot write the audit trail, the snapshot was removed");
	if (err)
		err->code = SBX_EXIT_INTERNAL;
	char gone[160];
	if (v->s.is_template)
		snprintf(gone, sizeof gone, ".tmp-snap-rm-%08x", arc4random());
	else
		snprintf(gone, sizeof gone, ".rm-%s-%08x", v->final, arc4random());
	int at = v->s.is_template ? v->tpl : v->tdir;
	if (at >= 0 && renameat(at, v->final, at, gone) == 0)
		sbx_rm_rf_at(at, gone);
	return -1;
}

int sbx_snapshot_save(struct sbx_state *st, const struct sbx_snapshot_save_opts *o, struct sbx_snapshot *out,
		      struct sbx_err *err)
{
	struct save v = { .o = o, .tdir = -1, .tpl = -1 };
	_cleanup_close_ int wd = -1;
	json_t *m = NULL;
	int rc = save_prepare(st, &v, err);
	if (rc == 0 && (rc = save_and_hash(st, &v, &wd, &m, err)) == 0)
		rc = save_commit(st, &v, wd, m, err);
	json_decref(m);
	/* The one unwind before the commit: the work directory goes. */
	if (rc < 0 && v.tdir >= 0 && v.wname[0])
		sbx_rm_rf_at(v.tdir, v.wname);
	if (rc == 0)
		rc = save_audited(st, &v, err);
	if (rc == 0 && out)
		*out = v.s;
	if (v.tdir >= 0)
		close(v.tdir);
	if (v.tpl >= 0)
		close(v.tpl);
	return rc;
}

/* ---- fork: N running copies of a session ------------------------------- */

/* Why not a snapshot by name: a fork's is nobody's to list, restore or
 * remove, and must not outlive the fork.  So it stays the save's work
 * directory (.tmp-*, flock'ed while we run, so a fork killed midway
 * leaves only what sbx-gc removes as any interrupted save's), each copy
 * restores from it directly, and it goes once they all run. */
static void fork_unwind(struct sbx_state *st, char (*ids)[SBX_ID_MAX + 1], unsigned made)
{
	for (unsigned i = 0; i < made; i++) {
		int gone;
		sbx_session_destroy(st, ids[i], &gone, NULL);
	}
}

static int fork_audit(struct sbx_state *st, const struct save *v, char (*ids)[SBX_ID_MAX + 1], unsigned n,
		      uint64_t fork_ms, struct sbx_err *err)
{
	json_t *sessions = json_array();
	for (unsigned i = 0; i < n; i++)
		json_array_append_new(sessions, json_string(ids[i]));
	json_t *f = json_pack("{s:s, s:o, s:i, s:I, s:I, s:I}", "session", v->src.id, "sessions", sessions, "n", (int)n,
			      "size", (json_int_t)v->s.size, "save_ms", (json_int_t)v->save_ms, "fork_ms",
			      (json_int_t)fork_ms);
	if (f && v->src.tenant[0])
		json_object_set_new(f, "tenant", json_string(v->src.tenant));
	int rc = sbx_audit_append(st, "snapshot.fork", f, err);
	json_decref(f);
	return rc;
}

int sbx_snapshot_fork(struct sbx_state *st, const struct sbx_snapshot_fork_opts *o, char (*ids)[SBX_ID_MAX + 1],
		      uint64_t *fork_ms, struct sbx_err *err)
{
	if (o->n < 1 || o->n > SBX_FORK_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "a fork makes 1 to %u copies, not %u", SBX_FORK_MAX, o->n);
	uint64_t t0 = sbx_mono_ns();
	struct sbx_snapshot_save_opts so = {
		.session = o->session, .tenant = o->tenant, .spec = "fork", .progress_fd = -1
	};
	struct save v = { .o = &so, .tdir = -1, .tpl = -1 };
	_cleanup_close_ int wd = -1;
	json_t *m = NULL;
	int rc = save_prepare(st, &v, err);
	/* A workspace is one session's at a time: the source keeps it. */
	if (rc == 0 && v.src.workspace[0])
		rc = sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				 "session %s has workspace %s, which one session holds at a time: it cannot be forked",
				 v.src.id, v.src.workspace);
	/* All of the tenant's room for the copies, before any work. */
	if (rc == 0)
		rc = sbx_capacity_quota_n(st, v.src.tenant, o->n, v.src.vcpus, v.src.memory_mib, err);
	if (rc == 0)
		rc = save_and_hash(st, &v, &wd, &m, err);
	json_decref(m);
	struct sbx_snapshot snap = v.s;
	snprintf(snap.ref, sizeof snap.ref, "fork:%s", v.src.id);
	snprintf(snap.dir, sizeof snap.dir, "%s/snapshots/%s/%s", st->lib, tenant_dir_name(v.s.tenant), v.wname);
	unsigned made = 0;
	while (rc == 0 && made < o->n) {
		struct sbx_create_opts co = { .snapshot_direct = &snap,
					      .tenant = v.src.tenant[0] ? v.src.tenant : NULL,
					      .policy = o->policy,
					      .progress_fd = -1 };
		struct sbx_session s;
		int existed = 0;
		if (sbx_session_create(st, &co, &s, &existed, err) < 0) {
			rc = -1;
			break;
		}
		snprintf(ids[made++], SBX_ID_MAX + 1, "%s", s.id);
	}
	*fork_ms = (sbx_mono_ns() - t0) / 1000000u;
	if (rc == 0 && fork_audit(st, &v, ids, made, *fork_ms, err) < 0) {
		sbx_err_wrap(err, "cannot write the audit trail, the copies were destroyed");
		if (err)
			err->code = SBX_EXIT_INTERNAL;
		rc = -1;
	}
	/* All or nothing: a copy made before a failure goes. */
	if (rc < 0)
		fork_unwind(st, ids, made);
	if (v.tdir >= 0 && v.wname[0])
		sbx_rm_rf_at(v.tdir, v.wname);
	if (v.tdir >= 0)
		close(v.tdir);
	if (v.tpl >= 0)
		close(v.tpl);
	return rc;
}
