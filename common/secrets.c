#include "secrets.h"
#include "hostpath.h"
#include "policy.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define TLV_HDR 6u

/* Room for the largest frame.  Pages are touched only as they fill;
 * mlock is best effort (RLIMIT_MEMLOCK may be small): the values stay out of
 * swap where the host allows it, and out of core dumps always. */
static int arena(struct sbx_secrets *s, struct sbx_err *err)
{
	s->map_len = SBX_FRAME_HDR + SBX_FRAME_MAX;
	void *p = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		s->map_len = 0;
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot allocate memory for secrets");
	}
	madvise(p, s->map_len, MADV_DONTDUMP);
	madvise(p, s->map_len, MADV_WIPEONFORK);
	mlock(p, s->map_len);
	s->frame = p;
	return 0;
}

void sbx_secrets_fork_keep(struct sbx_secrets *s, int keep)
{
	if (!s->frame)
		return;
	madvise(s->frame, s->map_len, keep ? MADV_KEEPONFORK : MADV_WIPEONFORK);
	if (!keep)
		mlock(s->frame, s->map_len); /* a child's memory is not locked */
}

void sbx_secrets_free(struct sbx_secrets *s)
{
	if (s->frame) {
		explicit_bzero(s->frame, s->frame_len);
		munmap(s->frame, s->map_len);
	}
	explicit_bzero(s, sizeof *s);
}

static void put32(uint8_t *o, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		o[i] = (uint8_t)(v >> (8 * i));
}

static void tlv(struct sbx_secrets *s, uint16_t tag, const void *p, uint32_t n)
{
	uint8_t *o = s->frame + s->frame_len;
	o[0] = (uint8_t)tag;
	o[1] = (uint8_t)(tag >> 8);
	put32(o + 2, n);
	if (n)
		memcpy(o + TLV_HDR, p, n);
	s->frame_len += TLV_HDR + n;
}

/* Patterns, longest first so a value that contains another is replaced
 * whole. */
static int index_frame(struct sbx_secrets *s, struct sbx_err *err)
{
	const char *why = "malformed";
	int n = sbx_secrets_decode(s->frame + SBX_FRAME_HDR, s->frame_len - SBX_FRAME_HDR, s->s, &why);
	if (n < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "bad secrets: %s", why);
	s->n = (unsigned)n;
	for (unsigned i = 0; i < s->n; i++)
		for (unsigned j = i + 1; j < s->n; j++)
			if (s->s[j].len > s->s[i].len) {
				struct sbx_secret_ref t = s->s[i];
				s->s[i] = s->s[j];
				s->s[j] = t;
			}
	memset(s->first, 0, sizeof s->first);
	s->patmax = 0;
	for (unsigned i = 0; i < s->n; i++) {
		/* A file's trailing newline is not part of what a program
		 * prints back ($(cat f) drops it): scrub the value without it. */
		size_t l = s->s[i].len;
		const uint8_t *v = s->s[i].value;
		if (l && v[l - 1] == '\n')
			l--;
		if (l && v[l - 1] == '\r')
			l--;
		s->pat[i] = l;
		if (l) {
			s->first[v[0]] = 1;
			if (l > s->patmax)
				s->patmax = l;
		}
	}
	return 0;
}

int sbx_secrets_args(struct sbx_policy *p, const char *const *specs, unsigned n, struct sbx_err *err)
{
	for (unsigned i = 0; i < n; i++) {
		const char *eq = strchr(specs[i], '=');
		size_t nl = eq ? (size_t)(eq - specs[i]) : 0;
		if (!eq || eq[1] != '@' || !eq[2])
			return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--secret %s: expected NAME=@FILE or NAME=@-",
					   specs[i]);
		if (!sbx_secret_name_ok(specs[i], nl))
			return sbx_err_set(err, SBX_EXIT_USAGE, 0,
					   "--secret: '%.*s' is not a secret name ([A-Z_][A-Z0-9_]*, at most %d)",
					   (int)nl, specs[i], SBX_SECRET_NAME_MAX);
		for (unsigned j = 0; j < i; j++)
			if (!strncmp(specs[j], specs[i], nl + 1))
				return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--secret %.*s is given twice", (int)nl,
						   specs[i]);
		const char *file = eq + 2;
		char path[PATH_MAX];
		if (file[0] == '/' || !strcmp(file, "-")) {
			snprintf(path, sizeof path, "%s", file);
		} else {
			char cwd[PATH_MAX];
			if (!getcwd(cwd, sizeof cwd))
				return sbx_err_set(err, SBX_EXIT_USAGE, errno, "--secret %.*s: cannot resolve %s",
						   (int)nl, specs[i], file);
			snprintf(path, sizeof path, "%s/%s", cwd, file);
		}
		struct sbx_policy_secret *sec = NULL;
		for (unsigned j = 0; j < p->nsecrets; j++)
			if (strlen(p->secrets[j].name) == nl && !strncmp(p->secrets[j].name, specs[i], nl))
				sec = &p->secrets[j];
		if (!sec) {
			if (p->nsecrets >= SBX_POLICY_SECRETS_MAX)
				return sbx_err_set(err, SBX_EXIT_USAGE, 0, "at most %d secrets",
						   SBX_POLICY_SECRETS_MAX);
			sec = &p->secrets[p->nsecrets++];
		}
		memset(sec, 0, sizeof *sec);
		snprintf(sec->name, sizeof sec->name, "%.*s", (int)nl, specs[i]);
		if (strlen(path) >= sizeof sec->from_file)
			return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--secret %s: path too long", sec->name);
		snprintf(sec->from_file, sizeof sec->from_file, "%s", path);
		sec->from_cli = 1;
	}
	return 0;
}

/* Read at most max+1 bytes of fd into out. */
static ssize_t read_bounded(int fd, uint8_t *out, size_t max)
{
	size_t got = 0;
	while (got <= max) {
		ssize_t r = read(fd, out + got, max + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* A secret's file, opened under hostpath.h's rules: a regular file (a
 * FIFO or device could block or never end), never through a link. */
static int open_secret(const struct sbx_policy_secret *ps, const char *tenant, const char *key, struct sbx_err *err)
{
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 };
	if (sbx_hostpath_resolve(tenant, ps->from_file, SBX_HOSTPATH_READ | SBX_HOSTPATH_FOLLOW, key, &hp, err) < 0) {
		if (err && err->code == SBX_EXIT_NOENT)
			err->code = SBX_EXIT_INVALID;
		return -1;
	}
	if (!S_ISREG(hp.st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s is not a regular file", key, ps->from_file);
	int fd = sbx_hostpath_openat(&hp, NULL, O_RDONLY | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "%s: cannot read %s", key, ps->from_file);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s is not a regular file", key, ps->from_file);
	}
	return fd;
}

static int load_one(const struct sbx_policy_secret *ps, const char *tenant, struct sbx_secrets *s, struct sbx_err *err)
{
	size_t room = SBX_FRAME_HDR + SBX_FRAME_MAX - s->frame_len;
	size_t nl = strlen(ps->name);
	if (room < 2 * TLV_HDR + nl)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "secret %s: the secrets exceed %u bytes together",
				   ps->name, SBX_FRAME_MAX);
	/* Read straight into place after the NAME and VALUE headers: the
	 * value is never copied through unlocked memory. */
	uint8_t *val = s->frame + s->frame_len + TLV_HDR + nl + TLV_HDR;
	size_t max = room - 2 * TLV_HDR - nl;
	if (max > SBX_SECRET_VALUE_MAX)
		max = SBX_SECRET_VALUE_MAX;
	size_t len;
	char key[200];
	if (ps->from_cli)
		snprintf(key, sizeof key, "--secret %s", ps->name);
	else
		snprintf(key, sizeof key, "secret %s (secrets.%s)", ps->name,
			 ps->from_env[0] ? "from_env" : "from_file");
	if (ps->from_env[0]) {
		if (sbx_hostpath_env_ok(tenant, ps->from_env, key, err) < 0)
			return -1;
		const char *v = getenv(ps->from_env);
		if (!v)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "secret %s: the environment variable %s is not set", ps->name, ps->from_env);
		len = strlen(v);
		if (len > max)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "secret %s: %s is longer than %zu bytes", ps->name,
					   ps->from_env, max);
		memcpy(val, v, len);
	} else {
		/* stdin is what the caller chose to pipe in. */
		int stdin_ = !strcmp(ps->from_file, "-");
		int fd = stdin_ ? 0 : open_secret(ps, tenant, key, err);
		if (fd < 0)
			return -1;
		ssize_t r = read_bounded(fd, val, max);
		int e = errno;
		if (!stdin_)
			close(fd);
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, e, "secret %s: cannot read %s", ps->name,
					   ps->from_file);
		if ((size_t)r > max) {
			explicit_bzero(val, max + 1);
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "secret %s: %s is longer than %zu bytes", ps->name,
					   stdin_ ? "stdin" : ps->from_file, max);
		}
		len = (size_t)r;
	}
	tlv(s, SBX_T_NAME, ps->name, (uint32_t)nl);
	/* The value is already in place: write its header only. */
	uint8_t *o = s->frame + s->frame_len;
	o[0] = (uint8_t)SBX_T_VALUE;
	o[1] = 0;
	put32(o + 2, (uint32_t)len);
	s->frame_len += TLV_HDR + len;
	return 0;
}

int sbx_secrets_load(const struct sbx_policy *p, const char *tenant, struct sbx_secrets *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	if (!p->nsecrets)
		return 0;
	if (arena(s, err) < 0)
		return -1;
	s->frame_len = SBX_FRAME_HDR;
	for (unsigned i = 0; i < p->nsecrets; i++)
		if (load_one(&p->secrets[i], tenant, s, err) < 0)
			return -1;
	sbx_frame_hdr_put(s->frame, SBX_F_SECRETS, 0, (uint32_t)(s->frame_len - SBX_FRAME_HDR));
	return index_frame(s, err);
}

static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline)
{
	while (n) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR)
			return -1;
		if (r <= 0)
			continue;
		ssize_t got = read(fd, p, n);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0) {
			if (got == 0)
				errno = EPIPE;
			return -1;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int sbx_secrets_read_fd(int fd, struct sbx_secrets *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	if (arena(s, err) < 0)
		return -1;
	uint64_t deadline = sbx_mono_ns() + 30ull * 1000000000u;
	struct sbx_frame f;
	if (read_full(fd, s->frame, SBX_FRAME_HDR, deadline) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot receive the secrets");
	if (sbx_frame_hdr_get(s->frame, &f, SBX_FRAME_MAX) < 0 || f.type != SBX_F_SECRETS)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot receive the secrets: bad frame");
	s->frame_len = SBX_FRAME_HDR + f.len;
	if (read_full(fd, s->frame + SBX_FRAME_HDR, f.len, deadline) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot receive the secrets");
	return index_frame(s, err);
}

static void put_mark(struct sbx_buf *out, const char *name)
{
	sbx_buf_put(out, "[secret:", 8);
	sbx_buf_put(out, name, strlen(name));
	sbx_buf_put(out, "]", 1);
}

/* Scrub w[0..n) into out; with hold, a tail that may begin a value is left
 * unconsumed and its length returned. */
static size_t scrub_run(const struct sbx_secrets *s, const uint8_t *w, size_t n, int hold, struct sbx_buf *out)
{
	size_t i = 0, lit = 0; /* w[lit..i) waits to be copied */
	while (i < n) {
		if (!s->first[w[i]]) {
			i++;
			continue;
		}
		size_t left = n - i;
		int partial = 0, hit = -1;
		for (unsigned k = 0; k < s->n; k++) {
			size_t l = s->pat[k];
			if (!l)
				continue;
			if (l <= left) {
				if (hit < 0 && !memcmp(w + i, s->s[k].value, l))
					hit = (int)k;
			} else if (hold && !memcmp(w + i, s->s[k].value, left)) {
				partial = 1; /* a longer value may complete with the next chunk */
			}
		}
		if (partial) {
			sbx_buf_put(out, w + lit, i - lit);
			return n - i;
		}
		if (hit >= 0) {
			sbx_buf_put(out, w + lit, i - lit);
			put_mark(out, s->s[hit].name);
			i += s->pat[hit];
			lit = i;
			continue;
		}
		i++;
	}
	sbx_buf_put(out, w + lit, n - lit);
	return 0;
}

int sbx_scrub(const struct sbx_secrets *s, struct sbx_scrub *st, const uint8_t *p, size_t n, struct sbx_buf *out)
{
	if (!s || !s->patmax) {
		sbx_buf_put(out, p, n);
		return out->oom ? -1 : 0;
	}
	if (!st->carry && !(st->carry = malloc(s->patmax)))
		return -1;
	uint8_t *w = malloc(st->n + n);
	if (!w)
		return -1;
	memcpy(w, st->carry, st->n);
	memcpy(w + st->n, p, n);
	size_t tot = st->n + n, keep = scrub_run(s, w, tot, 1, out);
	/* keep < patmax: only a proper prefix of a value is ever held */
	memcpy(st->carry, w + tot - keep, keep);
	st->n = keep;
	explicit_bzero(w, tot);
	free(w);
	return out->oom ? -1 : 0;
}

void sbx_scrub_end(struct sbx_scrub *st, struct sbx_buf *out)
{
	if (st->carry) {
		if (out)
			sbx_buf_put(out, st->carry, st->n);
		explicit_bzero(st->carry, st->n);
		free(st->carry);
	}
	st->carry = NULL;
	st->n = 0;
}

char *sbx_scrub_str(const struct sbx_secrets *s, const char *str)
{
	struct sbx_buf b = { 0 };
	if (s && s->patmax)
		scrub_run(s, (const uint8_t *)str, strlen(str), 0, &b);
	else
		sbx_buf_put(&b, str, strlen(str));
	sbx_buf_put(&b, "", 1);
	if (b.oom) {
		sbx_buf_free(&b);
		return NULL;
	}
	return (char *)b.data;
}
