#include "session.h"
#include "audit.h"
#include "capacity.h"
#include "policy.h"
#include "cgroup.h"
#include "proto.h"
#include "hostpath.h"
#include "secrets.h"
#include "template.h"
#include "util.h"
#include "vmm.h"
#include "netns.h"
#include "workspace.h"
#include "pool.h"
#include "progress.h"
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <jansson.h>
#include <sha2.h>

#define RECORD SBX_RECORD_FILE

/* limits.files; absent (a record from before sbx-cp): the policy defaults. */
static void get_files(json_t *f, struct sbx_limits *l)
{
	static const char *const defaults[] = { "/workspace", "/tmp" };
	struct sbx_limit_paths *lists[] = { &l->writable, &l->exportable };
	const char *keys[] = { "writable", "exportable" };
	for (int k = 0; k < 2; k++) {
		json_t *a = json_object_get(f, keys[k]), *v;
		size_t i;
		lists[k]->n = 0;
		if (!json_is_array(a)) {
			for (i = 0; i < SBX_ARRAY_LEN(defaults); i++)
				snprintf(lists[k]->path[lists[k]->n++], SBX_LIMIT_PATH_LEN, "%s", defaults[i]);
			continue;
		}
		json_array_foreach(a, i, v) {
			/* Longer lists or paths than ours never come from our own
			 * writer; drop nothing silently into a wider grant. */
			if (lists[k]->n < SBX_LIMIT_PATHS_MAX && json_is_string(v) &&
			    strlen(json_string_value(v)) < SBX_LIMIT_PATH_LEN)
				snprintf(lists[k]->path[lists[k]->n++], SBX_LIMIT_PATH_LEN, "%s", json_string_value(v));
		}
	}
	json_t *mt = json_object_get(f, "max_transfer"), *ms = json_object_get(f, "max_session_transfer");
	l->max_transfer = json_is_integer(mt) ? sbx_json_u64(f, "max_transfer") : 256ull << 20;
	l->max_session_transfer = json_is_integer(ms) ? sbx_json_u64(f, "max_session_transfer") : 1ull << 30;
}

static json_t *files_json(const struct sbx_limits *l)
{
	json_t *w = json_array(), *e = json_array();
	for (unsigned i = 0; i < l->writable.n; i++)
		json_array_append_new(w, json_string(l->writable.path[i]));
	for (unsigned i = 0; i < l->exportable.n; i++)
		json_array_append_new(e, json_string(l->exportable.path[i]));
	return json_pack("{s:o, s:o, s:I, s:I}", "writable", w, "exportable", e, "max_transfer",
			 (json_int_t)l->max_transfer, "max_session_transfer", (json_int_t)l->max_session_transfer);
}

/* limits.packages; absent (a record from before the package cache):
 * offline, which is what such a session had. */
static void get_packages(json_t *p, struct sbx_limit_packages *k)
{
	memset(k, 0, sizeof *k);
	k->mode = SBX_PKG_OFFLINE;
	snprintf(k->policy, sizeof k->policy, "defaults");
	if (!json_is_object(p))
		return;
	const char *mode = json_string_value(json_object_get(p, "mode"));
	k->mode = mode && !strcmp(mode, "allowlist") ? SBX_PKG_ALLOWLIST : SBX_PKG_OFFLINE;
	sbx_json_str(p, "policy", k->policy, sizeof k->policy);
	json_t *a = json_object_get(p, "registries"), *v;
	size_t i;
	json_array_foreach(a, i, v) {
		const char *type = json_string_value(json_object_get(v, "type"));
		const char *url = json_string_value(json_object_get(v, "url"));
		/* Never widen: an entry we would not have written is dropped. */
		if (k->nreg >= SBX_ARRAY_LEN(k->reg) || !type || !url || strlen(url) >= sizeof k->reg[0].url ||
		    (strcmp(type, "pypi") && strcmp(type, "npm")))
			continue;
		k->reg[k->nreg].type = !strcmp(type, "npm") ? SBX_REG_NPM : SBX_REG_PYPI;
		snprintf(k->reg[k->nreg].url, sizeof k->reg[0].url, "%s", url);
		k->nreg++;
	}
	k->max_download = sbx_json_u64(p, "max_download");
	k->require_hashes = json_is_true(json_object_get(p, "require_hashes"));
}

static json_t *packages_json(const struct sbx_limit_packages *k)
{
	json_t *regs = json_array();
	for (unsigned i = 0; i < k->nreg; i++)
		json_array_append_new(regs, json_pack("{s:s, s:s}", "type", k->reg[i].type == SBX_REG_NPM ? "npm" : "pypi",
						      "url", k->reg[i].url));
	return json_pack("{s:s, s:s, s:o, s:I, s:b}", "mode", k->mode == SBX_PKG_ALLOWLIST ? "allowlist" : "offline",
			 "policy", k->policy, "registries", regs, "max_download", (json_int_t)k->max_download,
			 "require_hashes", k->require_hashes);
}

static int record_load(struct sbx_state *st, const char *id, struct sbx_session *s, int quarantine,
		       struct sbx_err *err);

int sbx_record_load(struct sbx_state *st, const char *id, struct sbx_session *s, struct sbx_err *err)
{
	return record_load(st, id, s, 1, err);
}

/* The one place a caller's scope meets a session: another tenant's is
 * not "forbidden", it does not exist, with the very message a missing one
 * gets; and nothing is changed for it (a corrupt record is left where it
 * is, since whose it is cannot be told). */
int sbx_session_lookup(struct sbx_state *st, const char *id, struct sbx_session *s, struct sbx_err *err)
{
	if (sbx_id_check(id, "session", err) < 0)
		return -1;
	if (!st->tenant[0])
		return record_load(st, id, s, 1, err);
	if (record_load(st, id, s, 0, NULL) < 0 || strcmp(s->tenant, st->tenant)) {
		memset(s, 0, sizeof *s);
		if (err)
			snprintf(err->session, sizeof err->session, "%s", id);
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
	}
	return 0;
}

int sbx_session_visible(struct sbx_state *st, const char *id, struct sbx_err *err)
{
	struct sbx_session s;
	if (!st->tenant[0])
		return sbx_id_check(id, "session", err);
	return sbx_session_lookup(st, id, &s, err);
}

static int record_load(struct sbx_state *st, const char *id, struct sbx_session *s, int quarantine,
		       struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	_cleanup_close_ int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0) {
		if (errno == ENOENT)
			return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open session %s", id);
	}
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, RECORD, 1 << 20, NULL);
	if (!txt) {
		if (errno == ENOENT)
			return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s (no record)", id);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the record of %s", id);
	}
	if (sbx_record_parse(txt, id, s) < 0) {
		if (!quarantine)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record of session %s is corrupt", id);
		/* Quarantine, never crash: keep the bytes for a post-mortem. */
		char q[64];
		snprintf(q, sizeof q, RECORD ".corrupt-%llu", (unsigned long long)(sbx_now_ns() / 1000000u));
		renameat(dfd, RECORD, dfd, q);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record of session %s is corrupt (kept as %s)", id, q);
	}
	return 0;
}

int sbx_record_parse(const char *txt, const char *id, struct sbx_session *s)
{
	memset(s, 0, sizeof *s);
	json_t *o = json_loads(txt, JSON_REJECT_DUPLICATES, NULL);
	if (!o || json_integer_value(json_object_get(o, "schema")) != SBX_RECORD_SCHEMA ||
	    !json_is_string(json_object_get(o, "id")) || strcmp(json_string_value(json_object_get(o, "id")), id) ||
	    sbx_id_check(id, "session", NULL) < 0) {
		json_decref(o);
		return -1;
	}
	snprintf(s->id, sizeof s->id, "%s", id);
	sbx_json_str(o, "state", s->state, sizeof s->state);
	sbx_json_str(o, "tenant", s->tenant, sizeof s->tenant);
	sbx_json_str(o, "workspace", s->workspace, sizeof s->workspace);
	/* The environment as sbx-create checked it: anything else is not a
	 * record of ours. */
	sbx_json_str(o, "workdir", s->workdir, sizeof s->workdir);
	sbx_json_str(o, "user", s->user, sizeof s->user);
	uint32_t uid;
	if (sbx_env_from_json(&s->env, o) < 0 || (s->workdir[0] && sbx_workdir_check(s->workdir, "workdir", NULL) < 0) ||
	    (s->user[0] && sbx_user_parse(s->user, &uid) < 0)) {
		json_decref(o);
		return -1;
	}
	s->pool = json_is_true(json_object_get(o, "pool"));
	s->from_pool = json_is_true(json_object_get(o, "from_pool"));
	s->claim_ms = sbx_json_u64(o, "claim_ms");
	sbx_json_str(o, "cgroup", s->cgroup, sizeof s->cgroup);
	if (s->cgroup[0] && sbx_id_check(s->cgroup, "cgroup", NULL) < 0)
		s->cgroup[0] = 0;
	json_t *so = json_object_get(o, "snapshot");
	sbx_json_str(so, "ref", s->snapshot, sizeof s->snapshot);
	sbx_json_str(so, "dir", s->snapshot_dir, sizeof s->snapshot_dir);
	json_t *t = json_object_get(o, "template");
	sbx_json_str(t, "name", s->tmpl_name, sizeof s->tmpl_name);
	sbx_json_str(t, "version", s->tmpl_version, sizeof s->tmpl_version);
	sbx_json_str(t, "dir", s->tmpl_dir, sizeof s->tmpl_dir);
	sbx_json_str(t, "owner", s->tmpl_owner, sizeof s->tmpl_owner);
	if (!strcmp(s->tmpl_owner, SBX_TEMPLATE_OPERATOR) || sbx_id_check(s->tmpl_owner, "tenant", NULL) < 0)
		s->tmpl_owner[0] = 0;
	sbx_json_str(o, "accel", s->accel, sizeof s->accel);
	sbx_json_str(o, "vmm", s->vmm, sizeof s->vmm);
	sbx_json_str(o, "spec", s->spec, sizeof s->spec);
	sbx_json_str(o, "boot_id", s->boot_id, sizeof s->boot_id);
	sbx_json_str(o, "kernel", s->kernel, sizeof s->kernel);
	sbx_json_str(o, "end_reason", s->end_reason, sizeof s->end_reason);
	s->created_ns = sbx_json_u64(o, "created_ns");
	s->ready_ns = sbx_json_u64(o, "ready_ns");
	s->ended_ns = sbx_json_u64(o, "ended_ns");
	s->vcpus = (unsigned)sbx_json_u64(o, "vcpus");
	s->memory_mib = (unsigned)sbx_json_u64(o, "memory_mib");
	s->boot_ms = sbx_json_u64(o, "boot_ms");
	s->cpu_ns = sbx_json_u64(o, "cpu_ns");
	s->mem_peak = sbx_json_u64(o, "mem_peak");
	json_t *lo = json_object_get(o, "limits");
	s->limits.ttl_ms = sbx_json_u64(lo, "ttl_ms");
	s->limits.exec_timeout_default_ms = sbx_json_u64(lo, "exec_timeout_default_ms");
	s->limits.exec_timeout_max_ms = sbx_json_u64(lo, "exec_timeout_max_ms");
	s->limits.output_cap = sbx_json_u64(lo, "output_cap");
	s->limits.output_session_cap = json_object_get(lo, "output_session_cap")
					       ? sbx_json_u64(lo, "output_session_cap")
					       : SBX_OUTPUT_SESSION_CAP_DEFAULT;
	s->limits.exec_memory = sbx_json_u64(lo, "exec_memory");
	s->limits.disk_bytes = sbx_json_u64(lo, "disk_bytes");
	s->limits.pids_per_exec = (unsigned)sbx_json_u64(lo, "pids_per_exec");
	s->limits.pids_per_session = (unsigned)sbx_json_u64(lo, "pids_per_session");
	s->limits.cpu_milli = (unsigned)sbx_json_u64(lo, "cpu_milli");
	s->limits.workspace_size = sbx_json_u64(lo, "workspace_size");
	s->limits.workspace_retention_ms = sbx_json_u64(lo, "workspace_retention_ms");
	get_files(json_object_get(lo, "files"), &s->limits);
	get_packages(json_object_get(lo, "packages"), &s->limits.packages);
	json_t *net = json_object_get(o, "net");
	sbx_json_str(net, "mac", s->mac, sizeof s->mac);
	sbx_json_str(net, "lost", s->net_lost, sizeof s->net_lost);
	s->agent_unresponsive_ns = sbx_json_u64(o, "agent_unresponsive_ns");
	json_t *lc = json_object_get(o, "lifecycle");
	s->suspends = (unsigned)sbx_json_u64(lc, "suspends");
	s->paused_ns = sbx_json_u64(lc, "paused_ns");
	s->suspended_ns = sbx_json_u64(lc, "suspended_ns");
	s->state_since_ns = sbx_json_u64(lc, "state_since_ns");
	s->resume_ms = sbx_json_u64(lc, "resume_ms");
	s->limits.idle_pause_ms = sbx_json_u64(lo, "idle_pause_ms");
	s->limits.idle_suspend_ms = sbx_json_u64(lo, "idle_suspend_ms");
	s->limits.ttl_running = json_is_true(json_object_get(lo, "ttl_running"));
	s->limits.egress = json_is_string(json_object_get(net, "egress")) &&
			   !strcmp(json_string_value(json_object_get(net, "egress")), "allowlist");
	s->limits.max_connections = (unsigned)sbx_json_u64(net, "max_connections");
	s->limits.max_bytes = sbx_json_u64(net, "max_bytes");
	json_t *vs = json_object_get(o, "volumes"), *v;
	size_t vi;
	json_array_foreach(vs, vi, v) {
		if (s->nvols >= 8)
			break;
		sbx_json_str(v, "host", s->vols[s->nvols].host, sizeof s->vols[0].host);
		sbx_json_str(v, "guest", s->vols[s->nvols].guest, sizeof s->vols[0].guest);
		s->nvols++;
	}
	json_t *mo = json_object_get(o, "monitor"), *vo = json_object_get(o, "vmm_process");
	s->monitor_pid = (int)sbx_json_u64(mo, "pid");
	s->monitor_start = sbx_json_u64(mo, "start_time");
	s->vmm_pid = (int)sbx_json_u64(vo, "pid");
	s->vmm_start = sbx_json_u64(vo, "start_time");
	json_t *po = json_object_get(o, "proxy_process");
	s->proxy_pid = (int)sbx_json_u64(po, "pid");
	s->proxy_start = sbx_json_u64(po, "start_time");
	json_decref(o);
	return 0;
}

char *sbx_record_text(const struct sbx_session *s)
{
	char created[40];
	sbx_fmt_time(s->created_ns, created, sizeof created);
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:I, s:{s:s, s:s, s:s}, s:i, s:i, s:s, s:s, s:s, s:s,"
			      " s:{s:i, s:I}, s:{s:i, s:I}, s:I, s:I, s:s, s:s, s:I}",
			      "schema", SBX_RECORD_SCHEMA, "id", s->id, "state", s->state, "created", created,
			      "created_ns", (json_int_t)s->created_ns, "template", "name", s->tmpl_name, "version",
			      s->tmpl_version, "dir", s->tmpl_dir, "vcpus", (int)s->vcpus, "memory_mib",
			      (int)s->memory_mib, "accel", s->accel, "vmm", s->vmm, "spec", s->spec, "boot_id",
			      s->boot_id, "monitor", "pid", s->monitor_pid, "start_time", (json_int_t)s->monitor_start,
			      "vmm_process", "pid", s->vmm_pid, "start_time", (json_int_t)s->vmm_start, "ready_ns",
			      (json_int_t)s->ready_ns, "ended_ns", (json_int_t)s->ended_ns, "kernel", s->kernel,
			      "end_reason", s->end_reason, "boot_ms", (json_int_t)s->boot_ms);
	if (!o)
		return NULL;
	json_object_set_new(json_object_get(o, "template"), "owner",
			    json_string(s->tmpl_owner[0] ? s->tmpl_owner : SBX_TEMPLATE_OPERATOR));
	const struct sbx_limits *l = &s->limits;
	json_t *vols = json_array();
	for (unsigned i = 0; i < s->nvols; i++)
		json_array_append_new(vols, json_pack("{s:s, s:s, s:b}", "host", s->vols[i].host, "guest",
						      s->vols[i].guest, "ro", 1));
	json_object_set_new(o, "volumes", vols);
	if (s->tenant[0])
		json_object_set_new(o, "tenant", json_string(s->tenant));
	if (s->workspace[0])
		json_object_set_new(o, "workspace", json_string(s->workspace));
	if (s->pool)
		json_object_set_new(o, "pool", json_true());
	if (s->from_pool) {
		json_object_set_new(o, "from_pool", json_true());
		json_object_set_new(o, "claim_ms", json_integer((json_int_t)s->claim_ms));
	}
	if (s->cgroup[0])
		json_object_set_new(o, "cgroup", json_string(s->cgroup));
	if (s->snapshot[0])
		json_object_set_new(o, "snapshot",
				    json_pack("{s:s, s:s}", "ref", s->snapshot, "dir", s->snapshot_dir));
	if (s->cpu_ns || s->mem_peak) {
		json_object_set_new(o, "cpu_ns", json_integer((json_int_t)s->cpu_ns));
		json_object_set_new(o, "mem_peak", json_integer((json_int_t)s->mem_peak));
	}
	json_object_set_new(o, "limits",
			    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:i}", "ttl_ms", (json_int_t)l->ttl_ms,
				      "exec_timeout_default_ms", (json_int_t)l->exec_timeout_default_ms,
				      "exec_timeout_max_ms", (json_int_t)l->exec_timeout_max_ms, "output_cap",
				      (json_int_t)l->output_cap, "exec_memory", (json_int_t)l->exec_memory,
				      "disk_bytes", (json_int_t)l->disk_bytes, "pids_per_exec", (int)l->pids_per_exec,
				      "pids_per_session", (int)l->pids_per_session, "cpu_milli", (int)l->cpu_milli));
	json_object_set_new(json_object_get(o, "limits"), "workspace_size", json_integer((json_int_t)l->workspace_size));
	json_object_set_new(json_object_get(o, "limits"), "output_session_cap",
			    json_integer((json_int_t)l->output_session_cap));
	json_object_set_new(json_object_get(o, "limits"), "workspace_retention_ms",
			    json_integer((json_int_t)l->workspace_retention_ms));
	json_object_set_new(json_object_get(o, "limits"), "files", files_json(l));
	json_object_set_new(json_object_get(o, "limits"), "packages", packages_json(&l->packages));
	if (s->mac[0]) {
		json_object_set_new(o, "net", json_pack("{s:s, s:s, s:i, s:I, s:s}", "mac", s->mac, "egress",
							 l->egress ? "allowlist" : "none", "max_connections",
							 (int)l->max_connections, "max_bytes", (json_int_t)l->max_bytes,
							 "lost", s->net_lost));
		json_object_set_new(o, "proxy_process", json_pack("{s:i, s:I}", "pid", s->proxy_pid, "start_time",
								   (json_int_t)s->proxy_start));
	}
	if (s->agent_unresponsive_ns)
		json_object_set_new(o, "agent_unresponsive_ns", json_integer((json_int_t)s->agent_unresponsive_ns));
	json_t *lim = json_object_get(o, "limits");
	json_object_set_new(lim, "idle_pause_ms", json_integer((json_int_t)l->idle_pause_ms));
	json_object_set_new(lim, "idle_suspend_ms", json_integer((json_int_t)l->idle_suspend_ms));
	json_object_set_new(lim, "ttl_running", json_boolean(l->ttl_running));
	json_object_set_new(o, "lifecycle",
			    json_pack("{s:i, s:I, s:I, s:I, s:I}", "suspends", (int)s->suspends, "paused_ns",
				      (json_int_t)s->paused_ns, "suspended_ns", (json_int_t)s->suspended_ns,
				      "state_since_ns", (json_int_t)s->state_since_ns, "resume_ms",
				      (json_int_t)s->resume_ms));
	sbx_env_to_json(&s->env, o);
	if (s->workdir[0])
		json_object_set_new(o, "workdir", json_string(s->workdir));
	if (s->user[0])
		json_object_set_new(o, "user", json_string(s->user));
	char *txt = json_dumps(o, JSON_INDENT(2));
	json_decref(o);
	return txt;
}

int sbx_record_save(struct sbx_state *st, const struct sbx_session *s, struct sbx_err *err)
{
	_cleanup_close_ int dfd = openat(st->sessions_fd, s->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open session %s", s->id);
	char *txt = sbx_record_text(s);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot encode the record of %s", s->id);
	int rc = sbx_atomic_write_at(dfd, RECORD, txt, strlen(txt), 0600, err);
	free(txt);
	return rc;
}

int sbx_libexec_path(const char *name, char *buf, size_t n)
{
	const char *e = getenv("SBX_LIBEXEC");
	if (e && *e) {
		snprintf(buf, n, "%s/%s", e, name);
		return 0;
	}
	char self[PATH_MAX];
	ssize_t r = readlink("/proc/self/exe", self, sizeof self - 1);
	if (r <= 0)
		return -1;
	self[r] = 0;
	char *slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = 0;
	snprintf(buf, n, "%s/../libexec/sbx/%s", self, name);
	return 0;
}

unsigned sbx_boot_timeout_s(void)
{
	const char *e = getenv("SBX_BOOT_TIMEOUT");
	long v = e ? strtol(e, NULL, 10) : 0;
	return v > 0 && v <= 3600 ? (unsigned)v : 60;
}

const char *sbx_session_live_state(struct sbx_state *st, const struct sbx_session *s)
{
	int locked = sbx_session_locked(st, s->id);
	/* "suspended" too: its monitor holds the lock while the memory image
	 * waits on disk; one that died left nothing that could resume it. */
	if (!strcmp(s->state, "running") || !strcmp(s->state, "creating") || !strcmp(s->state, "pooled") ||
	    !strcmp(s->state, "paused") || !strcmp(s->state, "suspended"))
		return locked ? s->state : "crashed";
	return s->state;
}

int sbx_state_up(const char *live)
{
	return !strcmp(live, "running") || !strcmp(live, "paused");
}

int sbx_state_live(const char *live)
{
	return sbx_state_up(live) || !strcmp(live, "suspended");
}

void sbx_session_times(const struct sbx_session *s, uint64_t now_ns, double *running_s, double *paused_s,
		       double *suspended_s)
{
	uint64_t start = s->created_ns; /* boot time is running time */
	uint64_t end = s->ended_ns ? s->ended_ns : now_ns;
	uint64_t paused = s->paused_ns, suspended = s->suspended_ns;
	/* The current stretch, while it lasts. */
	if (!s->ended_ns && s->state_since_ns && s->state_since_ns < end) {
		if (!strcmp(s->state, "paused"))
			paused += end - s->state_since_ns;
		else if (!strcmp(s->state, "suspended"))
			suspended += end - s->state_since_ns;
	}
	uint64_t total = end > start ? end - start : 0;
	uint64_t off = paused + suspended > total ? total : paused + suspended;
	*running_s = (double)(total - off) / 1e9;
	*paused_s = (double)paused / 1e9;
	*suspended_s = (double)suspended / 1e9;
}

/* What this build cannot enforce yet is refused, never ignored: a policy
 * that asks for egress or package registries must not get a session that
 * silently lacks them (fail closed). */
static int policy_check(const struct sbx_policy *p, const struct sbx_accel_info *ai, struct sbx_err *err);

static int policy_supported(struct sbx_state *st, const struct sbx_policy *p, const struct sbx_accel_info *ai,
			    struct sbx_err *err)
{
	int rc = policy_check(p, ai, err);
	if (rc < 0) {
		json_t *f = json_pack("{s:s, s:s}", "policy", p->source[0] ? p->source : "(defaults)", "reason", err ? err->msg : "");
		sbx_audit_append(st, "policy.refused", f, NULL);
		json_decref(f);
	}
	return rc;
}

static int policy_check(const struct sbx_policy *p, const struct sbx_accel_info *ai, struct sbx_err *err)
{
	if (p->resources.require_kvm && ai->accel != SBX_ACCEL_KVM)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "the policy requires KVM (resources.require_kvm) but this host runs guests under TCG: %s",
				   ai->reason);
	char px[PATH_MAX];
	if (p->network.egress != SBX_EGRESS_NONE &&
	    (sbx_libexec_path("sbx-proxy", px, sizeof px) < 0 || access(px, X_OK) < 0))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "network.egress: allowlist needs the session proxy (libexec/sbx/sbx-proxy), "
				   "which is not installed (use egress: none)");
	/* The package cache runs in the session's proxy (pkgcache.h). */
	char proxy[PATH_MAX];
	if (p->packages.mode != SBX_PKG_OFFLINE &&
	    (sbx_libexec_path("sbx-proxy", proxy, sizeof proxy) < 0 || access(proxy, X_OK) < 0))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "packages.mode: allowlist needs the session proxy (libexec/sbx/sbx-proxy), "
				   "which is not installed (use mode: offline)");
	return 0;
}

/* The effective policy beside the record (policy.json, sbx_policy_json):
 * what the session was created under, and where its proxy reads the
 * network allowlist from. */
static int policy_save(struct sbx_state *st, const char *id, const struct sbx_policy *p, struct sbx_err *err)
{
	_cleanup_close_ int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	json_t *o = sbx_policy_json(p);
	_cleanup_free_ char *txt = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	json_decref(o);
	if (dfd < 0 || !txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, dfd < 0 ? errno : ENOMEM, "cannot write the policy of %s", id);
	return sbx_atomic_write_at(dfd, "policy.json", txt, strlen(txt), 0600, err);
}

static void limits_from_policy(const struct sbx_policy *p, struct sbx_limits *l)
{
	l->ttl_ms = p->resources.ttl_ms;
	l->exec_timeout_default_ms = p->resources.exec_timeout_default_ms;
	l->exec_timeout_max_ms = p->resources.exec_timeout_max_ms;
	l->output_cap = p->resources.output_cap;
	l->output_session_cap = p->resources.output_session_cap;
	l->exec_memory = p->resources.exec_memory;
	l->disk_bytes = p->resources.disk;
	l->pids_per_exec = p->resources.pids_per_exec;
	l->pids_per_session = p->resources.pids_per_session;
	l->cpu_milli = sbx_policy_cpu_limit_milli(p);
	const struct sbx_policy_paths *from[] = { &p->files.writable, &p->files.exportable };
	struct sbx_limit_paths *to[] = { &l->writable, &l->exportable };
	for (int k = 0; k < 2; k++) {
		to[k]->n = 0;
		for (unsigned i = 0; i < from[k]->n && i < SBX_LIMIT_PATHS_MAX; i++)
			snprintf(to[k]->path[to[k]->n++], SBX_LIMIT_PATH_LEN, "%s", from[k]->path[i]);
	}
	l->max_transfer = p->files.max_transfer;
	l->max_session_transfer = p->files.max_session_transfer;
	l->egress = p->network.egress == SBX_EGRESS_ALLOWLIST;
	l->max_connections = p->network.max_connections;
	l->max_bytes = p->network.max_bytes;
	l->workspace_size = p->workspace.size;
	l->workspace_retention_ms = p->workspace.retention_ms;
	l->idle_pause_ms = p->lifecycle.idle_pause_ms;
	l->idle_suspend_ms = p->lifecycle.idle_suspend_ms;
	l->ttl_running = p->lifecycle.ttl_counts == SBX_TTL_RUNNING;
	struct sbx_limit_packages *k = &l->packages;
	memset(k, 0, sizeof *k);
	k->mode = p->packages.mode;
	/* The name the guest shows in refusals ("packages.mode: offline in
	 * policy NAME"): the file's base name, held to a plain character set
	 * because it travels on the guest's kernel command line. */
	const char *base = strrchr(p->source, '/');
	base = base ? base + 1 : p->source;
	snprintf(k->policy, sizeof k->policy, "%s", *base ? base : "defaults");
	for (char *c = k->policy; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		      strchr("._-", *c)))
			*c = '_';
	for (unsigned i = 0; i < p->packages.nregistries && i < SBX_ARRAY_LEN(k->reg); i++) {
		k->reg[i].type = p->packages.registries[i].type;
		snprintf(k->reg[i].url, sizeof k->reg[i].url, "%s", p->packages.registries[i].url);
		k->nreg++;
	}
	k->max_download = p->packages.max_download;
	k->require_hashes = p->packages.require_hashes;
}

/* -v HOSTDIR:GUESTPATH[:ro]: only read-only volumes exist (a session never
 * writes to the host).  The host directory obeys hostpath.h (a tenant's
 * only beneath host_paths.read, nobody's in sbx's own state); the record
 * keeps its real path, which the monitor opens again without following a
 * link (disk.c).  The guest path goes on the kernel command line, so it is
 * held to a plain character set. */
static int parse_volume(const char *spec, const char *tenant, struct sbx_volume *v, struct sbx_err *err)
{
	char buf[700];
	snprintf(buf, sizeof buf, "%s", spec);
	char *host = buf, *guest = strchr(buf, ':'), *mode = NULL;
	if (!guest)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "-v %s: expected HOSTDIR:GUESTPATH[:ro]", spec);
	*guest++ = 0;
	if ((mode = strchr(guest, ':')))
		*mode++ = 0;
	if (mode && strcmp(mode, "ro"))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "-v %s: only read-only (:ro) volumes are supported", spec);
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 };
	if (sbx_hostpath_resolve(tenant, host, SBX_HOSTPATH_READ | SBX_HOSTPATH_FOLLOW, "-v", &hp, err) < 0) {
		if (err && err->code == SBX_EXIT_NOENT)
			err->code = SBX_EXIT_INVALID;
		return -1;
	}
	if (!S_ISDIR(hp.st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, ENOTDIR, "-v %s: %s is not a directory", spec, host);
	const char *real = hp.real;
	size_t gl = strlen(guest);
	if (guest[0] != '/' || gl < 2 || gl >= sizeof v->guest || strspn(guest, "abcdefghijklmnopqrstuvwxyz"
						  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") != gl ||
	    strstr(guest, "//") || strstr(guest, "/./") || strstr(guest, "/..") || guest[gl - 1] == '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "-v %s: the guest path must be absolute, normalized, of [A-Za-z0-9._-/]", spec);
	static const char *const reserved[] = { "/proc", "/sys", "/dev", "/run", "/tmp", "/workspace" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(reserved); i++) {
		size_t rl = strlen(reserved[i]);
		if (!strncmp(guest, reserved[i], rl) && (guest[rl] == 0 || guest[rl] == '/'))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "-v %s: cannot mount over %s", spec, reserved[i]);
	}
	if (strlen(real) >= sizeof v->host || strchr(real, ','))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "-v %s: unsupported host path", spec);
	snprintf(v->host, sizeof v->host, "%s", real);
	snprintf(v->guest, sizeof v->guest, "%s", guest);
	return 0;
}

static void spec_hash(const struct sbx_session *s, const struct sbx_policy *p, char out[65])
{
	char txt[512];
	/* The template as asked for ("default", not the version it resolved
	 * to), so repeating a create after a template upgrade is still the
	 * same request. */
	int tl = snprintf(txt, sizeof txt, "v1\ntemplate=%s\nvcpus=%u\nmemory_mib=%u\ntenant=%s\n", s->tmpl_req,
			  s->vcpus, s->memory_mib, s->tenant);
	/* Only when asked for, so specs without one hash as before. */
	if (s->workspace[0] && tl > 0 && (size_t)tl < sizeof txt)
		snprintf(txt + tl, sizeof txt - (size_t)tl, "workspace=%s\n", s->workspace);
	SHA2_CTX c;
	uint8_t d[SHA256_DIGEST_LENGTH];
	SHA256Init(&c);
	SHA256Update(&c, (const uint8_t *)txt, strlen(txt));
	/* The environment too, when there is one (so specs without one hash
	 * as before): the same --id with another environment is a conflict. */
	if (s->env.n || s->workdir[0] || s->user[0]) {
		SHA256Update(&c, (const uint8_t *)"env\n", 4);
		SHA256Update(&c, (const uint8_t *)s->env.buf, s->env.len);
		SHA256Update(&c, (const uint8_t *)&s->env.secret, sizeof s->env.secret);
		SHA256Update(&c, (const uint8_t *)s->workdir, strlen(s->workdir) + 1);
		SHA256Update(&c, (const uint8_t *)s->user, strlen(s->user) + 1);
	}
	for (unsigned i = 0; i < s->nvols; i++) {
		SHA256Update(&c, (const uint8_t *)s->vols[i].host, strlen(s->vols[i].host) + 1);
		SHA256Update(&c, (const uint8_t *)s->vols[i].guest, strlen(s->vols[i].guest) + 1);
	}
	/* The policy's content, not its file name: the same rules from another
	 * path are the same request. */
	json_t *pj = sbx_policy_json(p);
	if (pj)
		json_object_del(pj, "source");
	char *ptxt = pj ? json_dumps(pj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (ptxt)
		SHA256Update(&c, (const uint8_t *)ptxt, strlen(ptxt));
	free(ptxt);
	json_decref(pj);
	SHA256Final(d, &c);
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Start sbx-monitor detached (setsid, double fork) with the held session
 * lock, the write end of the readiness pipe and, with secrets, the read end
 * of the socket they come through (never argv, environment or a file). */
static int spawn_monitor(const char *id, int lock_fd, int ready_w, int secrets_r, const struct sbx_policy *pol,
			 struct sbx_err *err)
{
	char path[PATH_MAX];
	if (sbx_libexec_path("sbx-monitor", path, sizeof path) < 0 || access(path, X_OK) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot find sbx-monitor (looked at %s)", path);
	pid_t pid = fork();
	if (pid < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork");
	if (pid == 0) {
		setsid();
		pid_t p2 = fork();
		if (p2 != 0)
			_exit(p2 < 0 ? 1 : 0);
		char lfd[16], rfd[16];
		snprintf(lfd, sizeof lfd, "%d", lock_fd);
		snprintf(rfd, sizeof rfd, "%d", ready_w);
		int fl = fcntl(lock_fd, F_GETFD);
		fcntl(lock_fd, F_SETFD, fl & ~FD_CLOEXEC);
		fl = fcntl(ready_w, F_GETFD);
		fcntl(ready_w, F_SETFD, fl & ~FD_CLOEXEC);
		char sfd[16];
		snprintf(sfd, sizeof sfd, "%d", secrets_r);
		if (secrets_r >= 0)
			fcntl(secrets_r, F_SETFD, fcntl(secrets_r, F_GETFD) & ~FD_CLOEXEC);
		int devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		/* The values came over the socket; the variables they were read
		 * from do not follow into the monitor's (or its VMM's) environ. */
		for (unsigned i = 0; i < pol->nsecrets; i++)
			if (pol->secrets[i].from_env[0])
				unsetenv(pol->secrets[i].from_env);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (secrets_r >= 0)
			execl(path, "sbx-monitor", "--id", id, "--lock-fd", lfd, "--ready-fd", rfd, "--secrets-fd", sfd,
			      (char *)NULL);
		else
			execl(path, "sbx-monitor", "--id", id, "--lock-fd", lfd, "--ready-fd", rfd, (char *)NULL);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot start sbx-monitor");
	return 0;
}

/* The secrets frame to the monitor, which reads it before anything else.
 * A monitor that died first is no error here: await_ready reports why. */
static void send_secrets(int fd, const struct sbx_secrets *sec)
{
	struct timeval tv = { .tv_sec = 30 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	size_t off = 0;
	while (off < sec->frame_len) {
		ssize_t w = send(fd, sec->frame + off, sec->frame_len - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

/* Read the monitor's one-line verdict.  EOF without one means it died.
 * Before it, a restore's monitor may send progress lines
 * ({"progress":{"what","done","total"}}), drawn on progress_fd. */
static int await_ready(int fd, unsigned timeout_s, int progress_fd, struct sbx_err *err)
{
	char buf[2048];
	size_t got = 0;
	struct sbx_progress pr;
	int shown = 0;
	json_t *o = NULL;
	uint64_t deadline = sbx_mono_ns() + (uint64_t)timeout_s * 1000000000u;
	for (;;) {
		char *nl = memchr(buf, '\n', got);
		if (nl || got == sizeof buf - 1) {
			size_t len = nl ? (size_t)(nl - buf) + 1 : got;
			o = json_loadb(buf, len, 0, NULL);
			memmove(buf, buf + len, got - len);
			got -= len;
			json_t *p = json_object_get(o, "progress");
			if (!p)
				break;
			uint64_t done = (uint64_t)json_integer_value(json_object_get(p, "done"));
			if (!shown)
				sbx_progress_begin(&pr, progress_fd, json_string_value(json_object_get(p, "what")),
						   (uint64_t)json_integer_value(json_object_get(p, "total")));
			shown = 1;
			sbx_progress_update(&pr, done);
			json_decref(o);
			o = NULL;
			continue;
		}
		uint64_t now = sbx_mono_ns();
		if (now >= deadline) {
			if (shown)
				sbx_progress_end(&pr, 0);
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the session did not become ready within %u s",
					   timeout_s);
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR) {
			if (shown)
				sbx_progress_end(&pr, 0);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot wait for the session");
		}
		if (r <= 0)
			continue;
		ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			o = got ? json_loadb(buf, got, 0, NULL) : NULL;
			break;
		}
		got += (size_t)n;
	}
	int ok = json_is_true(json_object_get(o, "ok"));
	if (shown)
		sbx_progress_end(&pr, ok);
	if (!o)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "sbx-monitor died before the session was ready");
	if (!ok) {
		int code = (int)json_integer_value(json_object_get(o, "code"));
		const char *msg = json_string_value(json_object_get(o, "message"));
		sbx_err_set(err, code > 0 ? code : SBX_EXIT_INTERNAL, 0, "%s", msg ? msg : "the session failed");
	}
	json_decref(o);
	return ok ? 0 : -1;
}

int sbx_session_reclaim(struct sbx_state *st, const char *id)
{
	struct sbx_session s;
	if (sbx_record_load(st, id, &s, NULL) == 0) {
		/* Only a process whose start time matches is ours: pids are
		 * reused.  The VMM, and the egress proxy (not in its cgroups). */
		int pids[] = { s.vmm_pid, s.proxy_pid };
		uint64_t starts[] = { s.vmm_start, s.proxy_start };
		for (int i = 0; i < 2; i++) {
			int pfd = pids[i] > 0 ? (int)syscall(SYS_pidfd_open, pids[i], 0) : -1;
			if (pfd >= 0) {
				if (starts[i] && sbx_proc_start_time(pids[i]) == starts[i])
					syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
				close(pfd);
			}
		}
	}
	/* Whatever is still in the session's cgroups (a VMM whose record is
	 * gone or corrupt) is ours too; a claimed pool member's may keep its
	 * old name (s.cgroup, "" when the record is unreadable). */
	sbx_cgroup_kill(id);
	if (s.cgroup[0])
		sbx_cgroup_kill(s.cgroup);
	int rc = sbx_rm_rf_at(st->sessions_fd, id);
	if (sbx_rm_rf_at(st->rsessions_fd, id) < 0)
		rc = -1;
	/* The VMM may take a moment to leave its cgroup after SIGKILL. */
	for (int i = 0; i < 50 && (sbx_cgroup_remove(id) < 0 || (s.cgroup[0] && sbx_cgroup_remove(s.cgroup) < 0)); i++)
		usleep(20000);
	return rc;
}

/* The template manifest's defaults (env, workdir, user), checked as the
 * caller's own input is: a tenant may publish templates. */
static int manifest_env(const struct sbx_template *t, struct sbx_session *s, struct sbx_err *err)
{
	_cleanup_close_ int dfd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *txt = dfd < 0 ? NULL : sbx_read_small_at(dfd, "manifest.json", 1 << 20, NULL);
	json_t *m = txt ? json_loads(txt, 0, NULL) : NULL;
	if (!m)
		return 0; /* no manifest: resolve and the launch say so */
	char key[200];
	snprintf(key, sizeof key, "template %s@%s: manifest", t->ref, t->version);
	json_t *env = json_object_get(m, "env"), *w = json_object_get(m, "workdir"), *u = json_object_get(m, "user");
	const char *k;
	json_t *v;
	int rc = 0;
	/* sbx-template writes "" for a workdir or user the spec left out. */
	if (json_is_string(w) && !*json_string_value(w))
		w = NULL;
	if (json_is_string(u) && !*json_string_value(u))
		u = NULL;
	if (env && !json_is_object(env))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: env is not an object", key);
	json_object_foreach(env, k, v) {
		char kv[SBX_ENV_KEY_MAX + SBX_ENV_VALUE_MAX + 2];
		if (rc < 0)
			break;
		if (!json_is_string(v) || strchr(k, '=') || strlen(k) > SBX_ENV_KEY_MAX ||
		    json_string_length(v) > SBX_ENV_VALUE_MAX) {
			rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: env: '%.64s' is not NAME: \"VALUE\"", key, k);
			break;
		}
		snprintf(kv, sizeof kv, "%s=%s", k, json_string_value(v));
		rc = sbx_env_set(&s->env, kv, 0, key, err);
	}
	if (rc == 0 && w && (!json_is_string(w) || sbx_workdir_check(json_string_value(w), key, err) < 0))
		rc = json_is_string(w) ? -1 : sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: workdir is not a string", key);
	else if (rc == 0 && w)
		snprintf(s->workdir, sizeof s->workdir, "%s", json_string_value(w));
	uint32_t uid;
	if (rc == 0 && u && (!json_is_string(u) || sbx_user_parse(json_string_value(u), &uid) < 0))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: user must be root, user or a uid 0..65534", key);
	else if (rc == 0 && u)
		snprintf(s->user, sizeof s->user, "%s", json_string_value(u));
	json_decref(m);
	return rc;
}

/* The session's environment: the template's beneath the caller's, and
 * values that are secrets bound to them (env.h).  Before anything exists. */
static int session_env(const struct sbx_template *t, const struct sbx_create_opts *o, const struct sbx_secrets *sec,
		       struct sbx_session *s, struct sbx_err *err)
{
	memset(&s->env, 0, sizeof s->env);
	s->workdir[0] = s->user[0] = 0;
	if (manifest_env(t, s, err) < 0)
		return -1;
	for (unsigned i = 0; i < o->nenv_files; i++)
		if (sbx_env_file_load(&s->env, o->env_files[i], o->tenant, err) < 0)
			return -1;
	for (unsigned i = 0; i < o->nenv; i++) {
		const char *kv = o->env[i];
		_cleanup_free_ char *copy = NULL;
		if (!strchr(kv, '=')) { /* -e NAME: the caller's own, as sbx-exec -e */
			const char *v = getenv(kv);
			if (!v)
				continue;
			if (asprintf(&copy, "%s=%s", kv, v) < 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
			kv = copy;
		}
		if (sbx_env_set(&s->env, kv, 0, "-e", err) < 0)
			return -1;
	}
	if (o->workdir) {
		if (sbx_workdir_check(o->workdir, "-w", err) < 0)
			return -1;
		snprintf(s->workdir, sizeof s->workdir, "%s", o->workdir);
	}
	return sbx_env_bind_secrets(&s->env, sec, err);
}

int sbx_session_create(struct sbx_state *st, const struct sbx_create_opts *o, struct sbx_session *s,
		       int *existed, struct sbx_err *err)
{
	struct sbx_template t;
	struct sbx_accel_info ai;
	char id[SBX_ID_MAX + 1];

	*existed = 0;
	if (o->id && sbx_id_check(o->id, "session", err) < 0)
		return -1;
	if (o->id && sbx_pool_member_id(o->id))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid session ID '%s': IDs starting with '" SBX_POOL_PREFIX "' are the warm pool's", o->id);
	if (o->tenant && sbx_tenant_check(o->tenant, err) < 0)
		return -1;
	if (o->workspace && sbx_workspace_check(o->workspace, err) < 0)
		return -1;
	/* From a snapshot (-s, or a template that holds one): restored, not
	 * booted (snapshot.h). */
	struct sbx_snapshot snap;
	int restore = 0;
	if (o->snapshot) {
		if (o->tmpl)
			return sbx_err_set(err, SBX_EXIT_USAGE, 0, "-s and -t cannot be used together");
		if (sbx_snapshot_find(st, o->tenant, o->snapshot, &snap, err) < 0 ||
		    sbx_snapshot_template(st, &snap, &t, err) < 0)
			return -1;
		/* Its template is the operator's or the tenant's own, as sbx
		 * wrote it; anything else is not there for this tenant. */
		if (o->tenant && t.owner[0] && strcmp(t.owner, o->tenant))
			return sbx_err_set(err, SBX_EXIT_NOENT, 0, "snapshot %s: its template %s is gone", snap.ref, t.ref);
		restore = 1;
	} else if (sbx_template_resolve(st, o->tenant, o->tmpl ? o->tmpl : "default", &t, err) < 0) {
		return -1;
	} else if (t.snapshot) {
		if (sbx_snapshot_of_template(&t, &snap, err) < 0)
			return -1;
		restore = 1;
	}
	if (sbx_accel_get(st, t.kernel, t.initrd, &ai, err) < 0)
		return -1;
	struct sbx_policy defaults;
	const struct sbx_policy *pol = o->policy;
	if (!pol) {
		sbx_policy_defaults(&defaults);
		pol = &defaults;
	}
	const struct sbx_vmm_ops *vmm;
	int needs_nic = pol->network.egress != SBX_EGRESS_NONE || pol->packages.mode != SBX_PKG_OFFLINE;
	if (sbx_vmm_choose(ai.accel, needs_nic, &vmm, err) < 0)
		return -1;
	if (policy_supported(st, pol, &ai, err) < 0)
		return -1;
	/* Read before anything exists: a secret that cannot be read fails the
	 * create with nothing to clean up. */
	_cleanup_secrets_ struct sbx_secrets sec = { 0 };
	if (sbx_secrets_load(pol, o->tenant, &sec, err) < 0)
		return -1;

	memset(s, 0, sizeof *s);
	snprintf(s->state, sizeof s->state, "creating");
	snprintf(s->tmpl_name, sizeof s->tmpl_name, "%s", t.ref);
	snprintf(s->tmpl_owner, sizeof s->tmpl_owner, "%s", t.owner);
	snprintf(s->tmpl_version, sizeof s->tmpl_version, "%s", t.version);
	snprintf(s->tmpl_dir, sizeof s->tmpl_dir, "%s", t.dir);
	snprintf(s->tmpl_req, sizeof s->tmpl_req, "%s", o->tmpl ? o->tmpl : "default");
	snprintf(s->tenant, sizeof s->tenant, "%s", o->tenant ? o->tenant : "");
	s->vcpus = o->vcpus ? o->vcpus : 1;
	s->memory_mib = o->memory_mib ? o->memory_mib : 256;
	snprintf(s->accel, sizeof s->accel, "%s", ai.accel == SBX_ACCEL_KVM ? "kvm" : "tcg");
	snprintf(s->vmm, sizeof s->vmm, "%s", vmm->name);
	sbx_boot_id(s->boot_id, sizeof s->boot_id);
	s->created_ns = sbx_now_ns();
	if (o->nvols > 8)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "at most 8 volumes");
	if (o->workspace && o->nvols > 7)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "at most 7 volumes with a workspace");
	snprintf(s->workspace, sizeof s->workspace, "%s", o->workspace ? o->workspace : "");
	for (unsigned i = 0; i < o->nvols; i++)
		if (parse_volume(o->vols[i], o->tenant, &s->vols[s->nvols++], err) < 0)
			return -1;
	limits_from_policy(pol, &s->limits);
	/* A NIC for egress and for the package cache, both in the proxy. */
	if (pol->network.egress == SBX_EGRESS_ALLOWLIST || pol->packages.mode == SBX_PKG_ALLOWLIST)
		sbx_netns_mac_new(s->mac);
	if (o->pool) {
		s->pool = 1;
		s->limits.ttl_ms = 0; /* a claim gives it the TTL of its session */
	}
	if (restore && sbx_snapshot_apply(&snap, o, pol, s, err) < 0)
		return -1;
	if (session_env(&t, o, &sec, s, err) < 0)
		return -1;
	spec_hash(s, pol, s->spec);

	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	if (o->id) {
		snprintf(id, sizeof id, "%s", o->id);
	} else {
		do
			(o->pool ? sbx_pool_id_new : sbx_id_new)(id, sizeof id);
		while (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0);
	}
	snprintf(s->id, sizeof s->id, "%s", id);
	snprintf(err ? err->session : (char[1]){ 0 }, err ? sizeof err->session : 1, "%s", id);
	if (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		struct sbx_session old;
		if (sbx_record_load(st, id, &old, err) < 0) {
			if (err && err->code == SBX_EXIT_NOENT)
				return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is being destroyed", id);
			return -1;
		}
		const char *live = sbx_session_live_state(st, &old);
		if (strcmp(old.spec, s->spec))
			return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "session %s exists with another spec", id);
		if (!strcmp(live, "creating"))
			return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is still being created", id);
		if (strcmp(live, "running"))
			return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "session %s exists but is %s; destroy it with sbx-kill",
					   id, live);
		*s = old;
		*existed = 1;
		return 0;
	}
	/* A warm-pool member that fits serves the request (pool.h); when none
	 * does, or its claim fails, the session boots cold as ever. */
	if (!o->pool && !o->snapshot && sbx_pool_request_fits(o, pol)) {
		int used, r = sbx_pool_claim(st, &g, s, pol, &sec, &used, err);
		if (used)
			sbx_pool_refill(pol);
		if (r != 0)
			return r < 0 ? -1 : 0;
	}
	/* A workspace a live session holds: refused before anything exists.
	 * The monitor takes it for real (and fails the create cleanly if
	 * another one got there first). */
	if ((s->workspace[0] && sbx_workspace_probe(st, s->tenant, s->workspace, err) < 0) ||
	    sbx_capacity_admit(st, s->tenant, s->vcpus, s->memory_mib, err) < 0 ||
	    (s->workspace[0] &&
	     sbx_capacity_admit_workspace(st, s->tenant, s->workspace, s->limits.workspace_size, err) < 0)) {
		if (!o->id && err)
			err->session[0] = 0; /* the generated ID never existed */
		return -1;
	}
	/* sbx-snapshot rm takes the global lock too: from here on it sees
	 * the record that names the snapshot, or we see it gone. */
	if (restore && sbx_snapshot_present(&snap, err) < 0)
		return -1;
	/* sbx-snapshot template rm takes it too: the template is still there,
	 * or we are refused before anything exists. */
	char tm[700];
	snprintf(tm, sizeof tm, "%s/manifest.json", t.dir);
	if (access(tm, F_OK) < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "template %s@%s was removed meanwhile", t.ref, t.version);
	/* Record intent first: every resource is named by the ID, so a create
	 * killed at any point leaves only what sbx-kill/sbx-gc can reclaim. */
	if (mkdirat(st->sessions_fd, id, 0700) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the session directory");
	if (sbx_record_save(st, s, err) < 0 || policy_save(st, id, pol, err) < 0) {
		sbx_rm_rf_at(st->sessions_fd, id);
		return -1;
	}
	_cleanup_close_ int lock = sbx_lock_session(st, id, 1, 1, err);
	if (lock < 0) {
		sbx_session_reclaim(st, id);
		return lock == -2 ? sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is locked", id) : -1;
	}
	close(g);
	g = -1;

	int p[2], sp[2] = { -1, -1 };
	if (pipe2(p, O_CLOEXEC) < 0) {
		sbx_session_reclaim(st, id);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a pipe");
	}
	if (sec.n && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
		close(p[0]);
		close(p[1]);
		sbx_session_reclaim(st, id);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a socket pair");
	}
	if (spawn_monitor(id, lock, p[1], sp[1], pol, err) < 0) {
		close(p[0]);
		close(p[1]);
		if (sec.n) {
			close(sp[0]);
			close(sp[1]);
		}
		sbx_session_reclaim(st, id);
		return -1;
	}
	close(p[1]);
	if (sec.n) {
		close(sp[1]);
		send_secrets(sp[0], &sec);
		close(sp[0]);
	}
	/* The monitor enforces the boot deadline; this one only guards
	 * against a monitor that hangs, so it is longer. */
	int rc = await_ready(p[0], sbx_boot_timeout_s() + 30, o->progress_fd > 0 ? o->progress_fd : -1, err);
	close(p[0]);
	if (rc < 0) {
		/* The monitor cleans up after itself; if it died instead, its
		 * lock is free and we reclaim what it left. */
		close(lock);
		lock = sbx_lock_session(st, id, 0, 0, NULL);
		if (lock >= 0)
			sbx_session_reclaim(st, id);
		return -1;
	}
	return sbx_record_load(st, id, s, err);
}

static int monitor_connect(struct sbx_state *st, const char *id)
{
	_cleanup_close_ int dfd = openat(st->rsessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return -1;
	/* sun_path is 108 bytes; /proc/self/fd keeps it short whatever SBX_ROOT is. */
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/monitor.sock", dfd);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int sbx_monitor_connect(struct sbx_state *st, const char *id, struct sbx_err *err)
{
	if (sbx_session_visible(st, id, err) < 0)
		return -1;
	int fd = monitor_connect(st, id);
	if (fd >= 0)
		return fd;
	struct sbx_session s;
	if (sbx_record_load(st, id, &s, err) < 0)
		return -1;
	const char *live = sbx_session_live_state(st, &s);
	snprintf(err->session, sizeof err->session, "%s", id);
	if (sbx_state_up(live))
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, errno, "cannot reach the monitor of session %s", id);
	return sbx_err_set(err, SBX_EXIT_NOENT, 0, "session %s is not running (%s%s%s)", id, live,
			   s.end_reason[0] ? ": " : "", s.end_reason);
}

/* Kill a monitor that holds its session's lock but does not answer: pid
 * checked against its recorded start time, signalled through a pidfd. */
static void kill_monitor(struct sbx_state *st, const char *id, int sig)
{
	struct sbx_session s;
	if (sbx_record_load(st, id, &s, NULL) < 0 || s.monitor_pid <= 0 ||
	    sbx_proc_start_time(s.monitor_pid) != s.monitor_start)
		return;
	int pfd = (int)syscall(SYS_pidfd_open, s.monitor_pid, 0);
	if (pfd >= 0) {
		syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0);
		close(pfd);
	}
}

/* Wait (bounded) until nobody holds the session's lock. */
static int wait_unlocked(struct sbx_state *st, const char *id, int seconds)
{
	int lock = -2;
	for (int i = 0; i < seconds * 20 && (lock = sbx_lock_session(st, id, 1, 0, NULL)) == -2; i++)
		usleep(50000);
	if (lock >= 0)
		close(lock);
	return lock == -2 ? -1 : 0;
}

int sbx_session_destroy(struct sbx_state *st, const char *id, int *gone, struct sbx_err *err)
{
	*gone = 0;
	/* For a tenant, another's session, like a missing one, is 4: a kill
	 * that says "gone" would tell them apart no better, and a tenant
	 * learns nothing either way. */
	if (sbx_session_visible(st, id, err) < 0)
		return -1;
	if (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
	    faccessat(st->rsessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
		*gone = 1;
		return 0;
	}
	int fd = monitor_connect(st, id), asked = 0;
	if (fd >= 0) {
		/* Ask the monitor: it kills the VM, ends the execs and removes
		 * the session, then acknowledges (or just goes). */
		uint8_t h[SBX_FRAME_HDR], ack[64];
		sbx_frame_hdr_put(h, SBX_F_SHUTDOWN, 0, 0);
		asked = send(fd, h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t deadline = sbx_mono_ns() + 30ull * 1000000000u;
		while (asked && sbx_mono_ns() < deadline) {
			if (poll(&p, 1, 1000) <= 0)
				continue;
			if (read(fd, ack, sizeof ack) <= 0)
				break;
		}
		close(fd);
	}
	/* A monitor not listening yet (still setting up) is asked with
	 * SIGTERM, which it handles like a kill request; one that holds the
	 * lock and ignores even that is killed: sbx-kill must always finish. */
	if (!asked && wait_unlocked(st, id, 1) < 0) {
		kill_monitor(st, id, SIGTERM);
		asked = 1;
	}
	if (wait_unlocked(st, id, 30) < 0) {
		kill_monitor(st, id, SIGKILL);
		wait_unlocked(st, id, 5);
	}
	/* The last look, and whatever is left (a monitor killed -9, a crashed
	 * VM, a create that died midway), under the global lock then the
	 * session's, as sbx-create takes them: a create of the same ID that
	 * started meanwhile is never mistaken for a leftover. */
	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	int lock = sbx_lock_session(st, id, 1, 0, NULL);
	if (lock == -2) {
		/* Held again: a new session under this ID was created after the
		 * one we asked to go.  Ours is gone; that one is not ours. */
		if (asked)
			return 0;
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is busy", id);
	}
	if (lock < 0 && faccessat(st->rsessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot lock session %s", id);
	struct sbx_session old;
	int had = faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
		  sbx_record_load(st, id, &old, NULL) == 0;
	int rc = sbx_session_reclaim(st, id);
	if (had && !asked) {
		/* The monitor records its own destroys; this is one it could not
		 * do (it was gone). */
		json_t *f = json_pack("{s:s, s:s, s:s, s:s}", "session", id, "reason", "sbx-kill", "state", old.state,
				      "cleanup", rc < 0 ? "incomplete" : "complete");
		if (f && old.tenant[0])
			json_object_set_new(f, "tenant", json_string(old.tenant));
		sbx_audit_append(st, "session.destroy", f, NULL);
		json_decref(f);
	}
	if (lock >= 0)
		close(lock);
	if (rc < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove all of session %s", id);
	return 0;
}


int sbx_session_list(struct sbx_state *st, char ***ids, size_t *n, struct sbx_err *err)
{
	DIR *d = fdopendir(dup(st->sessions_fd));
	*ids = NULL;
	*n = 0;
	if (!d)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list sessions");
	rewinddir(d);
	if (sbx_dir_ids(d, 0, ids, n) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list sessions");
	return 0;
}
