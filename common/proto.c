/* Frame and TLV codec: see proto.h.  Hand-written because it is the whole
 * of a tiny fixed binary format shared with a static PID 1; a general
 * serialization library would be larger than the format. */
#include "proto.h"

#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *o, uint32_t v)
{
	o[0] = (uint8_t)v;
	o[1] = (uint8_t)(v >> 8);
	o[2] = (uint8_t)(v >> 16);
	o[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *i)
{
	return (uint32_t)i[0] | (uint32_t)i[1] << 8 | (uint32_t)i[2] << 16 | (uint32_t)i[3] << 24;
}

const char *sbx_reason_name(uint32_t reason)
{
	static const char *const names[] = {
		"none", "exited", "signalled", "timeout", "killed", "oom", "session-lost"
	};
	return reason <= SBX_R_MAX ? names[reason] : "unknown";
}

void sbx_frame_hdr_put(uint8_t *out, uint8_t type, uint32_t stream, uint32_t len)
{
	put32(out, len);
	out[4] = type;
	out[5] = 0;
	out[6] = out[7] = 0;
	put32(out + 8, stream);
}

int sbx_frame_hdr_get(const uint8_t *in, struct sbx_frame *f, uint32_t max)
{
	f->len = get32(in);
	f->type = in[4];
	f->flags = in[5];
	f->stream = get32(in + 8);
	f->payload = NULL;
	if (f->type == 0 || f->type > SBX_F_TYPE_MAX || f->flags || in[6] || in[7])
		return -1;
	if (f->len > max || f->len > SBX_FRAME_MAX)
		return -1;
	return 0;
}

void sbx_buf_free(struct sbx_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}

void sbx_buf_reset(struct sbx_buf *b)
{
	b->len = 0;
	b->oom = 0;
}

int sbx_buf_put(struct sbx_buf *b, const void *p, size_t n)
{
	if (b->oom)
		return -1;
	if (n > SIZE_MAX / 2 - b->len) {
		b->oom = 1;
		return -1;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *d = realloc(b->data, cap);
		if (!d) {
			b->oom = 1;
			return -1;
		}
		b->data = d;
		b->cap = cap;
	}
	if (n && p) /* p == NULL: sbx_buf_reserve */
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

size_t sbx_frame_begin(struct sbx_buf *b, uint8_t type, uint32_t stream)
{
	uint8_t h[SBX_FRAME_HDR];
	size_t off = b->len;
	sbx_frame_hdr_put(h, type, stream, 0);
	sbx_buf_put(b, h, sizeof h);
	return off;
}

int sbx_frame_end(struct sbx_buf *b, size_t off)
{
	if (b->oom)
		return -1;
	size_t n = b->len - off - SBX_FRAME_HDR;
	if (n > SBX_FRAME_MAX) {
		b->len = off; /* drop the oversized frame whole */
		return -1;
	}
	put32(b->data + off, (uint32_t)n);
	return 0;
}

int sbx_tlv_put(struct sbx_buf *b, uint16_t tag, const void *p, uint32_t n)
{
	uint8_t h[6] = { (uint8_t)tag, (uint8_t)(tag >> 8) };
	put32(h + 2, n);
	sbx_buf_put(b, h, sizeof h);
	return sbx_buf_put(b, p, n);
}

int sbx_tlv_str(struct sbx_buf *b, uint16_t tag, const char *s)
{
	size_t n = strlen(s);
	if (n > SBX_FRAME_MAX) {
		b->oom = 1;
		return -1;
	}
	return sbx_tlv_put(b, tag, s, (uint32_t)n);
}

int sbx_tlv_u32(struct sbx_buf *b, uint16_t tag, uint32_t v)
{
	uint8_t o[4];
	put32(o, v);
	return sbx_tlv_put(b, tag, o, 4);
}

int sbx_tlv_u64(struct sbx_buf *b, uint16_t tag, uint64_t v)
{
	uint8_t o[8];
	put32(o, (uint32_t)v);
	put32(o + 4, (uint32_t)(v >> 32));
	return sbx_tlv_put(b, tag, o, 8);
}

int sbx_frame_raw(struct sbx_buf *b, uint8_t type, uint32_t stream, const void *p, uint32_t n)
{
	size_t off = sbx_frame_begin(b, type, stream);
	sbx_buf_put(b, p, n);
	return sbx_frame_end(b, off);
}

int sbx_frame_window(struct sbx_buf *b, uint32_t stream, uint32_t n)
{
	uint8_t le[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };
	return sbx_frame_raw(b, SBX_F_WINDOW, stream, le, 4);
}

void sbx_tlv_init(struct sbx_tlv_it *it, const uint8_t *p, size_t n)
{
	it->p = p;
	it->left = n;
}

int sbx_tlv_next(struct sbx_tlv_it *it, uint16_t *tag, const uint8_t **val, uint32_t *n)
{
	if (it->left == 0)
		return 0;
	if (it->left < 6)
		return -1;
	*tag = (uint16_t)(it->p[0] | it->p[1] << 8);
	*n = get32(it->p + 2);
	if (*n > it->left - 6)
		return -1;
	*val = it->p + 6;
	it->p += 6 + (size_t)*n;
	it->left -= 6 + (size_t)*n;
	return 1;
}

int sbx_tlv_as_u32(const uint8_t *val, uint32_t n, uint32_t *out)
{
	if (n != 4)
		return -1;
	*out = get32(val);
	return 0;
}

int sbx_tlv_as_u64(const uint8_t *val, uint32_t n, uint64_t *out)
{
	if (n != 8)
		return -1;
	*out = (uint64_t)get32(val) | (uint64_t)get32(val + 4) << 32;
	return 0;
}

int sbx_tlv_as_str(const uint8_t *val, uint32_t n, char *out, size_t cap)
{
	if (n >= cap || memchr(val, 0, n))
		return -1;
	memcpy(out, val, n);
	out[n] = 0;
	return 0;
}

static char *dupstr(const uint8_t *val, uint32_t n)
{
	if (memchr(val, 0, n))
		return NULL;
	char *s = malloc((size_t)n + 1);
	if (!s)
		return NULL;
	memcpy(s, val, n);
	s[n] = 0;
	return s;
}

static int push(char ***v, size_t *c, size_t max, char *s)
{
	if (*c >= max)
		return -1;
	char **nv = realloc(*v, (*c + 2) * sizeof **v);
	if (!nv)
		return -1;
	*v = nv;
	nv[(*c)++] = s;
	nv[*c] = NULL;
	return 0;
}

void sbx_exec_req_free(struct sbx_exec_req *r)
{
	for (size_t i = 0; i < r->argc; i++)
		free(r->argv[i]);
	for (size_t i = 0; i < r->envc; i++)
		free(r->env[i]);
	for (size_t i = 0; i < r->env_secretc; i++)
		free(r->env_secret[i]);
	free(r->argv);
	free(r->env);
	free(r->env_secret);
	free(r->cwd);
	memset(r, 0, sizeof *r);
}

/* A variable name as env.h has it, [A-Za-z_][A-Za-z0-9_]*, at most 128. */
static int env_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 128)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (i && c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

/* One SBX_T_RLIMIT: a resource the kernel knows (16 of them), not given
 * twice, its soft limit within its hard one. */
static int rlimit_decode(struct sbx_exec_req *r, const uint8_t *val, uint32_t vn, const char **why)
{
	if (vn != 20) {
		*why = "resource limit has the wrong size";
		return -1;
	}
	struct sbx_rlimit l = { .resource = get32(val),
				.soft = (uint64_t)get32(val + 4) | (uint64_t)get32(val + 8) << 32,
				.hard = (uint64_t)get32(val + 12) | (uint64_t)get32(val + 16) << 32 };
	if (l.resource >= SBX_EXEC_RLIMITS_MAX || l.soft > l.hard || r->nrlimits == SBX_EXEC_RLIMITS_MAX) {
		*why = "resource limit out of range";
		return -1;
	}
	for (unsigned i = 0; i < r->nrlimits; i++)
		if (r->rlimits[i].resource == l.resource) {
			*why = "resource limit given twice";
			return -1;
		}
	r->rlimits[r->nrlimits++] = l;
	return 0;
}

int sbx_exec_req_decode(const uint8_t *p, size_t n, struct sbx_exec_req *r, const char **why)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *val;
	uint32_t vn;
	int rc;

	memset(r, 0, sizeof *r);
	sbx_tlv_init(&it, p, n);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &vn)) == 1) {
		char *s = NULL;
		uint32_t *u = NULL;
		switch (tag) {
		case SBX_T_ARGV:
		case SBX_T_ENV:
			if (!(s = dupstr(val, vn))) {
				*why = "string holds a NUL byte";
				goto bad;
			}
			if (tag == SBX_T_ENV && (!strchr(s, '=') || s[0] == '=')) {
				free(s);
				*why = "environment entry is not NAME=VALUE";
				goto bad;
			}
			if (tag == SBX_T_ARGV ? push(&r->argv, &r->argc, SBX_MAX_ARGS, s)
					      : push(&r->env, &r->envc, SBX_MAX_ENV, s)) {
				free(s);
				*why = "too many arguments or environment entries";
				goto bad;
			}
			break;
		case SBX_T_ENV_SECRET: {
			const char *eq;
			if (!(s = dupstr(val, vn)) || !(eq = strchr(s, '=')) || !env_name_ok(s, (size_t)(eq - s)) ||
			    !sbx_secret_name_ok(eq + 1, strlen(eq + 1))) {
				free(s);
				*why = "secret environment entry is not NAME=SECRET";
				goto bad;
			}
			if (push(&r->env_secret, &r->env_secretc, SBX_SECRETS_MAX * 2u, s)) {
				free(s);
				*why = "too many secret environment entries";
				goto bad;
			}
			break;
		}
		case SBX_T_CWD:
			if (r->cwd || !(r->cwd = dupstr(val, vn)) || r->cwd[0] != '/') {
				*why = "working directory must be one absolute path";
				goto bad;
			}
			break;
		case SBX_T_TIMEOUT_MS: u = &r->timeout_ms; break;
		case SBX_T_FLAGS: u = &r->flags; break;
		case SBX_T_ROWS: u = &r->rows; break;
		case SBX_T_COLS: u = &r->cols; break;
		case SBX_T_UID:
			u = &r->uid;
			r->have_uid = 1;
			break;
		case SBX_T_GID:
			u = &r->gid;
			r->have_gid = 1;
			break;
		case SBX_T_PIDS_MAX: u = &r->pids_max; break;
		case SBX_T_SESSION_PIDS: u = &r->session_pids; break;
		case SBX_T_MEMORY_MAX:
			if (sbx_tlv_as_u64(val, vn, &r->memory_max)) {
				*why = "numeric field has the wrong size";
				goto bad;
			}
			break;
		case SBX_T_RLIMIT:
			if (rlimit_decode(r, val, vn, why) < 0)
				goto bad;
			break;
		default: *why = "unknown field in exec request"; goto bad;
		}
		if (u && sbx_tlv_as_u32(val, vn, u)) {
			*why = "numeric field has the wrong size";
			goto bad;
		}
	}
	if (rc < 0) {
		*why = "truncated field in exec request";
		goto bad;
	}
	if (r->argc == 0 || r->argv[0][0] == 0) {
		*why = "empty command";
		goto bad;
	}
	if (r->flags &
	    ~(uint32_t)(SBX_EXEC_PTY | SBX_EXEC_STDIN | SBX_EXEC_DETACH | SBX_EXEC_COPY | SBX_EXEC_OUT_WINDOW)) {
		*why = "unknown exec flags";
		goto bad;
	}
	if (r->rows > 65535 || r->cols > 65535) {
		*why = "terminal size out of range";
		goto bad;
	}
	return 0;
bad:
	sbx_exec_req_free(r);
	return -1;
}

int sbx_exec_req_encode(struct sbx_buf *b, uint32_t stream, const struct sbx_exec_req *r)
{
	size_t off = sbx_frame_begin(b, SBX_F_EXEC, stream);
	for (size_t i = 0; i < r->argc; i++)
		sbx_tlv_str(b, SBX_T_ARGV, r->argv[i]);
	for (size_t i = 0; i < r->envc; i++)
		sbx_tlv_str(b, SBX_T_ENV, r->env[i]);
	for (size_t i = 0; i < r->env_secretc; i++)
		sbx_tlv_str(b, SBX_T_ENV_SECRET, r->env_secret[i]);
	if (r->cwd)
		sbx_tlv_str(b, SBX_T_CWD, r->cwd);
	sbx_tlv_u32(b, SBX_T_TIMEOUT_MS, r->timeout_ms);
	sbx_tlv_u32(b, SBX_T_FLAGS, r->flags);
	if (r->rows || r->cols) {
		sbx_tlv_u32(b, SBX_T_ROWS, r->rows);
		sbx_tlv_u32(b, SBX_T_COLS, r->cols);
	}
	if (r->have_uid)
		sbx_tlv_u32(b, SBX_T_UID, r->uid);
	if (r->have_gid)
		sbx_tlv_u32(b, SBX_T_GID, r->gid);
	if (r->pids_max)
		sbx_tlv_u32(b, SBX_T_PIDS_MAX, r->pids_max);
	if (r->session_pids)
		sbx_tlv_u32(b, SBX_T_SESSION_PIDS, r->session_pids);
	if (r->memory_max)
		sbx_tlv_u64(b, SBX_T_MEMORY_MAX, r->memory_max);
	for (unsigned i = 0; i < r->nrlimits && i < SBX_EXEC_RLIMITS_MAX; i++) {
		uint8_t o[20];
		put32(o, r->rlimits[i].resource);
		put32(o + 4, (uint32_t)r->rlimits[i].soft);
		put32(o + 8, (uint32_t)(r->rlimits[i].soft >> 32));
		put32(o + 12, (uint32_t)r->rlimits[i].hard);
		put32(o + 16, (uint32_t)(r->rlimits[i].hard >> 32));
		sbx_tlv_put(b, SBX_T_RLIMIT, o, 20);
	}
	return sbx_frame_end(b, off);
}

void sbx_error_decode(const uint8_t *p, size_t n, uint32_t *code, char *msg, size_t cap)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vn;
	sbx_tlv_init(&it, p, n);
	while (sbx_tlv_next(&it, &tag, &v, &vn) == 1) {
		if (tag == SBX_T_MSG)
			sbx_tlv_as_str(v, vn, msg, cap);
		else if (tag == SBX_T_CODE)
			sbx_tlv_as_u32(v, vn, code);
	}
}

int sbx_exit_decode(const uint8_t *p, size_t n, struct sbx_exit_info *e)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *val;
	uint32_t vn;
	int rc;

	memset(e, 0, sizeof *e);
	sbx_tlv_init(&it, p, n);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &vn)) == 1) {
		int bad = 0;
		switch (tag) {
		case SBX_T_STATUS: bad = sbx_tlv_as_u32(val, vn, &e->status); break;
		case SBX_T_SIGNO: bad = sbx_tlv_as_u32(val, vn, &e->signo); break;
		case SBX_T_REASON: bad = sbx_tlv_as_u32(val, vn, &e->reason); break;
		case SBX_T_WALL_US: bad = sbx_tlv_as_u64(val, vn, &e->wall_us); break;
		case SBX_T_CPU_USER_US: bad = sbx_tlv_as_u64(val, vn, &e->cpu_user_us); break;
		case SBX_T_CPU_SYS_US: bad = sbx_tlv_as_u64(val, vn, &e->cpu_sys_us); break;
		case SBX_T_MEM_PEAK: bad = sbx_tlv_as_u64(val, vn, &e->mem_peak); break;
		case SBX_T_PIDS_HIT: bad = sbx_tlv_as_u64(val, vn, &e->pids_hit); break;
		case SBX_T_DISK_FULL: bad = sbx_tlv_as_u32(val, vn, &e->disk_full); break;
		default: break; /* newer guests may report more; ignore */
		}
		if (bad)
			return -1;
	}
	if (rc < 0 || e->reason == SBX_R_NONE || e->reason > SBX_R_MAX || e->status > 255 || e->signo > 64 ||
	    (e->disk_full & ~(SBX_DISK_FULL_SCRATCH | SBX_DISK_FULL_VOLUME)))
		return -1;
	return 0;
}

int sbx_exit_encode(struct sbx_buf *b, uint32_t stream, const struct sbx_exit_info *e)
{
	size_t off = sbx_frame_begin(b, SBX_F_EXIT, stream);
	sbx_tlv_u32(b, SBX_T_STATUS, e->status);
	sbx_tlv_u32(b, SBX_T_SIGNO, e->signo);
	sbx_tlv_u32(b, SBX_T_REASON, e->reason);
	sbx_tlv_u64(b, SBX_T_WALL_US, e->wall_us);
	sbx_tlv_u64(b, SBX_T_CPU_USER_US, e->cpu_user_us);
	sbx_tlv_u64(b, SBX_T_CPU_SYS_US, e->cpu_sys_us);
	sbx_tlv_u64(b, SBX_T_MEM_PEAK, e->mem_peak);
	if (e->pids_hit)
		sbx_tlv_u64(b, SBX_T_PIDS_HIT, e->pids_hit);
	if (e->disk_full)
		sbx_tlv_u32(b, SBX_T_DISK_FULL, e->disk_full);
	return sbx_frame_end(b, off);
}

int sbx_buf_reserve(struct sbx_buf *b, size_t n)
{
	size_t len = b->len;
	if (sbx_buf_put(b, NULL, n) < 0)
		return -1;
	b->len = len;
	return 0;
}

int sbx_secret_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > SBX_SECRET_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}

int sbx_secrets_decode(const uint8_t *p, size_t n, struct sbx_secret_ref *out, const char **why)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *val;
	uint32_t vn;
	int rc, count = 0, named = 0;

	sbx_tlv_init(&it, p, n);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &vn)) == 1) {
		if (tag == SBX_T_NAME) {
			if (named) {
				*why = "secret name without a value";
				return -1;
			}
			if (count >= SBX_SECRETS_MAX) {
				*why = "too many secrets";
				return -1;
			}
			if (!sbx_secret_name_ok((const char *)val, vn)) {
				*why = "bad secret name";
				return -1;
			}
			memcpy(out[count].name, val, vn);
			out[count].name[vn] = 0;
			for (int i = 0; i < count; i++)
				if (!strcmp(out[i].name, out[count].name)) {
					*why = "secret given twice";
					return -1;
				}
			named = 1;
		} else if (tag == SBX_T_VALUE) {
			if (!named) {
				*why = "secret value without a name";
				return -1;
			}
			if (vn > SBX_SECRET_VALUE_MAX) {
				*why = "secret value too long";
				return -1;
			}
			out[count].value = val;
			out[count].len = vn;
			count++;
			named = 0;
		} else {
			*why = "unknown field in secrets";
			return -1;
		}
	}
	if (rc < 0) {
		*why = "truncated field in secrets";
		return -1;
	}
	if (named) {
		*why = "secret name without a value";
		return -1;
	}
	return count;
}

/* ---- port forwarding (sbx-port) ------------------------------------------- */

int sbx_port_req_encode(struct sbx_buf *b, const struct sbx_port_req *r)
{
	size_t off = sbx_frame_begin(b, SBX_F_PORT, 0);
	sbx_tlv_u32(b, SBX_T_OP, r->op);
	if (r->port)
		sbx_tlv_u32(b, SBX_T_PORT, r->port);
	if (r->addr[0])
		sbx_tlv_str(b, SBX_T_ADDR, r->addr);
	return sbx_frame_end(b, off);
}

int sbx_port_req_decode(const uint8_t *p, size_t n, struct sbx_port_req *r, const char **why)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vn;
	int rc, seen = 0;
	memset(r, 0, sizeof *r);
	*why = "malformed port request";
	sbx_tlv_init(&it, p, n);
	while ((rc = sbx_tlv_next(&it, &tag, &v, &vn)) == 1) {
		int bit = tag == SBX_T_OP ? 1 : tag == SBX_T_PORT ? 2 : tag == SBX_T_ADDR ? 4 : 0;
		if (!bit) {
			*why = "unknown field in a port request";
			return -1;
		}
		if (seen & bit) {
			*why = "repeated field in a port request";
			return -1;
		}
		seen |= bit;
		if (tag == SBX_T_OP && (sbx_tlv_as_u32(v, vn, &r->op) < 0 || !r->op || r->op > SBX_PORT_OP_MAX)) {
			*why = "unknown port operation";
			return -1;
		}
		if (tag == SBX_T_PORT && (sbx_tlv_as_u32(v, vn, &r->port) < 0 || !r->port || r->port > 65535)) {
			*why = "the guest port must be 1-65535";
			return -1;
		}
		if (tag == SBX_T_ADDR && (!vn || sbx_tlv_as_str(v, vn, r->addr, sizeof r->addr) < 0)) {
			*why = "bad or too long an address";
			return -1;
		}
	}
	if (rc < 0 || !(seen & 1))
		return -1;
	if (r->op == SBX_PORT_OPEN && (seen & 6) != 6) {
		*why = "a port to open needs the guest port and the address";
		return -1;
	}
	if (r->op == SBX_PORT_RM && !(seen & 6)) {
		*why = "a port to remove needs the guest port or the address";
		return -1;
	}
	return 0;
}

int sbx_port_entry_put(struct sbx_buf *b, const struct sbx_port_entry *e)
{
	sbx_tlv_u32(b, SBX_T_PORT, e->port);
	sbx_tlv_str(b, SBX_T_ADDR, e->addr);
	sbx_tlv_u32(b, SBX_T_CONNS, e->conns);
	sbx_tlv_u64(b, SBX_T_ACCEPTED, e->accepted);
	return sbx_tlv_u64(b, SBX_T_REFUSED, e->refused);
}

int sbx_port_list_decode(const uint8_t *p, size_t n, uint32_t *op, struct sbx_port_entry *out, size_t max,
			 const char **why)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vn;
	int rc;
	size_t k = 0;
	*op = 0;
	*why = "malformed port reply";
	sbx_tlv_init(&it, p, n);
	while ((rc = sbx_tlv_next(&it, &tag, &v, &vn)) == 1) {
		struct sbx_port_entry *e = k ? &out[k - 1] : NULL;
		int bad;
		switch (tag) {
		case SBX_T_OP: bad = *op || k || sbx_tlv_as_u32(v, vn, op) < 0 || !*op || *op > SBX_PORT_OP_MAX; break;
		case SBX_T_PORT:
			if (k == max) {
				*why = "too many forwards in a port reply";
				return -1;
			}
			e = &out[k++];
			memset(e, 0, sizeof *e);
			bad = sbx_tlv_as_u32(v, vn, &e->port) < 0 || !e->port || e->port > 65535;
			break;
		case SBX_T_ADDR: bad = !e || sbx_tlv_as_str(v, vn, e->addr, sizeof e->addr) < 0; break;
		case SBX_T_CONNS: bad = !e || sbx_tlv_as_u32(v, vn, &e->conns) < 0; break;
		case SBX_T_ACCEPTED: bad = !e || sbx_tlv_as_u64(v, vn, &e->accepted) < 0; break;
		case SBX_T_REFUSED: bad = !e || sbx_tlv_as_u64(v, vn, &e->refused) < 0; break;
		case SBX_T_MSG: /* the entry's last connection error: see sbx_port_list */
			bad = !e || vn > 1024 || memchr(v, 0, vn) != NULL;
			break;
		default: bad = 1;
		}
		if (bad)
			return -1;
	}
	if (rc < 0 || !*op)
		return -1;
	return (int)k;
}
