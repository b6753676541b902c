#!/usr/bin/env bash
# `make test-brokers`: the tests that carry the guarantees (BROKER_TESTS), once more on each
# Apache Kafka release of BROKER_VERSIONS, each on a development broker of its own
# (.cache/dev-kafka-<version>).
#
#     BIN=.venv/bin XDIST=2 BROKER_TESTS="tests/..." BROKER_VERSIONS="3.7.2 4.1.1" \
#         bash dev/test-brokers.sh [PYTEST_ARGS...]
#
# The brokers start together. The tests not marked `serial` then run on every version at once,
# XDIST workers each: they mostly wait on the broker and the consumer group, and one version
# alone leaves the two cores about half idle. The `serial` tests measure rates, so they run
# after, one version at a time, and each broker stops once its version is done. The status is
# the first failure's; a pass that selects nothing (pytest's status 5) is none. Interrupted
# (or on any exit), it stops the tests still running and the brokers.
#
# BROKER_TESTS and BROKER_VERSIONS are split (and globbed) as the shell splits words; the
# arguments are pytest's, with the shell's quoting (make passes PYTEST_ARGS through as is).
# Needs bash 4.4 or later.
set -uo pipefail
cd "$(dirname "$0")/.."
set -m  # each background pass in a process group of its own, to stop it whole

: "${BIN:?}" "${XDIST:?}" "${BROKER_TESTS:?}" "${BROKER_VERSIONS:?}"
# shellcheck disable=SC2206  # split and globbed on purpose, as make's recipe did
tests=($BROKER_TESTS)
# shellcheck disable=SC2206
versions=($BROKER_VERSIONS)
pytest_args=("$@")
status=0

fail() {  # keep the first failure's status; 5 (nothing selected) is not one
    local s=$1
    if [ "$s" != 0 ] && [ "$s" != 5 ] && [ "$status" = 0 ]; then status=$s; fi
}
kafka() {  # kafka VERSION ARGS...: the development broker of that version
    local v=$1
    shift
    FAIRSTREAM_DEV_KAFKA_DIR="$PWD/.cache/dev-kafka-$v" FAIRSTREAM_DEV_KAFKA_VERSION="$v" \
        "$BIN/fairstream-dev" kafka "$@"
}

declare -A bootstrap pids
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for v in "${!bootstrap[@]}"; do kafka "$v" down >/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for v in "${versions[@]}"; do
    kafka "$v" fetch >/dev/null || exit 1
    bootstrap[$v]=$(kafka "$v" up) || exit 1
    echo "== Apache Kafka $v on ${bootstrap[$v]}: ${tests[*]}"
done

echo "== the tests not marked serial, on ${versions[*]} at once"
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
    unset "pids[$v]"
done

for v in "${versions[@]}"; do
    echo "== the serial tests on Apache Kafka $v"
    KAFKA_BOOTSTRAP_SERVERS=${bootstrap[$v]} "$BIN/python" -m pytest "${tests[@]}" \
        -m serial "${pytest_args[@]}"
    fail $?
    kafka "$v" down >/dev/null || true
    unset "bootstrap[$v]"
done
exit "$status"
