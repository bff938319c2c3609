/* The session record (session.h): session.json parsed, written (atomically) and loaded, the sessions listed, and their
 * live state (the monitor's socket is monclient.c's). */
#include "session.h"
#include "policy.h" /* the package policy a record carries */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <jansson.h>
#include <sha2.h>

#define RECORD SBX_RECORD_FILE

#define L(f) offsetof(struct sbx_limits, f)
#define P(f) offsetof(struct sbx_policy, f)
const struct sbx_limit_field sbx_limit_fields[] = {
	{ "ttl_ms", SBX_LIMIT_U64, L(ttl_ms), 0, P(resources.ttl_ms) },
	{ "exec_timeout_default_ms", SBX_LIMIT_U64, L(exec_timeout_default_ms), 0,
	  P(resources.exec_timeout_default_ms) },
	{ "exec_timeout_max_ms", SBX_LIMIT_U64, L(exec_timeout_max_ms), 0, P(resources.exec_timeout_max_ms) },
	{ "output_cap", SBX_LIMIT_U64, L(output_cap), 0, P(resources.output_cap) },
	{ "output_session_cap", SBX_LIMIT_U64, L(output_session_cap), SBX_OUTPUT_SESSION_CAP_DEFAULT,
	  P(resources.output_session_cap) },
	{ "exec_memory", SBX_LIMIT_U64, L(exec_memory), 0, P(resources.exec_memory) },
	{ "disk_bytes", SBX_LIMIT_U64, L(disk_bytes), 0, P(resources.disk) },
	{ "pids_per_exec", SBX_LIMIT_UINT, L(pids_per_exec), 0, P(resources.pids_per_exec) },
	{ "pids_per_session", SBX_LIMIT_UINT, L(pids_per_session), 0, P(resources.pids_per_session) },
	{ "cpu_milli", SBX_LIMIT_UINT, L(cpu_milli), 0, SBX_LIMIT_DERIVED },
	{ "workspace_size", SBX_LIMIT_U64, L(workspace_size), 0, P(workspace.size) },
	{ "workspace_retention_ms", SBX_LIMIT_U64, L(workspace_retention_ms), 0, P(workspace.retention_ms) },
	{ "disk_bps", SBX_LIMIT_U64, L(disk_bps), 0, P(resources.disk_bps) },
	{ "disk_iops", SBX_LIMIT_UINT, L(disk_iops), 0, P(resources.disk_iops) },
	{ "net_rate", SBX_LIMIT_U64, L(net_rate), 0, P(network.rate) },
	{ "idle_pause_ms", SBX_LIMIT_U64, L(idle_pause_ms), 0, P(lifecycle.idle_pause_ms) },
	{ "idle_suspend_ms", SBX_LIMIT_U64, L(idle_suspend_ms), 0, P(lifecycle.idle_suspend_ms) },
	{ "ttl_running", SBX_LIMIT_BOOL, L(ttl_running), 0, SBX_LIMIT_DERIVED },
	{ "ttl_suspend", SBX_LIMIT_BOOL, L(ttl_suspend), 0, SBX_LIMIT_DERIVED },
};
const size_t sbx_limit_nfields = SBX_ARRAY_LEN(sbx_limit_fields);
#undef L
#undef P

/* The value of a field of a limits or a policy struct, as u64. */
static uint64_t field_get(const void *base, size_t off, enum sbx_limit_type t)
{
	const char *b = base;
	switch (t) {
	case SBX_LIMIT_U64: {
		uint64_t v;
		memcpy(&v, b + off, sizeof v);
		return v;
	}
	case SBX_LIMIT_UINT: {
		unsigned v;
		memcpy(&v, b + off, sizeof v);
		return v;
	}
	default: {
		int v;
		memcpy(&v, b + off, sizeof v);
		return v != 0;
	}
	}
}

static void field_set(void *base, size_t off, enum sbx_limit_type t, uint64_t v)
{
	char *b = base;
	if (t == SBX_LIMIT_U64) {
		memcpy(b + off, &v, sizeof v);
	} else if (t == SBX_LIMIT_UINT) {
		unsigned u = (unsigned)v;
		memcpy(b + off, &u, sizeof u);
	} else {
		int i = v != 0;
		memcpy(b + off, &i, sizeof i);
	}
}

void sbx_limits_compile(const struct sbx_policy *p, struct sbx_limits *l)
{
	for (size_t i = 0; i < sbx_limit_nfields; i++) {
		const struct sbx_limit_field *f = &sbx_limit_fields[i];
		/* the policy's fields are u64 but the pids caps (unsigned) */
		if (f->policy_off != SBX_LIMIT_DERIVED)
			field_set(l, f->off, f->type, field_get(p, f->policy_off, f->type));
	}
}

static void limits_read(json_t *lo, struct sbx_limits *l)
{
	for (size_t i = 0; i < sbx_limit_nfields; i++) {
		const struct sbx_limit_field *f = &sbx_limit_fields[i];
		json_t *v = json_object_get(lo, f->key);
		uint64_t x = !v ? f->absent : f->type == SBX_LIMIT_BOOL ? json_is_true(v) : sbx_json_u64(lo, f->key);
		field_set(l, f->off, f->type, x);
	}
}

static json_t *limits_json(const struct sbx_limits *l)
{
	json_t *o = json_object();
	for (size_t i = 0; o && i < sbx_limit_nfields; i++) {
		const struct sbx_limit_field *f = &sbx_limit_fields[i];
		uint64_t v = field_get(l, f->off, f->type);
		json_object_set_new(o, f->key,
				    f->type == SBX_LIMIT_BOOL ? json_boolean(v) : json_integer((json_int_t)v));
	}
	return o;
}

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
		json_array_foreach (a, i, v) {
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
	json_array_foreach (a, i, v) {
		const char *type = json_string_value(json_object_get(v, "type"));
		const char *url = json_string_value(json_object_get(v, "url"));
		/* Never widen: an entry we would not have written is dropped. */
		if (k->nreg >= SBX_ARRAY_LEN(k->reg) || !type || !url || strlen(url) >= sizeof k->reg[0].url ||
		    (strcmp(type, "pypi") && strcmp(type, "npm") && strcmp(type, "apt")))
			continue;
		struct sbx_limit_registry *r = &k->reg[k->nreg];
		r->type = !strcmp(type, "npm") ? SBX_REG_NPM : !strcmp(type, "apt") ? SBX_REG_APT : SBX_REG_PYPI;
		snprintf(r->url, sizeof r->url, "%s", url);
		if (r->type == SBX_REG_APT) {
			sbx_json_str(v, "suite", r->suite, sizeof r->suite);
			sbx_json_str(v, "components", r->components, sizeof r->components);
			sbx_json_str(v, "keyring", r->keyring, sizeof r->keyring);
			sbx_json_str(v, "keyring_sha256", r->keyring_sha256, sizeof r->keyring_sha256);
			r->host = json_is_true(json_object_get(v, "host"));
			if (!r->suite[0] || !r->components[0] || strlen(r->keyring_sha256) != 64)
				continue; /* unusable: dropped, never served unchecked */
		}
		k->nreg++;
	}
	k->apt_local = json_is_true(json_object_get(p, "apt_local"));
	k->max_download = sbx_json_u64(p, "max_download");
	k->require_hashes = json_is_true(json_object_get(p, "require_hashes"));
	/* Absent (a record from before it): allow, which is what it had. */
	const char *ns = json_string_value(json_object_get(p, "npm_scripts"));
	k->npm_scripts = ns && !strcmp(ns, "deny") ? SBX_NPM_SCRIPTS_DENY : SBX_NPM_SCRIPTS_ALLOW;
	sbx_json_str(p, "rules", k->rules, sizeof k->rules);
	json_t *locks = json_object_get(p, "locks");
	static const char *const types[] = { "pypi", "npm" };
	for (int t = 0; t < 2 && json_is_object(locks); t++) { /* apt has none */
		json_t *l = json_object_get(locks, types[t]);
		if (!json_is_object(l))
			continue;
		sbx_json_str(l, "file", k->lock[t].file, sizeof k->lock[t].file);
		sbx_json_str(l, "sha256", k->lock[t].sha256, sizeof k->lock[t].sha256);
		k->lock[t].entries = (unsigned)sbx_json_u64(l, "entries");
	}
}

static json_t *packages_json(const struct sbx_limit_packages *k)
{
	json_t *regs = json_array();
	static const char *const names[] = { "pypi", "npm", "apt" };
	for (unsigned i = 0; i < k->nreg; i++) {
		const struct sbx_limit_registry *r = &k->reg[i];
		json_t *e = json_pack("{s:s, s:s}", "type", names[r->type], "url", r->url);
		if (e && r->type == SBX_REG_APT)
			json_object_update_new(e, json_pack("{s:s, s:s, s:s, s:s, s:b}", "suite", r->suite,
							    "components", r->components, "keyring", r->keyring,
							    "keyring_sha256", r->keyring_sha256, "host", r->host));
		json_array_append_new(regs, e);
	}
	json_t *o = json_pack("{s:s, s:s, s:o, s:I, s:b, s:s}", "mode",
			      k->mode == SBX_PKG_ALLOWLIST ? "allowlist" : "offline", "policy", k->policy, "registries",
			      regs, "max_download", (json_int_t)k->max_download, "require_hashes", k->require_hashes,
			      "npm_scripts", k->npm_scripts == SBX_NPM_SCRIPTS_DENY ? "deny" : "allow");
	if (o && k->apt_local)
		json_object_set_new(o, "apt_local", json_true());
	/* Only when there are rules: a record without them reads as before. */
	if (o && k->rules[0]) {
		json_t *locks = json_object();
		static const char *const types[] = { "pypi", "npm" };
		for (int t = 0; locks && t < 2; t++)
			if (k->lock[t].file[0])
				json_object_set_new(locks, types[t],
						    json_pack("{s:s, s:s, s:I}", "file", k->lock[t].file, "sha256",
							      k->lock[t].sha256, "entries",
							      (json_int_t)k->lock[t].entries));
		json_object_set_new(o, "rules", json_string(k->rules));
		json_object_set_new(o, "locks", locks);
	}
	return o;
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

static int record_load(struct sbx_state *st, const char *id, struct sbx_session *s, int quarantine, struct sbx_err *err)
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
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record of session %s is corrupt (kept as %s)", id,
				   q);
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
	if (sbx_env_from_json(&s->env, o) < 0 ||
	    (s->workdir[0] && sbx_workdir_check(s->workdir, "workdir", NULL) < 0) ||
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
	limits_read(lo, &s->limits);
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
	s->limits.egress = json_is_string(json_object_get(net, "egress")) &&
			   !strcmp(json_string_value(json_object_get(net, "egress")), "allowlist");
	s->limits.max_connections = (unsigned)sbx_json_u64(net, "max_connections");
	s->limits.max_bytes = sbx_json_u64(net, "max_bytes");
	json_t *vs = json_object_get(o, "volumes"), *v;
	size_t vi;
	json_array_foreach (vs, vi, v) {
		if (s->nvols >= 8)
			break;
		sbx_json_str(v, "host", s->vols[s->nvols].host, sizeof s->vols[0].host);
		sbx_json_str(v, "guest", s->vols[s->nvols].guest, sizeof s->vols[0].guest);
		s->vols[s->nvols].uid = (unsigned)sbx_json_u64(v, "uid");
		s->vols[s->nvols].gid = (unsigned)sbx_json_u64(v, "gid");
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
	for (unsigned i = 0; i < s->nvols; i++) {
		json_t *v = json_pack("{s:s, s:s, s:b}", "host", s->vols[i].host, "guest", s->vols[i].guest, "ro", 1);
		/* Only for a user's volume, so the operator's records read as before. */
		if (v && s->vols[i].uid) {
			json_object_set_new(v, "uid", json_integer(s->vols[i].uid));
			json_object_set_new(v, "gid", json_integer(s->vols[i].gid));
		}
		json_array_append_new(vols, v);
	}
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
		json_object_set_new(o, "snapshot", json_pack("{s:s, s:s}", "ref", s->snapshot, "dir", s->snapshot_dir));
	if (s->cpu_ns || s->mem_peak) {
		json_object_set_new(o, "cpu_ns", json_integer((json_int_t)s->cpu_ns));
		json_object_set_new(o, "mem_peak", json_integer((json_int_t)s->mem_peak));
	}
	json_object_set_new(o, "limits", limits_json(l));
	json_object_set_new(json_object_get(o, "limits"), "files", files_json(l));
	json_object_set_new(json_object_get(o, "limits"), "packages", packages_json(&l->packages));
	if (s->mac[0]) {
		json_object_set_new(o, "net",
				    json_pack("{s:s, s:s, s:i, s:I, s:s}", "mac", s->mac, "egress",
					      l->egress ? "allowlist" : "none", "max_connections",
					      (int)l->max_connections, "max_bytes", (json_int_t)l->max_bytes, "lost",
					      s->net_lost));
		json_object_set_new(
			o, "proxy_process",
			json_pack("{s:i, s:I}", "pid", s->proxy_pid, "start_time", (json_int_t)s->proxy_start));
	}
	if (s->agent_unresponsive_ns)
		json_object_set_new(o, "agent_unresponsive_ns", json_integer((json_int_t)s->agent_unresponsive_ns));
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
	/* A live session does not outlive a host crash (sbx-gc marks it
	 * crashed or stopped from whatever record it finds, any version, or
	 * none), so its records are not synced: two fsyncs, 1-3 ms behind
	 * the host's other writes, were on every claim's, snapshot create's
	 * and resume's path.  The end of a session (its usage, its reason)
	 * is synced: it is what sbx-ps shows until the record is reclaimed. */
	int rc = (sbx_state_ended(s->state) ? sbx_atomic_write_at : sbx_replace_at)(dfd, RECORD, txt, strlen(txt), 0600,
										    err);
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
