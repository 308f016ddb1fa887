/* backends/redis/redis_scripts.h - running the lock's Lua scripts
 * (redis_script_text.h) with EVALSHA. Scripts are loaded once per server
 * (SCRIPT LOAD) and loaded again when the server answers NOSCRIPT (after
 * SCRIPT FLUSH or a restart). */
#ifndef DLOCK_REDIS_SCRIPTS_H
#define DLOCK_REDIS_SCRIPTS_H

#include "redis_conn.h"
#include "redis_script_text.h"

struct redis_scripts {
    pthread_mutex_t mu;
    char sha[SCRIPT_COUNT][41];     /* "" until loaded */
};

void redis_scripts_init(struct redis_scripts *s);
void redis_scripts_destroy(struct redis_scripts *s);

/* Loads every script on pool's server (SCRIPT LOAD), so that their SHA1s
 * are known before a caller sends EVALSHA itself (Redlock's fan-out). */
int redis_scripts_preload(struct redis_pool *pool, struct redis_scripts *s);

/* "EVALSHA sha numkeys args...", ready for redisCommandArgv or
 * redisAppendCommandArgv (the fan-outs of redlock and WAIT pipelines send
 * it themselves). argv points into args and into the struct. */
struct redis_evalsha {
    char sha[41];               /* "" when the script is not loaded yet */
    char numkeys[16];
    int argc;
    const char **argv;
    size_t *lens;
    const char *small_argv[16];
    size_t small_lens[16];
};

/* Builds it; DLOCK_OK or DLOCK_ENOMEM. Free with redis_evalsha_free. */
int redis_evalsha_build(struct redis_evalsha *e, struct redis_scripts *s, enum redis_script which, int nkeys,
                        int nargs, const char **args, const size_t *lens);
void redis_evalsha_free(struct redis_evalsha *e);

/* EVALSHA script with nkeys keys then the remaining args. Returns the reply
 * (caller frees) or NULL with *rc; an error reply other than NOSCRIPT is
 * turned into DLOCK_EPROTOCOL with the server's text. */
redisReply *redis_script_run(struct redis_pool *pool, struct redis_scripts *s, enum redis_script which,
                             int nkeys, int nargs, const char **args, const size_t *lens, int *rc);

/* Turns a script's error reply into a code with the detail set:
 * DLOCK_EUNAVAILABLE for the "try again later" answers (LOADING, READONLY,
 * MASTERDOWN, BUSY, NOAUTH, TRYAGAIN, CLUSTERDOWN, a redirection),
 * DLOCK_EPROTOCOL otherwise. label names the server. */
int redis_script_error(const char *label, const char *text);

#endif
