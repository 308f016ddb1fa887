#!/usr/bin/python3
"""Reads a scrape with prometheus_client's parser (the Python reference
implementation, Debian's python3-prometheus-client) and checks it.

Usage: check_exposition.py FILE CHECK...

Every scrape is checked for: a parse without error, each family once with
a HELP text, each sample once, and each histogram's buckets rising to a
+Inf bucket equal to its _count. Then each CHECK, one argument each:

  SAMPLE VALUE            the sample is there with that value, written as
                          an exposition line: dlock_grants_total{backend="local"} 1
  absent SAMPLE           no such sample (label set and all)
  type FAMILY TYPE        the family has that type (counter, histogram, ...);
                          a counter's family is named without _total
  labels LABEL JSON-LIST  the values LABEL takes over every sample, as a set

Exits 0 when everything holds, 1 after printing each failure, 2 when the
parser cannot be imported: a missing checker fails, it never skips.
"""
import json
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print("check_exposition: cannot import prometheus_client (%s): install Debian's "
          "python3-prometheus-client (scripts/setup.sh does) and run with /usr/bin/python3" % e,
          file=sys.stderr)
    sys.exit(2)

failures = []


def key_of(sample):
    return (sample.name, frozenset(sample.labels.items()))


def show(key):
    name, labels = key
    return "%s{%s}" % (name, ",".join('%s="%s"' % kv for kv in sorted(labels)))


def read_scrape(text):
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        if family.name in types:
            failures.append("family %s appears twice" % family.name)
        types[family.name] = family.type
        if not family.documentation:
            failures.append("family %s has no HELP text" % family.name)
        for s in family.samples:
            if key_of(s) in samples:
                failures.append("sample %s appears twice" % show(key_of(s)))
            samples[key_of(s)] = s.value
        if family.type == "histogram":
            check_histogram(family)
    return samples, types


def check_histogram(family):
    series = {}
    for s in family.samples:
        labels = dict(s.labels)
        le = labels.pop("le", None)
        one = series.setdefault(frozenset(labels.items()), {"buckets": [], "count": None})
        if s.name.endswith("_bucket"):
            one["buckets"].append((float(le), s.value))
        elif s.name.endswith("_count"):
            one["count"] = s.value
    for labels, one in series.items():
        values = [v for _, v in sorted(one["buckets"])]
        bounds = [b for b, _ in sorted(one["buckets"])]
        where = show((family.name, labels))
        if values != sorted(values):
            failures.append("%s: buckets do not rise: %s" % (where, values))
        if not bounds or bounds[-1] != float("inf") or values[-1] != one["count"]:
            failures.append("%s: no +Inf bucket equal to _count (%s)" % (where, one))


def parse_sample(line):
    """One exposition line, read by the same parser as the scrape."""
    families = list(text_string_to_metric_families(line + "\n"))
    return key_of(families[0].samples[0]), families[0].samples[0].value


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        samples, types = read_scrape(text)
    except ValueError as e:
        print("check_exposition: the parser refused the scrape: %s" % e, file=sys.stderr)
        return 1
    for check in argv[2:]:
        if check.startswith("absent "):
            key, _ = parse_sample(check[len("absent "):] + " 0")
            if key in samples:
                failures.append("%s is there (%s), should be absent" % (show(key), samples[key]))
        elif check.startswith("type "):
            _, family, want = check.split(" ")
            if types.get(family) != want:
                failures.append("family %s has type %s, not %s" % (family, types.get(family), want))
        elif check.startswith("labels "):
            _, label, values = check.split(" ", 2)
            seen = {dict(labels).get(label) for _, labels in samples} - {None}
            if seen != set(json.loads(values)):
                failures.append("label %s takes %s, not %s" % (label, sorted(seen), values))
        else:
            key, want = parse_sample(check)
            if key not in samples:
                failures.append("%s is missing" % show(key))
            elif samples[key] != want:
                failures.append("%s is %s, not %s" % (show(key), samples[key], want))
    for f in failures:
        print("check_exposition: %s" % f, file=sys.stderr)
    print("check_exposition: %d samples in %d families, %d checks, %d failures"
          % (len(samples), len(types), len(argv) - 2, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
