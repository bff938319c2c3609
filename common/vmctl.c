/* VMCTL requests to a session's monitor: see vmctl.h. */
#include "vmctl.h"
#include "monclient.h"
#include "progress.h"
#include "proto.h"
#include "session.h"

#include <stdio.h>
#include <string.h>

#define VMCTL_TIMEOUT_MS 60000u

/* One VMCTL's answer, and its progress drawn as it comes. */
struct vmctl {
	struct sbx_progress p;
	int fd, on;
	char what[64];
	char *state;
	size_t n;
};

static void show_progress(struct vmctl *vp, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t n;
	char what[64] = "";
	uint64_t done = 0, total = 0;
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &v, &n) == 1) {
		if (tag == SBX_T_MSG)
			sbx_tlv_as_str(v, n, what, sizeof what);
		else if (tag == SBX_T_DONE)
			sbx_tlv_as_u64(v, n, &done);
		else if (tag == SBX_T_TOTAL)
			sbx_tlv_as_u64(v, n, &total);
	}
	if (vp->fd < 0)
		return;
	if (!vp->on || strcmp(what, vp->what)) {
		if (vp->on)
			sbx_progress_end(&vp->p, 1);
		snprintf(vp->what, sizeof vp->what, "%s", what);
		sbx_progress_begin(&vp->p, vp->fd, what, total);
		vp->on = 1;
	}
	vp->p.total = total;
	sbx_progress_update(&vp->p, done);
}

static int vmctl_frame(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	struct vmctl *vp = ctx;
	if (f->type == SBX_F_ERROR)
		return sbx_mon_error(f, "the session refused", err);
	if (f->type == SBX_F_PROGRESS)
		show_progress(vp, f);
	if (f->type != SBX_F_VMCTL)
		return 0;
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vn;
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &v, &vn) == 1)
		if (tag == SBX_T_STATE && vp->state)
			sbx_tlv_as_str(v, vn, vp->state, vp->n);
	return 1;
}

int sbx_vmctl(struct sbx_state *st, const char *id, unsigned op, const char *path, const char *hostname,
	      uint64_t max_bytes, int progress_fd, unsigned timeout_ms, char *state, size_t n, struct sbx_err *err)
{
	_cleanup_mon_ struct sbx_mon m = { .fd = -1 };
	struct vmctl vp = { .fd = progress_fd, .state = state, .n = n };
	if (sbx_mon_open(st, id, &m, err) < 0)
		return -1;
	size_t off = sbx_frame_begin(&m.out, SBX_F_VMCTL, 0);
	sbx_tlv_u32(&m.out, SBX_T_OP, op);
	if (path)
		sbx_tlv_str(&m.out, SBX_T_PATH, path);
	if (hostname)
		sbx_tlv_str(&m.out, SBX_T_HOSTNAME, hostname);
	if (max_bytes) /* a save's cap, or a TTL's time left */
		sbx_tlv_u64(&m.out, op == SBX_VMCTL_TTL ? SBX_T_TTL_MS : SBX_T_MAX_BYTES, max_bytes);
	sbx_frame_end(&m.out, off);
	int rc = sbx_mon_call(&m, timeout_ms, vmctl_frame, &vp, err) > 0 ? 0 : -1;
	if (vp.on)
		sbx_progress_end(&vp.p, rc == 0);
	int e = err ? err->errnum : 0;
	switch (rc ? m.fail : SBX_MON_OK) {
	case SBX_MON_SEND:
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot talk to the monitor of session %s", id);
	case SBX_MON_GARBAGE:
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the monitor of session %s sent garbage", id);
	case SBX_MON_LATE: return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s did not answer in time", id);
	case SBX_MON_POLL: return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot wait for session %s", id);
	case SBX_MON_LOST: return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the monitor of session %s went away", id);
	default: return rc;
	}
}

int sbx_session_vmctl(struct sbx_state *st, const char *id, const char *tenant, unsigned op, const char *hostname,
		      char *state, size_t n, struct sbx_err *err)
{
	struct sbx_session s;
	/* A tenant given is the caller's scope (sbx_state_scope): another's
	 * session, like a missing one, is 4. */
	if (sbx_id_check(id, "session", err) < 0 || (tenant && *tenant && sbx_tenant_check(tenant, err) < 0) ||
	    sbx_session_lookup(st, id, &s, err) < 0)
		return -1;
	if (tenant && strcmp(tenant, s.tenant))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
	if (hostname && sbx_id_check(hostname, "hostname", err) < 0)
		return -1;
	return sbx_vmctl(st, id, op, NULL, hostname, 0, -1, VMCTL_TIMEOUT_MS, state, n, err);
}

int sbx_session_set_ttl(struct sbx_state *st, const char *id, uint64_t left_ms, struct sbx_err *err)
{
	if (sbx_id_check(id, "session", err) < 0 || sbx_session_visible(st, id, err) < 0)
		return -1;
	if (!left_ms || left_ms > SBX_TTL_LEFT_MAX_MS)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "a time left of 1 ms to %llu h",
				   (unsigned long long)(SBX_TTL_LEFT_MAX_MS / 3600000u));
	return sbx_vmctl(st, id, SBX_VMCTL_TTL, NULL, NULL, left_ms, -1, VMCTL_TIMEOUT_MS, NULL, 0, err);
}

int sbx_session_wake(struct sbx_state *st, const char *id, int no_resume, struct sbx_err *err)
{
	struct sbx_session s;
	if (sbx_id_check(id, "session", err) < 0 || sbx_session_lookup(st, id, &s, err) < 0)
		return -1;
	if (strcmp(sbx_session_live_state(st, &s), "suspended"))
		return 0;
	if (no_resume)
		return sbx_err_set(
			err, SBX_EXIT_NOENT, 0,
			"session %s is suspended and --no-resume was given (sbx-snapshot resume %s runs it again)", id,
			id);
	return sbx_vmctl(st, id, SBX_VMCTL_RESUME, NULL, NULL, 0, -1, VMCTL_TIMEOUT_MS, NULL, 0, err);
}
