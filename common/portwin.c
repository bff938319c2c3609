/* sbx-port's per-connection bytes and windows (portwin.h). */
#include "portwin.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

void sbx_portwin_init(struct sbx_portwin *pw)
{
	memset(pw, 0, sizeof *pw);
	pw->send_credit = SBX_PORT_WINDOW;
}

void sbx_portwin_free(struct sbx_portwin *pw)
{
	sbx_buf_free(&pw->w);
}

int sbx_portwin_data(struct sbx_portwin *pw, const void *p, uint32_t n)
{
	if (pw->peer_eof)
		return SBX_PORTWIN_AFTER_EOF;
	if (n > SBX_PORT_WINDOW - pw->recv_used)
		return SBX_PORTWIN_OVER;
	pw->recv_used += n;
	if (sbx_buf_put(&pw->w, p, n) < 0)
		return SBX_PORTWIN_NOMEM;
	return SBX_PORTWIN_OK;
}

int sbx_portwin_window(struct sbx_portwin *pw, const uint8_t *p, uint32_t n)
{
	uint32_t more;
	if (sbx_tlv_as_u32(p, n, &more) < 0 || more > SBX_PORT_WINDOW - pw->send_credit)
		return -1;
	pw->send_credit += more;
	return 0;
}

ssize_t sbx_portwin_flush(struct sbx_portwin *pw, int fd, int flags)
{
	size_t wrote = 0;
	while (pw->w.len > pw->w_off) {
		ssize_t w = send(fd, pw->w.data + pw->w_off, pw->w.len - pw->w_off, MSG_NOSIGNAL | flags);
		if (w > 0) {
			pw->w_off += (size_t)w;
			wrote += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && errno == EAGAIN) {
			break;
		} else {
			return -1;
		}
	}
	if (pw->w_off == pw->w.len) {
		sbx_buf_reset(&pw->w);
		pw->w_off = 0;
	}
	return (ssize_t)wrote;
}

int sbx_portwin_drained(const struct sbx_portwin *pw)
{
	return pw->w_off == pw->w.len;
}

void sbx_portwin_shut(struct sbx_portwin *pw, int fd)
{
	if (sbx_portwin_drained(pw) && pw->peer_eof && !pw->peer_eof_done) {
		shutdown(fd, SHUT_WR);
		pw->peer_eof_done = 1;
	}
}

void sbx_portwin_credit(struct sbx_portwin *pw, struct sbx_buf *out, uint32_t id, uint32_t n)
{
	uint8_t le[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };
	if (!n)
		return;
	pw->recv_used -= n;
	sbx_frame_raw(out, SBX_F_PORT_WINDOW, id, le, 4);
}

int sbx_portwin_read(struct sbx_portwin *pw, int fd, int flags, struct sbx_buf *out, uint32_t id,
		     int (*full)(void *ctx), void *ctx)
{
	static uint8_t buf[SBX_DATA_CHUNK];
	for (int i = 0; i < 4 && pw->send_credit && !full(ctx); i++) {
		size_t want = pw->send_credit < sizeof buf ? pw->send_credit : sizeof buf;
		ssize_t r = recv(fd, buf, want, flags);
		if (r > 0) {
			pw->send_credit -= (uint32_t)r;
			sbx_frame_raw(out, SBX_F_PORT_DATA, id, buf, (uint32_t)r);
			if ((size_t)r < want)
				break;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			break;
		} else if (r == 0) {
			pw->sock_eof = 1;
			sbx_frame_raw(out, SBX_F_PORT_EOF, id, NULL, 0);
			return 1;
		} else {
			return -1;
		}
	}
	return 0;
}

uint32_t sbx_portwin_events(const struct sbx_portwin *pw, int want_out, int may_read)
{
	uint32_t want = 0;
	if (want_out || pw->w.len > pw->w_off)
		want |= EPOLLOUT;
	if (may_read && !pw->sock_eof && pw->send_credit)
		want |= EPOLLIN;
	if (pw->hup && !(want & EPOLLIN))
		want = 0;
	return want;
}
