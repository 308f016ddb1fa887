/* contrib/examples/async_counter.c - the non-blocking API on a libuv loop:
 * N handles of the lock "counter" on one client, all driven by the loop's
 * thread. Each takes the lock, adds 1 to a counter file with a
 * read-pause-write that loses updates unless the lock excludes every other
 * holder (in this process and in others), and lets go. No thread waits:
 * a waiting acquire costs the client a little memory, not a thread.
 *
 *   dlock-example-async-counter FILE N [CONFIG]
 */
#include <dlock.h>
#include <dlock/adapters/libuv.h>

#include <stdio.h>
#include <stdlib.h>

struct turn {
    dlock_lock *lock;
    uv_timer_t pause;       /* the hold's read-pause-write, as a loop timer */
    long seen;
};

static const char *path;
static int left, failures;

static void released(dlock_lock *lock, int rc, void *arg)
{
    (void)lock;
    (void)arg;
    if (rc != DLOCK_OK) {
        fprintf(stderr, "release: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        failures++;
    }
    if (--left == 0)
        uv_stop(uv_default_loop());
}

/* The write half of the update, 2 ms after the read: another holder in
 * that window would lose one of the two updates. */
static void write_back(uv_timer_t *t)
{
    struct turn *turn = t->data;
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%ld\n", turn->seen + 1) < 0 || fclose(f) != 0) {
        perror(path);
        failures++;
    }
    int rc = dlock_release_start(turn->lock, released, turn);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "release_start: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        failures++;
        released(turn->lock, DLOCK_OK, turn);
    }
}

static void granted(dlock_lock *lock, int rc, void *arg)
{
    struct turn *turn = arg;
    if (rc != DLOCK_OK) {
        fprintf(stderr, "acquire: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        failures++;
        released(lock, DLOCK_OK, turn);
        return;
    }
    FILE *f = fopen(path, "r");
    turn->seen = 0;
    if (f) {
        if (fscanf(f, "%ld", &turn->seen) != 1)
            turn->seen = 0;
        fclose(f);
    }
    uv_timer_start(&turn->pause, write_back, 2, 0);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE N [CONFIG]\n", argv[0]);
        return 64;
    }
    path = argv[1];
    int n = atoi(argv[2]);
    if (n <= 0) {
        fprintf(stderr, "N must be a positive count\n");
        return 64;
    }
    dlock_client *client;
    int rc = dlock_client_open(&client, argc > 3 ? argv[3] : NULL);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "open: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        return 1;
    }
    uv_loop_t *loop = uv_default_loop();
    dlock_uv adapter;
    if (dlock_uv_attach(&adapter, loop, client) != DLOCK_OK) {
        fprintf(stderr, "cannot attach the client to the loop\n");
        return 1;
    }
    struct turn *turns = calloc((size_t)n, sizeof *turns);
    if (!turns)
        return 1;
    left = n;
    for (int i = 0; i < n; i++) {
        uv_timer_init(loop, &turns[i].pause);
        turns[i].pause.data = &turns[i];
        if ((rc = dlock_lock_new(client, "counter", 7, NULL, &turns[i].lock)) != DLOCK_OK ||
            (rc = dlock_acquire_start(turns[i].lock, -1, granted, &turns[i])) != DLOCK_OK) {
            fprintf(stderr, "start: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
            return 1;
        }
    }
    uv_run(loop, UV_RUN_DEFAULT);
    dlock_uv_detach(&adapter, NULL);
    for (int i = 0; i < n; i++) {
        uv_close((uv_handle_t *)&turns[i].pause, NULL);
        dlock_lock_free(turns[i].lock);
    }
    uv_run(loop, UV_RUN_DEFAULT); /* the closes */
    free(turns);
    dlock_client_close(client);
    return failures ? 1 : 0;
}
