# One non-atomic read-sleep-write increment of the counter file $1: without
# mutual exclusion, concurrent steps overwrite each other's updates.
v=$(cat "$1")
sleep 0.002
echo $((v + 1)) > "$1"
