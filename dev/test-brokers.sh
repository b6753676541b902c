#!/usr/bin/env bash
# `make test-brokers`: the tests that carry the guarantees (BROKER_TESTS), once more on each
# Apache Kafka release of BROKER_VERSIONS, each on a development broker of its own
# (.cache/dev-kafka-<version>).
#
# The brokers start together. The tests not marked `serial` then run on every version at once,
# XDIST workers each: they mostly wait on the broker and the consumer group, and one version
# alone leaves the two cores about half idle. The `serial` tests measure rates, so they run
# after, one version at a time, with nothing beside them. The status is the first failure's;
# a pass that selects nothing (pytest's status 5) is none.
#
# Environment (the Makefile sets it): BIN, XDIST, BROKER_TESTS, BROKER_VERSIONS, PYTEST_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."

: "${BIN:?}" "${XDIST:?}" "${BROKER_TESTS:?}" "${BROKER_VERSIONS:?}"
read -r -a tests <<<"$BROKER_TESTS"
read -r -a versions <<<"$BROKER_VERSIONS"
read -r -a pytest_args <<<"${PYTEST_ARGS:-}"
status=0

fail() {  # keep the first failure's status; 5 (nothing selected) is not one
    local s=$1
    if [ "$s" != 0 ] && [ "$s" != 5 ] && [ "$status" = 0 ]; then status=$s; fi
}
dir() { echo "$PWD/.cache/dev-kafka-$1"; }
kafka() {  # kafka VERSION ARGS...: the development broker of that version
    local v=$1
    shift
    FAIRSTREAM_DEV_KAFKA_DIR="$(dir "$v")" FAIRSTREAM_DEV_KAFKA_VERSION="$v" \
        "$BIN/fairstream-dev" kafka "$@"
}

declare -A bootstrap
stop_all() {
    for v in "${!bootstrap[@]}"; do kafka "$v" down >/dev/null || true; done
}
trap stop_all EXIT

for v in "${versions[@]}"; do
    kafka "$v" fetch >/dev/null || exit 1
    bootstrap[$v]=$(kafka "$v" up) || exit 1
    echo "== Apache Kafka $v on ${bootstrap[$v]}: ${tests[*]}"
done

echo "== the tests not marked serial, on ${versions[*]} at once"
declare -A pids
for v in "${versions[@]}"; do
    (
        KAFKA_BOOTSTRAP_SERVERS=${bootstrap[$v]} "$BIN/python" -m pytest "${tests[@]}" \
            -n "$XDIST" --dist loadfile -m "not serial" "${pytest_args[@]}" 2>&1 |
            sed -u "s/^/[kafka $v] /"
        exit "${PIPESTATUS[0]}"
    ) &
    pids[$v]=$!
done
for v in "${versions[@]}"; do
    wait "${pids[$v]}"
    fail $?
done

for v in "${versions[@]}"; do
    echo "== the serial tests on Apache Kafka $v"
    KAFKA_BOOTSTRAP_SERVERS=${bootstrap[$v]} "$BIN/python" -m pytest "${tests[@]}" \
        -m serial "${pytest_args[@]}"
    fail $?
done
exit "$status"
