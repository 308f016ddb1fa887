/* tests/support/native_cases.h - failure cases of an attempt that the
 * non-blocking API sends without a thread (the provider's acquire_send),
 * played through the fault proxy by the tests of every backend that
 * sends such attempts over one connection (postgres, mysql). */
#ifndef TEST_NATIVE_CASES_H
#define TEST_NATIVE_CASES_H

#include <dlock.h>
#include <stdint.h>

struct native_target {
    /* A client through the fault proxy at port, on a pool of two (one
     * connection may carry an attempt without a thread). */
    dlock_client *(*open_at)(int port);
    /* A client straight to the server. */
    dlock_client *(*open_direct)(void);
    int server_port;
    /* How long an attempt whose answer never comes is waited for with
     * the open_at client's settings. */
    int64_t deadline_ms;
};

/* The attempt runs on the server and its answer is lost with the
 * connection: sent again on a new one, it holds once, keeps another
 * client out, and one release frees it (the next fence is greater). */
void native_case_answer_lost_holds_once(const struct native_target *t);

/* The answer never comes: the attempt ends at its deadline with
 * DLOCK_EUNAVAILABLE, and a later one goes through once the way is open. */
void native_case_no_answer_ends_at_its_deadline(const struct native_target *t);

/* Idle connections cut (a server restart, as TCP sees it): the attempt
 * sent on one finds it dead, at once or when it reads, and is made again
 * on a fresh one, as a blocking attempt is, and holds. */
void native_case_dead_idle_connection_is_sent_again(const struct native_target *t);

/* Releases sent without a thread (release_send), with the client's
 * release deadline: answer lost with the connection (sent again, the
 * hold found gone counts as released: DLOCK_OK, the name free); no answer
 * (DLOCK_EUNAVAILABLE at the deadline, the client holds nothing); a dead
 * idle connection (sent again on a fresh one). */
void native_case_release_answer_lost_is_ok(const struct native_target *t);
void native_case_release_without_an_answer_ends_at_its_deadline(const struct native_target *t);
void native_case_release_on_a_dead_idle_connection_is_sent_again(const struct native_target *t);

/* A busy answer read on the caller's loop: the waiting writer's
 * registration (the SQL backends' lease mode) is sent from the answer's
 * step on the same connection; the acquire then waits, and the release
 * hands it over. open_client opens a client on a pool of two straight to
 * the server; admin runs SQL as an administrator and returns the first
 * value; writer_sql reads the row's writer as text ("" when none) for the
 * name "native-busy". */
void native_case_busy_registers_the_writer(dlock_client *(*open_client)(void), dlock_client *(*open_direct)(void),
                                           const char *(*admin)(const char *sql), const char *writer_sql);

/* Defines the three cmocka cases above (native_attempt_whose_answer_is_lost_holds_once,
 * native_attempt_without_an_answer_ends_at_its_deadline and
 * native_attempt_on_a_dead_idle_connection_is_sent_again) for a
 * backend's test program: open_at and open_direct as in struct
 * native_target, port the server's, deadline_ms the attempt's deadline. */
#define NATIVE_CASES(open_at, open_direct, port, deadline_ms)                                                   \
    static void native_attempt_whose_answer_is_lost_holds_once(void **state)                                   \
    {                                                                                                          \
        (void)state;                                                                                           \
        const struct native_target t = { open_at, open_direct, port, deadline_ms };                            \
        native_case_answer_lost_holds_once(&t);                                                                \
    }                                                                                                          \
    static void native_attempt_without_an_answer_ends_at_its_deadline(void **state)                           \
    {                                                                                                          \
        (void)state;                                                                                           \
        const struct native_target t = { open_at, open_direct, port, deadline_ms };                            \
        native_case_no_answer_ends_at_its_deadline(&t);                                                        \
    }                                                                                                          \
    static void native_attempt_on_a_dead_idle_connection_is_sent_again(void **state)                          \
    {                                                                                                          \
        (void)state;                                                                                           \
        const struct native_target t = { open_at, open_direct, port, deadline_ms };                            \
        native_case_dead_idle_connection_is_sent_again(&t);                                                    \
    }

/* The same for the three release cases (native_release_whose_answer_is_lost_is_ok,
 * native_release_without_an_answer_ends_at_its_deadline and
 * native_release_on_a_dead_idle_connection_is_sent_again); deadline_ms is
 * the release's. */
#define NATIVE_RELEASE_CASES(open_at, open_direct, port, deadline_ms)                                           \
    static void native_release_whose_answer_is_lost_is_ok(void **state)                                        \
    {                                                                                                          \
        (void)state;                                                                                           \
        const struct native_target t = { open_at, open_direct, port, deadline_ms };                            \
        native_case_release_answer_lost_is_ok(&t);                                                             \
    }                                                                                                          \
    static void native_release_without_an_answer_ends_at_its_deadline(void **state)                           \
    {                                                                                                          \
        (void)state;                                                                                           \
        const struct native_target t = { open_at, open_direct, port, deadline_ms };                            \
        native_case_release_without_an_answer_ends_at_its_deadline(&t);                                        \
    }                                                                                                          \
    static void native_release_on_a_dead_idle_connection_is_sent_again(void **state)                          \
    {                                                                                                          \
        (void)state;                                                                                           \
        const struct native_target t = { open_at, open_direct, port, deadline_ms };                            \
        native_case_release_on_a_dead_idle_connection_is_sent_again(&t);                                       \
    }

#endif
