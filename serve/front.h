/* What front.c lends the front's other files (front_files.c): a call to
 * the back, a request naming its caller, a JSON answer. */
#ifndef SBX_SERVE_FRONT_H
#define SBX_SERVE_FRONT_H

#include <stddef.h>
#include <jansson.h>
#include <microhttpd.h>

json_t *serve_front_call(json_t *req, int peer, int *fds, unsigned *nfds, int *sock);
/* l: the connection's listener, as the handler got it */
json_t *serve_front_request(struct MHD_Connection *c, const void *l, const char *op, int *peer);
enum MHD_Result serve_front_answer_json(struct MHD_Connection *c, unsigned status, json_t *j);

/* front_cli.c: serve the CLI socket listen_fd (host users' commands),
 * calling the back on ctl; a thread of its own. */
int serve_front_cli_start(int listen_fd, int ctl);

/* front_files.c: envd's filesystem calls and /files GET; an upload
 * (/files POST) is taken as it arrives, from its first call (start: NULL
 * when the request is no upload) to its last (step with *n 0). */
enum MHD_Result serve_files_envd(struct MHD_Connection *c, const void *l, const char *url, const char *method,
				 const char *body, size_t n, const char *sandbox);
struct serve_upload;
struct serve_upload *serve_files_upload_start(struct MHD_Connection *c, const void *l, const char *url,
					      const char *method);
enum MHD_Result serve_files_upload_step(struct MHD_Connection *c, struct serve_upload *u, const char *data, size_t *n);
void serve_files_upload_free(struct serve_upload *u);

#endif
