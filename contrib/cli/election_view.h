/* contrib/cli/election_view.h - a listed name that is an election: its
 * leader's term and value and its number of candidates, for dlock list,
 * dlock serve and its panel. */
#ifndef DLOCK_CLI_ELECTION_VIEW_H
#define DLOCK_CLI_ELECTION_VIEW_H

#include <dlock.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct entry_election {
    uint64_t term;          /* 0: the name is no election (or nobody leads) */
    char *value;            /* the leader's value (malloc()ed), value_len bytes */
    size_t value_len;
    int64_t candidates;     /* the leader and those waiting, -1 if unknown */
};

/* Reads whether e, a listed name, is an election with a leader (one
 * dlock_leader() per exclusive name that is held, on the backends that
 * hold elections): fills out (term 0 when not). Never fails: what cannot
 * be read is shown as no election. */
void entry_election_read(dlock_client *client, const dlock_list_entry *e, struct entry_election *out);
void entry_election_free(struct entry_election *el);

/* ,"election":{"term":T,"value":"...","candidates":N} (with value_hex
 * for a value that is not UTF-8), or nothing when el is NULL or no
 * election; written inside the entry's JSON object. */
void entry_election_json(FILE *f, const struct entry_election *el);

/* "    election: leader term T, value V, N candidates" under the row, or
 * nothing. */
void entry_election_line(FILE *f, const struct entry_election *el);

#endif
