/* core/async_engine.c - the engine behind the non-blocking API: a fixed
 * pool of workers that run operations' steps (provider calls) and take
 * turns at keeping the waiting operations on their descriptors and timers
 * (one epoll set and one timer heap, however many wait), and the done
 * queue that dlock_client_process() delivers from, signalled through the
 * eventfd that dlock_client_fd() returns. See async.h for an operation's
 * states.
 *
 * Lock order: client->entries_mu, then entry->mu, then async.mu; nothing
 * is taken while async.mu is held, and no provider call is made with it. */
#include "config.h"

#include "async.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void signal_fd(int fd)
{
    uint64_t one = 1;
    if (fd >= 0) {
        ssize_t ignored = write(fd, &one, sizeof one);
        (void)ignored; /* EAGAIN only when the counter is already huge */
    }
}

static struct dlock__aop *op_of_timer(struct dlock__timer *t)
{
    return (struct dlock__aop *)((char *)t - offsetof(struct dlock__aop, timer));
}

void dlock__async_init(dlock_client *c)
{
    struct dlock__async *a = &c->async;
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work_cv, NULL);
    pthread_cond_init(&a->done_cv, NULL);
    a->done_fd = a->loop_fd = a->epoll_fd = a->parker_wake_fd = -1;
    dlock__timer_heap_init(&a->timers);
}

/* ---- the queues (a->mu held) ------------------------------------------------ */

/* The engine whose poller the calling thread is now, if any. */
static __thread struct dlock__async *polling_for;

/* An operation whose next step is likely not to block (every step of an
 * in-process backend's; the queueing and the attempt's sending of a
 * backend that sends natively) and that is not being cancelled is stepped
 * by the caller's loop, which then does the work of a hand-off inside the
 * client itself; a step there that would block asks for a worker
 * (needs_worker). A cancelled one goes to a worker at once, since the
 * thread that cancels (a free, a close) may be the loop's own, waiting
 * for it. */
static bool stepped_on_loop(const struct dlock__async *a, const struct dlock__aop *op)
{
    dlock_client *c = op->entry->client;
    /* A release the provider cannot send natively would only be passed on
     * to a worker from there: a turn of the loop for nothing. */
    bool sends = op->kind == AOP_RELEASE ? dlock__p_can_send_release(c) : dlock__p_can_send(c);
    return a->loop_fd >= 0 && !op->cancelled && !op->needs_worker && !op->kept_off_loop &&
           (dlock__p_in_process(c) || sends);
}

/* The three queues (ready, loop, done) are singly linked through
 * op->next, with a head and a tail each. */
static void queue_append(struct dlock__aop **head, struct dlock__aop **tail, struct dlock__aop *op)
{
    op->next = NULL;
    if (*tail)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

static struct dlock__aop *queue_pop(struct dlock__aop **head, struct dlock__aop **tail)
{
    struct dlock__aop *op = *head;
    if (op) {
        *head = op->next;
        if (!*head)
            *tail = NULL;
        op->next = NULL;
    }
    return op;
}

/* Takes op out of a queue, wherever it is in it. */
static void queue_unlink(struct dlock__aop **head, struct dlock__aop **tail, struct dlock__aop *op)
{
    struct dlock__aop *prev = NULL;
    for (struct dlock__aop *p = *head; p; prev = p, p = p->next) {
        if (p != op)
            continue;
        if (prev)
            prev->next = p->next;
        else
            *head = p->next;
        if (*tail == p)
            *tail = prev;
        p->next = NULL;
        return;
    }
}

static void push_ready(struct dlock__async *a, struct dlock__aop *op)
{
    op->state = AOP_READY;
    if (stepped_on_loop(a, op)) {
        op->in_loop_queue = true;
        queue_append(&a->loop_head, &a->loop_tail, op);
        signal_fd(a->done_fd);
        return;
    }
    op->needs_worker = false;
    bool was_empty = a->ready_head == NULL;
    queue_append(&a->ready_head, &a->ready_tail, op);
    /* The poller that queues the only ready operation (a wake-up it saw)
     * runs it itself next: no other worker is woken to race it for it. A
     * kick from a running step does wake another worker, which then works
     * beside the step's end rather than after it. */
    if (was_empty && polling_for == a)
        return;
    if (a->idle > 0)
        pthread_cond_signal(&a->work_cv);
    else if (a->polling)
        signal_fd(a->parker_wake_fd); /* every other worker is busy: the poller takes it */
}

static struct dlock__aop *pop_loop(struct dlock__async *a)
{
    struct dlock__aop *op = queue_pop(&a->loop_head, &a->loop_tail);
    if (op)
        op->in_loop_queue = false;
    return op;
}

/* Takes op out of the loop's queue and gives it to a worker. */
static void loop_to_worker(struct dlock__async *a, struct dlock__aop *op)
{
    queue_unlink(&a->loop_head, &a->loop_tail, op);
    op->in_loop_queue = false;
    op->needs_worker = true;
    push_ready(a, op);
}

static struct dlock__aop *pop_ready(struct dlock__async *a)
{
    return queue_pop(&a->ready_head, &a->ready_tail);
}

static void push_done(struct dlock__async *a, struct dlock__aop *op)
{
    op->state = AOP_DONE;
    queue_append(&a->done_head, &a->done_tail, op);
    signal_fd(a->done_fd);
    pthread_cond_broadcast(&a->done_cv);
}

/* Takes op out of the done queue, wherever it is in it. */
static void unlink_done(struct dlock__async *a, struct dlock__aop *op)
{
    queue_unlink(&a->done_head, &a->done_tail, op);
}

/* Appends op to its entry's list, which keeps the order they started in. */
static void link_entry(struct dlock__aop *op)
{
    struct dlock__entry *e = op->entry;
    op->entry_next = NULL;
    op->entry_prev = e->aops_tail;
    if (e->aops_tail)
        e->aops_tail->entry_next = op;
    else
        __atomic_store_n(&e->aops, op, __ATOMIC_RELEASE);
    e->aops_tail = op;
}

static void unlink_entry(struct dlock__aop *op)
{
    struct dlock__entry *e = op->entry;
    if (op->entry_prev)
        op->entry_prev->entry_next = op->entry_next;
    else
        __atomic_store_n(&e->aops, op->entry_next, __ATOMIC_RELEASE);
    if (op->entry_next)
        op->entry_next->entry_prev = op->entry_prev;
    else
        e->aops_tail = op->entry_prev;
    op->entry_prev = op->entry_next = NULL;
}

/* ---- parking (a->mu held) ------------------------------------------------------ */

static void unpark(struct dlock__async *a, struct dlock__aop *op, bool fired);

/* Parks op: its descriptor in the workers' epoll set (or the loop's, when
 * its step asked for it and the loop's set exists), its deadline in the
 * heap, which the workers keep for both. A descriptor epoll refuses (a
 * regular file) is looked at on a short timer instead. */
static void park(struct dlock__async *a, struct dlock__aop *op)
{
    op->state = AOP_PARKED;
    op->polled_fd = -1;
    op->fired = false;
    op->on_loop = op->loop_ok && !op->kept_off_loop && a->loop_fd >= 0;
    int set = op->on_loop ? a->loop_fd : a->epoll_fd;
    if (op->park_fd >= 0) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = op };
        int fd = op->park_fd;
        int rc = epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev);
        if (rc < 0 && errno == EEXIST) {
            /* Another parked operation watches the same descriptor: epoll
             * keeps one entry per descriptor number, so this one gets a
             * number of its own for the same file. */
            fd = dup(op->park_fd);
            rc = fd < 0 ? -1 : epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev);
            if (rc < 0 && fd >= 0)
                close(fd);
        }
        if (rc == 0) {
            op->polled_fd = fd;
        } else {
            int64_t soon = dlock__now_ms() + 10;
            if (op->park_until > soon)
                op->park_until = soon;
        }
    }
    if (op->park_until != DLOCK__INFINITE) {
        op->timer.due_ms = op->park_until;
        op->timer.early_ms = 0;
        if (dlock__timer_heap_push(&a->timers, &op->timer) != DLOCK_OK) {
            /* No memory for the timer: look again now rather than miss the
             * deadline. */
            unpark(a, op, false);
            return;
        }
    }
    /* A descriptor added to the set reaches an epoll_wait already under
     * way: the poller is woken only for a deadline sooner than the one it
     * sleeps until (a wake-up for nothing costs every native round trip a
     * context switch). */
    if (a->polling && op->park_until < a->poll_until)
        signal_fd(a->parker_wake_fd);
}

/* Takes op out of the place it is parked in (a->mu held), unless it is
 * in the kick list, which unpark sees to. */
static void unpark_quietly(struct dlock__async *a, struct dlock__aop *op)
{
    if (op->polled_fd >= 0) {
        epoll_ctl(op->on_loop ? a->loop_fd : a->epoll_fd, EPOLL_CTL_DEL, op->polled_fd, NULL);
        if (op->polled_fd != op->park_fd)
            close(op->polled_fd);
        op->polled_fd = -1;
    }
    op->on_loop = false;
    if (dlock__timer_in_heap(&op->timer))
        dlock__timer_heap_remove(&a->timers, &op->timer);
}

/* Woken otherwise (an event, its timer) after it was kicked: off the
 * list now, or the list would name it after it is freed. */
static void take_off_kick_list(struct dlock__async *a, struct dlock__aop *op)
{
    if (!op->in_kick_list)
        return;
    struct dlock__aop **p = &a->kick_head;
    while (*p && *p != op)
        p = &(*p)->kick_next;
    if (*p)
        *p = op->kick_next;
    op->in_kick_list = false;
}

static void unpark(struct dlock__async *a, struct dlock__aop *op, bool fired)
{
    take_off_kick_list(a, op);
    unpark_quietly(a, op);
    op->fired = fired;
    push_ready(a, op);
}

/* Makes op look again as soon as it can: now if parked, after its step if
 * running (it will not park); with cancel, a blocking wait it is in is
 * interrupted too. */
static void kick(struct dlock__async *a, struct dlock__aop *op, bool cancel)
{
    op->kick_pending = true;
    if (op->state == AOP_PARKED && op->polled_fd < 0) {
        /* On a timer alone: nothing in the epoll set can name it, so it is
         * woken here rather than through the poller (one thread hop less
         * on every hand-off inside the client). The poller may still wake
         * for its old timer, and finds nothing due. */
        unpark(a, op, false);
    } else if (op->state == AOP_PARKED && !op->in_kick_list) {
        op->in_kick_list = true;
        op->kick_next = a->kick_head;
        a->kick_head = op;
        signal_fd(a->parker_wake_fd);
    }
    if (cancel && op->state == AOP_RUNNING)
        signal_fd(op->running_wake_fd);
    if (cancel && op->state == AOP_READY && op->in_loop_queue)
        loop_to_worker(a, op);
}

/* ---- the threads -----------------------------------------------------------------
 *
 * Leader and followers: an idle worker that finds no ready operation and
 * nobody polling becomes the poller and waits in epoll_wait for the parked
 * operations' descriptors, their timers and kicks; what it wakes it runs
 * itself, handing the poller's place to an idle worker. So a parked
 * operation's wake-up reaches a worker without a hop through another
 * thread. */

/* Runs one step of op (a->mu held, dropped meanwhile) and applies what it
 * asks for. */
static void run_one(struct dlock__async *a, struct dlock__aop *op, int wake_fd)
{
    op->state = AOP_RUNNING;
    op->kick_pending = false;
    op->cancelled_seen = op->cancelled;
    op->running_wake_fd = wake_fd;
    pthread_mutex_unlock(&a->mu);

    enum dlock__step step = dlock__aop_step(op, wake_fd);
    /* A step that hands straight on to the next (a contender's first
     * attempt after it queued) is followed here, a few at most. */
    for (int i = 0; step == STEP_NEXT && i < 4; i++)
        step = dlock__aop_step(op, wake_fd);

    pthread_mutex_lock(&a->mu);
    op->running_wake_fd = -1;
    switch (step) {
    case STEP_DONE:
        push_done(a, op);
        break;
    case STEP_AGAIN:
        /* Asked for again on the loop: what it needs is a worker. */
        op->needs_worker = wake_fd < 0;
        push_ready(a, op);
        break;
    case STEP_NEXT:
        push_ready(a, op);
        break;
    case STEP_PARK:
        op->parked_local = !__atomic_load_n(&op->contending, __ATOMIC_ACQUIRE);
        if (op->kick_pending) {
            op->fired = false;
            push_ready(a, op);
        } else {
            park(a, op);
        }
        break;
    }
}

/* The poller's turn (a->mu held, dropped while it waits): kicks, due
 * timers, then epoll_wait until the next timer, and what it reports. */
static void poll_once(struct dlock__async *a)
{
    struct epoll_event evs[64];
    a->polling = true;
    polling_for = a;
    while (a->kick_head) {
        struct dlock__aop *op = a->kick_head;
        a->kick_head = op->kick_next;
        op->in_kick_list = false;
        if (op->state == AOP_PARKED)
            unpark(a, op, false);
    }
    int64_t now = dlock__now_ms();
    struct dlock__timer *t;
    while ((t = dlock__timer_heap_peek(&a->timers)) && t->due_ms <= now) {
        struct dlock__aop *op = op_of_timer(t);
        dlock__timer_heap_pop(&a->timers);
        if (op->state == AOP_PARKED)
            unpark(a, op, false);
    }
    int n = 0;
    if (!a->ready_head && !a->stopping) {
        int timeout = -1;
        a->poll_until = DLOCK__INFINITE;
        if ((t = dlock__timer_heap_peek(&a->timers))) {
            timeout = t->due_ms - now > INT_MAX ? INT_MAX : (int)(t->due_ms - now);
            a->poll_until = t->due_ms;
        }
        pthread_mutex_unlock(&a->mu);
        n = epoll_wait(a->epoll_fd, evs, (int)(sizeof evs / sizeof evs[0]), timeout);
        pthread_mutex_lock(&a->mu);
    }
    /* Only the poller takes operations out of the set, and a parked
     * operation is freed only after that: every event names a live
     * operation, parked unless an earlier event of this batch woke it. */
    for (int i = 0; i < n; i++) {
        struct dlock__aop *op = evs[i].data.ptr;
        if (!op)
            dlock__drain(a->parker_wake_fd);
        else if (op->state == AOP_PARKED && op->polled_fd >= 0 && !op->on_loop)
            unpark(a, op, true);
    }
    a->polling = false;
    polling_for = NULL;
    if (a->idle > 0)
        pthread_cond_signal(&a->work_cv); /* the next poller, while this one runs */
}

static void *worker_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__async *a = &c->async;
    int wake_fd = dlock__thread_wake_fd();
    pthread_mutex_lock(&a->mu);
    for (;;) {
        struct dlock__aop *op = pop_ready(a);
        if (op) {
            run_one(a, op, wake_fd);
            continue;
        }
        if (a->stopping)
            break;
        if (!a->polling) {
            poll_once(a);
            continue;
        }
        a->idle++;
        pthread_cond_wait(&a->work_cv, &a->mu);
        a->idle--;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void close_fds(struct dlock__async *a)
{
    if (a->epoll_fd >= 0)
        close(a->epoll_fd);
    if (a->parker_wake_fd >= 0)
        close(a->parker_wake_fd);
    a->epoll_fd = a->parker_wake_fd = -1;
}

/* The done eventfd and the loop's set around it, made once (a->mu held):
 * the descriptor dlock_client_fd() hands out never changes. */
static int make_done_fd(struct dlock__async *a)
{
    if (a->loop_fd >= 0)
        return DLOCK_OK;
    if (a->done_fd < 0)
        a->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int loop = a->done_fd < 0 ? -1 : epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    if (loop < 0 || epoll_ctl(loop, EPOLL_CTL_ADD, a->done_fd, &ev) < 0) {
        int rc = dlock_seterr(DLOCK_EINTERNAL, "cannot create the descriptor for completions: %s", strerror(errno));
        if (loop >= 0)
            close(loop);
        return rc;
    }
    a->loop_fd = loop;
    return DLOCK_OK;
}

/* Starts the threads with the first operation (a->mu held). */
static int start(dlock_client *c)
{
    struct dlock__async *a = &c->async;
    if (a->started)
        return DLOCK_OK;
    int rc = make_done_fd(a);
    if (rc != DLOCK_OK)
        return rc;
    a->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    a->parker_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    if (a->epoll_fd < 0 || a->parker_wake_fd < 0 ||
        epoll_ctl(a->epoll_fd, EPOLL_CTL_ADD, a->parker_wake_fd, &ev) < 0) {
        rc = dlock_seterr(DLOCK_EINTERNAL, "cannot set up waiting for non-blocking operations: %s",
                          strerror(errno));
        close_fds(a);
        return rc;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the application's signals are not ours */
    int err = 0;
    for (unsigned i = 0; err == 0 && i < DLOCK__ASYNC_WORKERS; i++) {
        err = pthread_create(&a->workers[i], NULL, worker_main, c);
        if (err == 0)
            a->nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    a->started = true; /* whatever started is stopped and joined at close */
    return DLOCK_OK;
}

/* ---- what the rest of the core calls ----------------------------------------------- */

/* Takes op into the engine (a->mu held): onto its entry's list, counted
 * until it is delivered; DLOCK_OK, or an error (op not taken). */
static int take_in(dlock_client *c, struct dlock__aop *op)
{
    struct dlock__async *a = &c->async;
    int rc = a->closing ? dlock_seterr(DLOCK_EINVAL, "the client is closing") : start(c);
    if (rc == DLOCK_OK && a->nworkers == 0)
        rc = dlock_seterr(DLOCK_EINTERNAL, "the threads for non-blocking operations could not be started");
    if (rc == DLOCK_OK) {
        op->park_fd = op->polled_fd = op->running_wake_fd = -1;
        op->timer.heap_index = SIZE_MAX;
        link_entry(op);
        a->undelivered++;
    }
    return rc;
}

int dlock__async_submit(dlock_client *c, struct dlock__aop *op, bool done)
{
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&a->mu);
    int rc = take_in(c, op);
    if (rc == DLOCK_OK && done)
        push_done(a, op);
    else if (rc == DLOCK_OK)
        push_ready(a, op);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int dlock__async_submit_here(dlock_client *c, struct dlock__aop *op)
{
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&a->mu);
    int rc = take_in(c, op);
    if (rc == DLOCK_OK)
        run_one(a, op, -1);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void dlock__async_entry_free(dlock_client *c, struct dlock__entry *e)
{
    if (!__atomic_load_n(&e->aops, __ATOMIC_ACQUIRE))
        return;
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&a->mu);
    /* The oldest one queued behind the hold looks (one, not a herd: if it
     * does not become the contender it passes the turn on when it ends),
     * and any that is running may be about to queue: it must not park. */
    for (struct dlock__aop *op = e->aops; op; op = op->entry_next) {
        if (op->kind != AOP_ACQUIRE)
            continue;
        if (op->state == AOP_RUNNING) {
            if (!__atomic_load_n(&op->contending, __ATOMIC_ACQUIRE))
                kick(a, op, false); /* a contender waits for the backend, not for this */
        } else if (op->state == AOP_PARKED && op->parked_local) {
            kick(a, op, false);
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
}

void dlock__async_entry_off_loop(dlock_client *c, struct dlock__entry *e)
{
    if (!__atomic_load_n(&e->aops, __ATOMIC_ACQUIRE))
        return;
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&a->mu);
    for (struct dlock__aop *op = e->aops; op; op = op->entry_next) {
        /* For good: whatever wakes it next must not queue it for the loop. */
        op->kept_off_loop = true;
        if (op->state == AOP_READY && op->in_loop_queue) {
            loop_to_worker(a, op);
        } else if (op->state == AOP_PARKED && op->on_loop && !op->in_kick_list) {
            unpark_quietly(a, op);
            park(a, op);
        }
    }
    pthread_mutex_unlock(&a->mu);
}

void dlock__async_entry_cancel(dlock_client *c, struct dlock__entry *e)
{
    if (!__atomic_load_n(&e->aops, __ATOMIC_ACQUIRE))
        return;
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&a->mu);
    for (struct dlock__aop *op = e->aops; op; op = op->entry_next)
        if (op->kind == AOP_ACQUIRE)
            kick(a, op, true);
    pthread_mutex_unlock(&a->mu);
}

/* The first operation of the done queue, taken out of the engine for
 * delivery (a->mu not held), or NULL. */
static struct dlock__aop *take_done(struct dlock__async *a)
{
    pthread_mutex_lock(&a->mu);
    struct dlock__aop *op = a->done_head;
    if (op) {
        unlink_done(a, op);
        unlink_entry(op);
        a->undelivered--;
    }
    pthread_mutex_unlock(&a->mu);
    return op;
}

/* Calls op's callback on the calling thread with its result and detail,
 * then frees it. */
static void deliver(struct dlock__aop *op)
{
    dlock_error_restore(&op->error, op->rc);
    op->done(op->lock, op->rc, op->arg);
    free(op);
}

/* An operation completed because its handle or client goes away: a grant
 * the caller never saw is reported as the cancel it was (the hold is
 * released with the handle or the client). */
static void deliver_cancelled(struct dlock__aop *op, const char *why)
{
    if (op->kind == AOP_ACQUIRE && op->rc == DLOCK_OK) {
        op->rc = dlock_seterr(DLOCK_ECANCELLED, "lock '%s': acquire cancelled: %s", dlock__entry_show(op->entry),
                              why);
        dlock_error_save(&op->error);
    }
    deliver(op);
}

void dlock__async_lock_freeing(dlock_client *c, dlock_lock *h)
{
    struct dlock__async *a = &c->async;
    struct dlock__entry *e = h->entry;
    struct dlock__aop *mine = NULL;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        bool working = false;
        for (struct dlock__aop *op = e->aops; op; op = op->entry_next) {
            if (op->lock != h || op->state == AOP_DONE)
                continue;
            working = true;
            if (!op->cancelled) {
                op->cancelled = true;
                kick(a, op, true);
            }
        }
        if (!working)
            break;
        pthread_cond_wait(&a->done_cv, &a->mu);
    }
    for (struct dlock__aop *op = e->aops, *next; op; op = next) {
        next = op->entry_next;
        if (op->lock != h)
            continue;
        unlink_done(a, op);
        unlink_entry(op);
        a->undelivered--;
        op->next = mine;
        mine = op;
    }
    pthread_mutex_unlock(&a->mu);
    /* In the order they were started (the list was built backwards). */
    struct dlock__aop *ordered = NULL;
    while (mine) {
        struct dlock__aop *op = mine;
        mine = op->next;
        op->next = ordered;
        ordered = op;
    }
    while (ordered) {
        struct dlock__aop *op = ordered;
        ordered = op->next;
        deliver_cancelled(op, "its handle was freed");
    }
}

void dlock__async_shutdown(dlock_client *c)
{
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&c->entries_mu);
    pthread_mutex_lock(&a->mu);
    /* Nothing new from here on (an on_lost of the closing client may try):
     * what is cancelled below is all there will be. */
    a->closing = true;
    for (size_t i = 0; i < c->nbuckets; i++)
        for (struct dlock__entry *e = c->buckets[i]; e; e = e->next_in_bucket)
            for (struct dlock__aop *op = e->aops; op; op = op->entry_next)
                if (op->state != AOP_DONE && !op->cancelled) {
                    op->cancelled = true;
                    kick(a, op, true);
                }
    pthread_mutex_unlock(&c->entries_mu);
    /* Every cancelled operation finishes its step on a worker (a step that
     * is in a round trip finishes it first): wait until none is working. */
    for (;;) {
        size_t done = 0;
        for (struct dlock__aop *op = a->done_head; op; op = op->next)
            done++;
        if (done == a->undelivered)
            break;
        pthread_cond_wait(&a->done_cv, &a->mu);
    }
    a->stopping = true;
    pthread_cond_broadcast(&a->work_cv);
    signal_fd(a->parker_wake_fd);
    bool started = a->started;
    pthread_mutex_unlock(&a->mu);
    if (started) {
        for (unsigned i = 0; i < a->nworkers; i++)
            pthread_join(a->workers[i], NULL);
    }
    for (struct dlock__aop *op; (op = take_done(a));)
        deliver_cancelled(op, "the client was closed");
    close_fds(a);
    if (a->loop_fd >= 0)
        close(a->loop_fd);
    if (a->done_fd >= 0)
        close(a->done_fd);
    a->done_fd = a->loop_fd = -1;
    dlock__timer_heap_free(&a->timers);
}

void dlock__async_destroy(dlock_client *c)
{
    struct dlock__async *a = &c->async;
    pthread_cond_destroy(&a->work_cv);
    pthread_cond_destroy(&a->done_cv);
    pthread_mutex_destroy(&a->mu);
}

/* ---- the public calls ----------------------------------------------------------------- */

int dlock_client_fd(dlock_client *c)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->async.mu);
    rc = make_done_fd(&c->async);
    int fd = c->async.loop_fd;
    pthread_mutex_unlock(&c->async.mu);
    return rc == DLOCK_OK ? fd : rc;
}

/* The steps waiting in the loop's set whose descriptor fired, taken here,
 * on the caller's thread (a->mu held, dropped while a step runs): one
 * event per epoll_wait, under the mutex, so that every event names an
 * operation still parked there (one that left the set took its events
 * with it). At most a batch, so that answers arriving meanwhile do not
 * keep the call from returning. */
static void step_fired_on_loop(struct dlock__async *a)
{
    for (int i = 0; i < 64 && a->loop_fd >= 0; i++) {
        struct epoll_event ev;
        if (epoll_wait(a->loop_fd, &ev, 1, 0) != 1)
            return;
        struct dlock__aop *op = ev.data.ptr;
        if (!op) {
            dlock__drain(a->done_fd);
            continue;
        }
        if (op->state != AOP_PARKED || !op->on_loop)
            continue;
        /* Kicked too (a cancel, a free, a close): reading what came never
         * blocks, so it is read here rather than left for a worker, which
         * may be waiting for the very connection this answer frees. */
        take_off_kick_list(a, op);
        unpark_quietly(a, op);
        op->fired = true;
        run_one(a, op, -1);
    }
    /* More than a batch came: the descriptor stays readable for a caller
     * that watches it edge-triggered too. */
    signal_fd(a->done_fd);
}

/* The steps queued for the loop (stepped_on_loop; a->mu held, dropped
 * while a step runs), at most those queued now. */
static void step_queued_on_loop(struct dlock__async *a)
{
    size_t budget = 0;
    for (struct dlock__aop *op = a->loop_head; op; op = op->next)
        budget++;
    struct dlock__aop *op;
    while (budget-- > 0 && (op = pop_loop(a)))
        run_one(a, op, -1);
}

int dlock_client_process(dlock_client *c)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__async *a = &c->async;
    pthread_mutex_lock(&a->mu);
    if (a->done_fd >= 0)
        dlock__drain(a->done_fd);
    step_fired_on_loop(a);
    step_queued_on_loop(a);
    /* Only what is done now: callbacks that start operations which finish
     * at once must not keep this call from returning. */
    size_t budget = 0;
    for (struct dlock__aop *op = a->done_head; op; op = op->next)
        budget++;
    pthread_mutex_unlock(&a->mu);
    int delivered = 0;
    while (budget-- > 0) {
        /* One at a time: a callback may free a handle whose operations are
         * still queued here, and dlock_lock_free() then delivers them. */
        struct dlock__aop *op = take_done(a);
        if (!op)
            break;
        deliver(op);
        if (delivered < INT_MAX)
            delivered++;
    }
    pthread_mutex_lock(&a->mu);
    if (a->done_head || a->loop_head)
        signal_fd(a->done_fd); /* the rest next time round */
    pthread_mutex_unlock(&a->mu);
    return delivered;
}

int64_t dlock_client_timeout_ms(dlock_client *c)
{
    int rc = dlock__client_usable(c);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->async.mu);
    bool ready = c->async.done_head != NULL || c->async.loop_head != NULL;
    if (!ready && c->async.loop_fd >= 0) {
        /* An answer waiting in the loop's set is work for the caller too. */
        struct epoll_event ev;
        ready = epoll_wait(c->async.loop_fd, &ev, 1, 0) == 1;
    }
    pthread_mutex_unlock(&c->async.mu);
    /* The engine's own threads keep every wait's deadline and post its end
     * through the fd: a caller need only come back when results wait. */
    return ready ? 0 : -1;
}
