/* monitor/priv*.c's shared parts (not for the rest of the monitor: mon.h
 * has the mon_*() steps).  priv.c: the channel, the child's requests and
 * the split; priv_steps.c: each step, in either process; priv_serve.c: the
 * parent's side, one request checked. */
#ifndef SBX_PRIV_INT_H
#define SBX_PRIV_INT_H
#include "mon.h"
#include "priv.h"

static inline int split_child(const struct mon *m)
{
	return m->priv.role == PRIV_ROLE_CHILD;
}

int audit_direct(struct mon *m, const char *type, json_t *f, struct sbx_err *err);
int priv_call(struct mon *m, struct sbx_buf *req, const int *fds, int nfds, struct priv_msg *a, struct sbx_err *err);
int priv_call0(struct mon *m, uint32_t op, struct sbx_err *err);
int priv_call_num(struct mon *m, uint32_t op, uint16_t tag, uint64_t v, struct sbx_err *err);
int priv_call_str(struct mon *m, uint32_t op, uint16_t tag, const char *s, struct sbx_err *err);
void priv_call_nums(struct mon *m, uint32_t op, uint64_t *a, uint64_t *b);
int cg_set_cpu_direct(struct mon *m);
int priv_chan_send(int fd, const struct sbx_buf *b, const int *fds, int nfds);
void priv_close_fds(struct priv_msg *a);
int destroy_direct(struct mon *m, int member_too);
void end_direct(struct mon *m, const char *state, const char *why);
uint64_t priv_file_size(int dfd, const char *name);
void priv_give_proxy(struct mon *m, struct sbx_buf *r, int *fds, int *nfds);
int priv_handle(struct mon *m, const struct priv_msg *q, struct sbx_buf *r, int *fds, int *nfds, struct sbx_err *err);
void priv_msg_begin(struct sbx_buf *b, uint32_t op);
void port_unlink_direct(const char *path, uint64_t dev, uint64_t ino);
int proxy_reap_direct(struct mon *m);
void proxy_stop_direct(struct mon *m);
void susp_discard_direct(struct mon *m);
void priv_take_proxy(struct mon *m, const struct priv_msg *a, int from, int n);

#endif
