/* backends/local/local_wanted.c - telling a holder that another owner asks
 * for its name (lock caching: watch_wanted and unwatch_wanted).
 *
 * Every request that finds a name busy joins the name's line before its
 * second look (local.c), a try included: its FIFO appears in the line's
 * folder (local_queue.h). So an inotify watch of that folder tells the
 * keeper of every request, with nothing sent by the asker. One inotify
 * instance per client holds the watches of every watched name, and one
 * thread reads it and tells the core.
 *
 * What an event means: a request, except our own place's, made by an
 * attempt of ours (its event can be read after that attempt was granted):
 * that one is known by its name and not told. Every other event is told,
 * between our holds too: the listener reads events on its own thread, so
 * the event of a request that joined just after our grant may be read
 * before the attempt returns, and the core counts a call that comes while
 * an attempt is out as one for the hold that attempt is granted (a call
 * about an older request only makes one release a real one). A request
 * already waiting in the line when we are granted made its event before
 * the attempt was sent: the grant looks at the line for it
 * (local_wanted_granted), as the first watch does.
 *
 * A request that cannot join the line (a folder it may not write) polls and
 * is not heard: the keeper gives the hold back at the idle limit. */
#include "config.h"

#include "../common/quiet_thread.h"
#include "local_backend.h"
#include "local_queue.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

struct local_wanted {
    struct local_wanted *next;       /* inst->wanted_list */
    struct dlock_provider_lock *lk;
    int wd;                          /* the folder's watch, -1 once the folder went */
    char own_entry[sizeof ((struct local_waiter *)0)->entry]; /* our latest FIFO's name */
};

/* Tells the core (inst->wanted_mu held). */
static void tell(struct local_instance *inst, struct local_wanted *w)
{
    inst->tell_wanted(w->lk);
}

/* The events read from ifd (inst->wanted_mu held). */
static void take_events(struct local_instance *inst, const char *buf, ssize_t len)
{
    for (const char *p = buf; p < buf + len;) {
        const struct inotify_event *ev = (const struct inotify_event *)p;
        p += sizeof *ev + ev->len;
        for (struct local_wanted *w = inst->wanted_list; w; w = w->next) {
            if (ev->mask & IN_Q_OVERFLOW) {
                tell(inst, w); /* events were lost: any may have been a request */
            } else if (ev->wd == w->wd) {
                if (ev->mask & IN_IGNORED) {
                    w->wd = -1; /* the folder went: watched again at the next grant */
                    tell(inst, w);
                } else if (!(ev->len && local_queue_is_own(ev->name, w->own_entry))) {
                    tell(inst, w);
                }
            }
        }
    }
}

static void *listen_for_requests(void *arg)
{
    struct local_instance *inst = arg;
    int ifd = inst->wanted_ifd - 1, stop = inst->wanted_stop_fd - 1;
    _Alignas(struct inotify_event) char buf[4096];
    for (;;) {
        struct pollfd p[2] = { { .fd = ifd, .events = POLLIN }, { .fd = stop, .events = POLLIN } };
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        ssize_t n = read(ifd, buf, sizeof buf);
        if (n <= 0)
            continue;
        pthread_mutex_lock(&inst->wanted_mu);
        take_events(inst, buf, n);
        pthread_mutex_unlock(&inst->wanted_mu);
    }
    return NULL;
}

/* The inotify instance and its thread, once (inst->wanted_mu held). */
static int start_listener(struct local_instance *inst)
{
    if (inst->wanted_thread_started)
        return DLOCK_OK;
    int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (ifd < 0)
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: no inotify instance to hear requests for kept holds: %s "
                            "(raise fs.inotify.max_user_instances?)", strerror(errno));
    int stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop < 0) {
        close(ifd);
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot make an eventfd: %s", strerror(errno));
    }
    inst->wanted_ifd = ifd + 1;
    inst->wanted_stop_fd = stop + 1;
    int rc = quiet_thread_create(&inst->wanted_thread, listen_for_requests, inst);
    if (rc != 0) {
        close(ifd);
        close(stop);
        inst->wanted_ifd = inst->wanted_stop_fd = 0;
        return dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot start a thread: %s", strerror(rc));
    }
    inst->wanted_thread_started = true;
    return DLOCK_OK;
}

/* Tells the core when a live waiter is in ll's line: a request made
 * before the watch or the grant, whose event tells nothing now. */
static void tell_if_anyone_waits(struct local_instance *inst, struct local_wanted *w, struct local_lock *ll)
{
    if (!local_queue_anyone(inst->dirfd, ll->file))
        return;
    pthread_mutex_lock(&inst->wanted_mu);
    tell(inst, w);
    pthread_mutex_unlock(&inst->wanted_mu);
}

int local_wanted_watch(struct local_instance *inst, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    if (ll->wanted)
        return DLOCK_OK;
    if (!ll->held || !ll->fd_open)
        return dlock_seterr(DLOCK_EINVAL, "local: a name is watched for requests only while it is held");
    struct local_wanted *w = calloc(1, sizeof *w);
    if (!w)
        return dlock_seterr(DLOCK_ENOMEM, "local: out of memory");
    w->lk = lk;
    pthread_mutex_lock(&inst->wanted_mu);
    int rc = start_listener(inst);
    if (rc == DLOCK_OK && (w->wd = local_queue_watch(inst->wanted_ifd - 1, inst->dirfd, inst->dir, ll->file)) < 0)
        rc = dlock_seterr(DLOCK_EUNAVAILABLE, "local: cannot watch the line of '%s' in %s: %s", lk->name, inst->dir,
                          strerror(errno));
    if (rc != DLOCK_OK) {
        pthread_mutex_unlock(&inst->wanted_mu);
        free(w);
        return rc;
    }
    w->next = inst->wanted_list;
    inst->wanted_list = w;
    ll->wanted = w;
    pthread_mutex_unlock(&inst->wanted_mu);
    tell_if_anyone_waits(inst, w, ll); /* whoever asked between the grant and the watch */
    return DLOCK_OK;
}

void local_wanted_unwatch(struct local_instance *inst, struct dlock_provider_lock *lk)
{
    struct local_lock *ll = lk->priv;
    struct local_wanted *w = ll->wanted;
    if (!w)
        return;
    pthread_mutex_lock(&inst->wanted_mu);
    bool shared_wd = false;
    for (struct local_wanted **p = &inst->wanted_list; *p;) {
        if (*p == w)
            *p = w->next;
        else {
            shared_wd = shared_wd || (*p)->wd == w->wd;
            p = &(*p)->next;
        }
    }
    if (w->wd >= 0 && !shared_wd)
        inotify_rm_watch(inst->wanted_ifd - 1, w->wd);
    ll->wanted = NULL;
    pthread_mutex_unlock(&inst->wanted_mu);
    free(w);
}

void local_wanted_joined(struct local_instance *inst, struct local_lock *ll)
{
    struct local_wanted *w = ll->wanted;
    if (!w)
        return;
    pthread_mutex_lock(&inst->wanted_mu);
    memcpy(w->own_entry, ll->waiter.entry, sizeof w->own_entry);
    pthread_mutex_unlock(&inst->wanted_mu);
}

void local_wanted_granted(struct local_instance *inst, struct local_lock *ll)
{
    struct local_wanted *w = ll->wanted;
    if (!w)
        return;
    pthread_mutex_lock(&inst->wanted_mu);
    if (w->wd < 0) /* the line's folder was removed since: watch the new one */
        w->wd = local_queue_watch(inst->wanted_ifd - 1, inst->dirfd, inst->dir, ll->file);
    pthread_mutex_unlock(&inst->wanted_mu);
    /* Our own place left the line before the grant: a live waiter in it
     * now asked before this attempt, or its event may have been read
     * before we held. */
    tell_if_anyone_waits(inst, w, ll);
}

void local_wanted_close(struct local_instance *inst)
{
    if (inst->wanted_thread_started) {
        uint64_t one = 1;
        if (write(inst->wanted_stop_fd - 1, &one, sizeof one) < 0) {
            /* an eventfd write fails only when its count is full: it is readable then */
        }
        pthread_join(inst->wanted_thread, NULL);
        close(inst->wanted_ifd - 1);
        close(inst->wanted_stop_fd - 1);
        inst->wanted_thread_started = false;
    }
    /* unwatch came before for every lock (the core's order); anything left
     * is freed here all the same. */
    while (inst->wanted_list) {
        struct local_wanted *w = inst->wanted_list;
        inst->wanted_list = w->next;
        free(w);
    }
}
