/* contrib/examples/counter.c - the smallest useful libdlock program: adds 1
 * to a counter file under the lock "counter", N times, with a read-sleep-
 * write that loses updates unless the lock excludes the other processes.
 *
 *   dlock-example-counter FILE N [CONFIG]
 */
#include <dlock.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int bump(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    struct timespec pause = { 0, 2 * 1000 * 1000 }; /* widen the race window */
    nanosleep(&pause, NULL);
    f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "%ld\n", v + 1);
    return fclose(f);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE N [CONFIG]\n", argv[0]);
        return 64;
    }
    dlock_client *client;
    int rc = dlock_client_open(&client, argc > 3 ? argv[3] : NULL);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "cannot open client: %s (%s)\n", dlock_strerror(rc), dlock_errmsg());
        return 69;
    }
    dlock_lock *lock;
    rc = dlock_lock_new(client, "counter", strlen("counter"), NULL, &lock);
    for (int i = 0, n = atoi(argv[2]); rc == DLOCK_OK && i < n; i++) {
        rc = dlock_acquire(lock, 10000); /* wait up to 10 s */
        if (rc != DLOCK_OK)
            break;
        if (bump(argv[1]) != 0)
            fprintf(stderr, "cannot write %s\n", argv[1]);
        rc = dlock_release(lock);
    }
    if (rc != DLOCK_OK)
        fprintf(stderr, "lock failed: %s (%s)\n", dlock_strerror(rc), dlock_errmsg());
    dlock_lock_free(lock);
    dlock_client_close(client);
    return rc == DLOCK_OK ? 0 : 1;
}
