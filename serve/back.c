/* sbx-serve's back: root, acting for the front (serve.h, wire.h).  Each
 * call is served by a child of its own (a create takes seconds, an exec
 * as long as its command), which works out who asks, scopes the state to
 * that tenant, and answers on the call's own socket. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "exec_client.h"
#include "execrec.h"
#include "files.h"
#include "keys.h"
#include "policy.h"
#include "serve.h"
#include "session.h"
#include "snapshot.h"
#include "template.h"
#include "util.h"
#include "view.h"
#include "vmctl.h"
#include "wire.h"

int serve_back_init(struct serve_back *b, struct sbx_err *err)
{
	b->keys_fd = b->meta_fd = -1;
	if (sbx_state_open(&b->st, err) < 0 || sbx_hostconf_load(&b->hc, err) < 0)
		return -1;
	if ((b->keys_fd = serve_keys_dir(&b->st, err)) < 0)
		return -1;
	_cleanup_close_ int s = openat(b->st.lib_fd, "serve", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (s < 0 || (mkdirat(s, "sandboxes", 0700) < 0 && errno != EEXIST) ||
	    (b->meta_fd = openat(s, "sandboxes", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s/serve/sandboxes", b->st.lib);
	return 0;
}

static json_t *meta_load(struct serve_back *b, const char *id)
{
	char name[SBX_ID_MAX + 8];
	if (sbx_id_check(id, "sandbox ID", NULL) < 0)
		return NULL;
	snprintf(name, sizeof name, "%s.json", id);
	_cleanup_close_ int fd = openat(b->meta_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > (1 << 20))
		return NULL;
	return json_loadfd(fd, 0, NULL);
}

/* An envd call (in-sandbox: run, files) names its sandbox and carries the
 * token its create handed out; the sandbox's tenant is the caller's. */
static int token_check(struct serve_back *b, const struct serve_req *r, char *tenant, char *who, struct sbx_err *err)
{
	json_t *m = meta_load(b, r->id);
	const char *tok = json_string_value(json_object_get(m, "token"));
	const char *t = json_string_value(json_object_get(m, "tenant"));
	int ok = tok && t && strlen(tok) == strlen(r->token) && CRYPTO_memcmp(tok, r->token, strlen(tok)) == 0 &&
		 strlen(t) <= SBX_ID_MAX;
	if (ok) {
		snprintf(tenant, SBX_ID_MAX + 1, "%s", t);
		snprintf(who, 64, "token:%.40s", r->id);
	}
	json_decref(m);
	/* A wrong token and an unknown sandbox look alike. */
	return ok ? 0 : sbx_err_set(err, SBX_EXIT_NOENT, 0, "no sandbox %.64s", r->id);
}

/* The unix peer's identity, for a command it runs (op_cli): its uid
 * ((uid_t)-1: the call came over TCP), gid and groups. */
static struct ucred peer_cred = { .uid = (uid_t)-1 };
static gid_t peer_groups[64];
static unsigned peer_ngroups;

static void peer_identity(int peer, const struct ucred *cr)
{
	peer_cred = *cr;
	gid_t g[256];
	socklen_t l = sizeof g;
	peer_ngroups = 0;
	if (getsockopt(peer, SOL_SOCKET, SO_PEERGROUPS, g, &l) == 0)
		for (size_t i = 0; i < l / sizeof *g && peer_ngroups < SBX_ARRAY_LEN(peer_groups); i++)
			peer_groups[peer_ngroups++] = g[i];
}

/* Who asks: the API key's tenant, or the unix peer's by serve.users
 * (root: the operator).  who names the principal in the audit trail. */
static int principal(struct serve_back *b, const struct serve_req *r, int peer, char *tenant, char *who,
		     struct sbx_err *err)
{
	if (peer >= 0) {
		struct ucred cr;
		socklen_t l = sizeof cr;
		if (getsockopt(peer, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
			return sbx_err_set(err, SERVE_EXIT_NOPERM, errno, "who is asking cannot be told");
		snprintf(who, 64, "uid:%u", (unsigned)cr.uid);
		peer_identity(peer, &cr);
		tenant[0] = 0;
		if (cr.uid == 0)
			return 0;
		char uid[16], buf[1024];
		snprintf(uid, sizeof uid, "%u", (unsigned)cr.uid);
		struct passwd pw, *pp = NULL;
		getpwuid_r(cr.uid, &pw, buf, sizeof buf, &pp);
		for (unsigned i = 0; i < b->hc.serve.nusers; i++) {
			const struct sbx_serve_user *u = &b->hc.serve.users[i];
			if (!strcmp(u->user, uid) || (pp && !strcmp(u->user, pp->pw_name))) {
				snprintf(tenant, SBX_ID_MAX + 1, "%s", u->tenant);
				return 0;
			}
		}
		return sbx_err_set(err, SERVE_EXIT_NOPERM, 0,
				   "uid %u is no tenant of this service (serve.users in sbx.yaml)", (unsigned)cr.uid);
	}
	if (r->token[0] && r->id[0])
		return token_check(b, r, tenant, who, err);
	char id[SERVE_KEY_ID_LEN + 1];
	int ok = serve_key_check(b->keys_fd, r->key, tenant, SBX_ID_MAX + 1, id, err);
	if (ok < 0)
		return -1;
	if (!ok)
		return sbx_err_set(err, SERVE_EXIT_NOPERM, 0, "invalid API key");
	snprintf(who, 64, "key:%s", id);
	return 0;
}

static int reply_json(int sock, json_t *j, const int *fds, unsigned nfds)
{
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	int rc = t ? serve_send(sock, t, strlen(t), fds, nfds) : -1;
	free(t);
	return rc;
}

static int reply_err(int sock, const struct sbx_err *e)
{
	return reply_json(sock,
			  json_pack("{s:b, s:i, s:s, s:i}", "ok", 0, "code", e->code ? e->code : SBX_EXIT_INTERNAL,
				    "message", e->msg[0] ? e->msg : "failed", "errno", e->errnum),
			  NULL, 0);
}

/* What E2B says of a sandbox: sbx's record, and what the create kept. */
static json_t *sandbox_json(struct serve_back *b, const struct sbx_session *s)
{
	char started[40], end[40];
	json_t *meta = meta_load(b, s->id);
	json_t *md = json_object_get(meta, "metadata");
	const char *tmpl = json_string_value(json_object_get(meta, "template"));
	/* the record's TTL: a set-timeout moves it */
	uint64_t ttl = s->limits.ttl_ms ? s->limits.ttl_ms / 1000u
					: (uint64_t)json_integer_value(json_object_get(meta, "timeout"));
	sbx_fmt_time(s->created_ns, started, sizeof started);
	sbx_fmt_time(s->created_ns + ttl * 1000000000u, end, sizeof end);
	const char *live = sbx_session_live_state(&b->st, s);
	json_t *j =
		json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:s, s:s, s:O}", "sandboxID", s->id, "templateID",
			  tmpl ? tmpl : s->tmpl_name, "clientID", "sbx", "startedAt", started, "endAt", end, "cpuCount",
			  (int)s->vcpus, "memoryMB", (int)s->memory_mib, "envdVersion", SERVE_ENVD_VERSION, "state",
			  !strcmp(live, "paused") || !strcmp(live, "suspended") ? "paused" : "running", "metadata",
			  md ? md : json_object());
	json_decref(meta);
	if (j && !md)
		json_object_set_new(j, "metadata", json_object());
	if (j)
		json_object_set_new(j, "lifecycle",
				    json_pack("{s:s, s:b}", "onTimeout", s->limits.ttl_suspend ? "pause" : "kill",
					      "autoResume", 0));
	return j;
}

/* A sandbox's policy: the defaults, its timeout as the TTL, and E2B's
 * /home/user among the paths its files may be copied to and from (beside
 * the defaults' /workspace and /tmp: E2B's code works there). */
static int sandbox_policy(struct serve_back *b, struct sbx_policy *pol, unsigned timeout, int internet, int auto_pause,
			  struct sbx_err *err)
{
	char ttl[32];
	/* The operator's policy for the service's sandboxes, else the
	 * defaults (no network); a request narrows it, never widens it. */
	if (b->hc.serve.policy[0] ? sbx_policy_load(b->hc.serve.policy, pol, err) < 0 : (sbx_policy_defaults(pol), 0))
		return -1;
	if (internet == 1 && pol->network.egress == SBX_EGRESS_NONE)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "allow_internet_access: this service's sandboxes have no network (serve.policy in "
				   "sbx.yaml grants none)");
	if (internet == 0) { /* no egress, and no package registry either */
		pol->network.egress = SBX_EGRESS_NONE;
		pol->network.nallow = 0;
		if (sbx_policy_set(pol, "packages.mode", "offline", err) < 0)
			return -1;
	}
	snprintf(ttl, sizeof ttl, "%us", timeout);
	if (sbx_policy_set(pol, "resources.ttl", ttl, err) < 0)
		return -1;
	/* autoPause: suspended at its timeout (lifecycle.on_ttl), and resumed
	 * by a connect, with that TTL again. */
	if (auto_pause && pol->lifecycle.ttl_counts == SBX_TTL_RUNNING)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "autoPause: this service's sandboxes count their timeout in running time "
				   "(lifecycle.ttl_counts in serve.policy), which a pause would never spend");
	if (auto_pause && sbx_policy_set(pol, "lifecycle.on_ttl", "suspend", err) < 0)
		return -1;
	struct sbx_policy_paths *fp[] = { &pol->files.writable, &pol->files.exportable };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fp); i++)
		if (fp[i]->n < SBX_POLICY_PATHS_MAX)
			snprintf(fp[i]->path[fp[i]->n++], SBX_POLICY_PATH_LEN, "%s", "/home/user");
	return 0;
}

/* What a create or a fork keeps of a sandbox that sbx does not, with a
 * new access token (into token[49]). */
static int meta_save(struct serve_back *b, const char *id, const char *tmpl, json_t *metadata, unsigned timeout,
		     const char *tenant, char *token, struct sbx_err *err)
{
	unsigned char rnd[24];
	if (RAND_bytes(rnd, sizeof rnd) != 1)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot make the sandbox's access token");
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(token + 2 * i, 3, "%02x", rnd[i]);
	json_t *meta = json_pack("{s:s, s:O?, s:i, s:s, s:s}", "template", tmpl, "metadata", metadata, "timeout",
				 (int)timeout, "tenant", tenant, "token", token);
	char *t = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
	json_decref(meta);
	char name[SBX_ID_MAX + 8];
	snprintf(name, sizeof name, "%s.json", id);
	int rc = t ? sbx_atomic_write_at(b->meta_fd, name, t, strlen(t), 0600, err)
		   : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	free(t);
	return rc;
}

static int op_create(struct serve_back *b, struct serve_req *r, const char *tenant, int sock, struct sbx_err *err)
{
	struct sbx_policy pol;
	unsigned timeout = r->timeout_s ? r->timeout_s : 300;
	if (sandbox_policy(b, &pol, timeout, r->internet, r->auto_pause, err) < 0)
		return -1;
	/* A template ID that names no template but one of the caller's
	 * snapshots (a createSnapshot's ID) restores it. */
	const char *tmpl = r->tmpl[0] ? r->tmpl : "base", *snap = NULL;
	struct sbx_template t;
	struct sbx_snapshot sn;
	struct sbx_err probe = { 0 };
	if (sbx_template_resolve(&b->st, tenant[0] ? tenant : NULL, tmpl, &t, &probe) < 0 &&
	    sbx_snapshot_find(&b->st, tenant, tmpl, &sn, &probe) == 0) {
		snap = tmpl;
		tmpl = NULL;
	}
	struct sbx_create_opts o = { .tmpl = tmpl,
				     .snapshot = snap,
				     .policy = &pol,
				     .tenant = tenant[0] ? tenant : NULL,
				     .env = (const char *const *)r->env,
				     .nenv = (unsigned)r->nenv,
				     .progress_fd = -1,
				     .vcpus = pol.resources.vcpus,
				     .memory_mib = (unsigned)(pol.resources.memory >> 20) };
	struct sbx_session s;
	int existed;
	if (sbx_session_create(&b->st, &o, &s, &existed, err) < 0)
		return -1;
	snprintf(r->id, sizeof r->id, "%s", s.id); /* for the audit record */
	char token[49];
	if (meta_save(b, s.id, snap ? snap : o.tmpl, r->metadata, timeout, tenant, token, err) < 0) {
		int gone;
		struct sbx_err ignored = { 0 };
		sbx_session_destroy(&b->st, s.id, &gone, &ignored); /* no token, no use: nothing half made */
		return -1;
	}
	json_t *j = sandbox_json(b, &s);
	json_object_set_new(j, "ok", json_true());
	json_object_set_new(j, "envdAccessToken", json_string(token));
	explicit_bzero(token, sizeof token);
	return reply_json(sock, j, NULL, 0);
}

static int op_list(struct serve_back *b, int sock, struct sbx_err *err)
{
	char **ids;
	size_t n;
	if (sbx_session_list(&b->st, &ids, &n, err) < 0)
		return -1;
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++) {
		struct sbx_session s;
		struct sbx_err e = { 0 };
		if (sbx_session_lookup(&b->st, ids[i], &s, &e) == 0 && !s.pool &&
		    sbx_state_live(sbx_session_live_state(&b->st, &s)))
			json_array_append_new(a, sandbox_json(b, &s));
		free(ids[i]);
	}
	free(ids);
	return reply_json(sock, json_pack("{s:b, s:o}", "ok", 1, "sandboxes", a), NULL, 0);
}

static int op_get(struct serve_back *b, const struct serve_req *r, int sock, int with_token, struct sbx_err *err)
{
	struct sbx_session s;
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_lookup(&b->st, r->id, &s, err) < 0)
		return -1;
	const char *live = sbx_session_live_state(&b->st, &s);
	if (!sbx_state_live(live))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "sandbox %s is not running", r->id);
	/* connect: a paused or suspended sandbox runs again (E2B's resume) */
	char state[32];
	if (with_token && strcmp(live, "running") &&
	    (sbx_session_vmctl(&b->st, s.id, sbx_state_tenant(&b->st), SBX_VMCTL_RESUME, NULL, state, sizeof state,
			       err) < 0 ||
	     sbx_session_lookup(&b->st, r->id, &s, err) < 0))
		return -1;
	/* connect's timeout: the sandbox lives at least that long from now
	 * (E2B's connect only extends); not a TTL of running time
	 * (lifecycle.ttl_counts), which no clock extends. */
	uint64_t now = sbx_now_ns(), want = (uint64_t)r->timeout_s * 1000000000u;
	if (with_token && r->timeout_s && !s.limits.ttl_running &&
	    (!s.limits.ttl_ms || s.created_ns + s.limits.ttl_ms * 1000000u < now + want) &&
	    (sbx_session_set_ttl(&b->st, s.id, (uint64_t)r->timeout_s * 1000u, err) < 0 ||
	     sbx_session_lookup(&b->st, r->id, &s, err) < 0))
		return -1;
	json_t *j = sandbox_json(b, &s);
	json_object_set_new(j, "ok", json_true());
	if (with_token) { /* connect: what a create handed out, again */
		json_t *m = meta_load(b, s.id);
		json_object_set(j, "envdAccessToken", json_object_get(m, "token"));
		json_decref(m);
	}
	return reply_json(sock, j, NULL, 0);
}

/* The sandbox's console (RUN/sessions/ID/console.log: its kernel's and
 * guest-init's lines), as an fd for the front to read; the back reads
 * none of it (it is the guest's text). */
static int op_logs(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	struct sbx_session s;
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_lookup(&b->st, r->id, &s, err) < 0)
		return -1;
	_cleanup_close_ int dfd = openat(b->st.rsessions_fd, s.id, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int fd =
		dfd >= 0 ? openat(dfd, "console.log", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
	struct stat sb;
	int have = fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode); /* else gone, or not booted here */
	return reply_json(sock, json_pack("{s:b, s:I}", "ok", 1, "created_ms", (json_int_t)(s.created_ns / 1000000)),
			  &fd, have ? 1 : 0);
}

/* E2B's snapshots are sbx's: createSnapshot saves the sandbox (its
 * commands go on running in it, and in what is made from it), the ID is
 * NAME@VERSION, and a create naming it restores it. */
static json_t *snapshot_entry(const char *name, const char *version)
{
	char id[140];
	snprintf(id, sizeof id, "%s@%s", name, version);
	return json_pack("{s:s, s:[s]}", "snapshotID", id, "names", name);
}

static int op_snapshot(struct serve_back *b, struct serve_req *r, const char *tenant, int sock, struct sbx_err *err)
{
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_visible(&b->st, r->id, err) < 0)
		return -1;
	char spec[80];
	if (!r->tmpl[0]) { /* E2B names it when the caller does not */
		unsigned char x[4];
		arc4random_buf(x, sizeof x);
		snprintf(spec, sizeof spec, "snap-%02x%02x%02x%02x", x[0], x[1], x[2], x[3]);
	} else {
		snprintf(spec, sizeof spec, "%s", r->tmpl);
	}
	struct sbx_snapshot_save_opts o = {
		.session = r->id, .tenant = tenant[0] ? tenant : NULL, .spec = spec, .progress_fd = -1
	};
	struct sbx_snapshot out;
	if (sbx_snapshot_save(&b->st, &o, &out, err) < 0)
		return -1;
	json_t *j = snapshot_entry(out.name, out.version);
	json_object_set_new(j, "ok", json_true());
	return reply_json(sock, j, NULL, 0);
}

static int op_snapshots(struct serve_back *b, const struct serve_req *r, const char *tenant, int sock,
			struct sbx_err *err)
{
	json_t *all, *v, *out = json_array();
	size_t i;
	if (sbx_snapshot_list(&b->st, tenant, r->tmpl[0] ? r->tmpl : NULL, &all, err) < 0) {
		json_decref(out);
		if (err->code != SBX_EXIT_NOENT)
			return -1;
		return reply_json(sock, json_pack("{s:b, s:[]}", "ok", 1, "snapshots"), NULL, 0);
	}
	json_array_foreach (all, i, v) {
		const char *src = json_string_value(json_object_get(v, "session"));
		if (r->id[0] && (!src || strcmp(src, r->id)))
			continue;
		json_array_append_new(out, snapshot_entry(json_string_value(json_object_get(v, "name")),
							  json_string_value(json_object_get(v, "version"))));
	}
	json_decref(all);
	return reply_json(sock, json_pack("{s:b, s:o}", "ok", 1, "snapshots", out), NULL, 0);
}

static int op_snapshot_rm(struct serve_back *b, const struct serve_req *r, const char *tenant, int sock,
			  struct sbx_err *err)
{
	json_t *removed = NULL;
	if (sbx_snapshot_rm(&b->st, tenant, r->tmpl, 0, &removed, err) < 0)
		return -1;
	json_decref(removed);
	return reply_json(sock, json_pack("{s:b}", "ok", 1), NULL, 0);
}

static int op_kill(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	int gone = 0;
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_visible(&b->st, r->id, err) < 0 ||
	    sbx_session_destroy(&b->st, r->id, &gone, err) < 0)
		return -1;
	char name[SBX_ID_MAX + 8];
	snprintf(name, sizeof name, "%s.json", r->id);
	unlinkat(b->meta_fd, name, 0);
	return reply_json(sock, json_pack("{s:b, s:b}", "ok", 1, "gone", gone), NULL, 0);
}

static int op_templates(struct serve_back *b, const char *tenant, int sock, struct sbx_err *err)
{
	json_t *list;
	if (sbx_template_list(&b->st, tenant[0] ? tenant : NULL, NULL, &list, err) < 0)
		return -1;
	return reply_json(sock, json_pack("{s:b, s:o}", "ok", 1, "templates", list), NULL, 0);
}

static void exec_started(void *ctx, const char *exec_id)
{
	reply_json(*(int *)ctx, json_pack("{s:b, s:s}", "ok", 1, "exec_id", exec_id), NULL, 0);
}

/* A terminal for a PTY command: the back's call child makes the slave its
 * controlling terminal, so a resize the front makes on the master (E2B's
 * Update) reaches the exec client as SIGWINCH, which tells the guest. */
static int exec_pty(const struct serve_req *r, int *master, int *slave, struct sbx_err *err)
{
	struct winsize ws = { .ws_row = (unsigned short)r->pty_rows, .ws_col = (unsigned short)r->pty_cols };
	*slave = -1;
	*master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	char name[64];
	if (*master < 0 || grantpt(*master) < 0 || unlockpt(*master) < 0 ||
	    ptsname_r(*master, name, sizeof name) != 0 || (*slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
	    setsid() < 0 || ioctl(*slave, TIOCSCTTY, 0) < 0 || ioctl(*master, TIOCSWINSZ, &ws) < 0) {
		int e = errno;
		if (*master >= 0)
			close(*master);
		if (*slave >= 0)
			close(*slave);
		*master = *slave = -1;
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot make the command's terminal");
	}
	return 0;
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* The command's output goes to pipes whose read ends the front gets
 * first (with its stdin's write end and, for a PTY, the terminal's
 * master); its exec ID follows once the session started it (E2B's pid:
 * the ID's number), and how it ended once it has, on the call's socket. */
static int op_exec(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_visible(&b->st, r->id, err) < 0)
		return -1;
	int pty = r->pty_rows > 0, with_in = r->stdin_open || pty, master = -1, slave = -1;
	int out[2] = { -1, -1 }, er[2] = { -1, -1 }, in[2] = { -1, -1 };
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0 || (with_in && pipe2(in, O_CLOEXEC) < 0)) {
		int e = errno;
		close_all(out, 2);
		close_all(er, 2);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot start the command");
	}
	/* A fast command's output crosses in big reads (the front's envelopes
	 * carry ~96 KiB); a pipe of 1 MiB, where the host allows it. */
	fcntl(out[1], F_SETPIPE_SZ, 1 << 20);
	fcntl(er[1], F_SETPIPE_SZ, 1 << 20);
	if (pty && exec_pty(r, &master, &slave, err) < 0) {
		close_all(out, 2);
		close_all(er, 2);
		close_all(in, 2);
		return -1;
	}
	int fds[4] = { out[0], er[0], in[1], master }, nfds = 2;
	if (with_in)
		fds[nfds++] = in[1];
	if (pty)
		fds[nfds++] = master;
	int rc = reply_json(sock,
			    json_pack("{s:b, s:s, s:b, s:b}", "ok", 1, "started", "yes", "stdin", with_in, "pty", pty),
			    fds, (unsigned)nfds);
	int theirs[] = { out[0], er[0], in[1], master };
	close_all(theirs, SBX_ARRAY_LEN(theirs));
	struct sbx_exec_opts o = { .in_fd = in[0],
				   .out_fd = out[1],
				   .err_fd = er[1],
				   .tty_fd = slave,
				   .on_started = exec_started,
				   .started_ctx = &sock };
	o.req.argv = r->argv;
	o.req.argc = r->argc;
	o.req.env = r->env;
	o.req.envc = r->nenv;
	o.req.cwd = r->cwd[0] ? (char *)r->cwd : NULL;
	o.req.timeout_ms = r->exec_timeout_ms;
	if (pty) {
		o.req.flags |= SBX_EXEC_PTY;
		o.req.rows = r->pty_rows;
		o.req.cols = r->pty_cols;
	}
	if (!strcmp(r->user, "root"))
		o.req.have_uid = o.req.have_gid = 1;
	struct sbx_exec_result res;
	memset(&res, 0, sizeof res);
	if (rc < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the front went away");
	else
		rc = sbx_exec_run(&b->st, r->id, &o, &res, err);
	int ours[] = { out[1], er[1], in[0], slave };
	close_all(ours, SBX_ARRAY_LEN(ours));
	if (rc < 0)
		return -1;
	return reply_json(sock,
			  json_pack("{s:b, s:s, s:i, s:i, s:i}", "ok", 1, "exec_id", res.exec_id, "status",
				    (int)res.exit.status, "signal", (int)res.exit.signo, "reason",
				    (int)res.exit.reason),
			  NULL, 0);
}

/* The session named (or made), and the tenant, in the envelope. */
/* The session's running execs, as envd's ListResponse has them. */
static int op_ps(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	json_t *list, *e, *out = json_array();
	size_t i;
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_visible(&b->st, r->id, err) < 0 ||
	    sbx_exec_list(&b->st, r->id, &list, err) < 0) {
		json_decref(out);
		return -1;
	}
	json_array_foreach (list, i, e) {
		const char *id = json_string_value(json_object_get(e, "exec"));
		if (!id || strcmp(json_string_value(json_object_get(e, "state")) ?: "", "running"))
			continue;
		json_t *rq = json_object_get(e, "request"), *argv = json_object_get(rq, "argv");
		if (!strcmp(json_string_value(json_object_get(rq, "kind")) ?: "", "copy"))
			continue; /* sbx's own (a watch's watcher, a file's copy): no process of envd's */
		json_t *args = json_array(), *a;
		size_t k;
		json_array_foreach (argv, k, a)
			if (k > 0)
				json_array_append(args, a);
		json_t *cfg = json_pack("{s:s, s:o, s:{}}", "cmd", json_string_value(json_array_get(argv, 0)) ?: "",
					"args", args, "envs");
		if (json_is_string(json_object_get(rq, "cwd")))
			json_object_set(cfg, "cwd", json_object_get(rq, "cwd"));
		json_array_append_new(
			out, json_pack("{s:o, s:I}", "config", cfg, "pid", (json_int_t)strtoll(id + 1, NULL, 10)));
	}
	json_decref(list);
	return reply_json(sock, json_pack("{s:b, s:o}", "ok", 1, "processes", out), NULL, 0);
}

static int op_signal(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	/* sbx ends an exec's whole tree (SIGKILL after SIGTERM's grace):
	 * what both of E2B's signals ask for. */
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_exec_id_check(r->exec_id, err) < 0 ||
	    sbx_session_visible(&b->st, r->id, err) < 0 || sbx_exec_kill(&b->st, r->id, r->exec_id, err) < 0)
		return -1;
	return reply_json(sock, json_pack("{s:b}", "ok", 1), NULL, 0);
}

/* Follow a running (or ended) exec's output from its records: pipes as
 * for an exec, then how it ended. */
static int op_attach(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_exec_id_check(r->exec_id, err) < 0 ||
	    sbx_session_visible(&b->st, r->id, err) < 0)
		return -1;
	json_t *list, *e;
	size_t i;
	int running = 0;
	if (sbx_exec_list(&b->st, r->id, &list, err) < 0)
		return -1;
	json_array_foreach (list, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "exec")) ?: "", r->exec_id))
			running = !strcmp(json_string_value(json_object_get(e, "state")) ?: "", "running");
	json_decref(list);
	if (!running)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no running process %s", r->exec_id + 1);
	int out[2] = { -1, -1 }, er[2] = { -1, -1 };
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0) {
		int e2 = errno;
		if (out[0] >= 0) {
			close(out[0]);
			close(out[1]);
		}
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e2, "cannot follow the command");
	}
	fcntl(out[1], F_SETPIPE_SZ, 1 << 20);
	fcntl(er[1], F_SETPIPE_SZ, 1 << 20);
	int fds[2] = { out[0], er[0] };
	int rc = reply_json(sock, json_pack("{s:b, s:s}", "ok", 1, "exec_id", r->exec_id), fds, 2);
	close(out[0]);
	close(er[0]);
	struct sbx_attach_opts ao = { .out_fd = out[1], .err_fd = er[1] };
	int status = 0, lost = 0;
	if (rc == 0)
		rc = sbx_exec_attach(&b->st, r->id, r->exec_id, &ao, &status, &lost, err);
	close(out[1]);
	close(er[1]);
	if (rc < 0)
		return -1;
	int sig = status > 128 && status < 128 + 65 ? status - 128 : 0;
	return reply_json(sock,
			  json_pack("{s:b, s:s, s:i, s:i}", "ok", 1, "exec_id", r->exec_id, "status", sig ? 0 : status,
				    "signal", sig),
			  NULL, 0);
}

static int op_vmctl(struct serve_back *b, const struct serve_req *r, unsigned op, int sock, struct sbx_err *err)
{
	char state[32];
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 ||
	    sbx_session_vmctl(&b->st, r->id, sbx_state_tenant(&b->st), op, NULL, state, sizeof state, err) < 0)
		return -1;
	return reply_json(sock, json_pack("{s:b, s:s}", "ok", 1, "state", state), NULL, 0);
}

/* set-timeout: the sandbox ends timeout seconds from now; refresh: not
 * before that (E2B's refreshes never shorten). */
static int op_timeout(struct serve_back *b, const struct serve_req *r, int refresh, int sock, struct sbx_err *err)
{
	struct sbx_session s;
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_lookup(&b->st, r->id, &s, err) < 0)
		return -1;
	uint64_t left = (uint64_t)(r->timeout_s ? r->timeout_s : 60) * 1000u, now = sbx_now_ns();
	if (refresh && s.limits.ttl_ms) {
		uint64_t end = s.created_ns + s.limits.ttl_ms * 1000000u;
		if (end > now + left * 1000000u)
			return reply_json(sock, json_pack("{s:b}", "ok", 1), NULL, 0);
	}
	if (sbx_session_set_ttl(&b->st, r->id, left, err) < 0)
		return -1;
	return reply_json(sock, json_pack("{s:b}", "ok", 1), NULL, 0);
}

/* E2B's SandboxMetric, one sample, host-measured (sbx-ps's figures): CPU
 * over a quarter second of the VMM's cgroup time, memory the VMM's peak
 * (an upper bound of the guest's use), disk the overlay's blocks. */
static int op_metrics(struct serve_back *b, const struct serve_req *r, int sock, struct sbx_err *err)
{
	struct sbx_session s;
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_lookup(&b->st, r->id, &s, err) < 0)
		return -1;
	json_t *v1 = sbx_session_view(&b->st, r->id);
	uint64_t t1 = sbx_mono_ns();
	struct timespec q = { 0, 250000000 };
	nanosleep(&q, NULL);
	json_t *v2 = sbx_session_view(&b->st, r->id);
	uint64_t t2 = sbx_mono_ns();
	if (!v1 || !v2) {
		json_decref(v1);
		json_decref(v2);
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no sandbox %s", r->id);
	}
	double cpu = json_real_value(json_object_get(v2, "cpu_s")) - json_real_value(json_object_get(v1, "cpu_s"));
	double pct = s.vcpus && t2 > t1 ? 100.0 * cpu / ((double)(t2 - t1) / 1e9) / s.vcpus : 0;
	char now[40];
	uint64_t wall = sbx_now_ns();
	sbx_fmt_time(wall, now, sizeof now);
	json_t *m = json_pack("{s:s, s:I, s:i, s:f, s:I, s:I, s:I, s:I}", "timestamp", now, "timestampUnix",
			      (json_int_t)(wall / 1000000000u), "cpuCount", (int)s.vcpus, "cpuUsedPct",
			      pct < 0     ? 0.0
			      : pct > 100 ? 100.0
					  : pct,
			      "memUsed", json_integer_value(json_object_get(v2, "memory_peak_bytes")), "memTotal",
			      (json_int_t)s.memory_mib << 20, "diskUsed",
			      json_integer_value(json_object_get(v2, "disk_written_bytes")), "diskTotal",
			      (json_int_t)s.limits.disk_bytes);
	json_decref(v1);
	json_decref(v2);
	return reply_json(sock, json_pack("{s:b, s:[o]}", "ok", 1, "metrics", m), NULL, 0);
}

/* N running copies of a sandbox (sbx-snapshot fork), each a sandbox of
 * its own with its source's template and metadata, and a token. */
static int op_fork(struct serve_back *b, const struct serve_req *r, const char *tenant, int sock, struct sbx_err *err)
{
	struct sbx_policy pol;
	struct sbx_session src_s;
	unsigned timeout = r->timeout_s ? r->timeout_s : 300, n = r->count ? r->count : 1;
	/* A fork pauses at its timeout when its source does. */
	if (sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_lookup(&b->st, r->id, &src_s, err) < 0 ||
	    sandbox_policy(b, &pol, timeout, -1, src_s.limits.ttl_suspend, err) < 0)
		return -1;
	if (n > SBX_FORK_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "count: 1 to %u", SBX_FORK_MAX);
	char ids[SBX_FORK_MAX][SBX_ID_MAX + 1];
	uint64_t ms;
	struct sbx_snapshot_fork_opts o = {
		.session = r->id, .tenant = tenant[0] ? tenant : NULL, .n = n, .policy = &pol
	};
	if (sbx_snapshot_fork(&b->st, &o, ids, &ms, err) < 0)
		return -1;
	json_t *src = meta_load(b, r->id), *out = json_array();
	const char *tmpl = json_string_value(json_object_get(src, "template"));
	for (unsigned i = 0; i < n; i++) {
		struct sbx_session s;
		char token[49];
		struct sbx_err e = { 0 };
		if (meta_save(b, ids[i], tmpl ? tmpl : "base", json_object_get(src, "metadata"), timeout, tenant, token,
			      &e) < 0 ||
		    sbx_session_lookup(&b->st, ids[i], &s, &e) < 0) {
			json_array_append_new(out, json_pack("{s:{s:i, s:s}}", "error", "code", 500, "message", e.msg));
			continue;
		}
		json_t *j = sandbox_json(b, &s);
		json_object_set_new(j, "envdAccessToken", json_string(token));
		json_array_append_new(out, json_pack("{s:o}", "sandbox", j));
	}
	json_decref(src);
	return reply_json(sock, json_pack("{s:b, s:o}", "ok", 1, "forks", out), NULL, 0);
}

/* ---- a command a host user runs (sbx-serve(8), USERS) ------------------- */

/* What the command's environment keeps of the user's: how its terminal
 * looks.  Everything else is the service's (SBX_ROOT, SBX_TEMPLATES...). */
static int user_env_ok(const char *kv)
{
	size_t n = strcspn(kv, "=");
	return kv[n] == '=' && serve_cli_env_ok(kv, n);
}

static char **cli_env(const struct serve_req *r, const char *tenant)
{
	extern char **environ;
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + r->nenv + 3, sizeof *env);
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SBX_TENANT=", 11) && strncmp(environ[i], "SBX_CALLER=", 11) &&
		    !user_env_ok(environ[i]))
			env[k++] = environ[i];
	for (size_t i = 0; i < r->nenv; i++)
		if (user_env_ok(r->env[i]))
			env[k++] = r->env[i];
	char caller[1024];
	int o = snprintf(caller, sizeof caller, "SBX_CALLER=%u:%u", (unsigned)peer_cred.uid, (unsigned)peer_cred.gid);
	for (unsigned i = 0; i < peer_ngroups && o > 0 && (size_t)o < sizeof caller - 16; i++)
		o += snprintf(caller + o, sizeof caller - (size_t)o, "%s%u", i ? "," : ":", (unsigned)peer_groups[i]);
	env[k++] = strdup(caller);
	if (tenant[0] && asprintf(&env[k], "SBX_TENANT=%s", tenant) > 0)
		k++;
	return env;
}

/* The command's exit, or 128 + the signal that ended it. */
static int cli_wait(pid_t pid)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return SBX_EXIT_INTERNAL;
	return WIFEXITED(status) ? WEXITSTATUS(status) : SBX_EXIT_SIGNAL + WTERMSIG(status);
}

/* Run argv[0], one of sbx's commands (wire.h), as root for the user on
 * the other end: its tenant pinned, its host paths the user's to open
 * (caller.h), its stdin, stdout, stderr and working directory the user's
 * own (io).  Signals the user's side forwards reach its process group;
 * the user's side going away hangs it up.  The answer is how it ended. */
static int op_cli(const struct serve_req *r, const char *tenant, int sock, const int *io, unsigned nio,
		  struct sbx_err *err)
{
	if (peer_cred.uid == (uid_t)-1 || peer_cred.uid == 0)
		return sbx_err_set(err, SERVE_EXIT_NOPERM, 0, "commands are run for host users on the CLI socket only");
	if (nio != 4)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cli: stdin, stdout, stderr and a directory are needed");
	char self[PATH_MAX], exe[PATH_MAX + 64];
	ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash = l > 0 ? (self[l] = 0, strrchr(self, '/')) : NULL;
	if (!slash)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot find the commands");
	*slash = 0;
	snprintf(exe, sizeof exe, "%s/%s", self, r->argv[0]);
	char **env = cli_env(r, tenant);
	if (!env)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	pid_t pid = fork();
	if (pid < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "fork");
	if (pid == 0) {
		setsid();
		if (dup2(io[0], 0) < 0 || dup2(io[1], 1) < 0 || dup2(io[2], 2) < 0 || fchdir(io[3]) < 0)
			_exit(SBX_EXIT_INTERNAL);
		syscall(SYS_close_range, 3u, ~0u, 0u);
		for (int s = 1; s < NSIG; s++)
			signal(s, SIG_DFL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execve(exe, r->argv, env);
		dprintf(2, "%s: cannot run: %s\n", r->argv[0], strerror(errno));
		_exit(SBX_EXIT_INTERNAL);
	}
	for (unsigned i = 0; i < nio; i++)
		close(io[i]);
	_cleanup_close_ int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int hung = 0;
	for (;;) {
		struct pollfd p[2] = { { .fd = pfd, .events = POLLIN }, { .fd = hung ? -1 : sock, .events = POLLIN } };
		int k = poll(p, 2, hung ? 10000 : -1);
		if (k < 0 && errno != EINTR)
			break;
		if (k == 0) { /* hung up 10 s ago and still there */
			kill(-pid, SIGKILL);
			break;
		}
		if (p[0].revents)
			break;
		if (!p[1].revents)
			continue;
		char msg[256];
		int fds[4];
		unsigned nfds = 0;
		ssize_t n = serve_recv(sock, msg, sizeof msg, fds, &nfds, 0);
		if (n <= 0) { /* the user's side is gone */
			kill(-pid, SIGHUP);
			kill(-pid, SIGCONT);
			hung = 1;
			continue;
		}
		int s = serve_cli_signal(msg, (size_t)n);
		if (s)
			kill(-pid, s);
	}
	int code = cli_wait(pid);
	return reply_json(sock, json_pack("{s:b, s:i}", "ok", 1, "exit", code), NULL, 0);
}

static int audit_call(struct serve_back *b, const struct serve_req *r, const char *who, const char *tenant,
		      const struct sbx_err *e)
{
	json_t *f = json_pack("{s:s, s:s, s:i}", "principal", who, "op", serve_op_name(r->op), "code", e->code);
	if (f && r->op == SERVE_OP_CLI && r->argc)
		json_object_set_new(f, "command", json_string(r->argv[0]));
	if (f && r->id[0] && sbx_id_check(r->id, "", NULL) == 0)
		json_object_set_new(f, "session", json_string(r->id));
	if (f && tenant[0])
		json_object_set_new(f, "tenant", json_string(tenant));
	struct sbx_err ignored = { 0 };
	return sbx_audit_append(&b->st, "serve.call", f, &ignored);
}

/* One call, in a child of its own. */
static _Noreturn void serve_call(struct serve_back *b, const char *msg, size_t n, const int *fds, unsigned nfds)
{
	int sock = fds[0], peer = nfds > 1 ? fds[1] : -1;
	struct serve_req r;
	struct sbx_err err = { 0 };
	char tenant[SBX_ID_MAX + 1] = "", who[64] = "?";
	int rc = serve_req_decode(msg, n, &r, &err);
	if (rc == 0 && (rc = principal(b, &r, peer, tenant, who, &err)) == 0)
		rc = sbx_state_scope(&b->st, tenant[0] ? tenant : NULL, &err);
	if (peer >= 0)
		close(peer);
	if (rc == 0) {
		switch (r.op) {
		case SERVE_OP_CREATE: rc = op_create(b, &r, tenant, sock, &err); break;
		case SERVE_OP_GET: rc = op_get(b, &r, sock, 0, &err); break;
		case SERVE_OP_CONNECT: rc = op_get(b, &r, sock, 1, &err); break;
		case SERVE_OP_LIST: rc = op_list(b, sock, &err); break;
		case SERVE_OP_KILL: rc = op_kill(b, &r, sock, &err); break;
		case SERVE_OP_EXEC: rc = op_exec(b, &r, sock, &err); break;
		case SERVE_OP_TEMPLATES: rc = op_templates(b, tenant, sock, &err); break;
		case SERVE_OP_PS: rc = op_ps(b, &r, sock, &err); break;
		case SERVE_OP_SIGNAL: rc = op_signal(b, &r, sock, &err); break;
		case SERVE_OP_ATTACH: rc = op_attach(b, &r, sock, &err); break;
		case SERVE_OP_PAUSE: rc = op_vmctl(b, &r, SBX_VMCTL_PAUSE, sock, &err); break;
		case SERVE_OP_RESUME: rc = op_vmctl(b, &r, SBX_VMCTL_RESUME, sock, &err); break;
		case SERVE_OP_TIMEOUT: rc = op_timeout(b, &r, 0, sock, &err); break;
		case SERVE_OP_REFRESH: rc = op_timeout(b, &r, 1, sock, &err); break;
		case SERVE_OP_METRICS: rc = op_metrics(b, &r, sock, &err); break;
		case SERVE_OP_FORK: rc = op_fork(b, &r, tenant, sock, &err); break;
		case SERVE_OP_FS: rc = serve_files_fs(&b->st, &r, sock, &err); break;
		case SERVE_OP_DOWNLOAD: rc = serve_files_download(&b->st, &r, sock, &err); break;
		case SERVE_OP_UPLOAD: rc = serve_files_upload(&b->st, &r, sock, &err); break;
		case SERVE_OP_CLI: rc = op_cli(&r, tenant, sock, fds + 2, nfds > 2 ? nfds - 2 : 0, &err); break;
		case SERVE_OP_LOGS: rc = op_logs(b, &r, sock, &err); break;
		case SERVE_OP_SNAPSHOT: rc = op_snapshot(b, &r, tenant, sock, &err); break;
		case SERVE_OP_SNAPSHOTS: rc = op_snapshots(b, &r, tenant, sock, &err); break;
		case SERVE_OP_SNAPSHOT_RM: rc = op_snapshot_rm(b, &r, tenant, sock, &err); break;
		case SERVE_OP_WATCH: rc = serve_files_watch(&b->st, &r, sock, &err); break;
		case SERVE_OP_WHOAMI:
			rc = reply_json(sock, json_pack("{s:b, s:s, s:s}", "ok", 1, "tenant", tenant, "principal", who),
					NULL, 0);
			break;
		default: rc = sbx_err_set(&err, SBX_EXIT_INVALID, 0, "%s is not served yet", serve_op_name(r.op));
		}
	}
	if (rc < 0)
		reply_err(sock, &err);
	if (r.op && r.op != SERVE_OP_LIST && r.op != SERVE_OP_GET && r.op != SERVE_OP_WHOAMI && r.op != SERVE_OP_LOGS &&
	    r.op != SERVE_OP_SNAPSHOTS && r.op != SERVE_OP_TEMPLATES && r.op != SERVE_OP_PS &&
	    r.op != SERVE_OP_ATTACH && r.op != SERVE_OP_METRICS)
		audit_call(b, &r, who, tenant, &err);
	serve_req_free(&r);
	_exit(rc < 0 ? 1 : 0);
}

int serve_back_run(struct serve_back *b, int ctl, pid_t front, volatile int *stop, struct sbx_err *err)
{
	static char msg[SERVE_MSG_MAX + 1];
	while (!*stop) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		struct pollfd p = { .fd = ctl, .events = POLLIN };
		int k = poll(&p, 1, 1000);
		if (k < 0 && errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "poll");
		if (k <= 0)
			continue;
		int fds[6];
		unsigned nfds;
		ssize_t n = serve_recv(ctl, msg, sizeof msg, fds, &nfds, 6);
		if (n == 0 && nfds == 0)
			return 0; /* the front is gone */
		if (n < 0) {
			if (errno == EINTR || errno == EMSGSIZE)
				continue;
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the front's socket");
		}
		if (nfds < 1) /* nowhere to answer */
			continue;
		pid_t pid = fork();
		if (pid == 0) {
			signal(SIGTERM, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			close(ctl);
			serve_call(b, msg, (size_t)n, fds, nfds);
		}
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
	}
	(void)front;
	return 0;
}
