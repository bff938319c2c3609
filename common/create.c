/* Making a session (session.h, sbx_session_create): the policy checked and compiled into the record, the monitor
 * spawned and waited on. */
#include "session.h"
#include "audit.h"
#include "capacity.h"
#include "policy.h"
#include "hostconf.h"
#include "hostpath.h"
#include "netns.h"
#include "aptsrc.h"
#include "pkgrules.h"
#include "secrets.h"
#include "template.h"
#include "util.h"
#include "vmm.h"
#include "workspace.h"
#include "pool.h"
#include "progress.h"
#include "snapshot.h"
#include "trace.h"

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

/* What this build cannot enforce yet is refused, never ignored: a policy
 * that asks for egress or package registries must not get a session that
 * silently lacks them (fail closed). */
static int policy_check(const struct sbx_policy *p, const struct sbx_accel_info *ai, struct sbx_err *err);

static int policy_supported(struct sbx_state *st, const struct sbx_policy *p, const struct sbx_accel_info *ai,
			    struct sbx_err *err)
{
	int rc = policy_check(p, ai, err);
	if (rc < 0) {
		json_t *f = json_pack("{s:s, s:s}", "policy", p->source[0] ? p->source : "(defaults)", "reason",
				      err ? err->msg : "");
		sbx_audit_append(st, "policy.refused", f, NULL);
		json_decref(f);
	}
	return rc;
}

static int policy_check(const struct sbx_policy *p, const struct sbx_accel_info *ai, struct sbx_err *err)
{
	if (p->resources.require_kvm && ai->accel != SBX_ACCEL_KVM)
		return sbx_err_set(
			err, SBX_EXIT_UNAVAIL, 0,
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
static int policy_save(struct sbx_state *st, const char *id, const struct sbx_policy *p, const char *rules,
		       const struct sbx_aptsrc_keys *keys, struct sbx_err *err)
{
	_cleanup_close_ int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	json_t *o = sbx_policy_json(p);
	_cleanup_free_ char *txt = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	json_decref(o);
	if (dfd < 0 || !txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, dfd < 0 ? errno : ENOMEM, "cannot write the policy of %s",
				   id);
	if (sbx_atomic_write_at(dfd, "policy.json", txt, strlen(txt), 0600, err) < 0 ||
	    sbx_aptsrc_keys_save(dfd, keys, err) < 0)
		return -1;
	return rules ? sbx_pkgrules_save(dfd, rules, err) : 0;
}

static void limits_from_policy(const struct sbx_policy *p, struct sbx_limits *l)
{
	sbx_limits_compile(p, l); /* the table's (record.c), then the rest */
	l->cpu_milli = sbx_policy_cpu_limit_milli(p);
	l->ttl_running = p->lifecycle.ttl_counts == SBX_TTL_RUNNING;
	l->ttl_suspend = p->lifecycle.on_ttl == SBX_ON_TTL_SUSPEND;
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
	/* apt's entries come from sbx_aptsrc_resolve (package_rules), one
	 * per suite served. */
	int apt = 0;
	for (unsigned i = 0; i < p->packages.nregistries && k->nreg < SBX_ARRAY_LEN(k->reg); i++) {
		if (p->packages.registries[i].type == SBX_REG_APT) {
			apt = 1;
			continue;
		}
		k->reg[k->nreg].type = p->packages.registries[i].type;
		snprintf(k->reg[k->nreg].url, sizeof k->reg[k->nreg].url, "%s", p->packages.registries[i].url);
		k->nreg++;
	}
	/* Where apt could reach nothing at all, the guest says why itself. */
	k->apt_local = !apt && !l->egress;
	k->max_download = p->packages.max_download;
	k->require_hashes = p->packages.require_hashes;
	k->npm_scripts = p->packages.npm_scripts;
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
	/* A user's directory is copied with that user's rights (disk.c): it
	 * must be one the user can list, and every file in it one the user
	 * can read, else the boot fails. */
	const struct sbx_caller *who = sbx_caller();
	if (who) {
		_cleanup_close_ int dfd = sbx_hostpath_openat(&hp, NULL, O_RDONLY | O_DIRECTORY);
		if (dfd < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "-v %s: cannot read %s", spec, host);
		v->uid = who->uid;
		v->gid = who->gid;
	}
	const char *real = hp.real;
	size_t gl = strlen(guest);
	if (guest[0] != '/' || gl < 2 || gl >= sizeof v->guest ||
	    strspn(guest, "abcdefghijklmnopqrstuvwxyz"
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
	/* Keys added since, at their defaults, hash as before they were: a
	 * create retried across an upgrade is the same request. */
	json_t *pk = json_object_get(pj, "packages"), *lc = json_object_get(pj, "lifecycle");
	if (!strcmp(json_string_value(json_object_get(pk, "npm_scripts")) ?: "", "allow"))
		json_object_del(pk, "npm_scripts");
	if (!strcmp(json_string_value(json_object_get(lc, "on_ttl")) ?: "", "end"))
		json_object_del(lc, "on_ttl");
	char *ptxt = pj ? json_dumps(pj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (ptxt)
		SHA256Update(&c, (const uint8_t *)ptxt, strlen(ptxt));
	free(ptxt);
	json_decref(pj);
	/* The package rules as compiled, lock contents included (only when
	 * there are some, so specs without them hash as before): the same
	 * --id under a changed lock is another request. */
	if (s->limits.packages.rules[0])
		SHA256Update(&c, (const uint8_t *)s->limits.packages.rules, strlen(s->limits.packages.rules));
	SHA256End(&c, out);
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
	json_object_foreach (env, k, v) {
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

/* The request's own names, checked before anything is looked up.  The
 * one check of a given session ID in a create (a new one is minted valid,
 * take_id): the steps after take it as checked. */
static int check_request(const struct sbx_create_opts *o, struct sbx_err *err)
{
	if (o->id && sbx_id_check(o->id, "session", err) < 0)
		return -1;
	if (o->id && sbx_pool_member_id(o->id))
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
			"invalid session ID '%s': IDs starting with '" SBX_POOL_PREFIX "' are the warm pool's", o->id);
	if (o->tenant && sbx_tenant_check(o->tenant, err) < 0)
		return -1;
	if (o->workspace && sbx_workspace_check(o->workspace, err) < 0)
		return -1;
	if (o->nvols > 8)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "at most 8 volumes");
	if (o->workspace && o->nvols > 7)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "at most 7 volumes with a workspace");
	return 0;
}

/* What the session starts from: a template, or a snapshot (-s, or a
 * template that holds one), restored rather than booted (snapshot.h). */
static int resolve_source(struct sbx_state *st, const struct sbx_create_opts *o, struct sbx_template *t,
			  struct sbx_snapshot *snap, int *restore, struct sbx_err *err)
{
	*restore = 0;
	if (o->snapshot_direct) { /* a fork's (sbx_snapshot_fork): as -s would find it */
		*snap = *o->snapshot_direct;
		if (sbx_snapshot_template(st, snap, t, err) < 0)
			return -1;
		if (o->tenant && t->owner[0] && strcmp(t->owner, o->tenant))
			return sbx_err_set(err, SBX_EXIT_NOENT, 0, "snapshot %s: its template %s is gone", snap->ref,
					   t->ref);
		*restore = 1;
	} else if (o->snapshot) {
		if (o->tmpl)
			return sbx_err_set(err, SBX_EXIT_USAGE, 0, "-s and -t cannot be used together");
		if (sbx_snapshot_find(st, o->tenant, o->snapshot, snap, err) < 0 ||
		    sbx_snapshot_template(st, snap, t, err) < 0)
			return -1;
		/* Its template is the operator's or the tenant's own, as sbx
		 * wrote it; anything else is not there for this tenant. */
		if (o->tenant && t->owner[0] && strcmp(t->owner, o->tenant))
			return sbx_err_set(err, SBX_EXIT_NOENT, 0, "snapshot %s: its template %s is gone", snap->ref,
					   t->ref);
		*restore = 1;
	} else if (sbx_template_resolve(st, o->tenant, o->tmpl ? o->tmpl : "default", t, err) < 0) {
		return -1;
	} else if (t->snapshot) {
		if (sbx_snapshot_of_template(t, snap, err) < 0)
			return -1;
		*restore = 1;
	}
	return 0;
}

/* Everything a create decides before it takes the global lock. */
struct plan {
	struct sbx_template t;
	struct sbx_snapshot snap;
	int restore;
	struct sbx_accel_info ai;
	const struct sbx_vmm_ops *vmm;
	int needs_nic;
	struct sbx_policy own; /* the defaults, or the policy under a tenant's ceilings */
	const struct sbx_policy *pol;
	/* packages.allow, deny, pins, lock compiled (pkgrules.h), and as
	 * the JSON written beside the record; NULL: none */
	struct sbx_pkgrules rules;
	char *rules_txt;
	struct sbx_aptsrc_keys apt_keys; /* apt's keyrings, for beside the record (aptsrc.h) */
};

static void ceiling_u64(uint64_t *v, uint64_t max)
{
	if (max && (!*v || *v > max))
		*v = max;
}

static void apply_ceilings(struct sbx_policy *p, const struct sbx_quota *q)
{
	ceiling_u64(&p->resources.disk_bps, q->session_disk_bps);
	ceiling_u64(&p->network.rate, q->session_network_rate);
	if (q->session_disk_iops && (!p->resources.disk_iops || p->resources.disk_iops > q->session_disk_iops))
		p->resources.disk_iops = q->session_disk_iops;
}

int sbx_policy_ceilings(const char *tenant, struct sbx_policy *p, struct sbx_err *err)
{
	struct sbx_quota q;
	if (!tenant || !tenant[0])
		return 0;
	if (sbx_hostconf_tenant_quota(tenant, &q, err) < 0)
		return -1;
	apply_ceilings(p, &q);
	return 0;
}

/* The same for a create, on a copy of the caller's policy when a ceiling
 * is set (a shallow copy: the caller's policy owns what it points to). */
static int tenant_ceilings(const char *tenant, struct plan *pl, struct sbx_err *err)
{
	struct sbx_quota q;
	if (!tenant || !tenant[0])
		return 0;
	if (sbx_hostconf_tenant_quota(tenant, &q, err) < 0)
		return -1;
	if (!q.session_disk_bps && !q.session_disk_iops && !q.session_network_rate)
		return 0;
	if (pl->pol != &pl->own) {
		pl->own = *pl->pol;
		pl->pol = &pl->own;
	}
	apply_ceilings(&pl->own, &q);
	return 0;
}

static void plan_done(struct plan *pl)
{
	sbx_pkgrules_free(&pl->rules);
	free(pl->rules_txt);
	pl->rules_txt = NULL;
	sbx_aptsrc_keys_free(&pl->apt_keys);
}

/* The package rules, lock files read and parsed (pkgrules.h), into the
 * record's limits.packages; refused like a policy that does not fit. */
static int package_rules(struct sbx_state *st, const struct sbx_create_opts *o, struct plan *pl, struct sbx_session *s,
			 struct sbx_err *err)
{
	const char *etc = getenv("SBX_APT_ETC"); /* the host's apt configuration; tests give their own */
	if (sbx_pkgrules_compile(pl->pol, o->tenant, &pl->rules, &s->limits.packages, &pl->rules_txt, err) == 0 &&
	    sbx_aptsrc_resolve(st, pl->pol, &pl->t, o->tenant, etc && *etc ? etc : "/etc/apt", &s->limits.packages,
			       &pl->apt_keys, err) == 0)
		return 0;
	json_t *f = json_pack("{s:s, s:s}", "policy", pl->pol->source[0] ? pl->pol->source : "(defaults)", "reason",
			      err ? err->msg : "");
	sbx_audit_append(st, "policy.refused", f, NULL);
	json_decref(f);
	return -1;
}

/* The backend, the policy's support and the secrets (read before anything
 * exists: a secret that cannot be read fails the create with nothing to
 * clean up). */
static int choose(struct sbx_state *st, const struct sbx_create_opts *o, struct plan *pl, struct sbx_secrets *sec,
		  struct sbx_err *err)
{
	if (sbx_accel_get(st, pl->t.kernel, pl->t.initrd, &pl->ai, err) < 0)
		return -1;
	pl->pol = o->policy;
	if (!pl->pol) {
		sbx_policy_defaults(&pl->own);
		pl->pol = &pl->own;
	}
	if (tenant_ceilings(o->tenant, pl, err) < 0)
		return -1;
	pl->needs_nic = pl->pol->network.egress != SBX_EGRESS_NONE || pl->pol->packages.mode != SBX_PKG_OFFLINE ||
			(o->pool && o->pool_nic);
	/* A snapshot has no NIC, and a restore cannot add one (snapshot.h). */
	if (o->pool && o->pool_nic && pl->restore)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "template %s@%s holds a snapshot: its pool members cannot have a network", pl->t.ref,
				   pl->t.version);
	if (sbx_vmm_choose(pl->ai.accel, pl->needs_nic, &pl->vmm, err) < 0 ||
	    policy_supported(st, pl->pol, &pl->ai, err) < 0)
		return -1;
	return sbx_secrets_load(pl->pol, o->tenant, sec, err);
}

/* The record as the request asks for it (its ID comes under the lock). */
static int fill_record(const struct sbx_create_opts *o, const struct plan *pl, const struct sbx_secrets *sec,
		       struct sbx_session *s, struct sbx_err *err)
{
	const struct sbx_template *t = &pl->t;
	memset(s, 0, sizeof *s);
	snprintf(s->state, sizeof s->state, "creating");
	snprintf(s->tmpl_name, sizeof s->tmpl_name, "%s", t->ref);
	snprintf(s->tmpl_owner, sizeof s->tmpl_owner, "%s", t->owner);
	snprintf(s->tmpl_version, sizeof s->tmpl_version, "%s", t->version);
	snprintf(s->tmpl_dir, sizeof s->tmpl_dir, "%s", t->dir);
	snprintf(s->tmpl_req, sizeof s->tmpl_req, "%s", o->tmpl ? o->tmpl : "default");
	snprintf(s->tenant, sizeof s->tenant, "%s", o->tenant ? o->tenant : "");
	s->vcpus = o->vcpus ? o->vcpus : 1;
	s->memory_mib = o->memory_mib ? o->memory_mib : 256;
	snprintf(s->accel, sizeof s->accel, "%s", pl->ai.accel == SBX_ACCEL_KVM ? "kvm" : "tcg");
	snprintf(s->vmm, sizeof s->vmm, "%s", pl->vmm->name);
	sbx_boot_id(s->boot_id, sizeof s->boot_id);
	s->created_ns = sbx_now_ns();
	snprintf(s->workspace, sizeof s->workspace, "%s", o->workspace ? o->workspace : "");
	for (unsigned i = 0; i < o->nvols; i++)
		if (parse_volume(o->vols[i], o->tenant, &s->vols[s->nvols++], err) < 0)
			return -1;
	limits_from_policy(pl->pol, &s->limits);
	/* A NIC for egress and for the package cache, both in the proxy; a
	 * warm-pool member's leads nowhere until its claim (pool.h). */
	if (pl->needs_nic)
		sbx_netns_mac_new(s->mac);
	if (o->pool) {
		s->pool = 1;
		s->limits.ttl_ms = 0; /* a claim gives it the TTL of its session */
	}
	if (pl->restore && sbx_snapshot_apply(&pl->snap, o, pl->pol, s, err) < 0)
		return -1;
	if (session_env(t, o, sec, s, err) < 0)
		return -1;
	spec_hash(s, pl->pol, s->spec);
	return 0;
}

/* Under the global lock: the session's ID, given or new.  1 when a session
 * of that ID and spec is already running (*s is its record), 0 when the
 * ID is free. */
static int take_id(struct sbx_state *st, const struct sbx_create_opts *o, struct sbx_session *s, struct sbx_err *err)
{
	char id[SBX_ID_MAX + 1];
	if (o->id) {
		snprintf(id, sizeof id, "%s", o->id);
	} else {
		do
			(o->pool ? sbx_pool_id_new : sbx_id_new)(id, sizeof id);
		while (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0);
	}
	snprintf(s->id, sizeof s->id, "%s", id);
	snprintf(err ? err->session : (char[1]){ 0 }, err ? sizeof err->session : 1, "%s", id);
	if (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
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
	return 1;
}

/* Still under the lock: room for it (capacity, its workspace) and its
 * source still there.  sbx-snapshot rm and template rm take the lock
 * too: from here on they see the record that names them, or we see them
 * gone and are refused before anything exists. */
static int admit(struct sbx_state *st, const struct sbx_create_opts *o, const struct plan *pl,
		 const struct sbx_session *s, struct sbx_err *err)
{
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
	if (pl->restore && sbx_snapshot_present(&pl->snap, err) < 0)
		return -1;
	char tm[700];
	snprintf(tm, sizeof tm, "%s/manifest.json", pl->t.dir);
	if (access(tm, F_OK) < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "template %s@%s was removed meanwhile", pl->t.ref,
				   pl->t.version);
	return 0;
}

/* A claim that failed after its commit: the session it made goes (by its
 * monitor, or here as sbx-kill would), then the global lock is taken again
 * for the cold boot, with the ID free once more. */
static int undo_claim(struct sbx_state *st, int *g, const char *id, struct sbx_err *err)
{
	int gone;
	sbx_session_destroy(st, id, &gone, NULL);
	if ((*g = sbx_lock_global(st, err)) < 0)
		return -1;
	if (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
	    faccessat(st->rsessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is being created or destroyed", id);
	return 0;
}

/* Record intent first (every resource is named by the ID, so a create
 * killed at any point leaves only what sbx-kill and sbx-gc reclaim),
 * release the global lock (*g), start the monitor and wait for the guest.
 * One unwind: whatever failed, the session is reclaimed. */
static int commit_and_spawn(struct sbx_state *st, const struct sbx_create_opts *o, const struct plan *pl,
			    const struct sbx_secrets *sec, int *g, struct sbx_session *s, struct sbx_err *err)
{
	const char *id = s->id;
	const struct sbx_policy *pol = pl->pol;
	if (mkdirat(st->sessions_fd, id, 0700) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the session directory");
	if (sbx_record_save(st, s, err) < 0 || policy_save(st, id, pol, pl->rules_txt, &pl->apt_keys, err) < 0) {
		sbx_rm_rf_at(st->sessions_fd, id);
		return -1;
	}
	int p[2] = { -1, -1 }, sp[2] = { -1, -1 }, rc = -1;
	_cleanup_close_ int lock = sbx_lock_session(st, id, 1, 1, err);
	if (lock < 0) {
		if (lock == -2)
			sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is locked", id);
		goto fail;
	}
	close(*g);
	*g = -1;
	if (pipe2(p, O_CLOEXEC) < 0 || (sec->n && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the monitor's pipes");
		goto fail;
	}
	if (spawn_monitor(id, lock, p[1], sp[1], pol, err) < 0)
		goto fail;
	close(p[1]);
	p[1] = -1;
	if (sec->n) {
		close(sp[1]);
		sp[1] = -1;
		send_secrets(sp[0], sec);
		close(sp[0]); /* the monitor reads them to their end */
		sp[0] = -1;
	}
	/* The monitor enforces the boot deadline; this one only guards
	 * against a monitor that hangs, so it is longer. */
	if (await_ready(p[0], sbx_boot_timeout_s() + 30, o->progress_fd > 0 ? o->progress_fd : -1, err) < 0) {
		/* The monitor cleans up after itself; if it died instead, its
		 * lock is free and we reclaim what it left. */
		close(lock);
		lock = sbx_lock_session(st, id, 0, 0, NULL);
		if (lock < 0)
			lock = -3; /* its monitor has it: not ours to reclaim */
		goto fail;
	}
	rc = 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (p[i] >= 0)
			close(p[i]);
		if (sp[i] >= 0)
			close(sp[i]);
	}
	if (rc < 0 && lock != -3)
		sbx_session_reclaim(st, id);
	return rc;
}

int sbx_session_create(struct sbx_state *st, const struct sbx_create_opts *o, struct sbx_session *s, int *existed,
		       struct sbx_err *err)
{
	/* make bench: where a create's time goes before the monitor's own
	 * trace (boot.monitor) or a claim's (claim.client) takes over. */
	_cleanup_trace_ struct sbx_trace tr;
	sbx_trace_begin(&tr, o->pool ? "create.pool" : "create.client");
	*existed = 0;
	__attribute__((cleanup(plan_done))) struct plan pl = { 0 };
	if (check_request(o, err) < 0 || resolve_source(st, o, &pl.t, &pl.snap, &pl.restore, err) < 0)
		return -1;
	sbx_trace_step(&tr, "template");
	_cleanup_secrets_ struct sbx_secrets sec = { 0 };
	if (choose(st, o, &pl, &sec, err) < 0)
		return -1;
	sbx_trace_step(&tr, "accel");
	if (fill_record(o, &pl, &sec, s, err) < 0 || package_rules(st, o, &pl, s, err) < 0)
		return -1;
	if (pl.rules_txt)
		spec_hash(s, pl.pol, s->spec); /* again, with the rules */
	sbx_trace_step(&tr, "checks");
	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	int r = take_id(st, o, s, err);
	if (r != 0) {
		*existed = r > 0;
		return r < 0 ? -1 : 0;
	}
	/* A warm-pool member that fits serves the request (pool.h); when none
	 * does, or its claim fails, the session boots cold as ever. */
	sbx_trace_step(&tr, "lock");
	/* Not with package rules or apt's keyrings: a member's proxy
	 * started without them. */
	if (!o->pool && !o->snapshot && !o->snapshot_direct && !pl.rules_txt && !pl.apt_keys.n &&
	    sbx_pool_request_fits(o, pl.pol)) {
		r = sbx_pool_claim(st, &g, s, pl.pol, &sec, err);
		if (r == SBX_POOL_UNDO)
			r = undo_claim(st, &g, s->id, err);
		sbx_trace_step(&tr, "claim");
		if (r != 0) {
			sbx_trace_end(&tr, r > 0);
			return r < 0 ? -1 : 0;
		}
	}
	if (admit(st, o, &pl, s, err) < 0 || commit_and_spawn(st, o, &pl, &sec, &g, s, err) < 0)
		return -1;
	sbx_trace_step(&tr, "booted");
	char id[SBX_ID_MAX + 1]; /* the load overwrites *s */
	snprintf(id, sizeof id, "%s", s->id);
	r = sbx_record_load(st, id, s, err);
	sbx_trace_end(&tr, r == 0);
	return r;
}
